/* The conformance suite, written once. A runner (tests/cpu/conformance_cpu.c for CPU mode,
 * tests/gpu/conformance_gpu.cu for GPUs) includes this file after defining:
 *   DT_KERNEL(name, type)             declares a kernel whose body follows, taking `type *a`
 *   DT_LAUNCH(name, grid, block, ptr) runs it and waits for it; evaluates to 0 on success
 *   void *dt_alloc(size_t n)          scratch memory kernels can write (zeroed)
 *   void dt_free(void *p)
 *   void dt_get(void *host, const void *mem, size_t n)   copy from window/scratch memory to the host
 *   void dt_put(void *mem, const void *host, size_t n)   copy from the host to window/scratch memory
 *   int  DT_ON_HOST                   1 when windows are host memory (CPU mode)
 *   unsigned DT_BLOCK                 threads per block for block-variant tests
 * Every test checks data byte by byte, with sizes and offsets drawn from fixed seeds, and fails loudly. */
#ifndef DION_TEST_CONFORMANCE_H
#define DION_TEST_CONFORMANCE_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

/* ---- helpers shared by kernels and host ---- */

DION_HD uint64_t dt_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The byte a rank writes at position i of round k. */
DION_HD uint8_t dt_byte(int rank, uint64_t round, uint64_t i)
{
    return (uint8_t)(dt_mix(((uint64_t)rank << 48) ^ (round << 32) ^ (i >> 3)) >> (8 * (i & 7)));
}

typedef struct {
    uint64_t s;
} dt_rng_t;
static uint64_t dt_next(dt_rng_t *r)
{
    return dt_mix(r->s++);
}
static uint64_t dt_range(dt_rng_t *r, uint64_t lo, uint64_t hi)
{
    return lo + dt_next(r) % (hi - lo + 1);
}

static int dt_failures;
#define DT_FAIL(...)                                                                                         \
    do {                                                                                                     \
        fprintf(stderr, "FAIL rank %d %s:%d: ", dt_rank, __FILE__, __LINE__);                                \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        dt_failures++;                                                                                       \
    } while (0)
#define DT_OK(call)                                                                                          \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) {                                                                            \
            fprintf(stderr, "FAIL rank %d %s:%d: %s -> %s: %s\n", dt_rank, __FILE__, __LINE__, #call,        \
                    dion_status_string(s_), dion_last_error());                                              \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static int dt_rank, dt_n;
static dion_comm_t dt_comm;
static dion_dev_t dt_dev;

/* Kernels report through a result array: result[0] counts failures seen on the device side,
 * result[1..] carry test-specific values. */
#define DT_RESULTS 64

/* ================================================================================================ */
/* 1. Puts of random sizes at random unaligned offsets, thread / warp / block, put or put_signal.      */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int peer;
    uint64_t src_off, dst_off, bytes;
    int group; /* 0 thread, 1 warp, 2 block */
    int with_signal;
    uint32_t sig;
    uint64_t expect; /* wait for own signal >= expect */
    uint64_t *result;
} dt_put_args_t;

DT_KERNEL(dt_put_kernel, dt_put_args_t)
{
    dion_ctx_t c = dion_ctx(a->dev, dion__block_index() % a->dev.num_contexts);
    uint32_t t = dion__block_thread();
    /* every thread of the chosen group takes part; others stay out */
    int in_group = a->group == 2 || (a->group == 1 && t < 32) || (a->group == 0 && t == 0);
    if (in_group) {
        if (a->with_signal) {
            if (a->group == 0)
                dion_put_signal(c, a->win, a->peer, a->dst_off, a->win, a->src_off, a->bytes, a->sig,
                                DION_SIG_ADD, 1);
            else if (a->group == 1)
                dion_put_signal_warp(c, a->win, a->peer, a->dst_off, a->win, a->src_off, a->bytes, a->sig,
                                     DION_SIG_ADD, 1);
            else
                dion_put_signal_block(c, a->win, a->peer, a->dst_off, a->win, a->src_off, a->bytes, a->sig,
                                      DION_SIG_ADD, 1);
        } else {
            if (a->group == 0)
                dion_put(c, a->win, a->peer, a->dst_off, a->win, a->src_off, a->bytes);
            else if (a->group == 1)
                dion_put_warp(c, a->win, a->peer, a->dst_off, a->win, a->src_off, a->bytes);
            else
                dion_put_block(c, a->win, a->peer, a->dst_off, a->win, a->src_off, a->bytes);
        }
    }
    if (t == 0) {
        if (!a->with_signal) {
            if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
            dion_signal(c, a->peer, a->sig, DION_SIG_ADD, 1);
        }
        uint64_t seen = 0;
        if (dion_wait(c, a->sig, DION_CMP_GE, a->expect, &seen) != DION_SUCCESS) a->result[0]++;
        a->result[1] = seen;
    }
}

#define DT_PUT_HALF (5u << 20) /* source in [0, half), destination in [half, 2*half) */

static void dt_test_puts(dion_win_t win, char *base, int rounds, uint64_t max_bytes, uint64_t half)
{
    dt_rng_t rng = {1234};
    int next = (dt_rank + 1) % dt_n, prev = (dt_rank + dt_n - 1) % dt_n;
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    uint8_t *host = (uint8_t *)malloc(2 * half);
    static uint64_t signals; /* signal 0 keeps counting across calls: each wait must need this round's put */
    static const char *gname[] = {"thread", "warp", "block"};
    for (int k = 0; k < rounds; k++) {
        /* The same draws on every rank: everybody knows what its predecessor sends. */
        uint64_t bytes = dt_range(&rng, 0, 3) == 0
                             ? dt_range(&rng, 0, 64)
                             : (1ull << dt_range(&rng, 0, 22)) + dt_range(&rng, 0, 4095);
        if (bytes > max_bytes) bytes = max_bytes;
        if (bytes > half - 256) bytes = half - 256; /* leave room for the offsets and guard bytes below */
        uint64_t src_off = dt_range(&rng, 0, half - bytes - 1);
        uint64_t dst_off = half + dt_range(&rng, 64, half - bytes - 64);
        int group = (int)dt_range(&rng, 0, 2), with_signal = (int)dt_range(&rng, 0, 1);
        /* fill own source, poison own destination */
        for (uint64_t i = 0; i < bytes; i++) host[i] = dt_byte(dt_rank, (uint64_t)k, i);
        dt_put(base + src_off, host, bytes);
        memset(host, 0xa5, bytes + 128);
        dt_put(base + dst_off - 64, host, bytes + 128);
        DT_OK(dion_comm_barrier(dt_comm));
        dt_put_args_t a = {dt_dev, dion_win_device(win), next, src_off,   dst_off, bytes,
                           group,  with_signal,          0,    ++signals, result};
        if (DT_LAUNCH(dt_put_kernel, 1, group == 2 ? DT_BLOCK : 32, &a)) DT_FAIL("launch failed");
        uint64_t res[2];
        dt_get(res, result, sizeof res);
        if (res[0]) DT_FAIL("round %d: %llu device-side failures", k, (unsigned long long)res[0]);
        /* verify what the predecessor wrote here, and that nothing around it changed */
        dt_get(host, base + dst_off - 64, bytes + 128);
        for (uint64_t i = 0; i < 64; i++)
            if (host[i] != 0xa5 || host[64 + bytes + i] != 0xa5) {
                DT_FAIL("round %d (%s, %llu bytes at %llu): byte outside the target range was changed", k,
                        gname[group], (unsigned long long)bytes, (unsigned long long)dst_off);
                break;
            }
        for (uint64_t i = 0; i < bytes; i++)
            if (host[64 + i] != dt_byte(prev, (uint64_t)k, i)) {
                DT_FAIL(
                    "round %d (%s%s, %llu bytes, src %llu -> dst %llu): byte %llu is 0x%02x, expected 0x%02x",
                    k, gname[group], with_signal ? " put_signal" : " put", (unsigned long long)bytes,
                    (unsigned long long)src_off, (unsigned long long)dst_off, (unsigned long long)i,
                    host[64 + i], dt_byte(prev, (uint64_t)k, i));
                break;
            }
        DT_OK(dion_comm_barrier(dt_comm));
    }
    free(host);
    dt_free(result);
}

/* The boundaries the random draws may miss: every size around the vector widths and group sizes, for each
 * group, with source and destination offsets congruent modulo 16, 8 or 4, and not congruent at all. */
static void dt_test_small_puts(dion_win_t win, char *base)
{
    static const uint64_t sizes[] = {0,   1,   2,   3,    7,    8,    9,    15,   16,    17,   31,  32,
                                     33,  63,  64,  65,   100,  127,  128,  129,  255,   256,  257, 511,
                                     512, 513, 640, 1000, 1023, 1024, 1025, 4097, 16383, 16385};
    static const uint64_t skews[] = {0, 8, 4, 3};
    int next = (dt_rank + 1) % dt_n, prev = (dt_rank + dt_n - 1) % dt_n;
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    uint8_t *host = (uint8_t *)malloc(32768);
    static uint64_t signals; /* signal 1 is this test's own and keeps counting across calls */
    uint64_t round = 5000;
    for (int group = 0; group < 3; group++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++, round++) {
            uint64_t bytes = sizes[k], skew = skews[(k + (size_t)group) % 4];
            uint64_t src_off = 4096 + 16 * k + skew, dst_off = DT_PUT_HALF + 4096 + 48 * k;
            for (uint64_t i = 0; i < bytes; i++) host[i] = dt_byte(dt_rank, round, i);
            dt_put(base + src_off, host, bytes);
            memset(host, 0xa5, bytes + 128);
            dt_put(base + dst_off - 64, host, bytes + 128);
            DT_OK(dion_comm_barrier(dt_comm));
            dt_put_args_t a = {dt_dev, dion_win_device(win), next, src_off,   dst_off, bytes,
                               group,  (int)(k & 1),         1,    ++signals, result};
            if (DT_LAUNCH(dt_put_kernel, 1, group == 2 ? DT_BLOCK : 32, &a)) DT_FAIL("launch failed");
            dt_get(host, base + dst_off - 64, bytes + 128);
            for (uint64_t i = 0; i < 64; i++)
                if (host[i] != 0xa5 || host[64 + bytes + i] != 0xa5) {
                    DT_FAIL("small put (group %d, %llu bytes, skew %llu): a byte outside the range changed",
                            group, (unsigned long long)bytes, (unsigned long long)skew);
                    break;
                }
            for (uint64_t i = 0; i < bytes; i++)
                if (host[64 + i] != dt_byte(prev, round, i)) {
                    DT_FAIL("small put (group %d, %llu bytes, skew %llu): byte %llu wrong", group,
                            (unsigned long long)bytes, (unsigned long long)skew, (unsigned long long)i);
                    break;
                }
            DT_OK(dion_comm_barrier(dt_comm));
        }
    free(host);
    dt_free(result);
}

/* ================================================================================================ */
/* 2. Signals: SET and ADD, every comparison, signal_read.                                             */

typedef struct {
    dion_dev_t dev;
    int phase;
    uint64_t *result;
} dt_sig_args_t;

#define DT_SIG_CMP0 16 /* signals 16..21: one per comparison */
#define DT_SIG_SUM  8

/* start value, values sent in order, comparison operand: only the last value satisfies the comparison */
DION_HD void dt_cmp_case(int cmp, uint64_t *start, uint64_t seq[3], uint64_t *operand)
{
    uint64_t t[5];
    switch (cmp) {
    case DION_CMP_EQ:
        t[0] = 0, t[1] = 1, t[2] = 2, t[3] = 7, t[4] = 7;
        break; /* EQ 7 */
    case DION_CMP_NE:
        t[0] = 5, t[1] = 5, t[2] = 5, t[3] = 9, t[4] = 5;
        break; /* NE 5 */
    case DION_CMP_GT:
        t[0] = 1, t[1] = 2, t[2] = 3, t[3] = 10, t[4] = 5;
        break; /* GT 5 */
    case DION_CMP_GE:
        t[0] = 1, t[1] = 2, t[2] = 5, t[3] = 6, t[4] = 6;
        break; /* GE 6 */
    case DION_CMP_LT:
        t[0] = 100, t[1] = 90, t[2] = 50, t[3] = 3, t[4] = 10;
        break; /* LT 10 */
    default:
        t[0] = 100, t[1] = 50, t[2] = 11, t[3] = 10, t[4] = 10;
        break; /* LE 10 */
    }
    *start = t[0];
    seq[0] = t[1];
    seq[1] = t[2];
    seq[2] = t[3];
    *operand = t[4];
}

DT_KERNEL(dt_sig_kernel, dt_sig_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n;
    if (a->phase == 0) {
        /* start values in this rank's own table */
        for (int cmp = 0; cmp < 6; cmp++) {
            uint64_t start, seq[3], op;
            dt_cmp_case(cmp, &start, seq, &op);
            dion_signal(c, me, DT_SIG_CMP0 + cmp, DION_SIG_SET, start);
        }
        dion_quiet(c);
        return;
    }
    /* phase 1: send each comparison's sequence to the successor, wait on our own */
    for (int cmp = 0; cmp < 6; cmp++) {
        uint64_t start, seq[3], op;
        dt_cmp_case(cmp, &start, seq, &op);
        for (int i = 0; i < 3; i++) dion_signal(c, next, DT_SIG_CMP0 + cmp, DION_SIG_SET, seq[i]);
    }
    for (int cmp = 0; cmp < 6; cmp++) {
        uint64_t start, seq[3], op, seen = 0;
        dt_cmp_case(cmp, &start, seq, &op);
        if (dion_wait(c, DT_SIG_CMP0 + cmp, (dion_cmp_t)cmp, op, &seen) != DION_SUCCESS) a->result[0]++;
        a->result[1 + cmp] = seen;
        /* already true: returns at once with the same value */
        uint64_t again = 0;
        if (dion_wait(c, DT_SIG_CMP0 + cmp, (dion_cmp_t)cmp, op, &again) != DION_SUCCESS || again != seen)
            a->result[0]++;
    }
    /* every rank adds rank+1 to every rank's sum signal */
    for (int p = 0; p < n; p++) dion_signal(c, p, DT_SIG_SUM, DION_SIG_ADD, (uint64_t)me + 1);
    uint64_t total = (uint64_t)n * (n + 1) / 2, seen = 0;
    if (dion_wait(c, DT_SIG_SUM, DION_CMP_EQ, total, &seen) != DION_SUCCESS) a->result[0]++;
    a->result[7] = seen;
    a->result[8] = dion_signal_read(c, DT_SIG_SUM);
    dion_fence(c);
}

