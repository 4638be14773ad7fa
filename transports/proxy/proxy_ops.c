/* The proxy backend behind the transport seam: peers anywhere (other hosts included) reached through an
 * engine (libfabric now) that proxy threads drive on behalf of device code. Per comm: one engine, its
 * registrations (one per window and signal table) and one set of proxy threads draining the rings of every
 * device handle of the comm. The engine is used by one thread at a time (engine.h): every call into it holds
 * the comm's mutex, so DION_PROXY_THREADS > 1 shares rings out but serializes on the engine.
 * docs/backends/proxy.md describes selection, placement and ordering. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/cuda.h"
#include "transports/proxy/engine.h"
#include "transports/proxy/proxy.h"
#include "transports/transport.h"

#define DION__PX_SLOTS      1024u /* commands per context's ring */
#define DION__PX_GLUES      4096u /* rings (contexts of all handles) one comm serves at once */
#define DION__PX_POS_BITS   48    /* ring position bits in an engine cookie; the rest name the ring */
#define DION__PX_POS_MASK   ((1ull << DION__PX_POS_BITS) - 1)
#define DION__PX_META_FETCH 0x8000u

/* A registered region (window or signal table) as the proxy thread resolves it. */
typedef struct dion__pxr {
    struct dion__pxr *next;
    uint32_t id;
    int named;
    char *base;
    uint64_t bytes;
    dion__engine_mr_t *mr;
    dion__engine_rkey_t *rkeys; /* [nranks]: the peers' parts (len 0 where the peer is not served here) */
} dion__pxr_t;

struct dion__pxc;

/* The engine glue's view of one ring: engine operations in flight per position, completion in order. */
typedef struct {
    dion__proxy_ring_t *r;
    struct dion__pxd *d;
    uint32_t gid;
    uint8_t *cnt;   /* [nslots] engine operations in flight for the position */
    uint16_t *meta; /* [nslots] DION__PX_META_FETCH | (local counter + 1) */
    uint64_t exec;  /* positions taken */
    uint64_t done;  /* positions complete */
    uint64_t inflight;
    uint64_t partial; /* pos + 1 of a PUT_SIGNAL whose put is posted and whose signal is not yet */
    char why[256];    /* the sentence that failed the ring (dion_dev_check reports it) */
} dion__pxg_t;

/* One device handle's part. */
typedef struct dion__pxd {
    struct dion__pxd *next;
    uint32_t nrings;
    dion__proxy_ring_t **rings;
    dion__pxg_t *glue;
    dion__pxr_t *sig;                /* the handle's signal tables */
    dion_proxy_ring_dev_t *devrings; /* what dev->proxy_rings points to */
    int cpu;
} dion__pxd_t;

typedef struct dion__pxc {
    dion_comm_t comm;
    const dion__engine_ops_t *E;
    dion__engine_t *e;
    dion__engine_caps_t caps;
    pthread_mutex_t mu; /* every engine call and every list below */
    dion__pxr_t *regions;
    dion__pxd_t *devs;
    dion__pxg_t *gtab[DION__PX_GLUES];
    dion__proxy_threads_t *threads;
    uint64_t inflight; /* engine operations in flight over every glue (their inflight summed) */
    int broken;
} dion__pxc_t;

typedef struct {
    dion__pxc_t *pc;
    dion__engine_mr_t *mr;
    char *base;
    uint64_t bytes;
} dion__px_exp_t;

/* ---- the engine glue: execute and progress (dion__proxy_exec_t) ---- */

static dion__pxr_t *dion__px_find(dion__pxc_t *pc, uint32_t id)
{
    for (dion__pxr_t *x = pc->regions; x; x = x->next)
        if (x->named && x->id == id) return x;
    return NULL;
}

/* The ring's glue, set at dev_init: no search over every ring of the comm per batch (132+ rings). */
static dion__pxg_t *dion__px_glue(const dion__proxy_ring_t *r)
{
    return r->glue;
}

