/* mlx5 send-queue entries, doorbells and completion entries, as GPU threads (and CPU threads in CPU mode)
 * build and read them. One setter per hardware segment, then builders that assemble whole WQEs into an SQ
 * ring. Layouts, values and their sources: /work/shared/reference/mlx5_gdaki.md sections 1-4 (the names of
 * rdma-core's mlx5dv.h are given beside each one, and tests/unit/test_mlx5.c compares every byte with them).
 *
 * Conventions: every multi-byte field the NIC reads is big-endian; setters take host-order values and swap
 * inside (rdma-core's convention), except ctrl.imm, which callers pass already big-endian as rdma-core does.
 * A WQE index ("idx") is the 16-bit WQEBB counter at which a WQE starts; callers keep 64-bit counters and
 * pass the low 16 bits. Ring sizes are powers of two of at most 32768 WQEBBs, so a 16-bit counter and the
 * ring slot wrap together. Nothing here orders stores: device/gdaki.cuh fences before the doorbell. */
#ifndef DION_DEVICE_MLX5_CUH
#define DION_DEVICE_MLX5_CUH

#include "dion/device/arch.cuh"

#ifdef __cplusplus
#define DION__MLX5_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define DION__MLX5_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* ---- byte order: host to big-endian (its own inverse) ---- */

DION_HD uint32_t dion__be32(uint32_t v)
{
#if DION__GPU
    return __byte_perm(v, 0, 0x0123); /* one prmt */
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return __builtin_bswap32(v);
#endif
}

DION_HD uint16_t dion__be16(uint16_t v)
{
#if DION__GPU
    return (uint16_t)__byte_perm(v, 0, 0x3201);
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return __builtin_bswap16(v);
#endif
}

DION_HD uint64_t dion__be64(uint64_t v)
{
#if DION__GPU
    return ((uint64_t)dion__be32((uint32_t)v) << 32) | dion__be32((uint32_t)(v >> 32));
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return __builtin_bswap64(v);
#endif
}

/* ---- constants (mlx5dv.h names in comments) ---- */

#define DION__MLX5_WQEBB        64u /* MLX5_SEND_WQE_BB */
#define DION__MLX5_WQEBB_SHIFT  6u  /* MLX5_SEND_WQE_SHIFT */
#define DION__MLX5_DS           16u /* one DS unit ("octoword") of qpn_ds */
#define DION__MLX5_MAX_WQEBBS   16u /* largest WQE the NIC accepts (MLX5_SEND_WQE_MAX_WQEBBS) */
#define DION__MLX5_MAX_RING     32768u
#define DION__MLX5_INLINE_FLAG  0x80000000u /* MLX5_INLINE_SEG: bit 31 of an inline segment's byte_count */
#define DION__MLX5_INVALID_LKEY 0x100u      /* MLX5_INVALID_LKEY */
#define DION__MLX5_ATOMIC_BYTES 8u          /* the local buffer an 8-byte atomic returns the old value to */

/* opcodes of opmod_idx_opcode[7:0] (MLX5_OPCODE_*) */
#define DION__MLX5_OP_NOP              0x00u
#define DION__MLX5_OP_RDMA_WRITE       0x08u
#define DION__MLX5_OP_RDMA_WRITE_IMM   0x09u
#define DION__MLX5_OP_RDMA_READ        0x10u
#define DION__MLX5_OP_ATOMIC_CS        0x11u
#define DION__MLX5_OP_ATOMIC_FA        0x12u
#define DION__MLX5_OP_ATOMIC_MASKED_CS 0x14u
#define DION__MLX5_OP_ATOMIC_MASKED_FA 0x15u
/* opmod of the extended (masked) atomics: operand size (reference 2, "Extended (masked) atomics") */
#define DION__MLX5_OPMOD_EXT_ATOMIC_4B 0x08u
#define DION__MLX5_OPMOD_EXT_ATOMIC_8B 0x09u

/* fm_ce_se: completion mode [3:2], solicited [1], fence mode [7:5] (MLX5_WQE_CTRL_*; reference 1) */
#define DION__MLX5_CTRL_CQ_UPDATE         0x08u /* MLX5_WQE_CTRL_CQ_UPDATE: a CQE for this WQE */
#define DION__MLX5_CTRL_SOLICITED         0x02u /* MLX5_WQE_CTRL_SOLICITED */
#define DION__MLX5_CTRL_FM_SMALL_INITIATR 0x20u /* MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE */
#define DION__MLX5_CTRL_FM_FENCE          0x40u /* kernel MLX5_FENCE_MODE_FENCE (NVSHMEM's and DOCA's fence) */
#define DION__MLX5_CTRL_FM_STRONG_ORDER   0x60u /* kernel MLX5_FENCE_MODE_STRONG_ORDERING */
#define DION__MLX5_CTRL_FM_SMALL_AND_FENC                                                                    \
    0x80u /* MLX5_WQE_CTRL_FENCE: what rdma-core sets for IBV_SEND_FENCE */

