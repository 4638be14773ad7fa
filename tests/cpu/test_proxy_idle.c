/* A rank that only receives, served by a proxy thread that naps: libfabric's tcp (1.17, through ofi_rxm)
 * serves a peer's RMA and atomics only inside the target's progress, and counts none of them, so a thread
 * that naps blind makes every remote operation wait for its nap. With the completion queue's wait object the
 * nap is a poll(2) that the operation's arrival ends.
 * Usage: test_proxy_idle PROVIDER (tcp or shm). Two forked ranks, each with the ofi engine. Rank 0 posts
 * nothing: one proxy thread (threads.c, no rings) drives its engine, with no idle spin and long naps. Rank 1
 * sends NOPS fetch-adds, one at a time, each waiting for its result, and checks that the old values form the
 * chain 0, A, 2A, ...; rank 0 then checks the word's total and how its thread's naps ended:
 *  tcp: the engine must offer the wait object (peer_notice WAIT), and at least half the operations must have
 *       ended (or averted) a nap through it; a thread napping blind ends none, and the stream then takes
 * about NOPS naps (printed, not asserted). shm: its peers signal no descriptor: the engine keeps FI_WAIT_NONE
 * and its remote-operation counter; only the data is checked (the proxy's nap path without a wait object).
 * Every wait is bounded. Exit 77 (skip) only when the provider cannot be opened here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion.h"
#include "transports/proxy/engine.h"
#include "transports/proxy/proxy.h"
#include "../common/test_time.h"

#define NOPS   100
#define ADDEND 7ull
#define WAIT_S 60.0

static int g_rank;

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "FAIL rank %d %s:%d: ", g_rank, __FILE__, __LINE__);                                 \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        fflush(stderr);                                                                                      \
        _exit(1);                                                                                            \
    } while (0)
#define CHECK_OK(call)                                                                                       \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) FAIL("%s -> %s: %s", #call, dion_status_string(s_), dion_last_error());      \
    } while (0)

static const dion__engine_ops_t *E = &dion__engine_ofi;
static dion__engine_t *g_e;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* The receiver's proxy thread: progress polls the engine (nothing of its own is posted, so no completions
 * are expected), wait arms its wait object, as the proxy backend's glue does. */
static dion_status_t no_execute(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                uint32_t n, uint32_t *taken)
{
    (void)arg, (void)thread, (void)r, (void)cmds, (void)n;
    *taken = 0;
    return DION_SUCCESS;
}

static int recv_progress(void *arg, uint32_t thread)
{
    (void)arg, (void)thread;
    dion__engine_cqe_t cq[8];
    pthread_mutex_lock(&g_lock);
    int k = E->poll(g_e, cq, 8);
    int busy = dion__engine_awake(E, g_e, k != 0);
    pthread_mutex_unlock(&g_lock);
    if (k != 0) FAIL("the receiver got %d completions, yet it posted nothing (%s)", k, dion_last_error());
    return busy;
}

static int recv_wait(void *arg, uint32_t thread, int *fd)
{
    (void)arg, (void)thread;
    pthread_mutex_lock(&g_lock);
    int w = E->wait_arm ? E->wait_arm(g_e, fd) : -1;
    pthread_mutex_unlock(&g_lock);
    return w;
}

/* Polls the sender's engine until the completion of cookie arrives; returns its fetched value. */
static uint64_t send_wait(uint64_t cookie)
{
    double t0 = now_s();
    for (;;) {
        dion__engine_cqe_t cq[4];
        int k = E->poll(g_e, cq, 4);
        if (k < 0) FAIL("engine broke: %s", dion_last_error());
        for (int j = 0; j < k; j++) {
            if (cq[j].cookie != cookie)
                FAIL("completion of cookie %llu, expected %llu", (unsigned long long)cq[j].cookie,
                     (unsigned long long)cookie);
            if (cq[j].status != DION_SUCCESS)
                FAIL("fetch-add %llu failed: %s", (unsigned long long)cookie, cq[j].why);
            return cq[j].value;
        }
        if (now_s() - t0 > WAIT_S) FAIL("fetch-add %llu never completed", (unsigned long long)cookie);
    }
}

