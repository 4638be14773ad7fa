/* rdma-core reached through dlopen for gdaki on mlx5: the verbs entry points the host half uses from
 * libibverbs, and the DEVX ones from libmlx5 (the mlx5 provider exports mlx5dv_*). Compiled against the real
 * <infiniband/verbs.h> and <infiniband/mlx5dv.h>; nothing links either library, so libdion loads where
 * rdma-core is absent. Tests load a fake that exports the same names (tests/unit/fake_mlx5.c). */
#ifndef DION_GDAKI_MLX5_SYM_H
#define DION_GDAKI_MLX5_SYM_H

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include "src/internal.h"

#define DION__MLX5_IBV_LIBNAME "libibverbs.so.1"
#define DION__MLX5_DV_LIBNAME  "libmlx5.so.1"

/* rdma-core 47 added it (mlx5_api.h); older headers lack the name, the kernel ABI value is fixed. */
#ifndef MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED
#define MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (1U << 31)
#endif

typedef struct {
    void *ibv_handle, *dv_handle;
    char ibv_path[256], dv_path[256];
    /* libibverbs */
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
    int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_ah *(*create_ah)(struct ibv_pd *, struct ibv_ah_attr *);
    int (*destroy_ah)(struct ibv_ah *);
    /* libmlx5 */
    bool (*is_supported)(struct ibv_device *);
    struct ibv_context *(*open_device)(struct ibv_device *, struct mlx5dv_context_attr *);
    int (*init_obj)(struct mlx5dv_obj *, uint64_t);
    int (*general_cmd)(struct ibv_context *, const void *, size_t, void *, size_t);
    struct mlx5dv_devx_obj *(*obj_create)(struct ibv_context *, const void *, size_t, void *, size_t);
    int (*obj_modify)(struct mlx5dv_devx_obj *, const void *, size_t, void *, size_t);
    int (*obj_destroy)(struct mlx5dv_devx_obj *);
    struct mlx5dv_devx_uar *(*alloc_uar)(struct ibv_context *, uint32_t);
    void (*free_uar)(struct mlx5dv_devx_uar *);
    struct mlx5dv_devx_umem *(*umem_reg)(struct ibv_context *, void *, size_t, uint32_t);
    int (*umem_dereg)(struct mlx5dv_devx_umem *);
    int (*query_eqn)(struct ibv_context *, uint32_t, uint32_t *);
    /* Optional: NULL when this rdma-core lacks them. */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int); /* rdma-core 34 */
    int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t,
                        size_t); /* _ibv_query_gid_ex, rdma-core 36 */
    struct mlx5dv_devx_umem *(*umem_reg_ex)(struct ibv_context *,
                                            struct mlx5dv_devx_umem_in *); /* rdma-core 38: dmabuf umem */
} dion__mlx5_sym_t;

/* Loads both libraries (NULL names: the real ones) and fills t. On failure t holds nothing to release and
 * the sentence names the library, what it lacks and the package that provides it. */
dion_status_t dion__mlx5_sym_load(const char *ibv_lib, const char *dv_lib, dion__mlx5_sym_t *t);
void dion__mlx5_sym_unload(dion__mlx5_sym_t *t);

/* ibv_query_port as verbs.h's inline wrapper does it (the provider's extended op when there is one). */
int dion__mlx5_query_port(const dion__mlx5_sym_t *t, struct ibv_context *ctx, uint8_t port,
                          struct ibv_port_attr *attr);

#endif
