/* Fuzzes bootstrap frames, the bytes other processes send to a rank and to the root:
 *   mode 0  a byte stream through dion__recv_frame (socket pair), with a fuzzed payload capacity;
 *   mode 1  one HELLO frame through dion__hello_parse (the root's check), with or without the right secret;
 *   mode 2  a byte stream from the "previous rank" into a real ring collective (allgather, bcast, barrier) of
 * a ring member built over socket pairs. A reference model of the DATA/ABORT framing predicts whether the
 * collective succeeds and what it must receive and forward; the sent stream must stay well formed. The first
 * input byte picks the mode. */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
/* The ring's own source, for its private struct: a member over socket pairs needs no root. The static
 * library's ring.o is then not linked (every symbol it defines is defined here). */
#include "bootstrap/ring.c"

static const uint8_t secret[DION__SECRET_LEN] = {0x5e, 0xc7, 0x3e, 0x70, 1, 2,  3,  4,
                                                 5,    6,    7,    8,    9, 10, 11, 12};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_log_everything();
    return 0;
}

/* A connected stream pair whose [1] end got the bytes and was shut for writing: reads end in EOF. */
static int feed_pair(int sv[2], const uint8_t *p, size_t n)
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(sv[1], p + off, n - off);
        FUZZ_CHECK(w > 0, "socket pair write failed (%s); input too large for its buffer", strerror(errno));
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);
    return 0;
}

static void mode_stream(fuzz_in_t *in)
{
    uint32_t cap = fuzz_u32(in) % 8192;
    int sv[2];
    if (feed_pair(sv, in->p + in->at, fuzz_left(in)) != 0) return;
    uint8_t *buf = malloc(cap ? cap : 1);
    size_t consumed = 0;
    for (;;) {
        uint32_t type = 0, len = 0;
        dion_status_t st = dion__recv_frame(sv[0], &type, buf, cap, &len, dion__now_ns() + 2000000000ull);
        if (st != DION_SUCCESS) {
            FUZZ_CHECK(st == DION_ERR_BOOTSTRAP || st == DION_ERR_PEER_FAILED, "status %d", (int)st);
            FUZZ_CHECK(dion_last_error()[0] != 0, "failure without a sentence");
            break;
        }
        FUZZ_CHECK(type >= DION__FRAME_HELLO && type <= DION__FRAME_TYPE_MAX, "type %u accepted", type);
        FUZZ_CHECK(len <= cap && len <= DION__FRAME_MAX, "len %u accepted with cap %u", len, cap);
        FUZZ_CHECK(memcmp(buf, in->p + in->at + consumed + DION__FRAME_HDR, len) == 0, "payload differs");
        consumed += DION__FRAME_HDR + len;
    }
    free(buf);
    close(sv[0]);
    close(sv[1]);
}

static void mode_hello(fuzz_in_t *in)
{
    uint8_t payload[DION__HELLO_LEN + 8] = {0};
    uint32_t len = fuzz_u8(in) & 1 ? fuzz_u8(in) % sizeof payload : DION__HELLO_LEN;
    size_t n = fuzz_left(in) < sizeof payload ? fuzz_left(in) : sizeof payload;
    memcpy(payload, in->p + in->at, n);
    dion__hello_t h;
    if (dion__hello_parse(payload, len, &h) == DION_SUCCESS) {
        FUZZ_CHECK(len == DION__HELLO_LEN, "a HELLO of %u bytes accepted", len);
        FUZZ_CHECK(h.nranks >= 1 && h.nranks <= DION__MAX_RANKS && h.rank < h.nranks, "rank %u of %u", h.rank,
                   h.nranks);
        FUZZ_CHECK((h.addr.family == 4 || h.addr.family == 6) && h.addr.port != 0, "address accepted");
        char a[DION__ADDR_STRLEN];
        dion__addr_str(&h.addr, a);
    } else {
        FUZZ_CHECK(dion_last_error()[0] != 0, "rejection without a sentence");
    }
}

/* ---- mode 2: the ring collectives ---- */

/* The reference framing: receives rlen bytes from s[*pos..n) into out; 0 when the library must succeed. */
static int model_recv(const uint8_t *s, size_t n, size_t *pos, uint8_t *out, size_t rlen)
{
    size_t got = 0;
    for (;;) {
        if (n - *pos < DION__FRAME_HDR) return -1;
        uint32_t type, len;
        if (dion__get_u32(s + *pos) != DION__FRAME_MAGIC) return -1;
        type = dion__get_u32(s + *pos + 4);
        len = dion__get_u32(s + *pos + 8);
        if (len > DION__FRAME_MAX) return -1;
        if (type != DION__FRAME_DATA) return -1; /* ABORT, or a frame that has no place here */
        if (len > rlen - got || (len == 0 && rlen != got)) return -1;
        *pos += DION__FRAME_HDR;
        if (n - *pos < len) return -1;
        memcpy(out + got, s + *pos, len);
        *pos += len;
        got += len;
        if (got == rlen) return 0;
    }
}

/* Checks what the member sent to its successor: whole frames, DATA carrying exactly `expect` (when the
 * collective succeeded), at most one ABORT, last. */
