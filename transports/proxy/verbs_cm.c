/* proxy/verbs on-demand connection: the TCP listener and the non-blocking handshake of verbs_cm.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/net.h"
#include "engine.h"
#include "verbs_cm.h"
#include "wire_le.h"

#define VCM_MAGIC    0x31435644u /* "DVC1" */
#define VCM_RETRY_NS 20000000ull /* a refused or broken attempt is tried again after 20 ms */
#define VCM_IDLE_NS  50000ull    /* with no handshake open, the listener is looked at every 50 us at most */

enum { P_IDLE, P_BUSY, P_READY, P_FAILED };

typedef struct {
    int fd;
    int peer;     /* -1: an accepted connection before its HELLO */
    int incoming; /* accepted (target side) */
    int stage; /* outgoing: 0 connecting, 1 HELLO out / REPLY awaited, 2 ACK out; incoming: 0 HELLO awaited,
                  1 REPLY out / ACK awaited */
    uint8_t in[DION__VCM_MSG_BYTES], out[DION__VCM_MSG_BYTES];
    size_t nin, nout, sent;
    uint64_t deadline;
} vconn_t;

typedef struct {
    dion__addr_t addr;
    uint64_t key;
    int state;
    int have_blob; /* the QP is connected to blob */
    uint8_t blob[DION__VERBS_ADDR_BYTES];
    uint64_t deadline, next_try;
    int outgoing; /* an outgoing connection is open */
    char last[160];
    char why[640];
} vpeer_t;

struct dion__vcm {
    dion__verbs_t *v;
    int rank, nranks;
    uint64_t timeout_ns, key, next_accept;
    int lfd;
    dion__addr_t me;
    vpeer_t *peers;
    vconn_t *conns;
    int nconns, capconns;
    int busy; /* peers in P_BUSY */
    struct pollfd *pfds;
};

static void set_state(dion__vcm_t *m, vpeer_t *p, int state)
{
    m->busy += (state == P_BUSY) - (p->state == P_BUSY);
    p->state = state;
}

/* ---- wire ---- */

void dion__vcm_msg_pack(const dion__vcm_msg_t *m, uint8_t out[DION__VCM_MSG_BYTES])
{
    memset(out, 0, DION__VCM_MSG_BYTES);
    dion__verbs_put_le(out, VCM_MAGIC, 4);
    dion__verbs_put_le(out + 4, m->kind, 4);
    dion__verbs_put_le(out + 8, m->from, 4);
    dion__verbs_put_le(out + 12, m->to, 4);
    dion__verbs_put_le(out + 16, m->key, 8);
    memcpy(out + 24, m->blob, DION__VERBS_ADDR_BYTES);
}

int dion__vcm_msg_unpack(const uint8_t in[DION__VCM_MSG_BYTES], dion__vcm_msg_t *m)
{
    if (dion__verbs_get_le(in, 4) != VCM_MAGIC) return -1;
    m->kind = (uint32_t)dion__verbs_get_le(in + 4, 4);
    m->from = (uint32_t)dion__verbs_get_le(in + 8, 4);
    m->to = (uint32_t)dion__verbs_get_le(in + 12, 4);
    m->key = dion__verbs_get_le(in + 16, 8);
    memcpy(m->blob, in + 24, DION__VERBS_ADDR_BYTES);
    return m->kind >= DION__VCM_HELLO && m->kind <= DION__VCM_ACK ? 0 : -1;
}

static void addr_pack(const dion__addr_t *a, uint64_t key, uint8_t out[DION__VCM_ADDR_BYTES])
{
    dion__verbs_put_le(out, a->family, 2);
    dion__verbs_put_le(out + 2, a->port, 2);
    memcpy(out + 4, a->addr, 16);
    dion__verbs_put_le(out + 20, key, 8);
}

/* ---- opening ---- */

