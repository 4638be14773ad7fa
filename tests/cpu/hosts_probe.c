/* A rank program for the simulated-hosts tests (dionrun --hosts). Modes:
 *   boot MARKER   form the comm; check that every rank is a host of its own (hostname, host key, local size
 *                 1, one network link on the test subnet, private /tmp and /dev/shm, unreachable abstract
 *                 sockets; MARKER is a file in the launcher's /tmp that must be invisible) and that host
 *                 collectives carry data (allgather and bcast of random sizes, checked byte by byte)
 *   dev           CPU mode: a host window, then a device handle. Exit 0: refused with a sentence that names
 *                 this rank, a peer and the peer's host (today: p2p only reaches same-host ranks); exit 10:
 *                 created (a network backend exists: the caller then runs the conformance suite)
 *   kill V        every rank runs barriers; the test SIGKILLs rank V; each survivor (ignoring SIGTERM so that
 *                 dionrun lets it finish) must get DION_ERR_PEER_FAILED naming rank V, and writes rank<R>.ok
 * Files go to $HOSTS_PROBE_DIR (outside /tmp: the ranks do not share it): rank<R>.pid, rank<R>.ready. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion.h"
#include "src/comm.h"

static int g_rank = -1;

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hosts_probe rank %d: FAIL: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void write_file(const char *suffix, const char *text)
{
    const char *dir = getenv("HOSTS_PROBE_DIR");
    if (!dir) return;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/rank%d.%s", dir, g_rank, suffix);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) die("cannot write %s", path);
}

static dion_comm_t join(void)
{
    dion_comm_t comm;
    if (dion_comm_init_env(&comm) != DION_SUCCESS) die("dion_comm_init_env: %s", dion_last_error());
    if (dion_comm_rank(comm) != g_rank) die("dion_comm_rank is %d", dion_comm_rank(comm));
    if (dion_comm_barrier(comm) != DION_SUCCESS) die("dion_comm_barrier: %s", dion_last_error());
    return comm;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint8_t pattern(int rank, int round, size_t i)
{
    return (uint8_t)(rank * 131 + round * 29 + i * 7 + (i >> 8));
}

/* ---- boot ---- */

static void check_identity(dion_comm_t c, int n)
{
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    const struct dion_comm *ci = c;
    if (strcmp(ci->info[g_rank].host, host) != 0)
        die("the comm's rank info says host '%s', gethostname '%s'", ci->info[g_rank].host, host);
    for (int r = 0; r < n; r++)
        for (int q = r + 1; q < n; q++) {
            if (strcmp(ci->info[r].host, ci->info[q].host) == 0)
                die("ranks %d and %d both report host '%s'", r, q, ci->info[r].host);
            if (ci->info[r].host_key == ci->info[q].host_key)
                die("ranks %d and %d (hosts %s, %s) share a host key", r, q, ci->info[r].host,
                    ci->info[q].host);
        }
    if (ci->local_size != 1 || ci->local_rank != 0)
        die("local_size %d, local_rank %d; expected 1 and 0 (every rank on a host of its own)",
            ci->local_size, ci->local_rank);

    /* One kernel under all hosts: the boot id is the same, so only the hostname tells hosts apart. */
    char boot[64] = "", *all = calloc((size_t)n, sizeof boot);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(boot, sizeof boot, f)) die("cannot read the boot id");
    fclose(f);
    if (!all || dion_comm_allgather(c, boot, sizeof boot, all) != DION_SUCCESS)
        die("allgather of boot ids: %s", dion_last_error());
    for (int r = 0; r < n; r++)
        if (strcmp(all + (size_t)r * sizeof boot, boot) != 0) die("rank %d has another boot id", r);
    free(all);
}

/* The rank's only way out is its veth link on the test subnet. */
static void check_link(void)
{
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0) die("getifaddrs: %s", strerror(errno));
    char want[32];
    snprintf(want, sizeof want, "10.231.0.%d", g_rank + 1);
    int seen = 0;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof a);
        if (strcmp(i->ifa_name, "dion0") != 0 || strcmp(a, want) != 0)
            die("unexpected interface %s with %s (expected only dion0 with %s)", i->ifa_name, a, want);
        seen++;
    }
    freeifaddrs(ifa);
    if (seen != 1) die("found %d IPv4 links besides loopback, expected 1 (dion0)", seen);
}

static void marker(const char *dir, int r, char *path, size_t cap)
{
    snprintf(path, cap, "%s/dion-hosts-probe-%d", dir, r);
}