static void check_sent(int fd, const uint8_t *expect, size_t expect_len, int ok, int rank)
{
    static uint8_t out[1 << 16];
    size_t n = 0;
    for (;;) {
        ssize_t r = recv(fd, out + n, sizeof out - n, MSG_DONTWAIT);
        if (r <= 0) break;
        n += (size_t)r;
    }
    size_t pos = 0, data = 0;
    while (pos < n) {
        uint32_t type, len;
        FUZZ_CHECK(n - pos >= DION__FRAME_HDR, "a partial frame header was sent");
        FUZZ_CHECK(dion__frame_hdr_decode(out + pos, &type, &len) == 0, "a malformed header was sent");
        FUZZ_CHECK(n - pos - DION__FRAME_HDR >= len, "a partial frame was sent");
        const uint8_t *p = out + pos + DION__FRAME_HDR;
        pos += DION__FRAME_HDR + len;
        if (type == DION__FRAME_ABORT) {
            FUZZ_CHECK(!ok && len == DION__ABORT_LEN && pos == n, "ABORT sent after success or not last");
            FUZZ_CHECK((int)dion__get_u32(p + 8) >= 0, "ABORT without a reporter");
            continue;
        }
        FUZZ_CHECK(type == DION__FRAME_DATA, "frame type %u sent", type);
        if (ok) FUZZ_CHECK(data + len <= expect_len && memcmp(p, expect + data, len) == 0, "wrong data sent");
        data += len;
    }
    if (ok) FUZZ_CHECK(data == expect_len, "sent %zu data bytes, expected %zu", data, expect_len);
    (void)rank;
}

static void mode_ring(fuzz_in_t *in)
{
    int n = 2 + fuzz_u8(in) % 4;
    int rank = fuzz_u8(in) % n;
    int op = fuzz_u8(in) % 3, root = fuzz_u8(in) % n;
    size_t bytes = fuzz_u8(in) % 48;
    uint8_t flags = fuzz_u8(in);
    const uint8_t *s = in->p + in->at;
    size_t slen = fuzz_left(in);

    int prev[2], next[2];
    if (feed_pair(prev, s, slen) != 0) return;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, next) != 0) {
        close(prev[0]);
        close(prev[1]);
        return;
    }
    dion__boot_t *b = calloc(1, sizeof *b); /* as dion__boot_init leaves it once linked */
    FUZZ_CHECK(b != NULL, "out of memory");
    b->rank = rank;
    b->nranks = n;
    b->prev_fd = prev[0];
    b->next_fd = next[0];
    b->reporter = -1;
    b->timeout_ns = 2000000000ull;
    memcpy(b->secret, secret, sizeof secret);
    if (flags & 1) dion__boot_request_abort(b, fuzz_u8(in) % n, DION_ERR_ABORTED);

    uint8_t all[6 * 48], want[6 * 48], expect_sent[6 * 48];
    size_t sent_len = 0, pos = 0;
    memset(all, 0xee, sizeof all);
    for (size_t i = 0; i < bytes; i++) all[rank * bytes + i] = (uint8_t)(rank * 31 + i);
    memcpy(want, all, sizeof all);
    int model_ok = !(flags & 1);
    dion_status_t st;
    if (op == 0) {
        for (int step = 0; step < n - 1 && model_ok; step++) {
            int sb = (rank - step + n) % n, rb = (rank - step - 1 + n) % n;
            memcpy(expect_sent + sent_len, want + sb * bytes, bytes);
            sent_len += bytes;
            model_ok = model_recv(s, slen, &pos, want + rb * bytes, bytes) == 0;
        }
        st = dion__boot_allgather(b, all + rank * bytes, bytes, all);
    } else if (op == 1) {
        if (rank == root) {
            memcpy(expect_sent, all, bytes);
            sent_len = bytes;
        } else {
            model_ok = model_ok && model_recv(s, slen, &pos, want, bytes) == 0;
            if ((rank + 1) % n != root) {
                memcpy(expect_sent, want, bytes);
                sent_len = bytes;
            }
        }
        st = dion__boot_bcast(b, all, bytes, root);
    } else {
        for (int step = 0; step < n - 1 && model_ok; step++)
            model_ok = model_recv(s, slen, &pos, want, 0) == 0;
        st = dion__boot_barrier(b);
    }
    FUZZ_CHECK((st == DION_SUCCESS) == model_ok, "op %d rank %d of %d: status %s, model says %s (%s)", op,
               rank, n, dion_status_string(st), model_ok ? "success" : "failure", dion_last_error());
    if (st == DION_SUCCESS) {
        FUZZ_CHECK(memcmp(all, want, sizeof all) == 0, "op %d received the wrong bytes", op);
    } else {
        FUZZ_CHECK(dion_last_error()[0] != 0, "failure without a sentence");
        /* Failure is sticky: the next collective fails at once. */
        FUZZ_CHECK(dion__boot_barrier(b) != DION_SUCCESS || n == 1, "a collective succeeded after a failure");
    }
    check_sent(next[1], expect_sent, sent_len, st == DION_SUCCESS, rank);
    dion__boot_destroy(b); /* closes prev[0] and next[0] */
    close(prev[1]);
    close(next[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384) return -1;
    fuzz_in_t in = {data, size, 1};
    int fds = fuzz_open_fds();
    switch (data[0] % 3) {
    case 0:
        mode_stream(&in);
        break;
    case 1:
        mode_hello(&in);
        break;
    default:
        mode_ring(&in);
        break;
    }
    FUZZ_CHECK(fuzz_open_fds() == fds, "descriptors leaked");
    return 0;
}
