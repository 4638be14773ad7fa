/* TCP helpers for the bootstrap. Every socket is non-blocking; every wait is bounded by a deadline. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "net.h"
#include "../src/internal.h"

uint64_t dion__deadline_after(uint64_t d_ns)
{
    uint64_t now = dion__now_ns();
    return d_ns > UINT64_MAX - now ? UINT64_MAX : now + d_ns;
}

int dion__slice_ms(uint64_t deadline_ns)
{
    uint64_t now = dion__now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > DION__POLL_SLICE_MS ? DION__POLL_SLICE_MS : (int)ms;
}

void dion__to_sockaddr(const dion__addr_t *a, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (a->family == 6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(a->port);
        memcpy(&s6->sin6_addr, a->addr, 16);
        *len = sizeof *s6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(a->port);
        memcpy(&s4->sin_addr, a->addr, 4);
        *len = sizeof *s4;
    }
}

static void dion__from_sockaddr(const struct sockaddr *sa, dion__addr_t *a)
{
    memset(a, 0, sizeof *a);
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        a->family = 6;
        a->port = ntohs(s6->sin6_port);
        memcpy(a->addr, &s6->sin6_addr, 16);
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        a->family = 4;
        a->port = ntohs(s4->sin_port);
        memcpy(a->addr, &s4->sin_addr, 4);
    }
}

const char *dion__addr_str(const dion__addr_t *a, char buf[DION__ADDR_STRLEN])
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (a->family == 6) {
        inet_ntop(AF_INET6, a->addr, host, sizeof host);
        snprintf(buf, DION__ADDR_STRLEN, "[%s]:%u", host, a->port);
    } else {
        inet_ntop(AF_INET, a->addr, host, sizeof host);
        snprintf(buf, DION__ADDR_STRLEN, "%s:%u", host, a->port);
    }
    return buf;
}

int dion__addr_is_any(const dion__addr_t *a)
{
    static const uint8_t zero[16];
    return memcmp(a->addr, zero, a->family == 6 ? 16 : 4) == 0;
}

dion_status_t dion__addr_parse(const char *text, dion__addr_t *out)
{
    char host[256];
    const char *port_s;
    if (!text || !*text) return dion__error_set(DION_ERR_INVALID_ARG, "empty address; expected host:port");
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host)
            return dion__error_set(DION_ERR_INVALID_ARG, "address '%s' is not [ipv6]:port", text);
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = 0;
        port_s = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || (size_t)(colon - text) >= sizeof host)
            return dion__error_set(DION_ERR_INVALID_ARG, "address '%s' is not host:port", text);
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = 0;
        port_s = colon + 1;
    }
    char *end = NULL;
    long port = strtol(port_s, &end, 10);
    if (!*port_s || *end || port < 0 || port > 65535)
        return dion__error_set(DION_ERR_INVALID_ARG, "address '%s': port '%s' is not a number in [0, 65535]",
                               text, port_s);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return dion__error_set(DION_ERR_INVALID_ARG, "address '%s': cannot resolve host '%s' (%s)", text,
                               host, gai_strerror(rc));
    /* Prefer IPv4: it is what the root listens on by default. */
    struct addrinfo *pick = res;
    for (struct addrinfo *r = res; r; r = r->ai_next)
        if (r->ai_family == AF_INET) {
            pick = r;
            break;
        }
    dion__from_sockaddr(pick->ai_addr, out);
    out->port = (uint16_t)port;
    freeaddrinfo(res);
    return DION_SUCCESS;
}

