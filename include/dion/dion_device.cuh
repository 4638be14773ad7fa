/** \file dion_device.cuh
 * DION device API. Every function is __host__ __device__: in a kernel it runs on GPU threads; compiled as C11
 * (or called from host code) it runs on CPU threads over host windows (CPU mode, see dion_cpu_launch).
 *
 * Semantics (docs/semantics.md has the full table per backend):
 * - put: returns when issued; the source may be reused after dion_quiet on the same context.
 * - put_signal: returns when issued; the target sees the signal change only after this put's data.
 * - signal: release: ordered after every earlier put of the caller to that peer (the _RELAXED ops are not).
 * - wait: acquire: data of puts whose signal it observed is visible after it returns.
 * - fence: earlier puts and atomics of the caller are ordered before its later signals, atomics and barriers
 *   (not before a later plain put that the target polls).
 * - quiet: every earlier operation of the caller is complete: sources reusable, data delivered.
 * - barrier: every rank reached it (one thread per context per rank); includes a quiet.
 * - put_counted / put_signal_counted: as put / put_signal, and a local counter of the context goes up by 1
 *   once the source may be reused; dion_counter_wait waits for a count (recycles buffers without a quiet).
 *
 * The warp and block variants are called by every thread of the warp / block with the same arguments; they
 * share the copy and end with the group synchronized, so that one thread's later signal or quiet covers the
 * whole group's stores. Offsets are bytes into the named rank's part of a window. Nothing here returns an
 * error for a bad argument unless DION_CHECK=1: then every call checks its arguments and writes an error
 * record (dion_dev_check) instead of touching memory. */
#ifndef DION_DEVICE_CUH
#define DION_DEVICE_CUH

#include "dion/dion_types.h"
#include "dion/device/arch.cuh"
#include "dion/device/common.cuh"
#include "dion/device/p2p.cuh"
#include "dion/device/trace.cuh"

/* Which backends' device halves are compiled in. Without the proxy's, every operation compiles to the p2p
 * code alone; with it, each operation has one dispatch point on the peer's transport kind, behind the
 * handle's DION_DEVF_PROXY flag (a parameter the p2p path reads anyway for its scope). */
#define DION_DEVICE_BACKEND_P2P   1u /**< bit of DION_DEVICE_BACKENDS: p2p (always compiled) */
#define DION_DEVICE_BACKEND_PROXY 2u /**< bit of DION_DEVICE_BACKENDS: the CPU proxy (device/proxy.cuh) */
#define DION_DEVICE_BACKEND_GDAKI                                                                            \
    4u /**< bit of DION_DEVICE_BACKENDS: gdaki, mlx5 WQEs posted from device code */
#ifndef DION_DEVICE_BACKENDS
#if defined(__CUDA_ARCH__)
/** The device halves compiled into kernels; define it before including this header to change it. GPU code
 * has the p2p half alone by default: with the proxy's dispatch compiled in, kernels took more registers and
 * 1024-thread blocks of the conformance suite and p2p_bench no longer launched on an H200 (2026-11-30). GPU
 * kernels that reach peers through the proxy are built with
 * -DDION_DEVICE_BACKENDS=3 (DION_DEVICE_BACKEND_P2P | DION_DEVICE_BACKEND_PROXY) and with launch bounds that
 * fit; CPU mode has both halves. */
#define DION_DEVICE_BACKENDS DION_DEVICE_BACKEND_P2P
#else
/** The device halves compiled into host (CPU-mode) code: p2p, the proxy and gdaki. */
#define DION_DEVICE_BACKENDS (DION_DEVICE_BACKEND_P2P | DION_DEVICE_BACKEND_PROXY | DION_DEVICE_BACKEND_GDAKI)
#endif
#endif
#define DION__HAS_PROXY ((DION_DEVICE_BACKENDS & DION_DEVICE_BACKEND_PROXY) != 0)
#define DION__HAS_GDAKI ((DION_DEVICE_BACKENDS & DION_DEVICE_BACKEND_GDAKI) != 0)

/* The counter argument of the put paths when the call counts nothing (dion_put, dion_put_signal). */
#define DION__NO_COUNTER 0xffffffffu

#if DION__HAS_PROXY
#include "dion/device/proxy.cuh"

DION__STATIC_ASSERT(DION_NUM_COUNTERS == DION_PROXY_LCOUNTERS,
                    "a counter's value adds the ring's count of the same index: both have the same number");

/* The proxy's halves that post and wait stay out of line on the GPU: they cost microseconds anyway, and
 * inlined they would weigh on the register allocation of the p2p code they sit next to. They take the ring,
 * the timeout and a command by pointer, never the context: a dion_ctx_t holds the whole handle (about 610
 * bytes), and its address handed to a call that is not inlined makes the compiler copy the handle from the
 * kernel's parameters onto the stack at every such call (up to 4 KB of stack and 224 registers per kernel
 * before this shape, docs/gpu_kernels.md). Error records, statistics and trace events stay in the inlined
 * caller, which reads the context where it is. */
#if defined(__CUDACC__)
#define DION__PROXY_PATH static __noinline__ __host__ __device__
#else
#define DION__PROXY_PATH static inline
#endif
#if defined(__GNUC__) || defined(__CUDACC__)
#define DION__COLD(x) __builtin_expect(!!(x), 0)
#else
#define DION__COLD(x) (x)
#endif

/* Whether peer is served by the proxy: commands into this context's ring instead of loads and stores. The
 * flag comes first: a p2p handle pays one test of a kernel parameter. */
DION_HD int dion__is_proxy(const dion_ctx_t *c, int peer)
{
    return DION__COLD((c->dev.flags & DION_DEVF_PROXY) &&
                      dion__peer_transport(&c->dev, peer) == DION_TRANSPORT_PROXY);
}

/* Whether an atomic on peer's window goes through the proxy. On a handle with proxy peers, this rank's
 * atomics on its own window go there too: the engine applies remote atomics with CPU (or NIC) atomics, which
 * are not atomic with respect to GPU atomics on the same word (a GPU atomic on pinned host memory crosses
 * PCIe as a read and a write), so one word must see one kind. docs/semantics.md says what this leaves open.
 */
DION_HD int dion__proxy_amo_route(const dion_ctx_t *c, int peer)
{
    return DION__COLD(
        (c->dev.flags & DION_DEVF_PROXY) &&
        (peer == (int)c->dev.rank || dion__peer_transport(&c->dev, peer) == DION_TRANSPORT_PROXY));
}

/* Whether a signal to peer goes through the proxy. On a handle with proxy peers whose signal table is host
 * memory, this rank's signals to itself go there too: the proxy's engine applies the peers' signal ADDs with
 * CPU atomics (shm, tcp: in the target's proxy), and a GPU red.add on pinned host memory crosses PCIe as a
 * read and a write, so a peer's ADD landing in between was lost (issue 8: "ADD from all ranks" read 1 of 3
 * over shm on the H200). One word must see one kind of atomic, as for dion__proxy_amo_route. */
DION_HD int dion__proxy_sig_route(const dion_ctx_t *c, int peer)
{
    return DION__COLD((c->dev.flags & DION_DEVF_PROXY) &&
                      (peer == (int)c->dev.rank
                           ? (c->dev.flags & DION_DEVF_SIGHOST) != 0
                           : dion__peer_transport(&c->dev, peer) == DION_TRANSPORT_PROXY));
}

DION_HD const dion_proxy_ring_dev_t *dion__ctx_ring(const dion_ctx_t *c)
{
    return &c->dev.proxy_rings[c->index];
}

/* A ring that timed out or failed: an error record like p2p's (the abort words already say why for aborts
 * and failed peers). */
DION_HD void dion__proxy_error(const dion_ctx_t *c, dion_status_t st, dion_op_t op, int peer, uint32_t sig,
                               uint64_t seen)
{
    if (st == DION_SUCCESS || st == DION_ERR_ABORTED || st == DION_ERR_PEER_FAILED) return;
    dion__err_t e = dion__err(st, op, peer);
    e.sig = sig;
    e.observed = seen;
    e.detail = DION_ERR_DETAIL_PROXY;
    e.limit = c->dev.wait_timeout_ns;
    dion__record(c, e);
}

/* Posts *cmd into ring r; with wait, also waits until it is complete (get: the data is in place; quiet:
 * everything before it is). *seen: the counter last read, on failure. */
DION__PROXY_PATH dion_status_t dion__proxy_submit(const dion_proxy_ring_dev_t *r, uint64_t timeout_ns,
                                                  const dion_proxy_cmd_t *cmd, int wait, uint64_t *seen)
{
    uint64_t t = 0;
    dion_status_t st = dion__proxy_post(r, cmd, timeout_ns, &t, seen);
    if (st == DION_SUCCESS && wait) st = dion__proxy_wait_complete(r, t, timeout_ns, seen);
    return st;
}

/* A fetching atomic: *out gets the old value, or on failure the counter last read. */
DION__PROXY_PATH dion_status_t dion__proxy_fetch_path(const dion_proxy_ring_dev_t *r, uint64_t timeout_ns,
                                                      const dion_proxy_cmd_t *cmd, uint64_t *out)
{
    uint64_t old = 0, seen = 0;
    dion_status_t st = dion__proxy_fetch(r, cmd, timeout_ns, &old, &seen);
    *out = st == DION_SUCCESS ? old : seen;
    return st;
}

/* The group's leader posts, after the caller's group sync (every thread's window stores are then ordered
 * before the post's release store). Only the leader enters: when every thread of a 1024-thread block took
 * this path, each spilled around the out-of-line post and the block rows ran at 37 µs instead of 9 (H200,
 * 2026-11-30). Inline, so that the context stays where it is; the post itself is out of line. */
DION_HD void dion__proxy_rma_lead(const dion_ctx_t *c, dion_proxy_op_t pop, dion_op_t op, int peer,
                                  dion_dwin_t dst, size_t dst_off, dion_dwin_t src, size_t src_off,
                                  size_t bytes, uint32_t sig, dion_sig_op_t sop, uint64_t value,
                                  uint32_t counter, uint64_t t0)
{
    dion_proxy_cmd_t cmd = dion__proxy_cmd_rma(pop, peer, dion__win_id(&c->dev, dst), dst_off,
                                               dion__win_id(&c->dev, src), src_off, bytes);
    if (pop == DION_PROXY_OP_PUT_SIGNAL) dion__proxy_cmd_signal(&cmd, sig, (uint32_t)sop, value);
    if (counter != DION__NO_COUNTER) dion__proxy_cmd_count(&cmd, counter); /* the proxy thread counts it */
    uint64_t seen = 0;
    dion_status_t st =
        dion__proxy_submit(dion__ctx_ring(c), c->dev.wait_timeout_ns, &cmd, pop == DION_PROXY_OP_GET, &seen);
    if (DION__COLD(st != DION_SUCCESS)) dion__proxy_error(c, st, op, peer, sig, seen);
    if (pop == DION_PROXY_OP_GET) {
        DION__STAT(c, gets, 1);
        DION__STAT(c, get_bytes, bytes);
    } else {
        DION__STAT(c, puts, 1);
        DION__STAT(c, put_bytes, bytes);
        if (pop == DION_PROXY_OP_PUT_SIGNAL) DION__STAT(c, signals, 1);
    }
    DION__TRACE(c, t0, op, peer, sig, bytes, value, 0, (uint32_t)sop, st);
}

