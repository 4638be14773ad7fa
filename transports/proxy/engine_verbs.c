/* proxy/verbs engine: device and port choice, RC QPs per (context, peer), memory registration, posting and
 * completion polling over rdma-core. See engine_verbs.h for the contract and the ordering argument; the pure
 * pieces are in verbs_attr.c. Not yet run on an RDMA NIC: compiled, unit-tested and run over the tests' fake
 * libibverbs (tests/unit/fake_ibverbs.c) only. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_verbs.h"
#include "src/cuda.h"

/* What a polled completion stands for. */
enum { OP_PUT, OP_PUT_DATA, OP_SIG_SET, OP_SIG_ADD, OP_GET, OP_FADD, OP_CSWAP };
static const char *const op_names[] = {"RDMA WRITE (put)",        "RDMA WRITE (put_signal data)",
                                       "RDMA WRITE (SET signal)", "ATOMIC fetch-add (ADD signal)",
                                       "RDMA READ (get)",         "ATOMIC fetch-add",
                                       "ATOMIC compare-swap"};

typedef struct {
    uint64_t cookie;
    uint8_t op;
    uint8_t report;   /* 0: first half of a put_signal, whose completion the signal's completion stands for */
    uint8_t suppress; /* the first half already reported this chain's failure */
    uint8_t rd_atomic; /* a READ or ATOMIC: later ordered WRITEs need a fence until it completes */
} slot_t;

typedef struct {
    struct ibv_qp *qp;
    int ctx, peer;
    dion__verbs_addr_t local, remote;
    int connected, failed;
    slot_t *slots;
    uint32_t head, tail, depth; /* slots [tail, head) are posted and not yet completed */
    unsigned rd_atomic_out;
} vqp_t;

typedef struct {
    struct ibv_cq *cq;
    int outstanding, depth;
} vctx_t;

struct dion__verbs {
    dion__ibv_t ibv;
    dion__verbs_cfg_t cfg;
    struct ibv_context *dev;
    struct ibv_pd *pd;
    struct ibv_device_attr dattr;
    struct ibv_port_attr pattr;
    char devname[64];
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    dion__verbs_qp_params_t qpp;
    uint8_t rd_atom_resp;
    int nctx, npeers, my_rank;
    vctx_t *ctxs;
    vqp_t **qps;       /* [ctx * npeers + peer], made by addr_get */
    uint64_t *scratch; /* one 8-byte word per context: where ADD signals' old values land, unread */
    struct ibv_mr *scratch_mr;
    dion__verbs_reg_ops_t reg;
    char desc[768];
    char err[1024];
    int err_set;
    int async_ok; /* the device's event fd is non-blocking */
};

/* ---- registration calls for dion__verbs_reg_with ---- */

int dion__verbs_dmabuf_fd(void *arg, uint64_t addr, size_t len, int *fd, uint64_t *offset, char *why,
                          size_t cap)
{
    (void)arg;
    const dion__cu_t *cu = dion__cuda_device_count() ? dion__cu() : NULL;
    if (!cu || !cu->MemGetHandleForAddressRange) {
        snprintf(
            why, cap, "%s",
            !cu ? "the CUDA driver API is not reachable"
                : "the CUDA driver lacks cuMemGetHandleForAddressRange (needs a CUDA 11.7 or newer driver)");
        return -1;
    }
    /* The driver wants the range aligned to the host page size; the MR starts at offset inside it. */
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t base = addr & ~(page - 1), end = (addr + len + page - 1) & ~(page - 1);
    int out = -1;
    CUresult r = cu->MemGetHandleForAddressRange(&out, (CUdeviceptr)base, (size_t)(end - base),
                                                 CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) {
        const char *s = "unknown error";
        if (cu->GetErrorString) cu->GetErrorString(r, &s);
        snprintf(why, cap, "cuMemGetHandleForAddressRange failed: %s (CUresult %d)", s, (int)r);
        return -1;
    }
    *fd = out;
    *offset = addr - base;
    return 0;
}

static void real_close_fd(void *arg, int fd)
{
    (void)arg;
    close(fd);
}

static struct ibv_mr *real_reg_dmabuf(void *arg, struct ibv_pd *pd, uint64_t offset, size_t len,
                                      uint64_t iova, int fd, int access)
{
    return ((dion__verbs_t *)arg)->ibv.reg_dmabuf_mr(pd, offset, len, iova, fd, access);
}

static struct ibv_mr *real_reg_mr(void *arg, struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return ((dion__verbs_t *)arg)->ibv.reg_mr(pd, addr, len, access);
}

