/* Bootstrap tests: unique-id init with forked ranks, env init (dionrun, mpirun), a wrong secret, an
 * unreachable root, a rank killed in a barrier, and malformed frames thrown at the root.
 * Usage: test_bootstrap MODE [N]. Exit 0 on success; any failure prints what and exits 1. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion.h"

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                 \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        exit(1);                                                                                             \
    } while (0)
#define CHECK_OK(call)                                                                                       \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) FAIL("%s -> %s: %s", #call, dion_status_string(s_), dion_last_error());      \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned char pattern(int rank, size_t i, unsigned salt)
{
    return (unsigned char)(rank * 131 + i * 7 + (i >> 9) + salt);
}

/* The collective workout every bootstrap path must pass, checked byte by byte. */
static void workout(dion_comm_t comm, int barriers)
{
    int rank = dion_comm_rank(comm), n = dion_comm_size(comm);
    /* sizes: tiny, odd, and larger than one frame (1 MiB) so that chunking is exercised */
    const size_t sizes[] = {1, 13, 4096 + 5, (3u << 20) + 77};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t sz = sizes[k];
        unsigned char *mine = malloc(sz), *all = malloc(sz * (size_t)n);
        if (!mine || !all) FAIL("out of memory");
        for (size_t i = 0; i < sz; i++) mine[i] = pattern(rank, i, (unsigned)k);
        memset(all, 0xee, sz * (size_t)n);
        CHECK_OK(dion_comm_allgather(comm, mine, sz, all));
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < sz; i++)
                if (all[(size_t)r * sz + i] != pattern(r, i, (unsigned)k))
                    FAIL("rank %d: allgather size %zu: byte %zu of rank %d is %u, expected %u", rank, sz, i,
                         r, all[(size_t)r * sz + i], pattern(r, i, (unsigned)k));
        free(mine);
        free(all);
    }
    for (int root = 0; root < n; root++) {
        size_t sz = 1000 + (size_t)root * 777 + (root == n - 1 ? (2u << 20) : 0);
        unsigned char *buf = malloc(sz);
        if (!buf) FAIL("out of memory");
        for (size_t i = 0; i < sz; i++) buf[i] = rank == root ? pattern(root, i, 99) : 0;
        CHECK_OK(dion_comm_bcast(comm, buf, sz, root));
        for (size_t i = 0; i < sz; i++)
            if (buf[i] != pattern(root, i, 99)) FAIL("rank %d: bcast from %d: byte %zu wrong", rank, root, i);
        free(buf);
    }
    for (int i = 0; i < barriers; i++) CHECK_OK(dion_comm_barrier(comm));
    /* A last allgather of the barrier count shows nobody skipped ahead. */
    int *counts = malloc(sizeof(int) * (size_t)n);
    CHECK_OK(dion_comm_allgather(comm, &barriers, sizeof barriers, counts));
    for (int r = 0; r < n; r++)
        if (counts[r] != barriers) FAIL("rank %d: rank %d reports %d barriers", rank, r, counts[r]);
    free(counts);
}

typedef struct {
    dion_unique_id_t id;
    int n;
    int barriers;
} uid_job_t;

/* Forks n ranks that run fn(rank, job) and returns how many failed. The children are forked before the parent
 * starts any thread (the bootstrap root, a fuzzer): forking a process with running threads can leave locks
 * held in the child (seen with AddressSanitizer's allocator). prepare() then runs in the parent and must fill
 * job->id, which reaches the children through pipes. */
static int run_ranks(int n, void (*fn)(int rank, void *arg), uid_job_t *job, void (*prepare)(uid_job_t *),
                     int *codes)
{
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int(*pipes)[2] = calloc((size_t)n, sizeof *pipes);
    for (int r = 0; r < n; r++) {
        if (pipe(pipes[r]) != 0) FAIL("pipe: %s", strerror(errno));
        pids[r] = fork();
        if (pids[r] < 0) FAIL("fork: %s", strerror(errno));
        if (pids[r] == 0) {
            close(pipes[r][1]);
            size_t got = 0;
            while (got < sizeof job->id) {
                ssize_t k = read(pipes[r][0], (char *)&job->id + got, sizeof job->id - got);
                if (k <= 0) _exit(3);
                got += (size_t)k;
            }
            fn(r, job);
            fflush(stdout);
            _exit(0);
        }
        close(pipes[r][0]);
    }
    prepare(job);
    for (int r = 0; r < n; r++) {
        if (write(pipes[r][1], &job->id, sizeof job->id) != (ssize_t)sizeof job->id)
            FAIL("write to rank %d", r);
        close(pipes[r][1]);
    }
    int failed = 0;
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (codes) codes[r] = code;
        if (code != 0) failed++;
    }
    free(pids);
    free(pipes);
    return failed;
}

