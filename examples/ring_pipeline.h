/* A persistent pipeline around a ring of ranks (all-gather), written once for the GPU build
 * (ring_pipeline.cu) and the CPU build (ring_pipeline_cpu.c).
 *
 * Every rank owns C chunks; at the end every rank holds all R * C. One kernel per rank runs two blocks:
 *   forwarder (block 0)  sends, in order, its own C chunks, then every chunk that arrived from the previous
 *                        rank except those that came from the next rank (they have been around the ring),
 * each with dion_put_signal_block into one of S slots at the next rank: chunk m goes to slot m % S and sets
 * DATA = m + 1 there. consumer (block 1)   waits for DATA, checks the chunk and copies it to its place in the
 * gathered array, then returns the slot to the previous rank (CREDIT += 1 there) and tells its own forwarder
 * that the chunk can go on (READY += 1, a signal to itself). Back-pressure: the forwarder sends chunk m only
 * when the next rank has consumed chunk m - S (CREDIT >= m + 1 - S), so at most S chunks are in flight and a
 * slot is never overwritten before it was read. */
#ifndef RING_PIPELINE_H
#define RING_PIPELINE_H

#include "example_common.h"

static const char ex_name[] = "ring_pipeline";

enum { RING_DATA = 0, RING_CREDIT = 1, RING_READY = 2, RING_SIGNALS = 3 };

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win; /* [R * C] gathered chunks, then [S] receive slots */
    uint64_t *base;  /* this rank's window */
    int R, me, C, S;
    size_t words;            /* chunk size in 8-byte words */
    unsigned long long *bad; /* words the consumer found wrong */
    uint64_t *final_sig;     /* [RING_SIGNALS] signal values when the kernel ended */
    ex_result_t *res;
} ring_args_t;

/* The word every rank expects at word i of chunk c of rank o: the single-rank reference. */
EX_HD uint64_t ring_word(int o, int c, size_t i)
{
    return ((uint64_t)o << 48) ^ ((uint64_t)c << 32) ^ (i * 0x9e3779b97f4a7c15ull);
}

EX_HD size_t ring_chunk_off(const ring_args_t *a, int o, int c)
{
    return ((size_t)o * a->C + c) * a->words * 8;
}
EX_HD size_t ring_slot_off(const ring_args_t *a, int s)
{
    return ((size_t)a->R * a->C + s) * a->words * 8;
}

/* The n-th chunk to arrive comes from rank me - 1 - n / C (own chunks of the previous rank first). */
EX_HD int ring_origin(const ring_args_t *a, int n)
{
    return ((a->me - 1 - n / a->C) % a->R + a->R) % a->R;
}

/* Thread 0 waits, then the whole block learns whether it may go on. */
EX_HD int ring_wait(const ring_args_t *a, dion_ctx_t c, ex_team_t tm, uint32_t sig, uint64_t value)
{
    if (tm.thread == 0) {
        dion_status_t st = dion_wait(c, sig, DION_CMP_GE, value, NULL);
        if (st != DION_SUCCESS) ex_fail(a->res, st);
    }
    EX_SYNC();
    return !ex_failed(a->res);
}

EX_HD void ring_forwarder(const ring_args_t *a, dion_ctx_t c, ex_team_t tm)
{
    const int next = (a->me + 1) % a->R, total = (a->R - 1) * a->C;
    for (int m = 0; m < total; m++) {
        int o = a->me, k = m;
        if (m >= a->C) { /* a chunk that arrived: wait until the consumer has it in place */
            int n = m - a->C;
            o = ring_origin(a, n), k = n % a->C;
            if (!ring_wait(a, c, tm, RING_READY, (uint64_t)n + 1)) return;
        }
        /* a free slot at the next rank */
        if (m >= a->S && !ring_wait(a, c, tm, RING_CREDIT, (uint64_t)(m + 1 - a->S))) return;
        dion_put_signal_block(c, a->win, next, ring_slot_off(a, m % a->S), a->win, ring_chunk_off(a, o, k),
                              a->words * 8, RING_DATA, DION_SIG_SET, (uint64_t)m + 1);
    }
    /* Done when the next rank has consumed everything: its last credit. */
    if (!ring_wait(a, c, tm, RING_CREDIT, (uint64_t)total)) return;
    if (tm.thread == 0) {
        dion_status_t st = dion_quiet(c);
        if (st != DION_SUCCESS) ex_fail(a->res, st);
        a->final_sig[RING_CREDIT] = dion_signal_read(c, RING_CREDIT);
    }
}