/* Completes positions in ring order while nothing of them is in flight. */
static void dion__px_advance(dion__pxg_t *g)
{
    dion__proxy_ring_t *r = g->r;
    uint64_t mask = r->dev.mask;
    while (g->done < g->exec && g->cnt[g->done & mask] == 0) {
        uint16_t m = g->meta[g->done & mask];
        if ((m & ~DION__PX_META_FETCH) && !r->failed)
            dion__proxy_ring_count(r, (m & ~DION__PX_META_FETCH) - 1u);
        g->done++;
    }
    dion__proxy_ring_complete(r, g->done);
}

static uint64_t dion__px_cookie(const dion__pxg_t *g, uint64_t pos)
{
    return ((uint64_t)g->gid << DION__PX_POS_BITS) | (pos & DION__PX_POS_MASK);
}

/* The region a command names, or a sentence. */
static dion_status_t dion__px_region(dion__pxc_t *pc, uint32_t id, int peer, const char *what,
                                     dion__pxr_t **out)
{
    *out = dion__px_find(pc, id);
    if (*out) return DION_SUCCESS;
    return dion__error(
        DION_ERR_INVALID_ARG,
        "proxy: a command for rank %d names %s window id %u, which is no live window of rank %d; "
        "destroy windows only after dion_quiet",
        peer, what, id, pc->comm->rank);
}

static dion_status_t dion__px_local(const dion__pxr_t *x, uint64_t off, uint64_t bytes, int peer,
                                    const char *what)
{
    if (bytes <= x->bytes && off <= x->bytes - bytes && (x->mr || !bytes)) return DION_SUCCESS;
    return dion__error(
        DION_ERR_REMOTE_ACCESS,
        "proxy: a command for rank %d reads or writes %llu bytes at offset %llu of this rank's "
        "part of %s window %u, which has %llu bytes",
        peer, (unsigned long long)bytes, (unsigned long long)off, what, x->id, (unsigned long long)x->bytes);
}

static dion__engine_amo_t dion__px_sig_amo(uint8_t sig_op)
{
    return (sig_op & 1u) ? DION__ENGINE_AMO_ADD : DION__ENGINE_AMO_SET;
}