static void make_id(uid_job_t *j)
{
    CHECK_OK(dion_get_unique_id(&j->id));
}

static void uid_rank(int rank, void *arg)
{
    uid_job_t *j = arg;
    dion_comm_t comm;
    CHECK_OK(dion_comm_init_rank(&comm, j->n, &j->id, rank));
    if (dion_comm_rank(comm) != rank || dion_comm_size(comm) != j->n) FAIL("rank/size mismatch");
    workout(comm, j->barriers);
    CHECK_OK(dion_comm_destroy(comm));
}

static int mode_uid(int n)
{
    uid_job_t j = {.n = n, .barriers = 1000};
    if (run_ranks(n, uid_rank, &j, make_id, NULL)) FAIL("unique-id bootstrap with %d ranks failed", n);
    printf("uid %d ranks: ok\n", n);
    return 0;
}

static int mode_env(void)
{
    dion_comm_t comm;
    CHECK_OK(dion_comm_init_env(&comm));
    workout(comm, 1000);
    printf("env rank %d of %d: ok\n", dion_comm_rank(comm), dion_comm_size(comm));
    CHECK_OK(dion_comm_destroy(comm));
    return 0;
}

/* A rank whose id carries a wrong secret is refused; the real ranks still complete. */
static void secret_rank(int rank, void *arg)
{
    uid_job_t *j = arg;
    if (rank == j->n) { /* the impostor */
        dion_unique_id_t bad = j->id;
        bad.bytes[30] ^= 0x5a; /* inside the secret */
        dion_comm_t comm;
        dion_status_t st = dion_comm_init_rank(&comm, j->n, &bad, 1);
        if (st != DION_ERR_BOOTSTRAP)
            FAIL("impostor: expected DION_ERR_BOOTSTRAP, got %s", dion_status_string(st));
        if (!strstr(dion_last_error(), "secret"))
            FAIL("impostor: error does not mention the secret: %s", dion_last_error());
        _exit(0);
    }
    if (rank == 1) usleep(300000); /* let the impostor claim rank 1 first */
    uid_rank(rank, arg);
}

static int mode_secret(void)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "20s", 1);
    uid_job_t j = {.n = 3, .barriers = 10};
    /* ranks 0..2 plus an impostor as "rank 3" of the fork loop */
    int codes[4];
    if (run_ranks(4, secret_rank, &j, make_id, codes))
        FAIL("codes %d %d %d %d", codes[0], codes[1], codes[2], codes[3]);
    printf("wrong secret rejected, real job completed\n");
    return 0;
}

static int mode_unreachable(void)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "2s", 1);
    /* An id whose root is a port nobody listens on: take a real id and point it at a closed port. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &len);
    unsigned port = ntohs(a.sin_port);
    close(s); /* now closed: connections are refused */
    dion_unique_id_t id;
    CHECK_OK(dion_get_unique_id(&id));
    /* root address layout: family at byte 8, port (big endian) at 10..11, address at 12 */
    id.bytes[8] = 4;
    id.bytes[10] = (unsigned char)(port >> 8);
    id.bytes[11] = (unsigned char)port;
    id.bytes[12] = 127, id.bytes[13] = 0, id.bytes[14] = 0, id.bytes[15] = 1;
    dion_comm_t comm;
    double t0 = now_s();
    dion_status_t st = dion_comm_init_rank(&comm, 2, &id, 1);
    double dt = now_s() - t0;
    if (st != DION_ERR_BOOTSTRAP) FAIL("expected DION_ERR_BOOTSTRAP, got %s", dion_status_string(st));
    if (dt < 1.5 || dt > 8.0) FAIL("gave up after %.2f s; the timeout is 2 s", dt);
    if (!strstr(dion_last_error(), "127.0.0.1")) FAIL("error does not name the root: %s", dion_last_error());
    printf("unreachable root: %s after %.2f s: %s\n", dion_status_string(st), dt, dion_last_error());
    return 0;
}