/* CQE opcodes, op_own[7:4] (MLX5_CQE_*) */
#define DION__MLX5_CQE_REQ      0u
#define DION__MLX5_CQE_REQ_ERR  13u
#define DION__MLX5_CQE_RESP_ERR 14u
#define DION__MLX5_CQE_INVALID  15u

/* error syndromes (MLX5_CQE_SYNDROME_*) */
#define DION__MLX5_SYND_LOCAL_LENGTH     0x01u
#define DION__MLX5_SYND_LOCAL_QP_OP      0x02u
#define DION__MLX5_SYND_LOCAL_PROT       0x04u
#define DION__MLX5_SYND_WR_FLUSH         0x05u
#define DION__MLX5_SYND_MW_BIND          0x06u
#define DION__MLX5_SYND_BAD_RESP         0x10u
#define DION__MLX5_SYND_LOCAL_ACCESS     0x11u
#define DION__MLX5_SYND_REMOTE_INVAL_REQ 0x12u
#define DION__MLX5_SYND_REMOTE_ACCESS    0x13u
#define DION__MLX5_SYND_REMOTE_OP        0x14u
#define DION__MLX5_SYND_TRANSPORT_RETRY  0x15u
#define DION__MLX5_SYND_RNR_RETRY        0x16u
#define DION__MLX5_SYND_REMOTE_ABORTED   0x22u

/* DS counts of the WQEs built below, in 16-byte units. */
#define DION__MLX5_DS_NOP      1u /* ctrl */
#define DION__MLX5_DS_RDMA     3u /* ctrl, raddr, data (WRITE and READ) */
#define DION__MLX5_DS_ATOMIC   4u /* ctrl, raddr, atomic, data */
#define DION__MLX5_DS_MASKED64 5u /* ctrl, raddr, masked CS 8-byte (two 16-byte halves), data */

/* WQEBBs a WQE of ds DS units occupies. */
DION_HD uint32_t dion__mlx5_wqebbs(uint32_t ds)
{
    return (ds * DION__MLX5_DS + DION__MLX5_WQEBB - 1) >> 6;
}

/* DS units of an inline WRITE of len bytes: ctrl, raddr, then the 4-byte header and the payload. */
DION_HD uint32_t dion__mlx5_inline_ds(uint32_t len)
{
    return 2u + (4u + len + DION__MLX5_DS - 1) / DION__MLX5_DS;
}

/* ---- the SQ ring ---- */

typedef struct {
    uint8_t *buf;  /* nwqebb * 64 bytes, 64-byte aligned */
    uint32_t mask; /* nwqebb - 1, nwqebb a power of two <= DION__MLX5_MAX_RING */
    uint32_t qpn;  /* 24 bits */
} dion__mlx5_sq_t;

/* Address of byte `off` of the WQE that starts at WQEBB idx: a WQE that runs past the ring's end continues at
 * slot 0, and a 16-byte segment at a 16-byte offset never straddles a WQEBB. */
DION_HD uint8_t *dion__mlx5_wqe_at(const dion__mlx5_sq_t *sq, uint16_t idx, uint32_t off)
{
    return sq->buf +
           ((((uint32_t)idx + (off >> DION__MLX5_WQEBB_SHIFT)) & sq->mask) << DION__MLX5_WQEBB_SHIFT) +
           (off & (DION__MLX5_WQEBB - 1));
}

/* One 16-byte segment from four words already in memory (big-endian) order: a single vector store on the GPU.
 */
DION_HD void dion__mlx5_st16(void *dst, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3)
{
#if DION__GPU
    *(uint4 *)dst = make_uint4(w0, w1, w2, w3);
#else
    uint32_t w[4] = {w0, w1, w2, w3};
    memcpy(dst, w, sizeof w);
#endif
}

/* ---- one setter per segment ---- */

/* Control segment (struct mlx5_wqe_ctrl_seg, 16 bytes, first in every WQE): opmod_idx_opcode =
 * opmod[31:24] | idx[23:8] | opcode[7:0]; qpn_ds = qpn[31:8] | ds[7:0]; signature and the DCI stream bytes
 * 0; fm_ce_se as given; imm passed through (already big-endian). */
DION_HD void dion__mlx5_set_ctrl_seg(void *seg, uint16_t idx, uint8_t opcode, uint8_t opmod, uint32_t qpn,
                                     uint8_t fm_ce_se, uint8_t ds, uint32_t imm_be)
{
    uint8_t b2[4] = {0, 0, 0, fm_ce_se}; /* signature, dci_stream_channel_id (2), fm_ce_se */
    uint32_t w2;
    memcpy(&w2, b2, 4);
    dion__mlx5_st16(seg, dion__be32(((uint32_t)opmod << 24) | ((uint32_t)idx << 8) | opcode),
                    dion__be32((qpn << 8) | ds), w2, imm_be);
}

/* Remote address segment (struct mlx5_wqe_raddr_seg): raddr BE64, rkey BE32, 4 reserved bytes written 0. */
DION_HD void dion__mlx5_set_raddr_seg(void *seg, uint64_t raddr, uint32_t rkey)
{
    dion__mlx5_st16(seg, dion__be32((uint32_t)(raddr >> 32)), dion__be32((uint32_t)raddr), dion__be32(rkey),
                    0);
}

