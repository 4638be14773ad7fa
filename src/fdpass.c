/* Passing file descriptors (memfd host windows, cuMem VMM exports) between the ranks of one node, over Unix
 * datagram sockets in the abstract namespace, named after the communicator and the rank.
 *
 * Anyone on the node can list those names and send to them, so no datagram is trusted for arriving: each
 * message names its sender, receiver, exchange round and tag and carries a SipHash-2-4 tag keyed by the
 * sender's per-communicator key, which the ranks swapped over the (authenticated) bootstrap ring. The
 * kernel's credentials must show this user and exactly the sending rank's pid (pid 0, a sender in another
 * pid namespace, cannot be checked and is refused). Each round accepts one message per local rank. Anything
 * else is dropped with every descriptor it carried closed, and the exchange goes on: a stranger can delay
 * it (by filling the queue) but not fail it early or substitute memory. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "comm.h"

#define DION__FDMSG_MAGIC   0x31444644u /* "DFD1" */
#define DION__FDMSG_MAX_FDS 8           /* descriptors one datagram may bring in; the rest the kernel drops */
#define DION__FD_WARN_LIMIT 8           /* dropped datagrams logged at WARN per communicator; then DEBUG */

struct dion__fdpass {
    uint64_t round;                    /* exchanges so far; every rank of the comm counts the same */
    uint8_t (*keys)[DION__SECRET_LEN]; /* [nranks]: each rank's key for its messages */
    unsigned long dropped;
};

dion_status_t dion__fdmsg_parse(const void *buf, size_t len, dion__fdmsg_t *m)
{
    const uint8_t *p = buf;
    if (len != DION__FDMSG_LEN)
        return dion__error_set(DION_ERR_INVALID_ARG, "memory-handle message of %zu bytes; expected %u", len,
                               DION__FDMSG_LEN);
    if (dion__get_u32(p) != DION__FDMSG_MAGIC || dion__get_u32(p + 28) != 0)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "memory-handle message with a bad magic or reserved field");
    m->from = dion__get_u32(p + 4);
    m->to = dion__get_u32(p + 8);
    m->tag = dion__get_u32(p + 12);
    m->round = dion__get_u64(p + 16);
    m->nfds = dion__get_u32(p + 24);
    memcpy(m->mac, p + 32, sizeof m->mac);
    if (m->nfds > 1)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "memory-handle message announcing %u descriptors; at most 1", m->nfds);
    return DION_SUCCESS;
}

void dion__fdmsg_encode(const dion__fdmsg_t *m, const uint8_t key[DION__SECRET_LEN],
                        uint8_t out[DION__FDMSG_LEN])
{
    dion__put_u32(out, DION__FDMSG_MAGIC);
    dion__put_u32(out + 4, m->from);
    dion__put_u32(out + 8, m->to);
    dion__put_u32(out + 12, m->tag);
    dion__put_u64(out + 16, m->round);
    dion__put_u32(out + 24, m->nfds);
    dion__put_u32(out + 28, 0);
    dion__put_u64(out + 32, dion__siphash24(key, out, 32));
}

static socklen_t dion__ux_name(dion_comm_t c, int rank, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* Abstract namespace: the leading NUL keeps it off the filesystem and it vanishes with the socket. */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "dion-%016llx-%d",
                     (unsigned long long)c->nonce, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static dion_status_t dion__ux_bind(dion_comm_t c)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return dion__error(DION_ERR_INTERNAL, "cannot create a Unix socket: %s", strerror(errno));
    int one = 1;
    struct sockaddr_un sa;
    socklen_t len = dion__ux_name(c, c->rank, &sa);
    /* The kernel then attaches the sender's credentials to every datagram. */
    if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, len) != 0) {
        int e = errno;
        close(fd);
        return dion__error(DION_ERR_INTERNAL, "cannot bind the Unix socket for passing memory handles: %s",
                           strerror(e));
    }
    c->ux_fd = fd;
    return DION_SUCCESS;
}