dion_status_t dion__addr_local(dion__addr_t *out)
{
    const char *ifname = dion__cfg_str("DION_BOOTSTRAP_IFNAME");
    struct ifaddrs *ifa = NULL;
    memset(out, 0, sizeof *out);
    if (getifaddrs(&ifa) != 0) ifa = NULL;
    int found = 0;
    for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
        if (ifname) {
            if (strcmp(i->ifa_name, ifname) != 0) continue;
            if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
        } else if (i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) {
            continue;
        }
        dion__from_sockaddr(i->ifa_addr, out);
        out->port = 0;
        found = 1;
    }
    if (ifa) freeifaddrs(ifa);
    if (!found && ifname)
        return dion__error(
            DION_ERR_BOOTSTRAP,
            "DION_BOOTSTRAP_IFNAME=%s names no interface that is up with an IP address; unset it "
            "or pick one that 'ip addr' lists",
            ifname);
    if (!found) {
        out->family = 4;
        out->addr[0] = 127;
        out->addr[3] = 1;
    }
    return DION_SUCCESS;
}

void dion__set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void dion__tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

dion_status_t dion__listen(dion__addr_t *addr, int *fd_out)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[DION__ADDR_STRLEN];
    dion__to_sockaddr(addr, &ss, &len);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return dion__error_set(DION_ERR_BOOTSTRAP, "socket() failed: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        int e = errno;
        close(fd);
        return dion__error_set(DION_ERR_BOOTSTRAP, "cannot listen on %s: %s", dion__addr_str(addr, buf),
                               strerror(e));
    }
    if (listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return dion__error_set(DION_ERR_BOOTSTRAP, "listen() on %s failed: %s", dion__addr_str(addr, buf),
                               strerror(e));
    }
    dion__addr_t actual;
    if (dion__local_addr(fd, &actual) == DION_SUCCESS) addr->port = actual.port;
    *fd_out = fd;
    return DION_SUCCESS;
}

dion_status_t dion__local_addr(int fd, dion__addr_t *out)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return dion__error_set(DION_ERR_BOOTSTRAP, "getsockname failed: %s", strerror(errno));
    dion__from_sockaddr((struct sockaddr *)&ss, out);
    return DION_SUCCESS;
}

dion_status_t dion__connect(const dion__addr_t *addr, uint64_t deadline_ns, int *fd_out)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[DION__ADDR_STRLEN];
    int last_err = ETIMEDOUT;
    unsigned backoff_ms = 5;
    dion__to_sockaddr(addr, &ss, &len);
    for (;;) {
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) return dion__error_set(DION_ERR_BOOTSTRAP, "socket() failed: %s", strerror(errno));
        int rc = connect(fd, (struct sockaddr *)&ss, len);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            do rc = poll(&p, 1, dion__slice_ms(deadline_ns));
            while (rc == 0 && dion__now_ns() < deadline_ns);
            if (rc == 1) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                rc = err ? -1 : 0;
                errno = err;
            } else {
                rc = -1;
                errno = ETIMEDOUT;
            }
        }
        if (rc == 0) {
            dion__tune(fd);
            *fd_out = fd;
            return DION_SUCCESS;
        }
        last_err = errno;
        close(fd);
        if (dion__now_ns() >= deadline_ns) break;
        /* Refused or unreachable: the listener may not be up yet, so try again until the deadline. */
        struct timespec ts = {0, (long)backoff_ms * 1000000L};
        nanosleep(&ts, NULL);
        if (backoff_ms < 200) backoff_ms *= 2;
        if (dion__now_ns() >= deadline_ns) break;
    }
    return dion__error_set(DION_ERR_BOOTSTRAP,
                           "could not connect to %s before the bootstrap timeout (last error: %s)",
                           dion__addr_str(addr, buf), strerror(last_err));
}

dion_status_t dion__accept(int lfd, uint64_t deadline_ns, int *fd_out, dion__addr_t *peer)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            dion__tune(fd);
            if (peer) dion__from_sockaddr((struct sockaddr *)&ss, peer);
            *fd_out = fd;
            return DION_SUCCESS;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
            return dion__error_set(DION_ERR_BOOTSTRAP, "accept failed: %s", strerror(errno));
        int wait = dion__slice_ms(deadline_ns);
        if (wait == 0)
            return dion__error_set(DION_ERR_TIMEOUT, "no connection arrived before the bootstrap timeout");
        struct pollfd p = {lfd, POLLIN, 0};
        poll(&p, 1, wait);
    }
}

