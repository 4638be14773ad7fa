/* Fuzzes the bootstrap root service over loopback TCP: each input starts a root (dion__root_start) and opens
 * up to six connections; each reads the root's CHALLENGE and sends fuzzed bytes, optionally as a HELLO with
 * the right header and a tag proving the secret over that challenge, sent whole or in two parts, half-closed
 * or left open. Checked: every answer is one REFUSE frame, or one RING frame (with the root's valid proof) to
 * a connection whose HELLO was valid, naming its successor rank and an address some valid HELLO for that rank
 * gave; the
 * root's thread ends within its timeout (DION_BOOTSTRAP_TIMEOUT=20ms here) and leaves no descriptor open.
 * Requests for more than 8 ranks are cut to 0..8 (the range checks are fuzz_frame's HELLO mode). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "fuzz_common.h"

#define MAX_CONNS   6
#define HELLO_FRAME (DION__FRAME_HDR + DION__HELLO_LEN)

static const uint8_t secret[DION__SECRET_LEN] = {0x5e, 0xc7, 0x3e, 0x70, 1, 2,  3,  4,
                                                 5,    6,    7,    8,    9, 10, 11, 12};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_log_everything();
    setenv("DION_BOOTSTRAP_TIMEOUT", "20ms", 1);
    return 0;
}

static int tcp_connect(const dion__addr_t *a)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(a->port);
    memcpy(&sa.sin_addr, a->addr, 4);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct {
    int fd;
    uint8_t bytes[128];
    size_t len;
    uint8_t nonce[DION__NONCE_LEN]; /* the root's challenge to this connection */
    int challenged; /* the challenge came in time (a loaded machine may delay it past the root's end) */
    uint8_t answer[64];
    size_t got;
    int eof;
} conn_t;

/* Whether conn x sent a HELLO the root must accept as proven (its fields then in *h). */
static int proven_hello(const conn_t *x, dion__hello_t *h)
{
    uint32_t type, len;
    if (!x->challenged || x->len < HELLO_FRAME || dion__frame_hdr_decode(x->bytes, &type, &len) != 0 ||
        type != DION__FRAME_HELLO || dion__hello_parse(x->bytes + DION__FRAME_HDR, len, h) != DION_SUCCESS)
        return 0;
    uint8_t f[DION__NONCE_LEN + 44];
    memcpy(f, x->nonce, DION__NONCE_LEN);
    memcpy(f + DION__NONCE_LEN, x->bytes + DION__FRAME_HDR, 44);
    return dion__auth_check(secret, "dion hello", f, sizeof f, h->tag);
}

/* Reads the root's CHALLENGE (the root sends it on accepting); 0 if it does not come within 2 s. */
static int read_challenge(int fd, uint8_t nonce[DION__NONCE_LEN])
{
    uint8_t buf[DION__FRAME_HDR + DION__CHALLENGE_LEN];
    uint32_t type, len;
    memset(nonce, 0, DION__NONCE_LEN);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t have = 0;
    while (have < sizeof buf) {
        ssize_t r = recv(fd, buf + have, sizeof buf - have, 0);
        if (r <= 0) return 0;
        have += (size_t)r;
    }
    FUZZ_CHECK(dion__frame_hdr_decode(buf, &type, &len) == 0 && type == DION__FRAME_CHALLENGE &&
                   len == DION__CHALLENGE_LEN,
               "the root's first frame is not a CHALLENGE");
    memcpy(nonce, buf + DION__FRAME_HDR, DION__NONCE_LEN);
    return 1;
}