/* Posts what one command needs; *need gets the engine operations posted. BUSY: nothing (more) posted. */
static dion_status_t dion__px_post(dion__pxc_t *pc, dion__pxg_t *g, dion_proxy_cmd_t *c, uint64_t pos,
                                   uint32_t *need)
{
    const dion__engine_ops_t *E = pc->E;
    uint64_t ck = dion__px_cookie(g, pos);
    int peer = c->peer;
    *need = 0;
    if (c->op == DION_PROXY_OP_NOP || c->op == DION_PROXY_OP_QUIET || c->op == DION_PROXY_OP_FENCE)
        return DION_SUCCESS;
    if (peer < 0 || peer >= pc->comm->nranks || peer == pc->comm->rank)
        return dion__error(DION_ERR_INVALID_ARG,
                           "proxy: a command names rank %d; the comm has ranks 0-%d and "
                           "this rank (%d) is not served by the proxy",
                           peer, pc->comm->nranks - 1, pc->comm->rank);
    dion__pxr_t *src = NULL, *dst = NULL;
    dion_status_t st;
    switch (c->op) {
    case DION_PROXY_OP_PUT:
    case DION_PROXY_OP_PUT_SIGNAL: {
        if ((st = dion__px_region(pc, c->u.rma.dst_win, peer, "destination", &dst)) != DION_SUCCESS)
            return st;
        if ((st = dion__px_region(pc, c->u.rma.src_win, peer, "source", &src)) != DION_SUCCESS) return st;
        if ((st = dion__px_local(src, c->u.rma.src_off, c->u.rma.bytes, peer, "source")) != DION_SUCCESS)
            return st;
        if (g->partial != pos + 1 && c->u.rma.bytes) {
            st = E->put(pc->e, peer, src->mr, src->base + c->u.rma.src_off, &dst->rkeys[peer],
                        c->u.rma.dst_off, c->u.rma.bytes, 0, ck);
            if (st != DION_SUCCESS) return st;
            (*need)++;
        }
        if (c->op == DION_PROXY_OP_PUT) return DION_SUCCESS;
        g->partial = pos + 1;
        if (!g->d->sig) return dion__error(DION_ERR_INTERNAL, "proxy: the handle has no signal tables");
        st = E->atomic(pc->e, peer, dion__px_sig_amo(c->u.rma.sig_op), &g->d->sig->rkeys[peer],
                       (uint64_t)c->u.rma.sig * 8u, c->u.rma.value, 0, DION__ENGINE_F_ORDERED, ck);
        if (st != DION_SUCCESS) return st;
        g->partial = 0;
        (*need)++;
        return DION_SUCCESS;
    }
    case DION_PROXY_OP_SIGNAL:
        if (!g->d->sig) return dion__error(DION_ERR_INTERNAL, "proxy: the handle has no signal tables");
        st = E->atomic(pc->e, peer, dion__px_sig_amo(c->u.rma.sig_op), &g->d->sig->rkeys[peer],
                       (uint64_t)c->u.rma.sig * 8u, c->u.rma.value, 0,
                       c->u.rma.sig_op <= DION_SIG_ADD ? DION__ENGINE_F_ORDERED : 0, ck);
        if (st == DION_SUCCESS) *need = 1;
        return st;
    case DION_PROXY_OP_GET:
        if ((st = dion__px_region(pc, c->u.rma.src_win, peer, "source", &src)) != DION_SUCCESS) return st;
        if ((st = dion__px_region(pc, c->u.rma.dst_win, peer, "destination", &dst)) != DION_SUCCESS)
            return st;
        if ((st = dion__px_local(dst, c->u.rma.dst_off, c->u.rma.bytes, peer, "destination")) != DION_SUCCESS)
            return st;
        if (!c->u.rma.bytes) return DION_SUCCESS;
        st = E->get(pc->e, peer, dst->mr, dst->base + c->u.rma.dst_off, &src->rkeys[peer], c->u.rma.src_off,
                    c->u.rma.bytes, 0, ck);
        if (st == DION_SUCCESS) *need = 1;
        return st;
    case DION_PROXY_OP_FETCH_ADD:
    case DION_PROXY_OP_COMPARE_SWAP: {
        if ((st = dion__px_region(pc, c->u.amo.win, peer, "atomic", &dst)) != DION_SUCCESS) return st;
        int cas = c->op == DION_PROXY_OP_COMPARE_SWAP;
        st = E->atomic(pc->e, peer, cas ? DION__ENGINE_AMO_CSWAP : DION__ENGINE_AMO_FETCH_ADD,
                       &dst->rkeys[peer], c->u.amo.off, cas ? c->u.amo.desired : c->u.amo.operand,
                       cas ? c->u.amo.operand : 0, 0, ck);
        if (st == DION_SUCCESS) *need = 1;
        return st;
    }
    default:
        return dion__error(DION_ERR_INVALID_ARG, "proxy: unknown command op %u", c->op);
    }
}

static int dion__px_fetches(uint8_t op)
{
    return op == DION_PROXY_OP_FETCH_ADD || op == DION_PROXY_OP_COMPARE_SWAP;
}

static dion_status_t dion__px_execute(void *arg, uint32_t thread, dion__proxy_ring_t *r,
                                      dion_proxy_cmd_t *cmds, uint32_t n, uint32_t *taken)
{
    (void)thread;
    dion__pxc_t *pc = arg;
    dion_status_t st = DION_SUCCESS;
    uint32_t i = 0;
    pthread_mutex_lock(&pc->mu);
    dion__pxg_t *g = dion__px_glue(r);
    uint64_t mask = r->dev.mask;
    /* the engine's occupancy once per batch (it walks every peer), then counted along */
    uint32_t pending = g && pc->caps.max_ops ? pc->E->pending(pc->e, -1) : 0;
    for (; g && i < n; i++) {
        dion_proxy_cmd_t *c = &cmds[i];
        uint64_t pos = g->exec;
        if (pos - g->done >= r->nslots) break; /* the position's bookkeeping is still in use */
        /* fence: nothing after it starts before everything before it completed */
        if (c->op == DION_PROXY_OP_FENCE && g->inflight) break;
        if (pc->caps.max_ops && pending + 2 > pc->caps.max_ops) break;
        if (g->partial != pos + 1) g->cnt[pos & mask] = 0;
        g->meta[pos & mask] = (uint16_t)((dion__px_fetches(c->op) ? DION__PX_META_FETCH : 0) |
                                         ((c->flags & DION_PROXY_F_LOCAL_COUNT) && !dion__px_fetches(c->op)
                                              ? (uint16_t)(c->u.rma.counter + 1u)
                                              : 0u));
        uint32_t need = 0;
        st = dion__px_post(pc, g, c, pos, &need);
        /* what was posted counts even when the rest was not (a PUT_SIGNAL's put before a busy signal) */
        g->cnt[pos & mask] = (uint8_t)(g->cnt[pos & mask] + need);
        g->inflight += need;
        pc->inflight += need;
        pending += need;
        if (st == DION__ENGINE_BUSY) { /* comes again; g->partial remembers a posted put */
            st = DION_SUCCESS;
            break;
        }
        if (st != DION_SUCCESS) {
            if (dion__px_fetches(c->op)) dion__proxy_cmd_result(c, 0);
            snprintf(g->why, sizeof g->why, "%s", dion_last_error()); /* the thread fails the ring with it */
            break;
        }
        g->exec++;
        dion__px_advance(g);
    }
    if (!g) st = dion__error(DION_ERR_INTERNAL, "proxy: a ring this comm does not serve");
    pthread_mutex_unlock(&pc->mu);
    *taken = i;
    return st;
}