/* A rank is SIGKILLed while the others run barriers: each survivor must return an error naming it. */
static void *killer(void *arg)
{
    usleep((useconds_t)(size_t)arg);
    raise(SIGKILL);
    return NULL;
}

static void kill_rank(int rank, void *arg)
{
    uid_job_t *j = arg;
    dion_comm_t comm;
    CHECK_OK(dion_comm_init_rank(&comm, j->n, &j->id, rank));
    CHECK_OK(dion_comm_barrier(comm));
    const int victim = j->n / 2;
    if (rank == victim) {
        pthread_t t;
        pthread_create(&t, NULL, killer, (void *)(size_t)20000);
    }
    double t0 = now_s();
    dion_status_t st = DION_SUCCESS;
    for (int i = 0; i < 100000000 && st == DION_SUCCESS; i++) st = dion_comm_barrier(comm);
    double dt = now_s() - t0;
    if (rank == victim) FAIL("victim survived");
    if (st != DION_ERR_PEER_FAILED)
        FAIL("rank %d: expected DION_ERR_PEER_FAILED, got %s", rank, dion_status_string(st));
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    if (!strstr(dion_last_error(), want))
        FAIL("rank %d: error does not name %s: %s", rank, want, dion_last_error());
    if (dt > 10.0) FAIL("rank %d: took %.1f s to notice (timeout 10 s)", rank, dt);
    /* Later calls fail at once with the same news. */
    if (dion_comm_barrier(comm) == DION_SUCCESS) FAIL("barrier after failure succeeded");
    printf("rank %d: %s after %.3f s: %s\n", rank, dion_status_string(st), dt, dion_last_error());
    dion_comm_destroy(comm);
}

static int mode_kill(int n)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "10s", 1);
    uid_job_t j = {.n = n};
    int *codes = calloc((size_t)n, sizeof *codes);
    run_ranks(n, kill_rank, &j, make_id, codes);
    for (int r = 0; r < n; r++) {
        int want = r == n / 2 ? 128 + SIGKILL : 0;
        if (codes[r] != want) FAIL("rank %d ended with %d, expected %d", r, codes[r], want);
    }
    free(codes);
    printf("killed rank reported by all %d survivors\n", n - 1);
    return 0;
}

/* dion_comm_abort from another thread while this rank's main thread is stuck in a barrier (its successor is
 * late): the barrier ends within a fraction of a second, and the other ranks hear of it. */
static dion_comm_t abort_comm;
static void *abort_soon(void *arg)
{
    (void)arg;
    usleep(200000);
    dion_comm_abort(abort_comm);
    return NULL;
}

static void abortcoll_rank(int rank, void *arg)
{
    uid_job_t *j = arg;
    CHECK_OK(dion_comm_init_rank(&abort_comm, j->n, &j->id, rank));
    CHECK_OK(dion_comm_barrier(abort_comm));
    pthread_t t;
    if (rank == 0) pthread_create(&t, NULL, abort_soon, NULL);
    if (rank == 1) usleep(1500000); /* late: rank 0's barrier cannot complete before the abort */
    double t0 = now_s();
    dion_status_t st = dion_comm_barrier(abort_comm);
    double dt = now_s() - t0;
    if (rank == 0) pthread_join(t, NULL);
    /* Ranks 1 and 2 may complete this barrier legitimately (rank 0 had entered it and sent its tokens before
     * it aborted); their next collective must fail. */
    if (rank != 0 && st == DION_SUCCESS) st = dion_comm_barrier(abort_comm);
    dt = now_s() - t0;
    if (st == DION_SUCCESS) FAIL("rank %d: a barrier succeeded after dion_comm_abort", rank);
    if (rank == 0 && (st != DION_ERR_ABORTED || dt > 1.0))
        FAIL("rank 0: barrier ended with %s after %.2f s; expected DION_ERR_ABORTED within 1 s",
             dion_status_string(st), dt);
    if (!strstr(dion_last_error(), "rank 0"))
        FAIL("rank %d: error does not name rank 0: %s", rank, dion_last_error());
    printf("rank %d: %s after %.2f s\n", rank, dion_status_string(st), dt);
    dion_comm_destroy(abort_comm);
}

static int mode_abortcoll(void)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "20s", 1);
    uid_job_t j = {.n = 3};
    int codes[3];
    if (run_ranks(3, abortcoll_rank, &j, make_id, codes))
        FAIL("ranks ended with %d %d %d", codes[0], codes[1], codes[2]);
    printf("abort interrupted a host barrier on all ranks\n");
    return 0;
}

