/* dionrun --hosts: simulated hosts on one machine, so that tests cross a real network between ranks that
 * share nothing else (no loopback, no /tmp, no /dev/shm, no abstract Unix sockets, no SysV IPC).
 *
 * Layout: a switch namespace holds a bridge (HOSTS_BRIDGE_ADDR) and dionrun, which hosts the bootstrap root
 * there; each rank's network namespace holds one end of a veth pair (HOSTS_RANK_IF, 10.231.0.(r+1)/24), the
 * other end is a port of the bridge. The namespaces are anonymous (held by file descriptors and processes,
 * never bind-mounted under /run/netns), so parallel jobs cannot collide and nothing is left behind when
 * dionrun is killed: the ranks die with it (PR_SET_PDEATHSIG) and the kernel frees the rest. Links are
 * configured by the ip command (iproute2), run inside each namespace. */
#include "dionrun_hosts.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IP_WAIT_S 20.0 /* bound on each run of ip */

struct hosts {
    int nranks;
    pid_t launcher;
    int *netns; /* [nranks]: each rank's network namespace */
    char (*name)[32];
};

static void say(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

/* Waits up to limit seconds for pid, SIGKILLing it past that. Returns its wait status, or -1. */
static int wait_child(pid_t pid, double limit)
{
    for (long waited_ms = 0;; waited_ms += 5) {
        int ws;
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid) return ws;
        if (r < 0 && errno != EINTR) return -1;
        if (waited_ms >= (long)(limit * 1000)) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            return -1;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

/* Runs "ip -batch -" on script inside the network namespace netns_fd (-1: this one). keep_fds (n of them)
 * stay open in ip so that the script can name them as /proc/self/fd/N. Returns 0, or -1 with a sentence. */
static int run_ip(const char *ip, int netns_fd, const char *script, const int *keep_fds, int nkeep, char *why,
                  size_t cap)
{
    int in = memfd_create("dionrun-ip-in", MFD_CLOEXEC), err = memfd_create("dionrun-ip-err", MFD_CLOEXEC);
    size_t len = strlen(script);
    if (in < 0 || err < 0 || write(in, script, len) != (ssize_t)len || lseek(in, 0, SEEK_SET) != 0) {
        say(why, cap, "cannot prepare the ip command's input: %s", strerror(errno));
        if (in >= 0) close(in);
        if (err >= 0) close(err);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) _exit(126);
        for (int i = 0; i < nkeep; i++) fcntl(keep_fds[i], F_SETFD, 0);
        dup2(in, 0);
        dup2(err, 1);
        dup2(err, 2);
        char *argv[] = {(char *)ip, "-batch", "-", NULL};
        execv(ip, argv);
        _exit(127);
    }
    int ws = pid > 0 ? wait_child(pid, IP_WAIT_S) : -1;
    int ok = ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    if (!ok) {
        char out[512] = "";
        ssize_t n = pread(err, out, sizeof out - 1, 0);
        out[n > 0 ? n : 0] = 0;
        for (char *p = out; *p; p++)
            if (*p == '\n') *p = ' ';
        if (pid < 0)
            say(why, cap, "cannot fork to run %s: %s", ip, strerror(errno));
        else if (ws == -1)
            say(why, cap, "%s -batch did not finish within %g s", ip, IP_WAIT_S);
        else
            say(why, cap, "%s -batch failed (%s %d): %s", ip, WIFEXITED(ws) ? "exit code" : "signal",
                WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), out[0] ? out : "no message");
    }
    close(in);
    close(err);
    return ok ? 0 : -1;
}