EX_HD void ring_consumer(const ring_args_t *a, dion_ctx_t c, ex_team_t tm)
{
    const int prev = (a->me + a->R - 1) % a->R, total = (a->R - 1) * a->C;
    for (int n = 0; n < total; n++) {
        if (!ring_wait(a, c, tm, RING_DATA, (uint64_t)n + 1)) return;
        int o = ring_origin(a, n), k = n % a->C;
        const uint64_t *slot = a->base + ring_slot_off(a, n % a->S) / 8;
        uint64_t *dst = a->base + ring_chunk_off(a, o, k) / 8;
        unsigned long long bad = 0;
        for (size_t i = tm.thread; i < a->words; i += tm.nthreads) {
            uint64_t v = slot[i];
            bad += v != ring_word(o, k, i); /* an overwritten slot shows here */
            dst[i] = v;
        }
        if (bad) {
#ifdef __CUDA_ARCH__
            atomicAdd(a->bad, bad);
#else
            __atomic_fetch_add(a->bad, bad, __ATOMIC_RELAXED);
#endif
        }
        EX_SYNC(); /* every thread has read the slot and written the chunk before either signal */
        if (tm.thread == 0) {
            dion_signal(c, prev, RING_CREDIT, DION_SIG_ADD, 1); /* release: after our reads of the slot */
            dion_signal(c, a->me, RING_READY, DION_SIG_ADD,
                        1); /* release: after our copy, for the forwarder */
        }
    }
    if (tm.thread == 0) {
        a->final_sig[RING_DATA] = dion_signal_read(c, RING_DATA);
        a->final_sig[RING_READY] = dion_signal_read(c, RING_READY);
    }
}

/* The persistent kernel's body: block 0 forwards, block 1 consumes, each on its own context. */
EX_HD void ring_pipeline(const ring_args_t *a, ex_team_t tm)
{
    dion_ctx_t c = dion_ctx(a->dev, tm.block);
    unsigned long long t0 = ex_now_ns();
    if (tm.block == 0)
        ring_forwarder(a, c, tm);
    else
        ring_consumer(a, c, tm);
    if (tm.thread == 0) ex_record_span(a->res, t0, ex_now_ns());
}

/* Supplied by the build: one launch of ring_pipeline on 2 blocks; 0 on success. */
static int ring_launch(const ring_args_t *a);