/* Data pointer segment (struct mlx5_wqe_data_seg): byte_count BE32, lkey BE32, addr BE64. byte_count's bit 31
 * is the inline flag, so len must stay below 2^31 (gdaki splits transfers well below that). */
DION_HD void dion__mlx5_set_data_seg(void *seg, uint32_t len, uint32_t lkey, uint64_t addr)
{
    dion__mlx5_st16(seg, dion__be32(len), dion__be32(lkey), dion__be32((uint32_t)(addr >> 32)),
                    dion__be32((uint32_t)addr));
}

/* Atomic segment (struct mlx5_wqe_atomic_seg): swap_add BE64 (FA: the addend; CS: the swap value), compare
 * BE64 (CS only). */
DION_HD void dion__mlx5_set_atomic_seg(void *seg, uint64_t swap_add, uint64_t compare)
{
    dion__mlx5_st16(seg, dion__be32((uint32_t)(swap_add >> 32)), dion__be32((uint32_t)swap_add),
                    dion__be32((uint32_t)(compare >> 32)), dion__be32((uint32_t)compare));
}

/* 8-byte masked compare-swap (opcode ATOMIC_MASKED_CS, opmod EXT_ATOMIC_8B): 32 bytes, as two 16-byte halves
 * that may sit in different WQEBBs: {swap, compare} then {swap_mask, compare_mask}, each BE64 (rdma-core's
 * private struct mlx5_wqe_masked_atomic_seg; NVSHMEM writes the same two halves). The target word becomes
 * (old & ~swap_mask) | (swap & swap_mask) when (old & compare_mask) == (compare & compare_mask). */
DION_HD void dion__mlx5_set_masked_cs64_seg(void *lo, void *hi, uint64_t swap, uint64_t compare,
                                            uint64_t swap_mask, uint64_t compare_mask)
{
    dion__mlx5_set_atomic_seg(lo, swap, compare);
    dion__mlx5_set_atomic_seg(hi, swap_mask, compare_mask);
}

/* Inline data segment (struct mlx5_wqe_inl_data_seg + payload) at byte `off` (a multiple of 16) of the WQE at
 * idx: byte_count = BE32(len | INLINE_FLAG), then len payload bytes in memory order, not swapped, continuing
 * across WQEBBs and the ring's end. Bytes after the payload up to the DS boundary are left as they were (as
 * rdma-core leaves them). Returns the DS units the segment covers. */
DION_HD uint32_t dion__mlx5_set_inline_seg(const dion__mlx5_sq_t *sq, uint16_t idx, uint32_t off,
                                           const void *data, uint32_t len)
{
    uint32_t hdr = dion__be32(len | DION__MLX5_INLINE_FLAG);
#if DION__GPU
    *(uint32_t *)dion__mlx5_wqe_at(sq, idx, off) = hdr; /* off is a multiple of 16: one aligned store */
#else
    memcpy(dion__mlx5_wqe_at(sq, idx, off), &hdr, 4);
#endif
    const uint8_t *src = (const uint8_t *)data;
    uint32_t pos = off + 4, done = 0;
    while (done < len) { /* one WQEBB's worth at a time: within a WQEBB the ring is contiguous */
        uint32_t room = DION__MLX5_WQEBB - (pos & (DION__MLX5_WQEBB - 1));
        uint32_t n = len - done < room ? len - done : room;
        uint8_t *dst = dion__mlx5_wqe_at(sq, idx, pos);
        for (uint32_t i = 0; i < n; i++) dst[i] = src[done + i];
        done += n;
        pos += n;
    }
    return (4u + len + DION__MLX5_DS - 1) / DION__MLX5_DS;
}

/* ---- whole WQEs: each returns the WQEBBs it used (the producer counter advances by that much) ---- */

/* RDMA WRITE (put) or READ (get) of len bytes between local (laddr, lkey) and remote (raddr, rkey). */
DION_HD uint32_t dion__mlx5_wqe_rdma(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t opcode,
                                     uint8_t fm_ce_se, uint64_t raddr, uint32_t rkey, uint64_t laddr,
                                     uint32_t lkey, uint32_t len)
{
    dion__mlx5_set_ctrl_seg(dion__mlx5_wqe_at(sq, idx, 0), idx, opcode, 0, sq->qpn, fm_ce_se,
                            DION__MLX5_DS_RDMA, 0);
    dion__mlx5_set_raddr_seg(dion__mlx5_wqe_at(sq, idx, 16), raddr, rkey);
    dion__mlx5_set_data_seg(dion__mlx5_wqe_at(sq, idx, 32), len, lkey, laddr);
    return 1;
}

DION_HD uint32_t dion__mlx5_wqe_write(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm_ce_se,
                                      uint64_t raddr, uint32_t rkey, uint64_t laddr, uint32_t lkey,
                                      uint32_t len)
{
    return dion__mlx5_wqe_rdma(sq, idx, DION__MLX5_OP_RDMA_WRITE, fm_ce_se, raddr, rkey, laddr, lkey, len);
}

