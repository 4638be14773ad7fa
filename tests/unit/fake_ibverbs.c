/* The fake libibverbs of fake_ibverbs.h. Exports the entry points the engine's dlopen table asks for. The
 * parentheses around some names stop verbs.h's function-like macros of the same names.
 *
 * Two ways to reach a QP's remote end:
 *  - loopback (test_verbs): the remote QP lives in this process; a WR is executed at post time on this
 *    process's memory.
 *  - between processes (the proxy over verbs in CPU mode, DION_IB_LIBRARY=this file): RoCE GIDs 2 and 3 carry
 *    the process id (::ffff:10.a.b.c with a.b.c its low 24 bits), so RTR towards a GID of another process
 *    connects a unix socket (abstract name "dion-fake-ibv-<pid>") to that process's service thread. A WR is
 *    then sent there and executed by the responder, which checks rkey, bounds and access like a NIC, applies
 *    WRITEs (8-byte aligned ones as one atomic store), READs and ATOMICs (real atomic instructions) to its
 *    memory, and answers; the post returns after the answer, so completions come in posting order and a
 *    completion means the data is in the target's memory. A broken connection completes with
 *    IBV_WC_RETRY_EXC_ERR, as a dead peer does on a NIC.
 *  Reordering (FAKE_IBV_REORDER=1 or ctl.reorder): READs and ATOMICs are executed late and unfenced WRITEs
 * pass them, as IBA allows an RC responder (post_reordered), so a missing IBV_SEND_FENCE shows in the data.
 *  FAKE_IBV_FAIL_RTR=1: every INIT->RTR transition fails (EINVAL), as towards an unreachable address.
 *  Error injection (any mode): FAKE_IBV_FAIL_AT=<n> fails this process's n-th WR (0-based) with
 *  FAKE_IBV_FAIL_STATUS (an ibv_wc_status number; default IBV_WC_REM_ACCESS_ERR); later WRs on that QP
 *  flush, as on a NIC.
 *  fake_ibv_qps_created() counts the QPs made, for the on-demand connection tests. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake_ibverbs.h"

#define EXPORT __attribute__((visibility("default")))

static fake_ibv_ctl_t ctl = {
    .link_layer = IBV_LINK_LAYER_ETHERNET, .port2_state = IBV_PORT_ACTIVE, .fail_at = -1};
EXPORT fake_ibv_ctl_t *fake_ibv_control(void)
{
    return &ctl;
}

/* For multi-process tests that link no verbs header: QPs this process created
 * (tests/cpu/proxy_verbs_ondemand.c). */
EXPORT int fake_ibv_qps_created(void)
{
    return ctl.qps_created;
}

static struct ibv_device devs[2] = {{.name = "fake_down"}, {.name = "fake_0"}};
static struct ibv_device *dev_list[3] = {&devs[0], &devs[1], NULL};

typedef struct {
    struct ibv_cq cq;
    struct ibv_wc *ring;
    int size, head, tail;
} fcq_t;
typedef struct {
    struct ibv_qp qp;
    uint32_t dest;
    int err, max_inline;
    int sock; /* > 0: the remote end is in another process, served through this socket */
    /* reorder mode: the WRs posted and not yet completed, in posting order */
    struct held {
        struct ibv_send_wr wr;
        struct ibv_sge sge;
        int done;
        enum ibv_wc_status st;
    } * held;
    int nheld;
} fqp_t;
#define MAXQP 64
#define MAXMR 64
static fqp_t *qps[MAXQP];
static struct ibv_mr *mrs[MAXMR];
static uint32_t next_qpn = 0x1a0;
/* mrs[] is read by the service threads: they and every change of it hold mu (never across a socket wait). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- between processes: the wire, the service thread ---- */

typedef struct {
    uint32_t opcode, rkey;
    uint64_t raddr, len, compare_add, swap;
} wire_req_t;
typedef struct {
    uint32_t status, pad;
    uint64_t old; /* ATOMIC: the old value; READ: len bytes of data follow */
} wire_rsp_t;