DION_HD uint64_t dion__proxy_amo(const dion_ctx_t *c, dion_proxy_op_t pop, dion_op_t op, dion_dwin_t w,
                                 int peer, size_t off, uint64_t operand, uint64_t desired)
{
    dion_proxy_cmd_t cmd = dion__proxy_cmd(pop, peer);
    cmd.u.amo.win = dion__win_id(&c->dev, w);
    cmd.u.amo.off = off;
    cmd.u.amo.operand = operand;
    cmd.u.amo.desired = desired;
    uint64_t out = 0;
    dion_status_t st = dion__proxy_fetch_path(dion__ctx_ring(c), c->dev.wait_timeout_ns, &cmd, &out);
    if (DION__COLD(st != DION_SUCCESS)) {
        dion__proxy_error(c, st, op, peer, 0, out);
        return 0;
    }
    return out;
}

/* signal (and barrier arrivals): a SIGNAL command. */
DION_HD dion_status_t dion__proxy_signal(const dion_ctx_t *c, int peer, uint32_t sig, uint32_t op,
                                         uint64_t value, dion_op_t what)
{
    dion_proxy_cmd_t cmd = dion__proxy_cmd(DION_PROXY_OP_SIGNAL, peer);
    dion__proxy_cmd_signal(&cmd, sig, op, value);
    uint64_t seen = 0;
    dion_status_t st = dion__proxy_submit(dion__ctx_ring(c), c->dev.wait_timeout_ns, &cmd, 0, &seen);
    if (DION__COLD(st != DION_SUCCESS)) dion__proxy_error(c, st, what, peer, sig, seen);
    return st;
}

/* fence (FENCE, returns at once) and quiet (QUIET, waits until every earlier command is complete). */
DION_HD dion_status_t dion__proxy_ctx_order(const dion_ctx_t *c, dion_proxy_op_t pop, dion_op_t op)
{
    dion_proxy_cmd_t cmd = dion__proxy_cmd(pop, -1);
    uint64_t seen = 0;
    dion_status_t st = dion__proxy_submit(dion__ctx_ring(c), c->dev.wait_timeout_ns, &cmd,
                                          pop == DION_PROXY_OP_QUIET, &seen);
    if (DION__COLD(st != DION_SUCCESS)) dion__proxy_error(c, st, op, -1, 0, seen);
    return st;
}
#endif

#include "dion/device/counter.cuh"

#if DION__HAS_GDAKI
#include "dion/device/gdaki.cuh"

/* Out of line on the GPU, like the proxy's paths: they are long, and they would weigh on the register
 * allocation of the p2p code beside them. */
#if defined(__CUDACC__)
#define DION__GDAKI_PATH static __noinline__ __host__ __device__
#else
#define DION__GDAKI_PATH static inline
#endif

/* Whether peer is served by gdaki: work requests on the QP (context, peer) instead of loads and stores. */
DION_HD int dion__is_gdaki(const dion_ctx_t *c, int peer)
{
    return (c->dev.flags & DION_DEVF_GDAKI) && dion__peer_transport(&c->dev, peer) == DION_TRANSPORT_GDAKI;
}

DION_HD const dion_gdaki_qp_dev_t *dion__gdaki_qp(const dion_ctx_t *c, int peer)
{
    return &c->dev.gdaki->qps[(size_t)c->index * (size_t)c->dev.nranks + (size_t)peer];
}

/* Whether an atomic on peer's window, or a signal to peer, goes through gdaki. On a handle with gdaki peers,
 * this rank's atomics on its own window and its signals to itself go through its loopback QP (context, this
 * rank) too: the peers' atomics reach the word
 * through the NIC (the softnic model applies them with CPU atomics), and a GPU atomic on pinned host memory
 * is not atomic with respect to those (it crosses PCIe as a read and a write), so one word must see one
 * kind. As the proxy does (dion__proxy_amo_route). */
DION_HD int dion__gdaki_amo_route(const dion_ctx_t *c, int peer)
{
    if (!(c->dev.flags & DION_DEVF_GDAKI)) return 0;
    if (peer != (int)c->dev.rank) return dion__peer_transport(&c->dev, peer) == DION_TRANSPORT_GDAKI;
    return (dion__gdaki_qp(c, peer)->flags & DION_GDAKI_QP_UP) != 0;
}

DION_HD const uint64_t *dion__gdaki_abort_word(const dion_ctx_t *c)
{
    return dion__ctl_word(&c->dev, c->dev.signals, DION_CTL_ABORT);
}

/* An error record for a gdaki failure: a QP error (the syndrome), a QP failed by a stall, or a wait that
 * timed out. Aborts and failed peers are reported by the abort words already. */
DION_HD void dion__gdaki_error(const dion_ctx_t *c, const dion_gdaki_qp_dev_t *q, dion_status_t st,
                               dion_op_t op, int peer, uint64_t seen)
{
    if (st == DION_SUCCESS) return;
    uint64_t qerr = q ? dion__ld_relaxed(&q->st->err, DION__GDAKI_SSCOPE) : 0;
    if (!qerr && (st == DION_ERR_ABORTED || st == DION_ERR_PEER_FAILED)) return;
    dion__err_t e = dion__err(st, op, peer);
    e.detail = DION_ERR_DETAIL_GDAKI;
    e.expected = q ? q->qpn : 0;
    e.observed = seen;
    e.limit = c->dev.wait_timeout_ns;
    if (qerr) {
        e.offset = dion__ld_acquire(&q->st->err_info, DION__GDAKI_SSCOPE);
        e.cmp = e.offset ? DION_GDAKI_REC_CQE : DION_GDAKI_REC_STALL;
    } else {
        e.cmp = DION_GDAKI_REC_TIMEOUT;
    }
    dion__record(c, e);
}

/* The key of rank's part of window w, or NULL (recorded) when the NIC has no registration for it. */
DION_HD const dion_gdaki_key_t *dion__gdaki_key(const dion_ctx_t *c, dion_dwin_t w, int rank, dion_op_t op,
                                                int peer)
{
    const dion_gdaki_dev_t *g = c->dev.gdaki;
    const uint32_t id = dion__win_id(&c->dev, w);
    const dion_gdaki_key_t *k =
        &g->keys[(size_t)(id & (DION_GDAKI_KEY_ROWS - 1u)) * g->nranks + (size_t)rank];
    if (k->tag == id + 1u) return k;
    dion__err_t e = dion__err(DION_ERR_INVALID_ARG, op, peer);
    e.detail = DION_ERR_DETAIL_GDAKI;
    e.cmp = DION_GDAKI_REC_KEY;
    e.observed = id;
    dion__record(c, e);
    return NULL;
}

/* A signal work request: ADD is an atomic fetch-add, SET a masked compare-swap that always swaps (both go
 * through the NIC's atomic unit, so a SET and another rank's ADD on one word never lose each other). */
DION_HD dion__gdaki_wr_t dion__gdaki_wr_signal(const dion_ctx_t *c, int peer, uint32_t sig, uint32_t op,
                                               uint64_t value)
{
    const dion_gdaki_key_t *k = &c->dev.gdaki->sig_keys[peer];
    dion__gdaki_wr_t w;
    memset(&w, 0, sizeof w);
    w.kind = (op & 1u) ? DION__GDAKI_WR_FETCH_ADD : DION__GDAKI_WR_SET;
    w.raddr = k->addr + (uint64_t)sig * 8u;
    w.rkey = k->key;
    w.operand = value;
    return w;
}

/* The out-of-line paths below take the QP, the abort word and the timeout, never the context: handing a
 * context (or its address) to a call that is not inlined makes the compiler copy the whole handle onto the
 * stack of every kernel (1.3-1.9 KB, and 150-220 registers for the copy loops). The inline callers read what
 * the paths need from the context and keep error records, statistics and trace events. */

/* One RMA as the leader posts it: remote and local addresses of byte 0, the inline source (puts), the keys,
 * and the signal to append to the last piece. */
typedef struct {
    uint64_t raddr, laddr, bytes;
    const uint8_t *inl;
    uint32_t rkey, lkey;
    int is_get, counted, with_sig;
    dion__gdaki_wr_t sig;
} dion__gdaki_rma_t;

/* Posts the RMA: one WRITE (inline when small) or READ per GiB, the signal in the same post as the last
 * piece; a get waits for its READ's completion, a counted DMA put for its last WQE's. */
DION__GDAKI_PATH dion_status_t dion__gdaki_rma_run(const dion_gdaki_qp_dev_t *q, const dion__gdaki_rma_t *r,
                                                   const uint64_t *abort_word, uint64_t timeout_ns,
                                                   uint64_t *seen)
{
    dion_status_t st = DION_SUCCESS;
    uint64_t at = 0, done = 0;
    int dma = 0;
    do {
        uint64_t n = r->bytes - done > DION__GDAKI_MAX_MSG ? DION__GDAKI_MAX_MSG : r->bytes - done;
        dion__gdaki_wr_t w[2];
        uint32_t nw = 0;
        memset(w, 0, sizeof w);
        if (n) {
            w[0].len = (uint32_t)n;
            w[0].raddr = r->raddr + done;
            w[0].rkey = r->rkey;
            if (!r->is_get && n <= DION__GDAKI_INLINE_MAX && n <= q->max_inline) {
                w[0].kind = DION__GDAKI_WR_WRITE_INLINE;
                w[0].inl = r->inl + done;
            } else {
                w[0].kind = r->is_get ? DION__GDAKI_WR_READ : DION__GDAKI_WR_WRITE;
                w[0].laddr = r->laddr + done;
                w[0].lkey = r->lkey;
                dma = 1;
            }
            w[0].cqe = (uint32_t)r->is_get;
            nw = 1;
        }
        done += n;
        if (r->with_sig && done == r->bytes) w[nw++] = r->sig;
        if (r->counted && dma && done == r->bytes) w[nw - 1].cqe = 1; /* the counted put's last WQE reports */
        if (nw) st = dion__gdaki_post(q, w, nw, abort_word, timeout_ns, &at);
    } while (st == DION_SUCCESS && done < r->bytes);
    if (st == DION_SUCCESS && ((r->is_get && r->bytes) || (r->counted && dma)))
        st = dion__gdaki_wait_cons(q, at + 1, abort_word, timeout_ns, seen);
    return st;
}