static dion_status_t dion__ux_send(dion_comm_t c, int peer, uint32_t tag, int my_fd)
{
    struct sockaddr_un sa;
    socklen_t salen = dion__ux_name(c, peer, &sa);
    dion__fdmsg_t msg = {.from = (uint32_t)c->rank,
                         .to = (uint32_t)peer,
                         .tag = tag,
                         .round = c->fdp->round,
                         .nfds = my_fd >= 0};
    uint8_t payload[DION__FDMSG_LEN];
    dion__fdmsg_encode(&msg, c->fdp->keys[c->rank], payload);
    struct iovec iov = {payload, sizeof payload};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr m;
    memset(&m, 0, sizeof m);
    memset(&ctl, 0, sizeof ctl);
    m.msg_name = &sa;
    m.msg_namelen = salen;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (my_fd >= 0) {
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &my_fd, sizeof(int));
    }
    if (sendmsg(c->ux_fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) return DION_SUCCESS;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return DION_ERR_TIMEOUT; /* try again */
    return dion__error(DION_ERR_PEER_FAILED,
                       "passing a memory handle to rank %d failed (%s); that rank may have exited", peer,
                       strerror(errno));
}

/* Receives one datagram. DION_SUCCESS: a valid message of this round from a rank not yet heard (fds[from]
 * set, got[from] marked). DION_ERR_TIMEOUT: nothing there. DION_ERR_INVALID_ARG: a stray, dropped with all
 * its descriptors; *why says what was wrong. Other codes: the socket itself failed. */
static dion_status_t dion__ux_recv(dion_comm_t c, uint32_t tag, int *fds, uint8_t *got, const char **why)
{
    uint8_t payload[DION__FDMSG_LEN + 1]; /* one more: a longer datagram shows as such, not as truncated */
    struct iovec iov = {payload, sizeof payload};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * DION__FDMSG_MAX_FDS) + CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof ctl.buf;
    ssize_t n = recvmsg(c->ux_fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return DION_ERR_TIMEOUT;
        return dion__error(DION_ERR_INTERNAL, "receiving a memory handle failed: %s", strerror(errno));
    }
    int rfds[DION__FDMSG_MAX_FDS], nrfds = 0, have_cred = 0;
    struct ucred cred;
    memset(&cred, 0, sizeof cred);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET) continue;
        if (cm->cmsg_type == SCM_RIGHTS) {
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                if (nrfds < DION__FDMSG_MAX_FDS)
                    rfds[nrfds++] = fd;
                else
                    close(fd);
            }
        }
        if (cm->cmsg_type == SCM_CREDENTIALS && cm->cmsg_len >= CMSG_LEN(sizeof cred)) {
            memcpy(&cred, CMSG_DATA(cm), sizeof cred);
            have_cred = 1;
        }
    }
    dion__fdmsg_t msg;
    int from = -1;
    *why = NULL;
    if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
        *why = "truncated or carrying too many descriptors";
    else if (dion__fdmsg_parse(payload, (size_t)n, &msg) != DION_SUCCESS)
        *why = "malformed";
    else if (msg.from >= (uint32_t)c->nranks || (int)msg.from == c->rank || msg.to != (uint32_t)c->rank ||
             !dion__comm_is_local(c, (int)msg.from))
        *why = "naming ranks that are not a local peer and this rank";
    else if (!have_cred || cred.uid != getuid() || cred.pid == 0 || cred.pid != c->info[msg.from].pid)
        *why = cred.pid == 0 && have_cred
                   ? "from a process in another pid namespace, which cannot be told from a stranger"
                   : "not from the process of the rank it names";
    else if (dion__siphash24(c->fdp->keys[msg.from], payload, 32) != dion__get_u64(msg.mac))
        *why = "carrying a wrong token (not from a rank of this communicator)";
    else if (msg.round != c->fdp->round || msg.tag != tag)
        *why = "from another exchange round";
    else if (got[msg.from])
        *why = "a second message from the same rank in one round";
    else if ((int)msg.nfds != nrfds)
        *why = "carrying a different number of descriptors than it announces";
    else
        from = (int)msg.from;
    if (*why) {
        for (int i = 0; i < nrfds; i++) close(rfds[i]);
        return DION_ERR_INVALID_ARG;
    }
    fds[from] = nrfds ? rfds[0] : -1;
    got[from] = 1;
    return DION_SUCCESS;
}