/* ---- opening: device, port, GID ---- */

/* ibv_open_device; a device that does not open adds its reason to the list the sentence shows. */
static struct ibv_context *open_plain(void *arg, struct ibv_device *dev, const char *name, char *seen,
                                      size_t cap)
{
    struct ibv_context *c = ((dion__verbs_t *)arg)->ibv.open_device(dev);
    if (!c) dion__verbs_appendf(seen, cap, "%s cannot be opened (%s); ", name, strerror(errno));
    return c;
}

static int query_port(void *arg, struct ibv_context *c, uint8_t port, struct ibv_port_attr *pa)
{
    return dion__ibv_query_port(&((dion__verbs_t *)arg)->ibv, c, port, pa);
}

static dion_status_t choose_device(dion__verbs_t *v)
{
    dion__verbs_dev_src_t src = {v->cfg.hca,
                                 v->cfg.port,
                                 0,
                                 768,
                                 v->ibv.get_device_list,
                                 v->ibv.free_device_list,
                                 v->ibv.get_device_name,
                                 v->ibv.query_device,
                                 v->ibv.close_device,
                                 open_plain,
                                 query_port,
                                 v};
    dion__verbs_dev_pick_t pick, *pk = &pick;
    dion_status_t st = DION_SUCCESS;
    switch (dion__verbs_dev_choose(&src, pk)) {
    case DION__VERBS_DEV_OK:
        v->dev = pk->ctx;
        v->dattr = pk->dattr;
        v->pattr = pk->pattr;
        v->port = pk->port;
        snprintf(v->devname, sizeof v->devname, "%.63s", pk->name);
        break;
    case DION__VERBS_DEV_LIST_FAILED:
        st = dion__error_set(
            DION_ERR_UNSUPPORTED, "proxy/verbs: ibv_get_device_list failed: %s%s", strerror(pk->err),
            pk->err == ENOSYS ? " (the kernel has no RDMA support: load ib_uverbs and the NIC's "
                                "RDMA driver, or use proxy/ofi)"
                              : "");
        break;
    case DION__VERBS_DEV_NONE:
        st = dion__error_set(DION_ERR_UNSUPPORTED,
                             "proxy/verbs: no RDMA device (ibv_get_device_list lists none; is the NIC's RDMA "
                             "driver loaded and its provider, ibverbs-providers, installed?)");
        break;
    case DION__VERBS_DEV_NO_HCA:
        st = dion__error_set(DION_ERR_INVALID_ARG,
                             "proxy/verbs: DION_IB_HCA=%s names no RDMA device; the devices here are: %s",
                             v->cfg.hca, pk->names);
        break;
    default:
        st = dion__error_set(
            DION_ERR_UNSUPPORTED,
            "proxy/verbs: no ACTIVE RDMA port%s%s: %s-> connect the port and check the subnet "
            "manager (ibstat) or, for RoCE, the link of the network interface; or set "
            "DION_IB_HCA / DION_IB_PORT",
            v->cfg.hca[0] ? " on " : "", v->cfg.hca, pk->seen);
    }
    return st;
}