/* put, put_signal and get by the group's leader, after the group's stores (dion__gdaki_rma_run).
 * A counted put (counter != DION__NO_COUNTER) adds 1 to the context's counter word (the one p2p uses,
 * device/counter.cuh) once the NIC no longer reads the source: at once when every piece was inline (copied
 * into the WQE at post), else after the CQE of its last WQE, which the leader asks for and waits for (CQEs of
 * one QP come in order, so the earlier pieces are read too). The wait makes a counted DMA put blocking on
 * gdaki; it counts neither early nor twice, and in call order. A failed put counts nothing; its QP's error
 * ends dion_counter_wait (dion__lcount_wait). */
DION_HD void dion__gdaki_rma_group(const dion_ctx_t *c, dion__group_t g, int is_get, dion_op_t op, int peer,
                                   dion_dwin_t dst, size_t dst_off, dion_dwin_t src, size_t src_off,
                                   size_t bytes, int with_sig, uint32_t sig, dion_sig_op_t sop,
                                   uint64_t value, uint32_t counter, uint64_t t0)
{
    dion__group_sync(g);
    if (dion__group_rank(g) != 0) return;
    const dion_gdaki_qp_dev_t *q = dion__gdaki_qp(c, peer);
    int me = c->dev.rank;
    dion_dwin_t rwin = is_get ? src : dst, lwin = is_get ? dst : src;
    const dion_gdaki_key_t *rk = bytes ? dion__gdaki_key(c, rwin, peer, op, peer) : NULL;
    const dion_gdaki_key_t *lk = bytes && rk ? dion__gdaki_key(c, lwin, me, op, peer) : NULL;
    if (bytes && !lk) return;
    dion__gdaki_rma_t r;
    memset(&r, 0, sizeof r);
    r.bytes = bytes;
    r.is_get = is_get;
    r.counted = !is_get && counter != DION__NO_COUNTER;
    if (bytes) {
        r.raddr = rk->addr + (is_get ? src_off : dst_off);
        r.rkey = rk->key;
        r.laddr = lk->addr + (is_get ? dst_off : src_off);
        r.lkey = lk->key;
        if (!is_get) r.inl = (const uint8_t *)dion__win_base(&c->dev, src, me) + src_off;
    }
    r.with_sig = with_sig;
    if (with_sig) r.sig = dion__gdaki_wr_signal(c, peer, sig, (uint32_t)sop, value);
    uint64_t seen = 0;
    dion_status_t st = dion__gdaki_rma_run(q, &r, dion__gdaki_abort_word(c), c->dev.wait_timeout_ns, &seen);
    if (st == DION_SUCCESS && r.counted) dion__lcount_add(c, counter);
    dion__gdaki_error(c, q, st, op, peer, seen);
    if (is_get) {
        DION__STAT(c, gets, 1);
        DION__STAT(c, get_bytes, bytes);
    } else {
        DION__STAT(c, puts, 1);
        DION__STAT(c, put_bytes, bytes);
        if (with_sig) DION__STAT(c, signals, 1);
    }
    DION__TRACE(c, t0, op, peer, sig, bytes, value, 0, (uint32_t)sop, st);
}

/* One signaled atomic, waited for; the old value from the QP's scratch word (0 when it failed). */
DION__GDAKI_PATH dion_status_t dion__gdaki_amo_run(const dion_gdaki_qp_dev_t *q, const dion__gdaki_wr_t *r,
                                                   const uint64_t *abort_word, uint64_t timeout_ns,
                                                   uint64_t *old, uint64_t *seen)
{
    uint64_t at = 0;
    *old = 0;
    dion_status_t st = dion__gdaki_post(q, r, 1, abort_word, timeout_ns, &at);
    if (st != DION_SUCCESS) return st;
    st = dion__gdaki_wait_cons(q, at + 1, abort_word, timeout_ns, seen);
    *old = dion__gdaki_result(q, at, st == DION_SUCCESS);
    return st;
}

/* fetch-add and compare-swap. */
DION_HD uint64_t dion__gdaki_amo(const dion_ctx_t *c, int cas, dion_op_t op, dion_dwin_t w, int peer,
                                 size_t off, uint64_t operand, uint64_t compare)
{
    const dion_gdaki_qp_dev_t *q = dion__gdaki_qp(c, peer);
    const dion_gdaki_key_t *k = dion__gdaki_key(c, w, peer, op, peer);
    if (!k) return 0;
    dion__gdaki_wr_t r;
    memset(&r, 0, sizeof r);
    r.kind = cas ? DION__GDAKI_WR_CSWAP : DION__GDAKI_WR_FETCH_ADD;
    r.raddr = k->addr + off;
    r.rkey = k->key;
    r.operand = operand;
    r.compare = compare;
    r.cqe = 1;
    r.result = 1;
    uint64_t old = 0, seen = 0;
    dion_status_t st =
        dion__gdaki_amo_run(q, &r, dion__gdaki_abort_word(c), c->dev.wait_timeout_ns, &old, &seen);
    dion__gdaki_error(c, q, st, op, peer, seen);
    return old;
}

/* One unsignaled work request (a signal, a barrier arrival). */
DION__GDAKI_PATH dion_status_t dion__gdaki_post_one(const dion_gdaki_qp_dev_t *q, const dion__gdaki_wr_t *w,
                                                    const uint64_t *abort_word, uint64_t timeout_ns)
{
    return dion__gdaki_post(q, w, 1, abort_word, timeout_ns, NULL);
}

/* signal (and barrier arrivals). */
DION_HD void dion__gdaki_signal(const dion_ctx_t *c, int peer, uint32_t sig, uint32_t op, uint64_t value,
                                dion_op_t what)
{
    const dion_gdaki_qp_dev_t *q = dion__gdaki_qp(c, peer);
    dion__gdaki_wr_t w = dion__gdaki_wr_signal(c, peer, sig, op, value);
    dion_status_t st = dion__gdaki_post_one(q, &w, dion__gdaki_abort_word(c), c->dev.wait_timeout_ns);
    dion__gdaki_error(c, q, st, what, peer, 0);
    if (what == DION_OP_SIGNAL) {
        DION__STAT(c, signals, 1);
        DION__TRACE(c, 0, DION_OP_SIGNAL, peer, sig, 0, value, 0, op, st);
    }
}

/* fence: the next WQE of every QP of the context (n QPs from qps) carries the NIC's fence flag. */
DION__GDAKI_PATH void dion__gdaki_fence_qps(const dion_gdaki_qp_dev_t *qps, int n)
{
    for (int p = 0; p < n; p++) {
        const dion_gdaki_qp_dev_t *q = &qps[p];
        if ((q->flags & DION_GDAKI_QP_UP) && dion__ld_relaxed(&q->st->last_wqe, DION__GDAKI_SSCOPE))
            dion__st_relaxed(&q->st->fence, 1, DION__GDAKI_SSCOPE);
    }
}

DION_HD void dion__gdaki_ctx_fence(const dion_ctx_t *c)
{
    dion__gdaki_fence_qps(dion__gdaki_qp(c, 0), (int)c->dev.nranks);
}

/* Drains one QP (when it is up). */
DION__GDAKI_PATH dion_status_t dion__gdaki_quiet_one(const dion_gdaki_qp_dev_t *q, const uint64_t *abort_word,
                                                     uint64_t timeout_ns, uint64_t *seen)
{
    if (!(q->flags & DION_GDAKI_QP_UP)) return DION_SUCCESS;
    return dion__gdaki_quiet(q, abort_word, timeout_ns, seen);
}

/* quiet: every QP of the context drained; the first failure is returned (each is recorded). */
DION_HD dion_status_t dion__gdaki_ctx_quiet(const dion_ctx_t *c, dion_op_t op)
{
    dion_status_t first = DION_SUCCESS;
    const uint64_t *abort_word = dion__gdaki_abort_word(c);
    for (int p = 0; p < (int)c->dev.nranks; p++) {
        const dion_gdaki_qp_dev_t *q = dion__gdaki_qp(c, p);
        uint64_t seen = 0;
        dion_status_t st = dion__gdaki_quiet_one(q, abort_word, c->dev.wait_timeout_ns, &seen);
        if (st != DION_SUCCESS) {
            dion__gdaki_error(c, q, st, op, p, seen);
            if (first == DION_SUCCESS) first = st;
        }
    }
    return first;
}
#endif

/* ---- contexts ---- */

/** A context: an ordered lane of operations; different blocks usually take different contexts.
 * \param dev the handle from dion_dev_create. \param index below num_contexts (else taken modulo it, or
 * with DION_CHECK=1 kept, so that every call on the context records the error and does nothing).
 * \return the context (a value; cheap to make in every block). */
DION_HD dion_ctx_t dion_ctx(dion_dev_t dev, uint32_t index)
{
    dion_ctx_t c;
    c.dev = dev;
    c.index = index;
    /* DION_CHECK keeps a bad index: every operation on this context then records it and does nothing. */
    if (index >= dev.num_contexts && !(dev.flags & DION_DEVF_CHECK))
        c.index = dev.num_contexts ? index % dev.num_contexts : 0;
    return c;
}

/* ---- DION_CHECK's checks of the RMA, signal and wait calls, out of line on the GPU ----
 * With the checks inline, every kernel carried them beside its hot paths: their registers made the block
 * kernels spill values the fast paths keep in registers (perf/p2p_bench pingpong<3>, 2026-11-30). Out of line
 * they are one call behind the DION_CHECK flag. The call takes what the checks and their records read by
 * value, never the context: a pointer to the context handed to a call that is not inlined makes the compiler
 * copy the whole handle onto the stack (DION__PROXY_PATH above says more). */
#ifndef DION__CHECK_OOL
#define DION__CHECK_OOL                                                                                      \
    1 /* a build may set 0 to inline them as before (perf/CMakeLists.txt, p2p_bench_prev) */
#endif
#if defined(__CUDACC__) && DION__CHECK_OOL
#define DION__CHECK_PATH static __noinline__ __host__ __device__
#else
#define DION__CHECK_PATH DION_HD
#endif
/* The checks of dion_signal and dion_wait (a context, a signal index, an op or comparison: a few tests) run
 * inline on the caller's context even where the RMA checks are calls; a build may set
 * DION__CHECK_OOL_SIGWAIT=1 to make them calls too (perf/CMakeLists.txt, p2p_bench_swool). A call anywhere in
 * a loop made the compiler reload the values it passes (the handle's fields, from the parameter bank) at the
 * loop's head on every pass, taken or not: about 25 instructions on the turnaround of a signal / wait
 * ping-pong (perf/p2p_bench pingpong<OP_SIGNAL_RELAXED>, sm_90, docs/results/perf10-notes.md). */
#ifndef DION__CHECK_OOL_SIGWAIT
#define DION__CHECK_OOL_SIGWAIT 0
#endif

