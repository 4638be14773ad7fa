/* MoE expert-parallel dispatch and combine, written once for the GPU build (moe_dispatch_combine.cu) and the
 * CPU build (moe_dispatch_combine_cpu.c).
 *
 * Every rank holds T tokens of H bf16 values and routes each to K of E experts (top-k, with weights); expert
 * e lives on rank e / L (L = E / R experts per rank). dispatch  one warp per (token, k) copies the token into
 * its expert's rank with dion_put_signal_warp, each put adding 1 to DATA(source) there; the number of tokens
 * per expert travels as a signal, COUNT(expert, source) = iteration << 32 | count. The receiver waits for the
 * counts, then for DATA(source) to reach their sum. expert    a stand-in for the expert's GEMM: y = x * a_e +
 * b_e, rounded to bf16, in place. combine   each result goes back to the slot its token came from (the same
 * slot index, at the origin), adding 1 to COMB(expert rank); the origin waits for as many as it sent there
 * and reduces the K results of each token with the routing weights, in fp32. Layout at a destination: source
 * s owns rows [s * cap, (s + 1) * cap), cap = T * min(K, L) (the most one rank can send to one other);
 * inside, tokens are grouped by expert in token order ("slot", worked out from the routing on the host as
 * DeepEP's layout kernel would on the GPU). */
#ifndef MOE_DISPATCH_COMBINE_H
#define MOE_DISPATCH_COMBINE_H

#include "example_common.h"

static const char ex_name[] = "moe_dispatch_combine";

#define MOE_COUNT(a, le, s) ((uint32_t)((le) * (a)->R + (s)))   /* tokens for local expert le from rank s */
#define MOE_DATA(a, s)      ((uint32_t)((a)->E + (s)))          /* tokens that arrived from rank s */
#define MOE_COMB(a, d)      ((uint32_t)((a)->E + (a)->R + (d))) /* results that came back from rank d */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t xw, recvw,
        combw;             /* tokens to send [T][H]; received rows [R * cap][H]; returned [R * cap][H] */
    uint16_t *recv, *comb; /* this rank's part of recvw and combw */
    int T, H, K, E, L, R, me, cap;
    uint64_t iter;               /* 1, 2, ...: tags the count signals of this dispatch */
    const int *expert;           /* [T * K] routing: expert of (t, k) */
    const float *weight;         /* [T * K] its weight */
    const int *slot;             /* [T * K] row at the expert's rank, inside this rank's part */
    const uint32_t *sendcnt;     /* [E] tokens this rank sends to each expert */
    uint32_t *cnt;               /* [L * R] tokens received per (local expert, source): written by dispatch */
    uint64_t *data_total;        /* [R] DATA(s) expected so far: grows by each dispatch's counts */
    const uint64_t *comb_target; /* [R] COMB(d) expected at the end of this combine (cumulative) */
    float *out;                  /* [T][H] combined result */
    ex_result_t *res;
} moe_args_t;

/* All blocks of all ranks start a phase together (this also orders it after every rank's previous phase):
 * block b meets block b of every rank on context b. */
EX_HD int moe_start(const moe_args_t *a, dion_ctx_t c, ex_team_t tm, unsigned long long *t0)
{
    if (tm.thread == 0) {
        dion_status_t st = dion_barrier(c);
        if (st != DION_SUCCESS) ex_fail(a->res, st);
        *t0 = ex_now_ns();
    }
    EX_SYNC();
    return !ex_failed(a->res);
}

