/* The verbs engine (engine_verbs.c) behind engine.h, so that the proxy backend can drive it like ofi.
 *
 * Shape: one engine per comm (proxy_ops.c opens one and serializes calls on it), hence one verbs context (one
 * CQ) and one RC QP per peer that the proxy serves, shared by every context of every device handle. Sharing
 * is correct because the proxy executes each ring in order and a QP keeps (and strengthens) that order; it is
 * what docs/multihost.md's scale model recommends over a QP per (context, peer).
 *
 * Connection, DION_IB_CONNECT (vx_connect_mode). Eager: at comm creation each rank creates its QPs, the
 * per-peer blobs (QP number, PSN, LID, GID, MTU) travel in one allgather, and each rank connects its QPs; no
 * QP waits for its peer's (RC accepts packets once the responder is in RTR, and both ends are before the
 * first command can be posted, since comm creation ends with an agreement). On demand: only each rank's
 * listener address travels at comm creation (address/connect); a post to a peer without a ready QP starts the
 * handshake of verbs_cm.h and returns BUSY until it completed, so the proxy posts the command again after
 * polling, and poll drives the handshakes (also those that peers start with this rank).
 *
 * Operations: put = RDMA WRITE, get = RDMA READ, fetch-add and compare-swap = 8-byte ATOMICs whose old value
 * lands in a registered word of this engine's operation table, ADD signal = ATOMIC fetch-add, SET signal = an
 * 8-byte inline RDMA WRITE; the ordering argument is in engine_verbs.h. A completion means the responder
 * acknowledged (RC): the data is in the target's memory. Error completions come back with the decoded status
 * as the sentence, naming the peer. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "src/internal.h"

#if DION_HAVE_VERBS

#include "engine_verbs.h"
#include "src/cuda.h"
#include "verbs_cm.h"

#define VX_MAX_MSG 0x80000000ull /* a verbs message is at most 2^31 bytes */

typedef struct {
    uint64_t cookie;
    int peer;
    uint8_t fetch; /* the completion carries the old value from res[] */
} vop_t;

/* The engine (cast to and from dion__engine_t; its tag is ofi's). */
typedef struct {
    dion__verbs_t *v;
    int rank, nranks, cuda;
    uint32_t nops, nfree;
    uint32_t *free_stack;
    vop_t *ops;
    uint64_t *res; /* [nops] old values of fetching atomics, registered */
    dion__verbs_mr_t *res_mr;
    uint32_t *pend; /* [nranks] posted, not yet polled */
    uint32_t pend_all;
    uint32_t polls;
    dion__vcm_t *cm; /* on-demand connection (verbs_cm.h); NULL: eager, through peer_address/peer_connect */
    uint8_t cm_addr[DION__VCM_ADDR_BYTES];
} vx_t;

static vx_t *vx(dion__engine_t *e)
{
    return (vx_t *)(void *)e;
}

static void vx_close(dion__engine_t *e)
{
    vx_t *x = vx(e);
    if (!x) return;
    if (x->res_mr) dion__verbs_mem_dereg(x->v, x->res_mr);
    dion__vcm_close(x->cm);
    dion__verbs_close(x->v);
    free(x->res);
    free(x->ops);
    free(x->free_stack);
    free(x->pend);
    free(x);
}

/* Whether GPU memory registers here (dmabuf or nvidia-peermem), tried on a small cudaMalloc: where it does
 * not, the proxy keeps signal tables in host memory and refuses GPU windows with a sentence, instead of
 * failing at the first registration. */
static int vx_gpu_probe(vx_t *x, int device)
{
    int prev = -1, ok = 0;
    void *p = NULL;
    if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(device) != cudaSuccess ||
        cudaMalloc(&p, 1 << 16) != cudaSuccess) {
        cudaGetLastError();
        DION_LOG(DION_LOG_INFO, "proxy/verbs: no GPU memory to try registering on device %d", device);
    } else {
        dion__verbs_mr_t *m = NULL;
        ok = dion__verbs_mem_reg(x->v, p, 1 << 16, DION__VERBS_MEM_GPU, &m) == DION_SUCCESS;
        if (ok)
            DION_LOG(DION_LOG_INFO, "proxy/verbs: GPU memory registers (%s)",
                     m->path == DION__VERBS_REG_DMABUF ? "dmabuf" : "nvidia-peermem");
        else
            DION_LOG(DION_LOG_INFO,
                     "proxy/verbs: GPU memory does not register, GPU windows will be refused: %s",
                     dion_last_error());
        dion__verbs_mem_dereg(x->v, m);
        dion__error_clear();
    }
    if (p) cudaFree(p);
    if (prev >= 0) cudaSetDevice(prev);
    return ok;
}

