/* device/mlx5.cuh and transports/gdaki/devx_layout.c against rdma-core's public mlx5dv.h: every WQE builder's
 * bytes (randomized fields, 16-bit index wraparound, fence and completion flags, inline data across WQEBBs
 * and the ring's end), doorbell values, CQE layout and owner bit, the syndrome decoder, the CPU path of the
 * slot reservation, and the DEVX field table (bit positions, no overlaps, the rows the reference states). The
 * reference builders below use only mlx5dv.h's structs and setters, on a linear copy of the WQE that is then
 * scattered into the ring, so they share no addressing code with DION's. */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

#include "dion/device/mlx5.cuh"
#include "dion/dion.h"
#include "src/internal.h"
#include "transports/gdaki/devx_layout.h"

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static void hexdump_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            fprintf(stderr,
                    "  first difference at byte %zu (WQEBB slot %zu + %zu): dion %02x, rdma-core %02x\n", i,
                    i / 64, i % 64, a[i], b[i]);
            return;
        }
}

/* ---- constants: DION's values are rdma-core's ---- */

static void test_constants(void)
{
    CHECK(DION__MLX5_WQEBB == MLX5_SEND_WQE_BB && DION__MLX5_WQEBB_SHIFT == MLX5_SEND_WQE_SHIFT, "WQEBB");
    CHECK(DION__MLX5_INLINE_FLAG == MLX5_INLINE_SEG && DION__MLX5_INVALID_LKEY == MLX5_INVALID_LKEY, "flags");
    CHECK(DION__MLX5_OP_NOP == MLX5_OPCODE_NOP && DION__MLX5_OP_RDMA_WRITE == MLX5_OPCODE_RDMA_WRITE &&
              DION__MLX5_OP_RDMA_WRITE_IMM == MLX5_OPCODE_RDMA_WRITE_IMM &&
              DION__MLX5_OP_RDMA_READ == MLX5_OPCODE_RDMA_READ &&
              DION__MLX5_OP_ATOMIC_CS == MLX5_OPCODE_ATOMIC_CS &&
              DION__MLX5_OP_ATOMIC_FA == MLX5_OPCODE_ATOMIC_FA &&
              DION__MLX5_OP_ATOMIC_MASKED_CS == MLX5_OPCODE_ATOMIC_MASKED_CS &&
              DION__MLX5_OP_ATOMIC_MASKED_FA == MLX5_OPCODE_ATOMIC_MASKED_FA,
          "opcodes");
    CHECK(DION__MLX5_CTRL_CQ_UPDATE == MLX5_WQE_CTRL_CQ_UPDATE &&
              DION__MLX5_CTRL_SOLICITED == MLX5_WQE_CTRL_SOLICITED &&
              DION__MLX5_CTRL_FM_SMALL_AND_FENC == MLX5_WQE_CTRL_FENCE &&
              DION__MLX5_CTRL_FM_SMALL_INITIATR == MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE,
          "fm_ce_se flags");
    CHECK(DION__MLX5_CQE_REQ == MLX5_CQE_REQ && DION__MLX5_CQE_REQ_ERR == MLX5_CQE_REQ_ERR &&
              DION__MLX5_CQE_RESP_ERR == MLX5_CQE_RESP_ERR && DION__MLX5_CQE_INVALID == MLX5_CQE_INVALID,
          "CQE opcodes");
    CHECK(sizeof(struct mlx5_wqe_ctrl_seg) == 16 && sizeof(struct mlx5_wqe_raddr_seg) == 16 &&
              sizeof(struct mlx5_wqe_data_seg) == 16 && sizeof(struct mlx5_wqe_atomic_seg) == 16,
          "segment sizes");
    /* the CQE views: every field rdma-core names sits where DION reads it */
#define SAME(a, b, f) (offsetof(a, f) == offsetof(b, f) && sizeof(((a *)0)->f) == sizeof(((b *)0)->f))
    CHECK(sizeof(struct mlx5_cqe64) == sizeof(dion__mlx5_cqe64_t), "CQE size");
    CHECK(SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, srqn_uidx) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, imm_inval_pkey) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, app) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, app_op) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, app_info) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, byte_cnt) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, timestamp) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, sop_drop_qpn) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, wqe_counter) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, signature) &&
              SAME(struct mlx5_cqe64, dion__mlx5_cqe64_t, op_own),
          "mlx5_cqe64 fields");
    CHECK(sizeof(struct mlx5_err_cqe) == sizeof(dion__mlx5_err_cqe_t) &&
              SAME(struct mlx5_err_cqe, dion__mlx5_err_cqe_t, srqn) &&
              SAME(struct mlx5_err_cqe, dion__mlx5_err_cqe_t, vendor_err_synd) &&
              SAME(struct mlx5_err_cqe, dion__mlx5_err_cqe_t, syndrome) &&
              SAME(struct mlx5_err_cqe, dion__mlx5_err_cqe_t, s_wqe_opcode_qpn) &&
              SAME(struct mlx5_err_cqe, dion__mlx5_err_cqe_t, wqe_counter) &&
              SAME(struct mlx5_err_cqe, dion__mlx5_err_cqe_t, signature) &&
              SAME(struct mlx5_err_cqe, dion__mlx5_err_cqe_t, op_own),
          "mlx5_err_cqe fields");
#undef SAME
}

/* ---- single segments ---- */

