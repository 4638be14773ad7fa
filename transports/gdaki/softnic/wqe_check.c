/* Reads doorbells and WQEs as a ConnectX would and checks the invariants of mlx5_gdaki.md section 7. The
 * structs and constants are rdma-core's (infiniband/mlx5dv.h) when installed: the model then reads every
 * field through a definition DION did not write. Without the header a private copy of the same layouts is
 * used, and dion-info says so. */
#include "wqe_check.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>

#if defined(DION_HAVE_MLX5DV)
#include <infiniband/mlx5dv.h>
#define DION__SNIC_MLX5DV 1
#else
/* The layouts of rdma-core's mlx5dv.h that the model reads (field names as there). */
#define DION__SNIC_MLX5DV 0
struct mlx5_wqe_ctrl_seg {
    uint32_t opmod_idx_opcode, qpn_ds;
    uint8_t signature;
    uint16_t dci_stream_channel_id;
    uint8_t fm_ce_se;
    uint32_t imm;
} __attribute__((packed));
struct mlx5_wqe_raddr_seg {
    uint64_t raddr;
    uint32_t rkey, reserved;
};
struct mlx5_wqe_data_seg {
    uint32_t byte_count, lkey;
    uint64_t addr;
};
struct mlx5_wqe_atomic_seg {
    uint64_t swap_add, compare;
};
struct mlx5_wqe_inl_data_seg {
    uint32_t byte_count;
};
enum {
    MLX5_OPCODE_NOP = 0x00,
    MLX5_OPCODE_RDMA_WRITE = 0x08,
    MLX5_OPCODE_RDMA_READ = 0x10,
    MLX5_OPCODE_ATOMIC_CS = 0x11,
    MLX5_OPCODE_ATOMIC_FA = 0x12,
    MLX5_OPCODE_ATOMIC_MASKED_CS = 0x14,
    MLX5_WQE_CTRL_CQ_UPDATE = 2 << 2,
    MLX5_WQE_CTRL_SOLICITED = 1 << 1,
    MLX5_WQE_CTRL_FENCE = 4 << 5,
    MLX5_SEND_WQE_BB = 64,
    MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR = 0x01,
    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR = 0x02,
    MLX5_CQE_SYNDROME_LOCAL_PROT_ERR = 0x04,
    MLX5_CQE_SYNDROME_WR_FLUSH_ERR = 0x05,
    MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR = 0x12,
    MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR = 0x13,
    MLX5_CQE_SYNDROME_REMOTE_OP_ERR = 0x14,
    MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR = 0x15,
    MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR = 0x16,
};
#define MLX5_INLINE_SEG   0x80000000u
#endif

_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) == 16 && sizeof(struct mlx5_wqe_raddr_seg) == 16 &&
                   sizeof(struct mlx5_wqe_data_seg) == 16 && sizeof(struct mlx5_wqe_atomic_seg) == 16,
               "mlx5 segments are 16 bytes");

/* Fence modes (fm_ce_se[7:5]) that make a WQE wait for the earlier ones: fence, strong ordering,
 * small-and-fence (rdma-core's MLX5_WQE_CTRL_FENCE). */
#define DION__SNIC_FM(x) ((x) >> 5)

int dion__snic_uses_mlx5dv(void)
{
    return DION__SNIC_MLX5DV;
}

const char *dion__snic_syndrome_name(uint8_t s)
{
    switch (s) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
        return "LOCAL_LENGTH_ERR";
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
        return "LOCAL_QP_OP_ERR";
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
        return "LOCAL_PROT_ERR";
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
        return "WR_FLUSH_ERR";
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
        return "REMOTE_INVAL_REQ_ERR";
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
        return "REMOTE_ACCESS_ERR";
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
        return "REMOTE_OP_ERR";
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
        return "TRANSPORT_RETRY_EXC_ERR";
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
        return "RNR_RETRY_EXC_ERR";
    }
    return "unknown syndrome";
}