static int ring_main(int argc, char **argv, int chunks, size_t chunk_bytes, int slots)
{
    if (argc > 1) chunks = atoi(argv[1]);
    if (argc > 2) chunk_bytes = (size_t)atol(argv[2]);
    if (argc > 3) slots = atoi(argv[3]);
    if (chunks < 1 || chunk_bytes < 8 || chunk_bytes % 8 || slots < 1) {
        fprintf(stderr, "usage: %s [chunks [chunk bytes, a multiple of 8 [slots]]]\n", ex_name);
        return 2;
    }
    dion_comm_t comm;
    EX_DION(dion_comm_init_env(&comm));
    const int R = dion_comm_size(comm), me = dion_comm_rank(comm);
    if (R < 2) {
        fprintf(stderr, "%s: needs 2 or more ranks (dionrun -n N), got %d\n", ex_name, R);
        return 1;
    }
    ring_args_t a;
    memset(&a, 0, sizeof a);
    a.R = R, a.me = me, a.C = chunks, a.S = slots, a.words = chunk_bytes / 8;
    const size_t bytes = ((size_t)R * chunks + slots) * chunk_bytes;
    void *base;
    dion_win_t win;
    EX_DION(dion_win_alloc(comm, bytes, EX_ON_HOST, &base, &win));
    dion_dev_attr_t attr = {RING_SIGNALS, 2, 0, EX_DEV_FLAGS};
    dion_dev_t dev;
    EX_DION(dion_dev_create(comm, &attr, &dev));
    a.dev = dev, a.win = dion_win_device(win), a.base = (uint64_t *)base;
    a.bad = (unsigned long long *)ex_alloc(ex_name, sizeof *a.bad);
    a.final_sig = (uint64_t *)ex_alloc(ex_name, sizeof(uint64_t) * RING_SIGNALS);
    a.res = (ex_result_t *)ex_alloc(ex_name, sizeof(ex_result_t));

    /* My own chunks in place, everything else zero; nobody sends before every rank is ready. */
    uint64_t *host = (uint64_t *)calloc(1, bytes);
    for (int k = 0; k < chunks; k++)
        for (size_t i = 0; i < a.words; i++) host[ring_chunk_off(&a, me, k) / 8 + i] = ring_word(me, k, i);
    ex_to_dev(ex_name, base, host, bytes);
    ex_result_t r;
    ex_result_reset(&r);
    ex_to_dev(ex_name, a.res, &r, sizeof r);
    EX_DION(dion_comm_barrier(comm));

    int ok = ring_launch(&a) == 0;
    ex_to_host(ex_name, &r, a.res, sizeof r);
    ok = ok && ex_launch_ok(ex_name, comm, &dev, &r, "ring_pipeline");

    /* Checks: no word the consumer saw was wrong, every signal ended at one per chunk, and the gathered
     * array equals the reference, every chunk of every rank. */
    const uint64_t total = (uint64_t)(R - 1) * chunks;
    unsigned long long bad = 0;
    uint64_t fs[RING_SIGNALS];
    if (ok) {
        ex_to_host(ex_name, &bad, a.bad, sizeof bad);
        ex_to_host(ex_name, fs, a.final_sig, sizeof fs);
        ex_to_host(ex_name, host, base, bytes);
        if (bad)
            fprintf(stderr, "%s: rank %d: the consumer found %llu wrong words\n", ex_name, me, bad), ok = 0;
        for (int s = 0; ok && s < RING_SIGNALS; s++)
            if (fs[s] != total)
                fprintf(stderr, "%s: rank %d: signal %d ended at %llu, expected %llu\n", ex_name, me, s,
                        (unsigned long long)fs[s], (unsigned long long)total),
                    ok = 0;
    }
    for (int o = 0; ok && o < R; o++)
        for (int k = 0; ok && k < chunks; k++)
            for (size_t i = 0; i < a.words; i++)
                if (host[ring_chunk_off(&a, o, k) / 8 + i] != ring_word(o, k, i)) {
                    fprintf(stderr, "%s: rank %d: word %zu of rank %d's chunk %d is wrong\n", ex_name, me, i,
                            o, k);
                    ok = 0;
                    break;
                }
    ok = ex_all_ok(ex_name, comm, ok);
    double us = (double)(r.t1 - r.t0) * 1e-3, worst = 0;
    double *all = (double *)malloc(sizeof(double) * R);
    EX_DION(dion_comm_allgather(comm, &us, sizeof us, all));
    for (int i = 0; i < R; i++) worst = fmax(worst, all[i]);
    if (ok && me == 0)
        printf(
            "%s: %d ranks gathered %d chunks of %zu B each through %d slots: verified every chunk on every "
            "rank; %.1f us, %.2f GB/s received per rank\n",
            ex_name, R, chunks, chunk_bytes, slots, worst, (double)total * chunk_bytes / (worst * 1e3));
    free(all);
    free(host);
    ex_free(a.res), ex_free(a.final_sig), ex_free(a.bad);
    EX_DION(dion_dev_destroy(comm, &dev));
    EX_DION(dion_win_destroy(win));
    EX_DION(dion_comm_destroy(comm));
    return ok ? 0 : 1;
}

#endif /* RING_PIPELINE_H */