static const uint8_t fence_modes[] = {0, DION__MLX5_CTRL_FM_SMALL_INITIATR, DION__MLX5_CTRL_FM_FENCE,
                                      DION__MLX5_CTRL_FM_STRONG_ORDER, DION__MLX5_CTRL_FM_SMALL_AND_FENC};

static uint8_t random_fm_ce_se(void)
{
    return (uint8_t)(fence_modes[rnd() % 5] | (rnd() & 1 ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                     (rnd() & 1 ? MLX5_WQE_CTRL_SOLICITED : 0));
}

static void test_segments(void)
{
    for (int it = 0; it < 20000; it++) {
        uint8_t a[16] __attribute__((aligned(16))), b[16] __attribute__((aligned(16)));
        uint16_t idx = it < 3 ? (uint16_t)(0xfffe + it) : (uint16_t)rnd(); /* 0xfffe, 0xffff, 0 (wrapped) */
        uint8_t op = (uint8_t)rnd(), opmod = (uint8_t)rnd(), fm = random_fm_ce_se(),
                ds = (uint8_t)(rnd() % 64);
        uint32_t qpn = (uint32_t)rnd() & 0xffffff, imm = (uint32_t)rnd();
        memset(b, 0, sizeof b); /* mlx5dv_set_ctrl_seg leaves the DCI stream bytes alone; DION writes 0 */
        memset(a, 0xa5, sizeof a);
        mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)b, idx, op, opmod, qpn, fm, ds, 0, imm);
        dion__mlx5_set_ctrl_seg(a, idx, op, opmod, qpn, fm, ds, imm);
        CHECK(memcmp(a, b, 16) == 0, "ctrl idx %#x op %#x opmod %#x qpn %#x fm %#x ds %u", idx, op, opmod,
              qpn, fm, ds);

        uint32_t len = (uint32_t)rnd() & 0x7fffffff, key = (uint32_t)rnd();
        uint64_t addr = rnd(), v2 = rnd();
        mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)b, len, key, (uintptr_t)addr);
        dion__mlx5_set_data_seg(a, len, key, addr);
        CHECK(memcmp(a, b, 16) == 0, "data len %u lkey %#x addr %#llx", len, key, (unsigned long long)addr);

        struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)b;
        r->raddr = htobe64(addr), r->rkey = htobe32(key), r->reserved = 0;
        dion__mlx5_set_raddr_seg(a, addr, key);
        CHECK(memcmp(a, b, 16) == 0, "raddr %#llx rkey %#x", (unsigned long long)addr, key);

        struct mlx5_wqe_atomic_seg *at = (struct mlx5_wqe_atomic_seg *)b;
        at->swap_add = htobe64(addr), at->compare = htobe64(v2);
        dion__mlx5_set_atomic_seg(a, addr, v2);
        CHECK(memcmp(a, b, 16) == 0, "atomic");
    }
    /* the worked example of the reference (section 1): RC WRITE, QPN 0x1234, idx 5, DS 3, signaled */
    static const uint8_t golden[16] = {0, 0, 5, 8, 0, 0x12, 0x34, 3, 0, 0, 0, 8, 0, 0, 0, 0};
    uint8_t a[16] __attribute__((aligned(16)));
    dion__mlx5_set_ctrl_seg(a, 5, DION__MLX5_OP_RDMA_WRITE, 0, 0x1234, DION__MLX5_CTRL_CQ_UPDATE, 3, 0);
    CHECK(memcmp(a, golden, 16) == 0, "worked example of reference section 1");
    /* byte swaps */
    CHECK(dion__be16(0x1234) == htobe16(0x1234) && dion__be32(0x12345678u) == htobe32(0x12345678u) &&
              dion__be64(0x0102030405060708ull) == htobe64(0x0102030405060708ull),
          "byte swaps");
}

/* ---- whole WQEs in a ring ---- */

enum { K_WRITE, K_READ, K_INLINE, K_ADD, K_SET, K_NOP, K_KINDS };
static const char *kind_names[] = {"write", "read", "inline", "fetch_add", "set", "nop"};

typedef struct {
    int kind;
    uint8_t fm;
    uint64_t raddr, laddr, value;
    uint32_t rkey, lkey, len;
    uint8_t data[256];
} op_t;

static void random_op(op_t *o, int kind, uint32_t max_inline)
{
    o->kind = kind;
    o->fm = random_fm_ce_se();
    o->raddr = rnd(), o->laddr = rnd(), o->value = rnd();
    o->rkey = (uint32_t)rnd(), o->lkey = (uint32_t)rnd();
    o->len = kind == K_INLINE ? 1 + (uint32_t)(rnd() % max_inline) : (uint32_t)(rnd() % (1u << 30));
    for (size_t i = 0; i < sizeof o->data; i++) o->data[i] = (uint8_t)rnd();
}

/* rdma-core's view: DS of each WQE, then the bytes built with mlx5dv.h on a linear copy of the WQEBBs. */
static uint32_t ref_ds(const op_t *o)
{
    switch (o->kind) {
    case K_WRITE:
    case K_READ:
        return 3;
    case K_INLINE:
        return 2 + (uint32_t)((sizeof(struct mlx5_wqe_inl_data_seg) + o->len + 15) / 16);
    case K_ADD:
        return 4;
    case K_SET:
        return 5;
    default:
        return 1;
    }
}