/* Fails every ring that still runs (the engine broke). */
static void dion__px_fail_all(dion__pxc_t *pc, dion_status_t s, const char *why)
{
    for (dion__pxd_t *d = pc->devs; d; d = d->next)
        for (uint32_t i = 0; i < d->nrings; i++)
            if (!d->rings[i]->failed) {
                snprintf(d->glue[i].why, sizeof d->glue[i].why, "%s", why);
                dion__proxy_ring_fail(d->rings[i], s, why);
            }
}

static void dion__px_complete(dion__pxc_t *pc, const dion__engine_cqe_t *cq, int k);

/* Polls the engine until it has nothing more to report (at most DION__PX_POLL_ROUNDS batches) and
 * completes what it reports. The caller holds the mutex. */
#define DION__PX_POLL_BATCH  16
#define DION__PX_POLL_ROUNDS 16
static int dion__px_poll_locked(dion__pxc_t *pc)
{
    if (!pc->e || pc->broken) return 0;
    dion__engine_cqe_t cq[DION__PX_POLL_BATCH];
    int k = 0, any = 0;
    for (int round = 0; round < DION__PX_POLL_ROUNDS; round++) {
        k = pc->E->poll(pc->e, cq, DION__PX_POLL_BATCH);
        if (k <= 0) break;
        any = 1;
        dion__px_complete(pc, cq, k);
        if (k < DION__PX_POLL_BATCH) break;
    }
    if (k < 0) {
        pc->broken = 1;
        dion__px_fail_all(pc, DION_ERR_NETWORK, dion_last_error());
        return 0;
    }
    return any || pc->inflight;
}

/* Completes the positions the engine's completions name. The caller holds the mutex. */
static void dion__px_complete(dion__pxc_t *pc, const dion__engine_cqe_t *cq, int k)
{
    for (int j = 0; j < k; j++) {
        dion__pxg_t *g = pc->gtab[cq[j].cookie >> DION__PX_POS_BITS];
        if (!g) continue; /* its handle is gone */
        uint64_t mask = g->r->dev.mask;
        uint64_t pos = g->done + (((cq[j].cookie & DION__PX_POS_MASK) - g->done) & DION__PX_POS_MASK);
        if (g->meta[pos & mask] & DION__PX_META_FETCH)
            dion__proxy_cmd_result(&g->r->slots[pos & mask], cq[j].value);
        if (cq[j].status != DION_SUCCESS && !g->r->failed) {
            snprintf(g->why, sizeof g->why, "%s", cq[j].why);
            dion__proxy_ring_fail(g->r, cq[j].status, cq[j].why);
        }
        if (g->cnt[pos & mask]) g->cnt[pos & mask]--;
        if (g->inflight) {
            g->inflight--;
            if (pc->inflight) pc->inflight--;
        }
        dion__px_advance(g);
    }
}

