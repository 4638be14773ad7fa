/* The softnic model's reader (transports/gdaki/softnic/wqe_check.c) against WQEs and doorbells that DION's
 * builders (device/mlx5.cuh) write: every WQE kind reads back field by field, also across the ring's end and
 * the 16-bit index wrap; and every invariant of mlx5_gdaki.md section 7 that a byte can break is broken once,
 * with the syndrome and the sentence checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/device/mlx5.cuh"
#include "transports/gdaki/softnic/wqe_check.h"
#include "transports/proxy/engine.h"

static int failures;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            failures++;                                                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        }                                                                                                    \
    } while (0)

#define NW  64u
#define QPN 0x00abcdu

static uint8_t ring[NW * 64];
static dion__mlx5_sq_t sq = {ring, NW - 1, QPN};

/* Parses the WQE at pos (pi: one past it) and expects success. */
static dion__snic_wqe_t parse_ok(uint64_t pos, uint64_t pi)
{
    dion__snic_wqe_t w;
    char why[256] = "";
    uint8_t syn = dion__snic_parse_wqe(ring, NW, pos, pi, QPN, &w, why, sizeof why);
    CHECK(syn == 0, "WQE at %llu rejected with 0x%02x: %s", (unsigned long long)pos, syn, why);
    return w;
}

static void parse_bad(uint64_t pos, uint64_t pi, uint8_t want, const char *words)
{
    dion__snic_wqe_t w;
    char why[256] = "";
    uint8_t syn = dion__snic_parse_wqe(ring, NW, pos, pi, QPN, &w, why, sizeof why);
    CHECK(syn == want, "expected syndrome 0x%02x (%s), got 0x%02x: %s", want, words, syn, why);
    CHECK(strstr(why, words) != NULL, "the sentence \"%s\" does not say \"%s\"", why, words);
}

static void test_kinds(void)
{
    /* start near the end of a 16-bit lap and of the ring: the SET (2 WQEBBs) wraps to slot 0 */
    uint64_t p = 0x1fffdull; /* (uint16_t) 0xfffd, slot 61 */
    memset(ring, 0xee, sizeof ring);
    uint64_t at[8];
    at[0] = p, p += dion__mlx5_wqe_write(&sq, (uint16_t)p, 0, 0x1000, 0x11, 0x2000, 0x22, 4096);
    at[1] = p,
    p += dion__mlx5_wqe_fetch_add(&sq, (uint16_t)p, DION__MLX5_CTRL_FM_FENCE, 0x3008, 0x33, 7, 0x4000, 0x44);
    at[2] = p,
    p += dion__mlx5_wqe_set(&sq, (uint16_t)p, DION__MLX5_CTRL_CQ_UPDATE, 0x5010, 0x55, 99, 0x6000, 0x66);
    const char msg[] = "twenty bytes inline";
    at[3] = p, p += dion__mlx5_wqe_write_inline(&sq, (uint16_t)p, 0, 0x7000, 0x77, msg, sizeof msg);
    at[4] = p,
    p += dion__mlx5_wqe_read(&sq, (uint16_t)p, DION__MLX5_CTRL_CQ_UPDATE, 0x8000, 0x88, 0x9000, 0x99, 3);
    at[5] = p, p += dion__mlx5_wqe_compare_swap(&sq, (uint16_t)p, 0, 0xa000, 0xaa, 5, 4, 0xb000, 0xbb);
    at[6] = p, p += dion__mlx5_wqe_nop(&sq, (uint16_t)p, DION__MLX5_CTRL_CQ_UPDATE);
    uint64_t pi = p;

    dion__snic_wqe_t w = parse_ok(at[0], pi);
    CHECK(w.kind == DION__SNIC_WRITE && !w.is_inline && w.raddr == 0x1000 && w.rkey == 0x11 &&
              w.laddr == 0x2000 && w.lkey == 0x22 && w.len == 4096 && !w.signaled && !w.fence &&
              w.wqebbs == 1 && w.idx == 0xfffd,
          "WRITE read back wrong");
    w = parse_ok(at[1], pi);
    CHECK(w.kind == DION__SNIC_FETCH_ADD && w.swap_add == 7 && w.raddr == 0x3008 && w.laddr == 0x4000 &&
              w.len == 8 && w.fence && !w.signaled,
          "FETCH_ADD read back wrong (fence %d)", w.fence);
    w = parse_ok(at[2], pi);
    CHECK(w.kind == DION__SNIC_SET && w.swap_add == 99 && w.wqebbs == 2 && w.signaled && w.raddr == 0x5010 &&
              w.lkey == 0x66 && w.idx == 0xffff,
          "SET across the ring's end read back wrong");
    w = parse_ok(at[3], pi);
    CHECK(w.kind == DION__SNIC_WRITE && w.is_inline && w.len == sizeof msg &&
              !memcmp(w.inl, msg, sizeof msg) && w.idx == 0x0001,
          "inline WRITE after the 16-bit wrap read back wrong");
    w = parse_ok(at[4], pi);
    CHECK(w.kind == DION__SNIC_READ && w.len == 3 && w.signaled, "READ read back wrong");
    w = parse_ok(at[5], pi);
    CHECK(w.kind == DION__SNIC_CSWAP && w.swap_add == 5 && w.compare == 4, "compare-swap read back wrong");
    w = parse_ok(at[6], pi);
    CHECK(w.kind == DION__SNIC_NOP && w.signaled, "NOP read back wrong");

    /* a WQE the doorbell does not cover whole */
    parse_bad(at[2], at[2] + 1, 0x02, "past the doorbelled producer index");
}