static uint32_t ref_post(uint8_t *ring, uint32_t nbb, uint16_t idx, uint32_t qpn, const op_t *o)
{
    uint32_t ds = ref_ds(o), wqebbs = (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    uint8_t lin[16 * 64] __attribute__((aligned(64)));
    for (uint32_t i = 0; i < wqebbs; i++) memcpy(lin + i * 64, ring + ((idx + i) % nbb) * 64, 64);
    static const uint8_t opcodes[] = {MLX5_OPCODE_RDMA_WRITE,       MLX5_OPCODE_RDMA_READ,
                                      MLX5_OPCODE_RDMA_WRITE,       MLX5_OPCODE_ATOMIC_FA,
                                      MLX5_OPCODE_ATOMIC_MASKED_CS, MLX5_OPCODE_NOP};
    uint8_t opmod = o->kind == K_SET ? 0x09 : 0; /* 8-byte extended atomic (reference section 2) */
    struct mlx5_wqe_ctrl_seg *c = (struct mlx5_wqe_ctrl_seg *)lin;
    c->dci_stream_channel_id = 0;
    mlx5dv_set_ctrl_seg(c, idx, opcodes[o->kind], opmod, qpn, o->fm, (uint8_t)ds, 0, 0);
    if (o->kind != K_NOP) {
        struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)(lin + 16);
        r->raddr = htobe64(o->raddr), r->rkey = htobe32(o->rkey), r->reserved = 0;
    }
    struct mlx5_wqe_atomic_seg *a = (struct mlx5_wqe_atomic_seg *)(lin + 32);
    switch (o->kind) {
    case K_WRITE:
    case K_READ:
        mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(lin + 32), o->len, o->lkey, o->laddr);
        break;
    case K_INLINE: {
        struct mlx5_wqe_inl_data_seg *h = (struct mlx5_wqe_inl_data_seg *)(lin + 32);
        h->byte_count = htobe32(o->len | MLX5_INLINE_SEG);
        memcpy(h + 1, o->data, o->len);
        break;
    }
    case K_ADD:
        a->swap_add = htobe64(o->value), a->compare = 0;
        mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(lin + 48), 8, o->lkey, o->laddr);
        break;
    case K_SET: /* the masked CS operand is two atomic-segment-shaped halves: {swap, compare}, {masks} */
        a[0].swap_add = htobe64(o->value), a[0].compare = 0;
        a[1].swap_add = htobe64(~0ull), a[1].compare = 0;
        mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(lin + 64), 8, o->lkey, o->laddr);
        break;
    }
    for (uint32_t i = 0; i < wqebbs; i++) memcpy(ring + ((idx + i) % nbb) * 64, lin + i * 64, 64);
    return wqebbs;
}

static uint32_t dion_post(const dion__mlx5_sq_t *sq, uint16_t idx, const op_t *o)
{
    switch (o->kind) {
    case K_WRITE:
        return dion__mlx5_wqe_write(sq, idx, o->fm, o->raddr, o->rkey, o->laddr, o->lkey, o->len);
    case K_READ:
        return dion__mlx5_wqe_read(sq, idx, o->fm, o->raddr, o->rkey, o->laddr, o->lkey, o->len);
    case K_INLINE:
        return dion__mlx5_wqe_write_inline(sq, idx, o->fm, o->raddr, o->rkey, o->data, o->len);
    case K_ADD:
        return dion__mlx5_wqe_fetch_add(sq, idx, o->fm, o->raddr, o->rkey, o->value, o->laddr, o->lkey);
    case K_SET:
        return dion__mlx5_wqe_set(sq, idx, o->fm, o->raddr, o->rkey, o->value, o->laddr, o->lkey);
    default:
        return dion__mlx5_wqe_nop(sq, idx, o->fm);
    }
}

/* Post a random sequence into two identical rings of garbage, one through DION, one through rdma-core; the
 * whole rings must stay equal (which also shows DION writes nothing outside its WQE's bytes). */
static int run_ring(uint32_t nbb, uint16_t start, int nops, uint32_t max_inline, int only_kind)
{
    uint8_t *mine = aligned_alloc(64, nbb * 64), *ref = malloc(nbb * 64);
    for (uint32_t i = 0; i < nbb * 64; i++) mine[i] = ref[i] = (uint8_t)rnd();
    dion__mlx5_sq_t sq = {mine, nbb - 1, (uint32_t)rnd() & 0xffffff};
    uint16_t idx = start;
    int wrapped = 0, bad = 0;
    for (int i = 0; i < nops && !bad; i++) {
        op_t o;
        random_op(&o, only_kind >= 0 ? only_kind : (int)(rnd() % K_KINDS), max_inline);
        uint32_t want = ref_post(ref, nbb, idx, sq.qpn, &o);
        uint32_t got = dion_post(&sq, idx, &o);
        CHECK(got == want, "%s: %u WQEBBs, rdma-core's DS says %u", kind_names[o.kind], got, want);
        if (memcmp(mine, ref, nbb * 64) != 0) {
            CHECK(0, "%s (len %u, fm_ce_se %#x) at idx %#x in a ring of %u WQEBBs differs",
                  kind_names[o.kind], o.len, o.fm, idx, nbb);
            hexdump_diff(mine, ref, nbb * 64);
            bad = 1;
        }
        uint16_t next = (uint16_t)(idx + want);
        wrapped |= next < idx;
        idx = next;
    }
    free(mine);
    free(ref);
    return wrapped;
}

