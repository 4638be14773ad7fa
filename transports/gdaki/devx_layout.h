/* DEVX command layouts (the mlx5 PRM's "_in" and "_out" mailboxes) for the commands gdaki sends: CREATE_CQ,
 * CREATE_QP, RST2INIT_QP, INIT2RTR_QP, RTR2RTS_QP. Every field gdaki sets is a row (name, bit offset,
 * bit width) of one table in devx_layout.c, in the PRM's convention: bit 0 is the most significant bit of
 * byte 0, and a field's value is stored big-endian with its most significant bit at the offset (what
 * rdma-core's DEVX_SET does). Names follow the PRM field names, with the context structure as a prefix
 * ("cqc.log_cq_size", "qpc.primary_address_path.rlid"), so a row can be compared with any copy of the
 * layout: scripts/devx_layout_check.py does that against a mlx5_ifc.h, and tests/unit/test_mlx5.c checks
 * the rows the reference (mlx5_gdaki.md 4.4, 5.3) states, that no two fields overlap and that the setter
 * puts the bits exactly there. */
#ifndef DION_TRANSPORTS_GDAKI_DEVX_LAYOUT_H
#define DION_TRANSPORTS_GDAKI_DEVX_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "dion/dion_types.h"

typedef enum {
    DION__DEVX_CREATE_CQ = 0,
    DION__DEVX_CREATE_QP,
    DION__DEVX_RST2INIT_QP,
    DION__DEVX_INIT2RTR_QP,
    DION__DEVX_RTR2RTS_QP,
    DION__DEVX_CREATE_CQ_OUT,
    DION__DEVX_CREATE_QP_OUT,
    DION__DEVX_QUERY_HCA_CAP,        /* op_mod = (cap type << 1) | current */
    DION__DEVX_QUERY_HCA_CAP_OUT,    /* op_mod's cap type 0: the general device caps */
    DION__DEVX_QUERY_ATOMIC_CAP_OUT, /* cap type 3: the atomic caps, in the same output mailbox */
    DION__DEVX_CMD_OUT,              /* status and syndrome: every command's output starts with them */
    DION__DEVX_NLAYOUTS
} dion__devx_cmd_t;

typedef struct {
    const char *name;
    uint16_t bit_off;
    uint16_t bit_width;
} dion__devx_field_t;

typedef struct {
    const char *name; /* "create_cq" */
    uint16_t opcode;  /* the command's opcode (0 for an output layout) */
    uint16_t bytes;   /* mailbox size without the trailing page list */
    const dion__devx_field_t *fields;
    uint32_t nfields;
} dion__devx_layout_t;

/* Values gdaki writes (reference 5.3). */
#define DION__DEVX_QP_ST_RC          0x0u
#define DION__DEVX_QP_PM_MIGRATED    0x3u
#define DION__DEVX_QP_ATOMIC_UP_TO_8 0x3u /* qpc.atomic_mode: atomics up to 64 bits */
#define DION__DEVX_CQE_SZ_64         0x0u
#define DION__DEVX_QP_RQ_ZERO_LEN    0x3u /* qpc.rq_type: no receive queue */
#define DION__DEVX_TS_DEFAULT        0x1u /* qpc.ts_format */
#define DION__DEVX_TS_REAL_TIME      0x2u
#define DION__DEVX_CAP_GENERAL       0x0u /* QUERY_HCA_CAP op_mod cap types */
#define DION__DEVX_CAP_ATOMIC        0x3u
#define DION__DEVX_PORT_TYPE_IB      0x0u /* capability.cmd_hca_cap.port_type */
#define DION__DEVX_PORT_TYPE_ETH     0x1u

const dion__devx_layout_t *dion__devx_layout(dion__devx_cmd_t cmd);
const dion__devx_field_t *dion__devx_field(dion__devx_cmd_t cmd, const char *name);

/* Zero a mailbox of the command's size and write its opcode. len must be at least the layout's bytes. */
dion_status_t dion__devx_init(void *buf, size_t len, dion__devx_cmd_t cmd);
/* Write / read a named field of at most 64 bits. DION_ERR_INVALID_ARG (with a sentence) for an unknown name,
 * a value wider than the field, or a buffer shorter than the field's end. */
dion_status_t dion__devx_set(void *buf, size_t len, dion__devx_cmd_t cmd, const char *name, uint64_t value);
dion_status_t dion__devx_get(const void *buf, size_t len, dion__devx_cmd_t cmd, const char *name,
                             uint64_t *value);
/* Copy n bytes into a byte-aligned field of exactly n bytes (a GID: qpc.primary_address_path.rgid_rip). */
dion_status_t dion__devx_set_bytes(void *buf, size_t len, dion__devx_cmd_t cmd, const char *name,
                                   const void *src, size_t n);

#endif