typedef struct {
    uint64_t *signals;
    struct dion_dev_peer *peers;
    struct dion_dev_errors *errors;
    dion_ctx_stats_t *stats;
    int32_t rank, nranks;
    uint32_t num_signals, num_contexts, flags, index;
} dion__chk_env_t;

DION_HD dion__chk_env_t dion__chk_env(const dion_ctx_t *c)
{
    dion__chk_env_t v;
    v.signals = c->dev.signals;
    v.peers = c->dev.peers;
    v.errors = c->dev.errors;
    v.stats = c->dev.stats;
    v.rank = c->dev.rank;
    v.nranks = c->dev.nranks;
    v.num_signals = c->dev.num_signals;
    v.num_contexts = c->dev.num_contexts;
    v.flags = c->dev.flags;
    v.index = c->index;
    return v;
}

#if DION_DEV_INLINE_PEERS != 8
#error "dion__chk_ctx copies 8 inline peers"
#endif
/* The part of a context that the checks and their records read, rebuilt in the checker's frame; the rest is
 * zero. The peers' inline entries come from the table (the checks read their transport). */
DION_HD dion_ctx_t dion__chk_ctx(dion__chk_env_t v)
{
    dion_ctx_t c;
    memset(&c, 0, sizeof c);
    c.dev.signals = v.signals;
    c.dev.peers = v.peers;
    c.dev.errors = v.errors;
    c.dev.stats = v.stats;
    c.dev.rank = v.rank;
    c.dev.nranks = v.nranks;
    c.dev.num_signals = v.num_signals;
    c.dev.num_contexts = v.num_contexts;
    c.dev.flags = v.flags;
    c.index = v.index;
    /* constant indices: a loop with a variable bound made the compiler keep the whole context in local memory
     * (1.3 KB of stack in conformance_gpu's dt_cnt_kernel) */
#define DION__CHK_PEER(k)                                                                                    \
    if ((k) < v.nranks) c.dev.peer_inline[k] = v.peers[k]
    DION__CHK_PEER(0);
    DION__CHK_PEER(1);
    DION__CHK_PEER(2);
    DION__CHK_PEER(3);
    DION__CHK_PEER(4);
    DION__CHK_PEER(5);
    DION__CHK_PEER(6);
    DION__CHK_PEER(7);
#undef DION__CHK_PEER
    return c;
}

DION_HD int dion__check_signal_args(const dion_ctx_t *c, int peer, uint32_t sig, dion_sig_op_t op,
                                    dion_op_t what, int lead)
{
    if (!dion__check_ctx(c, what, lead) || !dion__check_peer(c, peer, what, lead) ||
        !dion__check_sig(c, peer, sig, what, lead))
        return 0;
    if ((uint32_t)op <= DION_SIG_ADD_RELAXED) return 1;
    if (lead) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, what, peer);
        e.sig = sig;
        e.observed = (uint64_t)op;
        dion__record(c, e);
    }
    return 0;
}

/* put (op DION_OP_PUT) and put_signal (DION_OP_PUT_SIGNAL, with sig and sop): 1 when the call may go on. */
DION__CHECK_PATH int dion__check_rma_at(dion__chk_env_t v, dion_op_t op, int peer, dion_dwin_t dst,
                                        size_t dst_off, dion_dwin_t src, size_t src_off, size_t bytes,
                                        uint32_t sig, dion_sig_op_t sop, uint32_t counter, int lead)
{
    dion_ctx_t c = dion__chk_ctx(v);
    if (op == DION_OP_PUT_SIGNAL) {
        if (!dion__check_signal_args(&c, peer, sig, sop, op, lead)) return 0;
    } else if (!dion__check_ctx(&c, op, lead) || !dion__check_peer(&c, peer, op, lead)) {
        return 0;
    }
    return dion__check_range(&c, dst, peer, dst_off, bytes, 1, op, peer, lead) &&
           dion__check_range(&c, src, c.dev.rank, src_off, bytes, 1, op, peer, lead) &&
           (counter == DION__NO_COUNTER || dion__check_counter(&c, counter, op, peer, lead));
}

/* dion_wait: DION_SUCCESS when the call may go on, else DION_ERR_INVALID_ARG (recorded). */
DION_HD dion_status_t dion__check_wait_args(const dion_ctx_t *c, uint32_t sig, uint32_t cmp)
{
    if (!dion__check_ctx(c, DION_OP_WAIT, 1) || !dion__check_sig(c, c->dev.rank, sig, DION_OP_WAIT, 1))
        return DION_ERR_INVALID_ARG;
    if (cmp > DION_CMP_LE) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, DION_OP_WAIT, c->dev.rank);
        e.sig = sig;
        e.cmp = cmp;
        dion__record(c, e);
        return DION_ERR_INVALID_ARG;
    }
    return DION_SUCCESS;
}

/* dion_signal's and dion_wait's checks on the caller's context: 1 / DION_SUCCESS when the call may go on. */
#if DION__CHECK_OOL_SIGWAIT
DION__CHECK_PATH int dion__check_signal_at(dion__chk_env_t v, int peer, uint32_t sig, dion_sig_op_t op)
{
    dion_ctx_t c = dion__chk_ctx(v);
    return dion__check_signal_args(&c, peer, sig, op, DION_OP_SIGNAL, 1);
}

DION__CHECK_PATH dion_status_t dion__check_wait_at(dion__chk_env_t v, uint32_t sig, uint32_t cmp)
{
    dion_ctx_t c = dion__chk_ctx(v);
    return dion__check_wait_args(&c, sig, cmp);
}

#define DION__CHECK_SIGNAL(c, peer, sig, op) dion__check_signal_at(dion__chk_env(c), peer, sig, op)
#define DION__CHECK_WAIT(c, sig, cmp)        dion__check_wait_at(dion__chk_env(c), sig, cmp)
#else
#define DION__CHECK_SIGNAL(c, peer, sig, op) dion__check_signal_args(c, peer, sig, op, DION_OP_SIGNAL, 1)
#define DION__CHECK_WAIT(c, sig, cmp)        dion__check_wait_args(c, sig, cmp)
#endif

/* ---- the fast paths (device/common.cuh, DION__FAST_PATHS) ---- */

/* Handle flags that send every call to the general code: DION_CHECK, and the backends whose dispatch is
 * compiled in (a fast path is p2p code); with DION__FAST_LEAN=1 (the default) also DION_STATS, and DION_TRACE
 * where the trace hooks are compiled in, so that the put and signal fast paths carry no test for them: the
 * general code counts and traces those calls (a build may set 0 to compare, perf/CMakeLists.txt,
 * p2p_bench_fl0; put_signal's fast path still carries its tests). */
#ifndef DION__FAST_LEAN
#define DION__FAST_LEAN 1
#endif
/* Whether a thread's put on the fast path tells the compiler that both ends are global memory (every p2p
 * window is: device memory, a peer GPU's, registered host memory), so that its copy uses global loads and
 * stores instead of generic ones (a build may set 0 to compare, perf/CMakeLists.txt, p2p_bench_pg0). */
#ifndef DION__PUT_GLOBAL
#define DION__PUT_GLOBAL 1
#endif
/* Whether a path with lookups from mode (DION__LK_*) is a lean fast path: no statistics, no trace. */
#define DION__LEAN_AT(mode) (DION__FAST_LEAN && (mode) == DION__LK_INLINE)
#define DION__SLOW_FLAGS                                                                                     \
    (DION_DEVF_CHECK | (DION__HAS_PROXY ? DION_DEVF_PROXY : 0u) | (DION__HAS_GDAKI ? DION_DEVF_GDAKI : 0u) | \
     (DION__FAST_LEAN ? DION_DEVF_STATS | (DION_TRACE_COMPILED ? DION_DEVF_TRACE : 0u) : 0u))

/* Whether a call to peer may take the fast path: GPU code, DION_CHECK off (or compiled out), no network
 * backend on the handle, and peer's entries inline. Reads parameters only, so that a loop whose arguments do
 * not change tests it once. */
DION_HD int dion__fast_peer(const dion_ctx_t *c, int peer)
{
#if DION__GPU && DION__FAST_PATHS
    uint32_t slow = DION__SLOW_FLAGS & ~(dion__check_enabled(c) ? 0u : DION_DEVF_CHECK);
    return !(c->dev.flags & slow) && (unsigned)peer < DION_DEV_INLINE_PEERS;
#else
    (void)c, (void)peer;
    return 0;
#endif
}

/* The same for a put or get between peer's part of a and this rank's part of b: both windows in slots. */
DION_HD int dion__fast_rma(const dion_ctx_t *c, int peer, dion_dwin_t a, dion_dwin_t b)
{
    return dion__fast_peer(c, peer) && (unsigned)c->dev.rank < DION_DEV_INLINE_PEERS &&
           dion__win_in_slot(&c->dev, a) && dion__win_in_slot(&c->dev, b);
}

/* The lookups of an RMA call's general copy: the tables, one load each, for every group (DION__LK_SLOW). The
 * general copy runs only where the fast path does not (DION_CHECK, statistics or trace on, a peer or window
 * without an inline entry), but it is compiled into every kernel beside the fast one. A block's general copy
 * used to keep the inline selections with table fallbacks (DION__LK_ANY, the selection from before block
 * calls had a fast path); in a 1024-thread kernel, capped at 64 registers, those selections' registers pushed
 * the fast path's values onto the stack (p2p_bench pingpong<3>: 136 bytes, 48 with the tables; ab_bench's
 * DION block send 128 -> 48; dion-perf's block put_signal 128 -> 48, its block put + quiet 40 -> 0;
 * nvcc 13.0, sm_90). A build may set DION__BLOCK_GENERAL_ANY=1 for the previous lookups (perf/CMakeLists.txt
 * p2p_bench_bgany, dion-perf-bgany). */
#ifndef DION__BLOCK_GENERAL_ANY
#define DION__BLOCK_GENERAL_ANY 0
#endif
#if DION__BLOCK_NOSPILL || !DION__BLOCK_GENERAL_ANY
#define DION__LK_GENERAL(g) DION__LK_SLOW
#else
#define DION__LK_GENERAL(g) ((g) == DION__BLOCK ? DION__LK_ANY : DION__LK_SLOW)
#endif

/* Block puts and put_signals take the fast path too, with a copy of their own (device/p2p.cuh,
 * dion__p2p_put_block_inl): bases from the parameter bank in every warp, alignment tested on the addresses,
 * threads without a 16-byte element gone before the copy, no table load, and the put_signal's signal word
 * found before the barrier; a block of 32 warps then runs before its barrier about what a hand-written LSA
 * copy runs. 1 by measurement (H200, 2 ranks under MPS, 2026-12-01, p2p_bench_bfast against the previous
 * default): put_signal by a block 8 B / 1 KiB / 64 KiB 1.614 / 1.642 / 2.732 -> 1.395 / 1.367 / 2.612 us,
 * put + quiet by a block 8 B / 64 KiB 1.163 / 2.303 -> 1.014 / 2.176 (docs/results/perf10-notes.md, fourth
 * pass). A build may set 0 to compare (perf/CMakeLists.txt, p2p_bench_bslow). An earlier block fast path
 * (bf94ceb), which kept the window table loads in warps 4 and up, made put + quiet by a block slower. */