static void test_wqes(void)
{
    static const uint32_t sizes[] = {4, 8, 16, 64, 1024};
    for (int r = 0; r < 200; r++) {
        uint32_t nbb = sizes[r % 5];
        uint16_t start =
            r % 2 ? (uint16_t)(0xffff - rnd() % 40) : (uint16_t)rnd(); /* half cross 0xffff -> 0 */
        int wrapped = run_ring(nbb, start, 120, 200, -1);
        if (r % 2) CHECK(wrapped, "run %d from %#x never crossed the 16-bit index wrap", r, start);
    }
    for (int k = 0; k < K_KINDS; k++) run_ring(8, 0xfffa, 50, 200, k); /* every kind alone, across the wrap */

    /* Inline payload across a WQEBB boundary and the ring's end, checked byte by byte as well: a 100-byte
     * inline WRITE starting in the last slot of a 4-WQEBB ring covers slots 3, 0 and 1. */
    uint8_t ring[4 * 64] __attribute__((aligned(64)));
    memset(ring, 0xee, sizeof ring);
    dion__mlx5_sq_t sq = {ring, 3, 0x42};
    uint8_t data[100];
    for (int i = 0; i < 100; i++) data[i] = (uint8_t)(i + 1);
    uint16_t idx = 0xffff; /* slot 3, and the next WQE's index is 0x0002 after 16-bit wrap */
    uint32_t n = dion__mlx5_wqe_write_inline(&sq, idx, DION__MLX5_CTRL_CQ_UPDATE, 0x1000, 7, data, 100);
    CHECK(n == 3 && dion__mlx5_inline_ds(100) == 2 + 7, "100-byte inline: %u WQEBBs, DS %u", n,
          dion__mlx5_inline_ds(100));
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= ring[(3 * 64 + 36 + i) % sizeof ring] == data[i];
    CHECK(ok, "inline payload bytes are not at slot 3 offset 36 onwards, wrapping to slot 0");
    CHECK(ring[(3 * 64 + 36 + 100) % sizeof ring] == 0xee, "inline wrote past its payload");
    uint8_t hdr[4] = {0x80, 0, 0, 100};
    CHECK(memcmp(ring + 3 * 64 + 32, hdr, 4) == 0, "inline header");
    CHECK(ring[3 * 64 + 1] == 0xff && ring[3 * 64 + 2] == 0xff && ring[3 * 64 + 7] == 9,
          "ctrl idx 0xffff, DS 9");
    /* a 28-byte inline WRITE is exactly one WQEBB (DS 4), 29 bytes take two */
    CHECK(dion__mlx5_wqebbs(dion__mlx5_inline_ds(28)) == 1 &&
              dion__mlx5_wqebbs(dion__mlx5_inline_ds(29)) == 2 && dion__mlx5_inline_ds(12) == 3,
          "inline sizes");
}

/* ---- doorbells ---- */

static void test_doorbell(void)
{
    for (int it = 0; it < 10000; it++) {
        uint16_t pi = it == 0 ? 0xffff : it == 1 ? 0 : (uint16_t)rnd();
        uint32_t qpn = (uint32_t)rnd() & 0xffffff;
        struct mlx5_wqe_ctrl_seg c;
        memset(&c, 0, sizeof c);
        mlx5dv_set_ctrl_seg(&c, pi, MLX5_OPCODE_NOP, 0, qpn, 0, 0, 0, 0);
        uint64_t v = dion__mlx5_db_value(pi, qpn);
        CHECK(memcmp(&v, &c, 8) == 0, "doorbell pi %#x qpn %#x", pi, qpn);
        uint32_t dbr = dion__mlx5_dbr_sq_value(pi);
        CHECK(dbr == htobe32(pi & 0xffff), "doorbell record pi %#x", pi); /* rdma-core qp.c post_send_db */
    }
    static const uint8_t db[8] = {0, 0x12, 0x34, 0, 0xab, 0xcd, 0xef, 0}, dbr[4] = {0, 0, 0x12, 0x34};
    uint64_t v = dion__mlx5_db_value(0x1234, 0xabcdef);
    uint32_t r = dion__mlx5_dbr_sq_value(0x1234);
    CHECK(memcmp(&v, db, 8) == 0 && memcmp(&r, dbr, 4) == 0, "golden doorbell bytes of reference section 7");
}

/* ---- completions ---- */

/* rdma-core's ownership rule (cq.c), restated: valid opcode, and the owner bit equals the pass parity. */
static int ref_owned(const struct mlx5_cqe64 *c, uint64_t n, uint32_t ncqe)
{
    return mlx5dv_get_cqe_opcode((struct mlx5_cqe64 *)c) != MLX5_CQE_INVALID &&
           !((c->op_own & MLX5_CQE_OWNER_MASK) ^ !!(n & ncqe));
}