/* Throws malformed traffic at the root while the real ranks bootstrap: random bytes, oversized lengths,
 * truncated frames, valid headers with wrong secrets. Fixed seeds. */
static volatile int fuzz_stop;
typedef struct {
    const dion_unique_id_t *id;
    int sent;
    unsigned seed;
} fuzz_arg_t;

static void *fuzzer(void *p)
{
    fuzz_arg_t *f = p;
    unsigned seed = f->seed;
    struct sockaddr_in a = {.sin_family = AF_INET};
    memcpy(&a.sin_addr, f->id->bytes + 12, 4);
    a.sin_port = htons((uint16_t)(f->id->bytes[10] << 8 | f->id->bytes[11]));
    for (int i = 0; i < 1000000 && !fuzz_stop && f->sent < 3000; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
            close(s);
            continue;
        }
        unsigned char buf[200];
        size_t len = 0;
        int kind = rand_r(&seed) % 5;
        if (kind == 0) { /* random bytes */
            len = 1 + (size_t)(rand_r(&seed) % sizeof buf);
            for (size_t k = 0; k < len; k++) buf[k] = (unsigned char)rand_r(&seed);
        } else { /* a header: right magic, then trouble */
            static const unsigned char magic[4] = {0x44, 0x4f, 0x4e, 0x46};
            memcpy(buf, magic, 4);
            unsigned type = kind == 1 ? 1 : (unsigned)(rand_r(&seed) % 8);
            unsigned flen = kind == 2 ? 0xfffffff0u : (kind == 3 ? 48u : (unsigned)rand_r(&seed));
            for (int k = 0; k < 4; k++) buf[4 + k] = (unsigned char)(type >> (8 * k));
            for (int k = 0; k < 4; k++) buf[8 + k] = (unsigned char)(flen >> (8 * k));
            if (kind == 3) { /* a HELLO with a random secret, sometimes truncated */
                for (int k = 0; k < 48; k++) buf[12 + k] = (unsigned char)rand_r(&seed);
                buf[28] = 0, buf[29] = 0, buf[30] = 0, buf[31] = 0; /* rank 0 */
                buf[32] = 4, buf[33] = 0, buf[34] = 0, buf[35] = 0; /* 4 ranks */
                len = rand_r(&seed) % 2 ? 60 : 12 + (size_t)(rand_r(&seed) % 48);
            } else {
                len = 12 + (size_t)(rand_r(&seed) % 40);
                for (size_t k = 12; k < len; k++) buf[k] = (unsigned char)rand_r(&seed);
            }
        }
        ssize_t w = send(s, buf, len, MSG_NOSIGNAL);
        (void)w;
        close(s);
        f->sent++;
    }
    return NULL;
}

static fuzz_arg_t fuzz;
static pthread_t fuzz_thread;

/* Runs once the ranks are forked: the root starts, the flood starts, and the ranks learn the id only when the
 * flood is well under way, so that they join while it goes on. */
static void start_flood(uid_job_t *j)
{
    make_id(j);
    pthread_create(&fuzz_thread, NULL, fuzzer, &fuzz);
    while (fuzz.sent < 1500) usleep(1000);
}

static int mode_fuzz(int n)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "60s", 1);
    uid_job_t j = {.n = n, .barriers = 50};
    fuzz.id = &j.id;
    fuzz.seed = 12345;
    int failed = run_ranks(n, uid_rank, &j, start_flood, NULL);
    fuzz_stop = 1;
    pthread_join(fuzz_thread, NULL);
    if (failed) FAIL("%d ranks failed under the flood", failed);
    printf("root survived %d malformed connections; %d ranks bootstrapped\n", fuzz.sent, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        FAIL("usage: test_bootstrap uid N | env | secret | unreachable | kill N | fuzz N | abortcoll");
    const char *mode = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 2;
    alarm(110); /* never outlive the test's time limit silently */
    if (!strcmp(mode, "uid")) return mode_uid(n);
    if (!strcmp(mode, "env")) return mode_env();
    if (!strcmp(mode, "secret")) return mode_secret();
    if (!strcmp(mode, "unreachable")) return mode_unreachable();
    if (!strcmp(mode, "kill")) return mode_kill(n);
    if (!strcmp(mode, "fuzz")) return mode_fuzz(n);
    if (!strcmp(mode, "abortcoll")) return mode_abortcoll();
    FAIL("unknown mode %s", mode);
}
