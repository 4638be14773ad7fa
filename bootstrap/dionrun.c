/* dionrun: starts N ranks of a program on this node. It hosts the bootstrap root itself (dion_get_unique_id)
 * and gives each rank DION_RANK, DION_NRANKS, DION_LOCAL_RANK, DION_UNIQUE_ID (and DION_DEVICE), which
 * dion_comm_init_env reads. The first rank to fail stops the job, and dionrun exits with its status. With
 * --hosts each rank runs on a simulated host of its own (dionrun_hosts.c), for tests of multi-host paths.
 *
 * Signals (SIGCHLD, SIGINT, SIGTERM, SIGHUP) stay blocked in every thread and are taken with sigtimedwait,
 * so there are no handlers and no races between a child exiting and a deadline passing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dion/dion.h>

#include "dionrun_hosts.h"

extern char **environ;

#define STOP_GRACE_S 3.0 /* between SIGTERM and SIGKILL when stopping ranks */
#define MAX_RANKS    65536
#define MPS_CONTROL  "nvidia-cuda-mps-control"
#define MPS_WAIT_S   10.0 /* bound on each run of nvidia-cuda-mps-control */

#define USAGE_LINE                                                                                           \
    "usage: dionrun -n N [--mps | --hosts] [--timeout SECONDS] [--grace SECONDS] [--] prog [args...]\n"

typedef struct {
    pid_t pid;      /* 0 before start and once reaped */
    int exec_errno; /* nonzero when the program could not be executed */
} rank_t;

typedef struct {
    int nranks, live;
    rank_t *ranks;
    int stopping;   /* the job is being stopped: later exits are expected, not failures */
    int status;     /* dionrun's exit status */
    double kill_at; /* when to SIGKILL the ranks still alive; 0 when not armed */
} job_t;

static sigset_t g_handled, g_orig_mask;
static char g_mps_dir[64];       /* the MPS folder dionrun made and whose daemon it started; empty if none */
static char g_mps_bin[PATH_MAX]; /* nvidia-cuda-mps-control, as found in PATH */
static double g_grace = STOP_GRACE_S;
static hosts_t *g_hosts;      /* --hosts: each rank on a simulated host of its own */
static int g_spawn_host = -1; /* the host the next spawn enters; -1: none */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct timespec to_timespec(double s)
{
    if (s < 0) s = 0;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    return ts;
}

static void usage(FILE *f)
{
    fprintf(
        f, USAGE_LINE
        "Starts N ranks of prog on this node; the ranks call dion_comm_init_env to form one communicator.\n"
        "  -n N               number of ranks\n"
        "  --mps              start an MPS daemon for the job (done anyway when ranks outnumber GPUs)\n"
        "  --hosts            run each rank on a simulated host of its own: its own network namespace "
        "(joined\n"
        "                     to the others by a bridge), hostname, /tmp, /dev/shm and IPC; needs root or\n"
        "                     CAP_SYS_ADMIN and the ip command; exit status 77 where that is not possible\n"
        "  --timeout SECONDS  stop the job when it runs longer; exit status 124\n"
        "  --grace SECONDS    between SIGTERM and SIGKILL when stopping ranks (default 3)\n"
        "  -h, --help         this text\n"
        "Each rank gets DION_RANK, DION_NRANKS, DION_LOCAL_RANK (0 with --hosts), DION_UNIQUE_ID and, with\n"
        "GPUs, DION_DEVICE. With --hosts the ranks do not see dionrun's /tmp: keep the program and its "
        "files\n"
        "elsewhere.\n"
        "When a rank fails, dionrun stops the others and exits with that rank's exit code (128+N for\n"
        "signal N); SIGINT and SIGTERM are passed on to the ranks.\n");
}

static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("dionrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n" USAGE_LINE "(dionrun --help says more)\n", stderr);
    exit(2);
}

/* ---- child processes ---- */

#define SPAWN_NULL_STDOUT 1
#define SPAWN_NULL_STDERR 2

