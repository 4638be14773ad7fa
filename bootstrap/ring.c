/* The ranks' side of the bootstrap: join through the root, link into a ring, and run the host collectives
 * (allgather, bcast, barrier) over it. Each rank holds two connections whatever the job size; a failure
 * anywhere travels around the ring as an ABORT frame so that every rank returns an error naming the rank. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "../src/internal.h"

struct dion__boot {
    int rank, nranks;
    int prev_fd, next_fd;
    uint64_t timeout_ns;
    uint8_t secret[DION__SECRET_LEN];
    dion_status_t failed; /* sticky: once set, every collective returns it */
    int failed_rank;
    int reporter; /* the rank that first saw the failure */
    int abort_sent;
    int next_partial; /* a frame to the successor is half sent: an ABORT frame now would corrupt the stream */
    int abort_req;    /* set by another thread (dion_comm_abort): the collective in progress stops */
    int abort_req_rank;
    dion_status_t abort_req_why;
    char failed_msg[512];
};

static int dion__ring_prev(const dion__boot_t *b)
{
    return (b->rank + b->nranks - 1) % b->nranks;
}
static int dion__ring_next(const dion__boot_t *b)
{
    return (b->rank + 1) % b->nranks;
}
int dion__boot_prev(dion__boot_t *b)
{
    return dion__ring_prev(b);
}
int dion__boot_next(dion__boot_t *b)
{
    return dion__ring_next(b);
}

void dion__boot_fds(dion__boot_t *b, int *prev_fd, int *next_fd)
{
    *prev_fd = b->prev_fd;
    *next_fd = b->next_fd;
}

static void dion__boot_send_abort(dion__boot_t *b)
{
    if (b->abort_sent || b->next_fd < 0) return;
    b->abort_sent = 1;
    if (b->next_partial) {
        /* The successor sees the stream end and reports this rank, instead of reading our ABORT as data. */
        shutdown(b->next_fd, SHUT_WR);
        return;
    }
    uint8_t p[DION__ABORT_LEN];
    dion__put_u32(p, (uint32_t)b->failed_rank);
    dion__put_u32(p + 4, (uint32_t)b->failed);
    dion__put_u32(p + 8, (uint32_t)b->reporter);
    /* Short deadline: the successor may be the one that died. */
    (void)dion__send_frame(b->next_fd, DION__FRAME_ABORT, p, sizeof p, dion__now_ns() + 200000000ull);
}

/* Marks the ring failed, forwards the news, and returns the error with its sentence. */
static dion_status_t dion__boot_fail(dion__boot_t *b, dion_status_t st, int failed_rank, const char *fmt, ...)
    DION__PRINTF(4, 5);
static dion_status_t dion__boot_fail(dion__boot_t *b, dion_status_t st, int failed_rank, const char *fmt, ...)
{
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->failed_msg, sizeof b->failed_msg, fmt, ap);
        va_end(ap);
        b->failed = st;
        b->failed_rank = failed_rank;
        if (b->reporter < 0) b->reporter = b->rank;
        dion__boot_send_abort(b);
    }
    return dion__error(b->failed, "%s", b->failed_msg);
}

void dion__boot_request_abort(dion__boot_t *b, int failed_rank, dion_status_t why)
{
    if (!b) return;
    b->abort_req_rank = failed_rank;
    b->abort_req_why = why;
    __atomic_store_n(&b->abort_req, 1, __ATOMIC_RELEASE);
}

void dion__boot_abort(dion__boot_t *b, int failed_rank, dion_status_t why)
{
    if (!b) return;
    if (!b->failed) {
        snprintf(b->failed_msg, sizeof b->failed_msg, "rank %d failed or aborted the communicator (%s)",
                 failed_rank, dion_status_string(why));
        b->failed = why;
        b->failed_rank = failed_rank;
        b->reporter = b->rank;
    }
    dion__boot_send_abort(b);
}

