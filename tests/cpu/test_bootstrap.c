/* Bootstrap tests: unique-id init with forked ranks, env init (dionrun, mpirun), a wrong secret, an
 * unreachable root, a rank killed in a barrier, and malformed frames thrown at the root.
 * Usage: test_bootstrap MODE [N]. Exit 0 on success; any failure prints what and exits 1. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion.h"
#include "../common/test_time.h"

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
/* When set, runs in the parent once every child has its id, with the children's pids. */
static void (*after_ids)(const pid_t *pids, int n);

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
    if (after_ids) after_ids(pids, n);
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
static double abort_late_s = 1.5, abort_bound_s = 1.0; /* rank 1's lateness; rank 0's bound */
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
    if (rank == 1)
        usleep((useconds_t)(abort_late_s * 1e6)); /* late: rank 0's barrier cannot complete first */
    double t0 = now_s();
    dion_status_t st = dion_comm_barrier(abort_comm);
    double dt = now_s() - t0;
    if (rank == 0) pthread_join(t, NULL);
    /* Ranks 1 and 2 may complete this barrier legitimately (rank 0 had entered it and sent its tokens before
     * it aborted); their next collective must fail. */
    if (rank != 0 && st == DION_SUCCESS) st = dion_comm_barrier(abort_comm);
    dt = now_s() - t0;
    if (st == DION_SUCCESS) FAIL("rank %d: a barrier succeeded after dion_comm_abort", rank);
    if (rank == 0 && (st != DION_ERR_ABORTED || dt > abort_bound_s))
        FAIL("rank 0: barrier ended with %s after %.2f s; expected DION_ERR_ABORTED within %.1f s",
             dion_status_string(st), dt, abort_bound_s);
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

/* ---- idle connections on the ring listeners (issue 7, defect 7a) ---- */

/* The ports of the TCP sockets that process pid listens on, from /proc (its fds' inodes, matched against
 * /proc/PID/net/tcp). */
static int listen_ports(pid_t pid, struct sockaddr_in *out, int cap)
{
    char path[64], link[64];
    unsigned long inodes[256];
    int ninodes = 0, n = 0;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d)) && ninodes < 256;) {
        char fp[400];
        snprintf(fp, sizeof fp, "%s/%s", path, e->d_name);
        ssize_t k = readlink(fp, link, sizeof link - 1);
        if (k <= 0) continue;
        link[k] = 0;
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1) inodes[ninodes++] = ino;
    }
    closedir(d);
    snprintf(path, sizeof path, "/proc/%d/net/tcp", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    while (fgets(line, sizeof line, f) && n < cap) {
        unsigned addr, port, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %8X:%4X %*X:%*X %2X %*s %*s %*s %*d %*d %lu", &addr, &port, &st, &ino) != 4)
            continue;
        if (st != 0x0A) continue; /* LISTEN */
        for (int i = 0; i < ninodes; i++)
            if (inodes[i] == ino) {
                memset(&out[n], 0, sizeof out[n]);
                out[n].sin_family = AF_INET;
                out[n].sin_addr.s_addr = addr; /* /proc prints the network-order word as a host integer */
                out[n].sin_port = htons((uint16_t)port);
                n++;
            }
    }
    fclose(f);
    return n;
}

#define IDLE_PER_LISTENER 5
static int idle_fds[64], idle_count;
static volatile double *idle_go; /* shared page: when the parent released the last rank (0: not yet) */

/* The last rank starts late; meanwhile the others' ring listeners are up, and each gets idle connections
 * that never send a byte, ahead of the real predecessor. */
