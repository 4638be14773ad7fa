/* Internal pieces of the bootstrap and of fd passing, linked against the static library:
 *   siphash   SipHash-2-4 against the reference vectors of its specification;
 *   fdpass    memory-handle passing while a hostile process of the same user injects datagrams.
 * Usage: test_boot_internal MODE. Exit 0 on success; any failure prints what and exits 1. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../src/comm.h"

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

/* Key 00..0f; message 00..len-1. Expected values from the SipHash paper (Aumasson and Bernstein, 2012):
 * appendix A for the 15-byte message, and the reference implementation's table for lengths 0, 1 and 63. */
static int mode_siphash(void)
{
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
    const struct {
        size_t len;
        uint64_t want;
    } v[] = {{15, 0xa129ca6149be45e5ull},
             {0, 0x726fdb47dd0e0e31ull},
             {1, 0x74f839c593dc67fdull},
             {63, 0x958a324ceb064572ull}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint64_t got = dion__siphash24(key, msg, v[i].len);
        if (got != v[i].want)
            FAIL("SipHash-2-4 of %zu bytes: got %016llx, expected %016llx", v[i].len, (unsigned long long)got,
                 (unsigned long long)v[i].want);
    }
    /* Labels separate the handshake's proofs: the same fields under two labels give different tags. */
    uint8_t f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (dion__auth_tag(key, "a", f, sizeof f) == dion__auth_tag(key, "b", f, sizeof f))
        FAIL("auth tags of two labels coincide");
    printf("SipHash-2-4 matches the specification's vectors\n");
    return 0;
}

/* ---- fd passing under attack (issue 7, defect 6) ---- */

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) FAIL("opendir /proc/self/fd: %s", strerror(errno));
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static unsigned char pattern(int rank, int round, size_t i)
{
    return (unsigned char)(rank * 97 + round * 31 + i * 7 + (i >> 11) + 1);
}

static size_t round_size(int rank, int round)
{
    unsigned s = (unsigned)(rank * 7919 + round * 104729 + 12345);
    s = s * 1103515245u + 12345u;
    return 4096 + (s >> 8) % 60000;
}

static int memfd_with(size_t size, int rank, int round, unsigned char fill, int use_fill)
{
    int fd = memfd_create("dion-test", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) FAIL("memfd: %s", strerror(errno));
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) FAIL("mmap: %s", strerror(errno));
    for (size_t i = 0; i < size; i++) p[i] = use_fill ? fill : pattern(rank, round, i);
    munmap(p, size);
    return fd;
}

#define ROUNDS 40

static void fdpass_rank(int rank, int n, const dion_unique_id_t *id)
{
    dion_comm_t c;
    CHECK_OK(dion_comm_init_rank(&c, n, id, rank));
    int *fds = malloc(sizeof(int) * (size_t)n);
    int before = -1;
    for (int round = 0; round < ROUNDS; round++) {
        size_t mine = round_size(rank, round);
        int fd = memfd_with(mine, rank, round, 0, 0);
        /* The tag repeats across rounds, as window chunk indices do: only the round tells them apart. */
        dion_status_t st = dion__fd_exchange(c, (uint32_t)(round % 2), fd, fds);
        if (st != DION_SUCCESS)
            FAIL("rank %d round %d: the exchange failed under injected datagrams: %s: %s", rank, round,
                 dion_status_string(st), dion_last_error());
        for (int r = 0; r < n; r++) {
            if (r == rank) {
                if (fds[r] != -1) FAIL("rank %d: got an fd for itself", rank);
                continue;
            }
            if (fds[r] < 0) FAIL("rank %d round %d: no fd from rank %d", rank, round, r);
            struct stat sb;
            size_t want = round_size(r, round);
            if (fstat(fds[r], &sb) != 0 || (size_t)sb.st_size != want)
                FAIL("rank %d round %d: rank %d's fd has %lld bytes, expected %zu (another process's memory)",
                     rank, round, r, (long long)sb.st_size, want);
            unsigned char *p = mmap(NULL, want, PROT_READ, MAP_SHARED, fds[r], 0);
            if (p == MAP_FAILED) FAIL("mmap: %s", strerror(errno));
            for (size_t i = 0; i < want; i++)
                if (p[i] != pattern(r, round, i))
                    FAIL("rank %d round %d: byte %zu of rank %d's memory is %u, expected %u: a substituted "
                         "window",
                         rank, round, i, r, p[i], pattern(r, round, i));
            munmap(p, want);
            close(fds[r]);
        }
        close(fd);
        if (round == 0) before = count_fds(); /* the first exchange opened the socket */
        struct timespec ts = {0, 3000000};    /* let injected datagrams pile up between rounds */
        nanosleep(&ts, NULL);
    }
    CHECK_OK(dion_comm_barrier(c));
    int after = count_fds();
    if (after != before)
        FAIL("rank %d: %d fds open before the exchanges and %d after: rejected datagrams leaked descriptors",
             rank, before, after);
    free(fds);
    CHECK_OK(dion_comm_destroy(c));
    printf("rank %d: %d exchanges, right memory every time, no fd leaked\n", rank, ROUNDS);
}