DION_HD uint32_t dion__mlx5_wqe_read(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm_ce_se,
                                     uint64_t raddr, uint32_t rkey, uint64_t laddr, uint32_t lkey,
                                     uint32_t len)
{
    return dion__mlx5_wqe_rdma(sq, idx, DION__MLX5_OP_RDMA_READ, fm_ce_se, raddr, rkey, laddr, lkey, len);
}

/* Inline RDMA WRITE (small puts): the payload travels in the WQE, no local key. len must not exceed the QP's
 * max_inline_data; up to 28 bytes the WQE is one WQEBB. */
DION_HD uint32_t dion__mlx5_wqe_write_inline(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm_ce_se,
                                             uint64_t raddr, uint32_t rkey, const void *data, uint32_t len)
{
    uint32_t ds = dion__mlx5_inline_ds(len);
    dion__mlx5_set_ctrl_seg(dion__mlx5_wqe_at(sq, idx, 0), idx, DION__MLX5_OP_RDMA_WRITE, 0, sq->qpn,
                            fm_ce_se, (uint8_t)ds, 0);
    dion__mlx5_set_raddr_seg(dion__mlx5_wqe_at(sq, idx, 16), raddr, rkey);
    dion__mlx5_set_inline_seg(sq, idx, 32, data, len);
    return dion__mlx5_wqebbs(ds);
}

/* ATOMIC fetch-add (signal ADD) of 8 bytes at raddr (8-byte aligned); the old value lands at (laddr, lkey).
 */
DION_HD uint32_t dion__mlx5_wqe_fetch_add(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm_ce_se,
                                          uint64_t raddr, uint32_t rkey, uint64_t add, uint64_t laddr,
                                          uint32_t lkey)
{
    dion__mlx5_set_ctrl_seg(dion__mlx5_wqe_at(sq, idx, 0), idx, DION__MLX5_OP_ATOMIC_FA, 0, sq->qpn, fm_ce_se,
                            DION__MLX5_DS_ATOMIC, 0);
    dion__mlx5_set_raddr_seg(dion__mlx5_wqe_at(sq, idx, 16), raddr, rkey);
    dion__mlx5_set_atomic_seg(dion__mlx5_wqe_at(sq, idx, 32), add, 0);
    dion__mlx5_set_data_seg(dion__mlx5_wqe_at(sq, idx, 48), DION__MLX5_ATOMIC_BYTES, lkey, laddr);
    return 1;
}

/* ATOMIC compare-swap of 8 bytes at raddr (8-byte aligned): the word becomes swap when it equals compare; the
 * old value lands at (laddr, lkey). */
DION_HD uint32_t dion__mlx5_wqe_compare_swap(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm_ce_se,
                                             uint64_t raddr, uint32_t rkey, uint64_t swap, uint64_t compare,
                                             uint64_t laddr, uint32_t lkey)
{
    dion__mlx5_set_ctrl_seg(dion__mlx5_wqe_at(sq, idx, 0), idx, DION__MLX5_OP_ATOMIC_CS, 0, sq->qpn, fm_ce_se,
                            DION__MLX5_DS_ATOMIC, 0);
    dion__mlx5_set_raddr_seg(dion__mlx5_wqe_at(sq, idx, 16), raddr, rkey);
    dion__mlx5_set_atomic_seg(dion__mlx5_wqe_at(sq, idx, 32), swap, compare);
    dion__mlx5_set_data_seg(dion__mlx5_wqe_at(sq, idx, 48), DION__MLX5_ATOMIC_BYTES, lkey, laddr);
    return 1;
}

/* Signal SET: an 8-byte masked compare-swap that always swaps (compare_mask 0, swap_mask all ones), as
 * NVSHMEM's IBGDA posts SIGNAL_SET (nvshmem.md 2.2; DESIGN.md "masked CS for signals"). A plain inline WRITE
 * would be cheaper, but a SET racing with another peer's ADD on the same word must go through the NIC's
 * atomic unit too, or the ADD's read-modify-write can lose it. 2 WQEBBs (DS 5): a signaled SET that ends a
 * batch on a collapsed CQ needs the NOP that follows (reference 4.5a). */
DION_HD uint32_t dion__mlx5_wqe_set(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm_ce_se, uint64_t raddr,
                                    uint32_t rkey, uint64_t value, uint64_t laddr, uint32_t lkey)
{
    dion__mlx5_set_ctrl_seg(dion__mlx5_wqe_at(sq, idx, 0), idx, DION__MLX5_OP_ATOMIC_MASKED_CS,
                            DION__MLX5_OPMOD_EXT_ATOMIC_8B, sq->qpn, fm_ce_se, DION__MLX5_DS_MASKED64, 0);
    dion__mlx5_set_raddr_seg(dion__mlx5_wqe_at(sq, idx, 16), raddr, rkey);
    dion__mlx5_set_masked_cs64_seg(dion__mlx5_wqe_at(sq, idx, 32), dion__mlx5_wqe_at(sq, idx, 48), value, 0,
                                   ~(uint64_t)0, 0);
    dion__mlx5_set_data_seg(dion__mlx5_wqe_at(sq, idx, 64), DION__MLX5_ATOMIC_BYTES, lkey, laddr);
    return dion__mlx5_wqebbs(DION__MLX5_DS_MASKED64);
}