static void open_idle(const pid_t *pids, int n)
{
    for (int r = 0; r < n - 1; r++) {
        struct sockaddr_in ports[8];
        int np = 0;
        for (int tries = 0; tries < 300 && np == 0; tries++) {
            np = listen_ports(pids[r], ports, 8);
            if (!np) usleep(10000);
        }
        if (np != 1)
            FAIL("rank %d (pid %d) has %d listening sockets; expected its ring listener", r, pids[r], np);
        for (int k = 0; k < IDLE_PER_LISTENER; k++) {
            int s = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(s, (struct sockaddr *)&ports[0], sizeof ports[0]) != 0)
                FAIL("idle connection to rank %d: %s", r, strerror(errno));
            idle_fds[idle_count++] = s;
        }
    }
    *idle_go = now_s();
}

static void idle_rank(int rank, void *arg)
{
    uid_job_t *j = arg;
    /* The last rank waits until the parent has put idle connections on the other ranks' listeners. */
    for (int i = 0; rank == j->n - 1 && !*idle_go; i++) {
        if (i > 6000) FAIL("rank %d: never released", rank);
        usleep(10000);
    }
    dion_comm_t comm;
    CHECK_OK(dion_comm_init_rank(&comm, j->n, &j->id, rank));
    double dt = now_s() - *idle_go;
    /* A bound, not a speed claim: serving the idle connections one after another takes 5 s each (25 s). */
    if (dt > 15.0)
        FAIL(
            "rank %d: dion_comm_init_rank ended %.1f s after the last rank started, with %d idle connections "
            "on each ring listener (bootstrap timeout 60 s)",
            rank, dt, IDLE_PER_LISTENER);
    workout(comm, 10);
    printf("rank %d: init done %.2f s after the last rank started, despite idle connections\n", rank, dt);
    CHECK_OK(dion_comm_destroy(comm));
}

static int mode_idle(int n)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "60s", 1);
    uid_job_t j = {.n = n};
    idle_go = mmap(NULL, sizeof *idle_go, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (idle_go == MAP_FAILED) FAIL("mmap: %s", strerror(errno));
    after_ids = open_idle;
    int failed = run_ranks(n, idle_rank, &j, make_id, NULL);
    for (int i = 0; i < idle_count; i++) close(idle_fds[i]);
    if (failed) FAIL("%d ranks failed with idle connections on their ring listeners", failed);
    printf("%d idle connections per listener did not hold up init\n", IDLE_PER_LISTENER);
    return 0;
}

/* ---- two jobs given the same root address (defect 7c) ---- */