static int io_full(int fd, void *buf, size_t n, int wr)
{
    char *p = buf;
    while (n) {
        ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

static void sock_name(uint32_t pid, struct sockaddr_un *a, socklen_t *len)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "dion-fake-ibv-%u", pid);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static uint32_t my_pid24(void)
{
    return (uint32_t)getpid() & 0xffffff;
}

static struct ibv_mr *mr_find(uint32_t key, int remote, uint64_t addr, uint64_t len);

/* The responder: executes one request on this process's memory (holding mu, so no region goes meanwhile). */
static enum ibv_wc_status serve_one(const wire_req_t *rq, void *data, wire_rsp_t *rsp)
{
    int atomic = rq->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || rq->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    int need = rq->opcode == IBV_WR_RDMA_WRITE  ? IBV_ACCESS_REMOTE_WRITE
               : rq->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ
               : atomic                         ? IBV_ACCESS_REMOTE_ATOMIC
                                                : -1;
    if (need < 0) return IBV_WC_REM_INV_REQ_ERR;
    if (atomic && (rq->len != 8 || (rq->raddr & 7))) return IBV_WC_REM_INV_REQ_ERR;
    if (!rq->len) return IBV_WC_SUCCESS;
    pthread_mutex_lock(&mu);
    struct ibv_mr *m = mr_find(rq->rkey, 1, rq->raddr, rq->len);
    enum ibv_wc_status st = IBV_WC_SUCCESS;
    if (!m || !((int)m->handle & need)) {
        st = IBV_WC_REM_ACCESS_ERR;
    } else if (rq->opcode == IBV_WR_RDMA_WRITE) {
        if (rq->len == 8 && !(rq->raddr & 7)) { /* a SET signal: one store the waiter sees whole */
            uint64_t v;
            memcpy(&v, data, 8);
            __atomic_store_n((uint64_t *)(uintptr_t)rq->raddr, v, __ATOMIC_SEQ_CST);
        } else {
            memcpy((void *)(uintptr_t)rq->raddr, data, rq->len);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
        }
    } else if (rq->opcode == IBV_WR_RDMA_READ) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        memcpy(data, (void *)(uintptr_t)rq->raddr, rq->len);
    } else {
        uint64_t *w = (uint64_t *)(uintptr_t)rq->raddr;
        if (rq->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            rsp->old = __atomic_fetch_add(w, rq->compare_add, __ATOMIC_SEQ_CST);
        } else {
            uint64_t expect = rq->compare_add;
            __atomic_compare_exchange_n(w, &expect, rq->swap, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            rsp->old = expect; /* the old value either way */
        }
    }
    pthread_mutex_unlock(&mu);
    return st;
}

/* One connection from a requester QP of another process: requests in order until it closes. */
static void *serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    void *buf = NULL;
    size_t cap = 0;
    wire_req_t rq;
    while (io_full(fd, &rq, sizeof rq, 0) == 0) {
        if (rq.len > cap) {
            void *nb = realloc(buf, rq.len);
            if (!nb) break;
            buf = nb, cap = rq.len;
        }
        if (rq.opcode == IBV_WR_RDMA_WRITE && rq.len && io_full(fd, buf, rq.len, 0)) break;
        wire_rsp_t rsp = {0, 0, 0};
        rsp.status = (uint32_t)serve_one(&rq, buf, &rsp);
        if (io_full(fd, &rsp, sizeof rsp, 1)) break;
        if (rq.opcode == IBV_WR_RDMA_READ && rsp.status == IBV_WC_SUCCESS && rq.len &&
            io_full(fd, buf, rq.len, 1))
            break;
    }
    free(buf);
    close(fd);
    return NULL;
}

static void *serve_accept(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return NULL;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

/* The service thread starts with the first device opened in this process (a fork would need its own). */
static pthread_once_t serve_once = PTHREAD_ONCE_INIT;
static void serve_start(void)
{
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t len;
    sock_name(my_pid24(), &a, &len);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, len) || listen(lfd, 64)) {
        if (lfd >= 0) close(lfd);
        return; /* RTR towards this process then fails: its peers' connect is refused */
    }
    pthread_t t;
    if (pthread_create(&t, NULL, serve_accept, (void *)(intptr_t)lfd) == 0)
        pthread_detach(t);
    else
        close(lfd);
}