/* NOP: a control segment alone (DS 1, as DOCA posts it); with CQ_UPDATE it makes a CQE that closes a batch.
 */
DION_HD uint32_t dion__mlx5_wqe_nop(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm_ce_se)
{
    dion__mlx5_set_ctrl_seg(dion__mlx5_wqe_at(sq, idx, 0), idx, DION__MLX5_OP_NOP, 0, sq->qpn, fm_ce_se,
                            DION__MLX5_DS_NOP, 0);
    return 1;
}

/* ---- doorbells (reference 3.1, 3.2) ---- */

/* The SQ word of the QP doorbell record (dbrec[MLX5_SND_DBR], byte offset 4): BE32 of the next free WQEBB. */
DION_HD uint32_t dion__mlx5_dbr_sq_value(uint16_t pi)
{
    return dion__be32(pi);
}

/* The 8-byte UAR doorbell (no BlueFlame), as the value of one aligned 64-bit store: the first 8 bytes of a
 * control segment with opcode 0, idx = pi (the next free WQEBB) and ds 0, i.e. the bytes
 * 00 PP PP 00 | QQ QQ QQ 00 (the GPU stacks' form). */
DION_HD uint64_t dion__mlx5_db_value(uint16_t pi, uint32_t qpn)
{
    uint32_t w[2] = {dion__be32((uint32_t)pi << 8), dion__be32(qpn << 8)};
    uint64_t v;
    memcpy(&v, w, 8);
    return v;
}

/* ---- completion entries (reference 4) ---- */

/* struct mlx5_cqe64: the fields a requester reads. */
typedef struct {
    uint8_t rsvd0[32];
    uint32_t srqn_uidx;      /* 0x20 BE: [23:0] user_index */
    uint32_t imm_inval_pkey; /* 0x24 */
    uint8_t app, app_op;     /* 0x28 */
    uint16_t app_info;       /* 0x2A */
    uint32_t byte_cnt;       /* 0x2C BE */
    uint64_t timestamp;      /* 0x30 BE */
    uint32_t sop_drop_qpn;   /* 0x38 BE: [31:24] opcode of the completed WQE, [23:0] QPN */
    uint16_t wqe_counter;    /* 0x3C BE: idx of the completed (signaled) WQE */
    uint8_t signature;       /* 0x3E */
    uint8_t op_own;          /* 0x3F: [7:4] CQE opcode, [3:2] format, [1] SE, [0] owner */
} dion__mlx5_cqe64_t;

/* struct mlx5_err_cqe, with the two debug bytes NVSHMEM and DOCA name (rdma-core: reserved). */
typedef struct {
    uint8_t rsvd0[32];
    uint32_t srqn;             /* 0x20 */
    uint8_t rsvd1[16];         /* 0x24 */
    uint8_t hw_err_synd;       /* 0x34 */
    uint8_t hw_synd_type;      /* 0x35 */
    uint8_t vendor_err_synd;   /* 0x36 */
    uint8_t syndrome;          /* 0x37 */
    uint32_t s_wqe_opcode_qpn; /* 0x38 BE: [31:24] opcode of the failed WQE, [23:0] QPN */
    uint16_t wqe_counter;      /* 0x3C BE: idx of the failed WQE */
    uint8_t signature;         /* 0x3E */
    uint8_t op_own;            /* 0x3F: opcode REQ_ERR or RESP_ERR */
} dion__mlx5_err_cqe_t;

DION__MLX5_STATIC_ASSERT(sizeof(dion__mlx5_cqe64_t) == 64 && sizeof(dion__mlx5_err_cqe_t) == 64,
                         "a CQE is 64 bytes (cqe_sz 0)");
DION__MLX5_STATIC_ASSERT(offsetof(dion__mlx5_cqe64_t, wqe_counter) == 0x3C &&
                             offsetof(dion__mlx5_err_cqe_t, syndrome) == 0x37,
                         "CQE field offsets of reference section 4");

/* What a poller needs, from one 32-bit load of bytes 0x3C..0x3F (wqe_counter, signature, op_own): read at
 * once so a counter and an owner bit from different writes of the same entry are never mixed. */
typedef struct {
    uint16_t wqe_counter;
    uint8_t op_own;
} dion__mlx5_cqe_tail_t;

DION_HD dion__mlx5_cqe_tail_t dion__mlx5_cqe_tail(uint32_t raw)
{
    uint8_t b[4];
    memcpy(b, &raw, 4);
    dion__mlx5_cqe_tail_t t;
    t.wqe_counter = (uint16_t)(((uint32_t)b[0] << 8) | b[1]);
    t.op_own = b[3];
    return t;
}

DION_HD uint32_t dion__mlx5_cqe_opcode(uint8_t op_own)
{
    return op_own >> 4;
}