#ifndef DION__BLOCK_FAST
#define DION__BLOCK_FAST 1
#endif
/* Whether a call by group g may take the fast path (a constant but for dion__fast_rma's test). */
#define DION__FAST_GROUP(g) (DION__BLOCK_FAST || (g) != DION__BLOCK)

/* ---- put ---- */

/* The p2p part of a put once the call is known to be good: the copy, the group's sync, the counter and the
 * leader's bookkeeping. mode: where its lookups read (DION__LK_*, device/common.cuh): DION__LK_INLINE in the
 * fast path, DION__LK_SLOW in the general one. */
DION_HD void dion__put_p2p(const dion_ctx_t *c, dion__group_t g, dion_dwin_t dst, int peer, size_t dst_off,
                           dion_dwin_t src, size_t src_off, size_t bytes, uint32_t counter, uint64_t t0,
                           int mode)
{
    uint32_t r = dion__group_rank(g), n = dion__group_size(g);
#if DION__GPU && DION__PUT_GLOBAL
    if (g == DION__THREAD && mode == DION__LK_INLINE) {
        /* mapped windows (device memory, other GPUs' and registered host memory) are in the global space:
         * the copy's accesses become LDG/STG instead of generic LD/ST */
        char *to = dion__win_base_inl(&c->dev, dst, peer) + dst_off;
        const char *from = dion__win_self_inl(&c->dev, src) + src_off;
        __builtin_assume(__isGlobal(to));
        __builtin_assume(__isGlobal(from));
        dion__copy(to, from, bytes, 0, 1);
    } else
#endif
        dion__p2p_put_at(&c->dev, dst, peer, dst_off, src, src_off, bytes, r, n, g, mode);
    dion__group_sync(g);
    if (r == 0) {
        if (counter != DION__NO_COUNTER) dion__lcount_add(c, counter % DION_NUM_COUNTERS);
        if (!DION__LEAN_AT(mode)) {
            DION__STAT(c, puts, 1);
            DION__STAT(c, put_bytes, bytes);
            DION__TRACE(c, t0, DION_OP_PUT, peer, 0, bytes, 0, 0, 0, DION_SUCCESS);
        }
    }
    (void)t0;
}

/* counter: DION__NO_COUNTER (a constant in dion_put & co., so the counting folds away there), or the local
 * counter that counts this put once its source may be reused. */
DION_HD void dion__put_group(dion_ctx_t c, dion__group_t g, dion_dwin_t dst, int peer, size_t dst_off,
                             dion_dwin_t src, size_t src_off, size_t bytes, uint32_t counter)
{
    uint32_t r = dion__group_rank(g);
    uint64_t t0 = dion__trace_start(&c);
    if (DION__FAST_GROUP(g) && dion__fast_rma(&c, peer, dst, src)) {
        dion__put_p2p(&c, g, dst, peer, dst_off, src, src_off, bytes, counter, t0, DION__LK_INLINE);
        return;
    }
    if (dion__check_enabled(&c) && !dion__check_rma_at(dion__chk_env(&c), DION_OP_PUT, peer, dst, dst_off,
                                                       src, src_off, bytes, 0, DION_SIG_SET, counter, r == 0))
        return;
    if (counter != DION__NO_COUNTER) counter %= DION_NUM_COUNTERS; /* unchecked: wrap like dion_ctx */
#if DION__HAS_PROXY
    if (dion__is_proxy(&c, peer)) {
        dion__group_sync(g);
        if (r == 0)
            dion__proxy_rma_lead(&c, DION_PROXY_OP_PUT, DION_OP_PUT, peer, dst, dst_off, src, src_off, bytes,
                                 0, DION_SIG_SET, 0, counter, t0);
        return;
    }
#endif
#if DION__HAS_GDAKI
    if (dion__is_gdaki(&c, peer)) {
        dion__gdaki_rma_group(&c, g, 0, DION_OP_PUT, peer, dst, dst_off, src, src_off, bytes, 0, 0,
                              DION_SIG_SET, 0, counter, t0);
        return;
    }
#endif
    dion__put_p2p(&c, g, dst, peer, dst_off, src, src_off, bytes, counter, t0, DION__LK_GENERAL(g));
}

/** One-sided put of bytes from my part of src to peer's part of dst; one thread. Returns when issued:
 * unordered with later operations until a dion_fence, dion_quiet or (release) signal; source reusable after
 * dion_quiet. Ranges must not overlap (docs/semantics.md).
 * \param c the context. \param dst the target window. \param peer the target rank (may be my own).
 * \param dst_off byte offset in peer's part of dst. \param src the source window (my part is read).
 * \param src_off byte offset in my part of src. \param bytes bytes to copy (0 is allowed). */
DION_HD void dion_put(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                      size_t src_off, size_t bytes)
{
    dion__put_group(c, DION__THREAD, dst, peer, dst_off, src, src_off, bytes, DION__NO_COUNTER);
}

/** dion_put by a whole warp: every lane calls it with the same arguments; ends with the warp synchronized.
 * \copydetails dion_put */
DION_HD void dion_put_warp(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                           size_t src_off, size_t bytes)
{
    dion__put_group(c, DION__WARP, dst, peer, dst_off, src, src_off, bytes, DION__NO_COUNTER);
}

/** dion_put by a whole block: every thread calls it with the same arguments; ends with the block
 * synchronized (bulk-copy path: docs/semantics.md). \copydetails dion_put */
DION_HD void dion_put_block(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                            size_t src_off, size_t bytes)
{
    dion__put_group(c, DION__BLOCK, dst, peer, dst_off, src, src_off, bytes, DION__NO_COUNTER);
}

/** dion_put that also counts: local counter `counter` of the context is incremented by 1 (once per call, not
 * per thread) when the source may be reused, so that a pipeline recycles buffers with dion_counter_wait
 * instead of a dion_quiet. The count says nothing about delivery at the target: order and complete the data
 * with a signal, put_signal or quiet as for dion_put. p2p: the copy is done when the call returns, so the
 * count is there at once; proxy: the proxy thread counts once the network no longer reads the source.
 * \param c the context. \param dst the target window. \param peer the target rank.
 * \param dst_off byte offset in peer's part of dst. \param src the source window (my part is read).
 * \param src_off byte offset in my part of src. \param bytes bytes to copy (0 is allowed, and counts).
 * \param counter the local counter, below DION_NUM_COUNTERS (else, with DION_CHECK=1, an error record and
 * nothing done; without it, taken modulo DION_NUM_COUNTERS). */
DION_HD void dion_put_counted(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                              size_t src_off, size_t bytes, uint32_t counter)
{
    dion__put_group(c, DION__THREAD, dst, peer, dst_off, src, src_off, bytes, counter);
}

/** dion_put_counted by a whole warp (same arguments in every lane); the counter goes up by 1 for the warp's
 * call. \copydetails dion_put_counted */
DION_HD void dion_put_counted_warp(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                                   size_t src_off, size_t bytes, uint32_t counter)
{
    dion__put_group(c, DION__WARP, dst, peer, dst_off, src, src_off, bytes, counter);
}

/** dion_put_counted by a whole block (same arguments in every thread); the counter goes up by 1 for the
 * block's call. \copydetails dion_put_counted */
DION_HD void dion_put_counted_block(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                                    size_t src_off, size_t bytes, uint32_t counter)
{
    dion__put_group(c, DION__BLOCK, dst, peer, dst_off, src, src_off, bytes, counter);
}

/* ---- signals ---- */

/* The leader's bookkeeping once a put_signal's signal is issued, whichever way it went. */
DION_HD void dion__put_signal_done(const dion_ctx_t *c, int peer, uint32_t sig, dion_sig_op_t op,
                                   uint64_t value, size_t bytes, uint32_t counter, uint64_t t0,
                                   dion_status_t st)
{
    if (counter != DION__NO_COUNTER) dion__lcount_add(c, counter);
    DION__STAT(c, puts, 1);
    DION__STAT(c, put_bytes, bytes);
    DION__STAT(c, signals, 1);
    DION__TRACE(c, t0, DION_OP_PUT_SIGNAL, peer, sig, bytes, value, 0, (uint32_t)op, st);
    (void)peer, (void)sig, (void)value, (void)op, (void)t0, (void)st;
}

/* The p2p part of a put_signal once the call is known to be good; mode as in dion__put_p2p. */
DION_HD void dion__put_signal_p2p(const dion_ctx_t *c, dion__group_t g, dion_dwin_t dst, int peer,
                                  size_t dst_off, dion_dwin_t src, size_t src_off, size_t bytes, uint32_t sig,
                                  dion_sig_op_t op, uint64_t value, uint32_t counter, uint64_t t0, int mode)
{
    uint32_t r = dion__group_rank(g), n = dion__group_size(g);
    if (counter != DION__NO_COUNTER) counter %= DION_NUM_COUNTERS;
#if DION__GPU
    if (g == DION__BLOCK && mode == DION__LK_INLINE) { /* DION__BLOCK_FAST */
        /* The block's last thread signals: below 16 bytes per thread it has no part of the copy, so it works
         * out the signal word and scope while the copying threads are still on their way to the barrier, and
         * after the barrier only the fence and the store are left between the data and the peer's flag. Any
         * thread may: the barrier orders every thread's stores before its release. A counted put_signal keeps
         * the leader (thread 0) signalling and counting: on p2p the leader's count is done when the call
         * returns (docs/semantics.md, local completion counters), and it may read the counter next. */
        const uint32_t lead = counter == DION__NO_COUNTER ? n - 1 : 0;
        uint64_t *word = NULL;
        uint32_t scope = 0;
        if (r == lead) {
            word = dion__peer_signals_at(&c->dev, peer, mode) + sig;
            scope = dion__p2p_scope_at(c, peer, dst, mode);
            /* opaque to the compiler, which would otherwise recompute both after the barrier */
            asm volatile("" : "+l"(word), "+r"(scope));
        }
#if DION__GPU && !DION__TMA
        /* never the early leave (device/p2p.cuh, DION__BLOCK_EARLY); DION__BLOCK_NOSPILL 1 or 2: the copy
         * holds nothing across the caller's loop */
        dion__p2p_put_block_inl(&c->dev, dst, peer, dst_off, src, src_off, bytes, r, n,
                                DION__BLOCK_NOSPILL != 0, 0);
#else
        dion__p2p_put_at(&c->dev, dst, peer, dst_off, src, src_off, bytes, r, n, g, mode);
#endif
        dion__group_sync(g);
        if (r == lead) {
            dion__p2p_signal_after_data(word, value, (uint32_t)op & 1u, scope);
            dion__put_signal_done(c, peer, sig, op, value, bytes, counter, t0, DION_SUCCESS);
        }
        return;
    }
#endif
    dion__p2p_put_at(&c->dev, dst, peer, dst_off, src, src_off, bytes, r, n, g, mode);
    /* The leader's release store is cumulative: it orders the stores the whole group made before the sync. */
    dion__group_sync(g);
#if DION__HAS_GDAKI
    if (mode != DION__LK_INLINE && r == 0 && peer == (int)c->dev.rank &&
        dion__gdaki_amo_route(c, peer)) { /* to itself: the signal through the loopback QP, after the data */
        dion__fence(DION_SCOPE_SYS);
        dion__gdaki_signal(c, peer, sig, (uint32_t)op & 1u, value, DION_OP_PUT_SIGNAL);
        dion__put_signal_done(c, peer, sig, op, value, bytes, counter, t0, DION_SUCCESS);
        return;
    }
#endif
#if DION__HAS_PROXY
    if (mode != DION__LK_INLINE && r == 0 &&
        dion__proxy_sig_route(c, peer)) { /* to itself: the signal through the proxy, after the data */
        dion__fence(DION_SCOPE_SYS);
        dion_status_t st = dion__proxy_signal(c, peer, sig, (uint32_t)op & 1u, value, DION_OP_PUT_SIGNAL);
        dion__put_signal_done(c, peer, sig, op, value, bytes, counter, t0, st);
        (void)st;
        return;
    }
#endif
    if (r == 0) {
        /* The data must precede the signal whatever the op says: put_signal always releases. Only the leader
         * works out where to signal: in a block every instruction that all threads run costs 32 warps' issue.
         */
        uint64_t *word = dion__peer_signals_at(&c->dev, peer, mode) + sig;
        dion__p2p_signal_after_data(word, value, (uint32_t)op & 1u, dion__p2p_scope_at(c, peer, dst, mode));
        dion__put_signal_done(c, peer, sig, op, value, bytes, counter, t0, DION_SUCCESS);
    }
    (void)t0;
}