/* Joins this process's namespaces for a host; child side only. */
static int enter_private(const char *hostname)
{
    if (unshare(CLONE_NEWUTS | CLONE_NEWNS | CLONE_NEWIPC) != 0) return errno;
    if (sethostname(hostname, strlen(hostname)) != 0) return errno;
    /* Private propagation first, or the tmpfs mounts below would appear on the real /tmp too. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return errno;
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) return errno;
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) return errno;
    return 0;
}

/* Whether a child may take UTS, mount and IPC namespaces and mount tmpfs there (a container may allow
 * network namespaces and refuse these). */
static int probe_private(char *why, size_t cap)
{
    pid_t pid = fork();
    if (pid == 0) _exit(enter_private("dionrun-probe") & 0xff);
    int ws = pid > 0 ? wait_child(pid, 10.0) : -1;
    if (ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return 0;
    say(why, cap,
        "cannot give a rank its own hostname and /tmp (unshare of the UTS, mount and IPC namespaces or "
        "mounting "
        "tmpfs failed: %s)",
        ws != -1 && WIFEXITED(ws) ? strerror(WEXITSTATUS(ws)) : "the probe did not finish");
    return -1;
}

void hosts_destroy(hosts_t *h)
{
    if (!h) return;
    for (int r = 0; r < h->nranks; r++)
        if (h->netns[r] >= 0) close(h->netns[r]);
    free(h->netns);
    free(h->name);
    free(h);
}

hosts_t *hosts_create(int nranks, const char *ip, char *why, size_t cap)
{
    if (nranks > HOSTS_MAX) {
        say(why, cap, "--hosts supports at most %d ranks (one /24 subnet), not %d", HOSTS_MAX, nranks);
        return NULL;
    }
    if (!ip) {
        say(why, cap,
            "--hosts needs the ip command (iproute2), found neither in PATH nor in /usr/sbin, /sbin");
        return NULL;
    }
    hosts_t *h = calloc(1, sizeof *h);
    char *script = malloc((size_t)nranks * 160 + 256);
    if (!h || !script || !(h->netns = malloc(sizeof *h->netns * (size_t)nranks)) ||
        !(h->name = calloc((size_t)nranks, sizeof *h->name))) {
        say(why, cap, "out of memory");
        free(script);
        hosts_destroy(h);
        return NULL;
    }
    h->nranks = nranks;
    h->launcher = getpid();
    for (int r = 0; r < nranks; r++) {
        h->netns[r] = -1;
        snprintf(h->name[r], sizeof h->name[r], "dion-host-%d", r);
    }

    /* The switch namespace, which this process keeps; then one per rank, each left again at once. */
    int sw = -1;
    if (unshare(CLONE_NEWNET) != 0 || (sw = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
        say(why, cap,
            "--hosts cannot create a network namespace (%s): it needs root or CAP_SYS_ADMIN, and a kernel "
            "and container that allow network namespaces",
            strerror(errno));
        goto fail;
    }
    for (int r = 0; r < nranks; r++) {
        if (unshare(CLONE_NEWNET) != 0 ||
            (h->netns[r] = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0 ||
            setns(sw, CLONE_NEWNET) != 0) {
            say(why, cap, "--hosts: creating the network namespace of rank %d failed: %s", r,
                strerror(errno));
            goto fail;
        }
    }
    if (probe_private(why, cap) != 0) goto fail;

    /* The bridge and one veth pair per rank, the rank's end moved into its namespace. */
    size_t k = (size_t)sprintf(script, "link set lo up\nlink add " HOSTS_BRIDGE_IF " type bridge\n"
                                       "link set " HOSTS_BRIDGE_IF " up\naddr add " HOSTS_BRIDGE_ADDR
                                       "/24 dev " HOSTS_BRIDGE_IF "\n");
    for (int r = 0; r < nranks; r++)
        k += (size_t)sprintf(script + k,
                             "link add h%d type veth peer name " HOSTS_RANK_IF " netns /proc/self/fd/%d\n"
                             "link set h%d master " HOSTS_BRIDGE_IF "\nlink set h%d up\n",
                             r, h->netns[r], r, r);
    char ipwhy[700];
    if (run_ip(ip, -1, script, h->netns, nranks, ipwhy, sizeof ipwhy) != 0) {
        say(why, cap,
            "--hosts cannot build the bridge and veth links (does the kernel have veth and bridge?): %s",
            ipwhy);
        goto fail;
    }
    for (int r = 0; r < nranks; r++) {
        sprintf(script,
                "link set lo up\naddr add 10.231.0.%d/24 dev " HOSTS_RANK_IF "\nlink set " HOSTS_RANK_IF
                " up\n",
                r + 1);
        if (run_ip(ip, h->netns[r], script, NULL, 0, ipwhy, sizeof ipwhy) != 0) {
            say(why, cap, "--hosts cannot configure the link of rank %d: %s", r, ipwhy);
            goto fail;
        }
    }
    close(sw);
    free(script);
    return h;
fail:
    if (sw >= 0) close(sw);
    free(script);
    hosts_destroy(h);
    return NULL;
}

int hosts_enter(const hosts_t *h, int rank)
{
    /* Ranks must not outlive dionrun: their namespaces would outlive it with them. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return errno;
    if (getppid() != h->launcher) return ESRCH; /* dionrun died before prctl */
    if (setns(h->netns[rank], CLONE_NEWNET) != 0) return errno;
    return enter_private(h->name[rank]);
}

const char *hosts_name(const hosts_t *h, int rank)
{
    return h->name[rank];
}