static void dt_test_signals(void)
{
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_sig_args_t a = {dt_dev, 0, result};
    if (DT_LAUNCH(dt_sig_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    DT_OK(dion_comm_barrier(dt_comm));
    a.phase = 1;
    if (DT_LAUNCH(dt_sig_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    uint64_t r[DT_RESULTS];
    dt_get(r, result, sizeof r);
    static const char *names[] = {"EQ", "NE", "GT", "GE", "LT", "LE"};
    if (r[0]) DT_FAIL("%llu signal waits failed on the device", (unsigned long long)r[0]);
    for (int cmp = 0; cmp < 6; cmp++) {
        uint64_t start, seq[3], op;
        dt_cmp_case(cmp, &start, seq, &op);
        if (r[1 + cmp] != seq[2])
            DT_FAIL("wait %s %llu returned with %llu; only %llu satisfies it", names[cmp],
                    (unsigned long long)op, (unsigned long long)r[1 + cmp], (unsigned long long)seq[2]);
    }
    uint64_t total = (uint64_t)dt_n * (dt_n + 1) / 2;
    if (r[7] != total || r[8] != total)
        DT_FAIL("ADD from all ranks: waited %llu, read %llu, expected %llu", (unsigned long long)r[7],
                (unsigned long long)r[8], (unsigned long long)total);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
}

/* Signal ADD storm (issue 8): every rank adds 1 to word DT_SIG_STORM of every rank, its own included, k
 * times, one at a time round the ranks, with ADD and ADD_RELAXED; then waits for n*k. Over the proxy the
 * peers' ADDs are CPU (or NIC) atomics on the host table while this rank's own went through the GPU: a GPU
 * red.add on pinned host memory is a read and a write over PCIe, and a peer's ADD between them was lost. */
#define DT_SIG_STORM 9

typedef struct {
    dion_dev_t dev;
    uint32_t k;
    uint64_t *result;
} dt_storm_args_t;

DT_KERNEL(dt_storm_kernel, dt_storm_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = (int)a->dev.rank, n = (int)a->dev.nranks;
    for (uint32_t i = 0; i < a->k; i++)
        for (int j = 0; j < n; j++)
            dion_signal(c, (me + j) % n, DT_SIG_STORM, (i & 1) ? DION_SIG_ADD_RELAXED : DION_SIG_ADD, 1);
    uint64_t seen = 0;
    a->result[0] = dion_wait(c, DT_SIG_STORM, DION_CMP_EQ, (uint64_t)n * a->k, &seen) != DION_SUCCESS;
    a->result[1] = seen;
    a->result[2] = dion_signal_read(c, DT_SIG_STORM);
    dion_quiet(c);
}

static void dt_test_sig_storm(uint32_t k)
{
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_storm_args_t a = {dt_dev, k, result};
    DT_OK(dion_comm_barrier(dt_comm));
    if (DT_LAUNCH(dt_storm_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    uint64_t r[DT_RESULTS];
    dt_get(r, result, sizeof r);
    uint64_t total = (uint64_t)dt_n * k;
    if (r[0] || r[1] != total || r[2] != total)
        DT_FAIL(
            "signal ADD storm: waited %llu (%s), read %llu, expected %llu (%u ADDs from each of %d ranks)",
            (unsigned long long)r[1], r[0] ? "timed out" : "held", (unsigned long long)r[2],
            (unsigned long long)total, k, dt_n);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
}

/* ================================================================================================ */
/* 3. A stream of put_signal with increasing values: every value observed must come with its data.    */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t base_off; /* records start here in every rank's window */
    uint32_t count;
    uint32_t sig;
    int add;      /* ADD 1 each time instead of SET k */
    int use_warp; /* the sender is a whole warp */
    uint64_t *result;
} dt_stream_args_t;

#define DT_REC   64
#define DT_AHEAD 100

DION_HD void dt_stream_fill(uint64_t *rec, int rank, uint64_t k)
{
    for (int w = 0; w < DT_REC / 8; w++) rec[w] = dt_mix(((uint64_t)rank << 40) ^ (k << 8) ^ (uint64_t)w);
}

DT_KERNEL(dt_stream_kernel, dt_stream_args_t)
{
    uint32_t t = dion__block_thread();
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n, prev = (me + n - 1) % n;
    char *mine = dion__win_peer(a->win, me)->base;
    if (t < 32) { /* the sender: warp 0 (lane 0 alone unless use_warp) */
        if (!a->use_warp && t != 0) return;
        uint64_t acked = 0;
        for (uint64_t k = 1; k <= a->count; k++) {
            /* Flow control keeps sender and receiver interleaved: at most DT_AHEAD records unacknowledged. */
            if (k > acked + DT_AHEAD &&
                dion_wait(c, a->sig + 8, DION_CMP_GE, k - DT_AHEAD, &acked) != DION_SUCCESS)
                a->result[0]++; /* every sending lane waits for itself: no lane depends on another's view */
            /* record k is staged at k*REC here and lands at base_off + k*REC in the successor */
            uint64_t stage = k * DT_REC;
            if (t == 0) dt_stream_fill((uint64_t *)(mine + stage), me, k);
            dion_sig_op_t op = a->add ? DION_SIG_ADD : DION_SIG_SET;
            if (a->use_warp) {
                dion__group_sync(DION__WARP); /* the staged record is visible to the whole warp */
                dion_put_signal_warp(c, a->win, next, a->base_off + stage, a->win, stage, DT_REC, a->sig, op,
                                     a->add ? 1 : k);
            } else {
                dion_put_signal(c, a->win, next, a->base_off + stage, a->win, stage, DT_REC, a->sig, op,
                                a->add ? 1 : k);
            }
        }
        return;
    }
    if (t != 32) return;
    /* the receiver: warp 1 lane 0 */
    uint64_t last = 0, bad = 0, waits = 0;
    while (last < a->count) {
        uint64_t v = 0;
        if (dion_wait(c, a->sig, DION_CMP_GT, last, &v) != DION_SUCCESS) {
            bad++;
            break;
        }
        waits++;
        for (uint64_t k = last + 1; k <= v; k++) {
            const uint64_t *rec = (const uint64_t *)(mine + a->base_off + k * DT_REC);
            uint64_t want[DT_REC / 8];
            dt_stream_fill(want, prev, k);
            for (int w = 0; w < DT_REC / 8; w++)
                if (rec[w] != want[w]) {
                    bad++;
                    if (!a->result[2]) a->result[2] = k; /* first value whose data was missing */
                    break;
                }
        }
        last = v;
        dion_signal(c, prev, a->sig + 8, DION_SIG_SET, last); /* acknowledge */
    }
    a->result[0] += bad;
    a->result[1] = waits;
}

static void dt_test_stream(dion_win_t win, uint32_t count)
{
    /* staging: [REC, (count+1)*REC); landing: base_off + [REC, (count+1)*REC) */
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    for (int variant = 0; variant < 3; variant++) {
        DT_OK(dion_comm_barrier(dt_comm));
        dt_stream_args_t a = {dt_dev,
                              dion_win_device(win),
                              (uint64_t)(count + 1) * DT_REC,
                              count,
                              30 + (uint32_t)variant,
                              variant == 1,
                              variant == 2,
                              result};
        if (DT_LAUNCH(dt_stream_kernel, 1, 64, &a)) DT_FAIL("launch failed");
        uint64_t r[3];
        dt_get(r, result, sizeof r);
        if (r[0])
            DT_FAIL("stream variant %d: %llu records missing their data (first at value %llu)", variant,
                    (unsigned long long)r[0], (unsigned long long)r[2]);
        uint64_t zero[3] = {0, 0, 0};
        dt_put(result, zero, sizeof zero);
        if (dt_rank == 0)
            printf("  stream %s: %u put_signal, receiver woke %llu times, all data present\n",
                   variant == 0   ? "SET/thread"
                   : variant == 1 ? "ADD/thread"
                                  : "SET/warp",
                   count, (unsigned long long)r[1]);
    }
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
}

/* ================================================================================================ */
/* 4. Atomics: concurrent fetch-add from all ranks, compare-and-swap increments.                       */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint32_t adds; /* per thread */
    uint32_t cas;  /* per thread */
    uint64_t *result;
} dt_atomic_args_t;

DT_KERNEL(dt_atomic_kernel, dt_atomic_args_t)
{
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks;
    uint32_t t = dion__block_thread();
    for (uint32_t i = 0; i < a->adds; i++) {
        int peer = (int)((me + i + t) % (uint32_t)n);
        uint64_t old = dion_atomic_fetch_add(c, a->win, peer, 0, (uint64_t)me + 1);
        (void)old;
    }
    for (uint32_t i = 0; i < a->cas; i++) {
        uint64_t cur = dion_atomic_fetch_add(c, a->win, 0, 8, 0);
        for (;;) {
            uint64_t old = dion_atomic_compare_swap(c, a->win, 0, 8, cur, cur + 1);
            if (old == cur) break;
            cur = old;
        }
    }
}

static void dt_test_atomics(dion_win_t win, char *base, uint32_t threads, uint32_t adds, uint32_t cas)
{
    uint64_t zero[2] = {0, 0};
    dt_put(base, zero, sizeof zero);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_atomic_args_t a = {dt_dev, dion_win_device(win), adds, cas, NULL};
    if (DT_LAUNCH(dt_atomic_kernel, 1, threads, &a)) DT_FAIL("launch failed");
    DT_OK(dion_comm_barrier(dt_comm));
    uint64_t got[2];
    dt_get(got, base, sizeof got);
    /* every (sender rank, thread, i) adds sender+1 to rank (sender+i+t) % n */
    uint64_t want = 0;
    for (int s = 0; s < dt_n; s++)
        for (uint32_t t = 0; t < threads; t++)
            for (uint32_t i = 0; i < adds; i++)
                if ((int)((s + i + t) % (uint32_t)dt_n) == dt_rank) want += (uint64_t)s + 1;
    if (got[0] != want)
        DT_FAIL("fetch-add total %llu, expected %llu", (unsigned long long)got[0], (unsigned long long)want);
    if (dt_rank == 0 && got[1] != (uint64_t)dt_n * threads * cas)
        DT_FAIL("CAS increments %llu, expected %llu", (unsigned long long)got[1],
                (unsigned long long)dt_n * threads * cas);
    DT_OK(dion_comm_barrier(dt_comm));
}

/* ================================================================================================ */
/* 5. Get, and the device barrier ordering puts.                                                       */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t src_off, dst_off, bytes;
    int group;
    int rounds;
    uint64_t *result;
} dt_get_args_t;

DT_KERNEL(dt_get_kernel, dt_get_args_t)
{
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n;
    uint32_t t = dion__block_thread();
    if (a->group == 0 && t == 0) dion_get(c, a->win, a->dst_off, a->win, next, a->src_off, a->bytes);
    if (a->group == 1 && t < 32) dion_get_warp(c, a->win, a->dst_off, a->win, next, a->src_off, a->bytes);
    if (a->group == 2) dion_get_block(c, a->win, a->dst_off, a->win, next, a->src_off, a->bytes);
}

DT_KERNEL(dt_barrier_kernel, dt_get_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n;
    uint64_t *mine = (uint64_t *)(dion__win_peer(a->win, me)->base + a->dst_off);
    for (int k = 1; k <= a->rounds; k++) {
        /* write k into the successor's word, meet, then our word must hold k from the predecessor */
        mine[1] = (uint64_t)k;
        dion_put(c, a->win, next, a->dst_off, a->win, a->dst_off + 8, 8);
        if (dion_barrier(c) != DION_SUCCESS) a->result[0]++;
        if (dion__ld_acquire(mine, DION_SCOPE_SYS) != (uint64_t)k) a->result[0]++;
        if (dion_barrier(c) != DION_SUCCESS) a->result[0]++;
    }
}

static void dt_test_get_barrier(dion_win_t win, char *base)
{
    dt_rng_t rng = {777};
    int next = (dt_rank + 1) % dt_n;
    uint8_t *host = (uint8_t *)malloc(DT_PUT_HALF);
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    for (int k = 0; k < 12; k++) {
        uint64_t bytes = dt_range(&rng, 0, 1) ? dt_range(&rng, 0, 300) : dt_range(&rng, 1, 1u << 20);
        uint64_t src_off = dt_range(&rng, 0, DT_PUT_HALF - bytes - 1);
        uint64_t dst_off = DT_PUT_HALF + dt_range(&rng, 0, DT_PUT_HALF - bytes - 1);
        int group = k % 3;
        for (uint64_t i = 0; i < bytes; i++) host[i] = dt_byte(dt_rank, 1000 + (uint64_t)k, i);
        dt_put(base + src_off, host, bytes);
        DT_OK(dion_comm_barrier(dt_comm));
        dt_get_args_t a = {dt_dev, dion_win_device(win), src_off, dst_off, bytes, group, 0, result};
        if (DT_LAUNCH(dt_get_kernel, 1, group == 2 ? DT_BLOCK : 32, &a)) DT_FAIL("launch failed");
        dt_get(host, base + dst_off, bytes);
        for (uint64_t i = 0; i < bytes; i++)
            if (host[i] != dt_byte(next, 1000 + (uint64_t)k, i)) {
                DT_FAIL("get round %d (group %d, %llu bytes): byte %llu wrong", k, group,
                        (unsigned long long)bytes, (unsigned long long)i);
                break;
            }
        DT_OK(dion_comm_barrier(dt_comm));
    }
    dt_get_args_t b = {dt_dev, dion_win_device(win), 0, 2 * DT_PUT_HALF - 64, 0, 0, 50, result};
    if (DT_LAUNCH(dt_barrier_kernel, 1, 1, &b)) DT_FAIL("launch failed");
    uint64_t r;
    dt_get(&r, result, sizeof r);
    if (r) DT_FAIL("device barrier: %llu rounds saw stale data or failed", (unsigned long long)r);
    DT_OK(dion_comm_barrier(dt_comm));
    free(host);
    dt_free(result);
}

/* ================================================================================================ */
/* 6. Asymmetric windows: sizes differ per rank, rank 0 registers nothing.                             */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t dst, src;
    uint64_t *result;
} dt_two_win_args_t;

DT_KERNEL(dt_asym_kernel, dt_two_win_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks;
    /* every rank writes its word at size-8-8*me of every peer part large enough */
    for (int p = 0; p < n; p++) {
        uint64_t size = dion__win_peer(a->dst, p)->size;
        if (size < 8 * (uint64_t)n) continue;
        dion_put(c, a->dst, p, size - 8 - 8 * (uint64_t)me, a->src, 0, 8);
    }
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
}

static size_t dt_asym_size(int r)
{
    return r == 0 ? 0 : 4096 * (size_t)r + 24 * (size_t)r + 8 * (size_t)dt_n;
}

static void dt_test_asymmetric(void)
{
    void *base = NULL, *sbase = NULL;
    dion_win_t w, s;
    DT_OK(dion_win_alloc(dt_comm, dt_asym_size(dt_rank), DT_ON_HOST, &base, &w));
    DT_OK(dion_win_alloc(dt_comm, 64, DT_ON_HOST, &sbase, &s));
    for (int r = 0; r < dt_n; r++)
        if (dion_win_size(w, r) != dt_asym_size(r))
            DT_FAIL("dion_win_size(rank %d) = %zu, expected %zu", r, dion_win_size(w, r), dt_asym_size(r));
    if ((dt_rank == 0) != (base == NULL))
        DT_FAIL("a 0-byte window must have a NULL base and others a real one");
    uint64_t me64 = 0x1000 + (uint64_t)dt_rank;
    dt_put(sbase, &me64, 8);
    DT_OK(dion_comm_barrier(dt_comm));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_two_win_args_t a = {dt_dev, dion_win_device(w), dion_win_device(s), result};
    if (DT_LAUNCH(dt_asym_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    DT_OK(dion_comm_barrier(dt_comm));
    size_t size = dt_asym_size(dt_rank);
    if (size) {
        uint64_t *words = (uint64_t *)malloc(8 * (size_t)dt_n);
        dt_get(words, (char *)base + size - 8 * (size_t)dt_n, 8 * (size_t)dt_n);
        for (int r = 0; r < dt_n; r++) {
            uint64_t got = words[dt_n - 1 - r];
            if (got != 0x1000 + (uint64_t)r)
                DT_FAIL("asymmetric window: word from rank %d is 0x%llx", r, (unsigned long long)got);
        }
        free(words);
    }
    uint64_t r0;
    dt_get(&r0, result, 8);
    if (r0) DT_FAIL("quiet failed");
    dt_free(result);
    DT_OK(dion_win_destroy(s));
    DT_OK(dion_win_destroy(w));
}

/* ================================================================================================ */
/* 7. DION_CHECK=1: bad arguments become error records and nothing is written.                         */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t *result;
} dt_check_args_t;

#define DT_CHECK_OPS 11

DT_KERNEL(dt_check_kernel, dt_check_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n;
    uint64_t size = dion__win_peer(a->win, next)->size;
    dion_put(c, a->win, n + 3, 0, a->win, 0, 8);               /* 1: peer out of range */
    dion_put(c, a->win, next, size - 4, a->win, 0, 8);         /* 2: runs past the window */
    dion_signal(c, next, a->dev.num_signals, DION_SIG_SET, 7); /* 3: signal index too large */
    dion_put_signal(c, a->win, next, 0, a->win, 0, 8, a->dev.num_signals + 9, DION_SIG_SET, 1); /* 4 */
    dion_atomic_fetch_add(c, a->win, next, 12, 1);              /* 5: misaligned atomic */
    dion_put(c, a->win, -1, 0, a->win, 0, 8);                   /* 6: negative peer */
    dion_ctx_t bad = dion_ctx(a->dev, a->dev.num_contexts + 5); /* 7: context out of range */
    dion_put(bad, a->win, next, 0, a->win, 0, 8);               /*    ... and this put is skipped */
    /* packet puts: the message's span and its 16-byte alignment, and the reserved sequence 0 */
    uint8_t pk[16] = {0};
    dion_put_packet(c, a->win, next, 8, pk, 16, 1);         /* 8: not 16-byte aligned */
    dion_put_packet(c, a->win, next, 0, pk, 8, 0);          /* 9: sequence 0 */
    dion_put_packet(c, a->win, next, size - 16, pk, 16, 1); /* 10: 32 bytes of units run past the window */
    if (dion_wait_packet(c, a->win, 8, pk, 8, 1) != DION_ERR_INVALID_ARG) a->result[0]++; /* 11 */
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
}

static void dt_test_check(dion_win_t win, char *base, size_t size)
{
    /* poison own window and signal 0; after the bad calls both must be untouched */
    uint8_t *host = (uint8_t *)malloc(size), *back = (uint8_t *)malloc(size);
    for (size_t i = 0; i < size; i++) host[i] = (uint8_t)(0x5a ^ i);
    dt_put(base, host, size);
    /* start from an empty error ring: earlier tests may have left records */
    while (dion_dev_check(dt_comm, &dt_dev) != DION_SUCCESS) {
    }
    DT_OK(dion_comm_barrier(dt_comm));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_check_args_t a = {dt_dev, dion_win_device(win), result};
    if (DT_LAUNCH(dt_check_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    uint64_t res = 0;
    dt_get(&res, result, sizeof res);
    if (res) DT_FAIL("DION_CHECK: %llu calls returned other than expected", (unsigned long long)res);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_get(back, base, size);
    if (memcmp(host, back, size) != 0) DT_FAIL("DION_CHECK: a rejected call wrote into this rank's window");
    dion_status_t st = dion_dev_check(dt_comm, &dt_dev);
    const char *msg = dion_last_error();
    char want[64];
    snprintf(want, sizeof want, "peer %d is not a rank", dt_n + 3);
    if (st != DION_ERR_INVALID_ARG)
        DT_FAIL("dion_dev_check returned %s, expected DION_ERR_INVALID_ARG", dion_status_string(st));
    else if (!strstr(msg, want) || !strstr(msg, "and 10 more"))
        DT_FAIL("dion_dev_check's sentence does not describe the first bad call and count the rest: %s", msg);
    if (dt_rank == 0) printf("  DION_CHECK: %s\n", msg);
    if (dion_dev_check(dt_comm, &dt_dev) != DION_SUCCESS) DT_FAIL("records were reported twice");
    free(host);
    free(back);
    dt_free(result);
    DT_OK(dion_comm_barrier(dt_comm));
}

/* ================================================================================================ */
/* 8. A wait that cannot succeed times out with a record; 9. dion_comm_abort ends every wait.          */

typedef struct {
    dion_dev_t dev;
    uint64_t *result;
} dt_wait_args_t;

DT_KERNEL(dt_wait_forever_kernel, dt_wait_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    uint64_t seen = 0;
    a->result[0] = (uint64_t)dion_wait(c, 5, DION_CMP_EQ, 12345, &seen);
    a->result[1] = seen;
    a->result[2] = (uint64_t)dion_quiet(c);
}

static double dt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void dt_test_timeout(void)
{
    dion_dev_t dev;
    dion_dev_attr_t attr = {64, 1, 300000000ull, 0}; /* 300 ms */
    DT_OK(dion_dev_create(dt_comm, &attr, &dev));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_wait_args_t a = {dev, result};
    double t0 = dt_now();
    if (DT_LAUNCH(dt_wait_forever_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    double dt = dt_now() - t0;
    uint64_t r[2];
    dt_get(r, result, sizeof r);
    if (r[0] != DION_ERR_TIMEOUT)
        DT_FAIL("wait returned %s, expected DION_ERR_TIMEOUT", dion_status_string((dion_status_t)r[0]));
    if (dt < 0.29 || dt > 10) DT_FAIL("the 300 ms wait took %.3f s", dt);
    dion_status_t st = dion_dev_check(dt_comm, &dev);
    if (st != DION_ERR_TIMEOUT || !strstr(dion_last_error(), "timed out") ||
        !strstr(dion_last_error(), "signal 5"))
        DT_FAIL("dion_dev_check: %s: %s", dion_status_string(st), dion_last_error());
    else if (dt_rank == 0)
        printf("  timeout: %s\n", dion_last_error());
    dt_free(result);
    DT_OK(dion_dev_destroy(dt_comm, &dev));
}

/* 8b. A late signal: rank 0 signals rank 1 only after DT_LATE_NS, so that rank 1's wait polls through its
 * looks at the abort word and the clock and into the back-off (thousands of polls on a GPU) before the value
 * comes; then the token goes round the ranks. Every wait must return with the value, and the data of the
 * put_signal that set it must be visible to the waiting thread right after it (the acquire after the wait's
 * rare path), checked byte by byte on the device. */
#define DT_LATE_NS    20000000ull /* 20 ms */
#define DT_LATE_SIG   12
#define DT_LATE_SRC   (DT_PUT_HALF - 8192)     /* in the put tests' source half */
#define DT_LATE_DST   (2 * DT_PUT_HALF - 8192) /* in their destination half */
#define DT_LATE_BYTES 1000u

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    const char *mine; /* this rank's window base */
    uint64_t value;
    uint64_t *result;
} dt_late_args_t;

DT_KERNEL(dt_late_kernel, dt_late_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks, prev = (me + n - 1) % n, next = (me + 1) % n;
    uint64_t seen = 0;
    if (me == 0) { /* the token starts late */
        uint64_t t0 = dion__time_ns();
        while (dion__time_ns() - t0 < DT_LATE_NS) {
        }
    } else if (dion_wait(c, DT_LATE_SIG, DION_CMP_EQ, a->value, &seen) != DION_SUCCESS) {
        a->result[0] = 1, a->result[1] = seen;
        return; /* the ranks after this one time out too, and say so */
    }
    dion_put_signal(c, a->win, next, DT_LATE_DST, a->win, DT_LATE_SRC, DT_LATE_BYTES, DT_LATE_SIG,
                    DION_SIG_SET, a->value);
    if (me == 0 && dion_wait(c, DT_LATE_SIG, DION_CMP_EQ, a->value, &seen) != DION_SUCCESS) {
        a->result[0] = 1, a->result[1] = seen;
        return;
    }
    a->result[1] = seen;
    for (uint32_t i = 0; i < DT_LATE_BYTES; i++)
        if ((uint8_t)a->mine[DT_LATE_DST + i] != dt_byte(prev, a->value, i)) a->result[2]++;
    a->result[3] = dion_quiet(c);
}

static void dt_test_late_signal(dion_win_t win, char *base)
{
    dion_dev_t dev;
    dion_dev_attr_t attr = {64, 1, 0, 0}; /* the default timeout: seconds */
    DT_OK(dion_dev_create(dt_comm, &attr, &dev));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    const uint64_t value = 0x1a7e00000000ull + 977;
    uint8_t src[DT_LATE_BYTES];
    for (uint32_t i = 0; i < DT_LATE_BYTES; i++) src[i] = dt_byte(dt_rank, value, i);
    dt_put(base + DT_LATE_SRC, src, sizeof src);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_late_args_t a = {dev, dion_win_device(win), base, value, result};
    if (DT_LAUNCH(dt_late_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    uint64_t r[4];
    dt_get(r, result, sizeof r);
    if (r[0])
        DT_FAIL("the late wait failed (last value seen %llu, expected %llu): %s", (unsigned long long)r[1],
                (unsigned long long)value, dion_last_error());
    else if (r[1] != value)
        DT_FAIL("the late wait returned with %llu, expected %llu", (unsigned long long)r[1],
                (unsigned long long)value);
    else if (r[2])
        DT_FAIL("%llu of %u bytes of the put_signal were not visible after the late wait",
                (unsigned long long)r[2], DT_LATE_BYTES);
    else if (r[3] != DION_SUCCESS)
        DT_FAIL("quiet after the late wait: %s", dion_status_string((dion_status_t)r[3]));
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
    DT_OK(dion_dev_destroy(dt_comm, &dev));
}

/* ================================================================================================ */
/* 10. DION_STATS=1: per-context counters count exactly what a kernel did.                              */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t *result;
} dt_stats_args_t;

DT_KERNEL(dt_stats_kernel, dt_stats_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 1); /* context 1: context 0 stays untouched */
    int me = a->dev.rank, next = (me + 1) % a->dev.nranks;
    dion_put(c, a->win, next, 64, a->win, 0, 16);
    dion_put(c, a->win, next, 128, a->win, 0, 100);
    dion_put_signal(c, a->win, next, 256, a->win, 0, 8, 2, DION_SIG_ADD, 1);
    dion_put_counted(c, a->win, next, 384, a->win, 0, 24, 5); /* a put; its counter wait is a wait */
    if (dion_counter_wait(c, 5, 1) != DION_SUCCESS) a->result[0]++;
    dion_signal(c, next, 3, DION_SIG_SET, 7);
    if (dion_wait(c, 3, DION_CMP_EQ, 7, NULL) != DION_SUCCESS) a->result[0]++;
    dion_get(c, a->win, 512, a->win, next, 0, 32);
    dion_atomic_fetch_add(c, a->win, next, 1024, 1);
    dion_fence(c);
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
    if (dion_barrier(c) != DION_SUCCESS) a->result[0]++;
}

static void dt_test_stats(dion_win_t win)
{
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_stats_args_t a = {dt_dev, dion_win_device(win), result};
    if (DT_LAUNCH(dt_stats_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    uint64_t r;
    dt_get(&r, result, 8);
    if (r) DT_FAIL("%llu calls failed", (unsigned long long)r);
    dion_ctx_stats_t s0, s1;
    DT_OK(dion_dev_stats(dt_comm, &dt_dev, 0, &s0));
    DT_OK(dion_dev_stats(dt_comm, &dt_dev, 1, &s1));
    if (s0.puts || s0.signals || s0.waits) DT_FAIL("context 0 counted operations it did not do");
    /* put_signal counts as a put and a signal; the barrier's own signals are not user signals */
    if (s1.puts != 4 || s1.put_bytes != 148 || s1.signals != 2 || s1.waits != 2 || s1.gets != 1 ||
        s1.get_bytes != 32 || s1.atomics != 1 || s1.fences != 1 || s1.quiets != 2 || s1.barriers != 1 ||
        s1.errors != 0 || s1.wait_timeouts != 0)
        DT_FAIL("stats: puts %llu bytes %llu signals %llu waits %llu gets %llu/%llu atomics %llu fences %llu "
                "quiets %llu "
                "barriers %llu errors %llu",
                (unsigned long long)s1.puts, (unsigned long long)s1.put_bytes, (unsigned long long)s1.signals,
                (unsigned long long)s1.waits, (unsigned long long)s1.gets, (unsigned long long)s1.get_bytes,
                (unsigned long long)s1.atomics, (unsigned long long)s1.fences, (unsigned long long)s1.quiets,
                (unsigned long long)s1.barriers, (unsigned long long)s1.errors);
    dion_ctx_stats_t bad;
    if (dion_dev_stats(dt_comm, &dt_dev, 4, &bad) != DION_ERR_INVALID_ARG) DT_FAIL("ctx 4 of 4 accepted");
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
}

static void *dt_abort_later(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    dion_comm_abort(dt_comm);
    return NULL;
}

/* Every rank waits forever; rank 0 aborts from another host thread; every wait and quiet must end. */
static void dt_test_abort(void)
{
    dion_dev_t dev;
    dion_dev_attr_t attr = {64, 1, UINT64_MAX, 0}; /* no timeout: only the abort can end the wait */
    DT_OK(dion_dev_create(dt_comm, &attr, &dev));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    DT_OK(dion_comm_barrier(dt_comm));
    pthread_t t;
    if (dt_rank == 0) pthread_create(&t, NULL, dt_abort_later, NULL);
    dt_wait_args_t a = {dev, result};
    if (DT_LAUNCH(dt_wait_forever_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    if (dt_rank == 0) pthread_join(t, NULL);
    uint64_t r[3];
    dt_get(r, result, sizeof r);
    if (r[0] != DION_ERR_ABORTED || r[2] != DION_ERR_ABORTED)
        DT_FAIL("after dion_comm_abort: wait returned %s and quiet %s; both must be DION_ERR_ABORTED",
                dion_status_string((dion_status_t)r[0]), dion_status_string((dion_status_t)r[2]));
    /* The bootstrap knows too: a host barrier fails instead of hanging. */
    if (dion_comm_barrier(dt_comm) == DION_SUCCESS) DT_FAIL("a barrier after dion_comm_abort succeeded");
    dt_free(result);
    dion_dev_destroy(dt_comm, &dev);
}

/* Error completions over gdaki (the softnic model), from device code: every rank puts to rank ^ 1.
 *   inject K: K puts of 4 KiB, the K-th failed by the model (DION_SOFTNIC_INJECT=remote_access@K);
 *   oob:      a put, then one past the end of the peer's window (no DION_CHECK): the model's key check.
 * quiet returns DION_ERR_REMOTE_ACCESS, and at once on the failed QP afterwards; dion_dev_check names the QP,
 * the peer and the syndrome; the puts before the failed one landed whole and the failed one wrote nothing. */
#define DT_NF_CHUNK  4096u
#define DT_NF_WINDOW (1u << 20)

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int mode, k;
    uint64_t *result; /* [0] first quiet, [1] quiet after the failure, [2] its time in ns */
} dt_nf_args_t;

DT_KERNEL(dt_nf_kernel, dt_nf_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int peer = a->dev.rank ^ 1;
    if (a->mode == 0) {
        for (int i = 0; i < a->k; i++)
            dion_put(c, a->win, peer, (size_t)i * DT_NF_CHUNK, a->win,
                     DT_NF_WINDOW / 2 + (size_t)i * DT_NF_CHUNK, DT_NF_CHUNK);
    } else {
        dion_put(c, a->win, peer, 0, a->win, DT_NF_WINDOW / 2, DT_NF_CHUNK);
        dion_put(c, a->win, peer, DT_NF_WINDOW - 8, a->win, DT_NF_WINDOW / 2, 64);
    }
    a->result[0] = (uint64_t)dion_quiet(c);
    uint64_t t0 = dion__time_ns();
    dion_put(c, a->win, peer, 0, a->win, DT_NF_WINDOW / 2, 8);
    a->result[1] = (uint64_t)dion_quiet(c);
    a->result[2] = dion__time_ns() - t0;
}

static void dt_nf_expect(const char *text, const char *words)
{
    if (!strstr(text, words)) DT_FAIL("dion_dev_check does not say \"%s\": %s", words, text);
}

static void dt_test_netfault(int mode, int k)
{
    if (dt_n % 2) {
        DT_FAIL("netfault pairs rank r with r ^ 1: run an even number of ranks");
        return;
    }
    if (mode == 0 &&
        (!getenv("DION_SOFTNIC_INJECT") || k < 1 || (size_t)k * DT_NF_CHUNK > DT_NF_WINDOW / 2)) {
        DT_FAIL("netfault inject K: set DION_SOFTNIC_INJECT=remote_access@K, 1 <= K <= %u",
                DT_NF_WINDOW / 2 / DT_NF_CHUNK);
        return;
    }
    int peer = dt_rank ^ 1;
    void *base = NULL;
    dion_win_t win;
    DT_OK(dion_win_alloc(dt_comm, DT_NF_WINDOW, DT_ON_HOST, &base, &win));
    dion_dev_t dev;
    DT_OK(dion_dev_create(dt_comm, NULL, &dev));
    /* peer_inline: the host's copy of the first peers' entries (peers may be GPU memory) */
    if (!(dev.flags & DION_DEVF_GDAKI) || peer >= DION_DEV_INLINE_PEERS ||
        dev.peer_inline[peer].transport != DION_TRANSPORT_GDAKI) {
        DT_FAIL("rank %d is not reached through gdaki (DION_TRANSPORT=gdaki DION_GDAKI_NIC=softnic)", peer);
        dion_dev_destroy(dt_comm, &dev);
        dion_win_destroy(win);
        return;
    }
    uint8_t *host = (uint8_t *)calloc(DT_NF_WINDOW, 1);
    for (size_t i = DT_NF_WINDOW / 2; i < DT_NF_WINDOW; i++) host[i] = dt_byte(dt_rank, 77, i);
    dt_put(base, host, DT_NF_WINDOW);
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_nf_args_t a = {dev, dion_win_device(win), mode, k, result};
    if (DT_LAUNCH(dt_nf_kernel, 1, 32, &a)) DT_FAIL("launch failed");
    uint64_t r[3];
    dt_get(r, result, sizeof r);
    if (r[0] != DION_ERR_REMOTE_ACCESS || r[1] != DION_ERR_REMOTE_ACCESS)
        DT_FAIL("quiet returned %s, then %s on the failed QP; both must be DION_ERR_REMOTE_ACCESS",
                dion_status_string((dion_status_t)r[0]), dion_status_string((dion_status_t)r[1]));
    if (r[2] > 1000000000ull) DT_FAIL("a put and quiet on the failed QP took %.3f s", (double)r[2] / 1e9);
    dion_status_t ck = dion_dev_check(dt_comm, &dev);
    char text[1024];
    snprintf(text, sizeof text, "%s", dion_last_error());
    if (ck != DION_ERR_REMOTE_ACCESS) DT_FAIL("dion_dev_check returned %s: %s", dion_status_string(ck), text);
    char who[32];
    snprintf(who, sizeof who, "to rank %d", peer);
    dt_nf_expect(text, "gdaki QP 0x");
    dt_nf_expect(text, who);
    dt_nf_expect(text, "syndrome 0x13");
    dt_nf_expect(text, "remote access error");
    dt_nf_expect(text, mode == 0 ? "injected by DION_SOFTNIC_INJECT" : "names no registration");
    if (dt_rank == 0) printf("  rank 0: %s\n", text);
    DT_OK(dion_comm_barrier(dt_comm));
    /* what the peer's puts left in this rank's window */
    dt_get(host, base, DT_NF_WINDOW / 2);
    int landed = mode == 0 ? k - 1 : 1;
    for (int i = 0; i < landed; i++)
        for (size_t b = 0; b < DT_NF_CHUNK; b++) {
            size_t s = DT_NF_WINDOW / 2 + (size_t)i * DT_NF_CHUNK + b;
            if (host[(size_t)i * DT_NF_CHUNK + b] != dt_byte(peer, 77, s)) {
                DT_FAIL("put %d from rank %d did not land whole (byte %zu)", i, peer, b);
                break;
            }
        }
    for (size_t b = (size_t)landed * DT_NF_CHUNK; b < DT_NF_WINDOW / 2; b++)
        if (host[b]) {
            DT_FAIL("byte %zu of the window changed, past the puts that completed before the failure", b);
            break;
        }
    DT_OK(dion_comm_barrier(dt_comm));
    free(host);
    dt_free(result);
    dion_dev_destroy(dt_comm, &dev);
    DT_OK(dion_win_destroy(win));
}

/* Every rank streams put_signal to its successor and quiets every 16 (thread 0) while thread 32 waits on a
 * signal nobody completes; both end only with an error. */
typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t *result; /* [0] wait status, [1] quiet status, [2] put_signals issued */
} dt_pf_stream_args_t;

DT_KERNEL(dt_pf_stream_kernel, dt_pf_stream_args_t)
{
    uint32_t t = dion__block_thread();
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, next = (me + 1) % a->dev.nranks;
    if (t == 0) {
        uint64_t start = dion__time_ns(), k = 0;
        dion_status_t st = DION_SUCCESS;
        while (st == DION_SUCCESS && dion__time_ns() - start < 60000000000ull) {
            k++;
            dion_put_signal(c, a->win, next, 4096 + (k % 64) * 64, a->win, 0, 64, 1, DION_SIG_ADD, 1);
            if ((k & 15) == 0) st = dion_quiet(c);
        }
        a->result[1] = (uint64_t)st;
        a->result[2] = k;
    } else if (t == 32) {
        uint64_t seen = 0;
        a->result[0] = (uint64_t)dion_wait(c, 2, DION_CMP_EQ, UINT64_MAX, &seen);
    }
}

static void dt_pf_sigalrm(int sig)
{
    (void)sig;
    raise(SIGKILL); /* kill -9 in the middle of the stream */
}

/* A rank dies while the others wait on the device: their waits must end with DION_ERR_PEER_FAILED, and the
 * host learns which rank. Ranks are forked here and meet through a unique id (dionrun would stop them).
 * stream: the rank dies in the middle of a put_signal stream; survivors' waits and quiets must both fail. */
/* Survivors leave together: each says it is done, then waits for the parent's word, so that no survivor's
 * exit (its links closing) is seen by another survivor still checking what it reports (it would name the
 * survivor that exited instead of the killed rank). Bounded: a missing word ends the wait after 60 s. */
static int dt_pf_done[2] = {-1, -1}, dt_pf_go[2] = {-1, -1};

static void dt_pf_leave(int code)
{
    fflush(stdout);
    char b = 1;
    if (write(dt_pf_done[1], &b, 1) == 1) {
        struct pollfd pf = {dt_pf_go[0], POLLIN, 0};
        if (poll(&pf, 1, 60000) == 1 && read(dt_pf_go[0], &b, 1) != 1) code = code ? code : 1;
    }
    _exit(code);
}

static int dt_runner_init(void);
static int dt_one_rank_per_gpu(int nranks);
static int dt_peerfail(int n, int stream)
{
    /* Children are forked before the parent starts the bootstrap root's thread (forking a process with
     * running threads can leave locks held in the child); the id reaches them through a pipe. */
    dion_unique_id_t id;
    pid_t *pids = (pid_t *)calloc((size_t)n, sizeof *pids);
    int fds[2];
    if (pipe(fds) != 0 || pipe(dt_pf_done) != 0 || pipe(dt_pf_go) != 0) return 1;
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] != 0) continue;
        close(fds[1]);
        close(dt_pf_done[0]);
        close(dt_pf_go[1]);
        size_t got = 0;
        while (got < sizeof id) {
            ssize_t k = read(fds[0], (char *)&id + got, sizeof id - got);
            if (k <= 0) _exit(3);
            got += (size_t)k;
        }
        dt_rank = r;
        dt_n = n;
        int rc = dt_runner_init();
        if (rc) _exit(rc);
        DT_OK(dion_comm_init_rank(&dt_comm, n, &id, r));
        dion_dev_t dev;
        dion_dev_attr_t attr = {64, 1, UINT64_MAX, 0};
        void *wbase = NULL;
        dion_win_t win = NULL;
        if (stream) DT_OK(dion_win_alloc(dt_comm, 1 << 16, DT_ON_HOST, &wbase, &win));
        DT_OK(dion_dev_create(dt_comm, &attr, &dev));
        uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
        DT_OK(dion_comm_barrier(dt_comm));
        if (stream) {
            if (r == n - 1) {
                signal(SIGALRM, dt_pf_sigalrm);
                alarm(1);
            }
            double t0 = dt_now();
            dt_pf_stream_args_t a = {dev, dion_win_device(win), result};
            if (DT_LAUNCH(dt_pf_stream_kernel, 1, 64, &a)) DT_FAIL("launch failed");
            double dt = dt_now() - t0;
            uint64_t res[3];
            dt_get(res, result, sizeof res);
            if (res[0] != DION_ERR_PEER_FAILED)
                DT_FAIL("wait returned %s, expected DION_ERR_PEER_FAILED",
                        dion_status_string((dion_status_t)res[0]));
            if (res[1] == DION_SUCCESS) DT_FAIL("the put_signal stream's quiets never failed");
            if (dt > 40) DT_FAIL("the survivors' device calls took %.1f s to fail", dt);
            char want[32];
            snprintf(want, sizeof want, "rank %d", n - 1);
            dion_status_t st = dion_dev_check(dt_comm, &dev);
            if (st == DION_SUCCESS || !strstr(dion_last_error(), want))
                DT_FAIL("dion_dev_check: %s: %s (should name %s)", dion_status_string(st), dion_last_error(),
                        want);
            printf(
                "rank %d: %llu put_signal, then quiet returned %s and wait %s after %.2f s; dion_dev_check: "
                "%s\n",
                r, (unsigned long long)res[2], dion_status_string((dion_status_t)res[1]),
                dion_status_string((dion_status_t)res[0]), dt, dion_last_error());
            dt_pf_leave(dt_failures ? 1 : 0);
        }
        if (r == n - 1) {
            struct timespec ts = {0, 200000000};
            nanosleep(&ts, NULL);
            raise(SIGKILL);
        }
        double t0 = dt_now();
        dt_wait_args_t a = {dev, result};
        if (DT_LAUNCH(dt_wait_forever_kernel, 1, 1, &a)) DT_FAIL("launch failed");
        uint64_t res[3];
        dt_get(res, result, sizeof res);
        if (res[0] != DION_ERR_PEER_FAILED)
            DT_FAIL("wait returned %s, expected DION_ERR_PEER_FAILED",
                    dion_status_string((dion_status_t)res[0]));
        char want[32];
        snprintf(want, sizeof want, "rank %d", n - 1);
        dion_status_t st = dion_comm_barrier(dt_comm);
        if (st == DION_SUCCESS || !strstr(dion_last_error(), want))
            DT_FAIL("host barrier: %s: %s (should name %s)", dion_status_string(st), dion_last_error(), want);
        printf("rank %d: device wait ended with DION_ERR_PEER_FAILED after %.2f s; host: %s\n", r,
               dt_now() - t0, dion_last_error());
        dt_pf_leave(dt_failures ? 1 : 0);
    }
    close(fds[0]);
    close(dt_pf_done[1]);
    close(dt_pf_go[0]);
    DT_OK(dion_get_unique_id(&id));
    for (int r = 0; r < n; r++)
        if (write(fds[1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
    close(fds[1]);
    /* every survivor's word (or the end of the pipe once all are gone, or 90 s), then they may leave */
    double until = dt_now() + 90;
    for (int got = 0; got < n - 1 && dt_now() < until;) {
        struct pollfd pf = {dt_pf_done[0], POLLIN, 0};
        char b;
        if (poll(&pf, 1, 1000) == 1 && read(dt_pf_done[0], &b, 1) != 1) break;
        if (pf.revents & POLLIN) got++;
    }
    signal(SIGPIPE, SIG_IGN); /* survivors that ended early (a skip, a failure) read no word */
    for (int r = 0; r < n - 1; r++) {
        char b = 1;
        if (write(dt_pf_go[1], &b, 1) != 1) break;
    }
    close(dt_pf_go[1]);
    close(dt_pf_done[0]);
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code == 77) return 77;
        if (code != (r == n - 1 ? 128 + SIGKILL : 0)) {
            fprintf(stderr, "FAIL: rank %d ended with %d\n", r, code);
            bad++;
        }
    }
    free(pids);
    printf("%s: peer failure%s reported to all %d survivors\n", bad ? "FAIL" : "PASS",
           stream ? " during a put_signal stream" : "", n - 1);
    return bad ? 1 : 0;
}

/* ================================================================================================ */
/* 11. Packet puts: random sizes and unit-aligned offsets, many rounds per launch through the same slots  */
/*     with advancing (and wrapping) sequence numbers, thread / warp / block, both ring directions.      */

#define DT_PK_MAX    4096u            /* payload bytes at most */
#define DT_PK_STRIDE (DT_PK_MAX + 64) /* per round in the source and destination scratch */
#define DT_PK_SLOT                                                                                           \
    (DION_PACKET_SPAN(DT_PK_MAX) + 256) /* a slot: the largest message at the largest offset                 \
                                         */
#define DT_PK_REGION (1u << 20)         /* slots start here in the window, below DT_PUT_HALF */
#define DT_PK_ROUNDS 48

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int to;
    int group;
    uint32_t nslots, rounds, seq0;
    uint64_t *desc; /* per round: bytes, offset in the slot, misalignment of src and dst */
    char *src, *dst;
    uint64_t *result;
} dt_pk_args_t;

DT_KERNEL(dt_pk_kernel, dt_pk_args_t)
{
    dion_ctx_t c = dion_ctx(a->dev, 0);
    uint32_t t = dion__block_thread();
    if (!(a->group == 2 || (a->group == 1 && t < 32) || (a->group == 0 && t == 0))) return;
    uint32_t seq = a->seq0;
    for (uint32_t k = 0; k < a->rounds; k++) {
        uint64_t bytes = a->desc[3 * k], off = a->desc[3 * k + 1], mis = a->desc[3 * k + 2];
        /* The ring bounds how far a rank runs ahead of its receiver (nranks - 1 rounds): with nslots > that,
         * a slot is rewritten only after its receiver took the message. */
        size_t at = DT_PK_REGION + (size_t)(k % a->nslots) * DT_PK_SLOT + off;
        const char *src = a->src + (size_t)k * DT_PK_STRIDE + mis;
        char *dst = a->dst + (size_t)k * DT_PK_STRIDE + mis;
        dion_status_t st;
        if (a->group == 0) {
            dion_put_packet(c, a->win, a->to, at, src, bytes, seq);
            st = dion_wait_packet(c, a->win, at, dst, bytes, seq);
        } else if (a->group == 1) {
            dion_put_packet_warp(c, a->win, a->to, at, src, bytes, seq);
            st = dion_wait_packet_warp(c, a->win, at, dst, bytes, seq);
        } else {
            dion_put_packet_block(c, a->win, a->to, at, src, bytes, seq);
            st = dion_wait_packet_block(c, a->win, at, dst, bytes, seq);
        }
        if (st != DION_SUCCESS) { /* every thread of the group sees the same status */
            if (t == 0) a->result[0] = 1 + k, a->result[1] = (uint64_t)st;
            return;
        }
        seq = dion_packet_seq_next(seq);
    }
}

static void dt_test_packets(dion_win_t win, char *base)
{
    static const char *gname[] = {"thread", "warp", "block"};
    dt_rng_t rng = {777};
    int next = (dt_rank + 1) % dt_n, prev = (dt_rank + dt_n - 1) % dt_n;
    uint32_t nslots = (uint32_t)dt_n + 1;
    size_t scratch = (size_t)DT_PK_ROUNDS * DT_PK_STRIDE;
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    uint64_t *desc = (uint64_t *)dt_alloc(sizeof(uint64_t) * 3 * DT_PK_ROUNDS);
    char *src = (char *)dt_alloc(scratch), *dst = (char *)dt_alloc(scratch);
    uint8_t *host = (uint8_t *)malloc(scratch);
    uint64_t hdesc[3 * DT_PK_ROUNDS];
    /* The slots start zeroed once; later launches reuse them as the previous one left them. */
    memset(host, 0, (size_t)nslots * DT_PK_SLOT);
    dt_put(base + DT_PK_REGION, host, (size_t)nslots * DT_PK_SLOT);
    uint32_t seq = 0xffffffffu - 70; /* the sequence wraps past 0 during the test */
    for (int launch = 0; launch < 6; launch++) {
        int group = launch % 3, backward = launch / 3; /* both directions around the ring */
        int to = backward ? prev : next, from = backward ? next : prev;
        for (uint32_t k = 0; k < DT_PK_ROUNDS; k++) {
            uint64_t r = dt_range(&rng, 0, 3);
            hdesc[3 * k] = r == 0   ? dt_range(&rng, 1, 16)
                           : r == 1 ? dt_range(&rng, 17, 256)
                           : r == 2 ? dt_range(&rng, 1, DT_PK_MAX)
                                    : 8; /* one whole unit: a thread's fast case when aligned */
            hdesc[3 * k + 1] = DION_PACKET_UNIT * dt_range(&rng, 0, 15);
            hdesc[3 * k + 2] = dt_range(&rng, 0, 7) & (r == 3 ? 4 : 7); /* 8-byte aligned or not */
        }
        dt_put(desc, hdesc, sizeof hdesc);
        uint32_t s = seq;
        for (uint32_t k = 0; k < DT_PK_ROUNDS; k++, s = dion_packet_seq_next(s))
            for (uint64_t i = 0; i < DT_PK_STRIDE; i++)
                host[(size_t)k * DT_PK_STRIDE + i] =
                    i >= hdesc[3 * k + 2] && i - hdesc[3 * k + 2] < hdesc[3 * k]
                        ? dt_byte(dt_rank, s, i - hdesc[3 * k + 2])
                        : 0x5a;
        dt_put(src, host, scratch);
        memset(host, 0xa5, scratch);
        dt_put(dst, host, scratch);
        uint64_t zero[2] = {0, 0};
        dt_put(result, zero, sizeof zero);
        DT_OK(dion_comm_barrier(dt_comm));
        dt_pk_args_t a = {dt_dev, dion_win_device(win), to, group, nslots, DT_PK_ROUNDS, seq, desc, src, dst,
                          result};
        if (DT_LAUNCH(dt_pk_kernel, 1, group == 2 ? DT_BLOCK : 32, &a)) DT_FAIL("launch failed");
        uint64_t res[2];
        dt_get(res, result, sizeof res);
        if (res[0])
            DT_FAIL("%s packets: round %llu: wait returned %s", gname[group], (unsigned long long)res[0] - 1,
                    dion_status_string((dion_status_t)res[1]));
        dt_get(host, dst, scratch);
        s = seq;
        for (uint32_t k = 0; k < DT_PK_ROUNDS; k++, s = dion_packet_seq_next(s)) {
            uint64_t bytes = hdesc[3 * k], mis = hdesc[3 * k + 2];
            const uint8_t *got = host + (size_t)k * DT_PK_STRIDE;
            for (uint64_t i = 0; i < DT_PK_STRIDE; i++) {
                int in = i >= mis && i - mis < bytes;
                uint8_t want = in ? dt_byte(from, s, i - mis) : 0xa5;
                if (got[i] != want) {
                    DT_FAIL("%s packets %s, round %u (seq %u, %llu bytes at slot offset %llu): destination "
                            "byte %llu is 0x%02x, expected 0x%02x%s",
                            gname[group], backward ? "backward" : "forward", k, s, (unsigned long long)bytes,
                            (unsigned long long)hdesc[3 * k + 1], (unsigned long long)i, got[i], want,
                            in ? "" : " (outside the payload)");
                    break;
                }
            }
        }
        seq = s;
        DT_OK(dion_comm_barrier(dt_comm));
    }
    free(host);
    dt_free(src);
    dt_free(dst);
    dt_free(desc);
    dt_free(result);
}

/* A packet that never comes: the wait (thread, block, a thread's one whole unit) times out with one record
 * naming the sequence. */
typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int group;
    uint64_t *result;
} dt_pk_to_args_t;

DT_KERNEL(dt_pk_timeout_kernel, dt_pk_to_args_t)
{
    dion_ctx_t c = dion_ctx(a->dev, 0);
    uint32_t t = dion__block_thread();
    uint64_t got[8]; /* group 2: a thread's one whole unit to an aligned destination (its fast case) */
    dion_status_t st = a->group == 1 ? dion_wait_packet_block(c, a->win, DT_PK_REGION, got, 64, 4242)
                       : t == 0 ? dion_wait_packet(c, a->win, DT_PK_REGION, got, a->group == 2 ? 8 : 64, 4242)
                                : DION_ERR_TIMEOUT;
    if (st == DION_ERR_TIMEOUT) dion__counter_add(&a->result[0], 1);
}

static void dt_test_packet_timeout(dion_win_t win)
{
    for (int group = 0; group < 3; group++) {
        dion_dev_t dev;
        dion_dev_attr_t attr = {64, 1, 200000000ull, 0}; /* 200 ms */
        DT_OK(dion_dev_create(dt_comm, &attr, &dev));
        uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
        dt_pk_to_args_t a = {dev, dion_win_device(win), group, result};
        unsigned threads = group == 1 ? DT_BLOCK : 1;
        double t0 = dt_now();
        if (DT_LAUNCH(dt_pk_timeout_kernel, 1, threads, &a)) DT_FAIL("launch failed");
        double dt = dt_now() - t0;
        uint64_t r = 0;
        dt_get(&r, result, sizeof r);
        if (r != threads) DT_FAIL("%llu of %u threads saw DION_ERR_TIMEOUT", (unsigned long long)r, threads);
        if (dt < 0.19 || dt > 10) DT_FAIL("the 200 ms packet wait took %.3f s", dt);
        dion_status_t st = dion_dev_check(dt_comm, &dev);
        if (st != DION_ERR_TIMEOUT || !strstr(dion_last_error(), "wait_packet") ||
            !strstr(dion_last_error(), "sequence 4242"))
            DT_FAIL("dion_dev_check: %s: %s", dion_status_string(st), dion_last_error());
        else if (dt_rank == 0 && group == 1)
            printf("  packet timeout: %s\n", dion_last_error());
        dt_free(result);
        DT_OK(dion_comm_barrier(dt_comm));
        DT_OK(dion_dev_destroy(dt_comm, &dev));
    }
}

/* ================================================================================================ */
/* 12. Local completion counters: dion_put_counted / dion_put_signal_counted, dion_counter_read / _wait.  */

#ifndef DT_CNT_ROUNDS
#define DT_CNT_ROUNDS 16
#endif
#define DT_CNT_MAX   12                /* operations per round at most */
#define DT_CNT_BYTES (128u << 10)      /* bytes per operation at most */
#define DT_CNT_SIG   48                /* signal: put_signals and the round's final signal */
#define DT_NO_COUNT  DION_NUM_COUNTERS /* an operation's counter field: a plain put or put_signal */

typedef struct {
    uint64_t src_off, dst_off, bytes;
    uint32_t counter; /* below DION_NUM_COUNTERS, or DT_NO_COUNT */
    uint32_t with_signal;
} dt_cnt_op_t;

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int peer;
    uint32_t ctx;
    int group; /* 0 thread, 1 warp, 2 block */
    uint32_t nops;
    const dt_cnt_op_t *ops; /* scratch memory */
    uint64_t expect_sig;    /* own DT_CNT_SIG at the end of the round */
    uint64_t *result;       /* [0] failures, [1] first failure's code, [2] its value, [3] the limit */
} dt_cnt_args_t;

DION_HD void dt_cnt_fail(uint64_t *result, uint64_t code, uint64_t value, uint64_t limit)
{
    if (!result[0]) result[1] = code, result[2] = value, result[3] = limit;
    result[0]++;
}

/* The group issues every operation; thread 0 checks after each that no counter runs ahead of the counted
 * calls made (p2p: that each equals them). Then, op by op, thread 0 waits until the op is counted and the
 * whole block writes over its source; only after that are the puts completed and the peer told. The peer
 * finding the original bytes proves that "source reusable" meant it. Last, the counts are exact and another
 * context's counters did not move. */
DT_KERNEL(dt_cnt_kernel, dt_cnt_args_t)
{
    dion_ctx_t c = dion_ctx(a->dev, a->ctx);
    dion_ctx_t other = dion_ctx(a->dev, (a->ctx + 1) % a->dev.num_contexts);
    uint32_t t = dion__block_thread(), nt = dion__block_size();
    int immediate = !(a->dev.flags & DION_DEVF_PROXY); /* p2p: counted when the call returns */
    int in_group = a->group == 2 || (a->group == 1 && t < 32) || (a->group == 0 && t == 0);
    uint64_t base[DION_NUM_COUNTERS], other0[DION_NUM_COUNTERS], want[DION_NUM_COUNTERS];
    if (t == 0)
        for (uint32_t k = 0; k < DION_NUM_COUNTERS; k++) {
            base[k] = dion_counter_read(c, k);
            other0[k] = dion_counter_read(other, k);
            want[k] = 0;
        }
    dion__group_sync(DION__BLOCK);
    for (uint32_t i = 0; i < a->nops; i++) {
        dt_cnt_op_t op = a->ops[i];
        if (in_group) {
            uint32_t k = op.counter;
            if (op.with_signal && k == DT_NO_COUNT) {
                dion_put_signal(c, a->win, a->peer, op.dst_off, a->win, op.src_off, op.bytes, DT_CNT_SIG,
                                DION_SIG_ADD, 1);
            } else if (op.with_signal) {
                if (a->group == 0)
                    dion_put_signal_counted(c, a->win, a->peer, op.dst_off, a->win, op.src_off, op.bytes,
                                            DT_CNT_SIG, DION_SIG_ADD, 1, k);
                else if (a->group == 1)
                    dion_put_signal_counted_warp(c, a->win, a->peer, op.dst_off, a->win, op.src_off, op.bytes,
                                                 DT_CNT_SIG, DION_SIG_ADD, 1, k);
                else
                    dion_put_signal_counted_block(c, a->win, a->peer, op.dst_off, a->win, op.src_off,
                                                  op.bytes, DT_CNT_SIG, DION_SIG_ADD, 1, k);
            } else if (k == DT_NO_COUNT) {
                dion_put(c, a->win, a->peer, op.dst_off, a->win, op.src_off, op.bytes);
            } else if (a->group == 0) {
                dion_put_counted(c, a->win, a->peer, op.dst_off, a->win, op.src_off, op.bytes, k);
            } else if (a->group == 1) {
                dion_put_counted_warp(c, a->win, a->peer, op.dst_off, a->win, op.src_off, op.bytes, k);
            } else {
                dion_put_counted_block(c, a->win, a->peer, op.dst_off, a->win, op.src_off, op.bytes, k);
            }
        }
        if (t == 0) {
            if (op.counter != DT_NO_COUNT) want[op.counter]++;
            for (uint32_t k = 0; k < DION_NUM_COUNTERS; k++) {
                uint64_t v = dion_counter_read(c, k) - base[k];
                if (v > want[k] || (immediate && v != want[k])) dt_cnt_fail(a->result, 1 + i, v, want[k]);
            }
        }
    }
    /* Counts of one thread's calls to one peer come in call order: once counter k reaches the ordinal of op i
     * among the calls on k, op i's source is written over at once, while later ones may still be read. */
    uint64_t ord[DION_NUM_COUNTERS] = {0};
    char *mine = dion__win_peer(a->win, a->dev.rank)->base;
    for (uint32_t i = 0; i < a->nops; i++) {
        dt_cnt_op_t op = a->ops[i];
        if (op.counter == DT_NO_COUNT) continue; /* not covered by a count: may still be read */
        if (t == 0) {
            dion_status_t st = dion_counter_wait(c, op.counter, base[op.counter] + ++ord[op.counter]);
            if (st != DION_SUCCESS) dt_cnt_fail(a->result, 100 + op.counter, (uint64_t)st, ord[op.counter]);
        }
        dion__group_sync(DION__BLOCK);
        for (uint64_t j = t; j < op.bytes; j += nt) mine[op.src_off + j] = (char)(0xee ^ (uint8_t)j);
    }
    if (t == 0)
        for (uint32_t k = 0; k < DION_NUM_COUNTERS; k++) {
            uint64_t v = dion_counter_read(c, k) - base[k];
            if (v != want[k]) dt_cnt_fail(a->result, 200 + k, v, want[k]); /* exact: never more */
            v = dion_counter_read(other, k);
            if (v != other0[k]) dt_cnt_fail(a->result, 300 + k, v, other0[k]);
        }
    dion__group_sync(DION__BLOCK);
    if (t == 0) {
        if (dion_quiet(c) != DION_SUCCESS) dt_cnt_fail(a->result, 400, 0, 0);
        dion_signal(c, a->peer, DT_CNT_SIG, DION_SIG_ADD, 1);
        uint64_t seen = 0;
        if (dion_wait(c, DT_CNT_SIG, DION_CMP_GE, a->expect_sig, &seen) != DION_SUCCESS)
            dt_cnt_fail(a->result, 500, seen, a->expect_sig);
    }
}

/* The key of operation i of round k in dt_byte: every rank draws the same operations. */
static uint64_t dt_cnt_key(int k, uint32_t i)
{
    return 100000u + (uint64_t)k * 16u + i;
}

static void dt_test_counted(dion_win_t win, char *base, int rounds, uint64_t half)
{
    static const char *gname[] = {"thread", "warp", "block"};
    static uint64_t sigs; /* DT_CNT_SIG keeps counting across calls */
    dt_rng_t rng = {4242};
    int next = (dt_rank + 1) % dt_n, prev = (dt_rank + dt_n - 1) % dt_n;
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_cnt_op_t ops[DT_CNT_MAX], *dops = (dt_cnt_op_t *)dt_alloc(sizeof ops);
    uint8_t *img = (uint8_t *)malloc(half), *got = (uint8_t *)malloc(half),
            *src = (uint8_t *)malloc(DT_CNT_BYTES);
    uint64_t counted = 0, plain = 0;
    for (int k = 0; k < rounds; k++) {
        uint32_t nops = (uint32_t)dt_range(&rng, 1, DT_CNT_MAX), nsig = 0;
        int group = (int)dt_range(&rng, 0, 2);
        uint64_t scur = 0, dcur = 64;
        for (uint32_t i = 0; i < nops; i++) {
            dt_cnt_op_t *o = &ops[i];
            o->bytes = dt_range(&rng, 0, 3) == 0 ? dt_range(&rng, 0, 64)
                                                 : (1ull << dt_range(&rng, 0, 16)) + dt_range(&rng, 0, 4095);
            if (o->bytes > DT_CNT_BYTES) o->bytes = DT_CNT_BYTES;
            o->src_off = scur + dt_range(&rng, 0, 31);
            scur = o->src_off + o->bytes;
            o->dst_off = half + dcur + dt_range(&rng, 1, 64);
            dcur = o->dst_off - half + o->bytes;
            o->counter = (uint32_t)dt_range(&rng, 0, DION_NUM_COUNTERS); /* DT_NO_COUNT now and then */
            o->with_signal = (uint32_t)dt_range(&rng, 0, 1);
            nsig += o->with_signal;
            if (o->counter == DT_NO_COUNT)
                plain++;
            else
                counted++;
        }
        uint64_t area = dcur + 64; /* destination bytes [half, half + area) are checked whole */
        /* own sources, a poisoned destination area, and the image of what the predecessor will put there */
        for (uint32_t i = 0; i < nops; i++) {
            for (uint64_t j = 0; j < ops[i].bytes; j++) src[j] = dt_byte(dt_rank, dt_cnt_key(k, i), j);
            dt_put(base + ops[i].src_off, src, ops[i].bytes);
        }
        memset(img, 0xa5, area);
        dt_put(base + half, img, area);
        for (uint32_t i = 0; i < nops; i++)
            for (uint64_t j = 0; j < ops[i].bytes; j++)
                img[ops[i].dst_off - half + j] = dt_byte(prev, dt_cnt_key(k, i), j);
        dt_put(dops, ops, sizeof(dt_cnt_op_t) * nops);
        uint64_t zero[4] = {0, 0, 0, 0};
        dt_put(result, zero, sizeof zero);
        sigs += nsig + 1;
        DT_OK(dion_comm_barrier(dt_comm));
        dt_cnt_args_t a = {
            dt_dev, dion_win_device(win), next, (uint32_t)k % dt_dev.num_contexts, group, nops, dops, sigs,
            result};
        if (DT_LAUNCH(dt_cnt_kernel, 1, group == 2 ? DT_BLOCK : 32, &a)) DT_FAIL("launch failed");
        uint64_t r[4];
        dt_get(r, result, sizeof r);
        if (r[0])
            DT_FAIL(
                "round %d (%s, %u ops): %llu failed checks; first: code %llu (1-99: a counter after op n-1 "
                "ran "
                "ahead of the calls or, on p2p, behind; 100+k: counter_wait(k) returned status; 200+k: "
                "counter k not exact; 300+k: another context's counter moved; 400 quiet; 500 wait), value "
                "%llu, limit %llu",
                k, gname[group], nops, (unsigned long long)r[0], (unsigned long long)r[1],
                (unsigned long long)r[2], (unsigned long long)r[3]);
        DT_OK(dion_comm_barrier(dt_comm));
        dt_get(got, base + half, area);
        for (uint64_t j = 0; j < area; j++)
            if (got[j] != img[j]) {
                int in = 0;
                for (uint32_t i = 0; i < nops; i++)
                    if (ops[i].dst_off - half <= j && j < ops[i].dst_off - half + ops[i].bytes) {
                        DT_FAIL(
                            "round %d (%s): op %u (%s%s, counter %u, %llu bytes, src %llu -> dst %llu): byte "
                            "%llu is 0x%02x, expected 0x%02x%s",
                            k, gname[group], i, ops[i].with_signal ? "put_signal" : "put",
                            ops[i].counter == DT_NO_COUNT ? "" : "_counted", ops[i].counter,
                            (unsigned long long)ops[i].bytes, (unsigned long long)ops[i].src_off,
                            (unsigned long long)ops[i].dst_off,
                            (unsigned long long)(j - (ops[i].dst_off - half)), got[j], img[j],
                            (got[j] ^ 0xee) == (uint8_t)(j - (ops[i].dst_off - half))
                                ? ": the overwritten source arrived, so the count came before the source "
                                  "was read"
                                : "");
                        in = 1;
                    }
                if (!in)
                    DT_FAIL("round %d: byte %llu of the destination area, outside every put, changed", k,
                            (unsigned long long)j);
                break;
            }
        DT_OK(dion_comm_barrier(dt_comm));
    }
    if (dt_rank == 0)
        printf("  counted: %llu counted and %llu plain puts checked\n", (unsigned long long)counted,
               (unsigned long long)plain);
    free(img);
    free(got);
    free(src);
    dt_free(dops);
    dt_free(result);
}

/* A counter wait that cannot succeed times out with a record naming the counter. One counted put is made
 * first, so the wait's target (two above the start) is one past what the counter reaches. */
typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t *result; /* [0] the wait's status, [1] the count after it, [2] the count before the put */
} dt_cnt_to_args_t;

DT_KERNEL(dt_cnt_timeout_kernel, dt_cnt_to_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int next = (a->dev.rank + 1) % a->dev.nranks;
    uint64_t before = dion_counter_read(c, 3);
    dion_put_counted(c, a->win, next, 4096, a->win, 0, 8, 3);
    a->result[0] = (uint64_t)dion_counter_wait(c, 3, before + 2);
    a->result[1] = dion_counter_read(c, 3) - before;
    a->result[2] = before;
    dion_quiet(c);
}

static void dt_test_counter_timeout(dion_win_t win)
{
    dion_dev_t dev;
    dion_dev_attr_t attr = {64, 1, 300000000ull, 0}; /* 300 ms */
    DT_OK(dion_dev_create(dt_comm, &attr, &dev));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_cnt_to_args_t a = {dev, dion_win_device(win), result};
    double t0 = dt_now();
    if (DT_LAUNCH(dt_cnt_timeout_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    double dt = dt_now() - t0;
    uint64_t r[3];
    dt_get(r, result, sizeof r);
    if (r[0] != DION_ERR_TIMEOUT)
        DT_FAIL("counter wait returned %s, expected DION_ERR_TIMEOUT",
                dion_status_string((dion_status_t)r[0]));
    if (r[1] != 1 || r[2] != 0)
        DT_FAIL("a new handle's counter 3 went from %llu to %llu over one counted put",
                (unsigned long long)r[2], (unsigned long long)(r[2] + r[1]));
    if (dt < 0.29 || dt > 10) DT_FAIL("the 300 ms counter wait took %.3f s", dt);
    dion_status_t st = dion_dev_check(dt_comm, &dev);
    if (st != DION_ERR_TIMEOUT || !strstr(dion_last_error(), "counter_wait") ||
        !strstr(dion_last_error(), "local counter 3 never reached 2"))
        DT_FAIL("dion_dev_check: %s: %s", dion_status_string(st), dion_last_error());
    else if (dt_rank == 0)
        printf("  counter timeout: %s\n", dion_last_error());
    dt_free(result);
    DT_OK(dion_comm_barrier(dt_comm));
    DT_OK(dion_dev_destroy(dt_comm, &dev));
}

/* DION_CHECK=1: a counter index at or above DION_NUM_COUNTERS is recorded, names the limit, and nothing is
 * written or counted. */
DT_KERNEL(dt_cnt_check_kernel, dt_check_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int next = (a->dev.rank + 1) % a->dev.nranks;
    uint64_t before[DION_NUM_COUNTERS];
    for (uint32_t k = 0; k < DION_NUM_COUNTERS; k++) before[k] = dion_counter_read(c, k);
    dion_put_counted(c, a->win, next, 0, a->win, 64, 8, DION_NUM_COUNTERS);                     /* 1 */
    dion_put_signal_counted(c, a->win, next, 0, a->win, 64, 8, 0, DION_SIG_ADD, 1, 1000);       /* 2 */
    if (dion_counter_wait(c, DION_NUM_COUNTERS + 1, 1) != DION_ERR_INVALID_ARG) a->result[0]++; /* 3 */
    if (dion_counter_read(c, 77) != 0) a->result[0]++;                                          /* 4 */
    for (uint32_t k = 0; k < DION_NUM_COUNTERS; k++)
        if (dion_counter_read(c, k) != before[k]) a->result[0]++;
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
}

static void dt_test_counter_check(dion_win_t win, char *base, size_t size)
{
    uint8_t *host = (uint8_t *)malloc(size), *back = (uint8_t *)malloc(size);
    for (size_t i = 0; i < size; i++) host[i] = (uint8_t)(0x3c ^ i);
    dt_put(base, host, size);
    while (dion_dev_check(dt_comm, &dt_dev) != DION_SUCCESS) {
    }
    DT_OK(dion_comm_barrier(dt_comm));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_check_args_t a = {dt_dev, dion_win_device(win), result};
    if (DT_LAUNCH(dt_cnt_check_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    uint64_t res = 0;
    dt_get(&res, result, sizeof res);
    if (res)
        DT_FAIL("DION_CHECK: %llu counter calls returned or counted other than expected",
                (unsigned long long)res);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_get(back, base, size);
    if (memcmp(host, back, size) != 0)
        DT_FAIL("DION_CHECK: a rejected counted put wrote into this rank's window");
    dion_status_t st = dion_dev_check(dt_comm, &dt_dev);
    const char *msg = dion_last_error();
    char want[96];
    snprintf(want, sizeof want, "local counter %u is not below DION_NUM_COUNTERS=%u", DION_NUM_COUNTERS,
             DION_NUM_COUNTERS);
    if (st != DION_ERR_INVALID_ARG)
        DT_FAIL("dion_dev_check returned %s, expected DION_ERR_INVALID_ARG", dion_status_string(st));
    else if (!strstr(msg, want) || !strstr(msg, "put:") || !strstr(msg, "and 3 more"))
        DT_FAIL("dion_dev_check's sentence does not name the counter and its limit and count the rest: %s",
                msg);
    if (dt_rank == 0) printf("  DION_CHECK: %s\n", msg);
    free(host);
    free(back);
    dt_free(result);
    DT_OK(dion_comm_barrier(dt_comm));
}

/* 13. put_signal stress: random sizes (1 B .. 1 MiB), random offsets, thread / warp / block senders (and */
/*     put + signal), a few messages in flight; the receiver checks every message's bytes as soon as its  */
/*     signal shows it.                                                                                   */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint32_t count;
    uint32_t seed;
    uint64_t
        *result; /* [0] failures, [1] first bad message, [2] its bad byte, [3] bytes, [4] wakes, [8..9] */
} dt_stress_args_t;

#define DT_ST_MAX   (1ull << 20)             /* largest message */
#define DT_ST_SLOT  (DT_ST_MAX + 4096)       /* a message sits at a random offset below 4096 of a slot */
#define DT_ST_AHEAD 4ull                     /* messages in flight: landing slots at the receiver */
#define DT_ST_SRC   (2 * DT_ST_AHEAD)        /* source slots: a slot is rewritten only after a quiet */
#define DT_ST_LAND  (DT_ST_SRC * DT_ST_SLOT) /* landing slots start here */
#define DT_ST_WIN   (DT_ST_LAND + DT_ST_AHEAD * DT_ST_SLOT)
#define DT_ST_SIG   40u /* SET k when message k is in (one signal: a later value covers earlier messages) */
#define DT_ST_ACK   41u /* the receiver's SET k once it checked message k */

/* Message k of sender: size 2^e .. 2^(e+1) for e uniform in 0..20 (so small and large are both common),
 * unaligned source and destination offsets. Both sides derive it from the seed. */
DION_HD void dt_st_msg(uint32_t seed, int sender, uint64_t k, uint64_t *bytes, uint64_t *soff, uint64_t *doff)
{
    uint64_t r = dt_mix(((uint64_t)seed << 40) ^ ((uint64_t)sender << 32) ^ k);
    uint64_t lo = 1ull << (r % 21), b = lo + (r >> 8) % lo;
    *bytes = b > DT_ST_MAX ? DT_ST_MAX : b;
    *soff = (k % DT_ST_SRC) * DT_ST_SLOT + (r >> 32) % 4096;
    *doff = DT_ST_LAND + (k % DT_ST_AHEAD) * DT_ST_SLOT + (r >> 48) % 4096;
}

DT_KERNEL(dt_stress_kernel, dt_stress_args_t)
{
    uint32_t t = dion__block_thread(), nt = dion__block_size();
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n, prev = (me + n - 1) % n;
    char *mine = dion__win_peer(a->win, me)->base;
    /* per block: [0] the value the leader saw, [1] stop (read by every thread after a block sync) */
    volatile uint64_t *shared = a->result + 8 + 4 * dion__block_index();
    if (dion__block_index() == 0) { /* the sender */
        dion_ctx_t c = dion_ctx(a->dev, 0);
        for (uint64_t k = 1; k <= a->count; k++) {
            uint64_t bytes, soff, doff;
            dt_st_msg(a->seed, me, k, &bytes, &soff, &doff);
            if (t == 0) {
                /* landing slot k % AHEAD is free once the receiver checked message k - AHEAD */
                if (k > DT_ST_AHEAD &&
                    dion_wait(c, DT_ST_ACK, DION_CMP_GE, k - DT_ST_AHEAD, NULL) != DION_SUCCESS) {
                    a->result[0]++;
                    shared[1] = 1;
                }
                /* source slot k % SRC last carried message k - SRC: a quiet since then made it reusable */
                if (k % DT_ST_AHEAD == 1 && k > DT_ST_AHEAD && dion_quiet(c) != DION_SUCCESS) a->result[0]++;
            }
            dion__group_sync(DION__BLOCK);
            if (shared[1]) return;
            uint64_t *w = (uint64_t *)mine;
            for (uint64_t i = (soff >> 3) + t; i <= (soff + bytes - 1) >> 3; i += nt)
                w[i] = dt_mix(((uint64_t)me << 48) ^ (k << 32) ^ i);
            dion__group_sync(DION__BLOCK);
            uint32_t g = (uint32_t)(k % 4);
            if (g == 3 && t == 0) { /* a put, then a (release) signal: the signal must not overtake the put */
                dion_put(c, a->win, next, doff, a->win, soff, bytes);
                dion_signal(c, next, DT_ST_SIG, DION_SIG_SET, k);
            } else if (g == 2)
                dion_put_signal_block(c, a->win, next, doff, a->win, soff, bytes, DT_ST_SIG, DION_SIG_SET, k);
            else if (g == 1 && t < 32)
                dion_put_signal_warp(c, a->win, next, doff, a->win, soff, bytes, DT_ST_SIG, DION_SIG_SET, k);
            else if (g == 0 && t == 0)
                dion_put_signal(c, a->win, next, doff, a->win, soff, bytes, DT_ST_SIG, DION_SIG_SET, k);
        }
        if (t == 0 && dion_quiet(c) != DION_SUCCESS) a->result[0]++;
        return;
    }
    /* the receiver (block 1): the leader waits, the block checks */
    dion_ctx_t c = dion_ctx(a->dev, 1);
    uint64_t last = 0;
    while (last < a->count) {
        if (t == 0) {
            uint64_t v = 0;
            if (dion_wait(c, DT_ST_SIG, DION_CMP_GT, last, &v) != DION_SUCCESS || v > a->count) {
                a->result[0]++;
                shared[1] = 1;
            }
            shared[0] = v;
            a->result[4]++;
        }
        dion__group_sync(DION__BLOCK);
        if (shared[1]) return;
        uint64_t v = shared[0];
        for (uint64_t k = last + 1; k <= v; k++) {
            uint64_t bytes, soff, doff;
            dt_st_msg(a->seed, prev, k, &bytes, &soff, &doff);
            const uint8_t *got = (const uint8_t *)mine + doff;
            for (uint64_t j = t; j < bytes; j += nt)
                if (got[j] != dt_byte(prev, k, soff + j)) {
                    if (dion__counter_add(&a->result[0], 1) == 0) {
                        a->result[1] = k;
                        a->result[2] = j;
                    }
                    break;
                }
            if (t == 0) a->result[3] += bytes;
        }
        dion__group_sync(DION__BLOCK); /* every byte of messages <= v read before the slots are handed back */
        last = v;
        if (t == 0) dion_signal(c, prev, DT_ST_ACK, DION_SIG_SET, v);
    }
}

static void dt_test_stress(uint32_t count)
{
    void *base = NULL;
    dion_win_t w;
    DT_OK(dion_win_alloc(dt_comm, DT_ST_WIN, DT_ON_HOST, &base, &w));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_stress_args_t a = {dt_dev, dion_win_device(w), count, 0x5eed0000u + (uint32_t)count, result};
    if (DT_LAUNCH(dt_stress_kernel, 2, DT_BLOCK, &a)) DT_FAIL("launch failed");
    uint64_t r[5];
    dt_get(r, result, sizeof r);
    if (r[0])
        DT_FAIL(
            "stress: %llu failures; first: message %llu from rank %d differs at byte %llu (or a wait, quiet "
            "or launch failed: see the error records)",
            (unsigned long long)r[0], (unsigned long long)r[1], (dt_rank + dt_n - 1) % dt_n,
            (unsigned long long)r[2]);
    else if (dt_rank == 0)
        printf("  stress: %u put_signal of 1 B..1 MiB (%.1f MB) checked at the target, receiver woke %llu "
               "times\n",
               count, (double)r[3] / 1e6, (unsigned long long)r[4]);
    dion_status_t st = dion_dev_check(dt_comm, &dt_dev);
    if (st != DION_SUCCESS) DT_FAIL("dion_dev_check: %s: %s", dion_status_string(st), dion_last_error());
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
    DT_OK(dion_win_destroy(w));
}

/* ================================================================================================ */
/* 14. Many producers into one window: every thread of several blocks puts a random range (1..512 B at a  */
/*     random offset, a quarter of them whole slots so that neighbours touch) of its own slot, as         */
/*     put_signal ADD or as put then signal ADD, round after round; the receiver's blocks wait for a      */
/*     round's signals and check every producer's bytes. Over the proxy with staged windows this drives   */
/*     notices from many rings to one peer (merging, batching, acknowledgements: docs/backends/proxy.md). */

#define DT_MP_SLOT 512u
#define DT_MP_MAXB 16u /* sender blocks at most (signals 0..15 count data, 16..31 acknowledge rounds) */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint32_t blocks, rounds, seed;
    uint64_t
        *result; /* [0] failures, [1] first bad round, [2] its producer, [3] its byte, [4] bytes checked */
} dt_mp_args_t;

/* Producer p's range in round k of sender rank s: [off, off + bytes) of its slot. */
DION_HD void dt_mp_range(uint32_t seed, int s, uint64_t k, uint64_t p, uint64_t *off, uint64_t *bytes)
{
    uint64_t r = dt_mix(((uint64_t)seed << 44) ^ ((uint64_t)s << 36) ^ (k << 20) ^ p);
    if ((r & 3) == 0) {
        *off = 0;
        *bytes = DT_MP_SLOT;
        return;
    }
    *bytes = 1 + (r >> 8) % DT_MP_SLOT;
    *off = (r >> 24) % (DT_MP_SLOT - *bytes + 1);
}

/* Slot of producer p for round parity k % 2: sources first, landing slots after them. */
DION_HD uint64_t dt_mp_slot(uint64_t producers, int land, uint64_t k, uint64_t p)
{
    return ((uint64_t)land * 2 * producers + (k % 2) * producers + p) * DT_MP_SLOT;
}

DT_KERNEL(dt_mp_kernel, dt_mp_args_t)
{
    uint32_t t = dion__block_thread(), nt = dion__block_size(), b = dion__block_index();
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n, prev = (me + n - 1) % n;
    uint64_t producers = (uint64_t)a->blocks * nt;
    char *mine = dion__win_peer(a->win, me)->base;
    volatile uint64_t *stop = a->result + 8 + b;
    if (b < a->blocks) { /* a sender block: each thread is a producer */
        dion_ctx_t c = dion_ctx(a->dev, b % a->dev.num_contexts);
        uint64_t p = (uint64_t)b * nt + t;
        for (uint64_t k = 1; k <= a->rounds; k++) {
            if (t == 0 && k > 2) { /* the landing slots of parity k % 2 were checked (round k - 2) */
                if (dion_wait(c, DT_MP_MAXB + b, DION_CMP_GE, k - 2, NULL) != DION_SUCCESS ||
                    dion_quiet(c) != DION_SUCCESS) { /* and the sources of round k - 2 are free */
                    dion__counter_add(&a->result[0], 1);
                    *stop = 1;
                }
            }
            dion__group_sync(DION__BLOCK);
            if (*stop) return;
            uint64_t off, bytes;
            dt_mp_range(a->seed, me, k, p, &off, &bytes);
            uint64_t src = dt_mp_slot(producers, 0, k, p), dst = dt_mp_slot(producers, 1, k, p);
            for (uint64_t j = off; j < off + bytes; j++)
                mine[src + j] = (char)dt_byte(me, k, p * DT_MP_SLOT + j);
            if ((p + k) % 2)
                dion_put_signal(c, a->win, next, dst + off, a->win, src + off, bytes, b, DION_SIG_ADD, 1);
            else {
                dion_put(c, a->win, next, dst + off, a->win, src + off, bytes);
                dion_signal(c, next, b, DION_SIG_ADD, 1);
            }
        }
        dion__group_sync(DION__BLOCK);
        if (t == 0 && dion_quiet(c) != DION_SUCCESS) dion__counter_add(&a->result[0], 1);
        return;
    }
    /* a receiver block: checks sender block rb of the previous rank, round by round */
    uint32_t rb = b - a->blocks;
    dion_ctx_t c = dion_ctx(a->dev, rb % a->dev.num_contexts);
    for (uint64_t k = 1; k <= a->rounds; k++) {
        if (t == 0 && dion_wait(c, rb, DION_CMP_GE, k * nt, NULL) != DION_SUCCESS) {
            dion__counter_add(&a->result[0], 1);
            *stop = 1;
        }
        dion__group_sync(DION__BLOCK);
        if (*stop) return;
        uint64_t p = (uint64_t)rb * nt + t, off, bytes;
        dt_mp_range(a->seed, prev, k, p, &off, &bytes);
        const uint8_t *got = (const uint8_t *)mine + dt_mp_slot(producers, 1, k, p);
        for (uint64_t j = off; j < off + bytes; j++)
            if (got[j] != dt_byte(prev, k, p * DT_MP_SLOT + j)) {
                if (dion__counter_add(&a->result[0], 1) == 0) {
                    a->result[1] = k;
                    a->result[2] = p;
                    a->result[3] = j;
                }
                break;
            }
        dion__counter_add(&a->result[4], bytes);
        dion__group_sync(DION__BLOCK); /* the round's slots are read before they are handed back */
        if (t == 0) dion_signal(c, prev, DT_MP_MAXB + rb, DION_SIG_SET, k);
    }
}

static void dt_test_manyput(uint32_t blocks, uint32_t rounds)
{
    uint64_t producers = (uint64_t)blocks * DT_BLOCK;
    void *base = NULL;
    dion_win_t w;
    DT_OK(dion_win_alloc(dt_comm, 4 * producers * DT_MP_SLOT, DT_ON_HOST, &base, &w));
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_mp_args_t a = {dt_dev, dion_win_device(w), blocks, rounds, 0x3a11u + rounds, result};
    if (DT_LAUNCH(dt_mp_kernel, 2 * blocks, DT_BLOCK, &a)) DT_FAIL("launch failed");
    uint64_t r[5];
    dt_get(r, result, sizeof r);
    if (r[0])
        DT_FAIL("manyput: %llu failures; first: round %llu of producer %llu of rank %d differs at byte %llu "
                "(or a "
                "wait or quiet failed: see the error records)",
                (unsigned long long)r[0], (unsigned long long)r[1], (unsigned long long)r[2],
                (dt_rank + dt_n - 1) % dt_n, (unsigned long long)r[3]);
    else if (dt_rank == 0)
        printf("  manyput: %llu producers x %u rounds, %.2f MB checked at the target\n",
               (unsigned long long)producers, rounds, (double)r[4] / 1e6);
    dion_status_t st = dion_dev_check(dt_comm, &dt_dev);
    if (st != DION_SUCCESS) DT_FAIL("dion_dev_check: %s: %s", dion_status_string(st), dion_last_error());
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
    DT_OK(dion_win_destroy(w));
}

#include "trace_test.h"

/* ================================================================================================ */
/* 12. Many windows and ranks: every (destination, source) pair of DT_MW_WINS windows registered before a */
/* handle, so that some pairs are in the handle's slots and some are not, under ranks beyond the handle's   */
/* inline peers (run with more than 8 ranks): the GPU's fast paths (put, put_signal, signal from inline */
/* entries) and their general copies (tables) must land the same bytes. */

#define DT_MW_WINS 6
#define DT_MW_SIZE 8192u /* per window and rank: source in [0, 4096), destination in [4096, 8192) */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t dst, src;
    int peer;
    uint64_t src_off, dst_off, bytes;
    int group, with_signal;
    uint64_t expect;
    uint64_t *result;
} dt_mw_args_t;

DT_KERNEL(dt_mw_kernel, dt_mw_args_t)
{
    dion_ctx_t c = dion_ctx(a->dev, 0);
    uint32_t t = dion__block_thread();
    int in_group = a->group == 2 || (a->group == 1 && t < 32) || (a->group == 0 && t == 0);
    if (in_group) {
        if (a->with_signal) {
            if (a->group == 0)
                dion_put_signal(c, a->dst, a->peer, a->dst_off, a->src, a->src_off, a->bytes, 0, DION_SIG_ADD,
                                1);
            else if (a->group == 1)
                dion_put_signal_warp(c, a->dst, a->peer, a->dst_off, a->src, a->src_off, a->bytes, 0,
                                     DION_SIG_ADD, 1);
            else
                dion_put_signal_block(c, a->dst, a->peer, a->dst_off, a->src, a->src_off, a->bytes, 0,
                                      DION_SIG_ADD, 1);
        } else {
            if (a->group == 0)
                dion_put(c, a->dst, a->peer, a->dst_off, a->src, a->src_off, a->bytes);
            else if (a->group == 1)
                dion_put_warp(c, a->dst, a->peer, a->dst_off, a->src, a->src_off, a->bytes);
            else
                dion_put_block(c, a->dst, a->peer, a->dst_off, a->src, a->src_off, a->bytes);
        }
    }
    if (t == 0) {
        if (!a->with_signal) {
            if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
            dion_signal(c, a->peer, 0, DION_SIG_ADD, 1);
        }
        uint64_t seen = 0;
        if (dion_wait(c, 0, DION_CMP_GE, a->expect, &seen) != DION_SUCCESS) a->result[0]++;
        a->result[1] = seen;
    }
}

static void dt_test_many_windows(void)
{
    dion_win_t w[DT_MW_WINS];
    char *b[DT_MW_WINS];
    for (int i = 0; i < DT_MW_WINS; i++) {
        void *p = NULL;
        DT_OK(dion_win_alloc(dt_comm, DT_MW_SIZE, DT_ON_HOST, &p, &w[i]));
        b[i] = (char *)p;
    }
    /* this handle's slots hold the comm's first windows; the others work through their tables */
    dion_dev_t dev;
    dion_dev_attr_t attr = {8, 1, 0, 0};
    DT_OK(dion_dev_create(dt_comm, &attr, &dev));
    int in_slot = 0;
    for (int i = 0; i < DT_MW_WINS; i++)
        for (int k = 0; k < DION_DEV_WIN_SLOTS; k++) {
            dion_dwin_t t = dion_win_device(w[i]);
            if (dev.win_slot[k].win != t) continue;
            in_slot++;
            /* a slot's id stands for its table's on the GPU (the proxy's commands, gdaki's keys); a host
             * window's table is readable here */
            if (DT_ON_HOST && dev.win_slot[k].id != t->id)
                DT_FAIL("window %d: the handle's slot %d says id %u, its table %u", i, k, dev.win_slot[k].id,
                        t->id);
            /* the slot's own entry is what the table says this rank's part is (the fast paths' sources) */
            if (DT_ON_HOST && dev.win_slot[k].self != t->peer[dt_rank].base)
                DT_FAIL("window %d: the handle's slot %d says this rank's base is %p, its table %p", i, k,
                        (void *)dev.win_slot[k].self, (void *)t->peer[dt_rank].base);
        }
    if (in_slot == 0 || in_slot == DT_MW_WINS)
        DT_FAIL("%d of the %d windows are in the handle's slots: the test needs both kinds", in_slot,
                DT_MW_WINS);
    dt_rng_t rng = {777};
    int next = (dt_rank + 1) % dt_n, prev = (dt_rank + dt_n - 1) % dt_n;
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    uint8_t host[DT_MW_SIZE];
    uint64_t signals = 0;
    static const char *gname[] = {"thread", "warp", "block"};
    for (int k = 0; k < DT_MW_WINS * DT_MW_WINS; k++) {
        int di = k / DT_MW_WINS, si = k % DT_MW_WINS;
        uint64_t bytes = dt_range(&rng, 0, 2) == 0 ? dt_range(&rng, 0, 40) : dt_range(&rng, 1, 4000);
        uint64_t src_off = dt_range(&rng, 0, 4096 - bytes);
        uint64_t dst_off = 4096 + dt_range(&rng, 16, 4096 - 16 - bytes);
        int group = (int)dt_range(&rng, 0, 2), with_signal = (int)dt_range(&rng, 0, 1);
        for (uint64_t i = 0; i < bytes; i++) host[i] = dt_byte(dt_rank, 1000 + (uint64_t)k, i);
        dt_put(b[si] + src_off, host, bytes);
        memset(host, 0x5a, bytes + 32);
        dt_put(b[di] + dst_off - 16, host, bytes + 32);
        DT_OK(dion_comm_barrier(dt_comm));
        dt_mw_args_t a = {dev,
                          dion_win_device(w[di]),
                          dion_win_device(w[si]),
                          next,
                          src_off,
                          dst_off,
                          bytes,
                          group,
                          with_signal,
                          ++signals,
                          result};
        if (DT_LAUNCH(dt_mw_kernel, 1, group == 2 ? DT_BLOCK : 32, &a)) DT_FAIL("launch failed");
        uint64_t res[2];
        dt_get(res, result, sizeof res);
        if (res[0]) DT_FAIL("pair %d<-%d: %llu device-side failures", di, si, (unsigned long long)res[0]);
        dt_get(host, b[di] + dst_off - 16, bytes + 32);
        for (uint64_t i = 0; i < 16; i++)
            if (host[i] != 0x5a || host[16 + bytes + i] != 0x5a) {
                DT_FAIL("pair %d<-%d (%s, %llu bytes): a byte outside the target range changed", di, si,
                        gname[group], (unsigned long long)bytes);
                break;
            }
        for (uint64_t i = 0; i < bytes; i++)
            if (host[16 + i] != dt_byte(prev, 1000 + (uint64_t)k, i)) {
                DT_FAIL(
                    "pair %d<-%d (%s%s, %llu bytes, src %llu -> dst %llu) from rank %d: byte %llu is 0x%02x, "
                    "expected 0x%02x",
                    di, si, gname[group], with_signal ? " put_signal" : " put", (unsigned long long)bytes,
                    (unsigned long long)src_off, (unsigned long long)dst_off, prev, (unsigned long long)i,
                    host[16 + i], dt_byte(prev, 1000 + (uint64_t)k, i));
                break;
            }
        DT_OK(dion_comm_barrier(dt_comm));
    }
    dt_free(result);
    DT_OK(dion_dev_destroy(dt_comm, &dev));
    for (int i = 0; i < DT_MW_WINS; i++) DT_OK(dion_win_destroy(w[i]));
}

static int dt_main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "all";
    if (!strcmp(mode, "peerfail")) return dt_peerfail(argc > 2 ? atoi(argv[2]) : 3, 0);
    if (!strcmp(mode, "peerfail_stream")) return dt_peerfail(argc > 2 ? atoi(argv[2]) : 3, 1);
    int rc = dt_runner_init();
    if (rc) return rc;
    DT_OK(dion_comm_init_env(&dt_comm));
    /* DT_ONE_RANK_PER_GPU=1: run only when every rank has a GPU of its own (one-rank-per-GPU runs). */
    const char *per_gpu = getenv("DT_ONE_RANK_PER_GPU");
    if (per_gpu && atoi(per_gpu) && !dt_one_rank_per_gpu(dion_comm_size(dt_comm))) {
        if (dion_comm_rank(dt_comm) == 0) printf("SKIP: fewer GPUs than ranks\n");
        dion_comm_destroy(dt_comm);
        return 77;
    }
    dt_rank = dion_comm_rank(dt_comm);
    dt_n = dion_comm_size(dt_comm);
    /* This window exists before the handle (kernels find it in the handle's slots); the windows of the
     * asymmetric and registration tests come after it (kernels read their tables). Both paths are covered. */
    size_t size = 2 * DT_PUT_HALF + 4096 * (size_t)dt_rank + 123; /* sizes differ per rank */
    void *base = NULL;
    dion_win_t win;
    DT_OK(dion_win_alloc(dt_comm, size, DT_ON_HOST, &base, &win));
    dion_dev_attr_t attr = {64, 4, 0, 0};
    DT_OK(dion_dev_create(dt_comm, &attr, &dt_dev));
    double t0 = dt_now();
#define DT_RUN(name, call)                                                                                   \
    do {                                                                                                     \
        int before = dt_failures;                                                                            \
        double t_ = dt_now();                                                                                \
        call;                                                                                                \
        if (dt_rank == 0)                                                                                    \
            printf("%s %s (%.2f s)\n", dt_failures == before ? "PASS" : "FAIL", name, dt_now() - t_);        \
        fflush(stdout);                                                                                      \
    } while (0)
    if (!strcmp(mode, "all")) {
        DT_RUN("signals: SET, ADD, six comparisons, signal_read", dt_test_signals());
        DT_RUN("puts: every size around the vector and group widths, four alignments",
               dt_test_small_puts(win, (char *)base));
        DT_RUN("puts: random sizes and unaligned offsets, thread/warp/block",
               dt_test_puts(win, (char *)base, DT_PUT_ROUNDS, 4u << 20, DT_PUT_HALF));
        /* DT_STREAM_COUNT: shorter streams where every put_signal crosses a slow transport (proxy over tcp)
         */
        uint32_t stream = getenv("DT_STREAM_COUNT") ? (uint32_t)atoi(getenv("DT_STREAM_COUNT")) : 10000u;
        if (stream < 200 || stream > 10000) stream = 10000;
        char sname[64];
        snprintf(sname, sizeof sname, "put_signal stream of %u with data checks", stream);
        DT_RUN(sname, dt_test_stream(win, stream));
        if (getenv("DT_ATOMICS_ON_HOST") && atoi(getenv("DT_ATOMICS_ON_HOST"))) {
            /* GPU windows staged by the proxy refuse atomics (the host cannot update GPU memory atomically,
             * docs/backends/proxy.md): the atomics run on a host window */
            void *hbase = NULL;
            dion_win_t hw;
            DT_OK(dion_win_alloc(dt_comm, 4096, 1, &hbase, &hw));
            DT_RUN("atomics on a host window (DT_ATOMICS_ON_HOST=1): fetch-add totals, CAS increments",
                   dt_test_atomics(hw, (char *)hbase, DT_ATOMIC_THREADS, 200, 20));
            DT_OK(dion_win_destroy(hw));
        } else {
            DT_RUN("atomics: fetch-add totals, CAS increments",
                   dt_test_atomics(win, (char *)base, DT_ATOMIC_THREADS, 200, 20));
        }
        DT_RUN("get thread/warp/block, device barrier", dt_test_get_barrier(win, (char *)base));
        DT_RUN("asymmetric window sizes, a 0-byte part", dt_test_asymmetric());
        DT_RUN("wait timeout with an error record", dt_test_timeout());
        DT_RUN("a late signal: the wait polls past its abort and clock looks, returns it, acquires",
               dt_test_late_signal(win, (char *)base));
        DT_RUN("counted puts: random sizes and offsets, thread/warp/block, sources overwritten once counted",
               dt_test_counted(win, (char *)base, DT_CNT_ROUNDS, DT_PUT_HALF));
        DT_RUN("counter wait timeout with an error record", dt_test_counter_timeout(win));
        if (dt_dev.flags & (DION_DEVF_PROXY | DION_DEVF_GDAKI)) {
            /* packets need whole 8-byte words per store at the target: p2p only (docs/semantics.md) */
            if (dt_rank == 0)
                printf("SKIP packet puts: peers are served by a network backend (proxy or gdaki), which does "
                       "not carry packet puts (they record DION_ERR_UNSUPPORTED)\n");
        } else {
            DT_RUN(
                "packet puts: random sizes and offsets, reused slots, wrapping sequences, thread/warp/block, "
                "both directions",
                dt_test_packets(win, (char *)base));
            DT_RUN("packet wait timeout with an error record", dt_test_packet_timeout(win));
        }
        DT_RUN_EXTRA();
    } else if (!strcmp(mode, "atomics")) {
        /* the atomics section alone; per thread DT_ATOMIC_ADDS fetch-adds (default 200) and DT_ATOMIC_CAS
         * compare-swap increments (default 20) */
        uint32_t adds = getenv("DT_ATOMIC_ADDS") ? (uint32_t)atoi(getenv("DT_ATOMIC_ADDS")) : 200u;
        uint32_t cas = getenv("DT_ATOMIC_CAS") ? (uint32_t)atoi(getenv("DT_ATOMIC_CAS")) : 20u;
        if (adds > 100000) adds = 200;
        if (cas > 10000) cas = 20;
        DT_RUN("atomics: fetch-add totals, CAS increments",
               dt_test_atomics(win, (char *)base, DT_ATOMIC_THREADS, adds, cas));
    } else if (!strcmp(mode, "check")) {
        DT_RUN("DION_CHECK=1: rejected calls are recorded and write nothing",
               dt_test_check(win, (char *)base, size));
        DT_RUN("DION_CHECK=1: bad counter indices are recorded, write and count nothing",
               dt_test_counter_check(win, (char *)base, size));
    } else if (!strcmp(mode, "stats")) {
        DT_RUN("DION_STATS=1: per-context counters", dt_test_stats(win));
    } else if (!strcmp(mode, "trace")) {
        DT_RUN("DION_TRACE: put_signal ping-pong", dt_test_trace(win));
    } else if (!strcmp(mode, "sigadd")) {
        /* DT_SIGADD_COUNT: ADDs per rank to every rank's word (default 2000) */
        uint32_t k = getenv("DT_SIGADD_COUNT") ? (uint32_t)atoi(getenv("DT_SIGADD_COUNT")) : 2000u;
        if (k < 1 || k > 1000000) k = 2000;
        DT_RUN("signal ADD storm: every rank adds to every rank's word, its own included",
               dt_test_sig_storm(k));
    } else if (!strcmp(mode, "stress")) {
        /* DT_STRESS_COUNT: messages per rank (default 400) */
        uint32_t count = getenv("DT_STRESS_COUNT") ? (uint32_t)atoi(getenv("DT_STRESS_COUNT")) : 400u;
        if (count < 10 || count > 100000) count = 400;
        DT_RUN(
            "put_signal stress: random sizes 1 B..1 MiB, random offsets, thread/warp/block and put+signal, "
            "data checked at every signal",
            dt_test_stress(count));
    } else if (!strcmp(mode, "manyput")) {
        /* DT_MP_BLOCKS sender blocks (default 4, at most 16) of DT_BLOCK producers, DT_MP_ROUNDS rounds (30)
         */
        uint32_t blocks = getenv("DT_MP_BLOCKS") ? (uint32_t)atoi(getenv("DT_MP_BLOCKS")) : 4u;
        uint32_t rounds = getenv("DT_MP_ROUNDS") ? (uint32_t)atoi(getenv("DT_MP_ROUNDS")) : 30u;
        if (blocks < 1 || blocks > DT_MP_MAXB) blocks = 4;
        if (rounds < 1 || rounds > 100000) rounds = 30;
        DT_RUN(
            "many producers: every thread of several blocks puts random ranges to one window, data checked "
            "at every round's signals",
            dt_test_manyput(blocks, rounds));
    } else if (!strcmp(mode, "manywin")) {
        DT_RUN("many windows: put, put_signal and signal over every pair of 6 windows, in the handle's slots "
               "and not, thread/warp/block",
               dt_test_many_windows());
    } else if (!strcmp(mode, "abort")) {
        DT_RUN("dion_comm_abort ends device waits on every rank", dt_test_abort());
    } else if (!strcmp(mode, "netfault") && argc > 2 &&
               (!strcmp(argv[2], "inject") || !strcmp(argv[2], "oob"))) {
        int inject = !strcmp(argv[2], "inject");
        DT_RUN(
            inject
                ? "gdaki: an injected error completion fails quiet; dion_dev_check names QP, peer, syndrome"
                : "gdaki: a put past the peer's window fails quiet; dion_dev_check names QP, peer, syndrome",
            dt_test_netfault(inject ? 0 : 1, argc > 3 ? atoi(argv[3]) : 5));
    } else {
        fprintf(
            stderr,
            "usage: %s [all|atomics|check|stats|trace|sigadd|stress|manyput|manywin|abort|netfault inject K|"
            "netfault oob|peerfail N|peerfail_stream N]\n",
            argv[0]);
        return 2;
    }
    int mine = dt_failures, *all = (int *)calloc((size_t)dt_n, sizeof(int)), total = 0;
    if (strcmp(mode, "abort") != 0) {
        DT_OK(dion_comm_allgather(dt_comm, &mine, sizeof mine, all));
        for (int r = 0; r < dt_n; r++) total += all[r];
        DT_OK(dion_win_destroy(win));
        DT_OK(dion_dev_destroy(dt_comm, &dt_dev));
    } else {
        total = mine;
        dion_win_destroy(win); /* the comm is aborted: these free locally and report the abort */
        dion_dev_destroy(dt_comm, &dt_dev);
    }
    if (dt_rank == 0 || mine)
        printf("%s: %d ranks, %d failures, %.2f s\n", total ? "FAIL" : "PASS", dt_n, total, dt_now() - t0);
    free(all);
    dion_comm_destroy(dt_comm);
    return total ? 1 : 0;
}

#endif /* DION_TEST_CONFORMANCE_H */