/* RTR towards a QP of another process: connect to its service thread. */
static int remote_connect(fqp_t *q, uint32_t pid)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t len;
    sock_name(pid, &a, &len);
    if (fd < 0) return errno;
    if (connect(fd, (struct sockaddr *)&a, len)) {
        int e = errno;
        close(fd);
        return e;
    }
    if (q->sock > 0) close(q->sock);
    q->sock = fd;
    return 0;
}

EXPORT struct ibv_device **(ibv_get_device_list)(int *n)
{
    *n = 2;
    return dev_list;
}
EXPORT void ibv_free_device_list(struct ibv_device **l) {}
EXPORT const char *ibv_get_device_name(struct ibv_device *d)
{
    return d->name;
}

static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d)
{
    pthread_once(&serve_once, serve_start);
    static int env_read;
    if (!env_read) { /* error injection from the environment (tests that run the whole library) */
        env_read = 1;
        const char *at = getenv("FAKE_IBV_FAIL_AT"), *st = getenv("FAKE_IBV_FAIL_STATUS");
        if (at && *at) {
            ctl.fail_at = atol(at);
            ctl.fail_status = st && *st ? (enum ibv_wc_status)atoi(st) : IBV_WC_REM_ACCESS_ERR;
        }
        const char *ro = getenv("FAKE_IBV_REORDER"), *rtr = getenv("FAKE_IBV_FAIL_RTR");
        if (ro && *ro) ctl.reorder = atoi(ro);
        if (rtr && *rtr) ctl.fail_rtr = atoi(rtr);
    }
    struct ibv_context *c = calloc(1, sizeof *c);
    c->device = d;
    c->ops.post_send = post_send;
    c->ops.poll_cq = poll_cq;
    int p[2];
    c->async_fd = pipe(p) == 0 ? p[0] : -1; /* a real fd, so that the engine can make it non-blocking */
    c->cmd_fd = c->async_fd >= 0 ? p[1] : -1;
    ctl.live_ctxs++;
    return c;
}
EXPORT int ibv_close_device(struct ibv_context *c)
{
    if (c->async_fd >= 0) close(c->async_fd), close(c->cmd_fd);
    ctl.live_ctxs--;
    free(c);
    return 0;
}
EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof *a);
    a->phys_port_cnt = c->device == &devs[0] ? 1 : 2;
    a->max_qp_wr = 1024;
    a->max_cqe = 65536;
    a->max_qp_rd_atom = 16;
    a->max_qp_init_rd_atom = 8;
    a->atomic_cap = ctl.no_atomics ? IBV_ATOMIC_NONE : IBV_ATOMIC_HCA;
    return 0;
}
EXPORT int(ibv_query_port)(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *compat)
{
    struct ibv_port_attr *a = (struct ibv_port_attr *)compat;
    memset(a, 0, sizeof *a);
    if (port < 1 || port > (c->device == &devs[0] ? 1 : 2)) return EINVAL;
    a->state = c->device == &devs[1] && port == 2 ? (enum ibv_port_state)ctl.port2_state : IBV_PORT_DOWN;
    a->active_mtu = IBV_MTU_4096;
    a->max_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 4;
    a->lid = ctl.link_layer == IBV_LINK_LAYER_INFINIBAND ? 0x2a : 0;
    a->link_layer = (uint8_t)ctl.link_layer;
    return 0;
}

