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

/* The ring handshake: each rank connects to its successor's listener while serving its own listener, in one
 * poll loop, so that idle or slow strays never hold up the predecessor (each stray has its own deadline, as
 * at the root). Both sides prove the secret over both nonces: see bootstrap.h. */
#define DION__LINK_MAX_PENDING 64
#define DION__LINK_CONN_NS     5000000000ull /* a connection must complete its LINK within this */
#define DION__LINK_WARN_LIMIT  8

typedef struct {
    int fd;
    uint32_t have;
    uint64_t deadline;
    dion__addr_t from;
    uint8_t nonce[DION__NONCE_LEN];
    uint8_t buf[DION__FRAME_HDR + DION__LINK_LEN];
} dion__link_conn_t;

typedef struct {
    dion__boot_t *b;
    dion__link_conn_t conns[DION__LINK_MAX_PENDING];
    int nconns;
    unsigned long dropped;
} dion__link_t;

static void dion__link_drop(dion__link_t *l, int i, const char *why)
{
    char a[DION__ADDR_STRLEN];
    l->dropped++;
    DION_LOG(l->dropped <= DION__LINK_WARN_LIMIT ? DION_LOG_WARN : DION_LOG_DEBUG,
             "rank %d: dropped a connection from %s on the ring listener: %s", l->b->rank,
             dion__addr_str(&l->conns[i].from, a), why);
    close(l->conns[i].fd);
    l->conns[i] = l->conns[--l->nconns];
}

/* A complete LINK on pending connection i: 1 when it is the predecessor's (answered and kept), else 0. */
static int dion__link_serve(dion__link_t *l, int i, uint64_t deadline, const char **why)
{
    dion__boot_t *b = l->b;
    dion__link_conn_t *c = &l->conns[i];
    uint32_t type, len;
    const uint8_t *p = c->buf + DION__FRAME_HDR;
    if (dion__frame_hdr_decode(c->buf, &type, &len) != 0 || type != DION__FRAME_LINK ||
        len != DION__LINK_LEN) {
        *why = "not a LINK frame";
        return 0;
    }
    uint8_t f[2 * DION__NONCE_LEN + 4];
    memcpy(f, c->nonce, DION__NONCE_LEN);
    memcpy(f + DION__NONCE_LEN, p, DION__NONCE_LEN + 4);
    if (!dion__auth_check(b->secret, "dion link", f, DION__NONCE_LEN + DION__NONCE_LEN + 4, p + 20)) {
        *why = "wrong proof of the secret";
        return 0;
    }
    if ((int)dion__get_u32(p + 16) != dion__ring_prev(b)) {
        *why = "a rank of this job that is not this rank's predecessor";
        return 0;
    }
    /* This rank's proof: the connecting side's nonce, ours, and who we are. */
    memcpy(f, p, DION__NONCE_LEN);
    memcpy(f + DION__NONCE_LEN, c->nonce, DION__NONCE_LEN);
    dion__put_u32(f + 2 * DION__NONCE_LEN, (uint32_t)b->rank);
    uint8_t ok[DION__LINK_OK_LEN];
    dion__put_u64(ok, dion__auth_tag(b->secret, "dion link ok", f, sizeof f));
    if (dion__send_frame(c->fd, DION__FRAME_LINK_OK, ok, sizeof ok, deadline) != DION_SUCCESS) {
        *why = "connection lost while answering";
        return 0;
    }
    return 1;
}

