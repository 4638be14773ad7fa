/* The mlx5 NIC of the gdaki backend (nic.h): a ConnectX NIC through DEVX. The backend lists it in its table
 * of NICs (gdaki.c) next to dion__gdaki_softnic. */
#ifndef DION_GDAKI_MLX5_NIC_H
#define DION_GDAKI_MLX5_NIC_H

#include "mlx5.h"
#include "nic.h"

extern const dion__gdaki_nic_ops_t dion__gdaki_mlx5;

/* For tests: open the next NICs with these libraries, GPU operations and doorbell choice (NULL: the real
 * ones again); and the objects behind the opaque nic.h handles. */
void dion__gdaki_mlx5_test_args(const dion__mlx5_open_args_t *a);
dion__mlx5_t *dion__gdaki_mlx5_dev(dion__gdaki_nic_t *n);
dion__mlx5_qp_t *dion__gdaki_mlx5_qp(dion__gdaki_qp_t *qp);

#endif