/* Writes one WRITE at 0, then lets corrupt() change it, and expects the syndrome and words. */
static void broken(void (*corrupt)(uint8_t *), uint8_t want, const char *words)
{
    memset(ring, 0, sizeof ring);
    dion__mlx5_wqe_write(&sq, 0, 0, 0x1000, 0x11, 0x2000, 0x22, 64);
    corrupt(ring);
    parse_bad(0, 1, want, words);
}

static void c_idx(uint8_t *b)
{
    b[2] = 1; /* idx 1 in a WQE at 0 */
}
static void c_qpn(uint8_t *b)
{
    b[5] ^= 1;
}
static void c_ds(uint8_t *b)
{
    b[7] = 2; /* a WRITE needs DS 3 */
}
static void c_opcode(uint8_t *b)
{
    b[3] = 0x0a; /* SEND */
}
static void c_opmod(uint8_t *b)
{
    b[0] = 0x09;
}
static void c_sig(uint8_t *b)
{
    b[8] = 0x5a;
}
static void c_fm(uint8_t *b)
{
    b[11] = 0x01;
}
static void c_ce(uint8_t *b)
{
    b[11] = 0x0c; /* CQE + EQE */
}
static void c_raddr_rsvd(uint8_t *b)
{
    b[31] = 1;
}
static void c_len0(uint8_t *b)
{
    memset(b + 32, 0, 4);
}
static void c_inline_flag(uint8_t *b)
{
    b[32] |= 0x80; /* the inline bit in a pointer segment: read as inline, whose DS is then wrong */
}
static void c_imm(uint8_t *b)
{
    b[15] = 1;
}

static void test_broken(void)
{
    broken(c_idx, 0x02, "carries index 0x0001");
    broken(c_qpn, 0x02, "names QPN");
    broken(c_ds, 0x02, "its segments make DS 3");
    broken(c_opcode, 0x02, "not one DION posts");
    broken(c_opmod, 0x02, "opmod 0x09");
    broken(c_sig, 0x02, "signature");
    broken(c_fm, 0x02, "bits 4 or 0");
    broken(c_ce, 0x02, "completion mode 3");
    broken(c_raddr_rsvd, 0x02, "reserved word");
    broken(c_len0, 0x01, "0 bytes is undefined");
    broken(c_inline_flag, 0x02, "inline WRITE");
    broken(c_imm, 0x02, "immediate");
    /* an atomic at an unaligned address, and a local buffer that is not 8 bytes */
    memset(ring, 0, sizeof ring);
    dion__mlx5_wqe_fetch_add(&sq, 0, 0, 0x3004, 1, 1, 0x4000, 2);
    parse_bad(0, 1, 0x12, "not 8-byte aligned");
    memset(ring, 0, sizeof ring);
    dion__mlx5_wqe_fetch_add(&sq, 0, 0, 0x3000, 1, 1, 0x4000, 2);
    ring[51] = 4; /* byte_count 4 */
    parse_bad(0, 1, 0x01, "must have 8");
    /* a masked compare-swap that is not DION's SET */
    memset(ring, 0, sizeof ring);
    dion__mlx5_wqe_set(&sq, 0, 0, 0x5000, 1, 1, 0x6000, 2);
    ring[63] = 1; /* compare_mask 1 */
    parse_bad(0, 2, 0x02, "compare_mask");
}