/* RoCE: [0] fe80::1 v1, [1] fe80::1 v2, [2] ::ffff:10.a.b.c v1, [3] the same v2 (a.b.c: the pid). IB: [0]. */
static int gid_entry(uint32_t i, union ibv_gid *g, uint32_t *type)
{
    memset(g, 0, sizeof *g);
    if (ctl.link_layer == IBV_LINK_LAYER_INFINIBAND) {
        if (i != 0) return ENODATA;
        g->raw[0] = 0xfe, g->raw[1] = 0x80, g->raw[15] = 0x2a;
        *type = IBV_GID_TYPE_IB;
        return 0;
    }
    if (i > 3) return ENODATA;
    if (i < 2) {
        g->raw[0] = 0xfe, g->raw[1] = 0x80, g->raw[15] = 1;
    } else { /* ::ffff:10.a.b.c, a.b.c = this process's id: how another process's fake finds it */
        uint32_t pid = my_pid24();
        g->raw[10] = g->raw[11] = 0xff;
        g->raw[12] = 10, g->raw[13] = (uint8_t)(pid >> 16), g->raw[14] = (uint8_t)(pid >> 8);
        g->raw[15] = (uint8_t)pid;
    }
    *type = i % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
    return 0;
}
EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
    uint32_t t;
    int e = gid_entry((uint32_t)index, g, &t);
    return e ? -1 : 0;
}
EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
                             uint32_t flags, size_t size)
{
    memset(e, 0, size);
    e->gid_index = index;
    e->port_num = port;
    return gid_entry(index, &e->gid, &e->gid_type);
}
EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
    struct ibv_pd *pd = calloc(1, sizeof *pd);
    pd->context = c;
    ctl.live_pds++;
    return pd;
}
EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    ctl.live_pds--;
    free(pd);
    return 0;
}
EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *x, struct ibv_comp_channel *ch,
                                    int v)
{
    fcq_t *q = calloc(1, sizeof *q);
    q->cq.context = c;
    q->cq.cqe = cqe;
    q->size = cqe + 1;
    q->ring = calloc((size_t)q->size, sizeof *q->ring);
    ctl.live_cqs++;
    return &q->cq;
}
EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
    fcq_t *q = (fcq_t *)cq;
    ctl.live_cqs--;
    free(q->ring);
    free(q);
    return 0;
}
EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
    if (ia->qp_type != IBV_QPT_RC || ia->cap.max_inline_data > 64 || ia->cap.max_send_wr > 1024) {
        errno = EINVAL;
        return NULL;
    }
    for (int i = 0; i < MAXQP; i++)
        if (!qps[i]) {
            fqp_t *q = calloc(1, sizeof *q);
            q->qp.context = pd->context;
            q->qp.pd = pd;
            q->qp.send_cq = ia->send_cq;
            q->qp.recv_cq = ia->recv_cq;
            q->qp.qp_num = next_qpn++;
            q->qp.state = IBV_QPS_RESET;
            q->qp.qp_type = IBV_QPT_RC;
            q->max_inline = (int)ia->cap.max_inline_data;
            q->held = calloc(1024, sizeof *q->held); /* max_send_wr is at most 1024 here */
            qps[i] = q;
            ctl.live_qps++;
            ctl.qps_created++;
            return &q->qp;
        }
    errno = ENOMEM;
    return NULL;
}
EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
    for (int i = 0; i < MAXQP; i++)
        if (qps[i] == (fqp_t *)qp) qps[i] = NULL;
    if (((fqp_t *)qp)->sock > 0) close(((fqp_t *)qp)->sock);
    free(((fqp_t *)qp)->held);
    ctl.live_qps--;
    free(qp);
    return 0;
}
static fqp_t *qp_by_num(uint32_t n)
{
    for (int i = 0; i < MAXQP; i++)
        if (qps[i] && qps[i]->qp.qp_num == n) return qps[i];
    return NULL;
}
EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    fqp_t *q = (fqp_t *)qp;
    if (ctl.nmodify < 256) {
        ctl.modify[ctl.nmodify].qpn = qp->qp_num;
        ctl.modify[ctl.nmodify].mask = mask;
        ctl.modify[ctl.nmodify].attr = *a;
        ctl.nmodify++;
    }
    static const int need[] = {
        [IBV_QPS_INIT] = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        [IBV_QPS_RTR] = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
        [IBV_QPS_RTS] = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC};
    enum ibv_qp_state to = a->qp_state;
    if (!(mask & IBV_QP_STATE) || (to != IBV_QPS_INIT && to != IBV_QPS_RTR && to != IBV_QPS_RTS) ||
        (int)qp->state != (int)to - 1 || (mask & need[to]) != need[to])
        return EINVAL;
    if (to == IBV_QPS_INIT && a->port_num != 2) return EINVAL;
    if (to == IBV_QPS_RTR) {
        if (a->ah_attr.port_num != 2 || ctl.fail_rtr) return EINVAL;
        if (ctl.link_layer == IBV_LINK_LAYER_ETHERNET &&
            (!a->ah_attr.is_global || a->ah_attr.grh.sgid_index > 3))
            return EINVAL;
        const uint8_t *g = a->ah_attr.grh.dgid.raw;
        uint32_t pid = (uint32_t)g[13] << 16 | (uint32_t)g[14] << 8 | g[15];
        if (a->ah_attr.is_global && g[10] == 0xff && g[12] == 10 && pid != my_pid24()) {
            int e = remote_connect(q, pid); /* the peer's QP is checked by the peer's responses */
            if (e) return e;
        } else if (!qp_by_num(a->dest_qp_num)) {
            return EINVAL;
        }
        q->dest = a->dest_qp_num;
    }
    qp->state = to;
    return 0;
}
static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    pthread_mutex_lock(&mu);
    struct ibv_mr *m = NULL;
    for (int i = 0; i < MAXMR && !m; i++)
        if (!mrs[i]) {
            m = calloc(1, sizeof *m);
            m->context = pd->context;
            m->pd = pd;
            m->addr = addr;
            m->length = len;
            m->lkey = 0x100 + (uint32_t)i;
            m->rkey = 0x200 + (uint32_t)i;
            m->handle = (uint32_t)access;
            mrs[i] = m;
            ctl.live_mrs++;
        }
    pthread_mutex_unlock(&mu);
    if (!m) errno = ENOMEM;
    return m;
}
EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return reg(pd, addr, len, access);
}
EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova, int fd,
                                        int access)
{
    ctl.dmabuf_calls++;
    if (!ctl.dmabuf_ok) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    char path[64], target[256] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    ctl.dmabuf_fd_was_dmabuf = n > 0 && strstr(target, "dmabuf") != NULL;
    ctl.dmabuf_off = off, ctl.dmabuf_iova = iova, ctl.dmabuf_len = len;
    return reg(pd, (void *)(uintptr_t)iova, len, access);
}
EXPORT int ibv_dereg_mr(struct ibv_mr *m)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAXMR; i++)
        if (mrs[i] == m) mrs[i] = NULL;
    ctl.live_mrs--;
    pthread_mutex_unlock(&mu);
    free(m);
    return 0;
}

EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
    if (!(fcntl(c->async_fd, F_GETFL) & O_NONBLOCK))
        return -1; /* the engine must have made it non-blocking */
    if (ctl.async_n == 0) {
        errno = EAGAIN;
        return -1;
    }
    ev->event_type = ctl.async[0].type;
    fqp_t *q = qp_by_num(ctl.async[0].qpn);
    if (ctl.async[0].port)
        ev->element.port_num = ctl.async[0].port;
    else
        ev->element.qp = q ? &q->qp : NULL;
    ctl.async_n--;
    memmove(&ctl.async[0], &ctl.async[1], sizeof ctl.async - sizeof ctl.async[0]);
    return 0;
}
EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
    ctl.async_acked++;
}

/* The region with this key covering [addr, addr+len), or NULL. */
static struct ibv_mr *mr_find(uint32_t key, int remote, uint64_t addr, uint64_t len)
{
    for (int i = 0; i < MAXMR; i++) {
        struct ibv_mr *m = mrs[i];
        if (m && (remote ? m->rkey : m->lkey) == key && addr >= (uintptr_t)m->addr &&
            addr + len <= (uintptr_t)m->addr + m->length)
            return m;
    }
    return NULL;
}

static void complete(fqp_t *q, struct ibv_send_wr *wr, enum ibv_wc_status st)
{
    if (st == IBV_WC_SUCCESS && !(wr->send_flags & IBV_SEND_SIGNALED)) return;
    fcq_t *c = (fcq_t *)q->qp.send_cq;
    struct ibv_wc *w = &c->ring[c->head];
    memset(w, 0, sizeof *w);
    w->wr_id = wr->wr_id;
    w->status = st;
    w->qp_num = q->qp.qp_num;
    w->vendor_err = st ? 0x99 : 0;
    c->head = (c->head + 1) % c->size;
}