/* Forks and runs argv (searched in PATH) with envp; in_fd >= 0 becomes its stdin; with g_spawn_host >= 0 the
 * child first enters that simulated host. Returns the pid, or -1 when fork failed. *exec_errno gets errno of
 * a failed exec, or minus errno of a failed host entry (the child then exits 127), else 0: a close-on-exec
 * pipe tells the cases apart before this returns. */
static pid_t spawn(char *const argv[], char *const envp[], int in_fd, int flags, int *exec_errno)
{
    int p[2];
    *exec_errno = 0;
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls here: the bootstrap root thread may have held a lock at the fork. */
        close(p[0]);
        if (in_fd >= 0) dup2(in_fd, 0);
        if (flags) {
            int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (nul >= 0) {
                if (flags & SPAWN_NULL_STDOUT) dup2(nul, 1);
                if (flags & SPAWN_NULL_STDERR) dup2(nul, 2);
            }
        }
        sigprocmask(SIG_SETMASK, &g_orig_mask, NULL);
        int e = g_spawn_host >= 0 ? -hosts_enter(g_hosts, g_spawn_host) : 0; /* negative: not exec's fault */
        if (!e) {
            execvpe(argv[0], argv, envp);
            e = errno;
        }
        ssize_t w = write(p[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(p[1]);
    int e = 0;
    ssize_t n;
    while ((n = read(p[0], &e, sizeof e)) < 0 && errno == EINTR) {
    }
    close(p[0]);
    if (n == (ssize_t)sizeof e) *exec_errno = e;
    return pid;
}

/* Waits up to limit seconds for one child, SIGKILLing it past that. Returns its wait status, or -1. */
static int wait_bounded(pid_t pid, double limit)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    double end = now_s() + limit;
    for (;;) {
        int ws;
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid) return ws;
        if (r < 0 && errno != EINTR) return -1;
        double left = end - now_s();
        if (left <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            return -1;
        }
        struct timespec ts = to_timespec(left);
        sigtimedwait(&chld, NULL, &ts);
    }
}

/* ---- GPUs and MPS ---- */

/* The number of GPUs the ranks will see, without touching CUDA: a CUDA context here would keep MPS from
 * taking over the GPU. */
static int count_gpus(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v) {
        if (strcmp(v, "-1") == 0 || strcmp(v, "NoDevFiles") == 0) return 0;
        int n = 0;
        for (const char *p = v; *p;) {
            size_t len = strcspn(p, ",");
            size_t lead = strspn(p, " \t");
            if (lead < len) n++;
            p += len;
            if (*p == ',') p++;
        }
        return n;
    }
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static int find_in_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/bin:/usr/bin"; /* what execvp searches without PATH */
    for (const char *p = path;;) {
        size_t len = strcspn(p, ":");
        int n = len ? snprintf(out, cap, "%.*s/%s", (int)len, p, name) : snprintf(out, cap, "%s", name);
        struct stat st;
        if (n > 0 && (size_t)n < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
            return 1;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

static int remove_tree(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0 && errno == ENOENT) return 0;
    return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Starts a private MPS control daemon unless one is already there to use. Failing to start one is not
 * fatal: ranks that share a GPU then take turns on it. */
static void mps_start(void)
{
    if (getenv("CUDA_MPS_PIPE_DIRECTORY") || access("/tmp/nvidia-mps/control", F_OK) == 0) return;
    if (!find_in_path(MPS_CONTROL, g_mps_bin, sizeof g_mps_bin)) {
        fprintf(
            stderr,
            "dionrun: warning: %s not found in PATH; running without MPS (ranks that share a GPU take turns "
            "on it)\n",
            MPS_CONTROL);
        return;
    }
    char dir[] = "/tmp/dionrun-mps-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr,
                "dionrun: warning: cannot create a folder for MPS under /tmp (%s); running without MPS\n",
                strerror(errno));
        return;
    }
    /* Set here so the daemon and, through environ, every rank use this folder. */
    setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", dir, 1);
    char *argv[] = {g_mps_bin, "-d", NULL};
    int xe = 0;
    /* The daemon outlives this call: it must not hold dionrun's stdout/stderr open. */
    pid_t pid = spawn(argv, environ, -1, SPAWN_NULL_STDOUT | SPAWN_NULL_STDERR, &xe);
    int ws = pid > 0 ? wait_bounded(pid, MPS_WAIT_S) : -1;
    if (pid < 0 || xe || ws == -1 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char why[96];
        if (pid < 0)
            snprintf(why, sizeof why, "fork: %s", strerror(errno));
        else if (xe)
            snprintf(why, sizeof why, "%s", strerror(xe));
        else if (ws == -1)
            snprintf(why, sizeof why, "no answer within %g s", MPS_WAIT_S);
        else if (WIFEXITED(ws))
            snprintf(why, sizeof why, "exit code %d", WEXITSTATUS(ws));
        else
            snprintf(why, sizeof why, "killed by signal %d", WTERMSIG(ws));
        fprintf(stderr, "dionrun: warning: '%s -d' failed (%s); running without MPS\n", g_mps_bin, why);
        unsetenv("CUDA_MPS_PIPE_DIRECTORY");
        unsetenv("CUDA_MPS_LOG_DIRECTORY");
        remove_tree(dir);
        return;
    }
    snprintf(g_mps_dir, sizeof g_mps_dir, "%s", dir);
}