static void test_doorbell(void)
{
    uint64_t pi = 0;
    char why[256] = "";
    uint32_t rec = dion__mlx5_dbr_sq_value(5);
    uint8_t syn =
        dion__snic_check_doorbell(dion__mlx5_db_value(5, QPN), rec, QPN, NW, 0, &pi, why, sizeof why);
    CHECK(syn == 0 && pi == 5, "a good doorbell: 0x%02x %s pi %llu", syn, why, (unsigned long long)pi);
    /* the 16-bit wrap: previous 0x1fff0 (64-bit), doorbell says 0x0004 */
    syn = dion__snic_check_doorbell(dion__mlx5_db_value(4, QPN), dion__mlx5_dbr_sq_value(4), QPN, NW, 0x1fff0,
                                    &pi, why, sizeof why);
    CHECK(syn == 0 && pi == 0x20004, "doorbell across the wrap: 0x%02x %s pi 0x%llx", syn, why,
          (unsigned long long)pi);
    /* the record may run ahead (a later publisher wrote it), never behind */
    syn = dion__snic_check_doorbell(dion__mlx5_db_value(5, QPN), dion__mlx5_dbr_sq_value(9), QPN, NW, 0, &pi,
                                    why, sizeof why);
    CHECK(syn == 0, "record ahead of the doorbell refused: %s", why);
    syn = dion__snic_check_doorbell(dion__mlx5_db_value(5, QPN), dion__mlx5_dbr_sq_value(4), QPN, NW, 0, &pi,
                                    why, sizeof why);
    CHECK(syn == 0x02 && strstr(why, "doorbell record"), "record behind the doorbell: 0x%02x %s", syn, why);
    syn = dion__snic_check_doorbell(dion__mlx5_db_value(5, QPN + 1), rec, QPN, NW, 0, &pi, why, sizeof why);
    CHECK(syn == 0x02 && strstr(why, "QPN"), "doorbell for another QP: 0x%02x %s", syn, why);
    syn = dion__snic_check_doorbell(dion__mlx5_db_value(3, QPN), dion__mlx5_dbr_sq_value(3), QPN, NW, 5, &pi,
                                    why, sizeof why);
    CHECK(syn == 0x02 && strstr(why, "backwards"), "doorbell going back: 0x%02x %s", syn, why);
    uint64_t odd = dion__mlx5_db_value(5, QPN);
    ((uint8_t *)&odd)[7] = 3; /* DS in the doorbell (byte 7 of the 8 in memory) */
    syn = dion__snic_check_doorbell(odd, rec, QPN, NW, 0, &pi, why, sizeof why);
    CHECK(syn == 0x02 && strstr(why, "DS 3"), "a doorbell with DS set: 0x%02x %s", syn, why);
    odd = dion__mlx5_db_value(5, QPN);
    ((uint8_t *)&odd)[3] = 0x08; /* an opcode in the doorbell */
    syn = dion__snic_check_doorbell(odd, rec, QPN, NW, 0, &pi, why, sizeof why);
    CHECK(syn == 0x02 && strstr(why, "opcode 0x08"), "a doorbell with an opcode: 0x%02x %s", syn, why);
}

/* The model's thread stays awake while the engine served peers' operations (shm: only inside poll), not only
 * while its own QPs have work; an engine without the slot keeps the old rule. A fake engine whose served
 * answers from a script and counts its calls. */
static int served_answer, served_calls;
static int fake_served(dion__engine_t *e)
{
    (void)e;
    served_calls++;
    return served_answer;
}

static void test_awake(void)
{
    dion__engine_ops_t with = {.name = "fake", .served = fake_served}, without = {.name = "fake-old"};
    for (int busy = 0; busy < 2; busy++)
        for (int ans = 0; ans < 2; ans++) {
            served_answer = ans;
            served_calls = 0;
            int a = dion__engine_awake(&with, NULL, busy);
            CHECK(a == (busy || ans), "busy %d served %d: awake %d", busy, ans, a);
            /* asked only when idle: it may cost a provider call */
            CHECK(served_calls == !busy, "busy %d: served asked %d times", busy, served_calls);
            CHECK(dion__engine_awake(&without, NULL, busy) == busy, "no served slot, busy %d", busy);
        }
}

int main(void)
{
    test_awake();
    test_kinds();
    test_broken();
    test_doorbell();
    printf("%s: softnic reader, %s (%d failures)\n", failures ? "FAIL" : "PASS",
           dion__snic_uses_mlx5dv() ? "with rdma-core's mlx5dv.h" : "with DION's copy of the layouts",
           failures);
    return failures ? 1 : 0;
}