dion_status_t dion__send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            int wait = dion__slice_ms(deadline_ns);
            if (wait == 0) return dion__error_set(DION_ERR_TIMEOUT, "send timed out");
            struct pollfd pf = {fd, POLLOUT, 0};
            poll(&pf, 1, wait);
            continue;
        }
        return dion__error_set(DION_ERR_PEER_FAILED, "connection lost while sending (%s)",
                               n < 0 ? strerror(errno) : "closed");
    }
    return DION_SUCCESS;
}

dion_status_t dion__recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return dion__error_set(DION_ERR_PEER_FAILED, "connection closed by the other side");
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            int wait = dion__slice_ms(deadline_ns);
            if (wait == 0) return dion__error_set(DION_ERR_TIMEOUT, "receive timed out");
            struct pollfd pf = {fd, POLLIN, 0};
            poll(&pf, 1, wait);
            continue;
        }
        return dion__error_set(DION_ERR_PEER_FAILED, "connection lost while receiving (%s)", strerror(errno));
    }
    return DION_SUCCESS;
}

void dion__frame_hdr_encode(uint8_t out[DION__FRAME_HDR], uint32_t type, uint32_t len)
{
    dion__put_u32(out, DION__FRAME_MAGIC);
    dion__put_u32(out + 4, type);
    dion__put_u32(out + 8, len);
}

int dion__frame_hdr_decode(const uint8_t in[DION__FRAME_HDR], uint32_t *type, uint32_t *len)
{
    if (dion__get_u32(in) != DION__FRAME_MAGIC) return -1;
    *type = dion__get_u32(in + 4);
    *len = dion__get_u32(in + 8);
    if (*type < DION__FRAME_HELLO || *type > DION__FRAME_TYPE_MAX) return -1;
    if (*len > DION__FRAME_MAX) return -1;
    return 0;
}

dion_status_t dion__send_frame(int fd, uint32_t type, const void *payload, uint32_t len, uint64_t deadline_ns)
{
    uint8_t hdr[DION__FRAME_HDR];
    dion__frame_hdr_encode(hdr, type, len);
    dion_status_t st = dion__send_all(fd, hdr, sizeof hdr, deadline_ns);
    if (st == DION_SUCCESS && len) st = dion__send_all(fd, payload, len, deadline_ns);
    return st;
}

dion_status_t dion__recv_frame(int fd, uint32_t *type, void *payload, uint32_t cap, uint32_t *len,
                               uint64_t deadline_ns)
{
    uint8_t hdr[DION__FRAME_HDR];
    dion_status_t st = dion__recv_all(fd, hdr, sizeof hdr, deadline_ns);
    if (st != DION_SUCCESS) return st;
    if (dion__frame_hdr_decode(hdr, type, len) != 0)
        return dion__error_set(DION_ERR_BOOTSTRAP, "malformed frame header (bad magic, type or length)");
    if (*len > cap)
        return dion__error_set(DION_ERR_BOOTSTRAP, "frame of %u bytes exceeds the %u expected", *len, cap);
    return *len ? dion__recv_all(fd, payload, *len, deadline_ns) : DION_SUCCESS;
}

void dion__addr_encode(uint8_t out[20], const dion__addr_t *a)
{
    out[0] = (uint8_t)a->family;
    out[1] = 0;
    out[2] = (uint8_t)(a->port >> 8);
    out[3] = (uint8_t)a->port;
    memcpy(out + 4, a->addr, 16);
}

int dion__addr_decode(const uint8_t in[20], dion__addr_t *a)
{
    memset(a, 0, sizeof *a);
    if (in[0] != 4 && in[0] != 6) return -1;
    a->family = in[0];
    a->port = (uint16_t)(in[2] << 8 | in[3]);
    memcpy(a->addr, in + 4, 16);
    return a->port ? 0 : -1;
}

int dion__secret_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++) diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

dion_status_t dion__random_bytes(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return dion__error(DION_ERR_INTERNAL, "getrandom failed: %s", strerror(errno));
        }
        p += r;
        n -= (size_t)r;
    }
    return DION_SUCCESS;
}