EX_HD void moe_dispatch(const moe_args_t *a, ex_team_t tm)
{
    dion_ctx_t c = dion_ctx(a->dev, tm.block);
    unsigned long long t0 = 0;
    if (!moe_start(a, c, tm, &t0)) return;
    const size_t row = (size_t)a->H * 2;
    /* Counts first, so that receivers learn early how much to expect. Bit 32 up is the iteration: a count
     * left from the previous dispatch never satisfies this one's wait. */
    for (unsigned e = tm.block * tm.nthreads + tm.thread; e < (unsigned)a->E; e += tm.nblocks * tm.nthreads)
        dion_signal(c, (int)e / a->L, MOE_COUNT(a, e % a->L, a->me), DION_SIG_SET,
                    a->iter << 32 | a->sendcnt[e]);
    /* Payload: one warp per (token, k); the warp copies the row, then one lane adds 1 to DATA(me) there,
     * after the row (put_signal orders its own data before its signal). */
    const unsigned nw = ex_nwarps(tm), step = tm.nblocks * nw;
    for (unsigned i = tm.block * nw + ex_warp(tm); i < (unsigned)(a->T * a->K); i += step) {
        int d = a->expert[i] / a->L;
        size_t dst = ((size_t)a->me * a->cap + (size_t)a->slot[i]) * row;
        dion_put_signal_warp(c, a->recvw, d, dst, a->xw, (size_t)(i / a->K) * row, row, MOE_DATA(a, a->me),
                             DION_SIG_ADD, 1);
    }
    EX_SYNC(); /* the block's puts are issued: one quiet completes them all (the sources are reusable) */
    if (tm.thread == 0) {
        dion_status_t st = dion_quiet(c);
        if (st != DION_SUCCESS) ex_fail(a->res, st);
    }
    /* Receive: block s learns the counts from rank s, then waits for that many rows. DATA only grows, so
     * the target is the running total. */
    if (tm.block < (unsigned)a->R && tm.thread == 0 && !ex_failed(a->res)) {
        int s = (int)tm.block;
        uint64_t total = 0, v = 0;
        for (int le = 0; le < a->L; le++) {
            dion_status_t st = dion_wait(c, MOE_COUNT(a, le, s), DION_CMP_GE, a->iter << 32, &v);
            if (st != DION_SUCCESS) {
                ex_fail(a->res, st);
                return;
            }
            a->cnt[le * a->R + s] = (uint32_t)v; /* the low half: the count */
            total += (uint32_t)v;
        }
        a->data_total[s] += total;
        dion_status_t st = dion_wait(c, MOE_DATA(a, s), DION_CMP_GE, a->data_total[s], NULL);
        if (st != DION_SUCCESS) ex_fail(a->res, st);
    }
    if (tm.thread == 0) ex_record_span(a->res, t0, ex_now_ns());
}

/* The expert of row j in source s's part: rows are grouped by local expert, counts in cnt. Returns -1 past
 * the last row. */
EX_HD int moe_row_expert(const moe_args_t *a, int s, int j)
{
    for (int le = 0, end = 0; le < a->L; le++) {
        end += (int)a->cnt[le * a->R + s];
        if (j < end) return a->me * a->L + le;
    }
    return -1;
}

/* The stand-in expert, shared with the host reference: fp32 math, one rounding to bf16. */
EX_HD uint16_t moe_expert_fn(int e, uint16_t x)
{
    return ex_float_to_bf16(ex_fma(ex_bf16_to_float(x), 1.0f + (float)e / 128.0f, (float)(e - 100) / 512.0f));
}

EX_HD void moe_expert(const moe_args_t *a, ex_team_t tm)
{
    for (int r = (int)tm.block; r < a->R * a->cap; r += (int)tm.nblocks) {
        int e = moe_row_expert(a, r / a->cap, r % a->cap);
        if (e < 0) continue;
        uint16_t *x = a->recv + (size_t)r * a->H;
        for (int h = (int)tm.thread; h < a->H; h += (int)tm.nthreads) x[h] = moe_expert_fn(e, x[h]);
    }
}