/* counter: as in dion__put_group. */
DION_HD void dion__put_signal_group(dion_ctx_t c, dion__group_t g, dion_dwin_t dst, int peer, size_t dst_off,
                                    dion_dwin_t src, size_t src_off, size_t bytes, uint32_t sig,
                                    dion_sig_op_t op, uint64_t value, uint32_t counter)
{
    uint32_t r = dion__group_rank(g);
    uint64_t t0 = dion__trace_start(&c);
    if (DION__FAST_GROUP(g) && dion__fast_rma(&c, peer, dst, src)) {
        dion__put_signal_p2p(&c, g, dst, peer, dst_off, src, src_off, bytes, sig, op, value, counter, t0,
                             DION__LK_INLINE);
        return;
    }
    if (dion__check_enabled(&c) &&
        !dion__check_rma_at(dion__chk_env(&c), DION_OP_PUT_SIGNAL, peer, dst, dst_off, src, src_off, bytes,
                            sig, op, counter, r == 0))
        return;
    if (counter != DION__NO_COUNTER) counter %= DION_NUM_COUNTERS;
#if DION__HAS_PROXY
    if (dion__is_proxy(&c, peer)) {
        dion__group_sync(g);
        if (r == 0)
            dion__proxy_rma_lead(&c, DION_PROXY_OP_PUT_SIGNAL, DION_OP_PUT_SIGNAL, peer, dst, dst_off, src,
                                 src_off, bytes, sig, op, value, counter, t0);
        return;
    }
#endif
#if DION__HAS_GDAKI
    if (dion__is_gdaki(&c, peer)) {
        dion__gdaki_rma_group(&c, g, 0, DION_OP_PUT_SIGNAL, peer, dst, dst_off, src, src_off, bytes, 1, sig,
                              op, value, counter, t0);
        return;
    }
#endif
    dion__put_signal_p2p(&c, g, dst, peer, dst_off, src, src_off, bytes, sig, op, value, counter, t0,
                         DION__LK_GENERAL(g));
}

/** Put, then update peer's signal sig: the peer sees the new value only after the data (always a release,
 * whatever op). Returns when issued; source reusable after dion_quiet. One thread.
 * \param c the context. \param dst the target window. \param peer the target rank.
 * \param dst_off byte offset in peer's part of dst. \param src the source window (my part is read).
 * \param src_off byte offset in my part of src. \param bytes bytes to copy (0: only the signal).
 * \param sig the signal index on peer, below num_signals. \param op DION_SIG_SET or DION_SIG_ADD (the
 * _RELAXED forms act as these here). \param value the value to set or add. */
DION_HD void dion_put_signal(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                             size_t src_off, size_t bytes, uint32_t sig, dion_sig_op_t op, uint64_t value)
{
    dion__put_signal_group(c, DION__THREAD, dst, peer, dst_off, src, src_off, bytes, sig, op, value,
                           DION__NO_COUNTER);
}

/** dion_put_signal by a whole warp (same arguments in every lane); lane 0 signals after the warp's copy.
 * \copydetails dion_put_signal */
DION_HD void dion_put_signal_warp(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                                  size_t src_off, size_t bytes, uint32_t sig, dion_sig_op_t op,
                                  uint64_t value)
{
    dion__put_signal_group(c, DION__WARP, dst, peer, dst_off, src, src_off, bytes, sig, op, value,
                           DION__NO_COUNTER);
}

/** dion_put_signal by a whole block (same arguments in every thread); one thread signals after the block's
 * copy and barrier. \copydetails dion_put_signal */
DION_HD void dion_put_signal_block(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                                   size_t src_off, size_t bytes, uint32_t sig, dion_sig_op_t op,
                                   uint64_t value)
{
    dion__put_signal_group(c, DION__BLOCK, dst, peer, dst_off, src, src_off, bytes, sig, op, value,
                           DION__NO_COUNTER);
}

/** dion_put_signal that also counts: local counter `counter` of the context is incremented by 1 (once per
 * call) when the source may be reused; as dion_put_counted otherwise. The signal keeps its meaning: the peer
 * sees it only after the data.
 * \param c the context. \param dst the target window. \param peer the target rank.
 * \param dst_off byte offset in peer's part of dst. \param src the source window (my part is read).
 * \param src_off byte offset in my part of src. \param bytes bytes to copy (0: only the signal, which
 * counts). \param sig the signal index on peer, below num_signals. \param op DION_SIG_SET or DION_SIG_ADD.
 * \param value the value to set or add.
 * \param counter the local counter, below DION_NUM_COUNTERS (DION_CHECK=1: else recorded, nothing done). */
DION_HD void dion_put_signal_counted(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                                     size_t src_off, size_t bytes, uint32_t sig, dion_sig_op_t op,
                                     uint64_t value, uint32_t counter)
{
    dion__put_signal_group(c, DION__THREAD, dst, peer, dst_off, src, src_off, bytes, sig, op, value, counter);
}

/** dion_put_signal_counted by a whole warp (same arguments in every lane); one count for the warp's call.
 * \copydetails dion_put_signal_counted */
DION_HD void dion_put_signal_counted_warp(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off,
                                          dion_dwin_t src, size_t src_off, size_t bytes, uint32_t sig,
                                          dion_sig_op_t op, uint64_t value, uint32_t counter)
{
    dion__put_signal_group(c, DION__WARP, dst, peer, dst_off, src, src_off, bytes, sig, op, value, counter);
}

/** dion_put_signal_counted by a whole block (same arguments in every thread); one count for the block's call.
 * \copydetails dion_put_signal_counted */
DION_HD void dion_put_signal_counted_block(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off,
                                           dion_dwin_t src, size_t src_off, size_t bytes, uint32_t sig,
                                           dion_sig_op_t op, uint64_t value, uint32_t counter)
{
    dion__put_signal_group(c, DION__BLOCK, dst, peer, dst_off, src, src_off, bytes, sig, op, value, counter);
}

/* The p2p part of a signal; mode as in dion__put_p2p. Signal tables live in device memory (or shared memory
 * in CPU mode): the peer's scope is enough. */
DION_HD void dion__signal_p2p(const dion_ctx_t *c, int peer, uint32_t sig, dion_sig_op_t op, uint64_t value,
                              int mode)
{
    dion__p2p_signal(c, peer, sig, op, value,
                     dion__peer_scope_at(&c->dev, peer, mode) | dion__dev_scope(&c->dev), mode);
    if (!DION__LEAN_AT(mode)) {
        DION__STAT(c, signals, 1);
        DION__TRACE(c, 0, DION_OP_SIGNAL, peer, sig, 0, value, 0, (uint32_t)op, DION_SUCCESS);
    }
}

/** Sets or adds to peer's signal sig. SET / ADD are releases, ordered after the caller's earlier puts to
 * that peer; SET_RELAXED / ADD_RELAXED order nothing (pure synchronization). Returns when issued.
 * \param c the context. \param peer the target rank. \param sig the signal index, below num_signals.
 * \param op a dion_sig_op_t. \param value the value to set or add. */
DION_HD void dion_signal(dion_ctx_t c, int peer, uint32_t sig, dion_sig_op_t op, uint64_t value)
{
    if (dion__fast_peer(&c, peer)) {
        dion__signal_p2p(&c, peer, sig, op, value, DION__LK_INLINE);
        return;
    }
    if (dion__check_enabled(&c) && !DION__CHECK_SIGNAL(&c, peer, sig, op)) return;
#if DION__HAS_PROXY
    if (dion__proxy_sig_route(&c, peer)) {
        dion_status_t st = dion__proxy_signal(&c, peer, sig, (uint32_t)op, value, DION_OP_SIGNAL);
        DION__STAT(&c, signals, 1);
        DION__TRACE(&c, 0, DION_OP_SIGNAL, peer, sig, 0, value, 0, (uint32_t)op, st);
        (void)st;
        return;
    }
#endif
#if DION__HAS_GDAKI
    if (dion__gdaki_amo_route(&c, peer)) { /* a peer over gdaki, or itself through its loopback QP */
        dion__gdaki_signal(&c, peer, sig, (uint32_t)op, value, DION_OP_SIGNAL);
        return;
    }
#endif
    dion__signal_p2p(&c, peer, sig, op, value, DION__LK_SLOW);
}

/** Blocks until this rank's signal sig compares as asked with value ("signal cmp value"); acquire: the data
 * of puts whose signal value it observed is visible afterwards. One thread.
 * \param c the context. \param sig my signal index. \param cmp a dion_cmp_t. \param value the operand.
 * \param observed may be NULL; receives the last value read.
 * \return DION_SUCCESS, DION_ERR_TIMEOUT (after the handle's wait timeout, with an error record),
 * DION_ERR_ABORTED, DION_ERR_PEER_FAILED, or DION_ERR_INVALID_ARG under DION_CHECK=1. */