static dion_status_t dion__boot_link(dion__boot_t *b, int lfd, const dion__addr_t *next, uint64_t deadline)
{
    char a[DION__ADDR_STRLEN];
    int next_rank = dion__ring_next(b), prev_rank = dion__ring_prev(b);
    dion_status_t st = dion__connect(next, deadline, &b->next_fd);
    if (st != DION_SUCCESS)
        return dion__error_wrap(st, "rank %d: connecting to rank %d at %s", b->rank, next_rank,
                                dion__addr_str(next, a));
    dion__link_t *l = calloc(1, sizeof *l);
    if (!l) return dion__error(DION_ERR_NO_MEMORY, "out of memory in bootstrap");
    l->b = b;
    /* Outgoing side: 0 reading the successor's CHALLENGE, 1 reading its LINK_OK, 2 done. */
    int out_state = 0;
    uint8_t out_buf[DION__FRAME_HDR + DION__CHALLENGE_LEN], my_nonce[DION__NONCE_LEN],
        their_nonce[DION__NONCE_LEN] = {0};
    uint32_t out_have = 0;
    if ((st = dion__random_bytes(my_nonce, sizeof my_nonce)) != DION_SUCCESS) goto out;
    struct pollfd pf[2 + DION__LINK_MAX_PENDING];
    while (out_state < 2 || b->prev_fd < 0) {
        uint64_t now = dion__now_ns();
        if (now >= deadline) {
            st =
                b->prev_fd < 0
                    ? dion__error(DION_ERR_BOOTSTRAP,
                                  "rank %d: rank %d never connected to this rank's ring listener within "
                                  "DION_BOOTSTRAP_TIMEOUT; it may have failed to start or to reach this host",
                                  b->rank, prev_rank)
                    : dion__error(DION_ERR_BOOTSTRAP,
                                  "rank %d: rank %d at %s did not complete the ring handshake within "
                                  "DION_BOOTSTRAP_TIMEOUT",
                                  b->rank, next_rank, dion__addr_str(next, a));
            goto out;
        }
        int np = 0, li = -1, oi = -1;
        if (b->prev_fd < 0 && l->nconns < DION__LINK_MAX_PENDING) {
            pf[np] = (struct pollfd){lfd, POLLIN, 0};
            li = np++;
        }
        if (out_state < 2) {
            pf[np] = (struct pollfd){b->next_fd, POLLIN, 0};
            oi = np++;
        }
        int ci0 = np;
        for (int i = 0; i < l->nconns; i++) pf[np++] = (struct pollfd){l->conns[i].fd, POLLIN, 0};
        if (poll(pf, (nfds_t)np, dion__slice_ms(deadline)) < 0 && errno != EINTR) {
            st = dion__error(DION_ERR_INTERNAL, "rank %d: poll failed in the ring handshake: %s", b->rank,
                             strerror(errno));
            goto out;
        }
        now = dion__now_ns();
        if (oi >= 0 && pf[oi].revents) {
            uint32_t want = DION__FRAME_HDR + (out_state == 0 ? DION__CHALLENGE_LEN : DION__LINK_OK_LEN);
            ssize_t n = recv(b->next_fd, out_buf + out_have, want - out_have, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                st = dion__error(DION_ERR_BOOTSTRAP,
                                 "rank %d: rank %d at %s closed the ring connection during the handshake; it "
                                 "failed, or it is not this job's rank (a different secret)",
                                 b->rank, next_rank, dion__addr_str(next, a));
                goto out;
            }
            if (n > 0) out_have += (uint32_t)n;
            if (out_have == want) {
                uint32_t type, len;
                int ok = dion__frame_hdr_decode(out_buf, &type, &len) == 0 &&
                         type == (out_state == 0 ? DION__FRAME_CHALLENGE : DION__FRAME_LINK_OK) &&
                         len == want - DION__FRAME_HDR;
                if (ok && out_state == 0) {
                    uint8_t q[DION__LINK_LEN], f[2 * DION__NONCE_LEN + 4];
                    memcpy(their_nonce, out_buf + DION__FRAME_HDR, DION__NONCE_LEN);
                    memcpy(q, my_nonce, DION__NONCE_LEN);
                    dion__put_u32(q + 16, (uint32_t)b->rank);
                    memcpy(f, their_nonce, DION__NONCE_LEN);
                    memcpy(f + DION__NONCE_LEN, q, DION__NONCE_LEN + 4);
                    dion__put_u64(q + 20, dion__auth_tag(b->secret, "dion link", f, sizeof f));
                    if ((st = dion__send_frame(b->next_fd, DION__FRAME_LINK, q, sizeof q, deadline)) !=
                        DION_SUCCESS) {
                        dion__error_wrap(st, "rank %d: introducing itself to rank %d", b->rank, next_rank);
                        goto out;
                    }
                    out_state = 1;
                    out_have = 0;
                } else if (ok) {
                    uint8_t f[2 * DION__NONCE_LEN + 4];
                    memcpy(f, my_nonce, DION__NONCE_LEN);
                    memcpy(f + DION__NONCE_LEN, their_nonce, DION__NONCE_LEN);
                    dion__put_u32(f + 2 * DION__NONCE_LEN, (uint32_t)next_rank);
                    ok = dion__auth_check(b->secret, "dion link ok", f, sizeof f, out_buf + DION__FRAME_HDR);
                    out_state = 2;
                }
                if (!ok) {
                    st = dion__error(DION_ERR_BOOTSTRAP,
                                     "rank %d: the process at %s (rank %d's ring address) did not prove it "
                                     "knows the job's secret; it is not this job's rank %d",
                                     b->rank, dion__addr_str(next, a), next_rank, next_rank);
                    goto out;
                }
            }
        }
        /* Pending connections, from the highest index down: dropping swaps in the last one. */
        for (int i = np - ci0 - 1; i >= 0 && b->prev_fd < 0; i--) {
            if (i >= l->nconns) continue;
            dion__link_conn_t *c = &l->conns[i];
            if (pf[ci0 + i].revents) {
                ssize_t n = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                    dion__link_drop(l, i, "closed before completing its LINK");
                    continue;
                }
                if (n > 0) c->have += (uint32_t)n;
                uint32_t type, len;
                if (c->have >= DION__FRAME_HDR && (dion__frame_hdr_decode(c->buf, &type, &len) != 0 ||
                                                   type != DION__FRAME_LINK || len != DION__LINK_LEN)) {
                    dion__link_drop(l, i, "not a LINK frame");
                    continue;
                }
                if (c->have == sizeof c->buf) {
                    const char *why = NULL;
                    if (dion__link_serve(l, i, deadline, &why)) {
                        b->prev_fd = c->fd;
                        l->conns[i] = l->conns[--l->nconns];
                    } else {
                        dion__link_drop(l, i, why);
                    }
                }
            } else if (now > c->deadline) {
                dion__link_drop(l, i, "sent no complete LINK in time");
            }
        }
        if (li >= 0 && (pf[li].revents & POLLIN) && b->prev_fd < 0) {
            while (l->nconns < DION__LINK_MAX_PENDING) {
                int fd;
                dion__addr_t from;
                if (dion__accept(lfd, now, &fd, &from) != DION_SUCCESS) break; /* deadline 'now': no wait */
                dion__link_conn_t *c = &l->conns[l->nconns];
                memset(c, 0, sizeof *c);
                c->fd = fd;
                c->from = from;
                c->deadline = now + DION__LINK_CONN_NS;
                l->nconns++;
                if (dion__random_bytes(c->nonce, DION__NONCE_LEN) != DION_SUCCESS ||
                    dion__send_frame(fd, DION__FRAME_CHALLENGE, c->nonce, DION__CHALLENGE_LEN,
                                     now + 100000000ull) != DION_SUCCESS)
                    dion__link_drop(l, l->nconns - 1, "could not send the challenge");
            }
        }
    }
    st = DION_SUCCESS;