/* The requester half towards another process: send the WR, wait for the responder's answer. */
static enum ibv_wc_status execute_remote(fqp_t *q, struct ibv_send_wr *wr, uint64_t laddr, uint64_t len)
{
    int atomic = wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    wire_req_t rq = {.opcode = (uint32_t)wr->opcode,
                     .rkey = atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey,
                     .raddr = atomic ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr,
                     .len = len,
                     .compare_add = atomic ? wr->wr.atomic.compare_add : 0,
                     .swap = atomic ? wr->wr.atomic.swap : 0};
    if (rq.opcode != IBV_WR_RDMA_WRITE && rq.opcode != IBV_WR_RDMA_READ && !atomic)
        return IBV_WC_LOC_QP_OP_ERR;
    wire_rsp_t rsp;
    if (io_full(q->sock, &rq, sizeof rq, 1) ||
        (rq.opcode == IBV_WR_RDMA_WRITE && len && io_full(q->sock, (void *)(uintptr_t)laddr, len, 1)) ||
        io_full(q->sock, &rsp, sizeof rsp, 0))
        return IBV_WC_RETRY_EXC_ERR; /* the peer is gone: a NIC retries, then gives up */
    if (rsp.status == IBV_WC_SUCCESS && rq.opcode == IBV_WR_RDMA_READ && len &&
        io_full(q->sock, (void *)(uintptr_t)laddr, len, 0))
        return IBV_WC_RETRY_EXC_ERR;
    if (rsp.status == IBV_WC_SUCCESS && atomic) memcpy((void *)(uintptr_t)laddr, &rsp.old, 8);
    return (enum ibv_wc_status)rsp.status;
}

static enum ibv_wc_status execute(fqp_t *q, struct ibv_send_wr *wr)
{
    if (!q->sock && !qp_by_num(q->dest)) return IBV_WC_RETRY_EXC_ERR;
    uint64_t len = wr->num_sge ? wr->sg_list[0].length : 0, laddr = wr->num_sge ? wr->sg_list[0].addr : 0;
    int inl = wr->send_flags & IBV_SEND_INLINE;
    pthread_mutex_lock(&mu);
    int lok = !len || inl || mr_find(wr->sg_list[0].lkey, 0, laddr, len);
    pthread_mutex_unlock(&mu);
    if (!lok) return IBV_WC_LOC_PROT_ERR;
    if (q->sock) return execute_remote(q, wr, laddr, len);
    int atomic = wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    uint64_t raddr = atomic ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr;
    uint32_t rkey = atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey;
    if (len && !mr_find(rkey, 1, raddr, len)) return IBV_WC_REM_ACCESS_ERR;
    void *r = (void *)(uintptr_t)raddr, *l = (void *)(uintptr_t)laddr;
    switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE:
        if (len) memmove(r, l, len);
        return IBV_WC_SUCCESS;
    case IBV_WR_RDMA_READ:
        if (len) memmove(l, r, len);
        return IBV_WC_SUCCESS;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP: {
        if (len != 8 || (raddr & 7)) return IBV_WC_REM_INV_REQ_ERR;
        uint64_t old;
        memcpy(&old, r, 8);
        uint64_t nv = wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? old + wr->wr.atomic.compare_add
                      : old == wr->wr.atomic.compare_add        ? wr->wr.atomic.swap
                                                                : old;
        memcpy(r, &nv, 8);
        memcpy(l, &old, 8);
        return IBV_WC_SUCCESS;
    }
    default:
        return IBV_WC_LOC_QP_OP_ERR;
    }
}