/* Threads of this process: the root's thread counts until it has ended. */
static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void send_some(int fd, const uint8_t *p, size_t n)
{
    if (n) (void)!send(fd, p, n, MSG_NOSIGNAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    int baseline = fuzz_open_fds(), baseline_threads = threads();
    dion__addr_t root;
    memset(&root, 0, sizeof root);
    root.family = 4;
    root.addr[0] = 127;
    root.addr[3] = 1;
    FUZZ_CHECK(dion__root_start(&root, secret) == DION_SUCCESS, "root: %s", dion_last_error());

    conn_t c[MAX_CONNS];
    uint8_t flags[MAX_CONNS];
    int n = 1 + fuzz_u8(&in) % MAX_CONNS;
    for (int i = 0; i < n; i++) {
        memset(&c[i], 0, sizeof c[i]);
        flags[i] = fuzz_u8(&in);
        c[i].len = fuzz_u8(&in) % 96;
        for (size_t k = 0; k < c[i].len; k++) c[i].bytes[k] = fuzz_u8(&in);
        c[i].fd = tcp_connect(&root);
        if (c[i].fd >= 0) c[i].challenged = read_challenge(c[i].fd, c[i].nonce);
        if (flags[i] & 1) { /* a whole HELLO frame with the right proof */
            if (c[i].len < HELLO_FRAME) c[i].len = HELLO_FRAME;
            dion__frame_hdr_encode(c[i].bytes, DION__FRAME_HELLO, DION__HELLO_LEN);
        }
        if (c[i].len >= 36) dion__put_u32(c[i].bytes + 32, dion__get_u32(c[i].bytes + 32) % 9);
        if (flags[i] & 1) {
            uint8_t f[DION__NONCE_LEN + 44];
            memcpy(f, c[i].nonce, DION__NONCE_LEN);
            memcpy(f + DION__NONCE_LEN, c[i].bytes + DION__FRAME_HDR, 44);
            dion__put_u64(c[i].bytes + DION__FRAME_HDR + 44,
                          dion__auth_tag(secret, "dion hello", f, sizeof f));
        }
    }
    for (int part = 0; part < 2; part++)
        for (int i = 0; i < n; i++) {
            if (c[i].fd < 0) continue;
            size_t split = (flags[i] & 2) ? c[i].len / 2 : c[i].len;
            if (part == 0)
                send_some(c[i].fd, c[i].bytes, split);
            else
                send_some(c[i].fd, c[i].bytes + split, c[i].len - split);
            if (part == 1 && (flags[i] & 4)) shutdown(c[i].fd, SHUT_WR);
        }

    /* Collect answers until the root has closed every connection, as it must by its timeout (20 ms; 3 s is
     * the margin for a loaded machine). A frame comes in two writes, so only the close says it is whole. */
    uint64_t until = dion__now_ns() + 3000000000ull;
    for (;;) {
        struct pollfd pf[MAX_CONNS];
        int np = 0, idx[MAX_CONNS];
        for (int i = 0; i < n; i++)
            if (c[i].fd >= 0 && !c[i].eof) {
                pf[np].fd = c[i].fd;
                pf[np].events = POLLIN;
                idx[np++] = i;
            }
        uint64_t now = dion__now_ns();
        if (np == 0 || now >= until) break;
        if (poll(pf, (nfds_t)np, (int)((until - now) / 1000000) + 1) <= 0) continue;
        for (int k = 0; k < np; k++) {
            conn_t *x = &c[idx[k]];
            if (!pf[k].revents) continue;
            ssize_t r = recv(x->fd, x->answer + x->got, sizeof x->answer - x->got, MSG_DONTWAIT);
            if (r > 0)
                x->got += (size_t)r;
            else if (r == 0 || (errno != EAGAIN && errno != EINTR))
                x->eof = 1;
        }
    }

    for (int i = 0; i < n; i++) {
        if (c[i].got == 0 || !c[i].challenged)
            continue; /* no challenge read: its answer is not ours to judge */
        uint32_t type, len;
        FUZZ_CHECK(c[i].got >= DION__FRAME_HDR && dion__frame_hdr_decode(c[i].answer, &type, &len) == 0 &&
                       c[i].got == DION__FRAME_HDR + len,
                   "connection %d got %zu bytes that are not one frame", i, c[i].got);
        const uint8_t *p = c[i].answer + DION__FRAME_HDR;
        if (type == DION__FRAME_REFUSE) {
            FUZZ_CHECK(len == DION__REFUSE_LEN, "REFUSE of %u bytes", len);
            continue;
        }
        dion__hello_t h;
        dion__addr_t next;
        FUZZ_CHECK(proven_hello(&c[i], &h), "connection %d was answered without a proven HELLO", i);
        FUZZ_CHECK(type == DION__FRAME_RING && len == DION__RING_LEN, "the answer is not a RING frame");
        uint8_t f[DION__NONCE_LEN + 28];
        memcpy(f, h.nonce, DION__NONCE_LEN);
        memcpy(f + DION__NONCE_LEN, p, 28);
        FUZZ_CHECK(dion__auth_check(secret, "dion ring", f, sizeof f, p + 28), "the RING's proof is wrong");
        FUZZ_CHECK(dion__addr_decode(p, &next) == 0, "the answer holds no valid address");
        uint32_t nrank = dion__get_u32(p + 20), nr = dion__get_u32(p + 24);
        FUZZ_CHECK(nr == h.nranks && nrank == (h.rank + 1) % h.nranks,
                   "rank %u of %u told successor %u of %u", h.rank, h.nranks, nrank, nr);
        int found = 0;
        for (int j = 0; j < n && !found; j++) {
            dion__hello_t hj;
            if (!proven_hello(&c[j], &hj) || hj.rank != nrank || hj.nranks != h.nranks) continue;
            dion__addr_t aj = hj.addr;
            if (dion__addr_is_any(&aj)) { /* the root substitutes the address it saw: loopback here */
                memset(&aj, 0, sizeof aj);
                aj.family = 4;
                aj.port = hj.addr.port;
                aj.addr[0] = 127;
                aj.addr[3] = 1;
            }
            found = aj.family == next.family && aj.port == next.port && !memcmp(aj.addr, next.addr, 16);
        }
        FUZZ_CHECK(found, "rank %u was told an address no HELLO for rank %u gave", h.rank, nrank);
    }
    for (int i = 0; i < n; i++)
        if (c[i].fd >= 0) close(c[i].fd);

    /* The root must end at its timeout: its thread is then gone (it closes its descriptors before). */
    uint64_t limit = dion__now_ns() + 5000000000ull;
    while (threads() > baseline_threads) {
        FUZZ_CHECK(dion__now_ns() < limit, "the root thread still runs 5 s after its 20 ms timeout");
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    FUZZ_CHECK(fuzz_open_fds() == baseline, "descriptors left open (%d, %d before)", fuzz_open_fds(),
               baseline);
    return 0;
}
