/* Staged windows under the message-rate pattern of dion-perf (put8_msgrate), in CPU mode: BLOCKS blocks of
 * THREADS threads share CTXS contexts (so up to BLOCKS/CTXS blocks interleave their commands in one ring),
 * every thread puts PER 8-byte words to word t + i*nthreads of rank 1's staged window, from word % 1024 of
 * its own staged window. Rank 1 checks every word; both print the time and the staging counters (notices
 * sent, puts merged into them, notices applied, copies they took) and the engine's (posts, operations held,
 * posts the provider refused). Run with dionrun -n 2 and DION_PROXY_STAGING=always. With MAX_REFUSED, rank 0
 * fails when the provider refused more than MAX_REFUSED posts per put (each retry counts): many producers
 * must not drive the provider into refusing (DION_OFI_PEER_OPS). Counts, not times, so it holds on a loaded
 * machine. Usage: staged_rate_cpu BLOCKS THREADS PER [REPS [MAX_REFUSED]] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"
#include "transports/proxy/px.h"
#include "transports/transport.h"
#include "../common/test_time.h"

#define CTXS 8

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t nthreads, words, base;
    int per;
    int failed;
} args_t;

static void kern(void *p)
{
    args_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, dion__block_index() % CTXS);
    uint64_t t = (uint64_t)dion__block_index() * dion__block_size() + dion__block_thread();
    for (int i = 0; i < a->per; i++) {
        uint64_t w = (t + (uint64_t)i * a->nthreads) % a->words;
        dion_put(c, a->win, 1, a->base + w * 8, a->win, (w % 1024) * 8, 8);
    }
    if (dion_quiet(c) != DION_SUCCESS) __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
}

#define OK(x)                                                                                                \
    do {                                                                                                     \
        if ((x) != DION_SUCCESS) {                                                                           \
            fprintf(stderr, "FAIL %s: %s\n", #x, dion_last_error());                                         \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 4) return 2;
    unsigned blocks = (unsigned)atoi(argv[1]), threads = (unsigned)atoi(argv[2]);
    int per = atoi(argv[3]), reps = argc > 4 ? atoi(argv[4]) : 3;
    double max_refused = argc > 5 ? atof(argv[5]) : -1;
    dion_comm_t comm;
    OK(dion_comm_init_env(&comm));
    int rank = dion_comm_rank(comm);
    uint64_t nth = (uint64_t)blocks * threads, words = nth * (uint64_t)per;
    size_t bytes = 8192 + words * 8;
    void *base;
    dion_win_t win;
    OK(dion_win_alloc(comm, bytes, 1, &base, &win));
    for (size_t i = 0; i < 8192; i++) ((uint8_t *)base)[i] = (uint8_t)(i * 7 + 3);
    dion_dev_attr_t attr = {64, CTXS, 0, DION_DEV_FLAG_CPU};
    dion_dev_t dev;
    OK(dion_dev_create(comm, &attr, &dev));
    args_t a = {dev, dion_win_device(win), nth, words, 8192, per, 0};
    double best = 1e9;
    int bad = 0;
    for (int rep = 0; rep < reps; rep++) {
        memset((char *)base + 8192, 0, words * 8);
        OK(dion_comm_barrier(comm));
        double t0 = now_s();
        if (rank == 0) OK(dion_cpu_launch(blocks, threads, kern, &a));
        double dt = now_s() - t0;
        OK(dion_comm_barrier(comm));
        if (rank == 0 && dt < best) best = dt;
        if (rank == 1)
            for (uint64_t w = 0; w < words; w++)
                if (memcmp((char *)base + 8192 + w * 8, (char *)base + (w % 1024) * 8, 8)) {
                    fprintf(stderr, "FAIL word %llu of %llu did not arrive\n", (unsigned long long)w,
                            (unsigned long long)words);
                    bad = 1;
                    break;
                }
    }
    dion__pxc_t *pc = dion__tl_state(comm, &dion__tl_proxy);
    if (pc) {
        pthread_mutex_lock(&pc->mu);
        printf("rank %d: %u blocks x %u threads x %d puts: %s%.3f Mops; notices %llu (+%llu merged), applied "
               "%llu with %llu copies; sources: %llu puts, %llu copies\n",
               rank, blocks, threads, per, rank ? "" : "best ", rank ? 0.0 : (double)words / best / 1e6,
               (unsigned long long)pc->n_notes, (unsigned long long)pc->n_merged,
               (unsigned long long)pc->n_applied, (unsigned long long)pc->n_copies,
               (unsigned long long)pc->n_src_puts, (unsigned long long)pc->n_src_copies);
        dion__engine_counts_t k = {0, 0, 0, 0};
        if (pc->e && pc->E->counts) pc->E->counts(pc->e, &k);
        pthread_mutex_unlock(&pc->mu);
        double puts = (double)words * reps;
        printf("rank %d: engine %llu posts, %llu held, %llu refused (%.3f per put), %llu flushes\n", rank,
               (unsigned long long)k.posts, (unsigned long long)k.held, (unsigned long long)k.refused,
               rank ? 0.0 : (double)k.refused / puts, (unsigned long long)k.flushes);
        if (rank == 0 && max_refused >= 0 && (!pc->E->counts || (double)k.refused > max_refused * puts)) {
            fprintf(stderr,
                    "FAIL rank 0: the provider refused %llu posts for %.0f puts (more than %.2f each)\n",
                    (unsigned long long)k.refused, puts, max_refused);
            bad = 1;
        }
    }
    OK(dion_dev_destroy(comm, &dev));
    OK(dion_win_destroy(win));
    dion_comm_destroy(comm);
    return bad || a.failed;
}