static void rank_main(int rank, const char *prov, const dion_unique_id_t *id)
{
    g_rank = rank;
    dion_comm_t comm;
    CHECK_OK(dion_comm_init_rank(&comm, 2, id, rank));
    char why[512] = "";
    dion__engine_open_args_t oa = {.rank = rank, .nranks = 2, .cuda_device = -1};
    dion_status_t os = E->open(&oa, &g_e, why, sizeof why);
    int st[2], mine = (int)os;
    CHECK_OK(dion_comm_allgather(comm, &mine, sizeof mine, st));
    for (int r = 0; r < 2; r++)
        if (st[r] != DION_SUCCESS) {
            if (rank == 0) printf("SKIP: the ofi engine cannot open %s here: %s\n", prov, why);
            fflush(stdout);
            _exit(st[r] == DION_ERR_UNSUPPORTED ? 77 : 1);
        }
    dion__engine_caps_t caps;
    E->query(g_e, &caps);
    int tcp = strncmp(caps.provider, "tcp", 3) == 0;
    if (rank == 0)
        printf("provider %s, manual progress %d, peer notice %d (0 none, 1 counter, 2 wait object)\n",
               caps.provider, caps.manual_progress, caps.peer_notice);
    if (tcp && caps.peer_notice != DION__ENGINE_NOTICE_WAIT)
        FAIL("provider %s: the engine offers no wait object that peers' operations reach (peer_notice %d)",
             caps.provider, caps.peer_notice);
    if (!tcp && caps.peer_notice == DION__ENGINE_NOTICE_WAIT)
        FAIL("provider %s: a wait object its peers never signal", caps.provider);

    dion__engine_addr_t me, all[2];
    CHECK_OK(E->address(g_e, &me));
    CHECK_OK(dion_comm_allgather(comm, &me, sizeof me, all));
    CHECK_OK(E->connect(g_e, all, 2));
    uint64_t *win;
    if (posix_memalign((void **)&win, 4096, 4096)) FAIL("out of memory");
    memset(win, 0, 4096);
    dion__engine_mr_t *mr;
    dion__engine_rkey_t key, keys[2];
    CHECK_OK(E->mem_reg(g_e, win, 4096, DION__ENGINE_MEM_HOST, &mr, &key));
    CHECK_OK(dion_comm_allgather(comm, &key, sizeof key, keys));

    dion__proxy_threads_t *th = NULL;
    if (rank == 0) { /* the receiver: a proxy thread without rings drives its engine, napping when idle */
        dion__proxy_exec_t ex = {no_execute, recv_progress, NULL, recv_wait, 0, NULL};
        CHECK_OK(dion__proxy_threads_start(NULL, 0, &ex, -1, &th));
    }
    CHECK_OK(dion_comm_barrier(comm)); /* the receiver's thread is up: it serves from now on */

    double t0 = now_s();
    if (rank == 1) {
        for (uint64_t i = 0; i < NOPS; i++) {
            CHECK_OK(E->atomic(g_e, 0, DION__ENGINE_AMO_FETCH_ADD, &keys[0], 64, ADDEND, 0, 0, i + 1));
            uint64_t old = send_wait(i + 1);
            if (old != i * ADDEND)
                FAIL("fetch-add %llu read %llu, expected %llu (an operation lost, doubled or reordered)",
                     (unsigned long long)i, (unsigned long long)old, (unsigned long long)(i * ADDEND));
        }
        printf("%d fetch-adds to a receive-only rank over %s: %.3f s\n", NOPS, caps.provider, now_s() - t0);
    }
    /* every fetch-add completed: nothing needs the sender's progress through this barrier */
    CHECK_OK(dion_comm_barrier(comm));
    if (rank == 0) {
        uint64_t v = __atomic_load_n(&win[8], __ATOMIC_ACQUIRE);
        dion__proxy_thread_stats_t s;
        dion__proxy_threads_stats(th, 0, &s);
        dion__proxy_threads_stop(th);
        printf("receiver: word %llu, %llu naps, %llu ended or averted by the engine's wait object\n",
               (unsigned long long)v, (unsigned long long)s.sleeps, (unsigned long long)s.wakes);
        if (v != NOPS * ADDEND)
            FAIL("the word reads %llu after %d fetch-adds of %llu", (unsigned long long)v, NOPS,
                 (unsigned long long)ADDEND);
        if (memcmp(win + 9, (uint8_t[4096 - 72]){0}, 4096 - 72) || win[0] || win[7])
            FAIL("bytes around the word changed");
        if (tcp && s.wakes < NOPS / 2)
            FAIL("only %llu of %d remote operations woke the napping receiver through the wait object: the "
                 "others waited for its naps to run out",
                 (unsigned long long)s.wakes, NOPS);
        if (!tcp && s.wakes)
            FAIL("%llu wake-ups from a wait object that does not exist", (unsigned long long)s.wakes);
    }
    CHECK_OK(dion_comm_barrier(comm));
    CHECK_OK(E->mem_dereg(g_e, mr));
    E->close(g_e);
    free(win);
    dion_comm_destroy(comm);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "shm"))) {
        fprintf(stderr, "usage: test_proxy_idle tcp|shm\n");
        return 2;
    }
    setenv("DION_OFI_PROVIDER", argv[1], 1);
    /* the receiver naps at once when idle, and long: without the wait object every operation would wait */
    setenv("DION_PROXY_SPIN", "0", 1);
    setenv("DION_PROXY_SLEEP_MAX", "20ms", 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(170);
    pid_t pids[2];
    int pipes[2][2];
    for (int r = 0; r < 2; r++) {
        if (pipe(pipes[r])) return 1;
        pids[r] = fork();
        if (pids[r] < 0) return 1;
        if (pids[r] == 0) {
            close(pipes[r][1]);
            dion_unique_id_t id;
            size_t got = 0;
            while (got < sizeof id) {
                ssize_t k = read(pipes[r][0], (char *)&id + got, sizeof id - got);
                if (k <= 0) _exit(3);
                got += (size_t)k;
            }
            rank_main(r, argv[1], &id);
            fflush(stdout);
            _exit(0);
        }
        close(pipes[r][0]);
    }
    dion_unique_id_t id;
    if (dion_get_unique_id(&id) != DION_SUCCESS) {
        fprintf(stderr, "dion_get_unique_id: %s\n", dion_last_error());
        return 1;
    }
    for (int r = 0; r < 2; r++) {
        if (write(pipes[r][1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
        close(pipes[r][1]);
    }
    int failed = 0, skipped = 0;
    for (int r = 0; r < 2; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code == 77)
            skipped++;
        else if (code) {
            fprintf(stderr, "rank %d exited with %d\n", r, code);
            failed++;
        }
    }
    if (failed) return 1;
    if (skipped) return skipped == 2 ? 77 : 1;
    return 0;
}