static dion_status_t dion__boot_link(dion__boot_t *b, int lfd, const dion__addr_t *next, uint64_t deadline)
{
    char a[DION__ADDR_STRLEN];
    int next_rank = dion__ring_next(b), prev_rank = dion__ring_prev(b);
    dion_status_t st = dion__connect(next, deadline, &b->next_fd);
    if (st != DION_SUCCESS)
        return dion__error_wrap(st, "rank %d: connecting to rank %d at %s", b->rank, next_rank,
                                dion__addr_str(next, a));
    uint8_t p[DION__LINK_LEN] = {0};
    memcpy(p, b->secret, DION__SECRET_LEN);
    dion__put_u32(p + 16, (uint32_t)b->rank);
    st = dion__send_frame(b->next_fd, DION__FRAME_LINK, p, sizeof p, deadline);
    if (st != DION_SUCCESS)
        return dion__error_wrap(st, "rank %d: introducing itself to rank %d", b->rank, next_rank);
    /* Accept until the predecessor shows up; strays without the secret are dropped. */
    while (b->prev_fd < 0) {
        int fd;
        dion__addr_t from;
        st = dion__accept(lfd, deadline, &fd, &from);
        if (st != DION_SUCCESS)
            return dion__error(DION_ERR_BOOTSTRAP,
                               "rank %d: rank %d never connected to this rank's ring listener within "
                               "DION_BOOTSTRAP_TIMEOUT; it may have failed to start or to reach this host",
                               b->rank, prev_rank);
        uint32_t type, len;
        uint8_t q[DION__LINK_LEN];
        uint64_t d = dion__now_ns() + 5000000000ull;
        st = dion__recv_frame(fd, &type, q, sizeof q, &len, d < deadline ? d : deadline);
        if (st == DION_SUCCESS && type == DION__FRAME_LINK && len == DION__LINK_LEN &&
            dion__secret_equal(q, b->secret, DION__SECRET_LEN) && (int)dion__get_u32(q + 16) == prev_rank) {
            b->prev_fd = fd;
            break;
        }
        DION_LOG(DION_LOG_WARN, "rank %d: dropped a connection from %s on the ring listener: %s", b->rank,
                 dion__addr_str(&from, a),
                 st != DION_SUCCESS ? dion_last_error() : "not the expected rank or wrong secret");
        close(fd);
    }
    return DION_SUCCESS;
}

dion_status_t dion__boot_new(int rank, int nranks, const uint8_t secret[DION__SECRET_LEN],
                             uint64_t timeout_ns, int prev_fd, int next_fd, dion__boot_t **out)
{
    dion__boot_t *b = calloc(1, sizeof *b);
    if (!b) return dion__error(DION_ERR_NO_MEMORY, "out of memory in bootstrap");
    b->rank = rank;
    b->nranks = nranks;
    b->prev_fd = prev_fd;
    b->next_fd = next_fd;
    b->reporter = -1;
    memcpy(b->secret, secret, DION__SECRET_LEN);
    b->timeout_ns = timeout_ns;
    *out = b;
    return DION_SUCCESS;
}

