/* Shutdown (issue 7, defect 8), in CPU mode:
 *   goodbye N  one rank of N leaves with dion_comm_destroy while the others keep running: neither of its
 *              neighbours' logs may call it failed;
 *   kill N     the control: the same rank is killed instead, and both neighbours must report it failed;
 *   relay      3 ranks: rank 2 is killed, rank 0 (whose watchdog sees it first) ends without
 * dion_comm_destroy once it has; rank 1, whose watchdog looks only later and finds both its links closed,
 * must name rank 2, which rank 0 passed on before it ended, not rank 0; race       one thread calls
 * dion_dev_check and dion_dev_stats in a loop while another destroys the handle: no use of freed memory (run
 * under the asan preset too), and afterwards both say the handle was destroyed; kernel     rank 0 destroys
 * its handle while one of its kernels still signals rank 1: dion_dev_destroy waits for the kernel, which must
 * finish every signal (before the fix the handle's memory was freed under it). */
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

static int failures;
static int slow_rank = -1; /* this rank's watchdog looks only every 1.5 s (relay) */
static const char *my_log; /* in a forked rank: the file its stderr goes to */
#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                 \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        failures++;                                                                                          \
    } while (0)
#define OK(call)                                                                                             \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, dion_status_string(s_), \
                    dion_last_error());                                                                      \
            _exit(1);                                                                                        \
        }                                                                                                    \
    } while (0)

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Forks n ranks that meet through a unique id; rank r runs fn(comm, r, n) with its stderr in logs[r]
 * (a file the parent reads afterwards). Returns each rank's exit code in codes. */