static void clear_job_env(void)
{
    const char *vars[] = {"DION_SECRET",
                          "DION_UNIQUE_ID",
                          "PMIX_NAMESPACE",
                          "OMPI_MCA_ess_base_jobid",
                          "OMPI_MCA_orte_hnp_uri",
                          "SLURM_JOB_ID",
                          "SLURM_STEP_ID",
                          "TORCHELASTIC_RUN_ID",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "RANK",
                          "WORLD_SIZE",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "DION_ROOT",
                          "SLURM_NNODES",
                          "OMPI_COMM_WORLD_LOCAL_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static unsigned free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &len);
    close(s);
    return ntohs(a.sin_port);
}

/* Forks one env-initialized rank of a job; returns its pid. The child exits 0 when init does what want says
 * (1: succeed and pass the workout, 0: fail fast with a sentence containing must_say). */
static pid_t spawn_env_rank(const char *root, const char *jobid, int rank, int nranks, double delay, int want,
                            const char *must_say)
{
    pid_t p = fork();
    if (p < 0) FAIL("fork: %s", strerror(errno));
    if (p) return p;
    char r[16], n[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(n, sizeof n, "%d", nranks);
    setenv("DION_RANK", r, 1);
    setenv("DION_NRANKS", n, 1);
    setenv("DION_ROOT", root, 1);
    if (jobid) setenv("SLURM_JOB_ID", jobid, 1);
    usleep((useconds_t)(delay * 1e6));
    double t0 = now_s();
    dion_comm_t comm;
    dion_status_t st = dion_comm_init_env(&comm);
    double dt = now_s() - t0;
    if (want) {
        if (st != DION_SUCCESS)
            FAIL("job %s rank %d: init failed: %s: %s", jobid, rank, dion_status_string(st),
                 dion_last_error());
        workout(comm, 10);
        dion_comm_destroy(comm);
        _exit(0);
    }
    if (st == DION_SUCCESS)
        FAIL("job %s rank %d joined a job it does not belong to", jobid ? jobid : "-", rank);
    if (!strstr(dion_last_error(), must_say))
        FAIL("job %s rank %d: the error does not say '%s': %s", jobid ? jobid : "-", rank, must_say,
             dion_last_error());
    /* bootstrap timeout 20 s: the refusal must not wait for it */
    if (dt > 10.0) FAIL("job %s rank %d: refused only after %.1f s", jobid ? jobid : "-", rank, dt);
    printf("job %s rank %d refused after %.2f s: %s\n", jobid ? jobid : "-", rank, dt, dion_last_error());
    _exit(0);
}

static int wait_code(pid_t p)
{
    int status = 0;
    waitpid(p, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int mode_jobs(void)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "20s", 1);
    clear_job_env();
    char root[64];
    /* No DION_SECRET and no launcher job id: nothing secret to derive the bootstrap secret from. */
    snprintf(root, sizeof root, "127.0.0.1:%u", free_port());
    int c = wait_code(spawn_env_rank(root, NULL, 0, 1, 0, 0, "DION_SECRET"));
    if (c) FAIL("init without any secret: child ended with %d", c);
    /* Two jobs, one root address: job 2002's rank 1 arrives first at job 1001's root and must be refused with
     * a sentence; job 1001 then completes. */
    snprintf(root, sizeof root, "127.0.0.1:%u", free_port());
    pid_t a0 = spawn_env_rank(root, "1001", 0, 2, 0, 1, NULL);
    pid_t b1 = spawn_env_rank(root, "2002", 1, 2, 0.3, 0, "another job");
    int cb = wait_code(b1);
    pid_t a1 = spawn_env_rank(root, "1001", 1, 2, 0, 1, NULL);
    int ca0 = wait_code(a0), ca1 = wait_code(a1);
    if (cb || ca0 || ca1)
        FAIL("two jobs on one root: exit codes job2002/1 %d, job1001/0 %d, job1001/1 %d", cb, ca0, ca1);
    printf("jobs with different ids kept apart; no job without a secret\n");
    return 0;
}

/* ---- abort with the longest bootstrap timeout (defect 7d) ---- */

static int mode_abortlong(void)
{
    /* The largest duration the parser accepts: the poll timeout derived from it once overflowed int. */
    setenv("DION_BOOTSTRAP_TIMEOUT", "5000000h", 1);
    /* Rank 1 is later than the bound: a poll that ignores the abort flag returns only when it arrives. */
    abort_late_s = 4.0;
    abort_bound_s = 2.5;
    uid_job_t j = {.n = 3};
    int codes[3];
    if (run_ranks(3, abortcoll_rank, &j, make_id, codes))
        FAIL("ranks ended with %d %d %d", codes[0], codes[1], codes[2]);
    printf("abort interrupted a host barrier with DION_BOOTSTRAP_TIMEOUT=5000000h\n");
    return 0;
}

/* ---- rendezvous file in a shared folder (defect 7e) ---- */

/* The file name the library used before it had a private folder: dion-UID-HASH-GEN.root, the hash an FNV-1a
 * of the job key. Any user could compute it. */
static void old_rendezvous_name(const char *dir, const char *key, char *out, size_t cap)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = key; *p; p++) {
        h ^= (uint8_t)*p;
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    snprintf(out, cap, "%s/dion-%u-%016llx-0.root", dir, (unsigned)getuid(), (unsigned long long)h);
}

static pid_t spawn_rv_rank(const char *dir, int rank, int want, const char *must_say, const char *must_say2)
{
    pid_t p = fork();
    if (p < 0) FAIL("fork: %s", strerror(errno));
    if (p) return p;
    setenv("DION_RANK", rank ? "1" : "0", 1);
    setenv("DION_NRANKS", "2", 1);
    setenv("SLURM_JOB_ID", "77", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_NNODES", "1", 1);
    setenv("DION_TMPDIR", dir, 1);
    dion_comm_t comm;
    double t0 = now_s();
    dion_status_t st = dion_comm_init_env(&comm);
    double dt = now_s() - t0;
    if (want) {
        if (st != DION_SUCCESS)
            FAIL("rank %d: init failed: %s: %s", rank, dion_status_string(st), dion_last_error());
        workout(comm, 10);
        dion_comm_destroy(comm);
        _exit(0);
    }
    if (st == DION_SUCCESS) FAIL("rank %d: init succeeded through a folder another user owns", rank);
    if (!strstr(dion_last_error(), must_say) || !strstr(dion_last_error(), must_say2))
        FAIL("rank %d: the error does not name '%s' and '%s': %s", rank, must_say, must_say2,
             dion_last_error());
    if (dt > 10.0) FAIL("rank %d: refused only after %.1f s (bootstrap timeout 20 s)", rank, dt);
    printf("rank %d refused: %s\n", rank, dion_last_error());
    _exit(0);
}

static int mode_rendezvous(void)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "20s", 1);
    clear_job_env();
    int is_root = geteuid() == 0;
    char dir[] = "/tmp/dion-rvtest-XXXXXX";
    if (!mkdtemp(dir)) FAIL("mkdtemp: %s", strerror(errno));
    chmod(dir, 01777); /* a shared folder like /tmp */
    /* 1. Another user pre-creates the predictable name (as a folder, which no rename can replace): the job
     * must still start. */
    char blocker[512];
    old_rendezvous_name(dir, "slurm:77.0", blocker, sizeof blocker);
    if (mkdir(blocker, 0755) != 0) FAIL("mkdir %s: %s", blocker, strerror(errno));
    if (is_root && chown(blocker, 65534, 65534) != 0) FAIL("chown %s: %s", blocker, strerror(errno));
    pid_t r0 = spawn_rv_rank(dir, 0, 1, NULL, NULL), r1 = spawn_rv_rank(dir, 1, 1, NULL, NULL);
    int c0 = wait_code(r0), c1 = wait_code(r1);
    if (c0 || c1) FAIL("a file pre-created in the shared folder stopped the job: exit codes %d %d", c0, c1);
    rmdir(blocker);
    printf("pre-created rendezvous name in the shared folder: job started\n");
    /* 2. Another user owns the per-user folder itself: a sentence naming the folder and its owner. */
    if (!is_root) {
        printf("not root: cannot give a folder to another user; skipping the foreign-folder part\n");
    } else {
        char priv[600];
        snprintf(priv, sizeof priv, "%s/dion-%u", dir, (unsigned)getuid());
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", priv);
        if (system(cmd) != 0) FAIL("%s failed", cmd);
        if (mkdir(priv, 0777) != 0 || chmod(priv, 0777) != 0 || chown(priv, 65534, 65534) != 0)
            FAIL("preparing %s: %s", priv, strerror(errno));
        r0 = spawn_rv_rank(dir, 0, 0, priv, "65534");
        r1 = spawn_rv_rank(dir, 1, 0, priv, "65534");
        c0 = wait_code(r0), c1 = wait_code(r1);
        if (c0 || c1) FAIL("foreign per-user folder: exit codes %d %d", c0, c1);
        printf("foreign per-user folder refused with a sentence naming it and its owner\n");
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) FAIL("cleanup failed");
    return 0;
}