dion_status_t dion__boot_init(const dion__uid_t *uid, int rank, int nranks, dion__boot_t **out)
{
    char a[DION__ADDR_STRLEN];
    uint64_t timeout_ns;
    dion__boot_t *b = NULL;
    dion_status_t st = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &timeout_ns);
    if (st != DION_SUCCESS) return st;
    if ((st = dion__boot_new(rank, nranks, uid->secret, timeout_ns, -1, -1, &b)) != DION_SUCCESS) return st;
    uint64_t deadline = dion__now_ns() + b->timeout_ns;
    int rfd = -1, lfd = -1;

    st = dion__connect(&uid->root, deadline, &rfd);
    if (st != DION_SUCCESS) {
        st = dion__error(
            DION_ERR_BOOTSTRAP,
            "rank %d: cannot reach the bootstrap root at %s within DION_BOOTSTRAP_TIMEOUT (%.1f s): %s. "
            "Check that the process that created the unique id (or rank 0) is running and that this "
            "host can reach that address; DION_BOOTSTRAP_IFNAME picks the root's interface",
            rank, dion__addr_str(&uid->root, a), (double)b->timeout_ns / 1e9, dion_last_error());
        goto fail;
    }
    /* Listen for the predecessor on the address this host used to reach the root. */
    dion__addr_t me;
    if ((st = dion__local_addr(rfd, &me)) != DION_SUCCESS) goto fail;
    me.port = 0;
    if ((st = dion__listen(&me, &lfd)) != DION_SUCCESS) {
        dion__error_wrap(st, "rank %d: ring listener", rank);
        goto fail;
    }
    uint8_t hello[DION__HELLO_LEN] = {0};
    memcpy(hello, uid->secret, DION__SECRET_LEN);
    dion__put_u32(hello + 16, (uint32_t)rank);
    dion__put_u32(hello + 20, (uint32_t)nranks);
    dion__addr_encode(hello + 24, &me);
    if ((st = dion__send_frame(rfd, DION__FRAME_HELLO, hello, sizeof hello, deadline)) != DION_SUCCESS) {
        dion__error_wrap(DION_ERR_BOOTSTRAP, "rank %d: sending HELLO to the root at %s", rank,
                         dion__addr_str(&uid->root, a));
        st = DION_ERR_BOOTSTRAP;
        goto fail;
    }
    uint8_t ring[DION__RING_LEN];
    uint32_t type, len;
    st = dion__recv_frame(rfd, &type, ring, sizeof ring, &len, deadline);
    if (st == DION_ERR_TIMEOUT) {
        st = dion__error(
            DION_ERR_BOOTSTRAP,
            "rank %d: the bootstrap root at %s did not hear from every one of the %d ranks within "
            "DION_BOOTSTRAP_TIMEOUT; some rank did not start or could not reach it",
            rank, dion__addr_str(&uid->root, a), nranks);
        goto fail;
    }
    if (st != DION_SUCCESS || type != DION__FRAME_RING || len != DION__RING_LEN) {
        st = dion__error(
            DION_ERR_BOOTSTRAP,
            "rank %d: the bootstrap root at %s refused this rank (%s). Causes: the unique id's secret "
            "does not match (an id from another job), another process already claimed rank %d, or "
            "the number of ranks (%d) differs from the other ranks'",
            rank, dion__addr_str(&uid->root, a), st != DION_SUCCESS ? dion_last_error() : "unexpected answer",
            rank, nranks);
        goto fail;
    }
    close(rfd);
    rfd = -1;
    dion__addr_t next;
    if (dion__addr_decode(ring, &next) != 0 || (int)dion__get_u32(ring + 24) != nranks) {
        st = dion__error(DION_ERR_BOOTSTRAP, "rank %d: malformed answer from the bootstrap root", rank);
        goto fail;
    }
    if (nranks > 1 && (st = dion__boot_link(b, lfd, &next, deadline)) != DION_SUCCESS) goto fail;
    close(lfd);
    *out = b;
    return DION_SUCCESS;
fail:
    if (rfd >= 0) close(rfd);
    if (lfd >= 0) close(lfd);
    dion__boot_destroy(b);
    return st;
}

void dion__boot_destroy(dion__boot_t *b)
{
    if (!b) return;
    if (b->prev_fd >= 0) close(b->prev_fd);
    if (b->next_fd >= 0) close(b->next_fd);
    free(b);
}

/* Sends slen bytes to the successor while receiving rlen bytes from the predecessor, as DATA frames of at
 * most DION__FRAME_MAX bytes. do_send / do_recv pick the directions (a zero-length transfer still sends a
 * frame, so that it can serve as a token). */
