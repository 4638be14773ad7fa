/* proxy/verbs on-demand connection (DION_IB_CONNECT), end to end over the fake libibverbs. Run under dionrun
 * with DION_TRANSPORT=proxy/verbs and DION_IB_LIBRARY=the fake.
 *
 *   proxy_verbs_ondemand count ondemand|eager
 *     Phase 1: each rank put_signals random bytes to its partner (rank ^ 1) only, phase 2 to the next rank of
 *     a ring (receiving from the previous one). After each phase (data checked) the QPs this process made
 *     must be exactly the peers it exchanged with in either direction so far (an RC connection has a QP at
 *     both ends): 1 then 2 with 4 ranks, where eager makes n - 1 at comm creation.
 *   proxy_verbs_ondemand dead VICTIM
 *     Rank VICTIM exits (no teardown) after comm and handle creation; rank 0 then puts to it, so the
 * handshake meets a dead listener. The quiet must fail (not time out: its own timeout is longer than the
 *     handshake's, DION_WAIT_TIMEOUT) and dion_dev_check must name the victim and the handshake. The other
 *     ranks make no collective call after the victim left. Run with DION_WATCHDOG_INTERVAL=0 so that the
 *     bootstrap's failure detection does not end the waits first. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define OD_WIN  65536
#define OD_SRC  32768
#define OD_SLOT 8192

static int rank = -1, failures;
#define OD_FAIL(...)                                                                                         \
    do {                                                                                                     \
        fprintf(stderr, "FAIL rank %d: ", rank);                                                             \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        failures++;                                                                                          \
    } while (0)

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int to, from; /* -1: none */
    size_t bytes, off;
    uint32_t sig;
    dion_status_t put, wait, quiet;
} od_args_t;

static void od_body(void *p)
{
    od_args_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    if (a->to >= 0)
        dion_put_signal(c, a->win, a->to, a->off, a->win, OD_SRC, a->bytes, a->sig, DION_SIG_ADD, 1);
    a->quiet = dion_quiet(c);
    if (a->from >= 0) a->wait = dion_wait(c, a->sig, DION_CMP_GE, 1, NULL);
}

static int (*qps_created)(void);

static unsigned char od_byte(int from, int phase, size_t i)
{
    return (unsigned char)(from * 37 + phase * 101 + i * 7 + (i >> 8));
}

/* One phase: put_signal to `to`, wait for `from`, check the bytes `from` wrote (sizes and offsets derived
 * from the sender's rank and the phase, so both sides know them). */
static void od_phase(dion_comm_t comm, dion_dev_t dev, dion_win_t win, unsigned char *w, int phase, int to,
                     int from)
{
    size_t bytes_to = 1 + (size_t)((rank * 7919 + phase * 104729) % (OD_SLOT - 1));
    size_t bytes_from = 1 + (size_t)((from * 7919 + phase * 104729) % (OD_SLOT - 1));
    for (size_t i = 0; i < bytes_to; i++) w[OD_SRC + i] = od_byte(rank, phase, i);
    dion_comm_barrier(comm);
    od_args_t a = {dev,
                   dion_win_device(win),
                   to,
                   from,
                   bytes_to,
                   (size_t)phase * OD_SLOT,
                   (uint32_t)phase,
                   DION_SUCCESS,
                   DION_SUCCESS,
                   DION_SUCCESS};
    if (dion_cpu_launch(1, 1, od_body, &a) != DION_SUCCESS) OD_FAIL("launch: %s", dion_last_error());
    if (a.quiet != DION_SUCCESS || a.wait != DION_SUCCESS)
        OD_FAIL("phase %d: quiet %s, wait %s: %s", phase, dion_status_string(a.quiet),
                dion_status_string(a.wait), dion_last_error());
    for (size_t i = 0; from >= 0 && i < bytes_from; i++)
        if (w[(size_t)phase * OD_SLOT + i] != od_byte(from, phase, i)) {
            OD_FAIL("phase %d: byte %zu of %zu from rank %d is %u, expected %u", phase, i, bytes_from, from,
                    w[(size_t)phase * OD_SLOT + i], od_byte(from, phase, i));
            break;
        }
    dion_comm_barrier(comm); /* every handshake is over: each target answered before its data came */
}