dion_status_t dion__vcm_open(dion__verbs_t *v, int rank, int nranks, uint64_t timeout_ns, dion__vcm_t **out,
                             uint8_t addr[DION__VCM_ADDR_BYTES])
{
    *out = NULL;
    dion__vcm_t *m = calloc(1, sizeof *m);
    if (!m || !(m->peers = calloc((size_t)nranks, sizeof *m->peers))) {
        free(m);
        return dion__error_set(DION_ERR_NO_MEMORY, "proxy/verbs: no memory for %d peers' connection state",
                               nranks);
    }
    m->v = v;
    m->rank = rank;
    m->nranks = nranks;
    m->timeout_ns = timeout_ns;
    m->lfd = -1;
    if (getrandom(&m->key, sizeof m->key, 0) != (ssize_t)sizeof m->key)
        m->key = dion__now_ns() ^ ((uint64_t)getpid() << 32); /* only guards against strays, not attackers */
    dion_status_t s = dion__addr_local(&m->me);
    if (s == DION_SUCCESS) s = dion__listen(&m->me, &m->lfd);
    if (s != DION_SUCCESS) {
        s = dion__error_wrap(s, "proxy/verbs: cannot listen for on-demand connections (DION_IB_CONNECT=eager "
                                "connects through the bootstrap instead)");
        free(m->peers);
        free(m);
        return s;
    }
    addr_pack(&m->me, m->key, addr);
    char buf[DION__ADDR_STRLEN];
    DION_LOG(DION_LOG_DEBUG, "proxy/verbs: on-demand connections: listening on %s",
             dion__addr_str(&m->me, buf));
    *out = m;
    return DION_SUCCESS;
}

dion_status_t dion__vcm_peers(dion__vcm_t *m, const uint8_t *all, int nranks)
{
    if (nranks != m->nranks)
        return dion__error_set(DION_ERR_INTERNAL, "proxy/verbs: %d addresses for %d ranks", nranks,
                               m->nranks);
    for (int r = 0; r < nranks; r++) {
        const uint8_t *a = all + (size_t)r * DION__VCM_ADDR_BYTES;
        vpeer_t *p = &m->peers[r];
        memset(&p->addr, 0, sizeof p->addr);
        p->addr.family = (uint16_t)dion__verbs_get_le(a, 2);
        p->addr.port = (uint16_t)dion__verbs_get_le(a + 2, 2);
        memcpy(p->addr.addr, a + 4, 16);
        p->key = dion__verbs_get_le(a + 20, 8);
        if (r != m->rank && ((p->addr.family != 4 && p->addr.family != 6) || !p->addr.port))
            return dion__error_set(DION_ERR_INTERNAL,
                                   "proxy/verbs: rank %d's on-demand connection address is malformed (family "
                                   "%u, port %u): does every rank set the same DION_IB_CONNECT?",
                                   r, p->addr.family, p->addr.port);
    }
    return DION_SUCCESS;
}

void dion__vcm_close(dion__vcm_t *m)
{
    if (!m) return;
    for (int i = 0; i < m->nconns; i++) close(m->conns[i].fd);
    if (m->lfd >= 0) close(m->lfd);
    free(m->conns);
    free(m->pfds);
    free(m->peers);
    free(m);
}

/* ---- connections ---- */

static vconn_t *conn_add(dion__vcm_t *m, int fd, int peer, int incoming)
{
    if (m->nconns == m->capconns) {
        int cap = m->capconns ? 2 * m->capconns : 8;
        vconn_t *c = realloc(m->conns, (size_t)cap * sizeof *c);
        struct pollfd *p = realloc(m->pfds, (size_t)(cap + 1) * sizeof *p);
        if (c) m->conns = c;
        if (p) m->pfds = p;
        if (!c || !p) return NULL;
        m->capconns = cap;
    }
    vconn_t *c = &m->conns[m->nconns++];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->peer = peer;
    c->incoming = incoming;
    c->deadline = dion__now_ns() + m->timeout_ns;
    return c;
}

static void conn_drop(dion__vcm_t *m, int i)
{
    vconn_t *c = &m->conns[i];
    if (!c->incoming && c->peer >= 0) m->peers[c->peer].outgoing = 0;
    close(c->fd);
    m->conns[i] = m->conns[--m->nconns];
}

static void conn_send(vconn_t *c, uint32_t kind, int from, int to, uint64_t key, const uint8_t *blob)
{
    dion__vcm_msg_t msg = {kind, (uint32_t)from, (uint32_t)to, key, {0}};
    if (blob) memcpy(msg.blob, blob, DION__VERBS_ADDR_BYTES);
    dion__vcm_msg_pack(&msg, c->out);
    c->nout = DION__VCM_MSG_BYTES;
    c->sent = 0;
}

static void peer_fail(dion__vcm_t *m, int peer, const char *what)
{
    vpeer_t *p = &m->peers[peer];
    if (p->state == P_READY || p->state == P_FAILED) return;
    char buf[DION__ADDR_STRLEN];
    set_state(m, p, P_FAILED);
    snprintf(p->why, sizeof p->why,
             "proxy/verbs: the on-demand connection to rank %d (its listener %s) failed: %s; that rank has "
             "probably exited or stopped (see its log). The first command to a peer waits for the handshake "
             "up to DION_WAIT_TIMEOUT (here %.3g s)",
             peer, dion__addr_str(&p->addr, buf), what, (double)m->timeout_ns / 1e9);
    DION_LOG(DION_LOG_ERROR, "%s", p->why);
}