/* Stops the daemon mps_start started, if any, and removes its folder. */
static void mps_stop(void)
{
    if (!g_mps_dir[0]) return;
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
        /* Written before the client starts, so a client that dies early cannot SIGPIPE dionrun. */
        ssize_t w = write(p[1], "quit\n", 5);
        (void)w;
        close(p[1]);
        char *argv[] = {g_mps_bin, NULL};
        int xe = 0;
        pid_t pid = spawn(argv, environ, p[0], SPAWN_NULL_STDOUT, &xe);
        close(p[0]);
        if (pid > 0) wait_bounded(pid, MPS_WAIT_S);
    }
    /* The daemon may still be writing its last log lines while it shuts down. */
    double end = now_s() + 2.0;
    int rc;
    while ((rc = remove_tree(g_mps_dir)) != 0 && now_s() < end) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    if (rc != 0) fprintf(stderr, "dionrun: warning: could not remove the MPS folder %s\n", g_mps_dir);
    g_mps_dir[0] = 0;
}

/* ---- the job ---- */

static void job_signal_all(job_t *j, int sig)
{
    for (int r = 0; r < j->nranks; r++)
        if (j->ranks[r].pid > 0) kill(j->ranks[r].pid, sig);
}

static void job_stop(job_t *j, int status)
{
    j->stopping = 1;
    j->status = status;
    job_signal_all(j, SIGTERM);
    j->kill_at = now_s() + g_grace;
}

static const char *plural(int n)
{
    return n == 1 ? "" : "s";
}

static void signal_text(int sig, char *buf, size_t cap)
{
    const char *abbr = sigabbrev_np(sig);
    if (abbr)
        snprintf(buf, cap, "signal %d (SIG%s)", sig, abbr);
    else
        snprintf(buf, cap, "signal %d", sig);
}

/* Collects every rank that ended; the first failure stops the job. first is the child whose SIGCHLD woke us:
 * later SIGCHLDs merge into that pending one, so it is the one that ended first and is reaped first
 * (waitpid(-1) alone would go by start order). */