/* Files in /tmp and /dev/shm and abstract Unix sockets of one rank are invisible to the others. */
static void check_private(dion_comm_t c, int n, const char *launcher_marker)
{
    struct stat sb;
    if (stat(launcher_marker, &sb) == 0) die("the launcher's %s is visible: /tmp is shared", launcher_marker);
    static const char *const dirs[] = {"/tmp", "/dev/shm"};
    char path[256];
    for (int d = 0; d < 2; d++) {
        marker(dirs[d], g_rank, path, sizeof path);
        FILE *f = fopen(path, "w");
        if (!f || fclose(f) != 0) die("cannot create %s", path);
    }
    uint64_t tag = 0;
    if (g_rank == 0) tag = (uint64_t)getpid() << 20 ^ (uint64_t)time(NULL);
    if (dion_comm_bcast(c, &tag, sizeof tag, 0) != DION_SUCCESS) die("bcast: %s", dion_last_error());
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un me = {.sun_family = AF_UNIX};
    int len = snprintf(me.sun_path + 1, sizeof me.sun_path - 1, "dion-hosts-probe-%llx-%d",
                       (unsigned long long)tag, g_rank);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, alen) != 0) die("abstract socket: %s", strerror(errno));
    if (dion_comm_barrier(c) != DION_SUCCESS) die("barrier: %s", dion_last_error());

    for (int r = 0; r < n; r++) {
        for (int d = 0; d < 2; d++) {
            marker(dirs[d], r, path, sizeof path);
            int there = stat(path, &sb) == 0;
            if (there != (r == g_rank))
                die("%s is %s: %s is %s", path, there ? "visible" : "missing", dirs[d],
                    r == g_rank ? "not writable" : "shared with that rank");
        }
        struct sockaddr_un to = {.sun_family = AF_UNIX};
        snprintf(to.sun_path + 1, sizeof to.sun_path - 1, "dion-hosts-probe-%llx-%d", (unsigned long long)tag,
                 r);
        int sent = sendto(fd, "x", 1, 0, (struct sockaddr *)&to, alen) == 1;
        if (sent != (r == g_rank))
            die("sending to rank %d's abstract socket %s (%s)", r, sent ? "worked: it is shared" : "failed",
                sent ? "" : strerror(errno));
    }
    close(fd);
    if (dion_comm_barrier(c) != DION_SUCCESS) die("barrier: %s", dion_last_error());
}

/* Allgather and bcast with sizes and roots drawn from a seed all ranks share; every byte checked. */
static void check_collectives(dion_comm_t c, int n)
{
    uint64_t seed = 0x5eed0000u + (uint64_t)n;
    for (int round = 0; round < 40; round++) {
        size_t bytes = (size_t)(splitmix(&seed) % 70000);
        int root = (int)(splitmix(&seed) % (uint64_t)n);
        uint8_t *mine = malloc(bytes + 1), *all = malloc(bytes * (size_t)n + 1);
        if (!mine || !all) die("out of memory");
        for (size_t i = 0; i < bytes; i++) mine[i] = pattern(g_rank, round, i);
        if (dion_comm_allgather(c, mine, bytes, all) != DION_SUCCESS)
            die("allgather of %zu bytes: %s", bytes, dion_last_error());
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < bytes; i++)
                if (all[(size_t)r * bytes + i] != pattern(r, round, i))
                    die("round %d: allgather of %zu bytes: byte %zu from rank %d is %u, expected %u", round,
                        bytes, i, r, all[(size_t)r * bytes + i], pattern(r, round, i));
        if (g_rank != root)
            memset(mine, 0xee, bytes);
        else
            for (size_t i = 0; i < bytes; i++) mine[i] = pattern(root + 1000, round, i);
        if (dion_comm_bcast(c, mine, bytes, root) != DION_SUCCESS)
            die("bcast of %zu bytes from %d: %s", bytes, root, dion_last_error());
        for (size_t i = 0; i < bytes; i++)
            if (mine[i] != pattern(root + 1000, round, i))
                die("round %d: bcast of %zu bytes from rank %d: byte %zu is wrong", round, bytes, root, i);
        free(mine);
        free(all);
    }
}