/* DION_IB_CONNECT: eager (QPs to every peer at comm creation), ondemand (verbs_cm.h), or auto (eager up to
 * DION_IB_EAGER_MAX_RANKS ranks, the range docs/multihost.md's scale model finds cheap, on demand above). On
 * demand opens the listener whose address the proxy exchanges through engine.h's address/connect. */
static dion_status_t vx_connect_mode(vx_t *x)
{
    int mode = 0;
    long long eager_max = 0;
    uint64_t timeout = 0;
    dion_status_t s = dion__cfg_enum("DION_IB_CONNECT", &mode);
    if (s == DION_SUCCESS) s = dion__cfg_int("DION_IB_EAGER_MAX_RANKS", 1, 1 << 24, &eager_max);
    if (s == DION_SUCCESS) s = dion__cfg_duration_ns("DION_WAIT_TIMEOUT", &timeout);
    if (s == DION_SUCCESS && !timeout) s = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &timeout);
    if (s != DION_SUCCESS) return s;
    if (mode == 1 || (mode == 0 && x->nranks <= eager_max)) return DION_SUCCESS;
    DION_LOG(DION_LOG_INFO, "proxy/verbs: QPs are connected on demand (DION_IB_CONNECT=%s, %d ranks)",
             mode == 2 ? "ondemand" : "auto", x->nranks);
    return dion__vcm_open(x->v, x->rank, x->nranks, timeout ? timeout : 60000000000ull, &x->cm, x->cm_addr);
}

static dion_status_t vx_open(const dion__engine_open_args_t *a, dion__engine_t **out, char *why, size_t cap)
{
    char scratch[8];
    if (!why || !cap) why = scratch, cap = sizeof scratch;
    why[0] = 0;
    *out = NULL;
    if (!a || a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks) {
        snprintf(why, cap, "verbs engine: rank/nranks out of range");
        return DION_ERR_INVALID_ARG;
    }
    vx_t *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(why, cap, "verbs engine: out of memory");
        return DION_ERR_NO_MEMORY;
    }
    x->rank = a->rank;
    x->nranks = a->nranks;
    x->cuda = a->want_cuda && a->cuda_device >= 0;
    dion__verbs_open_args_t va = {.nctx = 1, .npeers = a->nranks, .my_rank = a->rank, .libname = NULL};
    dion_status_t s = dion__verbs_open(&va, &x->v);
    if (s != DION_SUCCESS) {
        snprintf(why, cap, "%s", dion_last_error());
        free(x);
        return s;
    }
    x->nops = a->max_ops ? a->max_ops : 1024;
    x->nfree = x->nops;
    x->free_stack = calloc(x->nops, sizeof *x->free_stack);
    x->ops = calloc(x->nops, sizeof *x->ops);
    x->pend = calloc((size_t)x->nranks, sizeof *x->pend);
    if (posix_memalign((void **)&x->res, 64, 8 * (size_t)x->nops)) x->res = NULL;
    if (!x->free_stack || !x->ops || !x->pend || !x->res) {
        snprintf(why, cap, "verbs engine: out of memory for %u operation slots", x->nops);
        vx_close((dion__engine_t *)(void *)x);
        return DION_ERR_NO_MEMORY;
    }
    memset(x->res, 0, 8 * (size_t)x->nops);
    for (uint32_t i = 0; i < x->nops; i++) x->free_stack[i] = x->nops - 1 - i;
    s = dion__verbs_mem_reg(x->v, x->res, 8 * (size_t)x->nops, DION__VERBS_MEM_HOST, &x->res_mr);
    if (s != DION_SUCCESS) {
        snprintf(why, cap, "%s", dion_last_error());
        vx_close((dion__engine_t *)(void *)x);
        return s;
    }
    if (x->cuda) x->cuda = vx_gpu_probe(x, a->cuda_device);
    if (x->nranks > 1 && (s = vx_connect_mode(x)) != DION_SUCCESS) {
        snprintf(why, cap, "%s", dion_last_error());
        vx_close((dion__engine_t *)(void *)x);
        return s;
    }
    *out = (dion__engine_t *)(void *)x;
    return DION_SUCCESS;
}