DION_HD dion_status_t dion_wait(dion_ctx_t c, uint32_t sig, dion_cmp_t cmp, uint64_t value,
                                uint64_t *observed)
{
    if (dion__check_enabled(&c) && DION__CHECK_WAIT(&c, sig, (uint32_t)cmp) != DION_SUCCESS)
        return DION_ERR_INVALID_ARG;
    DION__STAT(&c, waits, 1);
    uint64_t t0 = dion__trace_start(&c), seen = 0;
    dion_status_t st =
        dion__wait_word(&c, c.dev.signals + sig, (uint32_t)cmp, value, &seen, DION_OP_WAIT, sig);
    if (observed) *observed = seen;
    DION__TRACE(&c, t0, DION_OP_WAIT, c.dev.rank, sig, 0, value, seen, (uint32_t)cmp, st);
    return st;
}

/** Reads this rank's signal sig now (an acquire load); does not wait.
 * \param c the context. \param sig my signal index.
 * \return its value (0 when DION_CHECK=1 rejected the call). */
DION_HD uint64_t dion_signal_read(dion_ctx_t c, uint32_t sig)
{
    if (dion__check_enabled(&c) && (!dion__check_ctx(&c, DION_OP_SIGNAL_READ, 1) ||
                                    !dion__check_sig(&c, c.dev.rank, sig, DION_OP_SIGNAL_READ, 1)))
        return 0;
    return dion__ld_acquire(c.dev.signals + sig, dion__dev_scope(&c.dev));
}

/* ---- local completion counters (device/counter.cuh) ---- */

/** Reads local counter `counter` of the context now (acquire; does not wait): how many counted operations of
 * the context (dion_put_counted, dion_put_signal_counted and their group variants) have sources that may be
 * reused. Counters start at 0 with the handle and only grow; they never count more calls than were made.
 * \param c the context. \param counter the counter, below DION_NUM_COUNTERS.
 * \return its value (0 when DION_CHECK=1 rejected the call). */
DION_HD uint64_t dion_counter_read(dion_ctx_t c, uint32_t counter)
{
    if (dion__check_enabled(&c) && (!dion__check_ctx(&c, DION_OP_COUNTER_READ, 1) ||
                                    !dion__check_counter(&c, counter, DION_OP_COUNTER_READ, -1, 1)))
        return 0;
    return dion__lcount_value(&c, counter % DION_NUM_COUNTERS);
}

/** Blocks until local counter `counter` of the context is at least value: the sources of that many counted
 * operations may be reused (written over, freed). Acquire on the counter; says nothing about delivery at the
 * targets. One thread; with the handle's wait timeout, like dion_wait.
 * \param c the context. \param counter the counter, below DION_NUM_COUNTERS.
 * \param value the count to reach (counted calls made so far on this context and counter, or fewer).
 * \return DION_SUCCESS; DION_ERR_TIMEOUT after the handle's wait timeout (with an error record naming the
 * counter, the value and the last count seen); DION_ERR_ABORTED or DION_ERR_PEER_FAILED once the comm was
 * aborted or a rank failed; the ring's status when the context's proxy ring failed; DION_ERR_INVALID_ARG
 * under DION_CHECK=1 for a bad context or counter. */
DION_HD dion_status_t dion_counter_wait(dion_ctx_t c, uint32_t counter, uint64_t value)
{
    if (dion__check_enabled(&c) && (!dion__check_ctx(&c, DION_OP_COUNTER_WAIT, 1) ||
                                    !dion__check_counter(&c, counter, DION_OP_COUNTER_WAIT, -1, 1)))
        return DION_ERR_INVALID_ARG;
    counter %= DION_NUM_COUNTERS;
    DION__STAT(&c, waits, 1);
    uint64_t t0 = dion__trace_start(&c), seen = 0;
    dion_status_t st = dion__lcount_wait(&c, counter, value, &seen);
    DION__TRACE(&c, t0, DION_OP_COUNTER_WAIT, c.dev.rank, counter, 0, value, seen, DION_CMP_GE, st);
    return st;
}

/* ---- ordering and completion ---- */

/** Orders the caller's earlier puts and atomics before its later signals, put_signals, atomics and barriers
 * (not before a later plain put that the target polls). Does not wait for delivery.
 * \param c the context. */
DION_HD void dion_fence(dion_ctx_t c)
{
    if (dion__check_enabled(&c) && !dion__check_ctx(&c, DION_OP_FENCE, 1)) return;
    uint64_t t0 = dion__trace_start(&c);
    dion__p2p_quiet(&c);
#if DION__HAS_PROXY
    if (DION__COLD(c.dev.flags & DION_DEVF_PROXY))
        dion__proxy_ctx_order(&c, DION_PROXY_OP_FENCE, DION_OP_FENCE);
#endif
#if DION__HAS_GDAKI
    if (c.dev.flags & DION_DEVF_GDAKI) dion__gdaki_ctx_fence(&c);
#endif
    DION__STAT(&c, fences, 1);
    DION__TRACE(&c, t0, DION_OP_FENCE, -1, 0, 0, 0, 0, 0, DION_SUCCESS);
}

/** Completes every earlier operation of the caller: sources reusable, data delivered at the targets.
 * \param c the context.
 * \return DION_SUCCESS; DION_ERR_ABORTED / DION_ERR_PEER_FAILED once the comm was aborted or a peer failed;
 * DION_ERR_INVALID_ARG under DION_CHECK=1. */
DION_HD dion_status_t dion_quiet(dion_ctx_t c)
{
    if (dion__check_enabled(&c) && !dion__check_ctx(&c, DION_OP_QUIET, 1)) return DION_ERR_INVALID_ARG;
    uint64_t t0 = dion__trace_start(&c);
    /* The abort word is read before the fence so that its latency overlaps the fence's. */
    uint64_t ab =
        dion__ld_relaxed(dion__ctl_word(&c.dev, c.dev.signals, DION_CTL_ABORT), dion__dev_scope(&c.dev));
    dion__p2p_quiet(&c);
#if DION__HAS_PROXY
    if (DION__COLD(c.dev.flags & DION_DEVF_PROXY)) {
        dion_status_t pst = dion__proxy_ctx_order(&c, DION_PROXY_OP_QUIET, DION_OP_QUIET);
        if (!ab && pst) ab = (uint64_t)pst;
    }
#endif
#if DION__HAS_GDAKI
    if (c.dev.flags & DION_DEVF_GDAKI) {
        dion_status_t gst = dion__gdaki_ctx_quiet(&c, DION_OP_QUIET);
        if (!ab && gst) ab = (uint64_t)gst;
    }
#endif
    DION__STAT(&c, quiets, 1);
    DION__TRACE(&c, t0, DION_OP_QUIET, -1, 0, 0, 0, 0, 0, (dion_status_t)ab);
    return (dion_status_t)ab;
}

/** Device barrier: all ranks' threads calling it on the same context meet; exactly one thread per context
 * per rank calls it. Includes a dion_quiet; blocks, with the wait timeout.
 * \param c the context.
 * \return as dion_wait (DION_SUCCESS, DION_ERR_TIMEOUT, DION_ERR_ABORTED, DION_ERR_PEER_FAILED). */
DION_HD dion_status_t dion_barrier(dion_ctx_t c)
{
    const dion_dev_t *d = &c.dev;
    if (c.index >= d->num_contexts) {
        if (dion__check_enabled(&c)) {
            dion__check_ctx(&c, DION_OP_BARRIER, 1);
            return DION_ERR_INVALID_ARG;
        }
        c.index = 0;
    }
    uint64_t t0 = dion__trace_start(&c);
    dion_status_t st = dion_quiet(c);
    if (st != DION_SUCCESS) return st;
    /* Counter barrier: the epoch is private to the context; every rank adds one to each peer's counter and
     * waits for (nranks-1) arrivals per epoch. Counters only grow, so a fast peer's next epoch cannot be
     * lost. */
    uint64_t epoch = d->ctx_state[c.index] + 1;
    d->ctx_state[c.index] = epoch;
    uint32_t word = d->num_signals + dion__barrier_word(d, c.index);
    for (int p = 0; p < d->nranks; p++) {
        if (p == d->rank) continue;
#if DION__HAS_PROXY
        if (dion__is_proxy(&c, p)) {
            dion__proxy_signal(&c, p, word, DION_SIG_ADD, 1, DION_OP_BARRIER);
            continue;
        }
#endif
#if DION__HAS_GDAKI
        if (dion__is_gdaki(&c, p)) {
            dion__gdaki_signal(&c, p, word, DION_SIG_ADD, 1, DION_OP_BARRIER);
            continue;
        }
#endif
        dion__red_add_release(dion__peer_signals(d, p) + word, 1,
                              dion__peer_scope(d, p) | dion__dev_scope(d));
    }
    st = dion__wait_word(&c, d->signals + word, DION_CMP_GE, epoch * (uint64_t)(d->nranks - 1), NULL,
                         DION_OP_BARRIER, word);
    DION__STAT(&c, barriers, 1);
    DION__TRACE(&c, t0, DION_OP_BARRIER, -1, word, 0, epoch * (uint64_t)(d->nranks - 1), 0, DION_CMP_GE, st);
    return st;
}

/* ---- get and atomics ---- */

DION_HD void dion__get_group(dion_ctx_t c, dion__group_t g, dion_dwin_t dst, size_t dst_off, dion_dwin_t src,
                             int peer, size_t src_off, size_t bytes)
{
    uint32_t r = dion__group_rank(g), n = dion__group_size(g);
    uint64_t t0 = dion__trace_start(&c);
    if (dion__check_enabled(&c)) {
        int lead = r == 0;
        if (!dion__check_ctx(&c, DION_OP_GET, lead) || !dion__check_peer(&c, peer, DION_OP_GET, lead) ||
            !dion__check_range(&c, src, peer, src_off, bytes, 1, DION_OP_GET, peer, lead) ||
            !dion__check_range(&c, dst, c.dev.rank, dst_off, bytes, 1, DION_OP_GET, peer, lead))
            return;
    }
#if DION__HAS_PROXY
    if (dion__is_proxy(&c, peer)) {
        dion__group_sync(g);
        if (r == 0)
            dion__proxy_rma_lead(&c, DION_PROXY_OP_GET, DION_OP_GET, peer, dst, dst_off, src, src_off, bytes,
                                 0, DION_SIG_SET, 0, DION__NO_COUNTER, t0);
        dion__group_sync(g); /* the leader waited for the data: the whole group sees it */
        return;
    }
#endif
#if DION__HAS_GDAKI
    if (dion__is_gdaki(&c, peer)) {
        dion__gdaki_rma_group(&c, g, 1, DION_OP_GET, peer, dst, dst_off, src, src_off, bytes, 0, 0,
                              DION_SIG_SET, 0, DION__NO_COUNTER, t0);
        return;
    }
#endif
    dion__copy(dion__win_base(&c.dev, dst, c.dev.rank) + dst_off, dion__win_base(&c.dev, src, peer) + src_off,
               bytes, r, n);
    dion__group_sync(g);
    if (r == 0) {
        DION__STAT(&c, gets, 1);
        DION__STAT(&c, get_bytes, bytes);
        DION__TRACE(&c, t0, DION_OP_GET, peer, 0, bytes, 0, 0, 0, DION_SUCCESS);
    }
}