static dion_status_t dion__ring_xfer(dion__boot_t *b, int do_send, const void *sbuf, size_t slen, int do_recv,
                                     void *rbuf, size_t rlen, const char *what)
{
    if (b->failed) return dion__error(b->failed, "%s", b->failed_msg);
    uint64_t deadline = dion__now_ns() + b->timeout_ns;
    const char *sp = sbuf;
    char *rp = rbuf;
    /* sender: position in data, current chunk length, bytes of the current (header+chunk) sent */
    size_t s_pos = 0, s_chunk = 0, s_sent = 0;
    int s_done = !do_send, s_started = 0;
    uint8_t s_hdr[DION__FRAME_HDR];
    /* receiver: header bytes, payload remaining in this frame */
    size_t r_pos = 0, r_frame_left = 0;
    int r_done = !do_recv, r_in_payload = 0, r_got_any = 0;
    uint8_t r_hdr[DION__FRAME_HDR];
    size_t r_hdr_have = 0;
    uint32_t r_type = 0;
    uint8_t abort_buf[DION__ABORT_LEN];
    int prev = dion__ring_prev(b), next = dion__ring_next(b);

    while (!s_done || !r_done) {
        struct pollfd pf[2];
        int np = 0, si = -1, ri = -1;
        if (!s_done) {
            pf[np].fd = b->next_fd;
            pf[np].events = POLLOUT;
            si = np++;
        }
        if (!r_done) {
            pf[np].fd = b->prev_fd;
            pf[np].events = POLLIN;
            ri = np++;
        }
        if (__atomic_load_n(&b->abort_req, __ATOMIC_ACQUIRE))
            return dion__boot_fail(b, b->abort_req_why, b->abort_req_rank,
                                   "rank %d: %s: rank %d aborted the communicator (%s)", b->rank, what,
                                   b->abort_req_rank, dion_status_string(b->abort_req_why));
        uint64_t now = dion__now_ns();
        if (now >= deadline)
            return dion__boot_fail(
                b, DION_ERR_TIMEOUT, r_done ? next : prev,
                "rank %d: %s timed out after DION_BOOTSTRAP_TIMEOUT (%.1f s) waiting for rank %d", b->rank,
                what, (double)b->timeout_ns / 1e9, r_done ? next : prev);
        int ms = (int)((deadline - now) / 1000000) + 1;
        int rc = poll(pf, (nfds_t)np, ms > 100 ? 100 : ms); /* short: an abort request is seen within 0.1 s */
        if (rc < 0 && errno != EINTR) return dion__boot_fail(b, DION_ERR_INTERNAL, b->rank, "poll failed");
        if (rc <= 0) continue;

        if (si >= 0 && (pf[si].revents & (POLLOUT | POLLERR | POLLHUP))) {
            for (;;) {
                if (!s_started) {
                    s_chunk = slen - s_pos < DION__FRAME_MAX ? slen - s_pos : DION__FRAME_MAX;
                    dion__frame_hdr_encode(s_hdr, DION__FRAME_DATA, (uint32_t)s_chunk);
                    s_sent = 0;
                    s_started = 1;
                }
                const void *src;
                size_t left;
                if (s_sent < DION__FRAME_HDR) {
                    src = s_hdr + s_sent;
                    left = DION__FRAME_HDR - s_sent;
                } else {
                    src = sp + s_pos + (s_sent - DION__FRAME_HDR);
                    left = s_chunk - (s_sent - DION__FRAME_HDR);
                }
                ssize_t n = left ? send(b->next_fd, src, left, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
                if (n < 0) {
                    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                    return dion__boot_fail(b, DION_ERR_PEER_FAILED, next,
                                           "rank %d: %s: rank %d (next in the bootstrap ring) is gone: the "
                                           "connection broke (%s); it exited or crashed",
                                           b->rank, what, next, strerror(errno));
                }
                s_sent += (size_t)n;
                b->next_partial = s_sent != 0 && s_sent != DION__FRAME_HDR + s_chunk;
                if (s_sent == DION__FRAME_HDR + s_chunk) {
                    s_pos += s_chunk;
                    s_started = 0;
                    if (s_pos == slen) {
                        s_done = 1;
                        break;
                    }
                }
            }
        }
        if (ri >= 0 && (pf[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
            for (;;) {
                void *dst;
                size_t want;
                if (!r_in_payload) {
                    dst = r_hdr + r_hdr_have;
                    want = DION__FRAME_HDR - r_hdr_have;
                } else if (r_type == DION__FRAME_ABORT) {
                    dst = abort_buf + (DION__ABORT_LEN - r_frame_left);
                    want = r_frame_left;
                } else {
                    dst = rp + r_pos;
                    want = r_frame_left;
                }
                ssize_t n = want ? recv(b->prev_fd, dst, want, MSG_DONTWAIT) : 0;
                if (want && n == 0)
                    return dion__boot_fail(b, DION_ERR_PEER_FAILED, prev,
                                           "rank %d: %s: rank %d (previous in the bootstrap ring) closed its "
                                           "connection: it exited or crashed",
                                           b->rank, what, prev);
                if (n < 0) {
                    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                    return dion__boot_fail(
                        b, DION_ERR_PEER_FAILED, prev,
                        "rank %d: %s: connection from rank %d broke (%s); it exited or crashed", b->rank,
                        what, prev, strerror(errno));
                }
                if (!r_in_payload) {
                    r_hdr_have += (size_t)n;
                    if (r_hdr_have < DION__FRAME_HDR) continue;
                    uint32_t type, len;
                    if (dion__frame_hdr_decode(r_hdr, &type, &len) != 0 ||
                        (type == DION__FRAME_DATA && (len > rlen - r_pos || (len == 0 && rlen != r_pos))) ||
                        (type == DION__FRAME_ABORT && len != DION__ABORT_LEN) ||
                        (type != DION__FRAME_DATA && type != DION__FRAME_ABORT))
                        return dion__boot_fail(
                            b, DION_ERR_BOOTSTRAP, prev,
                            "rank %d: %s: protocol error on the link from rank %d (unexpected "
                            "frame); the ranks disagree on the sequence of collectives",
                            b->rank, what, prev);
                    r_type = type;
                    r_frame_left = len;
                    r_in_payload = 1;
                    r_hdr_have = 0;
                } else {
                    r_frame_left -= (size_t)n;
                    if (r_type == DION__FRAME_DATA) r_pos += (size_t)n;
                }
                if (r_in_payload && r_frame_left == 0) {
                    r_in_payload = 0;
                    if (r_type == DION__FRAME_ABORT) {
                        int who = (int)dion__get_u32(abort_buf);
                        dion_status_t why = (dion_status_t)dion__get_u32(abort_buf + 4);
                        int reporter = (int)dion__get_u32(abort_buf + 8);
                        if (why == DION_SUCCESS || why > DION_ERR_INTERNAL) why = DION_ERR_PEER_FAILED;
                        /* The originator does not pass its own news around twice. */
                        if (reporter == b->rank) b->abort_sent = 1;
                        if (reporter >= 0 && reporter < b->nranks) b->reporter = reporter;
                        return dion__boot_fail(b, why == DION_ERR_TIMEOUT ? DION_ERR_PEER_FAILED : why, who,
                                               "rank %d: %s: rank %d failed (%s, reported by rank %d)",
                                               b->rank, what, who, dion_status_string(why), reporter);
                    }
                    r_got_any = 1;
                    if (r_pos == rlen) {
                        r_done = 1;
                        break;
                    }
                }
            }
        }
    }
    (void)r_got_any;
    return DION_SUCCESS;
}

dion_status_t dion__boot_allgather(dion__boot_t *b, const void *mine, size_t bytes, void *all)
{
    char *out = all;
    int n = b->nranks;
    if (mine != out + (size_t)b->rank * bytes) memmove(out + (size_t)b->rank * bytes, mine, bytes);
    for (int step = 0; step < n - 1; step++) {
        int s = (b->rank - step + n) % n, r = (b->rank - step - 1 + n) % n;
        dion_status_t st = dion__ring_xfer(b, 1, out + (size_t)s * bytes, bytes, 1, out + (size_t)r * bytes,
                                           bytes, "allgather");
        if (st != DION_SUCCESS) return st;
    }
    return DION_SUCCESS;
}

dion_status_t dion__boot_bcast(dion__boot_t *b, void *buf, size_t bytes, int root)
{
    if (b->nranks == 1) return DION_SUCCESS;
    int next = dion__ring_next(b);
    if (b->rank == root) return dion__ring_xfer(b, 1, buf, bytes, 0, NULL, 0, "bcast");
    dion_status_t st = dion__ring_xfer(b, 0, NULL, 0, 1, buf, bytes, "bcast");
    if (st == DION_SUCCESS && next != root) st = dion__ring_xfer(b, 1, buf, bytes, 0, NULL, 0, "bcast");
    return st;
}

dion_status_t dion__boot_barrier(dion__boot_t *b)
{
    /* An allgather is a barrier: a rank holds every block only after every rank has entered. Each step moves
     * one empty frame each way. */
    int n = b->nranks;
    for (int step = 0; step < n - 1; step++) {
        dion_status_t st = dion__ring_xfer(b, 1, NULL, 0, 1, NULL, 0, "barrier");
        if (st != DION_SUCCESS) return st;
    }
    return DION_SUCCESS;
}