static void vx_query(dion__engine_t *e, dion__engine_caps_t *c)
{
    vx_t *x = vx(e);
    memset(c, 0, sizeof *c);
    /* "mlx5_0 port 1, RoCE, ...": the device and port as provider, the rest as domain */
    const char *d = dion__verbs_describe(x->v);
    const char *comma = strchr(d, ',');
    size_t n = comma ? (size_t)(comma - d) : strlen(d);
    snprintf(c->provider, sizeof c->provider, "%.*s",
             (int)(n < sizeof c->provider ? n : sizeof c->provider - 1), d);
    snprintf(c->domain, sizeof c->domain, "%s", comma ? comma + 2 : "");
    snprintf(c->order, sizeof c->order, "rc_order");
    c->cuda_mem =
        x->cuda; /* dmabuf, else nvidia-peermem; a window that neither takes fails with both reasons */
    c->delivery_complete = 1;
    c->manual_progress = 0;
    c->max_ops = x->nops;
    c->max_msg = VX_MAX_MSG;
    c->api_version = 0;
    c->connect_ondemand = x->cm != NULL;
}

/* On demand: this rank's listener address; the proxy allgathers it and hands every rank's to vx_connect. */
static dion_status_t vx_address(dion__engine_t *e, dion__engine_addr_t *out)
{
    vx_t *x = vx(e);
    memset(out, 0, sizeof *out);
    if (!x->cm) return dion__error_set(DION_ERR_INTERNAL, "verbs address: the engine connects eagerly");
    out->len = DION__VCM_ADDR_BYTES;
    out->engine_version = DION__ENGINE_VERSION;
    memcpy(out->bytes, x->cm_addr, DION__VCM_ADDR_BYTES);
    return DION_SUCCESS;
}

static dion_status_t vx_connect(dion__engine_t *e, const dion__engine_addr_t *all, int nranks)
{
    vx_t *x = vx(e);
    if (!x->cm) return dion__error_set(DION_ERR_INTERNAL, "verbs connect: the engine connects eagerly");
    uint8_t *flat = calloc((size_t)(nranks > 0 ? nranks : 1), DION__VCM_ADDR_BYTES);
    if (!flat) return dion__error_set(DION_ERR_NO_MEMORY, "verbs connect: out of memory");
    for (int r = 0; r < nranks; r++) {
        if (all[r].engine_version != DION__ENGINE_VERSION || all[r].len != DION__VCM_ADDR_BYTES) {
            free(flat);
            return dion__error_set(
                DION_ERR_INTERNAL,
                "verbs connect: rank %d's address is not an on-demand verbs address (engine "
                "version %u, %u bytes): does every rank set the same DION_IB_CONNECT?",
                r, all[r].engine_version, all[r].len);
        }
        memcpy(flat + (size_t)r * DION__VCM_ADDR_BYTES, all[r].bytes, DION__VCM_ADDR_BYTES);
    }
    dion_status_t s = dion__vcm_peers(x->cm, flat, nranks);
    free(flat);
    return s;
}

static dion_status_t vx_peer_address(dion__engine_t *e, int peer, uint8_t *out)
{
    return dion__verbs_addr_get(vx(e)->v, 0, peer, out);
}

static dion_status_t vx_peer_connect(dion__engine_t *e, int peer, const uint8_t *theirs)
{
    return dion__verbs_connect(vx(e)->v, 0, peer, theirs, DION__VERBS_ADDR_BYTES);
}

static dion_status_t vx_mem_reg(dion__engine_t *e, void *base, size_t bytes, int mem, dion__engine_mr_t **mr,
                                dion__engine_rkey_t *rkey)
{
    vx_t *x = vx(e);
    if (!base || !bytes || !mr || !rkey)
        return dion__error_set(DION_ERR_INVALID_ARG, "verbs mem_reg: base, bytes, mr and rkey are required");
    dion__verbs_mr_t *m = NULL;
    dion_status_t s = dion__verbs_mem_reg(
        x->v, base, bytes, mem == DION__ENGINE_MEM_CUDA ? DION__VERBS_MEM_GPU : DION__VERBS_MEM_HOST, &m);
    if (s != DION_SUCCESS) return s;
    memset(rkey, 0, sizeof *rkey);
    rkey->addr = (uint64_t)(uintptr_t)base;
    rkey->key = m->rkey;
    rkey->len = bytes;
    rkey->flags = (uint32_t)mem;
    rkey->engine_version = DION__ENGINE_VERSION;
    *mr = (dion__engine_mr_t *)(void *)m;
    return DION_SUCCESS;
}