/* ---- an impostor root (defect 7b) ---- */

/* A process that listens at the id's root address without knowing the secret: it must not learn the secret
 * from what a rank sends, and its answer must not be believed. */
static int mode_fakeroot(void)
{
    setenv("DION_BOOTSTRAP_TIMEOUT", "10s", 1);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 4) != 0)
        FAIL("listen: %s", strerror(errno));
    getsockname(l, (struct sockaddr *)&a, &alen);
    unsigned port = ntohs(a.sin_port);
    /* A real id (its secret is what must stay hidden), pointed at the impostor. Forked before any thread. */
    int pfd[2];
    if (pipe(pfd) != 0) FAIL("pipe");
    pid_t child = fork();
    if (child == 0) {
        dion_unique_id_t id;
        close(pfd[1]);
        if (read(pfd[0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
        dion_comm_t comm;
        dion_status_t st = dion_comm_init_rank(&comm, 2, &id, 0);
        if (st == DION_SUCCESS) FAIL("rank 0 believed a root that does not know the secret");
        if (!strstr(dion_last_error(), "prove"))
            FAIL("the error does not say that the root failed to prove the secret: %s", dion_last_error());
        printf("rank refused the impostor: %s\n", dion_last_error());
        fflush(stdout);
        _exit(0);
    }
    close(pfd[0]);
    dion_unique_id_t id;
    CHECK_OK(dion_get_unique_id(&id));
    id.bytes[8] = 4;
    id.bytes[10] = (unsigned char)(port >> 8);
    id.bytes[11] = (unsigned char)port;
    id.bytes[12] = 127, id.bytes[13] = 0, id.bytes[14] = 0, id.bytes[15] = 1;
    if (write(pfd[1], &id, sizeof id) != (ssize_t)sizeof id) FAIL("write");
    close(pfd[1]);
    int c = accept(l, NULL, NULL);
    if (c < 0) FAIL("accept: %s", strerror(errno));
    struct timeval tv = {1, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    /* Play the root's part as far as one can without the secret: a challenge, then an answer with a made-up
     * tag that names a successor at the impostor's own address. */
    unsigned char chal[28] = {0x44, 0x4f, 0x4e, 0x46, 6, 0, 0, 0, 16, 0, 0, 0};
    for (int i = 12; i < 28; i++) chal[i] = (unsigned char)(i * 37);
    if (send(c, chal, sizeof chal, MSG_NOSIGNAL) != (ssize_t)sizeof chal) FAIL("send challenge");
    unsigned char got[512];
    size_t have = 0;
    for (ssize_t k; have < sizeof got && (k = recv(c, got + have, sizeof got - have, 0)) > 0;)
        have += (size_t)k;
    for (size_t i = 0; i + 16 <= have; i++)
        if (!memcmp(got + i, id.bytes + 28, 16))
            FAIL("the rank sent the secret in clear (byte %zu of %zu)", i, have);
    unsigned char ring[12 + 36] = {0x44, 0x4f, 0x4e, 0x46, 2, 0, 0, 0, 36, 0, 0, 0, 4, 0};
    ring[14] = (unsigned char)(port >> 8), ring[15] = (unsigned char)port;
    ring[16] = 127, ring[19] = 1;
    ring[32] = 1;                                             /* successor: rank 1 */
    ring[36] = 2;                                             /* of 2 ranks */
    for (int i = 40; i < 48; i++) ring[i] = (unsigned char)i; /* a tag it cannot compute */
    (void)!send(c, ring, sizeof ring, MSG_NOSIGNAL);
    int code = wait_code(child);
    close(c);
    close(l);
    if (code) FAIL("rank ended with %d", code);
    printf("impostor root learned no secret (%zu bytes captured) and was not believed\n", have);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        FAIL("usage: test_bootstrap uid N | env | secret | unreachable | kill N | fuzz N | abortcoll | idle "
             "N | "
             "jobs | abortlong | rendezvous | fakeroot");
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
    if (!strcmp(mode, "idle")) return mode_idle(n);
    if (!strcmp(mode, "jobs")) return mode_jobs();
    if (!strcmp(mode, "abortlong")) return mode_abortlong();
    if (!strcmp(mode, "rendezvous")) return mode_rendezvous();
    if (!strcmp(mode, "fakeroot")) return mode_fakeroot();
    FAIL("unknown mode %s", mode);
}