static void job_reap(job_t *j, const char *prog, pid_t first)
{
    for (;;) {
        int ws;
        pid_t pid = first > 0 ? waitpid(first, &ws, WNOHANG) : 0;
        first = 0;
        if (pid <= 0) pid = waitpid(-1, &ws, WNOHANG);
        if (pid <= 0) break;
        int r = 0;
        while (r < j->nranks && j->ranks[r].pid != pid) r++;
        if (r == j->nranks) continue;
        j->ranks[r].pid = 0;
        j->live--;
        if (j->stopping) continue;
        char what[PATH_MAX + 128];
        int code;
        if (WIFEXITED(ws)) {
            code = WEXITSTATUS(ws);
            if (code == 0) continue;
            if (j->ranks[r].exec_errno < 0)
                snprintf(what, sizeof what, "could not enter its simulated host %s: %s (exit code %d)",
                         hosts_name(g_hosts, r), strerror(-j->ranks[r].exec_errno), code);
            else if (j->ranks[r].exec_errno)
                snprintf(what, sizeof what, "could not execute '%s': %s (exit code %d)", prog,
                         strerror(j->ranks[r].exec_errno), code);
            else
                snprintf(what, sizeof what, "exited with code %d", code);
        } else if (WIFSIGNALED(ws)) {
            code = 128 + WTERMSIG(ws);
            char s[64];
            signal_text(WTERMSIG(ws), s, sizeof s);
            snprintf(what, sizeof what, "was killed by %s", s);
        } else {
            continue;
        }
        if (j->live)
            fprintf(stderr, "dionrun: rank %d (pid %d) %s; stopping the other %d rank%s\n", r, (int)pid, what,
                    j->live, plural(j->live));
        else
            fprintf(stderr, "dionrun: rank %d (pid %d) %s\n", r, (int)pid, what);
        job_stop(j, code);
    }
}

static int is_rank_var(const char *kv)
{
    static const char *const names[] = {
        "DION_RANK=", "DION_NRANKS=", "DION_LOCAL_RANK=", "DION_UNIQUE_ID=", "DION_DEVICE="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(kv, names[i], strlen(names[i])) == 0) return 1;
    return 0;
}

static int stop_signal_pending(void)
{
    sigset_t p;
    sigpending(&p);
    return sigismember(&p, SIGINT) == 1 || sigismember(&p, SIGTERM) == 1 ||
           (sigismember(&g_handled, SIGHUP) == 1 && sigismember(&p, SIGHUP) == 1);
}

