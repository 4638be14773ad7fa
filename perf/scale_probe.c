/* Setup cost per rank as a function of ranks, windows and contexts, in CPU mode (docs/multihost.md, "Scale").
 * Run under dionrun (optionally --hosts): scale_probe WINDOWS CONTEXTS. Rank 0 prints one CSV row.
 *
 * A first communicator warms everything up (CUDA runtime probe, logger, watchdog); the measured one is a
 * second communicator whose root lives in rank 0 and which every rank starts right after a barrier, so the
 * time is the bootstrap's own and not the launcher's spawn skew. Memory is the heap (mallinfo2: bytes in use,
 * exact) that each step leaves allocated; RSS moves in pages and says little at these sizes. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dion/dion.h"
#include "src/comm.h"
#include "transports/p2p/p2p.h"

#define BARRIERS   300
#define ALLGATHERS 100

static int g_rank;

static void check(dion_status_t st, const char *what)
{
    if (st != DION_SUCCESS) {
        fprintf(stderr, "scale_probe rank %d: %s: %s\n", g_rank, what, dion_last_error());
        exit(1);
    }
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static long long heap_bytes(void)
{
    struct mallinfo2 m = mallinfo2();
    return (long long)(m.uordblks + m.hblkhd);
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* Bytes this network namespace has sent (IpExt OutOctets: IP packets with headers, ACKs included). Under
 * dionrun --hosts that is this rank's traffic alone. */
static long long out_octets(void)
{
    FILE *f = fopen("/proc/net/netstat", "r");
    char names[4096], values[4096];
    long long v = -1;
    while (f && fgets(names, sizeof names, f) && fgets(values, sizeof values, f)) {
        if (strncmp(names, "IpExt:", 6) != 0) continue;
        char *sn, *sv, *n = strtok_r(names, " \n", &sn), *x = strtok_r(values, " \n", &sv);
        for (; n && x; n = strtok_r(NULL, " \n", &sn), x = strtok_r(NULL, " \n", &sv))
            if (strcmp(n, "OutOctets") == 0) v = atoll(x);
    }
    if (f) fclose(f);
    return v;
}

/* What each rank reports to rank 0. */
typedef struct {
    double init_us, barrier_us, ag112_us, ag1k_us, win_us, dev_us;
    long long init_heap, win_heap, dev_heap, ag1k_out; /* ag1k_out: bytes sent per allgather of 1 KiB */
    long rss_kb;
} sample_t;