/* The abstract Unix sockets that process pid has bound, by name, via the inodes of its fds. */
static int find_sockets(pid_t pid, char names[][108], int *ranks, int cap)
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
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f) return 0;
    char line[512];
    while (fgets(line, sizeof line, f) && n < cap) {
        unsigned long ino;
        char name[200];
        if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %199s", &ino, name) != 2) continue;
        if (strncmp(name, "@dion-", 6) != 0) continue;
        for (int i = 0; i < ninodes; i++)
            if (inodes[i] == ino) {
                const char *dash = strrchr(name, '-');
                snprintf(names[n], 108, "%.100s", name + 1);
                ranks[n] = atoi(dash + 1);
                n++;
            }
    }
    fclose(f);
    return n;
}

/* Sends one datagram to the abstract socket name carrying nfd copies of fd, claiming the credentials of pid
 * when forge is set (possible for root only; otherwise this process's own). */
static volatile unsigned long *injected; /* shared with the parent: datagrams the kernel took */

static void inject(int s, const char *name, const void *payload, size_t len, int fd, int nfd, pid_t forge)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t nl = strlen(name);
    memcpy(sa.sun_path + 1, name, nl);
    struct iovec iov = {(void *)payload, len};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_name = &sa;
    m.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    size_t used = 0;
    struct cmsghdr *cm = (struct cmsghdr *)ctl.buf;
    if (nfd > 0) {
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfd);
        for (int i = 0; i < nfd; i++) memcpy(CMSG_DATA(cm) + sizeof(int) * (size_t)i, &fd, sizeof(int));
        used += CMSG_SPACE(sizeof(int) * (size_t)nfd);
        cm = (struct cmsghdr *)(ctl.buf + used);
    }
    if (forge) {
        struct ucred cr = {.pid = forge, .uid = getuid(), .gid = getgid()};
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_CREDENTIALS;
        cm->cmsg_len = CMSG_LEN(sizeof cr);
        memcpy(CMSG_DATA(cm), &cr, sizeof cr);
        used += CMSG_SPACE(sizeof cr);
    }
    m.msg_controllen = used;
    if (used == 0) m.msg_control = NULL;
    if (sendmsg(s, &m, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
        __atomic_fetch_add(injected, 1, __ATOMIC_RELAXED);
    else if (errno == EPERM && forge)
        inject(s, name, payload, len, fd, nfd, 0); /* not root: the kernel refuses forged credentials */
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The hostile process: same user, finds the ranks' sockets and keeps sending what a stranger can make
 * (old-style and current-style messages naming the real peer, with the peer's pid where the kernel allows
 * forging it, wrong tokens, old and future rounds, several fds, claims to be the receiver itself). Gentle
 * enough to leave room in the receive queues for the real messages. */
static void hostile(const pid_t *pids, int n)
{
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int bad = memfd_with(65536, 0, 0, 0xba, 1);
    unsigned seed = 4242;
    for (int iter = 0; iter < 100000; iter++) {
        for (int victim = 0; victim < n; victim++) {
            char names[8][108];
            int ranks[8];
            int k = find_sockets(pids[victim], names, ranks, 8);
            for (int i = 0; i < k; i++) {
                int to = ranks[i], from = (to + 1) % n;
                uint8_t msg[64];
                memset(msg, 0, sizeof msg);
                switch (rand_r(&seed) % 5) {
                case 0: { /* the earlier 12-byte format: tag, sender, has-fd */
                    uint32_t old[3] = {(uint32_t)(rand_r(&seed) % 2), (uint32_t)from, 1};
                    inject(s, names[i], old, sizeof old, bad, 1, pids[from]);
                    break;
                }
                case 1: /* current layout, right fields, random token, a round near the real ones */
                case 2: {
                    put32(msg, 0x31444644u); /* "DFD1" */
                    put32(msg + 4, (uint32_t)from);
                    put32(msg + 8, (uint32_t)to);
                    put32(msg + 12, (uint32_t)(rand_r(&seed) % 2));
                    put32(msg + 16, (uint32_t)(rand_r(&seed) % (ROUNDS + 2)));
                    put32(msg + 24, 1);
                    for (int b = 32; b < 40; b++) msg[b] = (uint8_t)rand_r(&seed);
                    inject(s, names[i], msg, 40, bad, 1, pids[from]);
                    break;
                }
                case 3: /* several fds at once */
                    for (int b = 0; b < 40; b++) msg[b] = (uint8_t)rand_r(&seed);
                    inject(s, names[i], msg, 40, bad, 4, 0);
                    break;
                default: /* claims to be the receiver, or a rank out of range */
                    put32(msg, 0x31444644u);
                    put32(msg + 4, rand_r(&seed) % 2 ? (uint32_t)to : 77u);
                    put32(msg + 8, (uint32_t)to);
                    inject(s, names[i], msg, 40, bad, 1, 0);
                    break;
                }
            }
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    _exit(0);
}

static int mode_fdpass(void)
{
    const int n = 2;
    setenv("DION_BOOTSTRAP_TIMEOUT", "30s", 1);
    dion_unique_id_t id;
    pid_t pids[2];
    injected = mmap(NULL, sizeof *injected, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (injected == MAP_FAILED) FAIL("mmap: %s", strerror(errno));
    int pipes[2][2];
    for (int r = 0; r < n; r++) {
        if (pipe(pipes[r]) != 0) FAIL("pipe");
        pids[r] = fork();
        if (pids[r] == 0) {
            close(pipes[r][1]);
            if (read(pipes[r][0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
            fdpass_rank(r, n, &id);
            fflush(stdout);
            _exit(0);
        }
        close(pipes[r][0]);
    }
    pid_t h = fork();
    if (h == 0) hostile(pids, n);
    CHECK_OK(dion_get_unique_id(&id));
    for (int r = 0; r < n; r++) {
        if (write(pipes[r][1], &id, sizeof id) != (ssize_t)sizeof id) FAIL("write");
        close(pipes[r][1]);
    }
    int failed = 0;
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    kill(h, SIGKILL);
    waitpid(h, NULL, 0);
    if (failed) FAIL("%d of %d ranks failed while a hostile process injected datagrams", failed, n);
    if (*injected < 20)
        FAIL("the hostile process delivered only %lu datagrams: the test tested nothing", *injected);
    printf("fd passing held against %lu injected datagrams\n", *injected);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) FAIL("usage: test_boot_internal siphash | fdpass");
    alarm(110);
    if (!strcmp(argv[1], "siphash")) return mode_siphash();
    if (!strcmp(argv[1], "fdpass")) return mode_fdpass();
    FAIL("unknown mode %s", argv[1]);
}