/* Connects this rank's QP for peer to the peer's blob, or checks a second blob against the first. */
static int take_blob(dion__vcm_t *m, int peer, const uint8_t *blob)
{
    vpeer_t *p = &m->peers[peer];
    if (p->have_blob) {
        if (!memcmp(p->blob, blob, DION__VERBS_ADDR_BYTES)) return 0;
        peer_fail(m, peer, "it sent two different QP addresses (did it restart?)");
        return -1;
    }
    if (dion__verbs_connect(m->v, 0, peer, blob, DION__VERBS_ADDR_BYTES) != DION_SUCCESS) {
        peer_fail(m, peer, dion_last_error());
        return -1;
    }
    memcpy(p->blob, blob, DION__VERBS_ADDR_BYTES);
    p->have_blob = 1;
    return 0;
}

/* Starts (or starts again) the outgoing connection to peer. */
static void conn_start(dion__vcm_t *m, int peer)
{
    vpeer_t *p = &m->peers[peer];
    uint8_t mine[DION__VERBS_ADDR_BYTES];
    if (dion__verbs_addr_get(m->v, 0, peer, mine) != DION_SUCCESS) { /* the QP, in INIT */
        peer_fail(m, peer, dion_last_error());
        return;
    }
    struct sockaddr_storage ss;
    socklen_t len;
    dion__to_sockaddr(&p->addr, &ss, &len);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        peer_fail(m, peer, strerror(errno));
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS) {
        snprintf(p->last, sizeof p->last, "connect: %s", strerror(errno));
        close(fd);
        p->next_try = dion__now_ns() + VCM_RETRY_NS;
        return;
    }
    vconn_t *c = conn_add(m, fd, peer, 0);
    if (!c) {
        close(fd);
        peer_fail(m, peer, "no memory for a connection");
        return;
    }
    p->outgoing = 1;
    c->deadline = p->deadline;
    conn_send(c, DION__VCM_HELLO, m->rank, peer, p->key, mine);
}

/* A whole message arrived on conns[i]; returns 1 when the connection is finished with. */
static int conn_message(dion__vcm_t *m, vconn_t *c)
{
    dion__vcm_msg_t msg;
    if (dion__vcm_msg_unpack(c->in, &msg) || msg.to != (uint32_t)m->rank || msg.key != m->key ||
        msg.from >= (uint32_t)m->nranks || msg.from == (uint32_t)m->rank ||
        (c->peer >= 0 && msg.from != (uint32_t)c->peer)) {
        DION_LOG(DION_LOG_WARN, "proxy/verbs: dropped a connection that sent no valid handshake message");
        return 1;
    }
    int peer = (int)msg.from;
    vpeer_t *p = &m->peers[peer];
    c->nin = 0;
    if (c->incoming && c->stage == 0 && msg.kind == DION__VCM_HELLO) {
        c->peer = peer;
        uint8_t mine[DION__VERBS_ADDR_BYTES];
        if (dion__verbs_addr_get(m->v, 0, peer, mine) != DION_SUCCESS) {
            peer_fail(m, peer, dion_last_error());
            return 1;
        }
        if (take_blob(m, peer, msg.blob)) return 1;
        conn_send(c, DION__VCM_REPLY, m->rank, peer, p->key, mine);
        c->stage = 1;
        return 0;
    }
    if (c->incoming && c->stage == 1 && msg.kind == DION__VCM_ACK) { /* the requester's QP is in RTR */
        if (p->state != P_FAILED && p->have_blob) set_state(m, p, P_READY);
        return 1;
    }
    if (!c->incoming && c->stage == 1 && msg.kind == DION__VCM_REPLY) {
        if (take_blob(m, peer, msg.blob)) return 1;
        conn_send(c, DION__VCM_ACK, m->rank, peer, p->key, NULL);
        c->stage = 2;
        return 0;
    }
    DION_LOG(DION_LOG_WARN, "proxy/verbs: rank %d sent handshake message %u out of turn", peer, msg.kind);
    return 1;
}