const char *dion__snic_opcode_name(uint8_t op)
{
    switch (op) {
    case MLX5_OPCODE_NOP:
        return "NOP";
    case MLX5_OPCODE_RDMA_WRITE:
        return "RDMA_WRITE";
    case MLX5_OPCODE_RDMA_READ:
        return "RDMA_READ";
    case MLX5_OPCODE_ATOMIC_CS:
        return "ATOMIC_CS";
    case MLX5_OPCODE_ATOMIC_FA:
        return "ATOMIC_FA";
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
        return "ATOMIC_MASKED_CS";
    }
    return "unsupported opcode";
}

#define DION__SNIC_FAIL(syn, ...)                                                                            \
    do {                                                                                                     \
        snprintf(why, cap, __VA_ARGS__);                                                                     \
        return (uint8_t)(syn);                                                                               \
    } while (0)

uint8_t dion__snic_check_doorbell(uint64_t db, uint32_t dbrec, uint32_t qpn, uint32_t nwqebb, uint64_t prev,
                                  uint64_t *pi, char *why, size_t cap)
{
    struct mlx5_wqe_ctrl_seg c; /* the doorbell is the first 8 bytes of a control segment */
    memset(&c, 0, sizeof c);
    memcpy(&c, &db, 8);
    uint32_t oio = be32toh(c.opmod_idx_opcode), qd = be32toh(c.qpn_ds);
    uint16_t idx = (uint16_t)(oio >> 8);
    if ((oio & 0xffu) != 0 || (oio >> 24) != 0)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "the doorbell has opcode 0x%02x and opmod 0x%02x; a doorbell's must be 0",
                        oio & 0xffu, oio >> 24);
    if ((qd >> 8) != qpn || (qd & 0xffu) != 0)
        DION__SNIC_FAIL(
            MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            "the doorbell names QPN 0x%06x with DS %u; this QP is 0x%06x and a doorbell's DS is 0", qd >> 8,
            qd & 0xffu, qpn);
    uint16_t moved = (uint16_t)(idx - (uint16_t)prev);
    if (moved > nwqebb)
        DION__SNIC_FAIL(
            MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            "the doorbell's producer index 0x%04x is %u WQEBBs past the previous one (0x%04x): it "
            "went backwards or past a ring of %u WQEBBs",
            idx, moved, (unsigned)(uint16_t)prev, nwqebb);
    uint32_t rec = be32toh(dbrec);
    /* DION writes the record first: it may already name a later doorbell, never an earlier one */
    uint16_t ahead = (uint16_t)((uint16_t)rec - idx);
    if ((rec >> 16) != 0 || ahead > nwqebb)
        DION__SNIC_FAIL(
            MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            "the doorbell record says 0x%08x while the doorbell says 0x%04x: the record must hold "
            "the 16-bit producer index, written before the doorbell",
            rec, idx);
    *pi = prev + moved;
    return 0;
}

/* Copies the WQE's 16-byte units [from, from+n) out of the ring (a WQE may wrap to slot 0). */
static void dion__snic_copy(const uint8_t *sq, uint32_t nwqebb, uint64_t pos, uint32_t from, uint32_t n,
                            uint8_t *dst)
{
    for (uint32_t u = 0; u < n; u++) {
        uint32_t off = (from + u) * 16u;
        uint64_t slot = (pos + off / MLX5_SEND_WQE_BB) & (nwqebb - 1);
        memcpy(dst + u * 16u, sq + slot * MLX5_SEND_WQE_BB + off % MLX5_SEND_WQE_BB, 16);
    }
}