static double time_allgather(dion_comm_t c, size_t bytes, int n)
{
    char *mine = calloc(1, bytes), *all = calloc((size_t)n, bytes);
    if (!mine || !all) check(DION_ERR_NO_MEMORY, "allocating allgather buffers");
    check(dion_comm_barrier(c), "barrier");
    double t = now_us();
    for (int i = 0; i < ALLGATHERS; i++) check(dion_comm_allgather(c, mine, bytes, all), "allgather");
    t = (now_us() - t) / ALLGATHERS;
    free(mine);
    free(all);
    return t;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: scale_probe WINDOWS CONTEXTS (under dionrun [--hosts] -n N)\n");
        return 2;
    }
    int nwin = atoi(argv[1]), nctx = atoi(argv[2]);
    dion_comm_t warm;
    check(dion_comm_init_env(&warm), "dion_comm_init_env");
    g_rank = dion_comm_rank(warm);
    int n = dion_comm_size(warm);

    dion_unique_id_t id;
    if (g_rank == 0) check(dion_get_unique_id(&id), "dion_get_unique_id");
    check(dion_comm_bcast(warm, &id, sizeof id, 0), "bcast of the id");
    check(dion_comm_barrier(warm), "barrier");

    sample_t s;
    memset(&s, 0, sizeof s);
    long long h0 = heap_bytes();
    double t0 = now_us();
    dion_comm_t c;
    check(dion_comm_init_rank(&c, n, &id, g_rank), "dion_comm_init_rank");
    s.init_us = now_us() - t0;
    s.init_heap = heap_bytes() - h0;
    int single_host = c->local_size == n;

    check(dion_comm_barrier(c), "barrier");
    t0 = now_us();
    for (int i = 0; i < BARRIERS; i++) check(dion_comm_barrier(c), "barrier");
    s.barrier_us = (now_us() - t0) / BARRIERS;
    s.ag112_us = time_allgather(c, sizeof(dion__rank_info_t), n);
    long long o0 = out_octets();
    s.ag1k_us = time_allgather(c, 1024, n);
    s.ag1k_out = o0 >= 0 ? (out_octets() - o0) / ALLGATHERS : -1;

    dion_win_t *wins = calloc((size_t)nwin, sizeof *wins);
    void *base;
    check(dion_comm_barrier(c), "barrier");
    h0 = heap_bytes();
    t0 = now_us();
    for (int w = 0; w < nwin; w++) check(dion_win_alloc(c, 4096, 1, &base, &wins[w]), "dion_win_alloc");
    s.win_us = (now_us() - t0) / nwin;
    s.win_heap = (heap_bytes() - h0) / nwin;

    /* Across simulated hosts the handle is refused today (p2p only): measured on one host only. */
    dion_dev_t dev;
    if (single_host) {
        dion_dev_attr_t attr = {.num_contexts = (uint32_t)nctx};
        check(dion_comm_barrier(c), "barrier");
        h0 = heap_bytes();
        t0 = now_us();
        check(dion_dev_create(c, &attr, &dev), "dion_dev_create");
        s.dev_us = now_us() - t0;
        s.dev_heap = heap_bytes() - h0;
    }
    s.rss_kb = rss_kb();

    sample_t *all = calloc((size_t)n, sizeof *all);
    check(dion_comm_allgather(c, &s, sizeof s, all), "allgather of samples");
    if (g_rank == 0) {
        /* Times: the slowest rank (a collective ends when the last rank is done). Heap: rank 1, a rank
         * without the root (rank 0 also ran the root service for this communicator). */
        sample_t m = all[0];
        for (int r = 1; r < n; r++) {
            if (all[r].init_us > m.init_us) m.init_us = all[r].init_us;
            if (all[r].win_us > m.win_us) m.win_us = all[r].win_us;
            if (all[r].dev_us > m.dev_us) m.dev_us = all[r].dev_us;
            if (all[r].rss_kb > m.rss_kb) m.rss_kb = all[r].rss_kb;
        }
        const sample_t *r1 = n > 1 ? &all[1] : &all[0];
        printf("%d,%s,%d,%d,%.0f,%lld,%.1f,%.1f,%.1f,%lld,%.0f,%lld,%.0f,%lld,%ld\n", n,
               single_host ? "one-host" : "hosts", nwin, nctx, m.init_us, r1->init_heap, all[0].barrier_us,
               all[0].ag112_us, all[0].ag1k_us, single_host ? -1LL : r1->ag1k_out, m.win_us, r1->win_heap,
               single_host ? m.dev_us : -1.0, single_host ? r1->dev_heap : -1LL, m.rss_kb);
        if (getenv("SCALE_PROBE_SIZES"))
            fprintf(stderr,
                    "sizeof: rank_info %zu, win_peer %zu, dev_peer %zu, mem_desc %zu, mem_import %zu, "
                    "dev_t %zu\n",
                    sizeof(dion__rank_info_t), sizeof(struct dion_win_peer), sizeof(struct dion_dev_peer),
                    sizeof(dion__mem_desc_t), sizeof(dion__mem_import_t), sizeof(dion_dev_t));
    }
    free(all);
    check(dion_comm_barrier(c), "barrier");
    if (single_host) check(dion_dev_destroy(c, &dev), "dion_dev_destroy");
    for (int w = 0; w < nwin; w++) check(dion_win_destroy(wins[w]), "dion_win_destroy");
    free(wins);
    dion_comm_destroy(c);
    dion_comm_destroy(warm);
    return 0;
}