/** One-sided get of bytes from peer's part of src into my part of dst; one thread. On p2p the data is in
 * dst when it returns; on every backend it is there after dion_quiet.
 * \param c the context. \param dst the local window. \param dst_off byte offset in my part of dst.
 * \param src the remote window. \param peer the rank read from. \param src_off byte offset in peer's part.
 * \param bytes bytes to copy. */
DION_HD void dion_get(dion_ctx_t c, dion_dwin_t dst, size_t dst_off, dion_dwin_t src, int peer,
                      size_t src_off, size_t bytes)
{
    dion__get_group(c, DION__THREAD, dst, dst_off, src, peer, src_off, bytes);
}

/** dion_get by a whole warp (same arguments in every lane). \copydetails dion_get */
DION_HD void dion_get_warp(dion_ctx_t c, dion_dwin_t dst, size_t dst_off, dion_dwin_t src, int peer,
                           size_t src_off, size_t bytes)
{
    dion__get_group(c, DION__WARP, dst, dst_off, src, peer, src_off, bytes);
}

/** dion_get by a whole block (same arguments in every thread). \copydetails dion_get */
DION_HD void dion_get_block(dion_ctx_t c, dion_dwin_t dst, size_t dst_off, dion_dwin_t src, int peer,
                            size_t src_off, size_t bytes)
{
    dion__get_group(c, DION__BLOCK, dst, dst_off, src, peer, src_off, bytes);
}

/* 64-bit atomics on an 8-byte-aligned word of peer's window. Relaxed: order them against puts with
 * dion_fence. A call rejected by DION_CHECK returns 0. */
DION_HD int dion__check_atomic(const dion_ctx_t *c, dion_dwin_t w, int peer, size_t off, dion_op_t op)
{
    return dion__check_ctx(c, op, 1) && dion__check_peer(c, peer, op, 1) &&
           dion__check_range(c, w, peer, off, 8, 8, op, peer, 1);
}

/** Atomic 64-bit add on an 8-byte-aligned word of peer's window; relaxed (order it against puts with
 * dion_fence). Blocks until the old value is known.
 * \param c the context. \param win the window. \param peer the target rank.
 * \param off byte offset in peer's part; base + off must be 8-byte aligned. \param value the addend.
 * \return the old value (0 when DION_CHECK=1 rejected the call). */
DION_HD uint64_t dion_atomic_fetch_add(dion_ctx_t c, dion_dwin_t win, int peer, size_t off, uint64_t value)
{
    if (dion__check_enabled(&c) && !dion__check_atomic(&c, win, peer, off, DION_OP_FETCH_ADD)) return 0;
    DION__STAT(&c, atomics, 1);
    uint64_t t0 = dion__trace_start(&c);
#if DION__HAS_PROXY
    if (dion__proxy_amo_route(&c, peer)) {
        uint64_t o =
            dion__proxy_amo(&c, DION_PROXY_OP_FETCH_ADD, DION_OP_FETCH_ADD, win, peer, off, value, 0);
        DION__TRACE(&c, t0, DION_OP_FETCH_ADD, peer, 0, 8, value, o, 0, DION_SUCCESS);
        return o;
    }
#endif
#if DION__HAS_GDAKI
    if (dion__gdaki_amo_route(&c, peer)) {
        uint64_t o = dion__gdaki_amo(&c, 0, DION_OP_FETCH_ADD, win, peer, off, value, 0);
        DION__TRACE(&c, t0, DION_OP_FETCH_ADD, peer, 0, 8, value, o, 0, DION_SUCCESS);
        return o;
    }
#endif
    uint64_t old = dion__p2p_fetch_add(&c.dev, win, peer, off, value, dion__p2p_scope(&c, peer, win));
    DION__TRACE(&c, t0, DION_OP_FETCH_ADD, peer, 0, 8, value, old, 0, DION_SUCCESS);
    return old;
}

/** Atomic 64-bit compare-and-swap, otherwise as dion_atomic_fetch_add.
 * \param c the context. \param win the window. \param peer the target rank. \param off the word's offset.
 * \param expected the value to compare with. \param desired written when the word equals expected.
 * \return the old value (equal to expected when the swap happened). */
DION_HD uint64_t dion_atomic_compare_swap(dion_ctx_t c, dion_dwin_t win, int peer, size_t off,
                                          uint64_t expected, uint64_t desired)
{
    if (dion__check_enabled(&c) && !dion__check_atomic(&c, win, peer, off, DION_OP_COMPARE_SWAP)) return 0;
    DION__STAT(&c, atomics, 1);
    uint64_t t0 = dion__trace_start(&c);
#if DION__HAS_PROXY
    if (dion__proxy_amo_route(&c, peer)) {
        uint64_t o = dion__proxy_amo(&c, DION_PROXY_OP_COMPARE_SWAP, DION_OP_COMPARE_SWAP, win, peer, off,
                                     expected, desired);
        DION__TRACE(&c, t0, DION_OP_COMPARE_SWAP, peer, 0, 8, desired, o, 0, DION_SUCCESS);
        return o;
    }
#endif
#if DION__HAS_GDAKI
    if (dion__gdaki_amo_route(&c, peer)) {
        uint64_t o = dion__gdaki_amo(&c, 1, DION_OP_COMPARE_SWAP, win, peer, off, desired, expected);
        DION__TRACE(&c, t0, DION_OP_COMPARE_SWAP, peer, 0, 8, desired, o, 0, DION_SUCCESS);
        return o;
    }
#endif
    uint64_t old =
        dion__p2p_compare_swap(&c.dev, win, peer, off, expected, desired, dion__p2p_scope(&c, peer, win));
    DION__TRACE(&c, t0, DION_OP_COMPARE_SWAP, peer, 0, 8, desired, old, 0, DION_SUCCESS);
    return old;
}

/* ================================================================================================ */
/* ---- packet puts (device/packet.cuh; docs/semantics.md "Packet puts") ----
 * put_packet writes `bytes` payload bytes from src (any local memory: registers spilled, shared, global) as
 * a message with sequence seq (nonzero) into peer's window dst at dst_off (16-byte aligned address), taking
 * DION_PACKET_SPAN(bytes) bytes there. wait_packet polls this rank's window win at off until the whole
 * message with sequence seq is there and copies its payload to dst. No fence on either side: the message
 * orders nothing else (no acquire, no release, no order against other ops of the context); src is reusable on
 * return. wait_packet returns DION_SUCCESS, or DION_ERR_TIMEOUT (with an error record), DION_ERR_ABORTED,
 * DION_ERR_PEER_FAILED; the warp and block variants return the same status on every thread and, on success,
 * the whole payload is in dst for all of them. Peers reached by a network backend: DION_ERR_UNSUPPORTED is
 * recorded and nothing is written (until those backends guarantee whole 8-byte words per RDMA write). */

#include "dion/device/packet.cuh"

/** Packet put from one thread: writes `bytes` payload bytes from src as one message with sequence seq into
 * peer's window dst at dst_off, taking DION_PACKET_SPAN(bytes) bytes there (each 8-byte word carries 4
 * payload bytes and the sequence, so the receiver polls the data itself). No fence, no ordering with other
 * operations; src is reusable on return. Same-node (p2p) peers only; a network peer gets an UNSUPPORTED error
 * record. \param c the context. \param dst the target window. \param peer the target rank. \param dst_off
 * offset in peer's part of dst (the address must be 16-byte aligned). \param src the payload (any local
 * memory). \param bytes payload bytes. \param seq the message's sequence: nonzero, the same the receiver
 * waits for (dion_packet_seq_next). */
DION_HD void dion_put_packet(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, const void *src,
                             size_t bytes, uint32_t seq)
{
    dion__put_packet_group(c, DION__THREAD, dst, peer, dst_off, src, bytes, seq);
}

/** dion_put_packet by every thread of a warp with the same arguments; the lanes share the stores.
 * \copydetails dion_put_packet */
DION_HD void dion_put_packet_warp(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, const void *src,
                                  size_t bytes, uint32_t seq)
{
    dion__put_packet_group(c, DION__WARP, dst, peer, dst_off, src, bytes, seq);
}

/** dion_put_packet by every thread of a block with the same arguments; the threads share the stores.
 * \copydetails dion_put_packet */
DION_HD void dion_put_packet_block(dion_ctx_t c, dion_dwin_t dst, int peer, size_t dst_off, const void *src,
                                   size_t bytes, uint32_t seq)
{
    dion__put_packet_group(c, DION__BLOCK, dst, peer, dst_off, src, bytes, seq);
}

/** Waits, in one thread, until the packet message with sequence seq is whole in this rank's window win at
 * off, then copies its `bytes` payload bytes to dst. Guarantees only that the payload is in dst: no acquire
 * of other data, no order against other operations. \param c the context. \param win this rank's window.
 * \param off the message's offset (16-byte aligned address). \param dst where the payload goes. \param bytes
 * payload bytes (as the sender passed). \param seq the sequence to wait for (nonzero). \return DION_SUCCESS;
 * DION_ERR_TIMEOUT (with an error record) after the handle's wait timeout; DION_ERR_ABORTED or
 * DION_ERR_PEER_FAILED when the comm was aborted or a rank failed; DION_ERR_INVALID_ARG under DION_CHECK for
 * bad arguments. */
DION_HD dion_status_t dion_wait_packet(dion_ctx_t c, dion_dwin_t win, size_t off, void *dst, size_t bytes,
                                       uint32_t seq)
{
    return dion__wait_packet_group(c, DION__THREAD, win, off, dst, bytes, seq);
}

/** dion_wait_packet by every thread of a warp with the same arguments; every lane gets the same status and,
 * on success, the whole payload is in dst. \copydetails dion_wait_packet */
DION_HD dion_status_t dion_wait_packet_warp(dion_ctx_t c, dion_dwin_t win, size_t off, void *dst,
                                            size_t bytes, uint32_t seq)
{
    return dion__wait_packet_group(c, DION__WARP, win, off, dst, bytes, seq);
}

/** dion_wait_packet by every thread of a block with the same arguments; every thread gets the same status
 * and, on success, the whole payload is in dst. \copydetails dion_wait_packet */
DION_HD dion_status_t dion_wait_packet_block(dion_ctx_t c, dion_dwin_t win, size_t off, void *dst,
                                             size_t bytes, uint32_t seq)
{
    return dion__wait_packet_group(c, DION__BLOCK, win, off, dst, bytes, seq);
}

#endif /* DION_DEVICE_CUH */
