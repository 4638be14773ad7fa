/* The softnic model's reading of what device code wrote: doorbell values, doorbell records and WQEs, parsed
 * with rdma-core's own definitions (infiniband/mlx5dv.h) where that header is installed, so a field DION lays
 * out wrongly is caught here rather than by a NIC. Each check returns 0, or the error syndrome a NIC would
 * report (MLX5_CQE_SYNDROME_*) with a sentence naming the broken invariant (mlx5_gdaki.md section 7). */
#ifndef DION_SOFTNIC_WQE_CHECK_H
#define DION_SOFTNIC_WQE_CHECK_H

#include <stddef.h>
#include <stdint.h>

enum {
    DION__SNIC_WRITE = 0,
    DION__SNIC_READ,
    DION__SNIC_FETCH_ADD,
    DION__SNIC_CSWAP,
    DION__SNIC_SET, /* masked compare-swap that always swaps (compare_mask 0, swap_mask all ones) */
    DION__SNIC_NOP
};

#define DION__SNIC_INLINE_MAX 64u /* largest inline payload the model accepts (its QPs' max_inline) */

typedef struct {
    uint16_t idx;
    uint8_t opcode, opmod, ds, fm_ce_se;
    uint32_t wqebbs;
    int kind;     /* DION__SNIC_* */
    int signaled; /* CE asks for a CQE */
    int fence;    /* FM asks to wait for earlier WQEs */
    uint64_t raddr;
    uint32_t rkey;
    uint64_t laddr;
    uint32_t lkey;
    uint32_t len; /* WRITE / READ bytes; atomics: the local buffer's bytes */
    int is_inline;
    uint8_t inl[DION__SNIC_INLINE_MAX];
    uint64_t swap_add, compare; /* atomics, host order */
} dion__snic_wqe_t;

/* Checks an 8-byte doorbell value (db, as read from memory) and the SQ word of the doorbell record (dbrec, as
 * read) for a QP of nwqebb WQEBBs whose previous doorbell named prev (64-bit). On success *pi is the new
 * producer index, lifted to 64 bits. */
uint8_t dion__snic_check_doorbell(uint64_t db, uint32_t dbrec, uint32_t qpn, uint32_t nwqebb, uint64_t prev,
                                  uint64_t *pi, char *why, size_t cap);

/* Parses and checks the WQE that must start at WQEBB pos of an SQ of nwqebb WQEBBs, given the doorbelled
 * producer index pi (64-bit): index, QPN, DS, opcode and opmod, the segments of the opcode with the exact
 * DS, reserved bytes, flags, lengths, alignment, fitting before pi. */
uint8_t dion__snic_parse_wqe(const uint8_t *sq, uint32_t nwqebb, uint64_t pos, uint64_t pi, uint32_t qpn,
                             dion__snic_wqe_t *out, char *why, size_t cap);

/* A name for a syndrome and an opcode, for sentences. */
const char *dion__snic_syndrome_name(uint8_t syndrome);
const char *dion__snic_opcode_name(uint8_t opcode);

/* Whether the build parses with rdma-core's mlx5dv.h (1) or DION's own copy of the layouts (0). */
int dion__snic_uses_mlx5dv(void);

#endif