static int run_job(int nranks, int ngpus, double timeout, char **prog_argv, const dion_unique_id_t *id)
{
    static const char digits[] = "0123456789abcdef";
    char uid[sizeof "DION_UNIQUE_ID=" + 2 * sizeof id->bytes];
    char *h = uid + snprintf(uid, sizeof uid, "DION_UNIQUE_ID=");
    for (size_t i = 0; i < sizeof id->bytes; i++) {
        *h++ = digits[id->bytes[i] >> 4];
        *h++ = digits[id->bytes[i] & 15];
    }
    *h = 0;

    /* Each rank's environment: dionrun's own, less any DION_* rank variables it inherited, plus its own. */
    size_t nenv = 0;
    while (environ[nenv]) nenv++;
    char **envp = calloc(nenv + 6, sizeof *envp);
    job_t j = {.nranks = nranks, .ranks = calloc((size_t)nranks, sizeof(rank_t))};
    if (!envp || !j.ranks) {
        fprintf(stderr, "dionrun: out of memory\n");
        free(envp);
        free(j.ranks);
        return 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (!is_rank_var(environ[i])) envp[k++] = environ[i];
    char e_rank[32], e_nranks[32], e_local[32], e_dev[32];
    envp[k++] = e_rank;
    envp[k++] = e_nranks;
    envp[k++] = e_local;
    envp[k++] = uid;
    if (ngpus > 0) envp[k++] = e_dev;
    envp[k] = NULL;

    snprintf(e_nranks, sizeof e_nranks, "DION_NRANKS=%d", nranks);
    for (int r = 0; r < nranks; r++) {
        /* An interrupt that came while MPS or the root was starting: start no more ranks. */
        if (stop_signal_pending()) break;
        snprintf(e_rank, sizeof e_rank, "DION_RANK=%d", r);
        snprintf(e_local, sizeof e_local, "DION_LOCAL_RANK=%d", g_hosts ? 0 : r); /* alone on its host */
        if (ngpus > 0) snprintf(e_dev, sizeof e_dev, "DION_DEVICE=%d", r % ngpus);
        int xe = 0;
        g_spawn_host = g_hosts ? r : -1;
        pid_t pid = spawn(prog_argv, envp, -1, 0, &xe);
        g_spawn_host = -1;
        if (pid < 0) {
            fprintf(stderr, "dionrun: cannot start rank %d: %s%s\n", r, strerror(errno),
                    j.live ? "; stopping the ranks already started" : "");
            job_stop(&j, 1);
            break;
        }
        j.ranks[r].pid = pid;
        j.ranks[r].exec_errno = xe;
        j.live++;
        if (xe) break; /* the rest would fail the same way; the loop below reports this one */
    }

    double end_at = timeout > 0 ? now_s() + timeout : 0;
    /* Ranks that ended already left a pending SIGCHLD, so the loop starts by waiting for signals. */
    while (j.live > 0) {
        double now = now_s();
        if ((j.kill_at && now >= j.kill_at) || (!j.stopping && end_at && now >= end_at)) {
            /* A deadline passed: count only the ranks really still running. */
            job_reap(&j, prog_argv[0], 0);
            if (!j.live) break;
        }
        if (j.kill_at && now >= j.kill_at) {
            fprintf(stderr, "dionrun: %d rank%s still running %g s after SIGTERM; sending SIGKILL\n", j.live,
                    plural(j.live), g_grace);
            job_signal_all(&j, SIGKILL);
            j.kill_at = 0;
        }
        if (!j.stopping && end_at && now >= end_at) {
            /* name the ranks still running: the ones a hang is in */
            char who[256] = "";
            size_t w = 0;
            for (int r = 0; r < j.nranks && w + 16 < sizeof who; r++)
                if (j.ranks[r].pid) w += (size_t)snprintf(who + w, sizeof who - w, "%s%d", w ? " " : "", r);
            fprintf(stderr,
                    "dionrun: timed out after %g s; stopping %d rank%s (still running: rank%s %s%s)\n",
                    timeout, j.live, plural(j.live), plural(j.live), who, w + 16 >= sizeof who ? " ..." : "");
            job_stop(&j, 124);
        }
        double next = j.stopping ? j.kill_at : end_at;
        int sig;
        siginfo_t si;
        if (next) {
            struct timespec ts = to_timespec(next - now_s());
            sig = sigtimedwait(&g_handled, &si, &ts);
        } else {
            sig = sigwaitinfo(&g_handled, &si);
        }
        if (sig == SIGCHLD) job_reap(&j, prog_argv[0], si.si_pid);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            if (!j.stopping) {
                char s[64];
                signal_text(sig, s, sizeof s);
                fprintf(stderr, "dionrun: got %s; passing it to %d rank%s\n", s, j.live, plural(j.live));
                j.stopping = 1;
                j.status = 128 + sig;
            }
            job_signal_all(&j, sig);
            if (!j.kill_at) j.kill_at = now_s() + g_grace;
        }
    }
    free(envp);
    free(j.ranks);
    return j.status;
}