static void run_ranks(int n, void (*fn)(dion_comm_t, int, int), char logs[][64], int *codes)
{
    dion_unique_id_t id;
    int fds[2];
    if (pipe(fds) != 0) exit(1);
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    for (int r = 0; r < n; r++) {
        snprintf(logs[r], 64, "/tmp/dion_shutdown_%d_%d.log", (int)getpid(), r);
        pids[r] = fork();
        if (pids[r] != 0) continue;
        my_log = logs[r];
        close(fds[1]);
        if (!freopen(logs[r], "w", stderr)) _exit(3);
        setvbuf(stderr, NULL, _IONBF, 0);
        if (read(fds[0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
        if (r == slow_rank) setenv("DION_WATCHDOG_INTERVAL", "1500ms", 1);
        dion_comm_t comm;
        OK(dion_comm_init_rank(&comm, n, &id, r));
        fn(comm, r, n);
        _exit(failures ? 1 : 0);
    }
    close(fds[0]);
    if (dion_get_unique_id(&id) != DION_SUCCESS) exit(1);
    for (int r = 0; r < n; r++)
        if (write(fds[1], &id, sizeof id) != (ssize_t)sizeof id) exit(1);
    close(fds[1]);
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    free(pids);
}

static char *read_log(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 1 << 16);
    if (f) {
        size_t got = fread(text, 1, (1 << 16) - 1, f);
        text[got] = 0;
        fclose(f);
    }
    unlink(path);
    return text;
}

/* ---- goodbye / kill: the last rank leaves early; the others run on for 600 ms (30 watchdog rounds) ---- */

static int leave_by_kill;

static int log_says(const char *what)
{
    FILE *f = fopen(my_log, "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
    if (f) fclose(f);
    return found;
}

static void leaver(dion_comm_t comm, int r, int n)
{
    OK(dion_comm_barrier(comm));
    if (r == n - 1) {
        if (leave_by_kill) raise(SIGKILL);
        OK(dion_comm_destroy(comm));
        return;
    }
    /* goodbye: 600 ms, 30 watchdog rounds, in which nothing may be reported; kill: a neighbour waits (at most
     * 20 s, for loaded machines) until its watchdog has reported the rank */
    int neighbour = r == n - 2 || r == 0;
    for (int waited = 0; waited < (leave_by_kill && neighbour ? 20000 : 600); waited += 20) {
        if (leave_by_kill && log_says("treating rank")) break;
        sleep_ms(20);
    }
    OK(dion_comm_destroy(comm));
}

static void test_leave(int n, int kill)
{
    leave_by_kill = kill;
    char logs[16][64];
    int codes[16];
    run_ranks(n, leaver, logs, codes);
    int gone = n - 1, prev = n - 2, next = 0;
    for (int r = 0; r < n; r++) {
        char *text = read_log(logs[r]);
        int want_code = kill && r == gone ? 128 + SIGKILL : 0;
        if (codes[r] != want_code)
            FAIL("rank %d ended with %d, expected %d:\n%s", r, codes[r], want_code, text);
        char said[64];
        snprintf(said, sizeof said, "treating rank %d as failed", gone);
        int neighbour = r == prev || r == next;
        if (!kill && strstr(text, "failed"))
            FAIL("rank %d's log calls something failed after rank %d left with dion_comm_destroy:\n%s", r,
                 gone, text);
        if (kill && neighbour && !strstr(text, said))
            FAIL("rank %d's watchdog did not report the killed rank %d:\n%s", r, gone, text);
        free(text);
    }
    printf("%s: %s of rank %d of %d: %s\n", failures ? "FAIL" : "PASS",
           kill ? "kill -9" : "dion_comm_destroy", gone, n,
           kill ? "both neighbours reported it failed" : "no neighbour called it failed");
}

/* ---- relay: the failed rank is named by a rank that learns of it only from a neighbour that ended ---- */

static void relayer(dion_comm_t comm, int r, int n)
{
    (void)n;
    OK(dion_comm_barrier(comm));
    if (r == 2) raise(SIGKILL);
    if (r == 0) { /* ends as soon as its watchdog reported rank 2, as an application stopping on the error */
        for (int waited = 0; waited < 20000 && !log_says("treating rank 2"); waited += 10) sleep_ms(10);
        _exit(log_says("treating rank 2") ? 0 : 4);
    }
    for (int waited = 0; waited < 20000 && !log_says("treating rank"); waited += 20) sleep_ms(20);
    dion_status_t st = dion_comm_barrier(comm); /* rank 0's news waits on the link: names rank 2 */
    fprintf(stderr, "barrier after: %s: %s\n", dion_status_string(st), dion_last_error());
    _exit(0);
}

static void test_relay(void)
{
    char logs[3][64];
    int codes[3];
    slow_rank = 1;
    run_ranks(3, relayer, logs, codes);
    static const int want[3] = {0, 0, 128 + SIGKILL};
    for (int r = 0; r < 3; r++) {
        char *text = read_log(logs[r]);
        if (codes[r] != want[r]) FAIL("rank %d ended with %d, expected %d:\n%s", r, codes[r], want[r], text);
        if (r == 1) {
            if (!strstr(text, "treating rank 2 as failed") || strstr(text, "treating rank 0"))
                FAIL("rank 1 should name rank 2 (passed on by rank 0 before it ended), not rank 0:\n%s",
                     text);
            if (!strstr(text, "rank 0 reported that rank 2 failed"))
                FAIL("rank 1's watchdog should say rank 0 reported rank 2:\n%s", text);
            if (!strstr(text, "barrier after: DION_ERR_PEER_FAILED") || !strstr(text, "rank 2 failed"))
                FAIL("rank 1's barrier should fail naming rank 2:\n%s", text);
        }
        free(text);
    }
    printf("%s: relay: rank 2 killed, rank 0 ended after reporting it; rank 1 named rank 2\n",
           failures ? "FAIL" : "PASS");
}

/* ---- race: dion_dev_check / dion_dev_stats against dion_dev_destroy ---- */

typedef struct {
    dion_comm_t comm;
    dion_dev_t dev; /* a copy: the destroying thread zeroes its own */
    volatile int stop;
    int calls, bad;
    char last[256];
} race_t;

static void *checker(void *p)
{
    race_t *a = p;
    while (!a->stop) {
        dion_status_t st = dion_dev_check(a->comm, &a->dev);
        dion_ctx_stats_t s;
        dion_status_t st2 = dion_dev_stats(a->comm, &a->dev, 0, &s);
        a->calls++;
        if ((st != DION_SUCCESS && st != DION_ERR_INVALID_ARG) ||
            (st2 != DION_SUCCESS && st2 != DION_ERR_INVALID_ARG))
            a->bad++;
        if (st2 == DION_ERR_INVALID_ARG) snprintf(a->last, sizeof a->last, "%s", dion_last_error());
    }
    return NULL;
}

static void test_race(void)
{
    setenv("DION_STATS", "1", 1);
    setenv("DION_LOG", "error", 1); /* thousands of refused calls, each logged at warn */
    dion_unique_id_t id;
    dion_comm_t comm;
    OK(dion_get_unique_id(&id));
    OK(dion_comm_init_rank(&comm, 1, &id, 0));
    dion_dev_attr_t attr = {16, 1, 0, DION_DEV_FLAG_CPU};
    int rounds = 200, wrong = 0;
    for (int k = 0; k < rounds; k++) {
        race_t a;
        memset(&a, 0, sizeof a);
        a.comm = comm;
        dion_dev_t dev;
        OK(dion_dev_create(comm, &attr, &dev));
        a.dev = dev;
        pthread_t t;
        pthread_create(&t, NULL, checker, &a);
        while (__atomic_load_n(&a.calls, __ATOMIC_RELAXED) < 2) sched_yield();
        OK(dion_dev_destroy(comm, &dev));
        /* after the destroy has returned, every call must say so */
        int seen = a.calls;
        while (__atomic_load_n(&a.calls, __ATOMIC_RELAXED) < seen + 2) sched_yield();
        a.stop = 1;
        pthread_join(t, NULL);
        if (a.bad)
            FAIL("round %d: %d calls returned something else than success or DION_ERR_INVALID_ARG", k, a.bad);
        dion_status_t st = dion_dev_check(comm, &a.dev);
        if (st != DION_ERR_INVALID_ARG || !strstr(dion_last_error(), "handle was destroyed") ||
            !strstr(a.last, "handle was destroyed")) {
            if (wrong++ < 3)
                FAIL("round %d: after dion_dev_destroy: dion_dev_check -> %s: %s; dion_dev_stats said: %s", k,
                     dion_status_string(st), dion_last_error(), a.last);
        }
    }
    OK(dion_comm_destroy(comm));
    printf("%s: dion_dev_check / dion_dev_stats racing dion_dev_destroy, %d rounds\n",
           failures ? "FAIL" : "PASS", rounds);
}

/* ---- kernel: dion_dev_destroy while a kernel of this rank still runs ---- */

#define KERNEL_SIGNALS 300

typedef struct {
    dion_dev_t dev;
    int done;
} kern_t;

static void signaller(void *p)
{
    kern_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    for (int i = 0; i < KERNEL_SIGNALS; i++) {
        dion_signal(c, 1, 0, DION_SIG_ADD, 1);
        struct timespec ts = {0, 1000000}; /* 0.3 s in all */
        nanosleep(&ts, NULL);
        a->done = i + 1;
    }
}

static void *launcher(void *p)
{
    dion_cpu_launch(1, 1, signaller, p);
    return NULL;
}

static void destroyer(dion_comm_t comm, int r, int n)
{
    (void)n;
    dion_dev_attr_t attr = {16, 1, 0, DION_DEV_FLAG_CPU};
    dion_dev_t dev;
    OK(dion_dev_create(comm, &attr, &dev));
    pthread_t t;
    kern_t a = {dev, 0};
    if (r == 0) {
        pthread_create(&t, NULL, launcher, &a);
        while (__atomic_load_n(&a.done, __ATOMIC_RELAXED) < 1) sched_yield();
    }
    OK(dion_dev_destroy(comm, &dev));
    if (r == 0) {
        if (a.done != KERNEL_SIGNALS)
            FAIL("dion_dev_destroy returned while this rank's kernel was still running (%d of %d signals)",
                 a.done, KERNEL_SIGNALS);
        pthread_join(t, NULL);
    }
    OK(dion_comm_destroy(comm));
}

static void test_kernel(void)
{
    char logs[2][64];
    int codes[2];
    run_ranks(2, destroyer, logs, codes);
    for (int r = 0; r < 2; r++) {
        char *text = read_log(logs[r]);
        if (codes[r] != 0) FAIL("rank %d ended with %d:\n%s", r, codes[r], text);
        free(text);
    }
    printf("%s: dion_dev_destroy waits for a kernel of its rank that still runs\n",
           failures ? "FAIL" : "PASS");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int n = argc > 2 ? atoi(argv[2]) : 3;
    setenv("DION_CPU_MODE", "1", 1);
    if (!getenv("DION_WATCHDOG_INTERVAL")) setenv("DION_WATCHDOG_INTERVAL", "20ms", 1);
    if (!strcmp(mode, "goodbye") && n >= 2 && n <= 16)
        test_leave(n, 0);
    else if (!strcmp(mode, "kill") && n >= 2 && n <= 16)
        test_leave(n, 1);
    else if (!strcmp(mode, "relay"))
        test_relay();
    else if (!strcmp(mode, "race"))
        test_race();
    else if (!strcmp(mode, "kernel"))
        test_kernel();
    else {
        fprintf(stderr, "usage: %s goodbye|kill N | relay | race | kernel\n", argv[0]);
        return 2;
    }
    return failures ? 1 : 0;
}