static int dion__px_progress(void *arg, uint32_t thread)
{
    (void)thread;
    dion__pxc_t *pc = arg;
    pthread_mutex_lock(&pc->mu);
    int busy = dion__px_poll_locked(pc);
    pthread_mutex_unlock(&pc->mu);
    return busy;
}

/* (Re)starts the comm's proxy threads over the rings of every live handle. */
static dion_status_t dion__px_threads(dion__pxc_t *pc)
{
    dion__proxy_threads_stop(pc->threads);
    pc->threads = NULL;
    uint32_t n = 0;
    for (dion__pxd_t *d = pc->devs; d; d = d->next) n += d->nrings;
    dion__proxy_ring_t **all = calloc(n ? n : 1, sizeof *all);
    if (!all) return dion__error(DION_ERR_NO_MEMORY, "out of memory for the proxy's ring list");
    uint32_t k = 0;
    for (dion__pxd_t *d = pc->devs; d; d = d->next)
        for (uint32_t i = 0; i < d->nrings; i++) all[k++] = d->rings[i];
    dion__proxy_exec_t ex = {dion__px_execute, dion__px_progress, pc};
    dion_status_t st = dion__proxy_threads_start(all, n, &ex, pc->comm->cuda_device, &pc->threads);
    free(all);
    return st;
}

/* ---- the seam ---- */

static dion_status_t dion__px_open(dion_comm_t c, dion__engine_t **e, char *why, size_t cap)
{
    dion__engine_open_args_t oa;
    memset(&oa, 0, sizeof oa);
    oa.rank = c ? c->rank : 0;
    oa.nranks = c ? c->nranks : 1;
    oa.cuda_device = c ? c->cuda_device : -1;
    oa.want_cuda = c && c->cuda_device >= 0;
    return dion__engine_ofi.open(&oa, e, why, cap);
}

static pthread_once_t dion__px_probe_once = PTHREAD_ONCE_INIT;
static int dion__px_probe_ok;
static char dion__px_probe_why[DION__TL_WHY];

static void dion__px_probe(void)
{
    dion__engine_t *e = NULL;
    char why[DION__TL_WHY] = "";
    if (dion__px_open(NULL, &e, why, sizeof why) == DION_SUCCESS) {
        dion__px_probe_ok = 1;
        dion__engine_ofi.close(e);
    } else {
        snprintf(dion__px_probe_why, sizeof dion__px_probe_why, "the ofi engine cannot run here: %s", why);
    }
    dion__error_clear();
}

static int dion__px_usable(dion_comm_t c, char *why, size_t cap)
{
    (void)c;
    pthread_once(&dion__px_probe_once, dion__px_probe);
    if (!dion__px_probe_ok) snprintf(why, cap, "%s", dion__px_probe_why);
    return dion__px_probe_ok;
}

static int dion__px_reach(dion_comm_t c, int peer, char *why, size_t cap)
{
    (void)c, (void)peer, (void)why, (void)cap;
    return 1; /* the engine reaches any rank whose address the bootstrap brings */
}

static uint32_t dion__px_scope(dion_comm_t c, int peer, int cpu)
{
    (void)c, (void)peer, (void)cpu;
    return DION_SCOPE_SYS; /* the proxy thread and the engine write from outside the GPU */
}

static dion_status_t dion__px_comm_init(dion_comm_t c, void **state)
{
    *state = NULL;
    dion__pxc_t *pc = calloc(1, sizeof *pc);
    dion__engine_addr_t me, *all = calloc((size_t)c->nranks, sizeof *all);
    char why[DION__TL_WHY] = "";
    dion_status_t st = pc && all ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory");
    if (pc) {
        pc->comm = c;
        pc->E = &dion__engine_ofi;
        pthread_mutex_init(&pc->mu, NULL);
    }
    if (st == DION_SUCCESS) {
        st = dion__px_open(c, &pc->e, why, sizeof why);
        if (st != DION_SUCCESS)
            st = dion__error(st, "proxy backend: the ofi engine cannot run on rank %d: %s", c->rank, why);
    }
    if (st == DION_SUCCESS) {
        pc->E->query(pc->e, &pc->caps);
        memset(&me, 0, sizeof me);
        st = pc->E->address(pc->e, &me);
    }
    dion_status_t ag = dion__comm_agree(c, st, "opening the proxy backend's engine");
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, &me, sizeof me, all);
    if (ag == DION_SUCCESS) st = pc->E->connect(pc->e, all, c->nranks);
    if (ag == DION_SUCCESS) ag = dion__comm_agree(c, st, "connecting the proxy backend's engine");
    if (ag == DION_SUCCESS) {
        DION_LOG(DION_LOG_INFO, "proxy backend: ofi engine, provider %s, domain %s, order %s, GPU memory %s",
                 pc->caps.provider, pc->caps.domain, pc->caps.order,
                 pc->caps.cuda_mem ? "registered" : "not registered");
        ag = dion__px_threads(pc);
    }
    free(all);
    if (ag != DION_SUCCESS) {
        if (pc) {
            if (pc->e) pc->E->close(pc->e);
            pthread_mutex_destroy(&pc->mu);
            free(pc);
        }
        return ag;
    }
    *state = pc;
    return DION_SUCCESS;
}