EX_HD void moe_combine(const moe_args_t *a, ex_team_t tm)
{
    dion_ctx_t c = dion_ctx(a->dev, tm.block);
    unsigned long long t0 = 0;
    if (!moe_start(a, c, tm, &t0)) return;
    const size_t row = (size_t)a->H * 2;
    /* Send every expert output back to the row its token came from: same slot, in my part at the origin. */
    const unsigned nw = ex_nwarps(tm), step = tm.nblocks * nw;
    for (unsigned r = tm.block * nw + ex_warp(tm); r < (unsigned)(a->R * a->cap); r += step) {
        int s = (int)r / a->cap, j = (int)r % a->cap;
        if (moe_row_expert(a, s, j) < 0) continue;
        dion_put_signal_warp(c, a->combw, s, ((size_t)a->me * a->cap + (size_t)j) * row, a->recvw,
                             (size_t)r * row, row, MOE_COMB(a, a->me), DION_SIG_ADD, 1);
    }
    EX_SYNC();
    if (tm.thread == 0) {
        dion_status_t st = dion_quiet(c);
        /* Every block waits for every expert rank (R polls each) before it reduces any token. */
        for (int d = 0; st == DION_SUCCESS && d < a->R; d++)
            st = dion_wait(c, MOE_COMB(a, d), DION_CMP_GE, a->comb_target[d], NULL);
        if (st != DION_SUCCESS) ex_fail(a->res, st);
    }
    EX_SYNC();
    if (ex_failed(a->res)) return;
    /* out[t] = sum over k of weight * result, accumulated in fp32 in k order (as the reference does) */
    for (int t = (int)tm.block; t < a->T; t += (int)tm.nblocks)
        for (int h = (int)tm.thread; h < a->H; h += (int)tm.nthreads) {
            float acc = 0.0f;
            for (int k = 0; k < a->K; k++) {
                int i = t * a->K + k, d = a->expert[i] / a->L;
                uint16_t y = a->comb[((size_t)d * a->cap + (size_t)a->slot[i]) * a->H + h];
                acc = ex_fma(a->weight[i], ex_bf16_to_float(y), acc);
            }
            a->out[(size_t)t * a->H + h] = acc;
        }
    if (tm.thread == 0) ex_record_span(a->res, t0, ex_now_ns());
}

/* ---- host: routing, reference, run ---- */

/* Supplied by the build: run one phase (0 dispatch, 1 expert, 2 combine) on `blocks` blocks; 0 on success. */
static int moe_launch(int phase, const moe_args_t *a, unsigned blocks);

static uint32_t moe_hash(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    return x ^ (x >> 16);
}

/* Token values differ per rank, token, element and iteration: a row that is late, misplaced or stale shows.
 */
static uint16_t moe_x(int rank, int t, int h, uint64_t iter)
{
    uint32_t v = moe_hash((uint32_t)rank * 0x9e3779b9u ^ moe_hash((uint32_t)t * 7919u + (uint32_t)h) ^
                          (uint32_t)iter * 0x85ebca6bu);
    return ex_float_to_bf16((float)(int)(v % 2001u) / 1000.0f - 1.0f);
}

/* Top-k routing of rank r's tokens: K distinct experts, a skewed preference, weights summing to 1. */
static void moe_route(int r, int T, int K, int E, int *expert, float *weight)
{
    for (int t = 0; t < T; t++) {
        float sum = 0;
        for (int k = 0; k < K; k++) {
            int e, dup;
            uint32_t h = moe_hash((uint32_t)(r * 1000003 + t * 131 + k));
            do {
                h = moe_hash(h + 1u);
                e = (int)((h % (uint32_t)E) * ((h >> 8) % (uint32_t)E) % (uint32_t)E); /* uneven counts */
                dup = 0;
                for (int q = 0; q < k; q++) dup |= expert[t * K + q] == e;
            } while (dup);
            expert[t * K + k] = e;
            weight[t * K + k] = 0.1f + (float)(h >> 20 & 1023u) / 1024.0f;
            sum += weight[t * K + k];
        }
        for (int k = 0; k < K; k++) weight[t * K + k] /= sum;
    }
}

typedef struct {
    const char *name;
    int T, H, K, E;
} moe_shape_t;

static const moe_shape_t moe_shapes[] = {
    {"small", 32, 128, 4, 16},     /* CPU mode and CI */
    {"ll", 128, 7168, 8, 256},     /* DeepEP low-latency: 128 tokens per rank */
    {"normal", 4096, 7168, 8, 256} /* DeepEP normal: 4096 tokens per rank */
};