static int mode_count(dion_comm_t comm, dion_dev_t dev, dion_win_t win, unsigned char *w, int eager)
{
    int n = dion_comm_size(comm);
    int partner = (rank ^ 1) < n ? rank ^ 1 : -1, next = (rank + 1) % n, prev = (rank + n - 1) % n;
    int seen[4096] = {0};
    if (n > 4096) return 2;
    od_phase(comm, dev, win, w, 1, partner, partner);
    if (partner >= 0) seen[partner] = 1;
    int want = 0, got = qps_created();
    for (int r = 0; r < n; r++) want += seen[r];
    if (eager) want = n - 1;
    if (got != want) OD_FAIL("after the partner phase this process made %d QPs, expected %d", got, want);
    int p1 = got;
    od_phase(comm, dev, win, w, 2, next, prev);
    seen[next] = seen[prev] = 1;
    want = 0, got = qps_created();
    for (int r = 0; r < n; r++) want += seen[r];
    if (eager) want = n - 1;
    if (got != want) OD_FAIL("after the ring phase this process made %d QPs, expected %d", got, want);
    printf("rank %d: %s: %d QP(s) after talking to rank %d, %d after the ring (of %d peers)\n", rank,
           eager ? "eager" : "on demand", p1, partner, got, n - 1);
    return 0;
}

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int to;
    dion_status_t quiet;
} dead_args_t;

static void dead_body(void *p)
{
    dead_args_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    dion_put(c, a->win, a->to, 0, a->win, OD_SRC, 64);
    a->quiet = dion_quiet(c);
}

static void mode_dead(dion_comm_t comm, dion_dev_t dev, dion_win_t win, int victim)
{
    dion_comm_barrier(comm); /* every rank has its handle; then the victim leaves */
    if (rank == victim) {
        fflush(stdout);
        _exit(0); /* as a crash would: no teardown, the listener closes with the process */
    }
    if (rank != 0) return;
    usleep(200000); /* let it go first */
    dead_args_t a = {dev, dion_win_device(win), victim, DION_SUCCESS};
    if (dion_cpu_launch(1, 1, dead_body, &a) != DION_SUCCESS) OD_FAIL("launch: %s", dion_last_error());
    if (a.quiet == DION_SUCCESS || a.quiet == DION_ERR_TIMEOUT)
        OD_FAIL("the quiet after a put to the dead rank %d returned %s, expected the handshake's error",
                victim, dion_status_string(a.quiet));
    dion_status_t st = dion_dev_check(comm, &dev);
    const char *msg = dion_last_error();
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    if (st == DION_SUCCESS)
        OD_FAIL("dion_dev_check reported nothing");
    else if (!strstr(msg, want) || !strstr(msg, "on-demand connection"))
        OD_FAIL("dion_dev_check's sentence does not name %s and the on-demand connection: %s", want, msg);
    else
        printf("rank 0: quiet -> %s; dion_dev_check: %s\n", dion_status_string(a.quiet), msg);
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "count") && strcmp(argv[1], "dead"))) {
        fprintf(stderr, "usage: proxy_verbs_ondemand count ondemand|eager | dead VICTIM\n");
        return 2;
    }
    const char *lib = getenv("DION_IB_LIBRARY");
    dion_comm_t comm;
    if (dion_comm_init_env(&comm) != DION_SUCCESS) {
        fprintf(stderr, "FAIL: comm: %s\n", dion_last_error());
        return 1;
    }
    rank = dion_comm_rank(comm);
    void *base = NULL;
    dion_win_t win;
    dion_dev_t dev;
    dion_dev_attr_t attr;
    memset(&attr, 0, sizeof attr);
    attr.num_signals = 16;
    attr.num_contexts = 1;
    attr.wait_timeout_ns = 30000000000ull; /* longer than the handshake's DION_WAIT_TIMEOUT */
    if (dion_win_alloc(comm, OD_WIN, 1, &base, &win) != DION_SUCCESS ||
        dion_dev_create(comm, &attr, &dev) != DION_SUCCESS) {
        fprintf(stderr, "FAIL rank %d: setup: %s\n", rank, dion_last_error());
        return 1;
    }
    /* the fake is loaded by now (the engine opened it); the handle gives its QP counter */
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    qps_created = h ? (int (*)(void))dlsym(h, "fake_ibv_qps_created") : NULL;
    if (!qps_created) {
        fprintf(stderr, "FAIL rank %d: DION_IB_LIBRARY (%s) is not the loaded fake libibverbs\n", rank,
                lib ? lib : "unset");
        return 1;
    }
    unsigned char *w = base;
    memset(w, 0, OD_WIN);
    if (!strcmp(argv[1], "dead")) {
        mode_dead(comm, dev, win, atoi(argv[2]));
        printf("%s: rank %d, dead peer before the handshake\n", failures ? "FAIL" : "PASS", rank);
        fflush(stdout);
        _exit(failures ? 1 : 0); /* no collective teardown: a rank is gone */
    }
    int rc = mode_count(comm, dev, win, w, !strcmp(argv[2], "eager"));
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    if (h) dlclose(h);
    printf("%s: rank %d, QPs follow the peers addressed\n", failures || rc ? "FAIL" : "PASS", rank);
    return failures || rc ? 1 : 0;
}