static void test_cqe(void)
{
    for (int it = 0; it < 10000; it++) {
        uint8_t buf[64] __attribute__((aligned(64)));
        uint16_t wc = it == 0 ? 0xffff : (uint16_t)rnd();
        uint8_t wop = (uint8_t)rnd(), owner = (uint8_t)(rnd() & 1), synd = (uint8_t)rnd(),
                vend = (uint8_t)rnd();
        uint32_t qpn = (uint32_t)rnd() & 0xffffff, bytes = (uint32_t)rnd();
        memset(buf, 0x5a, 64);
        dion__mlx5_cqe_write_req(buf, wc, wop, qpn, bytes, owner);
        struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)buf;
        CHECK(be16toh(c->wqe_counter) == wc && mlx5dv_get_cqe_opcode(c) == MLX5_CQE_REQ &&
                  mlx5dv_get_cqe_owner(c) == owner &&
                  be32toh(c->sop_drop_qpn) == ((uint32_t)wop << 24 | qpn) && be32toh(c->byte_cnt) == bytes &&
                  mlx5dv_get_cqe_format(c) == 0 && mlx5dv_get_cqe_se(c) == 0,
              "requester CQE as rdma-core reads it");
        dion__mlx5_cqe_write_err(buf, wc, wop, qpn, synd, vend, owner);
        struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)buf;
        CHECK(e->syndrome == synd && e->vendor_err_synd == vend &&
                  be32toh(e->s_wqe_opcode_qpn) == ((uint32_t)wop << 24 | qpn) &&
                  be16toh(e->wqe_counter) == wc && mlx5dv_get_cqe_opcode(c) == MLX5_CQE_REQ_ERR &&
                  mlx5dv_get_cqe_owner(c) == owner,
              "error CQE as rdma-core reads it");

        /* the other way: rdma-core's fields, DION's decoder */
        for (int i = 0; i < 64; i++) buf[i] = (uint8_t)rnd();
        uint8_t op_own = buf[63];
        dion__mlx5_cqe_info_t d = dion__mlx5_cqe_decode(buf);
        CHECK(d.wqe_counter == be16toh(c->wqe_counter) && d.opcode == mlx5dv_get_cqe_opcode(c) &&
                  d.owner == mlx5dv_get_cqe_owner(c) && d.qpn == (be32toh(c->sop_drop_qpn) & 0xffffff) &&
                  d.wqe_opcode == be32toh(c->sop_drop_qpn) >> 24 && d.byte_cnt == be32toh(c->byte_cnt) &&
                  d.syndrome == e->syndrome && d.vendor_syndrome == e->vendor_err_synd,
              "decoder");
        uint32_t raw;
        memcpy(&raw, buf + 0x3c, 4);
        dion__mlx5_cqe_tail_t t = dion__mlx5_cqe_tail(raw);
        CHECK(t.wqe_counter == be16toh(c->wqe_counter) && t.op_own == op_own,
              "one 32-bit load of 0x3c..0x3f");
    }

    /* Owner bit over several passes of CQs of 1 to 64 entries: the entry the NIC writes as CQE n is owned for
     * n and not for n + ncqe (next pass) nor n - ncqe; initial fills are never owned; and for every op_own
     * byte and counter the rule agrees with rdma-core's. */
    for (uint32_t lg = 0; lg <= 6; lg++) {
        uint32_t ncqe = 1u << lg;
        for (uint64_t n = 0; n < 5ull * ncqe; n++) {
            uint8_t buf[64] __attribute__((aligned(8))) = {0};
            uint64_t big = n + (rnd() & ~((uint64_t)ncqe * 2 - 1)); /* same parity, far along */
            dion__mlx5_cqe_write_req(buf, (uint16_t)n, 8, 1, 0, dion__mlx5_cqe_owner(n, lg));
            struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)buf;
            CHECK(dion__mlx5_cqe_sw_owned(buf[63], n, lg) && ref_owned(c, n, ncqe), "CQE %llu of %u owned",
                  (unsigned long long)n, ncqe);
            CHECK(!dion__mlx5_cqe_sw_owned(buf[63], n + ncqe, lg) && !ref_owned(c, n + ncqe, ncqe),
                  "CQE %llu of %u seen as the next pass's", (unsigned long long)n, ncqe);
            CHECK(dion__mlx5_cqe_sw_owned(buf[63], big, lg) == ref_owned(c, big, ncqe), "far counter");
            CHECK(dion__mlx5_cqe_slot(n, lg) == (n & (ncqe - 1)), "slot");
            static const uint8_t fills[] = {0xf0, 0xf1, 0xff};
            for (int f = 0; f < 3; f++)
                CHECK(!dion__mlx5_cqe_sw_owned(fills[f], n, lg), "fill %#x owned", fills[f]);
        }
        for (int v = 0; v < 256; v++) {
            uint8_t buf[64] __attribute__((aligned(8))) = {0};
            buf[63] = (uint8_t)v;
            uint64_t n = rnd();
            CHECK(dion__mlx5_cqe_sw_owned((uint8_t)v, n, lg) == ref_owned((struct mlx5_cqe64 *)buf, n, ncqe),
                  "op_own %#x n %llu log %u", v, (unsigned long long)n, lg);
        }
    }
}

