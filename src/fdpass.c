/* Passing file descriptors (memfd host windows, cuMem VMM exports) between the ranks of one node, over Unix
 * datagram sockets in the abstract namespace, named after the job and the rank. */
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
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "dion-%016llx-%d", (unsigned long long)c->job,
                     rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static dion_status_t dion__ux_open(dion_comm_t c)
{
    if (c->ux_fd >= 0) return DION_SUCCESS;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return dion__error(DION_ERR_INTERNAL, "cannot create a Unix socket: %s", strerror(errno));
    struct sockaddr_un sa;
    socklen_t len = dion__ux_name(c, c->rank, &sa);
    if (bind(fd, (struct sockaddr *)&sa, len) != 0) {
        int e = errno;
        close(fd);
        return dion__error(DION_ERR_INTERNAL, "cannot bind the Unix socket for passing memory handles: %s",
                           strerror(e));
    }
    c->ux_fd = fd;
    /* Every local rank must have bound before anyone sends. */
    return dion__boot_barrier(c->boot);
}

dion_status_t dion__fd_exchange(dion_comm_t c, uint32_t tag, int my_fd, int *fds)
{
    for (int r = 0; r < c->nranks; r++) fds[r] = -1;
    if (c->local_size < 2) return DION_SUCCESS;
    dion_status_t st = dion__ux_open(c);
    if (st != DION_SUCCESS) return st;
    uint64_t timeout;
    if ((st = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &timeout)) != DION_SUCCESS) return st;
    uint64_t deadline = dion__now_ns() + timeout;

    int to_send = c->local_size - 1, to_recv = c->local_size - 1;
    int next_peer = 0;
    while (to_send > 0 || to_recv > 0) {
        /* Send to local peers in rank order; a full receive queue is retried after draining ours. */
        while (to_send > 0) {
            while (next_peer < c->nranks && (next_peer == c->rank || !dion__comm_is_local(c, next_peer)))
                next_peer++;
            struct sockaddr_un sa;
            socklen_t salen = dion__ux_name(c, next_peer, &sa);
            uint32_t payload[3] = {tag, (uint32_t)c->rank, my_fd >= 0};
            struct iovec iov = {payload, sizeof payload};
            union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
            } ctl;
            struct msghdr m;
            memset(&m, 0, sizeof m);
            m.msg_name = &sa;
            m.msg_namelen = salen;
            m.msg_iov = &iov;
            m.msg_iovlen = 1;
            if (my_fd >= 0) {
                memset(&ctl, 0, sizeof ctl);
                m.msg_control = ctl.buf;
                m.msg_controllen = sizeof ctl.buf;
                struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &my_fd, sizeof(int));
            }
            if (sendmsg(c->ux_fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                return dion__error(
                    DION_ERR_PEER_FAILED,
                    "passing a memory handle to rank %d failed (%s); that rank may have exited", next_peer,
                    strerror(errno));
            }
            next_peer++;
            to_send--;
        }
        while (to_recv > 0) {
            uint32_t payload[3];
            struct iovec iov = {payload, sizeof payload};
            union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
            } ctl;
            struct msghdr m;
            memset(&m, 0, sizeof m);
            m.msg_iov = &iov;
            m.msg_iovlen = 1;
            m.msg_control = ctl.buf;
            m.msg_controllen = sizeof ctl.buf;
            ssize_t n = recvmsg(c->ux_fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                return dion__error(DION_ERR_INTERNAL, "receiving a memory handle failed: %s",
                                   strerror(errno));
            }
            int fd = -1;
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
            int from = n == (ssize_t)sizeof payload ? (int)payload[1] : -1;
            if (n != (ssize_t)sizeof payload || payload[0] != tag || from < 0 || from >= c->nranks ||
                !dion__comm_is_local(c, from) || from == c->rank || fds[from] >= 0 ||
                (payload[2] != 0) != (fd >= 0)) {
                if (fd >= 0) close(fd);
                return dion__error(DION_ERR_INTERNAL,
                                   "unexpected message on the memory-handle socket (tag %u from %d)",
                                   n >= 4 ? payload[0] : 0, from);
            }
            fds[from] = fd;
            to_recv--;
        }
        if (to_send == 0 && to_recv == 0) break;
        if (dion__now_ns() >= deadline) {
            for (int r = 0; r < c->nranks; r++)
                if (fds[r] >= 0) close(fds[r]);
            return dion__error(DION_ERR_TIMEOUT,
                               "passing memory handles between the ranks of this node did not finish within "
                               "DION_BOOTSTRAP_TIMEOUT (%d still to send, %d to receive)",
                               to_send, to_recv);
        }
        struct pollfd pf = {c->ux_fd, (short)(POLLIN | (to_send ? POLLOUT : 0)), 0};
        poll(&pf, 1, 10);
    }
    /* Keeps exchanges from overlapping: a fast rank cannot start the next one while we still receive. */
    return dion__boot_barrier(c->boot);
}