/* Owner bit the NIC writes into CQE number n (monotonic) of a CQ of 2^log_ncqe entries: it flips on every
 * pass over the ring, starting at 0. */
DION_HD uint32_t dion__mlx5_cqe_owner(uint64_t n, uint32_t log_ncqe)
{
    return (uint32_t)(n >> log_ncqe) & 1u;
}

DION_HD uint32_t dion__mlx5_cqe_slot(uint64_t n, uint32_t log_ncqe)
{
    return (uint32_t)(n & (((uint64_t)1 << log_ncqe) - 1));
}

/* Whether the entry in CQE n's slot is CQE n (software owns it): a valid opcode and this pass's owner bit.
 * Checking the opcode too makes every initial fill (0xF0, 0xF1, 0xFF) read as "not yet". */
DION_HD int dion__mlx5_cqe_sw_owned(uint8_t op_own, uint64_t n, uint32_t log_ncqe)
{
    return dion__mlx5_cqe_opcode(op_own) != DION__MLX5_CQE_INVALID &&
           (op_own & 1u) == dion__mlx5_cqe_owner(n, log_ncqe);
}

/* Write a requester completion as the NIC does (the NIC model uses this; tests read it with rdma-core's
 * struct). Fields not named are zero. */
DION_HD void dion__mlx5_cqe_write_req(void *cqe, uint16_t wqe_counter, uint8_t wqe_opcode, uint32_t qpn,
                                      uint32_t byte_cnt, uint32_t owner)
{
    dion__mlx5_cqe64_t c;
    memset(&c, 0, sizeof c);
    c.byte_cnt = dion__be32(byte_cnt);
    c.sop_drop_qpn = dion__be32(((uint32_t)wqe_opcode << 24) | (qpn & 0xffffffu));
    c.wqe_counter = dion__be16(wqe_counter);
    c.op_own = (uint8_t)((DION__MLX5_CQE_REQ << 4) | (owner & 1u));
    memcpy(cqe, &c, sizeof c);
}

DION_HD void dion__mlx5_cqe_write_err(void *cqe, uint16_t wqe_counter, uint8_t wqe_opcode, uint32_t qpn,
                                      uint8_t syndrome, uint8_t vendor_syndrome, uint32_t owner)
{
    dion__mlx5_err_cqe_t c;
    memset(&c, 0, sizeof c);
    c.vendor_err_synd = vendor_syndrome;
    c.syndrome = syndrome;
    c.s_wqe_opcode_qpn = dion__be32(((uint32_t)wqe_opcode << 24) | (qpn & 0xffffffu));
    c.wqe_counter = dion__be16(wqe_counter);
    c.op_own = (uint8_t)((DION__MLX5_CQE_REQ_ERR << 4) | (owner & 1u));
    memcpy(cqe, &c, sizeof c);
}

/* A CQE in host order. The error fields are meaningful only when opcode is REQ_ERR or RESP_ERR. */
typedef struct {
    uint32_t opcode, owner;
    uint16_t wqe_counter;
    uint8_t wqe_opcode; /* opcode of the WQE that completed or failed */
    uint32_t qpn;
    uint32_t byte_cnt;
    uint8_t syndrome, vendor_syndrome;
} dion__mlx5_cqe_info_t;

DION_HD dion__mlx5_cqe_info_t dion__mlx5_cqe_decode(const void *cqe)
{
    dion__mlx5_cqe64_t c;
    dion__mlx5_err_cqe_t e; /* the same 64 bytes, read through the error view */
    memcpy(&c, cqe, sizeof c);
    memcpy(&e, cqe, sizeof e);
    dion__mlx5_cqe_info_t i;
    uint32_t oq = dion__be32(c.sop_drop_qpn); /* same word as s_wqe_opcode_qpn */
    i.opcode = dion__mlx5_cqe_opcode(c.op_own);
    i.owner = c.op_own & 1u;
    i.wqe_counter = dion__be16(c.wqe_counter);
    i.wqe_opcode = (uint8_t)(oq >> 24);
    i.qpn = oq & 0xffffffu;
    i.byte_cnt = dion__be32(c.byte_cnt);
    i.syndrome = e.syndrome;
    i.vendor_syndrome = e.vendor_err_synd;
    return i;
}

/* Error syndrome -> status, and a short reason for the error record and the host's sentence. After any of
 * these the QP is in the error state: later WQEs complete with WR_FLUSH until the host recreates it. */