static void test_syndromes(void)
{
    static const struct {
        uint8_t synd;
        dion_status_t st;
        const char *word;
    } cases[] = {
        {MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, DION_ERR_INVALID_ARG, "local length"},
        {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, DION_ERR_INTERNAL, "local QP operation"},
        {MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, DION_ERR_INVALID_ARG, "local protection"},
        {MLX5_CQE_SYNDROME_WR_FLUSH_ERR, DION_ERR_ABORTED, "flushed"},
        {MLX5_CQE_SYNDROME_MW_BIND_ERR, DION_ERR_INTERNAL, "memory window bind"},
        {MLX5_CQE_SYNDROME_BAD_RESP_ERR, DION_ERR_NETWORK, "bad response"},
        {MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR, DION_ERR_INTERNAL, "local access"},
        {MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, DION_ERR_REMOTE_ACCESS, "remote invalid request"},
        {MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, DION_ERR_REMOTE_ACCESS, "remote access"},
        {MLX5_CQE_SYNDROME_REMOTE_OP_ERR, DION_ERR_NETWORK, "remote operation"},
        {MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, DION_ERR_PEER_FAILED, "transport retry"},
        {MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, DION_ERR_NETWORK, "receiver-not-ready retry"},
        {MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR, DION_ERR_ABORTED, "remote aborted"},
    };
    const char *seen[16];
    size_t n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++) {
        const char *why = NULL;
        dion_status_t st = dion__mlx5_syndrome_status(cases[i].synd, &why);
        CHECK(st == cases[i].st && why && strstr(why, cases[i].word), "syndrome %#x -> %d '%s'",
              cases[i].synd, st, why ? why : "(null)");
        seen[i] = why;
        for (size_t j = 0; j < i; j++)
            CHECK(seen[j] != why, "syndromes %#x and %#x share a reason", cases[j].synd, cases[i].synd);
        /* and through an error CQE, as a poller meets it */
        uint8_t cqe[64] __attribute__((aligned(8)));
        dion__mlx5_cqe_write_err(cqe, 7, MLX5_OPCODE_RDMA_WRITE, 0x55, cases[i].synd, 0, 1);
        dion__mlx5_cqe_info_t d = dion__mlx5_cqe_decode(cqe);
        CHECK(d.opcode == MLX5_CQE_REQ_ERR && dion__mlx5_syndrome_status(d.syndrome, NULL) == cases[i].st,
              "syndrome %#x through a CQE", cases[i].synd);
    }
    const char *why = NULL;
    CHECK(dion__mlx5_syndrome_status(0x93, &why) == DION_ERR_NETWORK && strstr(why, "unknown"),
          "unknown syndrome");
}

/* ---- slot reservation, CPU path ---- */

static void test_reserve(void)
{
    uint64_t head = 0xfff0, expect = head;
    int wrapped = 0;
    for (int lane = 0; lane < 32; lane++) {
        uint32_t n = 1 + (uint32_t)(rnd() % 16);
        dion__mlx5_resv_t r = dion__mlx5_reserve(&head, n, DION_SCOPE_GPU);
        CHECK(r.slot == expect && r.total == n && r.last, "lane %d slot %llu, want %llu", lane,
              (unsigned long long)r.slot, (unsigned long long)expect);
        wrapped |= (uint16_t)(r.slot + n) < (uint16_t)r.slot;
        expect += n;
    }
    CHECK(head == expect && wrapped, "producer %llu, want %llu; 16-bit index wrapped: %d",
          (unsigned long long)head, (unsigned long long)expect, wrapped);
}

/* CPU mode: 64 threads (two blocks of 32) reserve and build at once into one ring; every WQE must land in its
 * own slots (the slots tile the range, each counted once) and the ring must equal rdma-core's WQEs placed at
 * the reported slots. */
typedef struct {
    dion__mlx5_sq_t sq;
    uint64_t head;
    op_t ops[64];
    uint64_t slot[64];
    uint32_t used[64];
} par_t;

static void par_thread(void *arg)
{
    par_t *p = (par_t *)arg;
    uint32_t t = dion__block_index() * 32 + dion__block_thread();
    const op_t *o = &p->ops[t];
    uint32_t n = dion__mlx5_wqebbs(o->kind == K_INLINE ? dion__mlx5_inline_ds(o->len) : ref_ds(o));
    dion__mlx5_resv_t r = dion__mlx5_reserve(&p->head, n, DION_SCOPE_GPU);
    p->slot[t] = r.slot;
    p->used[t] = dion_post(&p->sq, (uint16_t)r.slot, o);
}

static void test_parallel_cpu(void)
{
    enum { NBB = 512 };
    static par_t p;
    static uint8_t mine[NBB * 64] __attribute__((aligned(64))), ref[NBB * 64];
    for (int round = 0; round < 20; round++) {
        uint64_t start = 0xff80 + rnd() % 64, sum = 0;
        for (int i = 0; i < NBB * 64; i++) mine[i] = ref[i] = (uint8_t)rnd();
        p.sq = (dion__mlx5_sq_t){mine, NBB - 1, (uint32_t)rnd() & 0xffffff};
        p.head = start;
        for (int t = 0; t < 64; t++) {
            random_op(&p.ops[t], (int)(rnd() % K_KINDS), 200);
            sum += (ref_ds(&p.ops[t]) * 16 + 63) / 64;
        }
        CHECK(dion_cpu_launch(2, 32, par_thread, &p) == DION_SUCCESS, "dion_cpu_launch: %s",
              dion_last_error());
        CHECK(p.head == start + sum, "producer %llu, want %llu", (unsigned long long)p.head,
              (unsigned long long)(start + sum));
        uint8_t owner[256] = {0}; /* which thread + 1 owns each WQEBB of [start, start + sum) */
        for (int t = 0; t < 64; t++) {
            uint32_t want = (ref_ds(&p.ops[t]) * 16 + 63) / 64;
            CHECK(p.used[t] == want && p.slot[t] >= start && p.slot[t] + want <= start + sum,
                  "thread %d slot", t);
            for (uint32_t k = 0; k < want && p.slot[t] + k - start < sizeof owner; k++) {
                CHECK(!owner[p.slot[t] + k - start], "WQEBB %llu reserved twice",
                      (unsigned long long)(p.slot[t] + k));
                owner[p.slot[t] + k - start] = (uint8_t)(t + 1);
            }
        }
        for (int t = 0; t < 64; t++) ref_post(ref, NBB, (uint16_t)p.slot[t], p.sq.qpn, &p.ops[t]);
        if (memcmp(mine, ref, sizeof mine) != 0) {
            CHECK(0, "round %d: the ring built by 64 threads at once differs", round);
            hexdump_diff(mine, ref, sizeof mine);
        }
    }
}