static dion_status_t vx_mem_dereg(dion__engine_t *e, dion__engine_mr_t *mr)
{
    dion__verbs_mem_dereg(vx(e)->v, (dion__verbs_mr_t *)(void *)mr);
    return DION_SUCCESS;
}

/* Checks a post's peer and target range; a sentence when they are wrong. */
static dion_status_t vx_check(vx_t *x, const char *what, int peer, const dion__engine_rkey_t *rk,
                              uint64_t roff, uint64_t bytes)
{
    if (peer < 0 || peer >= x->nranks || peer == x->rank)
        return dion__error_set(DION_ERR_INVALID_ARG, "verbs %s: rank %d is not a peer of rank %d (%d ranks)",
                               what, peer, x->rank, x->nranks);
    if (!rk || rk->engine_version != DION__ENGINE_VERSION)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "verbs %s to rank %d: the remote key is not the engine's", what, peer);
    if (roff > rk->len || bytes > rk->len - roff || bytes > VX_MAX_MSG)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "verbs %s of %llu bytes at offset %llu of rank %d's region of %llu bytes: out "
                               "of bounds (or beyond the 2 GiB a verbs message carries)",
                               what, (unsigned long long)bytes, (unsigned long long)roff, peer,
                               (unsigned long long)rk->len);
    if (x->cm) return dion__vcm_ready(x->cm, peer); /* BUSY while the handshake runs; it starts here */
    if (!dion__verbs_connected(x->v, 0, peer))
        return dion__error_set(DION_ERR_INTERNAL, "verbs %s: no connected QP to rank %d", what, peer);
    return DION_SUCCESS;
}

/* An operation slot, or -1 when every slot or the QP's send queue is full (the caller returns BUSY). */
static int vx_take(vx_t *x, int peer, uint64_t cookie, int fetch)
{
    if (!x->nfree || dion__verbs_room(x->v, 0, peer) < 1) return -1;
    uint32_t i = x->free_stack[--x->nfree];
    x->ops[i] = (vop_t){cookie, peer, (uint8_t)fetch};
    return (int)i;
}

static dion_status_t vx_posted(vx_t *x, int slot, dion_status_t s)
{
    if (s != DION_SUCCESS) {
        x->free_stack[x->nfree++] = (uint32_t)slot;
        return s;
    }
    x->pend[x->ops[slot].peer]++;
    x->pend_all++;
    return DION_SUCCESS;
}

static unsigned vx_flags(uint32_t flags)
{
    return (flags & DION__ENGINE_F_ORDERED) ? DION__VERBS_ORDERED : 0u;
}

static dion_status_t vx_put(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, const void *src,
                            const dion__engine_rkey_t *rkey, uint64_t roff, size_t bytes, uint32_t flags,
                            uint64_t cookie)
{
    vx_t *x = vx(e);
    dion_status_t s = vx_check(x, "put", peer, rkey, roff, bytes);
    if (s != DION_SUCCESS) return s;
    int slot = vx_take(x, peer, cookie, 0);
    if (slot < 0) return DION__ENGINE_BUSY;
    dion__verbs_local_t l = {(uint64_t)(uintptr_t)src, lmr ? ((dion__verbs_mr_t *)(void *)lmr)->lkey : 0};
    return vx_posted(x, slot,
                     dion__verbs_post_put(x->v, 0, peer, l, (uint32_t)bytes, rkey->addr + roff,
                                          (uint32_t)rkey->key, vx_flags(flags), (uint64_t)slot));
}

static dion_status_t vx_get(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, void *dst,
                            const dion__engine_rkey_t *rkey, uint64_t roff, size_t bytes, uint32_t flags,
                            uint64_t cookie)
{
    vx_t *x = vx(e);
    dion_status_t s = vx_check(x, "get", peer, rkey, roff, bytes);
    if (s != DION_SUCCESS) return s;
    int slot = vx_take(x, peer, cookie, 0);
    if (slot < 0) return DION__ENGINE_BUSY;
    dion__verbs_local_t l = {(uint64_t)(uintptr_t)dst, lmr ? ((dion__verbs_mr_t *)(void *)lmr)->lkey : 0};
    return vx_posted(x, slot,
                     dion__verbs_post_get(x->v, 0, peer, l, (uint32_t)bytes, rkey->addr + roff,
                                          (uint32_t)rkey->key, vx_flags(flags), (uint64_t)slot));
}