static int mode_boot(const char *launcher_marker)
{
    dion_comm_t c = join();
    int n = dion_comm_size(c);
    check_identity(c, n);
    check_link();
    check_private(c, n, launcher_marker);
    check_collectives(c, n);
    if (dion_comm_barrier(c) != DION_SUCCESS) die("final barrier: %s", dion_last_error());
    printf("rank %d of %d on %s: separate host, collectives ok\n", g_rank, n, c->info[g_rank].host);
    dion_comm_destroy(c);
    return 0;
}

/* ---- dev ---- */

static int mode_dev(void)
{
    dion_comm_t c = join();
    int n = dion_comm_size(c);
    void *base;
    dion_win_t win;
    if (dion_win_alloc(c, 4096, 1, &base, &win) != DION_SUCCESS) die("dion_win_alloc: %s", dion_last_error());
    dion_dev_attr_t attr = {0};
    dion_dev_t dev;
    dion_status_t st = dion_dev_create(c, &attr, &dev);
    if (st == DION_SUCCESS) {
        printf("rank %d: device handle CREATED across %d hosts\n", g_rank, n);
        fflush(stdout);
        dion_dev_destroy(c, &dev);
        dion_win_destroy(win);
        dion_comm_destroy(c);
        return 10;
    }
    /* The rank that decided names itself, a peer and the peer's host; the others name the rank that failed
     * (the full sentence is in that rank's log). */
    const char *e = dion_last_error();
    if (st != DION_ERR_UNSUPPORTED)
        die("dion_dev_create: %s, expected DION_ERR_UNSUPPORTED: %s", dion_status_string(st), e);
    char me[32], peer[32];
    snprintf(me, sizeof me, "rank %d ", g_rank);
    int named = 0;
    for (int r = 0; r < n && !named; r++) {
        if (r == g_rank) continue;
        snprintf(peer, sizeof peer, "rank %d ", r);
        named = strstr(e, me) && strstr(e, peer) && strstr(e, c->info[r].host);
    }
    if (!named) {
        int first = -1;
        if (sscanf(strstr(e, "on rank ") ? strstr(e, "on rank ") : "", "on rank %d", &first) != 1 ||
            first < 0 || first >= n || first == g_rank)
            die("the refusal names neither this rank, a peer and its host, nor the rank that failed: %s", e);
    }
    printf("rank %d: REFUSED: %s\n", g_rank, e);
    dion_win_destroy(win);
    dion_comm_destroy(c);
    return 0;
}

/* ---- kill ---- */

static int mode_kill(int victim)
{
    if (g_rank != victim) signal(SIGTERM, SIG_IGN); /* dionrun stops the job when the victim dies */
    dion_comm_t c = join();
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    write_file("pid", pid);
    write_file("ready", "ready\n");
    /* Bounded: if the test never kills the victim, every rank fails here. */
    time_t end = time(NULL) + 60;
    dion_status_t st = DION_SUCCESS;
    while (st == DION_SUCCESS && time(NULL) < end) st = dion_comm_barrier(c);
    if (st == DION_SUCCESS) die("nobody was killed within 60 s");
    if (g_rank == victim) die("the victim's barrier failed: %s", dion_last_error());
    if (st != DION_ERR_PEER_FAILED)
        die("expected DION_ERR_PEER_FAILED, got %s: %s", dion_status_string(st), dion_last_error());
    char want[32], report[1200];
    snprintf(want, sizeof want, "rank %d ", victim);
    if (!strstr(dion_last_error(), want)) die("the error does not name %s: %s", want, dion_last_error());
    snprintf(report, sizeof report, "%s\n", dion_last_error());
    if (dion_comm_barrier(c) == DION_SUCCESS) die("a barrier after the failure succeeded");
    write_file("ok", report);
    printf("rank %d: %s\n", g_rank, report);
    dion_comm_destroy(c);
    return 0;
}

int main(int argc, char **argv)
{
    /* Whichever launcher's variables the test set (dionrun's, or Slurm's, Open MPI's, torchrun's). */
    static const char *const vars[] = {"DION_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0] && g_rank < 0; i++)
        if (getenv(vars[i])) g_rank = atoi(getenv(vars[i]));
    if (argc == 3 && strcmp(argv[1], "boot") == 0) return mode_boot(argv[2]);
    if (argc == 2 && strcmp(argv[1], "dev") == 0) return mode_dev();
    if (argc == 3 && strcmp(argv[1], "kill") == 0) return mode_kill(atoi(argv[2]));
    fprintf(stderr, "usage: hosts_probe boot MARKER | dev | kill VICTIM\n");
    return 2;
}