/* ---- DEVX layouts ---- */

/* The largest mailbox in devx_layout.c (QUERY_HCA_CAP's output: 16 bytes and the 4096-byte capability). */
#define DEVX_MAX_BYTES (16 + 4096)

static void test_devx(void)
{
    for (int c = 0; c < DION__DEVX_NLAYOUTS; c++) {
        const dion__devx_layout_t *l = dion__devx_layout((dion__devx_cmd_t)c);
        CHECK(l && l->nfields > 0 && l->bytes > 0 && l->bytes <= DEVX_MAX_BYTES, "layout %d", c);
        if (!l || l->bytes > DEVX_MAX_BYTES) continue;
        static uint8_t used[DEVX_MAX_BYTES * 8];
        memset(used, 0, sizeof used);
        for (uint32_t i = 0; i < l->nfields; i++) {
            const dion__devx_field_t *f = &l->fields[i];
            CHECK(f->bit_width > 0 && f->bit_off + f->bit_width <= l->bytes * 8u, "%s.%s outside %u bytes",
                  l->name, f->name, l->bytes);
            /* a field never crosses a 32-bit boundary unless it is a whole number of aligned dwords (PRM
             * rule) */
            CHECK((f->bit_off / 32 == (f->bit_off + f->bit_width - 1) / 32) ||
                      (f->bit_off % 32 == 0 && f->bit_width % 32 == 0),
                  "%s.%s straddles a dword", l->name, f->name);
            for (uint32_t b = f->bit_off; b < f->bit_off + f->bit_width && b < sizeof used; b++) {
                CHECK(!used[b], "%s.%s overlaps another field at bit %#x", l->name, f->name, b);
                used[b] = 1;
            }
            CHECK(dion__devx_field((dion__devx_cmd_t)c, f->name) == f, "%s.%s named twice", l->name, f->name);

            static uint8_t buf[DEVX_MAX_BYTES];
            if (f->bit_width > 64) {
                uint8_t src[16];
                for (int k = 0; k < 16; k++) src[k] = (uint8_t)rnd();
                memset(buf, 0, sizeof buf);
                CHECK(dion__devx_set_bytes(buf, l->bytes, (dion__devx_cmd_t)c, f->name, src, 16) ==
                              DION_SUCCESS &&
                          memcmp(buf + f->bit_off / 8, src, 16) == 0,
                      "%s.%s bytes", l->name, f->name);
                continue;
            }
            /* all ones: exactly the field's bits, most significant first from bit_off */
            uint64_t ones = f->bit_width == 64 ? ~0ull : (1ull << f->bit_width) - 1;
            memset(buf, 0, sizeof buf);
            CHECK(dion__devx_set(buf, l->bytes, (dion__devx_cmd_t)c, f->name, ones) == DION_SUCCESS, "set");
            for (uint32_t b = 0; b < l->bytes * 8u; b++) {
                int bit = (buf[b / 8] >> (7 - b % 8)) & 1,
                    want = b >= f->bit_off && b < f->bit_off + f->bit_width;
                if (bit != want) {
                    CHECK(0, "%s.%s all-ones: bit %#x is %d", l->name, f->name, b, bit);
                    break;
                }
            }
            /* a random pattern, over a buffer of random bits: the field reads back, nothing else changes */
            static uint8_t before[DEVX_MAX_BYTES];
            for (int k = 0; k < DEVX_MAX_BYTES; k++) buf[k] = before[k] = (uint8_t)rnd();
            uint64_t v = rnd() & ones, got = ~v;
            CHECK(dion__devx_set(buf, l->bytes, (dion__devx_cmd_t)c, f->name, v) == DION_SUCCESS &&
                      dion__devx_get(buf, l->bytes, (dion__devx_cmd_t)c, f->name, &got) == DION_SUCCESS &&
                      got == v,
                  "%s.%s pattern %#llx read back %#llx", l->name, f->name, (unsigned long long)v,
                  (unsigned long long)got);
            for (uint32_t b = 0; b < l->bytes * 8u; b++) {
                if (b >= f->bit_off && b < f->bit_off + f->bit_width) continue;
                if (((buf[b / 8] ^ before[b / 8]) >> (7 - b % 8)) & 1) {
                    CHECK(0, "%s.%s changed bit %#x outside the field", l->name, f->name, b);
                    break;
                }
            }
            if (f->bit_width < 64)
                CHECK(dion__devx_set(buf, l->bytes, (dion__devx_cmd_t)c, f->name, ones + 1) ==
                              DION_ERR_INVALID_ARG &&
                          strstr(dion_last_error(), f->name),
                      "%s.%s accepted a value one bit too wide", l->name, f->name);
        }
    }

    /* The rows the reference states (mlx5_gdaki.md 4.4: the CQC's first dword, bit offsets from its MSB; 5.3:
     * the opcodes). The CQC starts at bit 0x80 of CREATE_CQ. */
    static const struct {
        const char *name;
        uint16_t off, width;
    } cqc[] = {{"cqc.dbr_umem_valid", 6, 1},
               {"cqc.cqe_sz", 8, 3},
               {"cqc.cc", 11, 1},
               {"cqc.oi", 14, 1},
               {"cqc.cqe_comp_en", 17, 1}};
    for (size_t i = 0; i < sizeof cqc / sizeof cqc[0]; i++) {
        const dion__devx_field_t *f = dion__devx_field(DION__DEVX_CREATE_CQ, cqc[i].name);
        CHECK(f && f->bit_off == 0x80 + cqc[i].off && f->bit_width == cqc[i].width,
              "%s against the reference", cqc[i].name);
    }
    CHECK(dion__devx_layout(DION__DEVX_CREATE_CQ)->opcode == 0x400 &&
              dion__devx_layout(DION__DEVX_CREATE_QP)->opcode == 0x500 &&
              dion__devx_layout(DION__DEVX_RST2INIT_QP)->opcode == 0x502 &&
              dion__devx_layout(DION__DEVX_INIT2RTR_QP)->opcode == 0x503 &&
              dion__devx_layout(DION__DEVX_RTR2RTS_QP)->opcode == 0x504,
          "command opcodes of reference 5.3");

    /* Golden dwords, worked by hand from the PRM bit numbering (bit 0 = MSB of byte 0). */
    uint8_t b[272];
    CHECK(dion__devx_init(b, sizeof b, DION__DEVX_CREATE_CQ) == DION_SUCCESS, "init");
    dion__devx_set(b, sizeof b, DION__DEVX_CREATE_CQ, "cqc.dbr_umem_valid", 1);
    dion__devx_set(b, sizeof b, DION__DEVX_CREATE_CQ, "cqc.cc", 1);
    dion__devx_set(b, sizeof b, DION__DEVX_CREATE_CQ, "cqc.oi", 1);
    dion__devx_set(b, sizeof b, DION__DEVX_CREATE_CQ, "cqc.log_cq_size", 7);
    dion__devx_set(b, sizeof b, DION__DEVX_CREATE_CQ, "cqc.uar_page", 0x12345);
    dion__devx_set(b, sizeof b, DION__DEVX_CREATE_CQ, "cq_umem_offset", 0x0102030405060708ull);
    static const uint8_t op[4] = {0x04, 0, 0, 0}, cqc0[4] = {0x02, 0x12, 0, 0},
                         cqc3[4] = {0x07, 0x01, 0x23, 0x45}, off[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(memcmp(b, op, 4) == 0 && memcmp(b + 16, cqc0, 4) == 0 && memcmp(b + 28, cqc3, 4) == 0 &&
              memcmp(b + 0x50, off, 8) == 0,
          "CREATE_CQ golden dwords");
    CHECK(dion__devx_init(b, sizeof b, DION__DEVX_RST2INIT_QP) == DION_SUCCESS, "init");
    dion__devx_set(b, sizeof b, DION__DEVX_RST2INIT_QP, "qpn", 0xabcdef);
    dion__devx_set(b, sizeof b, DION__DEVX_RST2INIT_QP, "qpc.atomic_mode", DION__DEVX_QP_ATOMIC_UP_TO_8);
    dion__devx_set(b, sizeof b, DION__DEVX_RST2INIT_QP, "qpc.rre", 1);
    dion__devx_set(b, sizeof b, DION__DEVX_RST2INIT_QP, "qpc.rwe", 1);
    dion__devx_set(b, sizeof b, DION__DEVX_RST2INIT_QP, "qpc.rae", 1);
    static const uint8_t r0[4] = {0x05, 0x02, 0, 0}, qpn[4] = {0, 0xab, 0xcd, 0xef},
                         acc[4] = {0, 0x03, 0xe0, 0};
    CHECK(memcmp(b, r0, 4) == 0 && memcmp(b + 8, qpn, 4) == 0 && memcmp(b + 0xa8, acc, 4) == 0,
          "RST2INIT golden dwords");
    /* refusals */
    CHECK(dion__devx_set(b, sizeof b, DION__DEVX_RST2INIT_QP, "qpc.no_such", 1) == DION_ERR_INVALID_ARG &&
              strstr(dion_last_error(), "qpc.no_such"),
          "unknown field accepted");
    CHECK(dion__devx_set(b, 8, DION__DEVX_RST2INIT_QP, "qpn", 1) == DION_ERR_INVALID_ARG,
          "short buffer accepted");
    CHECK(dion__devx_init(b, 100, DION__DEVX_CREATE_QP) == DION_ERR_INVALID_ARG, "short mailbox accepted");
}

int main(void)
{
    test_constants();
    test_segments();
    test_wqes();
    test_doorbell();
    test_cqe();
    test_syndromes();
    test_reserve();
    test_parallel_cpu();
    test_devx();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("test_mlx5: all checks passed\n");
    return failures ? 1 : 0;
}