static int moe_main(int argc, char **argv, const char *default_shape, unsigned blocks)
{
    const char *shape_name = argc > 1 ? argv[1] : default_shape;
    int iters = argc > 2 ? atoi(argv[2]) : 10, warmup = 2;
    if (argc > 3) blocks = (unsigned)atoi(argv[3]);
    const moe_shape_t *sh = NULL;
    for (size_t i = 0; i < sizeof moe_shapes / sizeof moe_shapes[0]; i++)
        if (!strcmp(shape_name, moe_shapes[i].name)) sh = &moe_shapes[i];
    if (!sh || iters < 1 || (argc > 3 && atoi(argv[3]) < 1) || blocks > 1024) {
        fprintf(stderr, "usage: %s [small|ll|normal [iterations >= 1 [blocks]]]\n", ex_name);
        return 2;
    }
    dion_comm_t comm;
    EX_DION(dion_comm_init_env(&comm));
    const int R = dion_comm_size(comm), me = dion_comm_rank(comm);
    const int T = sh->T, H = sh->H, K = sh->K, E = sh->E, L = E / R;
    if (blocks == 0) blocks = (unsigned)R; /* CPU mode: the fewest threads that work */
    if (E % R || K > E || blocks < (unsigned)R) {
        fprintf(stderr,
                "%s: %d ranks: need E %% ranks == 0 (E = %d), K <= E, and at least as many blocks (%u)\n",
                ex_name, R, E, blocks);
        return 1;
    }
    const int cap = T * (K < L ? K : L);
    const size_t row = (size_t)H * 2, tk = (size_t)T * K;

    /* Routing of every rank (the host knows it all: it is a pure function), this rank's slots and counts. */
    int *expert_all = (int *)malloc(sizeof(int) * tk * R);
    float *weight_all = (float *)malloc(sizeof(float) * tk * R);
    uint32_t *cnt_all = (uint32_t *)calloc((size_t)R * E, sizeof(uint32_t)); /* [source][expert] */
    for (int r = 0; r < R; r++) {
        moe_route(r, T, K, E, expert_all + tk * r, weight_all + tk * r);
        for (size_t i = 0; i < tk; i++) cnt_all[(size_t)r * E + expert_all[tk * r + i]]++;
    }
    const int *expert = expert_all + tk * me;
    const float *weight = weight_all + tk * me;
    const uint32_t *sendcnt = cnt_all + (size_t)me * E;
    int *slot = (int *)malloc(sizeof(int) * tk), *next = (int *)calloc((size_t)E, sizeof(int));
    for (int e = 0, base = 0; e < E; e++) { /* rows grouped by expert within each destination */
        if (e % L == 0) base = 0;
        next[e] = base;
        base += (int)sendcnt[e];
    }
    for (size_t i = 0; i < tk; i++) slot[i] = next[expert[i]]++;

    /* Windows first, then the device handle (it carries their bases). */
    void *xb, *recvb, *combb;
    dion_win_t xw, recvw, combw;
    EX_DION(dion_win_alloc(comm, (size_t)T * row, EX_ON_HOST, &xb, &xw));
    EX_DION(dion_win_alloc(comm, (size_t)R * cap * row, EX_ON_HOST, &recvb, &recvw));
    EX_DION(dion_win_alloc(comm, (size_t)R * cap * row, EX_ON_HOST, &combb, &combw));
    dion_dev_attr_t attr = {(uint32_t)(E + 2 * R), blocks, 0, EX_DEV_FLAGS};
    dion_dev_t dev;
    EX_DION(dion_dev_create(comm, &attr, &dev));

    moe_args_t a;
    memset(&a, 0, sizeof a);
    a.dev = dev;
    a.xw = dion_win_device(xw);
    a.recvw = dion_win_device(recvw);
    a.combw = dion_win_device(combw);
    a.recv = (uint16_t *)recvb;
    a.comb = (uint16_t *)combb;
    a.T = T, a.H = H, a.K = K, a.E = E, a.L = L, a.R = R, a.me = me, a.cap = cap;
    int *d_expert = (int *)ex_alloc(ex_name, sizeof(int) * tk),
        *d_slot = (int *)ex_alloc(ex_name, sizeof(int) * tk);
    float *d_weight = (float *)ex_alloc(ex_name, sizeof(float) * tk);
    uint32_t *d_sendcnt = (uint32_t *)ex_alloc(ex_name, sizeof(uint32_t) * E);
    ex_to_dev(ex_name, d_expert, expert, sizeof(int) * tk);
    ex_to_dev(ex_name, d_slot, slot, sizeof(int) * tk);
    ex_to_dev(ex_name, d_weight, weight, sizeof(float) * tk);
    ex_to_dev(ex_name, d_sendcnt, sendcnt, sizeof(uint32_t) * E);
    a.expert = d_expert, a.slot = d_slot, a.weight = d_weight, a.sendcnt = d_sendcnt;
    a.cnt = (uint32_t *)ex_alloc(ex_name, sizeof(uint32_t) * L * R);
    a.data_total = (uint64_t *)ex_alloc(ex_name, sizeof(uint64_t) * R);
    uint64_t *d_target = (uint64_t *)ex_alloc(ex_name, sizeof(uint64_t) * R),
             *target = (uint64_t *)calloc((size_t)R, 8);
    a.comb_target = d_target;
    a.out = (float *)ex_alloc(ex_name, sizeof(float) * T * H);
    a.res = (ex_result_t *)ex_alloc(ex_name, sizeof(ex_result_t));

    uint16_t *x = (uint16_t *)malloc((size_t)T * row);
    double *times =
        (double *)calloc((size_t)iters * 2, sizeof(double)); /* per timed iteration: dispatch, combine */
    int ok = 1;
    for (int it = 1; ok && it <= warmup + iters; it++) {
        a.iter = (uint64_t)it;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) x[(size_t)t * H + h] = moe_x(me, t, h, a.iter);
        ex_to_dev(ex_name, xb, x, (size_t)T * row);
        for (int d = 0; d < R; d++) /* results expected back from each rank: what this rank sent there */
            for (int le = 0; le < L; le++) target[d] += sendcnt[d * L + le];
        ex_to_dev(ex_name, d_target, target, sizeof(uint64_t) * R);
        static const char *phase_name[3] = {"dispatch", "expert", "combine"};
        for (int p = 0; ok && p < 3; p++) {
            ex_result_t r;
            ex_result_reset(&r);
            ex_to_dev(ex_name, a.res, &r, sizeof r);
            ok = moe_launch(p, &a, blocks) == 0;
            ex_to_host(ex_name, &r, a.res, sizeof r);
            ok = ok && ex_launch_ok(ex_name, comm, &dev, &r, phase_name[p]);
            if (ok && p != 1 && it > warmup)
                times[(it - warmup - 1) * 2 + p / 2] = (double)(r.t1 - r.t0) * 1e-3;
        }
    }

    /* Check 1: the counts that arrived as signals are what the other ranks' routing sends here. */
    uint32_t *cnt = (uint32_t *)malloc(sizeof(uint32_t) * L * R);
    if (ok) ex_to_host(ex_name, cnt, a.cnt, sizeof(uint32_t) * L * R);
    for (int s = 0; ok && s < R; s++)
        for (int le = 0; le < L; le++)
            if (cnt[le * R + s] != cnt_all[(size_t)s * E + me * L + le]) {
                fprintf(stderr, "%s: rank %d: expert %d got count %u from rank %d, expected %u\n", ex_name,
                        me, me * L + le, cnt[le * R + s], s, cnt_all[(size_t)s * E + me * L + le]);
                ok = 0;
                break;
            }
    /* Check 2: the combined tokens of the last iteration against a single-rank reference: the same expert
     * function and the same fp32 accumulation order. Both sides round identically, so only a wrong, missing
     * or stale row can differ; the bound, one bf16 unit of the sum's magnitude, still allows a different
     * summation order. */
    float *out = (float *)malloc(sizeof(float) * T * H);
    double max_err = 0;
    if (ok) ex_to_host(ex_name, out, a.out, sizeof(float) * T * H);
    for (int t = 0; ok && t < T; t++)
        for (int h = 0; h < H; h++) {
            float ref = 0.0f, mag = 0.0f;
            for (int k = 0; k < K; k++) {
                int e = expert[t * K + k];
                float y = ex_bf16_to_float(moe_expert_fn(e, x[(size_t)t * H + h]));
                ref = ex_fma(weight[t * K + k], y, ref);
                mag += fabsf(weight[t * K + k] * y);
            }
            double err = fabs((double)out[(size_t)t * H + h] - ref);
            if (err > max_err) max_err = err;
            if (!(err <= mag / 256.0 + 1e-6)) {
                fprintf(stderr, "%s: rank %d: token %d element %d is %g, reference %g\n", ex_name, me, t, h,
                        out[(size_t)t * H + h], ref);
                ok = 0;
                break;
            }
        }
    ok = ex_all_ok(ex_name, comm, ok);

    /* Times only for a verified run: per rank, the span from the phase's common start to its last block's
     * end; the slowest rank counts. Next to them, the bytes one dispatch moves (combine moves the same back)
     * and the time those bytes need at the link's speed. */
    double *all = (double *)malloc(sizeof(double) * iters * 2 * R);
    EX_DION(dion_comm_allgather(comm, times, sizeof(double) * iters * 2, all));
    if (ok && me == 0) {
        double t_disp = 0, t_comb = 0;
        for (int i = 0; i < iters; i++) {
            double md = 0, mc = 0;
            for (int r = 0; r < R; r++) {
                md = fmax(md, all[(size_t)r * iters * 2 + i * 2]);
                mc = fmax(mc, all[(size_t)r * iters * 2 + i * 2 + 1]);
            }
            t_disp += md / iters, t_comb += mc / iters;
        }
        /* Bytes: all ranks' (self included: on one GPU every byte is a copy), and the most one rank sends to
         * other ranks: in dispatch what its tokens need elsewhere, in combine what it returns to others. */
        double total = 0, disp_max = 0, comb_max = 0;
        for (int r = 0; r < R; r++) {
            double disp = 0, comb = 0;
            for (int s = 0; s < R; s++)
                for (int e = 0; e < E; e++) {
                    double b = (double)cnt_all[(size_t)s * E + e] * (double)row;
                    if (s == r) total += b;
                    if (s == r && e / L != r) disp += b;
                    if (s != r && e / L == r) comb += b;
                }
            disp_max = fmax(disp_max, disp), comb_max = fmax(comb_max, comb);
        }
        printf(
            "%s: shape %s (T=%d per rank, H=%d bf16, top-%d of %d experts, %d ranks): verified %d tokens x "
            "top-%d per rank, max |error| %.3g\n",
            ex_name, sh->name, T, H, K, E, R, T, K, max_err);
        const char *fmt = "%s: %s %.2f us (mean of %d, slowest rank); moves %.2f MB in all, %.2f MB from the "
                          "busiest rank to others; bound %.2f us on one GPU at 1.9 TB/s, %.2f us at 370 GB/s "
                          "NVLink per rank\n";
        printf(fmt, ex_name, "dispatch", t_disp, iters, total / 1e6, disp_max / 1e6, total / 1.9e12 * 1e6,
               disp_max / 370e9 * 1e6);
        printf(fmt, ex_name, "combine", t_comb, iters, total / 1e6, comb_max / 1e6, total / 1.9e12 * 1e6,
               comb_max / 370e9 * 1e6);
    }
    free(all);
    free(out);
    free(cnt);
    free(times);
    free(x);
    ex_free(a.res), ex_free(a.out), ex_free(d_target), ex_free(a.data_total), ex_free(a.cnt);
    ex_free(d_sendcnt), ex_free(d_weight), ex_free(d_slot), ex_free(d_expert);
    free(target), free(slot), free(next), free(cnt_all), free(weight_all), free(expert_all);
    EX_DION(dion_dev_destroy(comm, &dev));
    EX_DION(dion_win_destroy(combw));
    EX_DION(dion_win_destroy(recvw));
    EX_DION(dion_win_destroy(xw));
    EX_DION(dion_comm_destroy(comm));
    return ok ? 0 : 1;
}

#endif /* MOE_DISPATCH_COMBINE_H */