static void dion__px_comm_fini(dion_comm_t c, void *state)
{
    (void)c;
    dion__pxc_t *pc = state;
    if (!pc) return;
    dion__proxy_threads_stop(pc->threads);
    /* windows the user left: their registrations go before the engine */
    while (pc->regions) {
        dion__pxr_t *x = pc->regions;
        pc->regions = x->next;
        if (x->mr) pc->E->mem_dereg(pc->e, x->mr);
        free(x->rkeys);
        free(x);
    }
    pc->E->close(pc->e);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

static dion_status_t dion__px_export(dion_comm_t c, void *base, size_t bytes, void *desc, void *exp)
{
    dion__pxc_t *pc = dion__tl_state(c, &dion__tl_proxy);
    dion__px_exp_t *x = exp;
    dion__engine_rkey_t *rk = desc;
    memset(rk, 0, sizeof *rk);
    if (!pc) return dion__error(DION_ERR_INTERNAL, "proxy backend: no engine for this comm");
    int mem = DION__ENGINE_MEM_HOST;
    if (c->cuda_device >= 0 && dion__cuda_device_count() > 0) {
        struct cudaPointerAttributes a;
        memset(&a, 0, sizeof a);
        if (cudaPointerGetAttributes(&a, base) == cudaSuccess && a.type == cudaMemoryTypeDevice)
            mem = DION__ENGINE_MEM_CUDA;
        cudaGetLastError();
    }
    if (mem == DION__ENGINE_MEM_CUDA && !pc->caps.cuda_mem)
        return dion__error(
            DION_ERR_UNSUPPORTED,
            "proxy backend: provider %s cannot register GPU memory and staging GPU windows through "
            "host buffers is not implemented; use a host window (dion_win_alloc on_host=1) for "
            "peers served by the proxy",
            pc->caps.provider);
    pthread_mutex_lock(&pc->mu);
    dion_status_t st = pc->E->mem_reg(pc->e, base, bytes, mem, &x->mr, rk);
    pthread_mutex_unlock(&pc->mu);
    if (st != DION_SUCCESS) return st;
    x->pc = pc;
    x->base = base;
    x->bytes = bytes;
    return DION_SUCCESS;
}

static dion_status_t dion__px_import(dion_comm_t c, int peer, const void *desc, void *shared, void *imp,
                                     dion__tl_view_t *view)
{
    (void)c, (void)peer, (void)shared;
    memcpy(imp, desc, sizeof(dion__engine_rkey_t));
    view->base = NULL; /* not load/store reachable: every access is a command */
    return DION_SUCCESS;
}

static void dion__px_release(void *imp)
{
    (void)imp;
}

static void dion__px_unexport(void *exp)
{
    dion__px_exp_t *x = exp;
    if (!x->mr) return; /* region_done took it, or nothing was registered */
    pthread_mutex_lock(&x->pc->mu);
    x->pc->E->mem_dereg(x->pc->e, x->mr);
    pthread_mutex_unlock(&x->pc->mu);
    x->mr = NULL;
}

static int dion__px_on_host(const void *desc)
{
    return ((const dion__engine_rkey_t *)desc)->flags == DION__ENGINE_MEM_HOST;
}

static dion_status_t dion__px_region_done(dion_comm_t c, void *state, void *exp, void *const *imps,
                                          void **out)
{
    dion__pxc_t *pc = state;
    dion__px_exp_t *x = exp;
    dion__pxr_t *r = calloc(1, sizeof *r);
    if (r) r->rkeys = calloc((size_t)c->nranks, sizeof *r->rkeys);
    if (!r || !r->rkeys) {
        if (r) free(r);
        return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    }
    r->base = x->base;
    r->bytes = x->bytes;
    r->mr = x->mr;
    x->mr = NULL;
    for (int p = 0; p < c->nranks; p++)
        if (imps[p]) memcpy(&r->rkeys[p], imps[p], sizeof r->rkeys[p]);
    pthread_mutex_lock(&pc->mu);
    r->next = pc->regions;
    pc->regions = r;
    pthread_mutex_unlock(&pc->mu);
    *out = r;
    return DION_SUCCESS;
}

static void dion__px_region_named(void *state, void *region, uint32_t id)
{
    dion__pxc_t *pc = state;
    dion__pxr_t *r = region;
    pthread_mutex_lock(&pc->mu);
    r->id = id;
    r->named = 1;
    pthread_mutex_unlock(&pc->mu);
}

static void dion__px_region_forget(void *state, void *region)
{
    dion__pxc_t *pc = state;
    dion__pxr_t *r = region;
    pthread_mutex_lock(&pc->mu);
    dion__pxr_t **pp = &pc->regions;
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    if (r->mr) pc->E->mem_dereg(pc->e, r->mr);
    pthread_mutex_unlock(&pc->mu);
    free(r->rkeys);
    free(r);
}

static void dion__px_dev_free(dion__pxd_t *d)
{
    for (uint32_t i = 0; i < d->nrings; i++) {
        dion__proxy_ring_destroy(d->rings[i]);
        free(d->glue[i].cnt);
        free(d->glue[i].meta);
    }
    if (d->devrings) {
        if (d->cpu)
            free(d->devrings);
        else
            cudaFree(d->devrings);
    }
    free(d->rings);
    free(d->glue);
    free(d);
}

static dion_status_t dion__px_dev_init(dion_comm_t c, void *state, void *signals, dion_dev_t *dev, int cpu,
                                       void **out)
{
    dion__pxc_t *pc = state;
    uint32_t n = dev->num_contexts;
    dion__pxd_t *d = calloc(1, sizeof *d);
    if (d) {
        d->cpu = cpu;
        d->sig = signals;
        d->rings = calloc(n, sizeof *d->rings);
        d->glue = calloc(n, sizeof *d->glue);
    }
    dion_status_t st =
        d && d->rings && d->glue ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory");
    dion_proxy_ring_dev_t *host = st == DION_SUCCESS ? calloc(n, sizeof *host) : NULL;
    if (st == DION_SUCCESS && !host) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
    for (uint32_t i = 0; i < n && st == DION_SUCCESS; i++) {
        st = dion__proxy_ring_create(i, DION__PX_SLOTS, !cpu, &d->rings[i]);
        if (st != DION_SUCCESS) break;
        d->nrings = i + 1;
        d->rings[i]->dev.abort = dev->signals + dev->num_signals + DION_CTL_ABORT;
        host[i] = d->rings[i]->dev;
        dion__pxg_t *g = &d->glue[i];
        g->r = d->rings[i];
        g->r->glue = g;
        g->d = d;
        g->cnt = calloc(DION__PX_SLOTS, 1);
        g->meta = calloc(DION__PX_SLOTS, sizeof *g->meta);
        if (!g->cnt || !g->meta) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
    }
    if (st == DION_SUCCESS) {
        if (cpu) {
            d->devrings = host;
            host = NULL;
        } else {
            st = dion__cuda_check(cudaMalloc((void **)&d->devrings, sizeof *host * n),
                                  "cudaMalloc for ring table");
            if (st == DION_SUCCESS)
                st = dion__cuda_check(cudaMemcpy(d->devrings, host, sizeof *host * n, cudaMemcpyHostToDevice),
                                      "copying the ring table");
        }
    }
    free(host);
    if (st == DION_SUCCESS) {
        pthread_mutex_lock(&pc->mu);
        uint32_t k = 0;
        for (uint32_t gid = 1; gid < DION__PX_GLUES && k < n; gid++)
            if (!pc->gtab[gid]) {
                pc->gtab[gid] = &d->glue[k];
                d->glue[k++].gid = gid;
            }
        if (k < n) {
            for (uint32_t i = 0; i < k; i++) pc->gtab[d->glue[i].gid] = NULL;
            st = dion__error(
                DION_ERR_NO_MEMORY,
                "proxy backend: the comm's device handles would have more than %u contexts together",
                DION__PX_GLUES - 1);
        } else {
            d->next = pc->devs;
            pc->devs = d;
        }
        pthread_mutex_unlock(&pc->mu);
        if (st == DION_SUCCESS) st = dion__px_threads(pc);
    }
    if (st != DION_SUCCESS) {
        if (d) dion__px_dev_free(d);
        return st;
    }
    (void)c;
    dev->proxy_rings = d->devrings;
    *out = d;
    return DION_SUCCESS;
}

static void dion__px_dev_fini(dion_comm_t c, void *state, void *dev_state)
{
    (void)c;
    dion__pxc_t *pc = state;
    dion__pxd_t *d = dev_state;
    dion__proxy_threads_stop(pc->threads);
    pc->threads = NULL;
    /* operations of this handle still in flight finish (or fail) before its memory goes: bounded */
    uint64_t start = dion__now_ns();
    for (;;) {
        pthread_mutex_lock(&pc->mu);
        dion__px_poll_locked(pc);
        uint64_t left = 0;
        for (uint32_t i = 0; i < d->nrings; i++) left += d->rings[i]->failed ? 0 : d->glue[i].inflight;
        pthread_mutex_unlock(&pc->mu);
        if (!left || dion__now_ns() - start > 5000000000ull) break;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&pc->mu);
    for (uint32_t i = 0; i < d->nrings; i++) {
        if (d->glue[i].gid) pc->gtab[d->glue[i].gid] = NULL;
        pc->inflight -= d->glue[i].inflight < pc->inflight ? d->glue[i].inflight : pc->inflight;
    }
    dion__pxd_t **pp = &pc->devs;
    while (*pp && *pp != d) pp = &(*pp)->next;
    if (*pp) *pp = d->next;
    pthread_mutex_unlock(&pc->mu);
    dion__px_dev_free(d);
    if (dion__px_threads(pc) != DION_SUCCESS)
        DION_LOG(DION_LOG_WARN, "proxy backend: could not restart the proxy threads: %s", dion_last_error());
}

static int dion__px_dev_why(void *dev_state, uint32_t ctx, char *out, size_t cap)
{
    dion__pxd_t *d = dev_state;
    if (ctx >= d->nrings || !d->glue[ctx].why[0]) return 0;
    snprintf(out, cap, "%s", d->glue[ctx].why); /* written once, before the ring's status is published */
    return 1;
}

static int dion__px_signals_on_host(dion_comm_t c, void *state)
{
    (void)c;
    dion__pxc_t *pc = state;
    return pc && !pc->caps.cuda_mem;
}

const dion__tl_ops_t dion__tl_proxy = {
    .name = "proxy",
    .kind = DION_TRANSPORT_PROXY,
    .desc_size = sizeof(dion__engine_rkey_t),
    .exp_size = sizeof(dion__px_exp_t),
    .imp_size = sizeof(dion__engine_rkey_t),
    .share_size = 0,
    .usable = dion__px_usable,
    .reachable = dion__px_reach,
    .peer_scope = dion__px_scope,
    .mem_export = dion__px_export,
    .mem_share = NULL,
    .mem_import = dion__px_import,
    .share_release = NULL,
    .mem_release = dion__px_release,
    .mem_unexport = dion__px_unexport,
    .desc_on_host = dion__px_on_host,
    .comm_init = dion__px_comm_init,
    .comm_fini = dion__px_comm_fini,
    .region_done = dion__px_region_done,
    .region_named = dion__px_region_named,
    .region_forget = dion__px_region_forget,
    .dev_init = dion__px_dev_init,
    .dev_fini = dion__px_dev_fini,
    .dev_why = dion__px_dev_why,
    .signals_on_host = dion__px_signals_on_host,
};
