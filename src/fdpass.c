/* Passing file descriptors (memfd host windows, cuMem VMM exports) between the ranks of one node, over Unix
 * datagram sockets in the abstract namespace, named after the communicator and the rank. A descriptor is
 * accepted only from a process of this user whose pid is the sending rank's. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "comm.h"

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
    uint32_t payload[3] = {tag, (uint32_t)c->rank, my_fd >= 0};
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

/* Receives one descriptor message. DION_ERR_TIMEOUT: nothing there yet. */
dion_status_t dion__ux_recv(dion_comm_t c, uint32_t tag, int *fds)
{
    uint32_t payload[3];
    struct iovec iov = {payload, sizeof payload};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
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
    int fd = -1, have_cred = 0;
    struct ucred cred;
    memset(&cred, 0, sizeof cred);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET) continue;
        if (cm->cmsg_type == SCM_RIGHTS) {
            /* Keep the first descriptor and close the rest: a rank sends one, and an extra one would leak. */
            size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t k = 0; k < count; k++) {
                int x;
                memcpy(&x, CMSG_DATA(cm) + k * sizeof(int), sizeof x);
                if (fd < 0)
                    fd = x;
                else
                    close(x);
            }
        }
        if (cm->cmsg_type == SCM_CREDENTIALS) {
            memcpy(&cred, CMSG_DATA(cm), sizeof cred);
            have_cred = 1;
        }
    }
    int from = n == (ssize_t)sizeof payload ? (int)payload[1] : -1;
    const char *why = NULL;
    if (n != (ssize_t)sizeof payload || from < 0 || from >= c->nranks || from == c->rank ||
        !dion__comm_is_local(c, from))
        why = "malformed";
    else if (!have_cred || cred.uid != getuid() || (cred.pid != 0 && cred.pid != c->info[from].pid))
        why = "not from the process of the rank it names"; /* pid 0: the sender is in another pid namespace */
    else if (payload[0] != tag || fds[from] >= 0 || (payload[2] != 0) != (fd >= 0))
        why = "out of sequence";
    if (why) {
        if (fd >= 0) close(fd);
        return dion__error(DION_ERR_INTERNAL,
                           "a message on the memory-handle socket was %s (rank %d, tag %u)", why, from,
                           n >= 4 ? payload[0] : 0);
    }
    fds[from] = fd;
    return DION_SUCCESS;
}

/* This rank's half of one exchange: send to every other local rank, receive from each. */
static dion_status_t dion__fd_swap(dion_comm_t c, uint32_t tag, int my_fd, int *fds)
{
    uint64_t timeout;
    dion_status_t st = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &timeout);
    if (st != DION_SUCCESS) return st;
    uint64_t deadline = dion__now_ns() + timeout;
    int to_send = c->local_size - 1, to_recv = c->local_size - 1, next_peer = 0;
    while (to_send > 0 || to_recv > 0) {
        /* Send in rank order; a full receive queue at the peer is retried after draining our own. */
        while (to_send > 0) {
            while (next_peer < c->nranks && (next_peer == c->rank || !dion__comm_is_local(c, next_peer)))
                next_peer++;
            st = dion__ux_send(c, next_peer, tag, my_fd);
            if (st == DION_ERR_TIMEOUT) break;
            if (st != DION_SUCCESS) return st;
            next_peer++;
            to_send--;
        }
        while (to_recv > 0) {
            st = dion__ux_recv(c, tag, fds);
            if (st == DION_ERR_TIMEOUT) break;
            if (st != DION_SUCCESS) return st;
            to_recv--;
        }
        if (to_send == 0 && to_recv == 0) break;
        if (dion__now_ns() >= deadline)
            return dion__error(DION_ERR_TIMEOUT,
                               "passing memory handles between the ranks of this node did not finish within "
                               "DION_BOOTSTRAP_TIMEOUT (%d still to send, %d to receive)",
                               to_send, to_recv);
        struct pollfd pf = {c->ux_fd, (short)(POLLIN | (to_send ? POLLOUT : 0)), 0};
        poll(&pf, 1, 10);
    }
    return DION_SUCCESS;
}

dion_status_t dion__fd_exchange(dion_comm_t c, uint32_t tag, int my_fd, int *fds)
{
    for (int r = 0; r < c->nranks; r++) fds[r] = -1;
    /* Collective on every rank, whatever the size of its node, so that all ranks run the same sequence of
     * bootstrap collectives: binding on first use (everyone bound before anyone sends), then the swap, then
     * an agreement that tells every rank whether every rank's swap worked. */
    dion_status_t st = DION_SUCCESS;
    if (!c->ux_ready) {
        if (c->local_size >= 2) st = dion__ux_bind(c);
        st = dion__comm_agree(c, st, "opening the memory-handle socket");
        if (st != DION_SUCCESS) return st;
        c->ux_ready = 1;
    }
    if (c->local_size >= 2) st = dion__fd_swap(c, tag, my_fd, fds);
    st = dion__comm_agree(c, st, "passing memory handles between the ranks of a node");
    if (st != DION_SUCCESS)
        for (int r = 0; r < c->nranks; r++)
            if (fds[r] >= 0) {
                close(fds[r]);
                fds[r] = -1;
            }
    return st;
}