DION_HD dion_status_t dion__mlx5_syndrome_status(uint8_t syndrome, const char **reason)
{
    const char *r;
    dion_status_t s;
    switch (syndrome) {
    case DION__MLX5_SYND_LOCAL_LENGTH:
        s = DION_ERR_INVALID_ARG, r = "local length error: the local buffer is shorter than the transfer";
        break;
    case DION__MLX5_SYND_LOCAL_QP_OP:
        s = DION_ERR_INTERNAL, r = "local QP operation error: the NIC rejected a malformed work request";
        break;
    case DION__MLX5_SYND_LOCAL_PROT:
        s = DION_ERR_INVALID_ARG, r = "local protection error: the local buffer is outside its registration";
        break;
    case DION__MLX5_SYND_WR_FLUSH:
        s = DION_ERR_ABORTED, r = "work request flushed: the QP had already failed on an earlier request";
        break;
    case DION__MLX5_SYND_MW_BIND:
        s = DION_ERR_INTERNAL, r = "memory window bind error";
        break;
    case DION__MLX5_SYND_BAD_RESP:
        s = DION_ERR_NETWORK, r = "bad response: the peer answered with an unexpected transport opcode";
        break;
    case DION__MLX5_SYND_LOCAL_ACCESS:
        s = DION_ERR_INTERNAL, r = "local access error: the NIC could not write the local buffer";
        break;
    case DION__MLX5_SYND_REMOTE_INVAL_REQ:
        s = DION_ERR_REMOTE_ACCESS,
        r = "remote invalid request: the target rejected the request (length, alignment or operation)";
        break;
    case DION__MLX5_SYND_REMOTE_ACCESS:
        s = DION_ERR_REMOTE_ACCESS, r = "remote access error: bad key, bounds or permission at the target";
        break;
    case DION__MLX5_SYND_REMOTE_OP:
        s = DION_ERR_NETWORK, r = "remote operation error: the target could not complete the request";
        break;
    case DION__MLX5_SYND_TRANSPORT_RETRY:
        s = DION_ERR_PEER_FAILED, r = "transport retry count exceeded: the peer stopped acknowledging";
        break;
    case DION__MLX5_SYND_RNR_RETRY:
        s = DION_ERR_NETWORK,
        r = "receiver-not-ready retry count exceeded: no receive was posted at the peer";
        break;
    case DION__MLX5_SYND_REMOTE_ABORTED:
        s = DION_ERR_ABORTED, r = "remote aborted: the target aborted the request";
        break;
    default:
        s = DION_ERR_NETWORK, r = "unknown error syndrome";
        break;
    }
    if (reason) *reason = r;
    return s;
}

/* ---- slot reservation: one atomic per warp, and the group that shares it ---- */

/* CPU mode: threads that share one reservation as the lanes of a warp do. dion__mlx5_reserve gives every
 * thread a group of its own; tests form larger groups by hand (dion__mlx5_reserve_cpu_group) so that the
 * group code of device/gdaki.cuh runs on CPU threads too. Each group operation is one round of a barrier
 * that also exchanges one word per member (vals is double-buffered by round: a member cannot start round
 * k + 2 before every member has left round k). */
typedef struct dion__cpu_group {
    uint32_t n;     /* members: ranks 0 .. n-1 (at most 32) */
    uint32_t count; /* arrivals in the current round */
    uint32_t round; /* rounds completed */
    uint32_t pad;
    uint64_t vals[2][32];
} dion__cpu_group_t;

typedef struct {
    uint64_t slot;  /* this lane's first WQEBB (64-bit producer counter); its WQE index is (uint16_t)slot */
    uint64_t base;  /* the group's first WQEBB */
    uint32_t total; /* WQEBBs the group reserved */
    uint32_t last;  /* nonzero on the lane whose WQE is the group's last (it asks for the CQE) */
    uint32_t group; /* the lanes that reserved together (GPU: lane mask; CPU mode: mask of member ranks) */
    uint32_t lane;  /* this lane (GPU: %laneid; CPU mode: rank in the group) */
    dion__cpu_group_t *cg; /* CPU mode: the group's exchange (NULL: a group of one); unused on the GPU */
} dion__mlx5_resv_t;

#if !DION__GPU
/* One round of g: every member gives v; out[k] gets member k's value. */
DION_HD void dion__cpu_group_xchg(dion__cpu_group_t *g, uint32_t rank, uint64_t v, uint64_t *out)
{
    uint32_t rd = __atomic_load_n(&g->round, __ATOMIC_ACQUIRE); /* cannot end before this member arrives */
    __atomic_store_n(&g->vals[rd & 1u][rank], v, __ATOMIC_RELAXED);
    if (__atomic_add_fetch(&g->count, 1, __ATOMIC_ACQ_REL) == g->n) {
        __atomic_store_n(&g->count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&g->round, rd + 1, __ATOMIC_RELEASE);
    } else {
        for (uint32_t polls = 0; __atomic_load_n(&g->round, __ATOMIC_ACQUIRE) == rd; polls++)
            dion__cpu_pause(polls);
    }
    for (uint32_t k = 0; k < g->n; k++) out[k] = __atomic_load_n(&g->vals[rd & 1u][k], __ATOMIC_RELAXED);
}
#endif

/* The group's operations. Every one takes the group's explicit mask: on sm_70 and later a group is together
 * only where it synchronizes, never because __activemask says so (issue 9). */

/* Whether the caller is the group's first lane (the one that waits, marks and publishes for all). */
DION_HD int dion__resv_first(const dion__mlx5_resv_t *r)
{
#if DION__GPU
    return r->lane == (uint32_t)__ffs(r->group) - 1u;
#else
    return r->lane == 0;
#endif
}