static dion_status_t choose_gid(dion__verbs_t *v)
{
    dion__verbs_gid_src_t src = {v->dev,           v->devname,          v->port, v->pattr.gid_tbl_len,
                                 v->ibv.query_gid, v->ibv.query_gid_ex, NULL};
    dion__verbs_gid_pick_t pick;
    char why[512];
    dion_status_t s =
        dion__verbs_gid_read(&src, v->pattr.link_layer, v->cfg.gid_index, &pick, why, sizeof why);
    if (s) return dion__error_set(s, "proxy/verbs: %s port %u: %s", v->devname, v->port, why);
    v->gid_index = pick.index;
    memcpy(v->gid.raw, pick.raw, 16);
    static const int mtu_bytes[] = {0, 256, 512, 1024, 2048, 4096};
    int mtu = v->pattr.active_mtu >= 1 && v->pattr.active_mtu <= 5 ? mtu_bytes[v->pattr.active_mtu] : 0;
    snprintf(v->desc, sizeof v->desc, "%s port %u, %s, %s, LID 0x%x, MTU %d", v->devname, v->port,
             v->pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", why, v->pattr.lid, mtu);
    return DION_SUCCESS;
}

dion_status_t dion__verbs_open(const dion__verbs_open_args_t *args, dion__verbs_t **out)
{
    *out = NULL;
    if (args->nctx < 0 || args->npeers < 0 || (args->nctx > 0 && args->npeers < 1))
        return dion__error_set(DION_ERR_INVALID_ARG, "proxy/verbs: open with %d contexts and %d peers",
                               args->nctx, args->npeers);
    dion__verbs_t *v = calloc(1, sizeof *v);
    if (!v) return dion__error_set(DION_ERR_NO_MEMORY, "proxy/verbs: no memory for the engine");
    v->nctx = args->nctx;
    v->npeers = args->npeers;
    v->my_rank = args->my_rank;
    dion_status_t s;
    if ((s = dion__verbs_cfg_read(&v->cfg)) || (s = dion__ibv_load(args->libname, &v->ibv)) ||
        (s = choose_device(v)) || (s = choose_gid(v)))
        goto fail;
    if (v->dattr.atomic_cap == IBV_ATOMIC_NONE) {
        s = dion__error_set(
            DION_ERR_UNSUPPORTED,
            "proxy/verbs: %s has no RDMA atomics (atomic_cap IBV_ATOMIC_NONE); proxy/verbs needs "
            "them for ADD signals and DION atomics: use proxy/ofi, or another device with DION_IB_HCA",
            v->devname);
        goto fail;
    }
    v->qpp = v->cfg.qp;
    v->qpp.port = v->port;
    v->qpp.gid_index = v->gid_index;
    v->qpp.mtu = v->pattr.active_mtu;
    v->qpp.rd_atom_init = (uint8_t)(v->dattr.max_qp_init_rd_atom < 16 ? v->dattr.max_qp_init_rd_atom : 16);
    v->rd_atom_resp = (uint8_t)(v->dattr.max_qp_rd_atom < 16 ? v->dattr.max_qp_rd_atom : 16);
    v->pd = v->ibv.alloc_pd(v->dev);
    if (!v->pd) {
        s = dion__error_set(DION_ERR_NETWORK, "proxy/verbs: ibv_alloc_pd on %s failed: %s", v->devname,
                            strerror(errno));
        goto fail;
    }
    v->reg = (dion__verbs_reg_ops_t){.arg = v,
                                     .dmabuf_fd = dion__verbs_dmabuf_fd,
                                     .close_fd = real_close_fd,
                                     .reg_dmabuf = v->ibv.reg_dmabuf_mr ? real_reg_dmabuf : NULL,
                                     .reg_mr = real_reg_mr};
    if (v->nctx) {
        v->ctxs = calloc((size_t)v->nctx, sizeof *v->ctxs);
        v->qps = calloc((size_t)v->nctx * (size_t)v->npeers, sizeof *v->qps);
        if (posix_memalign((void **)&v->scratch, 64, 8 * (size_t)v->nctx)) v->scratch = NULL;
        if (!v->ctxs || !v->qps || !v->scratch) {
            s = dion__error_set(DION_ERR_NO_MEMORY, "proxy/verbs: no memory for %d contexts x %d peers",
                                v->nctx, v->npeers);
            goto fail;
        }
        v->scratch_mr = v->ibv.reg_mr(v->pd, v->scratch, 8 * (size_t)v->nctx, DION__VERBS_MR_ACCESS);
        if (!v->scratch_mr) {
            s = dion__error_set(DION_ERR_NETWORK, "proxy/verbs: ibv_reg_mr of %d bytes of scratch failed: %s",
                                8 * v->nctx, strerror(errno));
            goto fail;
        }
        int depth = v->cfg.cq_depth < v->dattr.max_cqe ? v->cfg.cq_depth : v->dattr.max_cqe;
        for (int c = 0; c < v->nctx; c++) {
            v->ctxs[c].depth = depth;
            v->ctxs[c].cq = v->ibv.create_cq(v->dev, depth, NULL, NULL, 0);
            if (!v->ctxs[c].cq) {
                s = dion__error_set(
                    DION_ERR_NETWORK,
                    "proxy/verbs: ibv_create_cq with %d entries for context %d failed: %s; lower "
                    "DION_IB_CQ_DEPTH",
                    depth, c, strerror(errno));
                goto fail;
            }
        }
    }
    /* Async events are read by dion__verbs_async_poll from the proxy's loop, so the fd must not block. */
    int fl = fcntl(v->dev->async_fd, F_GETFL);
    v->async_ok = fl >= 0 && fcntl(v->dev->async_fd, F_SETFL, fl | O_NONBLOCK) == 0;
    if (!v->async_ok)
        DION_LOG(DION_LOG_DEBUG, "proxy/verbs: %s: async events not read (event fd: %s)", v->devname,
                 strerror(errno));
    DION_LOG(DION_LOG_INFO, "proxy/verbs: %s", v->desc);
    *out = v;
    return DION_SUCCESS;
fail:
    dion__verbs_close(v);
    return s;
}

void dion__verbs_close(dion__verbs_t *v)
{
    if (!v) return;
    for (int i = 0; v->qps && i < v->nctx * v->npeers; i++) {
        if (!v->qps[i]) continue;
        if (v->qps[i]->qp) v->ibv.destroy_qp(v->qps[i]->qp);
        free(v->qps[i]->slots);
        free(v->qps[i]);
    }
    for (int c = 0; v->ctxs && c < v->nctx; c++)
        if (v->ctxs[c].cq) v->ibv.destroy_cq(v->ctxs[c].cq);
    if (v->scratch_mr) v->ibv.dereg_mr(v->scratch_mr);
    if (v->pd) v->ibv.dealloc_pd(v->pd);
    if (v->dev) v->ibv.close_device(v->dev);
    dion__ibv_unload(&v->ibv);
    free(v->scratch);
    free(v->qps);
    free(v->ctxs);
    free(v);
}

const char *dion__verbs_describe(const dion__verbs_t *v)
{
    return v->desc;
}

const char *dion__verbs_error(const dion__verbs_t *v)
{
    return v->err;
}

/* ---- connection ---- */

static vqp_t *qp_of(const dion__verbs_t *v, int ctx, int peer)
{
    if (ctx < 0 || ctx >= v->nctx || peer < 0 || peer >= v->npeers) return NULL;
    return v->qps[ctx * v->npeers + peer];
}

static dion_status_t bad_index(const dion__verbs_t *v, const char *what, int ctx, int peer)
{
    return dion__error_set(
        DION_ERR_INVALID_ARG,
        "proxy/verbs: %s for context %d, peer %d: outside the engine's %d contexts x %d peers "
        "or not connected yet",
        what, ctx, peer, v->nctx, v->npeers);
}

static dion_status_t qp_create(dion__verbs_t *v, int ctx, int peer, vqp_t **out)
{
    vqp_t *q = calloc(1, sizeof *q);
    uint32_t depth = (uint32_t)v->cfg.sq_depth;
    if (depth > (uint32_t)v->dattr.max_qp_wr) depth = (uint32_t)v->dattr.max_qp_wr;
    if (q) q->slots = calloc(depth, sizeof *q->slots);
    if (!q || !q->slots) {
        free(q);
        return dion__error_set(DION_ERR_NO_MEMORY, "proxy/verbs: no memory for a QP to rank %d", peer);
    }
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = ia.recv_cq = v->ctxs[ctx].cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = depth;
    ia.cap.max_recv_wr = 1; /* nothing is received; some providers reject 0 */
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 16; /* SET signals are 8-byte inline WRITEs */
    q->qp = v->ibv.create_qp(v->pd, &ia);
    if (!q->qp) {
        int e = errno;
        free(q->slots);
        free(q);
        return dion__error_set(
            DION_ERR_NETWORK,
            "proxy/verbs: ibv_create_qp (RC, %u send WRs, 16 bytes inline) to rank %d, context "
            "%d failed: %s; lower DION_IB_QP_DEPTH",
            depth, peer, ctx, strerror(e));
    }
    q->ctx = ctx;
    q->peer = peer;
    q->depth = depth;
    struct ibv_qp_attr a;
    int mask = dion__verbs_attr_init(&v->qpp, &a);
    if (v->ibv.modify_qp(q->qp, &a, mask)) {
        int e = errno;
        v->ibv.destroy_qp(q->qp);
        free(q->slots);
        free(q);
        return dion__error_set(DION_ERR_NETWORK,
                               "proxy/verbs: ibv_modify_qp RESET->INIT (port %u, pkey index 0) for rank %d "
                               "failed: %s",
                               v->port, peer, strerror(e));
    }
    q->local.qpn = q->qp->qp_num;
    q->local.psn = (uint32_t)((dion__now_ns() ^ ((uint64_t)q->qp->qp_num * 2654435761u)) & 0xffffff);
    q->local.lid = v->pattr.lid;
    q->local.link = v->pattr.link_layer;
    q->local.mtu = (uint8_t)v->pattr.active_mtu;
    q->local.global = v->gid_index >= 0;
    q->local.rd_atom = v->rd_atom_resp;
    memcpy(q->local.gid, v->gid.raw, 16);
    *out = q;
    return DION_SUCCESS;
}

dion_status_t dion__verbs_addr_get(dion__verbs_t *v, int ctx, int peer, uint8_t out[DION__VERBS_ADDR_BYTES])
{
    if (ctx < 0 || ctx >= v->nctx || peer < 0 || peer >= v->npeers)
        return bad_index(v, "addr_get", ctx, peer);
    vqp_t **slot = &v->qps[ctx * v->npeers + peer];
    if (!*slot) {
        dion_status_t s = qp_create(v, ctx, peer, slot);
        if (s) return s;
    }
    dion__verbs_addr_pack(&(*slot)->local, out);
    return DION_SUCCESS;
}

dion_status_t dion__verbs_connect(dion__verbs_t *v, int ctx, int peer, const uint8_t *blob, size_t len)
{
    vqp_t *q = qp_of(v, ctx, peer);
    if (!q) return bad_index(v, "connect (call addr_get first)", ctx, peer);
    dion_status_t s = dion__verbs_addr_unpack(blob, len, &q->remote);
    if (s) return dion__error_wrap(s, "proxy/verbs: connecting to rank %d", peer);
    if (q->remote.link != q->local.link)
        return dion__error_set(
            DION_ERR_UNSUPPORTED,
            "proxy/verbs: rank %d's port is %s but this rank's (%s) is %s; RC QPs cannot join "
            "them: set DION_IB_HCA to devices of one fabric",
            peer, q->remote.link == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", v->desc,
            q->local.link == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
    struct ibv_qp_attr a;
    int mask = dion__verbs_attr_rtr(&v->qpp, &q->local, &q->remote, &a);
    if (v->ibv.modify_qp(q->qp, &a, mask)) {
        char g[64];
        dion__verbs_gid_text(q->remote.gid, g, sizeof g);
        return dion__error_set(
            DION_ERR_NETWORK,
            "proxy/verbs: ibv_modify_qp INIT->RTR towards rank %d (context %d, QP 0x%x -> peer "
            "QP 0x%x, LID 0x%x, GID %s) failed: %s; check that both ranks use the same fabric "
            "and, for RoCE, DION_IB_GID_INDEX",
            peer, ctx, q->local.qpn, q->remote.qpn, q->remote.lid, g, strerror(errno));
    }
    mask = dion__verbs_attr_rts(&v->qpp, &q->local, &q->remote, &a);
    if (v->ibv.modify_qp(q->qp, &a, mask))
        return dion__error_set(
            DION_ERR_NETWORK,
            "proxy/verbs: ibv_modify_qp RTR->RTS towards rank %d (context %d, QP 0x%x) failed: "
            "%s",
            peer, ctx, q->local.qpn, strerror(errno));
    q->connected = 1;
    DION_LOG(DION_LOG_DEBUG, "proxy/verbs: context %d QP 0x%x connected to rank %d QP 0x%x", ctx,
             q->local.qpn, peer, q->remote.qpn);
    return DION_SUCCESS;
}

/* ---- memory ---- */

dion_status_t dion__verbs_mem_reg(dion__verbs_t *v, void *addr, size_t len, int kind, dion__verbs_mr_t **out)
{
    *out = NULL;
    dion__verbs_mr_t *m = calloc(1, sizeof *m);
    if (!m) return dion__error_set(DION_ERR_NO_MEMORY, "proxy/verbs: no memory for a registration");
    dion_status_t s = dion__verbs_reg_with(&v->reg, v->pd, addr, len, kind, &m->mr, &m->path);
    if (s) {
        free(m);
        DION_LOG(DION_LOG_WARN, "%s", dion_last_error());
        return s;
    }
    m->addr = (uintptr_t)addr;
    m->len = len;
    m->lkey = m->mr->lkey;
    m->rkey = m->mr->rkey;
    *out = m;
    return DION_SUCCESS;
}

void dion__verbs_mem_dereg(dion__verbs_t *v, dion__verbs_mr_t *m)
{
    if (!m) return;
    if (m->mr && v->ibv.dereg_mr(m->mr))
        DION_LOG(DION_LOG_WARN, "proxy/verbs: ibv_dereg_mr of %llu bytes at 0x%llx failed: %s",
                 (unsigned long long)m->len, (unsigned long long)m->addr, strerror(errno));
    free(m);
}

/* ---- posting ---- */

int dion__verbs_connected(const dion__verbs_t *v, int ctx, int peer)
{
    const vqp_t *q = qp_of(v, ctx, peer);
    return q && q->connected;
}

int dion__verbs_room(const dion__verbs_t *v, int ctx, int peer)
{
    const vqp_t *q = qp_of(v, ctx, peer);
    if (!q) return 0;
    int sq = (int)(q->depth - (q->head - q->tail));
    int cq = v->ctxs[ctx].depth - v->ctxs[ctx].outstanding;
    return sq < cq ? sq : cq;
}

/* Posts n chained WRs on q; every WR is signaled so that each completion frees exactly its own slot. */
static dion_status_t post_chain(dion__verbs_t *v, vqp_t *q, dion__verbs_wr_t *w, const uint8_t *ops, int n,
                                uint64_t cookie)
{
    if (!q->connected)
        return dion__error_set(DION_ERR_INTERNAL, "proxy/verbs: post to rank %d on context %d before connect",
                               q->peer, q->ctx);
    if (q->failed)
        return dion__error_set(DION_ERR_NETWORK, "proxy/verbs: the QP 0x%x to rank %d failed earlier: %s",
                               q->local.qpn, q->peer, v->err);
    if (dion__verbs_room(v, q->ctx, q->peer) < n)
        return dion__error_set(DION_ERR_INTERNAL,
                               "proxy/verbs: post of %d work requests to rank %d with no room (poll first; "
                               "DION_IB_QP_DEPTH=%u, DION_IB_CQ_DEPTH=%d)",
                               n, q->peer, q->depth, v->ctxs[q->ctx].depth);
    unsigned rd_atomic = q->rd_atomic_out;
    for (int i = 0; i < n; i++) {
        uint32_t idx = (q->head + (uint32_t)i) % q->depth;
        slot_t *s = &q->slots[idx];
        int ra = w[i].wr.opcode == IBV_WR_RDMA_READ || w[i].wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                 w[i].wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
        *s = (slot_t){.cookie = cookie, .op = ops[i], .report = i == n - 1, .rd_atomic = (uint8_t)ra};
        w[i].wr.wr_id = ((uint64_t)(q->ctx * v->npeers + q->peer) << 32) | idx;
        w[i].wr.send_flags |= IBV_SEND_SIGNALED; /* fences were decided by the callers' builders */
        rd_atomic += ra;
        w[i].wr.next = i + 1 < n ? &w[i + 1].wr : NULL;
    }
    struct ibv_send_wr *bad = NULL;
    int e = ibv_post_send(q->qp, &w[0].wr, &bad);
    if (e)
        return dion__error_set(DION_ERR_NETWORK,
                               "proxy/verbs: ibv_post_send of %s to rank %d (QP 0x%x) failed: %s",
                               op_names[ops[0]], q->peer, q->local.qpn, strerror(e));
    q->head += (uint32_t)n;
    q->rd_atomic_out = rd_atomic;
    v->ctxs[q->ctx].outstanding += n;
    return DION_SUCCESS;
}

static vqp_t *qp_for_post(dion__verbs_t *v, int ctx, int peer)
{
    vqp_t *q = qp_of(v, ctx, peer);
    if (!q) bad_index(v, "post", ctx, peer);
    return q;
}

dion_status_t dion__verbs_post_put(dion__verbs_t *v, int ctx, int peer, dion__verbs_local_t src,
                                   uint32_t bytes, uint64_t raddr, uint32_t rkey, unsigned flags,
                                   uint64_t cookie)
{
    vqp_t *q = qp_for_post(v, ctx, peer);
    if (!q) return DION_ERR_INVALID_ARG;
    dion__verbs_wr_t w;
    dion__verbs_wr_write(&w, 0, src.addr, src.lkey, bytes, raddr, rkey,
                         dion__verbs_fence_flag(IBV_WR_RDMA_WRITE, flags, q->rd_atomic_out));
    uint8_t op = OP_PUT;
    return post_chain(v, q, &w, &op, 1, cookie);
}

dion_status_t dion__verbs_post_put_signal(dion__verbs_t *v, int ctx, int peer, dion__verbs_local_t src,
                                          uint32_t bytes, uint64_t raddr, uint32_t rkey, uint64_t sig_raddr,
                                          uint32_t sig_rkey, int sig_op, uint64_t value, unsigned flags,
                                          uint64_t cookie)
{
    vqp_t *q = qp_for_post(v, ctx, peer);
    if (!q) return DION_ERR_INVALID_ARG;
    if (sig_raddr & 7)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "proxy/verbs: signal address 0x%llx at rank %d is not 8-byte aligned",
                               (unsigned long long)sig_raddr, peer);
    dion__verbs_wr_t w[2];
    uint8_t ops[2];
    int n = 0;
    if (bytes) {
        dion__verbs_wr_write(&w[n], 0, src.addr, src.lkey, bytes, raddr, rkey,
                             dion__verbs_fence_flag(IBV_WR_RDMA_WRITE, flags, q->rd_atomic_out));
        ops[n++] = OP_PUT_DATA;
    }
    /* The signal follows the data on the same QP: no later request passes an earlier WRITE, so the data needs
     * no fence. A signal releases everything earlier, so it is fenced while a READ or ATOMIC posted before it
     * is outstanding (the data WRITE adds none). */
    if (sig_op == DION__VERBS_SIG_ADD) {
        dion__verbs_wr_atomic(
            &w[n], 0, DION__VERBS_FADD, (uintptr_t)&v->scratch[ctx], v->scratch_mr->lkey, sig_raddr, sig_rkey,
            value, 0,
            dion__verbs_fence_flag(IBV_WR_ATOMIC_FETCH_AND_ADD, DION__VERBS_ORDERED, q->rd_atomic_out));
        ops[n++] = OP_SIG_ADD;
    } else {
        dion__verbs_wr_set(&w[n], 0, value, sig_raddr, sig_rkey,
                           dion__verbs_fence_flag(IBV_WR_RDMA_WRITE, DION__VERBS_ORDERED, q->rd_atomic_out));
        ops[n++] = OP_SIG_SET;
    }
    return post_chain(v, q, w, ops, n, cookie);
}

dion_status_t dion__verbs_post_get(dion__verbs_t *v, int ctx, int peer, dion__verbs_local_t dst,
                                   uint32_t bytes, uint64_t raddr, uint32_t rkey, unsigned flags,
                                   uint64_t cookie)
{
    vqp_t *q = qp_for_post(v, ctx, peer);
    if (!q) return DION_ERR_INVALID_ARG;
    dion__verbs_wr_t w;
    dion__verbs_wr_read(&w, 0, dst.addr, dst.lkey, bytes, raddr, rkey, 0);
    uint8_t op = OP_GET;
    (void)flags; /* a READ needs no fence (dion__verbs_fence_flag) */
    return post_chain(v, q, &w, &op, 1, cookie);
}

dion_status_t dion__verbs_post_atomic(dion__verbs_t *v, int ctx, int peer, int op, dion__verbs_local_t result,
                                      uint64_t raddr, uint32_t rkey, uint64_t operand, uint64_t compare,
                                      unsigned flags, uint64_t cookie)
{
    vqp_t *q = qp_for_post(v, ctx, peer);
    if (!q) return DION_ERR_INVALID_ARG;
    if ((raddr & 7) || (result.addr & 7))
        return dion__error_set(
            DION_ERR_INVALID_ARG,
            "proxy/verbs: atomic at rank %d address 0x%llx (result 0x%llx) is not 8-byte aligned", peer,
            (unsigned long long)raddr, (unsigned long long)result.addr);
    dion__verbs_wr_t w;
    dion__verbs_wr_atomic(&w, 0, op, result.addr, result.lkey, raddr, rkey, operand, compare,
                          dion__verbs_fence_flag(IBV_WR_ATOMIC_FETCH_AND_ADD, flags, q->rd_atomic_out));
    uint8_t o = op == DION__VERBS_CSWAP ? OP_CSWAP : OP_FADD;
    return post_chain(v, q, &w, &o, 1, cookie);
}

/* ---- completions ---- */

int dion__verbs_poll(dion__verbs_t *v, int ctx, dion__verbs_cqe_t *out, int max)
{
    if (ctx < 0 || ctx >= v->nctx || max <= 0) return 0;
    struct ibv_wc wc[32];
    int got = 0;
    while (got < max) {
        int want = max - got < 32 ? max - got : 32;
        int n = ibv_poll_cq(v->ctxs[ctx].cq, want, wc);
        if (n < 0) {
            dion__error_set(DION_ERR_NETWORK, "proxy/verbs: ibv_poll_cq on context %d failed (%d)", ctx, n);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            uint32_t qi = (uint32_t)(wc[i].wr_id >> 32), idx = (uint32_t)wc[i].wr_id;
            vqp_t *q = qi < (uint32_t)(v->nctx * v->npeers) ? v->qps[qi] : NULL;
            if (!q || idx >= q->depth) continue; /* cannot happen: every wr_id is ours */
            slot_t *s = &q->slots[idx];
            q->tail++; /* RC completes in posting order: this is the oldest slot */
            q->rd_atomic_out -= s->rd_atomic;
            v->ctxs[ctx].outstanding--;
            if (wc[i].status == IBV_WC_SUCCESS) {
                if (s->report) {
                    out[got] = (dion__verbs_cqe_t){s->cookie, DION_SUCCESS, q->peer, ""};
                    got++;
                }
                continue;
            }
            char sentence[1024];
            dion_status_t st =
                dion__verbs_wc_describe(wc[i].status, wc[i].vendor_err, op_names[s->op], q->peer, ctx,
                                        q->local.qpn, q->remote.qpn, sentence, sizeof sentence);
            q->failed = 1;
            if (!v->err_set) {
                snprintf(v->err, sizeof v->err, "%s", sentence);
                v->err_set = 1;
                DION_LOG(DION_LOG_ERROR, "%s", sentence);
            }
            if (!s->report) q->slots[(idx + 1) % q->depth].suppress = 1;
            if (!s->suppress) {
                dion__error_set(st, "%s", sentence);
                out[got] = (dion__verbs_cqe_t){s->cookie, st, q->peer, ""};
                size_t wl =
                    strlen(sentence) < sizeof out[got].why ? strlen(sentence) : sizeof out[got].why - 1;
                memcpy(out[got].why, sentence, wl); /* cut to fit: the full sentence is the engine's error */
                out[got].why[wl] = 0;
                got++;
            }
            s->suppress = 0;
        }
        if (n < want) break;
    }
    return got;
}

/* ---- asynchronous events ---- */

int dion__verbs_async_poll(dion__verbs_t *v)
{
    int errors = 0;
    struct ibv_async_event ev;
    while (v->async_ok && v->ibv.get_async_event(v->dev, &ev) == 0) {
        int peer = -1;
        uint32_t qpn = 0;
        int qp_event = ev.event_type == IBV_EVENT_QP_FATAL || ev.event_type == IBV_EVENT_QP_REQ_ERR ||
                       ev.event_type == IBV_EVENT_QP_ACCESS_ERR || ev.event_type == IBV_EVENT_PATH_MIG_ERR ||
                       ev.event_type == IBV_EVENT_COMM_EST || ev.event_type == IBV_EVENT_SQ_DRAINED ||
                       ev.event_type == IBV_EVENT_PATH_MIG || ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED;
        vqp_t *q = NULL;
        for (int i = 0; qp_event && i < v->nctx * v->npeers && !q; i++)
            if (v->qps[i] && v->qps[i]->qp == ev.element.qp) q = v->qps[i];
        if (q) peer = q->peer, qpn = q->local.qpn;
        int port = ev.event_type == IBV_EVENT_PORT_ERR || ev.event_type == IBV_EVENT_PORT_ACTIVE
                       ? ev.element.port_num
                       : v->port;
        char sentence[512];
        dion_status_t s =
            dion__verbs_async_describe(ev.event_type, v->devname, port, peer, qpn, sentence, sizeof sentence);
        v->ibv.ack_async_event(&ev);
        /* Another port's trouble is not ours. */
        if (s == DION_SUCCESS || (ev.event_type == IBV_EVENT_PORT_ERR && port != v->port)) {
            DION_LOG(DION_LOG_DEBUG, "%s", sentence);
            continue;
        }
        errors++;
        if (q) q->failed = 1;
        if (!v->err_set) {
            snprintf(v->err, sizeof v->err, "%s", sentence);
            v->err_set = 1;
        }
        DION_LOG(DION_LOG_ERROR, "%s", sentence);
        dion__error_set(s, "%s", sentence);
    }
    return errors;
}

/* ---- probe ---- */

void dion__verbs_probe(const char *libname, dion__verbs_probe_t *p)
{
    memset(p, 0, sizeof *p);
    dion__ibv_t t;
    if (dion__ibv_load(libname, &t) != DION_SUCCESS) {
        snprintf(p->why, sizeof p->why, "%s", dion_last_error());
        return;
    }
    p->lib_ok = 1;
    snprintf(p->lib_path, sizeof p->lib_path, "%s", t.path);
    p->has_dmabuf_mr = t.reg_dmabuf_mr != NULL;
    dion__ibv_unload(&t);
    const dion__cu_t *cu = dion__cuda_device_count() ? dion__cu() : NULL;
    p->has_cuda_dmabuf = cu && cu->MemGetHandleForAddressRange;
    dion__verbs_t *v = NULL;
    dion__verbs_open_args_t a = {.nctx = 0, .npeers = 0, .my_rank = 0, .libname = libname};
    if (dion__verbs_open(&a, &v) != DION_SUCCESS) {
        snprintf(p->why, sizeof p->why, "%s", dion_last_error());
        return;
    }
    p->dev_ok = 1;
    snprintf(p->dev, sizeof p->dev, "%s", v->desc);
    dion__verbs_close(v);
}