out:
    for (int i = 0; i < l->nconns; i++) close(l->conns[i].fd);
    free(l);
    return st;
}

dion_status_t dion__boot_init(const dion__uid_t *uid, int rank, int nranks, dion__boot_t **out)
{
    char a[DION__ADDR_STRLEN];
    dion__boot_t *b = calloc(1, sizeof *b);
    if (!b) return dion__error(DION_ERR_NO_MEMORY, "out of memory in bootstrap");
    b->rank = rank;
    b->nranks = nranks;
    b->prev_fd = b->next_fd = -1;
    b->reporter = -1;
    memcpy(b->secret, uid->secret, DION__SECRET_LEN);
    dion_status_t st = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &b->timeout_ns);
    if (st != DION_SUCCESS) {
        free(b);
        return st;
    }
    uint64_t deadline = dion__deadline_after(b->timeout_ns);
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
    /* The root speaks first: a fresh challenge to prove the secret against. */
    uint8_t chal[DION__CHALLENGE_LEN];
    uint32_t type, len;
    st = dion__recv_frame(rfd, &type, chal, sizeof chal, &len, deadline);
    if (st != DION_SUCCESS || type != DION__FRAME_CHALLENGE || len != DION__CHALLENGE_LEN) {
        st = dion__error(DION_ERR_BOOTSTRAP,
                         "rank %d: the process at %s did not open the bootstrap handshake as a DION root "
                         "does (%s); check the root address",
                         rank, dion__addr_str(&uid->root, a),
                         st != DION_SUCCESS ? dion_last_error() : "unexpected frame");
        goto fail;
    }
    uint8_t hello[DION__HELLO_LEN] = {0}, f[DION__NONCE_LEN + 44];
    if ((st = dion__random_bytes(hello, DION__NONCE_LEN)) != DION_SUCCESS) goto fail;
    dion__put_u32(hello + 16, (uint32_t)rank);
    dion__put_u32(hello + 20, (uint32_t)nranks);
    dion__addr_encode(hello + 24, &me);
    memcpy(f, chal, DION__NONCE_LEN);
    memcpy(f + DION__NONCE_LEN, hello, 44);
    dion__put_u64(hello + 44, dion__auth_tag(uid->secret, "dion hello", f, sizeof f));
    if ((st = dion__send_frame(rfd, DION__FRAME_HELLO, hello, sizeof hello, deadline)) != DION_SUCCESS) {
        dion__error_wrap(DION_ERR_BOOTSTRAP, "rank %d: sending HELLO to the root at %s", rank,
                         dion__addr_str(&uid->root, a));
        st = DION_ERR_BOOTSTRAP;
        goto fail;
    }
    uint8_t ring[DION__RING_LEN];
    st = dion__recv_frame(rfd, &type, ring, sizeof ring, &len, deadline);
    if (st == DION_ERR_TIMEOUT) {
        st = dion__error(
            DION_ERR_BOOTSTRAP,
            "rank %d: the bootstrap root at %s did not hear from every one of the %d ranks within "
            "DION_BOOTSTRAP_TIMEOUT; some rank did not start or could not reach it",
            rank, dion__addr_str(&uid->root, a), nranks);
        goto fail;
    }
    if (st == DION_SUCCESS && type == DION__FRAME_REFUSE && len == DION__REFUSE_LEN) {
        uint32_t why = dion__get_u32(ring);
        if (why == DION__REFUSE_PROOF)
            st = dion__error(
                DION_ERR_BOOTSTRAP,
                "rank %d: the bootstrap root at %s belongs to another job: it did not accept this rank's "
                "proof of the secret. The ranks were given different secrets (different unique ids, "
                "DION_SECRET values or launcher job ids), e.g. two jobs with the same DION_ROOT or "
                "MASTER_ADDR/MASTER_PORT; give each job its own root port",
                rank, dion__addr_str(&uid->root, a));
        else
            st =
                dion__error(DION_ERR_BOOTSTRAP, "rank %d: the bootstrap root at %s refused this rank: %s",
                            rank, dion__addr_str(&uid->root, a),
                            why == DION__REFUSE_DUPLICATE ? "another process already claimed this rank"
                            : why == DION__REFUSE_NRANKS ? "the number of ranks differs from the other ranks'"
                                                         : "its HELLO was malformed");
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
    memcpy(f, hello, DION__NONCE_LEN);
    memcpy(f + DION__NONCE_LEN, ring, 28);
    if (!dion__auth_check(uid->secret, "dion ring", f, DION__NONCE_LEN + 28, ring + 28)) {
        st = dion__error(DION_ERR_BOOTSTRAP,
                         "rank %d: the process that answered at %s could not prove it knows the job's "
                         "secret; it is not this job's bootstrap root",
                         rank, dion__addr_str(&uid->root, a));
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
    uint64_t deadline = dion__deadline_after(b->timeout_ns);
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
        /* At most 100 ms: an abort request is seen within 0.1 s, whatever DION_BOOTSTRAP_TIMEOUT is. */
        int rc = poll(pf, (nfds_t)np, dion__slice_ms(deadline));
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