/* This rank's half of one exchange: send to every other local rank, receive one message from each. */
static dion_status_t dion__fd_swap(dion_comm_t c, uint32_t tag, int my_fd, int *fds)
{
    uint64_t timeout;
    dion_status_t st = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &timeout);
    if (st != DION_SUCCESS) return st;
    uint8_t *got = calloc((size_t)c->nranks, 1);
    if (!got) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    uint64_t deadline = dion__deadline_after(timeout);
    int to_send = c->local_size - 1, to_recv = c->local_size - 1, next_peer = 0;
    unsigned long dropped = 0;
    const char *last_why = NULL;
    while (to_send > 0 || to_recv > 0) {
        /* Send in rank order; a full receive queue at the peer is retried after draining our own. */
        while (to_send > 0) {
            while (next_peer < c->nranks && (next_peer == c->rank || !dion__comm_is_local(c, next_peer)))
                next_peer++;
            st = dion__ux_send(c, next_peer, tag, my_fd);
            if (st == DION_ERR_TIMEOUT) break;
            if (st != DION_SUCCESS) goto out;
            next_peer++;
            to_send--;
        }
        while (to_recv > 0) {
            const char *why = NULL;
            st = dion__ux_recv(c, tag, fds, got, &why);
            if (st == DION_ERR_TIMEOUT) break;
            if (st == DION_ERR_INVALID_ARG) {
                dropped++;
                last_why = why;
                c->fdp->dropped++;
                DION_LOG(c->fdp->dropped <= DION__FD_WARN_LIMIT ? DION_LOG_WARN : DION_LOG_DEBUG,
                         "rank %d: dropped a datagram on the memory-handle socket: %s", c->rank, why);
                continue;
            }
            if (st != DION_SUCCESS) goto out;
            to_recv--;
        }
        if (to_send == 0 && to_recv == 0) break;
        if (dion__now_ns() >= deadline) {
            int missing = -1;
            for (int r = 0; r < c->nranks && missing < 0; r++)
                if (r != c->rank && dion__comm_is_local(c, r) && !got[r]) missing = r;
            st = dion__error(DION_ERR_TIMEOUT,
                             "passing memory handles between the ranks of this node did not finish within "
                             "DION_BOOTSTRAP_TIMEOUT (%d still to send, %d to receive%s%d; %lu stray "
                             "datagrams dropped%s%s)",
                             to_send, to_recv, missing >= 0 ? ", first missing: rank " : "", missing, dropped,
                             last_why ? ", the last one " : "", last_why ? last_why : "");
            goto out;
        }
        struct pollfd pf = {c->ux_fd, (short)(POLLIN | (to_send ? POLLOUT : 0)), 0};
        poll(&pf, 1, 10);
    }
    st = DION_SUCCESS;
out:
    free(got);
    return st;
}

dion_status_t dion__fd_exchange(dion_comm_t c, uint32_t tag, int my_fd, int *fds)
{
    for (int r = 0; r < c->nranks; r++) fds[r] = -1;
    /* Collective on every rank, whatever the size of its node, so that all ranks run the same sequence of
     * bootstrap collectives: on first use binding (everyone bound before anyone sends) and the swap of
     * message keys; then the swap, then an agreement that tells every rank whether every rank's swap worked.
     */
    dion_status_t st = DION_SUCCESS;
    if (!c->fdp) {
        struct dion__fdpass *p = calloc(1, sizeof *p);
        uint8_t mine[DION__SECRET_LEN];
        if (p) p->keys = calloc((size_t)c->nranks, sizeof *p->keys);
        if (!p || !p->keys) {
            if (p) free(p);
            return dion__error(DION_ERR_NO_MEMORY, "out of memory for %d memory-handle keys", c->nranks);
        }
        st = dion__random_bytes(mine, sizeof mine);
        if (st == DION_SUCCESS && c->local_size >= 2) st = dion__ux_bind(c);
        dion_status_t ag = dion__boot_allgather(c->boot, mine, sizeof mine, p->keys);
        if (ag == DION_SUCCESS) ag = dion__comm_agree(c, st, "opening the memory-handle socket");
        if (ag != DION_SUCCESS) {
            free(p->keys);
            free(p);
            return ag;
        }
        c->fdp = p;
    }
    if (c->local_size >= 2) st = dion__fd_swap(c, tag, my_fd, fds);
    c->fdp->round++;
    st = dion__comm_agree(c, st, "passing memory handles between the ranks of a node");
    if (st != DION_SUCCESS)
        for (int r = 0; r < c->nranks; r++)
            if (fds[r] >= 0) {
                close(fds[r]);
                fds[r] = -1;
            }
    return st;
}

void dion__fd_close(dion_comm_t c)
{
    if (c->ux_fd >= 0) close(c->ux_fd);
    c->ux_fd = -1;
    if (c->fdp) free(c->fdp->keys);
    free(c->fdp);
    c->fdp = NULL;
}