/* Nonzero when pred holds on every lane of the group. */
DION_HD int dion__resv_all(const dion__mlx5_resv_t *r, int pred)
{
#if DION__GPU
    return __all_sync(r->group, pred);
#else
    if (!r->cg) return pred;
    uint64_t v[32];
    dion__cpu_group_xchg(r->cg, r->lane, pred != 0, v);
    int all = 1;
    for (uint32_t k = 0; k < r->cg->n; k++) all &= v[k] != 0;
    return all;
#endif
}

/* The largest v over the group. */
DION_HD uint32_t dion__resv_max(const dion__mlx5_resv_t *r, uint32_t x)
{
#if DION__GPU
    return __reduce_max_sync(r->group, x);
#else
    if (!r->cg) return x;
    uint64_t v[32];
    dion__cpu_group_xchg(r->cg, r->lane, x, v);
    for (uint32_t k = 0; k < r->cg->n; k++) x = (uint32_t)v[k] > x ? (uint32_t)v[k] : x;
    return x;
#endif
}

/* The first lane's v, on every lane. */
DION_HD uint64_t dion__resv_bcast(const dion__mlx5_resv_t *r, uint64_t x)
{
#if DION__GPU
    return __shfl_sync(r->group, (unsigned long long)x, __ffs(r->group) - 1);
#else
    if (!r->cg) return x;
    uint64_t v[32];
    dion__cpu_group_xchg(r->cg, r->lane, x, v);
    return v[0];
#endif
}

/* Every lane's memory operations before, ordered before every lane's after (a barrier of the group). */
DION_HD void dion__resv_sync(const dion__mlx5_resv_t *r)
{
#if DION__GPU
    __syncwarp(r->group);
#else
    if (r->cg) {
        uint64_t v[32];
        dion__cpu_group_xchg(r->cg, r->lane, 0, v);
    }
#endif
}

/* Reserve nwqebb (1..16) WQEBBs per calling lane on the 64-bit producer counter *head. On the GPU the lanes
 * that call together (__activemask) for the same head (__match_any_sync: lanes of one warp may post to
 * different QPs at once) share one atomic: each lane's offset is the sum of the sizes of the lower lanes of
 * its group, from four ballots over the bits of nwqebb-1, and the lowest lane adds the total and broadcasts
 * the base. Lanes get WQEBBs in lane order. From here on the group is what every group operation names:
 * its lanes stay together by synchronizing, whatever the scheduler does. CPU mode: a plain atomic per
 * thread, a group of one. */
DION_HD dion__mlx5_resv_t dion__mlx5_reserve(uint64_t *head, uint32_t nwqebb, uint32_t scope)
{
    dion__mlx5_resv_t r;
#if DION__GPU
    uint32_t active = __match_any_sync(__activemask(), (unsigned long long)(uintptr_t)head), lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    uint32_t lower = active & ((1u << lane) - 1u);
    uint32_t before = __popc(lower), total = __popc(active), m1 = nwqebb - 1u;
    for (uint32_t b = 0; b < 4; b++) {
        uint32_t has = __ballot_sync(active, (m1 >> b) & 1u);
        before += (uint32_t)__popc(has & lower) << b;
        total += (uint32_t)__popc(has) << b;
    }
    uint32_t leader = __ffs(active) - 1u;
    uint64_t base = 0;
    if (lane == leader) base = dion__atom_add(head, total, scope);
    base = __shfl_sync(active, base, leader);
    r.slot = base + before;
    r.base = base;
    r.total = total;
    r.last = lane == 31u - __clz(active);
    r.group = active;
    r.lane = lane;
    r.cg = NULL;
#else
    r.slot = dion__atom_add(head, nwqebb, scope);
    r.base = r.slot;
    r.total = nwqebb;
    r.last = 1;
    r.group = 1;
    r.lane = 0;
    r.cg = NULL;
#endif
    return r;
}

#if !DION__GPU
/* CPU mode: member `rank` of g reserves nwqebb WQEBBs as one lane of a warp's group (every member calls it):
 * WQEBBs in rank order, one atomic by rank 0. */
DION_HD dion__mlx5_resv_t dion__mlx5_reserve_cpu_group(uint64_t *head, uint32_t nwqebb, uint32_t scope,
                                                       dion__cpu_group_t *g, uint32_t rank)
{
    dion__mlx5_resv_t r;
    uint64_t v[32], before = 0, total = 0;
    dion__cpu_group_xchg(g, rank, nwqebb, v);
    for (uint32_t k = 0; k < g->n; k++) {
        if (k < rank) before += v[k];
        total += v[k];
    }
    uint64_t base = rank == 0 ? dion__atom_add(head, total, scope) : 0;
    dion__cpu_group_xchg(g, rank, base, v);
    r.base = v[0];
    r.slot = r.base + before;
    r.total = (uint32_t)total;
    r.last = rank + 1 == g->n;
    r.group = g->n >= 32 ? 0xffffffffu : (1u << g->n) - 1u;
    r.lane = rank;
    r.cg = g;
    return r;
}
#endif

#endif /* DION_DEVICE_MLX5_CUH */