int main(int argc, char **argv)
{
    long nranks = -1;
    double timeout = 0;
    int want_mps = 0, want_hosts = 0, i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        int is_n = 0;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || !a[1]) break; /* the program */
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--mps") == 0) {
            want_mps = 1;
            continue;
        }
        if (strcmp(a, "--hosts") == 0) {
            want_hosts = 1;
            continue;
        }
        int is_grace = strncmp(a, "--grace", 7) == 0;
        if (strcmp(a, "-n") == 0 || strcmp(a, "--timeout") == 0 || strcmp(a, "--grace") == 0) {
            if (i + 1 >= argc) usage_error("%s needs a value", a);
            is_n = a[1] == 'n';
            val = argv[++i];
        } else if (strncmp(a, "-n", 2) == 0) {
            is_n = 1;
            val = a + 2;
        } else if (strncmp(a, "--timeout=", 10) == 0) {
            val = a + 10;
        } else if (strncmp(a, "--grace=", 8) == 0) {
            val = a + 8;
        } else {
            usage_error("unknown option '%s'", a);
        }
        char *end;
        errno = 0;
        if (is_n) {
            nranks = strtol(val, &end, 10);
            if (errno || end == val || *end || nranks < 1 || nranks > MAX_RANKS)
                usage_error("-n wants a number of ranks from 1 to %d, not '%s'", MAX_RANKS, val);
        } else {
            double v = strtod(val, &end);
            if (errno || end == val || *end || !(v > 0 && v <= 1e8))
                usage_error("%s wants a number of seconds greater than 0, not '%s'",
                            is_grace ? "--grace" : "--timeout", val);
            *(is_grace ? &g_grace : &timeout) = v;
        }
    }
    if (nranks < 0) usage_error("missing -n N (how many ranks to start)");
    if (want_hosts && want_mps)
        usage_error("--hosts and --mps exclude each other: ranks on separate hosts share no MPS daemon");
    if (i >= argc) usage_error("no program to run");
    char **prog_argv = argv + i;

    /* Blocked from here on, also in the bootstrap root thread that inherits this mask; sigtimedwait takes
     * them. SIGHUP is left alone when it was ignored (nohup): then the user wants the job to outlive the
     * terminal. */
    struct sigaction old_hup;
    sigaction(SIGHUP, NULL, &old_hup);
    signal(SIGCHLD, SIG_DFL); /* an inherited SIG_IGN would reap the ranks behind dionrun's back */
    sigemptyset(&g_handled);
    sigaddset(&g_handled, SIGCHLD);
    sigaddset(&g_handled, SIGINT);
    sigaddset(&g_handled, SIGTERM);
    if (old_hup.sa_handler != SIG_IGN) sigaddset(&g_handled, SIGHUP);
    /* SIGPIPE too, so that a closed stderr cannot kill dionrun before it stops its MPS daemon. */
    sigset_t block = g_handled;
    sigaddset(&block, SIGPIPE);
    sigprocmask(SIG_BLOCK, &block, &g_orig_mask);

    int ngpus = count_gpus();
    if (want_hosts) {
        /* Before any thread exists: the namespaces are made by unsharing this process. */
        char why[1024], ip[PATH_MAX];
        /* A user's PATH often lacks the sbin folders, where distributions put ip. */
        int have_ip = find_in_path("ip", ip, sizeof ip);
        for (const char *const *d = (const char *const[]){"/usr/sbin/ip", "/sbin/ip", NULL}; !have_ip && *d;
             d++)
            have_ip = access(*d, X_OK) == 0 && snprintf(ip, sizeof ip, "%s", *d) > 0;
        if (!(g_hosts = hosts_create((int)nranks, have_ip ? ip : NULL, why, sizeof why))) {
            fprintf(stderr, "dionrun: cannot simulate hosts on this machine: %s\n", why);
            return 77; /* the tests' "skipped" */
        }
        /* The root listens on the bridge, which every host reaches; each rank on its own link. */
        setenv("DION_BOOTSTRAP_IFNAME", HOSTS_BRIDGE_IF, 1);
    } else {
        if (want_mps || (ngpus > 0 && nranks > ngpus)) mps_start();
        /* One node: loopback, unless the user picked an interface. */
        setenv("DION_BOOTSTRAP_IFNAME", "lo", 0);
    }
    dion_unique_id_t id;
    if (dion_get_unique_id(&id) != DION_SUCCESS) {
        fprintf(stderr, "dionrun: cannot start the bootstrap root: %s\n", dion_last_error());
        mps_stop();
        hosts_destroy(g_hosts);
        return 1;
    }
    if (g_hosts) setenv("DION_BOOTSTRAP_IFNAME", HOSTS_RANK_IF, 1);
    int status = run_job((int)nranks, ngpus, timeout, prog_argv, &id);
    mps_stop();
    hosts_destroy(g_hosts);
    return status;
}