static dion_status_t vx_atomic(dion__engine_t *e, int peer, dion__engine_amo_t op,
                               const dion__engine_rkey_t *rkey, uint64_t roff, uint64_t operand,
                               uint64_t compare, uint32_t flags, uint64_t cookie)
{
    vx_t *x = vx(e);
    dion_status_t s = vx_check(x, "atomic", peer, rkey, roff, 8);
    if (s != DION_SUCCESS) return s;
    if ((unsigned)op >= DION__ENGINE_AMO_COUNT)
        return dion__error_set(DION_ERR_INVALID_ARG, "verbs atomic: unknown operation %d", (int)op);
    int fetch = op == DION__ENGINE_AMO_FETCH_ADD || op == DION__ENGINE_AMO_CSWAP;
    int slot = vx_take(x, peer, cookie, fetch);
    if (slot < 0) return DION__ENGINE_BUSY;
    uint64_t raddr = rkey->addr + roff;
    uint32_t rk = (uint32_t)rkey->key;
    if (!fetch) /* a signal: the engine's put_signal without data, ordered behind earlier WRITEs */
        return vx_posted(x, slot,
                         dion__verbs_post_put_signal(
                             x->v, 0, peer, (dion__verbs_local_t){0, 0}, 0, 0, 0, raddr, rk,
                             op == DION__ENGINE_AMO_ADD ? DION__VERBS_SIG_ADD : DION__VERBS_SIG_SET, operand,
                             vx_flags(flags), (uint64_t)slot));
    x->res[slot] = 0;
    dion__verbs_local_t res = {(uint64_t)(uintptr_t)&x->res[slot], x->res_mr->lkey};
    return vx_posted(x, slot,
                     dion__verbs_post_atomic(
                         x->v, 0, peer, op == DION__ENGINE_AMO_CSWAP ? DION__VERBS_CSWAP : DION__VERBS_FADD,
                         res, raddr, rk, operand, compare, vx_flags(flags), (uint64_t)slot));
}

static int vx_poll(dion__engine_t *e, dion__engine_cqe_t *out, int max)
{
    vx_t *x = vx(e);
    dion__verbs_cqe_t vc[32];
    if (max > 32) max = 32;
    /* fatal QP, port and device events: read now and then (a syscall each time on a real device) */
    if ((++x->polls & 255u) == 0) dion__verbs_async_poll(x->v);
    if (x->cm) dion__vcm_progress(x->cm); /* handshakes: ours and those peers start with us */
    int n = dion__verbs_poll(x->v, 0, vc, max);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        uint32_t slot = (uint32_t)vc[i].cookie;
        vop_t *o = &x->ops[slot];
        out[i].cookie = o->cookie;
        out[i].value = o->fetch && vc[i].status == DION_SUCCESS ? x->res[slot] : 0;
        out[i].status = vc[i].status;
        out[i].peer = o->peer;
        snprintf(out[i].why, sizeof out[i].why, "%s", vc[i].why);
        if (x->pend[o->peer]) x->pend[o->peer]--;
        if (x->pend_all) x->pend_all--;
        x->free_stack[x->nfree++] = slot;
    }
    return n;
}

static uint32_t vx_pending(dion__engine_t *e, int peer)
{
    vx_t *x = vx(e);
    if (peer < 0) return x->pend_all;
    return peer < x->nranks ? x->pend[peer] : 0;
}

const dion__engine_ops_t dion__engine_verbs = {
    .version = DION__ENGINE_VERSION,
    .name = "verbs",
    .open = vx_open,
    .query = vx_query,
    .address = vx_address,
    .connect = vx_connect,
    .peer_addr_bytes = DION__VERBS_ADDR_BYTES,
    .peer_address = vx_peer_address,
    .peer_connect = vx_peer_connect,
    .mem_reg = vx_mem_reg,
    .mem_dereg = vx_mem_dereg,
    .put = vx_put,
    .get = vx_get,
    .atomic = vx_atomic,
    .poll = vx_poll,
    .pending = vx_pending,
    .close = vx_close,
};

#else /* built without <infiniband/verbs.h>: the engine exists and says why it cannot open */

static dion_status_t vx_open(const dion__engine_open_args_t *a, dion__engine_t **out, char *why, size_t cap)
{
    (void)a;
    *out = NULL;
    if (why && cap)
        snprintf(why, cap,
                 "libdion was built without <infiniband/verbs.h>; install libibverbs-dev (rdma-core) and "
                 "rebuild to use the verbs engine");
    return DION_ERR_UNSUPPORTED;
}

const dion__engine_ops_t dion__engine_verbs = {
    .version = DION__ENGINE_VERSION, .name = "verbs", .open = vx_open};

#endif