/* Reorder mode: executes one held WR (once). */
static void run_held(fqp_t *q, struct held *h)
{
    if (h->done) return;
    if (q->err)
        h->st = IBV_WC_WR_FLUSH_ERR;
    else if (h->st == IBV_WC_SUCCESS)
        h->st = execute(q, &h->wr);
    if (h->st != IBV_WC_SUCCESS) q->err = 1;
    h->done = 1;
}

/* Reorder mode: executes what is still held, in order, then completes everything in posting order. */
static void flush_held(fqp_t *q)
{
    for (int k = 0; k < q->nheld; k++) run_held(q, &q->held[k]);
    for (int k = 0; k < q->nheld; k++) complete(q, &q->held[k].wr, q->held[k].st);
    q->nheld = 0;
}

/* Reorder mode (ctl.reorder): what an RC responder may do. A READ or ATOMIC is held and executed late (at the
 * next poll of its CQ, or before a fenced WR); a WRITE without IBV_SEND_FENCE executes at once, passing every
 * READ and ATOMIC still held; a fenced WRITE first executes everything held. WRITEs never pass WRITEs, READs
 * and ATOMICs never pass each other, and completions still come in posting order. */
static void post_reordered(fqp_t *q, struct ibv_send_wr *wr, enum ibv_wc_status forced)
{
    struct held *h = &q->held[q->nheld++];
    h->wr = *wr;
    h->wr.next = NULL;
    if (wr->num_sge) h->sge = wr->sg_list[0], h->wr.sg_list = &h->sge;
    h->done = 0;
    h->st = forced;
    int rd_at = wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    if (rd_at) return;
    if (wr->send_flags & IBV_SEND_FENCE)
        for (int k = 0; k + 1 < q->nheld; k++) run_held(q, &q->held[k]);
    run_held(q, h); /* an inline payload is read here, while the caller's copy lives */
}

static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    fqp_t *q = (fqp_t *)qp;
    for (; wr; wr = wr->next) {
        if (qp->state != IBV_QPS_RTS || ((wr->send_flags & IBV_SEND_INLINE) && wr->num_sge &&
                                         wr->sg_list[0].length > (uint32_t)q->max_inline)) {
            *bad = wr;
            return EINVAL;
        }
        long i = ctl.wr_count++;
        if (i < FAKE_LOG) {
            ctl.wr[i].qpn = qp->qp_num;
            ctl.wr[i].opcode = wr->opcode;
            ctl.wr[i].flags = wr->send_flags;
            int at = wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
            ctl.wr[i].num_sge = wr->num_sge;
            ctl.wr[i].laddr = wr->num_sge ? wr->sg_list[0].addr : 0;
            ctl.wr[i].len = wr->num_sge ? wr->sg_list[0].length : 0;
            ctl.wr[i].lkey = wr->num_sge ? wr->sg_list[0].lkey : 0;
            ctl.wr[i].raddr = at ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr;
            ctl.wr[i].rkey = at ? wr->wr.atomic.rkey : wr->wr.rdma.rkey;
            ctl.wr[i].compare_add = at ? wr->wr.atomic.compare_add : 0;
            ctl.wr[i].swap = at ? wr->wr.atomic.swap : 0;
        }
        if (ctl.reorder && q->held) {
            post_reordered(q, wr, i == ctl.fail_at ? ctl.fail_status : IBV_WC_SUCCESS);
            continue;
        }
        enum ibv_wc_status st;
        if (q->err)
            st = IBV_WC_WR_FLUSH_ERR;
        else if (i == ctl.fail_at)
            st = ctl.fail_status;
        else
            st = execute(q, wr);
        if (st != IBV_WC_SUCCESS) q->err = 1;
        complete(q, wr, st);
    }
    return 0;
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    fcq_t *c = (fcq_t *)cq;
    for (int i = 0; i < MAXQP; i++)
        if (qps[i] && qps[i]->nheld && qps[i]->qp.send_cq == cq) flush_held(qps[i]);
    int k = 0;
    while (k < n && c->tail != c->head) {
        wc[k++] = c->ring[c->tail];
        c->tail = (c->tail + 1) % c->size;
    }
    return k;
}