uint8_t dion__snic_parse_wqe(const uint8_t *sq, uint32_t nwqebb, uint64_t pos, uint64_t pi, uint32_t qpn,
                             dion__snic_wqe_t *w, char *why, size_t cap)
{
    uint8_t b[16 * 64]; /* the largest WQE: 16 WQEBBs */
    memset(w, 0, sizeof *w);
    dion__snic_copy(sq, nwqebb, pos, 0, 1, b);
    struct mlx5_wqe_ctrl_seg c;
    memcpy(&c, b, 16);
    uint32_t oio = be32toh(c.opmod_idx_opcode), qd = be32toh(c.qpn_ds);
    w->idx = (uint16_t)(oio >> 8);
    w->opcode = (uint8_t)oio;
    w->opmod = (uint8_t)(oio >> 24);
    w->ds = (uint8_t)qd;
    w->fm_ce_se = c.fm_ce_se;
    if (w->idx != (uint16_t)pos)
        DION__SNIC_FAIL(
            MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            "the WQE at WQEBB 0x%04x carries index 0x%04x: WQEs must be written at their own index "
            "and published in order",
            (unsigned)(uint16_t)pos, w->idx);
    if ((qd >> 8) != qpn)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, "the WQE names QPN 0x%06x; this QP is 0x%06x",
                        qd >> 8, qpn);
    if (w->ds < 1 || w->ds > 63)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, "the WQE has DS %u; it must be 1 to 63", w->ds);
    w->wqebbs = (w->ds * 16u + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    if (pos + w->wqebbs > pi)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "the WQE spans %u WQEBBs from 0x%04x, past the doorbelled producer index 0x%04x: a "
                        "doorbell named a WQE that was not whole",
                        w->wqebbs, (unsigned)(uint16_t)pos, (unsigned)(uint16_t)pi);
    if (c.signature != 0 || c.dci_stream_channel_id != 0)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "the control segment's signature and DCI stream bytes must be 0 on an RC QP without "
                        "signatures");
    if (c.fm_ce_se & 0x11u)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "fm_ce_se 0x%02x sets bits 4 or 0, which no stack uses", c.fm_ce_se);
    uint32_t ce = (c.fm_ce_se >> 2) & 3u;
    if (ce != 0 && ce != 2)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "completion mode %u: DION asks for a CQE (CQ_UPDATE, 2) or none (0)", ce);
    w->signaled = (c.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
    w->fence =
        DION__SNIC_FM(c.fm_ce_se) == 2 || DION__SNIC_FM(c.fm_ce_se) == 3 || DION__SNIC_FM(c.fm_ce_se) == 4;
    if (c.imm != 0)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "the immediate is set on opcode 0x%02x, which has none", w->opcode);
    dion__snic_copy(sq, nwqebb, pos, 1, w->ds - 1u, b + 16);

    uint32_t want_ds = 0;
    switch (w->opcode) {
    case MLX5_OPCODE_NOP:
        w->kind = DION__SNIC_NOP;
        want_ds = 1;
        break;
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_READ:
        w->kind = w->opcode == MLX5_OPCODE_RDMA_WRITE ? DION__SNIC_WRITE : DION__SNIC_READ;
        want_ds = 3;
        break;
    case MLX5_OPCODE_ATOMIC_FA:
    case MLX5_OPCODE_ATOMIC_CS:
        w->kind = w->opcode == MLX5_OPCODE_ATOMIC_FA ? DION__SNIC_FETCH_ADD : DION__SNIC_CSWAP;
        want_ds = 4;
        break;
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
        w->kind = DION__SNIC_SET;
        want_ds = 5;
        if (w->opmod != 0x09)
            DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                            "masked compare-swap with opmod 0x%02x: the model knows 8-byte operands (0x09)",
                            w->opmod);
        break;
    default:
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, "opcode 0x%02x is not one DION posts", w->opcode);
    }
    if (w->opcode != MLX5_OPCODE_ATOMIC_MASKED_CS && w->opmod != 0)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, "opcode %s with opmod 0x%02x; it takes 0",
                        dion__snic_opcode_name(w->opcode), w->opmod);
    if (w->kind == DION__SNIC_NOP) {
        if (w->ds != 1)
            DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                            "a NOP with DS %u; DION's NOP is the control "
                            "segment alone (DS 1)",
                            w->ds);
        return 0;
    }
    struct mlx5_wqe_raddr_seg r;
    memcpy(&r, b + 16, 16);
    w->raddr = be64toh(r.raddr);
    w->rkey = be32toh(r.rkey);
    if (r.reserved != 0)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "the remote address segment's reserved word is not 0");

    /* inline WRITE: header then payload, DS covering 4 + len */
    struct mlx5_wqe_inl_data_seg ih;
    memcpy(&ih, b + 32, 4);
    uint32_t bc = be32toh(ih.byte_count);
    if (w->kind == DION__SNIC_WRITE && (bc & MLX5_INLINE_SEG)) {
        w->is_inline = 1;
        w->len = bc & ~MLX5_INLINE_SEG;
        if (w->len == 0 || w->len > DION__SNIC_INLINE_MAX)
            DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
                            "an inline WRITE of %u bytes; the model's QP takes 1 to %u", w->len,
                            DION__SNIC_INLINE_MAX);
        uint32_t ds = 2u + (4u + w->len + 15u) / 16u;
        if (w->ds != ds)
            DION__SNIC_FAIL(
                MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                "an inline WRITE of %u bytes with DS %u; it needs DS %u (2 + ceil((4 + len) / 16))", w->len,
                w->ds, ds);
        memcpy(w->inl, b + 36, w->len);
        return 0;
    }
    if (w->ds != want_ds)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, "opcode %s with DS %u; its segments make DS %u",
                        dion__snic_opcode_name(w->opcode), w->ds, want_ds);
    uint32_t data_at = 32;
    if (w->kind == DION__SNIC_FETCH_ADD || w->kind == DION__SNIC_CSWAP || w->kind == DION__SNIC_SET) {
        struct mlx5_wqe_atomic_seg a;
        memcpy(&a, b + 32, 16);
        w->swap_add = be64toh(a.swap_add);
        w->compare = be64toh(a.compare);
        data_at = 48;
        if (w->kind == DION__SNIC_SET) { /* second half: swap_mask, compare_mask */
            struct mlx5_wqe_atomic_seg m;
            memcpy(&m, b + 48, 16);
            uint64_t swap_mask = be64toh(m.swap_add), compare_mask = be64toh(m.compare);
            if (swap_mask != ~(uint64_t)0 || compare_mask != 0)
                DION__SNIC_FAIL(
                    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                    "masked compare-swap with swap_mask 0x%016llx and compare_mask 0x%016llx: the "
                    "model knows DION's SET (all ones, 0)",
                    (unsigned long long)swap_mask, (unsigned long long)compare_mask);
            data_at = 64;
        }
        if (w->raddr & 7u)
            DION__SNIC_FAIL(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
                            "an atomic at remote address 0x%llx, which is not 8-byte aligned",
                            (unsigned long long)w->raddr);
    }
    struct mlx5_wqe_data_seg d;
    memcpy(&d, b + data_at, 16);
    w->len = be32toh(d.byte_count);
    w->lkey = be32toh(d.lkey);
    w->laddr = be64toh(d.addr);
    if (w->len & MLX5_INLINE_SEG)
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                        "the data segment's byte_count 0x%08x has the inline bit set", w->len);
    if (w->kind == DION__SNIC_WRITE || w->kind == DION__SNIC_READ) {
        if (w->len == 0 || w->len > (1u << 30))
            DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
                            "a %s of %u bytes; DION sends 1 byte to 1 GiB per WQE (0 bytes is undefined)",
                            dion__snic_opcode_name(w->opcode), w->len);
    } else if (w->len != 8) {
        DION__SNIC_FAIL(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
                        "an 8-byte atomic whose local buffer has %u bytes; it must have 8", w->len);
    }
    return 0;
}