/* Runs conns[i] as far as its socket allows; returns 1 when it is finished with (dropped by the caller). */
static int conn_step(dion__vcm_t *m, vconn_t *c, short rev)
{
    vpeer_t *p = c->peer >= 0 ? &m->peers[c->peer] : NULL;
    if (!c->incoming && c->stage == 0) {
        if (!(rev & (POLLOUT | POLLERR | POLLHUP))) return 0;
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            snprintf(p->last, sizeof p->last, "connect: %s", strerror(err));
            p->next_try = dion__now_ns() + VCM_RETRY_NS;
            return 1;
        }
        c->stage = 1;
    }
    while (c->sent < c->nout) {
        ssize_t k = send(c->fd, c->out + c->sent, c->nout - c->sent, MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (k <= 0) {
            if (p) snprintf(p->last, sizeof p->last, "send: %s", strerror(errno));
            if (p && !c->incoming) p->next_try = dion__now_ns() + VCM_RETRY_NS;
            return 1;
        }
        c->sent += (size_t)k;
    }
    if (!c->incoming && c->stage == 2) { /* the ACK is out: both QPs are past RTR */
        if (p->state != P_FAILED) set_state(m, p, P_READY);
        return 1;
    }
    for (;;) {
        ssize_t k = recv(c->fd, c->in + c->nin, DION__VCM_MSG_BYTES - c->nin, 0);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (k <= 0) { /* closed or reset: an outgoing attempt is made again */
            if (p && !c->incoming) {
                snprintf(p->last, sizeof p->last, "%s",
                         k == 0 ? "it closed the connection" : strerror(errno));
                p->next_try = dion__now_ns() + VCM_RETRY_NS;
            }
            return 1;
        }
        c->nin += (size_t)k;
        if (c->nin < DION__VCM_MSG_BYTES) continue;
        if (conn_message(m, c)) return 1;
        return conn_step(m, c, 0); /* send what the message asked for */
    }
}

void dion__vcm_progress(dion__vcm_t *m)
{
    if (!m) return;
    uint64_t now = dion__now_ns();
    if (!m->busy && !m->nconns && now < m->next_accept) return;
    m->next_accept = now + VCM_IDLE_NS;
    /* (re)connect what waits for it; fail what ran out of time */
    for (int r = 0; m->busy && r < m->nranks; r++) {
        vpeer_t *p = &m->peers[r];
        if (p->state != P_BUSY) continue;
        if (now >= p->deadline) {
            for (int i = 0; i < m->nconns; i++)
                if (!m->conns[i].incoming && m->conns[i].peer == r) conn_drop(m, i--);
            peer_fail(m, r, p->last[0] ? p->last : "no answer");
            continue;
        }
        if (!p->outgoing && now >= p->next_try) conn_start(m, r);
    }
    for (int i = 0; i < m->nconns; i++) {
        if (now < m->conns[i].deadline) continue;
        conn_drop(m, i--);
    }
    if (!m->pfds && !(m->pfds = calloc(1, sizeof *m->pfds))) return;
    m->pfds[0] = (struct pollfd){m->lfd, POLLIN, 0};
    for (int i = 0; i < m->nconns; i++) {
        vconn_t *c = &m->conns[i];
        short ev = (!c->incoming && c->stage == 0) || c->sent < c->nout ? POLLOUT : POLLIN;
        m->pfds[i + 1] = (struct pollfd){c->fd, ev, 0};
    }
    int n = m->nconns;
    if (poll(m->pfds, (nfds_t)(n + 1), 0) <= 0) return;
    /* back to front: dropping moves the last connection into the slot */
    for (int i = n - 1; i >= 0; i--)
        if (m->pfds[i + 1].revents && conn_step(m, &m->conns[i], m->pfds[i + 1].revents)) conn_drop(m, i);
    if (m->pfds[0].revents & POLLIN)
        for (;;) {
            int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) break;
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            vconn_t *c = conn_add(m, fd, -1, 1);
            if (!c) {
                close(fd);
                break;
            }
            if (conn_step(m, c, POLLIN)) conn_drop(m, m->nconns - 1);
        }
}

dion_status_t dion__vcm_ready(dion__vcm_t *m, int peer)
{
    vpeer_t *p = &m->peers[peer];
    switch (p->state) {
    case P_READY:
        return DION_SUCCESS;
    case P_FAILED:
        return dion__error_set(DION_ERR_NETWORK, "%s", p->why);
    case P_IDLE:
        set_state(m, p, P_BUSY);
        p->deadline = dion__now_ns() + m->timeout_ns;
        p->next_try = 0;
        DION_LOG(DION_LOG_DEBUG, "proxy/verbs: connecting to rank %d on demand", peer);
        conn_start(m, peer);
        if (p->state == P_FAILED) return dion__error_set(DION_ERR_NETWORK, "%s", p->why);
        return DION__ENGINE_BUSY;
    default:
        return DION__ENGINE_BUSY;
    }
}
