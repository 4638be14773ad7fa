/* The proxy backend behind the transport seam: peers anywhere (other hosts included) reached through an
 * engine (verbs: rdma-core RC QPs; ofi: libfabric) that proxy threads drive on behalf of device code. Per
 * comm: one engine, the same on every rank (verbs when every rank can open it, else ofi; DION_TRANSPORT=
 * proxy/verbs or proxy/ofi forces one), its registrations (one per window and signal table) and one set of
 * proxy threads draining the rings of every device handle of the comm. The engine is used by one thread at a
 * time (engine.h): every call into it holds the comm's mutex, so DION_PROXY_THREADS > 1 shares rings out but
 * serializes on the engine. docs/backends/proxy.md describes selection, placement and ordering. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/cuda.h"
#include "transports/proxy/px.h"
#include "transports/transport.h"

#define DION__PX_SLOTS 1024u /* commands per context's ring */

/* ---- the engine glue: execute and progress (dion__proxy_exec_t) ---- */

dion__pxr_t *dion__px_find(dion__pxc_t *pc, uint32_t id)
{
    for (dion__pxr_t *x = pc->regions; x; x = x->next)
        if (x->named && x->id == id) return x;
    return NULL;
}

static uint32_t dion__px_rhash(const dion__proxy_ring_t *r)
{
    uint64_t x = (uint64_t)(uintptr_t)r;
    x ^= x >> 29;
    x *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x >> 40) & (DION__PX_RMAP - 1u);
}

/* The glue of ring r, from the ring map (open addressing; rebuilt when handles come and go). */
static dion__pxg_t *dion__px_glue(dion__pxc_t *pc, const dion__proxy_ring_t *r)
{
    for (uint32_t h = dion__px_rhash(r);; h = (h + 1u) & (DION__PX_RMAP - 1u)) {
        uint16_t gid = pc->rmap[h];
        if (!gid) return NULL;
        if (pc->gtab[gid] && pc->gtab[gid]->r == r) return pc->gtab[gid];
    }
}

/* Rebuilds the ring map from gtab. The caller holds the mutex. */
static void dion__px_rmap_build(dion__pxc_t *pc)
{
    memset(pc->rmap, 0, sizeof pc->rmap);
    for (uint32_t gid = 1; gid < DION__PX_GLUES; gid++) {
        if (!pc->gtab[gid]) continue;
        uint32_t h = dion__px_rhash(pc->gtab[gid]->r);
        while (pc->rmap[h]) h = (h + 1u) & (DION__PX_RMAP - 1u);
        pc->rmap[h] = (uint16_t)gid;
    }
}

DION__STATIC_ASSERT(DION_NUM_COUNTERS == DION_PROXY_LCOUNTERS,
                    "dion_counter_wait adds the ring's local counter of the same index to the p2p one");

/* Counts the counted commands whose sources the engine no longer reads, in ring order: a count never
 * overtakes an earlier counted command of the ring, so counter >= v covers the first v counted commands
 * (docs/semantics.md). A complete position's source is free too. A failed ring counts no more. */
static void dion__px_count(dion__pxg_t *g)
{
    dion__proxy_ring_t *r = g->r;
    uint64_t mask = r->dev.mask;
    for (; g->counted < g->exec; g->counted++) {
        uint16_t *m = &g->meta[g->counted & mask];
        uint32_t k = *m & DION__PX_META_CNT;
        if (!k) continue;
        if (!(*m & DION__PX_META_SRC) && g->counted >= g->done) break;
        if (!r->failed) dion__proxy_ring_count(r, k - 1u);
        *m = (uint16_t)(*m & ~DION__PX_META_CNT);
    }
}

/* Completes positions in ring order while nothing of them is in flight, then counts what became free. A
 * staged get copies its data from the shadow into the window first. */
void dion__px_advance(dion__pxg_t *g)
{
    dion__proxy_ring_t *r = g->r;
    uint64_t mask = r->dev.mask;
    while (g->done < g->exec && g->cnt[g->done & mask] == 0) {
        uint16_t m = g->meta[g->done & mask];
        if ((m & DION__PX_META_COPY) && !r->failed) {
            const dion__px_copy_t *cp = &g->copy[g->done & mask];
            if (dion__pxs_sync(g->pc, cp->r, cp->off, cp->bytes, 0) != DION_SUCCESS) {
                snprintf(g->why, sizeof g->why, "%s", dion_last_error());
                dion__proxy_ring_fail(r, DION_ERR_CUDA, g->why);
            }
        }
        g->done++;
    }
    dion__px_count(g);
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
    if (bytes <= x->bytes && off <= x->bytes - bytes && (x->mr || x->smr || !bytes)) return DION_SUCCESS;
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

/* The command is fully posted: the next position starts afresh. */
static dion_status_t dion__px_posted(dion__pxg_t *g)
{
    g->partial = 0;
    g->pstep = 0;
    return DION_SUCCESS;
}

/* Remembers that steps of the command at pos are posted, for when it comes again after BUSY. */
static void dion__px_step(dion__pxg_t *g, uint64_t pos, uint32_t *done, uint32_t step)
{
    *done |= step;
    g->partial = pos + 1;
    g->pstep = *done;
}

/* The signal part of a notice (the target's own signal table, by its key). */
static void dion__px_note_signal(dion__px_note_t *n, const dion__pxg_t *g, int peer,
                                 const dion_proxy_cmd_t *c)
{
    n->has_sig = 1;
    n->sig_op = c->u.rma.sig_op;
    n->sig = c->u.rma.sig;
    n->value = c->u.rma.value;
    n->sigkey = g->d->sig->rkeys[peer].mem.key;
}

/* A put_signal as one engine operation (engine slot put_signal: the ofi engine's message mode), when the
 * engine takes it: DION__ENGINE_DECLINED otherwise (nothing posted; staged sources go the usual way). */
static dion_status_t dion__px_put_signal_one(dion__pxc_t *pc, dion__pxg_t *g, const dion_proxy_cmd_t *c,
                                             uint64_t pos, dion__pxr_t *src, const dion__px_desc_t *to)
{
    if (src->staged) return DION__ENGINE_DECLINED;
    uint64_t ck = dion__px_cookie(g, pos);
    uint16_t *meta = &g->meta[pos & g->r->dev.mask];
    if ((*meta & DION__PX_META_CNT) && !(*meta & DION__PX_META_SRC)) ck |= DION__PX_CK_SRC;
    return pc->E->put_signal(pc->e, c->peer, src->mr, src->base + c->u.rma.src_off, &to->mem,
                             c->u.rma.dst_off, c->u.rma.bytes, &g->d->sig->rkeys[c->peer].mem,
                             (uint64_t)c->u.rma.sig * 8u,
                             dion__px_sig_amo(c->u.rma.sig_op) == DION__ENGINE_AMO_ADD, c->u.rma.value, ck);
}

/* put and put_signal. The source of a staged window goes through its shadow; a staged destination gets the
 * data in its shadow and a notice (LAND, with the signal); a put_signal into an unstaged window while notices
 * to the peer are unacknowledged sends its signal as a notice (after them). */
static dion_status_t dion__px_post_put(dion__pxc_t *pc, dion__pxg_t *g, const dion_proxy_cmd_t *c,
                                       uint64_t pos, uint32_t *need)
{
    const dion__engine_ops_t *E = pc->E;
    int peer = c->peer, sig = c->op == DION_PROXY_OP_PUT_SIGNAL;
    uint32_t done = g->partial == pos + 1 ? g->pstep : 0;
    uint64_t bytes = c->u.rma.bytes, soff = c->u.rma.src_off, doff = c->u.rma.dst_off;
    dion__pxr_t *src = NULL, *dst = NULL;
    dion_status_t st;
    if ((st = dion__px_region(pc, c->u.rma.dst_win, peer, "destination", &dst)) != DION_SUCCESS) return st;
    if ((st = dion__px_region(pc, c->u.rma.src_win, peer, "source", &src)) != DION_SUCCESS) return st;
    if ((st = dion__px_local(src, soff, bytes, peer, "source")) != DION_SUCCESS) return st;
    if (sig && !g->d->sig) return dion__error(DION_ERR_INTERNAL, "proxy: the handle has no signal tables");
    const dion__px_desc_t *to = &dst->rkeys[peer];
    int note = to->staged || (sig && dion__pxs_pending(pc, peer));
    uint16_t *meta = &g->meta[pos & g->r->dev.mask];
    if (!bytes) *meta |= DION__PX_META_SRC; /* no bytes to read: a counted source is free at once */
    if (sig && !note && !done && E->put_signal) {
        st = dion__px_put_signal_one(pc, g, c, pos, src, to);
        if (st != DION__ENGINE_DECLINED) {
            if (st != DION_SUCCESS) return st;
            (*need)++;
            return dion__px_posted(g);
        }
    }
    if (bytes && !(done & DION__PXS_DATA)) {
        const char *from = src->base + soff;
        dion__engine_mr_t *mr = src->mr;
        if (src->staged) {
            if (!(done &
                  DION__PXS_STAGED_IN)) { /* the batch's copy (dion__pxs_stage_sources), else its own */
                if (pos >= g->staged_to && (st = dion__pxs_sync(pc, src, soff, bytes, 1)) != DION_SUCCESS)
                    return st;
                dion__px_step(g, pos, &done, DION__PXS_STAGED_IN);
                *meta |= DION__PX_META_SRC; /* copied into the shadow: the window's bytes are free */
            }
            from = src->shadow + soff;
            mr = src->smr;
            dion__pxs_source(pc, g, pos, &from, &mr); /* or its batch's copy in the source arena */
        }
        /* a counted command's source is free at this put's completion, before the command's (which also
         * waits for the signal and for every earlier position) */
        uint64_t ck = dion__px_cookie(g, pos);
        if ((*meta & DION__PX_META_CNT) && !(*meta & DION__PX_META_SRC)) ck |= DION__PX_CK_SRC;
        st = E->put(pc->e, peer, mr, from, to->staged ? &to->shadow : &to->mem, doff, bytes, 0, ck);
        if (st != DION_SUCCESS) return st;
        dion__px_step(g, pos, &done, DION__PXS_DATA);
        (*need)++;
    }
    if (note) {
        dion__px_note_t n;
        memset(&n, 0, sizeof n);
        n.op = to->staged ? DION__PXN_LAND : DION__PXN_SIG;
        n.win = c->u.rma.dst_win;
        n.off = doff;
        n.bytes = to->staged ? bytes : 0;
        if (sig) dion__px_note_signal(&n, g, peer, c);
        if ((st = dion__pxs_send(pc, g, pos, peer, &n, 0)) != DION_SUCCESS) return st;
        (*need)++; /* the acknowledgement */
        return dion__px_posted(g);
    }
    if (!sig) return dion__px_posted(g);
    st = E->atomic(pc->e, peer, dion__px_sig_amo(c->u.rma.sig_op), &g->d->sig->rkeys[peer].mem,
                   (uint64_t)c->u.rma.sig * 8u, c->u.rma.value, 0, DION__ENGINE_F_ORDERED,
                   dion__px_cookie(g, pos));
    if (st != DION_SUCCESS) return st;
    (*need)++;
    return dion__px_posted(g);
}

/* An atomic of this rank on its own window (device code sends them here when the handle has proxy peers, so
 * that they are atomic with respect to the engine's remote atomics on the same words): a CPU atomic on host
 * memory, as the engines' software atomics are; the result is written at once. GPU memory cannot be updated
 * atomically from here: refused with a sentence. */
static dion_status_t dion__px_self_amo(dion__pxc_t *pc, dion_proxy_cmd_t *c)
{
    dion__pxr_t *w = NULL;
    dion_status_t st = dion__px_region(pc, c->u.amo.win, pc->comm->rank, "atomic", &w);
    if (st != DION_SUCCESS) return st;
    if (c->u.amo.off > w->bytes || w->bytes - c->u.amo.off < 8 || (c->u.amo.off & 7))
        return dion__error(DION_ERR_REMOTE_ACCESS,
                           "proxy: an atomic at offset %llu of this rank's part of window %u (%llu bytes) "
                           "is outside it or not 8-byte aligned",
                           (unsigned long long)c->u.amo.off, w->id, (unsigned long long)w->bytes);
    if (w->gpu)
        return dion__error(DION_ERR_UNSUPPORTED,
                           "proxy: an atomic on this rank's own GPU window %u while peers reach it through "
                           "the proxy: the proxy cannot update GPU memory atomically with respect to the "
                           "engine; use a host window (dion_win_alloc on_host=1) for atomics",
                           w->id);
    uint64_t *word = (uint64_t *)(w->base + c->u.amo.off), old;
    if (c->op == DION_PROXY_OP_FETCH_ADD) {
        old = __atomic_fetch_add(word, c->u.amo.operand, __ATOMIC_SEQ_CST);
    } else {
        old = c->u.amo.operand;
        __atomic_compare_exchange_n(word, &old, c->u.amo.desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    dion__proxy_cmd_result(c, old);
    return DION_SUCCESS;
}

/* A signal of this rank to itself (device code sends them here when its signal table is host memory and the
 * handle has proxy peers, dion__proxy_sig_route): a CPU atomic, as the engines apply the peers' signals, so
 * that one word sees one kind of atomic. Complete at once; ring order keeps it after the caller's earlier
 * commands, and the device fenced its own puts before it. */
static dion_status_t dion__px_self_signal(dion__pxc_t *pc, dion__pxg_t *g, const dion_proxy_cmd_t *c)
{
    const dion__pxr_t *t = g->d->sig;
    if (!t || t->gpu || ((uint64_t)c->u.rma.sig + 1) * 8 > t->bytes)
        return dion__error(DION_ERR_INTERNAL,
                           "proxy: rank %d signals word %u of its own signal table, which the proxy cannot "
                           "update (%s)",
                           pc->comm->rank, c->u.rma.sig,
                           !t       ? "none"
                           : t->gpu ? "GPU memory"
                                    : "too small");
    uint64_t *w = (uint64_t *)t->base + c->u.rma.sig;
    if (c->u.rma.sig_op & 1u)
        __atomic_fetch_add(w, c->u.rma.value, __ATOMIC_SEQ_CST);
    else
        __atomic_store_n(w, c->u.rma.value, __ATOMIC_SEQ_CST);
    return DION_SUCCESS;
}

/* Posts what one command needs; *need gets the engine operations (and notices) posted. BUSY: nothing (more)
 * posted, the command comes again. */
static dion_status_t dion__px_post(dion__pxc_t *pc, dion__pxg_t *g, dion_proxy_cmd_t *c, uint64_t pos,
                                   uint32_t *need)
{
    const dion__engine_ops_t *E = pc->E;
    uint64_t ck = dion__px_cookie(g, pos), mask = g->r->dev.mask;
    int peer = c->peer;
    *need = 0;
    if (c->op == DION_PROXY_OP_NOP || c->op == DION_PROXY_OP_QUIET || c->op == DION_PROXY_OP_FENCE)
        return DION_SUCCESS;
    int self_amo =
        peer == pc->comm->rank && (c->op == DION_PROXY_OP_FETCH_ADD || c->op == DION_PROXY_OP_COMPARE_SWAP);
    if (self_amo) return dion__px_self_amo(pc, c);
    if (peer == pc->comm->rank && c->op == DION_PROXY_OP_SIGNAL) return dion__px_self_signal(pc, g, c);
    if (peer < 0 || peer >= pc->comm->nranks || peer == pc->comm->rank)
        return dion__error(DION_ERR_INVALID_ARG,
                           "proxy: a command names rank %d; the comm has ranks 0-%d and "
                           "this rank (%d) is not served by the proxy",
                           peer, pc->comm->nranks - 1, pc->comm->rank);
    dion__pxr_t *src = NULL, *dst = NULL;
    dion__px_note_t n;
    memset(&n, 0, sizeof n);
    dion_status_t st;
    switch (c->op) {
    case DION_PROXY_OP_PUT:
    case DION_PROXY_OP_PUT_SIGNAL:
        return dion__px_post_put(pc, g, c, pos, need);
    case DION_PROXY_OP_SIGNAL:
        if (!g->d->sig) return dion__error(DION_ERR_INTERNAL, "proxy: the handle has no signal tables");
        if (c->u.rma.sig_op <= DION_SIG_ADD && dion__pxs_pending(pc, peer)) { /* after the notices */
            n.op = DION__PXN_SIG;
            dion__px_note_signal(&n, g, peer, c);
            if ((st = dion__pxs_send(pc, g, pos, peer, &n, 0)) == DION_SUCCESS) *need = 1;
            return st == DION_SUCCESS ? dion__px_posted(g) : st;
        }
        st = E->atomic(pc->e, peer, dion__px_sig_amo(c->u.rma.sig_op), &g->d->sig->rkeys[peer].mem,
                       (uint64_t)c->u.rma.sig * 8u, c->u.rma.value, 0,
                       c->u.rma.sig_op <= DION_SIG_ADD ? DION__ENGINE_F_ORDERED : 0, ck);
        if (st == DION_SUCCESS) *need = 1;
        return st;
    case DION_PROXY_OP_GET: {
        if ((st = dion__px_region(pc, c->u.rma.src_win, peer, "source", &src)) != DION_SUCCESS) return st;
        if ((st = dion__px_region(pc, c->u.rma.dst_win, peer, "destination", &dst)) != DION_SUCCESS)
            return st;
        if ((st = dion__px_local(dst, c->u.rma.dst_off, c->u.rma.bytes, peer, "destination")) != DION_SUCCESS)
            return st;
        if (!c->u.rma.bytes) return DION_SUCCESS;
        if (dst->staged) { /* the data lands in the shadow; advance copies it into the window */
            g->meta[pos & mask] |= DION__PX_META_COPY;
            g->copy[pos & mask] = (dion__px_copy_t){dst, c->u.rma.dst_off, c->u.rma.bytes};
        }
        const dion__px_desc_t *from = &src->rkeys[peer];
        if (from->staged) { /* the owner refreshes its shadow and puts the data here */
            n.op = DION__PXN_GET;
            n.win = c->u.rma.src_win;
            n.off = c->u.rma.src_off;
            n.bytes = c->u.rma.bytes;
            n.dst_win = c->u.rma.dst_win;
            n.aux = c->u.rma.dst_off;
            if ((st = dion__pxs_send(pc, g, pos, peer, &n, 0)) == DION_SUCCESS) *need = 1;
            return st == DION_SUCCESS ? dion__px_posted(g) : st;
        }
        char *into = (dst->staged ? dst->shadow : dst->base) + c->u.rma.dst_off;
        st = E->get(pc->e, peer, dst->staged ? dst->smr : dst->mr, into, &from->mem, c->u.rma.src_off,
                    c->u.rma.bytes, 0, ck);
        if (st == DION_SUCCESS) *need = 1;
        return st;
    }
    case DION_PROXY_OP_FETCH_ADD:
    case DION_PROXY_OP_COMPARE_SWAP: {
        if ((st = dion__px_region(pc, c->u.amo.win, peer, "atomic", &dst)) != DION_SUCCESS) return st;
        int cas = c->op == DION_PROXY_OP_COMPARE_SWAP;
        if (dst->rkeys[peer].staged) { /* the owner applies it to the window itself */
            n.op = DION__PXN_AMO;
            n.amo = (uint8_t)(cas ? DION__ENGINE_AMO_CSWAP : DION__ENGINE_AMO_FETCH_ADD);
            n.win = c->u.amo.win;
            n.off = c->u.amo.off;
            n.value = cas ? c->u.amo.desired : c->u.amo.operand;
            n.aux = cas ? c->u.amo.operand : 0;
            if ((st = dion__pxs_send(pc, g, pos, peer, &n, 1)) == DION_SUCCESS) *need = 1;
            return st == DION_SUCCESS ? dion__px_posted(g) : st;
        }
        st = E->atomic(pc->e, peer, cas ? DION__ENGINE_AMO_CSWAP : DION__ENGINE_AMO_FETCH_ADD,
                       &dst->rkeys[peer].mem, c->u.amo.off, cas ? c->u.amo.desired : c->u.amo.operand,
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

/* prestage (dion__proxy_exec_t): a ring's staged sources copied without a wait; the first execute of the pass
 * waits once for every ring's copies. */
static void dion__px_prestage(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                              uint32_t n)
{
    (void)thread;
    dion__pxc_t *pc = arg;
    pthread_mutex_lock(&pc->mu);
    dion__pxg_t *g = dion__px_glue(pc, r);
    if (g) dion__pxs_stage_sources_run(pc, g, cmds, n, 0);
    pthread_mutex_unlock(&pc->mu);
}

static dion_status_t dion__px_execute(void *arg, uint32_t thread, dion__proxy_ring_t *r,
                                      dion_proxy_cmd_t *cmds, uint32_t n, uint32_t *taken)
{
    (void)thread;
    dion__pxc_t *pc = arg;
    dion_status_t st = DION_SUCCESS;
    uint32_t i = 0;
    pthread_mutex_lock(&pc->mu);
    dion__pxg_t *g = dion__px_glue(pc, r);
    uint64_t mask = r->dev.mask;
    /* the engine's occupancy once per batch, then counted here (walking its peers per command costs) */
    uint32_t used = pc->caps.max_ops ? pc->E->pending(pc->e, -1) : 0;
    if (g) dion__pxs_stage_sources(pc, g, cmds, n); /* staged sources: one wait for the batch's copies */
    for (; g && i < n; i++) {
        dion_proxy_cmd_t *c = &cmds[i];
        uint64_t pos = g->exec;
        if (pos - g->done >= r->nslots) break; /* the position's bookkeeping is still in use */
        /* fence: nothing after it starts before everything before it completed */
        if (c->op == DION_PROXY_OP_FENCE && g->inflight) break;
        /* a command posts up to three operations (data, notice, tail) */
        if (pc->caps.max_ops && used + 3 > pc->caps.max_ops) break;
        /* a command that comes again after a busy engine keeps its bookkeeping: some of it is in flight,
         * and its source may have been counted already */
        if (g->partial != pos + 1) {
            g->cnt[pos & mask] = 0;
            g->pstep = 0;
            g->meta[pos & mask] =
                (uint16_t)((dion__px_fetches(c->op) ? DION__PX_META_FETCH : 0) |
                           ((c->flags & DION_PROXY_F_LOCAL_COUNT) && !dion__px_fetches(c->op)
                                ? (uint16_t)(c->u.rma.counter + 1u)
                                : 0u));
        }
        uint32_t need = 0;
        st = dion__px_post(pc, g, c, pos, &need);
        /* what was posted counts even when the rest was not (a PUT_SIGNAL's put before a busy signal) */
        g->cnt[pos & mask] = (uint8_t)(g->cnt[pos & mask] + need);
        g->inflight += need;
        used += need;
        if (st == DION__ENGINE_BUSY) { /* comes again; g->partial and g->pstep remember what is posted */
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

/* Completes what one engine poll reported. */
static void dion__px_completions(dion__pxc_t *pc, const dion__engine_cqe_t *cq, int k)
{
    for (int j = 0; j < k; j++) {
        if (cq[j].cookie == DION__PX_INTERNAL) {
            /* a notice, its tail or an acknowledgement (px_stage.c) failed: whoever waits for it would wait
             * forever, so every ring fails with the engine's sentence */
            if (cq[j].status != DION_SUCCESS) {
                DION_LOG(DION_LOG_WARN, "%s", cq[j].why);
                dion__px_fail_all(pc, cq[j].status, cq[j].why);
            }
            continue;
        }
        dion__pxg_t *g = pc->gtab[(cq[j].cookie & ~DION__PX_CK_SRC) >> DION__PX_POS_BITS];
        if (!g) continue; /* its handle is gone */
        uint64_t mask = g->r->dev.mask;
        uint64_t pos = g->done + (((cq[j].cookie & DION__PX_POS_MASK) - g->done) & DION__PX_POS_MASK);
        if (g->meta[pos & mask] & DION__PX_META_FETCH)
            dion__proxy_cmd_result(&g->r->slots[pos & mask], cq[j].value);
        if (cq[j].status != DION_SUCCESS && !g->r->failed) {
            /* Device code records no error for a ring failed with DION_ERR_PEER_FAILED: it leaves that to
             * the abort words, which only the bootstrap's failure detection writes. An engine's "peer
             * unreachable" (verbs: retry counter exceeded) also comes from live peers behind a broken link,
             * so the ring fails with DION_ERR_NETWORK and dion_dev_check gets the engine's sentence. */
            dion_status_t fs = cq[j].status == DION_ERR_PEER_FAILED ? DION_ERR_NETWORK : cq[j].status;
            snprintf(g->why, sizeof g->why, "%s", cq[j].why);
            dion__proxy_ring_fail(g->r, fs, cq[j].why);
        }
        /* a counted command's put completed: the engine no longer reads its source (counted in order by
         * dion__px_advance below) */
        if ((cq[j].cookie & DION__PX_CK_SRC) && cq[j].status == DION_SUCCESS)
            g->meta[pos & mask] |= DION__PX_META_SRC;
        if (g->cnt[pos & mask]) g->cnt[pos & mask]--;
        if (g->inflight) g->inflight--;
        dion__px_advance(g);
    }
}

/* Polls the engine and completes what it reports: batches of DION__PX_CQ until one comes back short (at most
 * DION__PX_CQ_ROUNDS), so that a burst of completions frees the engine's slots in one pass. The caller holds
 * the mutex. */
static int dion__px_poll_locked(dion__pxc_t *pc)
{
    if (!pc->e || pc->broken) return 0;
    dion__engine_cqe_t cq[DION__PX_CQ];
    int k = 0, total = 0;
    for (int round = 0; round < DION__PX_CQ_ROUNDS; round++) {
        k = pc->E->poll(pc->e, cq, DION__PX_CQ);
        if (k < 0) {
            pc->broken = 1;
            dion__px_fail_all(pc, DION_ERR_NETWORK, dion_last_error());
            return 0;
        }
        dion__px_completions(pc, cq, k);
        total += k;
        if (k < (int)DION__PX_CQ) break;
    }
    int busy = total > 0;
    busy |= dion__pxs_progress(pc); /* notices from peers, acknowledgements of ours */
    /* peers' writes and atomics served here: a rank that only receives stays awake while they come */
    busy = dion__engine_awake(pc->E, pc->e, busy);
    for (dion__pxd_t *d = pc->devs; d && !busy; d = d->next)
        for (uint32_t i = 0; i < d->nrings; i++)
            if (d->glue[i].inflight) busy = 1;
    return busy;
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

/* exec.wait: arms the engine's wait object under the lock (the block itself takes none). */
static int dion__px_wait(void *arg, uint32_t thread, int *fd)
{
    (void)thread;
    dion__pxc_t *pc = arg;
    int w = -1;
    pthread_mutex_lock(&pc->mu);
    if (pc->e && !pc->broken && pc->E->wait_arm) w = pc->E->wait_arm(pc->e, fd);
    pthread_mutex_unlock(&pc->mu);
    return w;
}

/* Longest nap where nothing tells an idle thread that peers' operations (which need its progress) arrive. */
#define DION__PX_BLIND_NAP_NS 100000ull

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
    dion__proxy_exec_t ex = {dion__px_execute,
                             dion__px_progress,
                             pc,
                             dion__px_wait,
                             0,
                             DION__PXS_PRESTAGE && pc->stage_on ? dion__px_prestage : NULL};
    if (pc->e) {
        dion__engine_caps_t caps;
        pc->E->query(pc->e, &caps);
        if (caps.manual_progress && caps.peer_notice == DION__ENGINE_NOTICE_NONE) {
            ex.nap_max_ns = DION__PX_BLIND_NAP_NS;
            DION_LOG(DION_LOG_INFO,
                     "proxy: engine %s (%s) cannot tell an idle thread that peers' operations arrive: naps "
                     "capped at %llu us, so that they wait at most that long",
                     pc->E->name, caps.provider, DION__PX_BLIND_NAP_NS / 1000);
        }
    }
    dion_status_t st = dion__proxy_threads_start(all, n, &ex, pc->comm->cuda_device, &pc->threads);
    free(all);
    return st;
}

/* ---- the seam ---- */

/* The engines in the order the proxy prefers them. */
#define DION__PX_NENG 2
static const dion__engine_ops_t *const dion__px_engines[DION__PX_NENG] = {&dion__engine_verbs,
                                                                          &dion__engine_ofi};

static dion_status_t dion__px_open(dion_comm_t c, const dion__engine_ops_t *E, dion__engine_t **e, char *why,
                                   size_t cap)
{
    dion__engine_open_args_t oa;
    memset(&oa, 0, sizeof oa);
    oa.rank = c ? c->rank : 0;
    oa.nranks = c ? c->nranks : 1;
    oa.cuda_device = c ? c->cuda_device : -1;
    oa.want_cuda = c && c->cuda_device >= 0;
    return E->open(&oa, e, why, cap);
}

/* The engines DION_TRANSPORT allows (bit i: dion__px_engines[i]); 0 with a sentence in why when it names an
 * engine that does not exist. */
static uint32_t dion__px_wanted(char *why, size_t cap)
{
    const char *t = dion__cfg_str("DION_TRANSPORT");
    if (!t || strncmp(t, "proxy/", 6)) return (1u << DION__PX_NENG) - 1; /* auto, proxy: the best there is */
    for (int i = 0; i < DION__PX_NENG; i++)
        if (!strcmp(t + 6, dion__px_engines[i]->name)) return 1u << i;
    snprintf(why, cap, "DION_TRANSPORT=%s names no proxy engine; the engines are proxy/verbs and proxy/ofi",
             t);
    return 0;
}

/* Which engines open in this process (a local probe, once: opening loads libraries and opens devices). */
static pthread_once_t dion__px_probe_once = PTHREAD_ONCE_INIT;
static uint32_t dion__px_probe_ok;
static char dion__px_probe_why[DION__PX_NENG][DION__TL_WHY];

static void dion__px_probe(void)
{
    for (int i = 0; i < DION__PX_NENG; i++) {
        dion__engine_t *e = NULL;
        char why[DION__TL_WHY] = "";
        if (dion__px_open(NULL, dion__px_engines[i], &e, why, sizeof why) == DION_SUCCESS) {
            dion__px_probe_ok |= 1u << i;
            dion__px_engines[i]->close(e);
        } else {
            snprintf(dion__px_probe_why[i], sizeof dion__px_probe_why[i], "%s", why);
        }
    }
    dion__error_clear();
}

/* "the verbs engine cannot run here: ...; the ofi engine ..." for the engines in mask that do not open. */
static void dion__px_why_not(uint32_t mask, char *why, size_t cap)
{
    size_t len = 0;
    why[0] = 0;
    for (int i = 0; i < DION__PX_NENG; i++) {
        if (!(mask & (1u << i)) || (dion__px_probe_ok & (1u << i))) continue;
        int k = snprintf(why + len, cap - len, "%sthe %s engine cannot run here: %s", len ? "; " : "",
                         dion__px_engines[i]->name, dion__px_probe_why[i]);
        if (k < 0 || (size_t)k >= cap - len) break;
        len += (size_t)k;
    }
}

static int dion__px_usable(dion_comm_t c, char *why, size_t cap)
{
    (void)c;
    uint32_t wanted = dion__px_wanted(why, cap);
    if (!wanted) return 0;
    pthread_once(&dion__px_probe_once, dion__px_probe);
    uint32_t ok = dion__px_probe_ok & wanted;
    if (!ok) {
        dion__px_why_not(wanted, why, cap);
        return 0;
    }
    /* usable: say which engine this process would offer, and why not a better one (dion-info prints it) */
    int best = 0;
    while (!(ok & (1u << best))) best++;
    size_t len = (size_t)snprintf(why, cap, "engine %s", dion__px_engines[best]->name);
    if (len < cap && (wanted & ((1u << best) - 1))) {
        snprintf(why + len, cap - len, " (");
        len = strlen(why);
        dion__px_why_not(wanted & ((1u << best) - 1), why + len, cap - len);
        len = strlen(why);
        if (len + 1 < cap) snprintf(why + len, cap - len, ")");
    }
    return 1;
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

/* Collective: every rank names the engines it can open; *common gets those all can open (the first is the
 * comm's, the others its fallbacks). A sentence names, for each engine, a rank that cannot open it. */
static dion_status_t dion__px_agree_engine(dion_comm_t c, uint32_t *common_out)
{
    char why[DION__TL_WHY] = "";
    uint32_t wanted = dion__px_wanted(why, sizeof why);
    pthread_once(&dion__px_probe_once, dion__px_probe);
    uint32_t mine = dion__px_probe_ok & wanted, *all = calloc((size_t)c->nranks, sizeof *all);
    if (!all) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    dion_status_t st = dion__boot_allgather(c->boot, &mine, sizeof mine, all);
    uint32_t common = wanted;
    for (int r = 0; st == DION_SUCCESS && r < c->nranks; r++) common &= all[r];
    if (st == DION_SUCCESS && !common) {
        char list[DION__TL_WHY] = "";
        size_t len = 0;
        for (int i = 0; i < DION__PX_NENG; i++) {
            if (!(wanted & (1u << i))) continue;
            int r = 0;
            while (r < c->nranks && (all[r] & (1u << i))) r++;
            int k = snprintf(list + len, sizeof list - len, "%s%s cannot run on rank %d (host %s)",
                             len ? ", " : "", dion__px_engines[i]->name, r, c->info[r].host);
            if (k > 0 && (size_t)k < sizeof list - len) len += (size_t)k;
        }
        char mine_why[DION__TL_WHY];
        dion__px_why_not(wanted, mine_why, sizeof mine_why);
        st = dion__error(
            DION_ERR_UNSUPPORTED,
            "proxy backend: no engine runs on every rank: %s; that rank's log says why%s%s. Install "
            "what is missing there or choose the engine with DION_TRANSPORT=proxy/verbs or "
            "proxy/ofi",
            list, mine_why[0] ? "; here: " : "", mine_why);
    }
    free(all);
    *common_out = st == DION_SUCCESS ? common : 0;
    return st;
}

/* Connects the engine: one address per rank (ofi) or one per (rank, peer) (verbs). Collective. */
static dion_status_t dion__px_connect(dion__pxc_t *pc, dion_status_t st)
{
    dion_comm_t c = pc->comm;
    int n = c->nranks;
    dion_status_t ag;
    if (!pc->E->peer_addr_bytes || pc->caps.connect_ondemand) { /* verbs on demand: its listener's address */
        dion__engine_addr_t me, *all = calloc((size_t)n, sizeof *all);
        memset(&me, 0, sizeof me);
        if (!all && st == DION_SUCCESS) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
        if (st == DION_SUCCESS) st = pc->E->address(pc->e, &me);
        ag = dion__comm_agree(c, st, "opening the proxy backend's engine");
        if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, &me, sizeof me, all);
        if (ag == DION_SUCCESS) st = pc->E->connect(pc->e, all, n);
        if (ag == DION_SUCCESS) ag = dion__comm_agree(c, st, "connecting the proxy backend's engine");
        free(all);
        return ag;
    }
    /* Per peer: this rank's row travels to every rank (n * B bytes each; n^2 * B in all, docs/multihost.md),
     * and peer p connects with the entry this rank made for it. Only peers the proxy serves get one. */
    size_t B = pc->E->peer_addr_bytes;
    uint8_t *row = calloc((size_t)n, B), *all = calloc((size_t)n * (size_t)n, B);
    if ((!row || !all) && st == DION_SUCCESS) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
    for (int p = 0; p < n && st == DION_SUCCESS; p++)
        if (p != c->rank && dion__tl_of(c, p) == &dion__tl_proxy)
            st = pc->E->peer_address(pc->e, p, row + (size_t)p * B);
    ag = dion__comm_agree(c, st, "opening the proxy backend's engine");
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, row, (size_t)n * B, all);
    for (int p = 0; p < n && ag == DION_SUCCESS && st == DION_SUCCESS; p++)
        if (p != c->rank && dion__tl_of(c, p) == &dion__tl_proxy)
            st = pc->E->peer_connect(pc->e, p, all + ((size_t)p * (size_t)n + (size_t)c->rank) * B);
    if (ag == DION_SUCCESS) ag = dion__comm_agree(c, st, "connecting the proxy backend's engine");
    free(row);
    free(all);
    return ag;
}

static dion_status_t dion__px_comm_init(dion_comm_t c, void **state)
{
    *state = NULL;
    dion__pxc_t *pc = calloc(1, sizeof *pc);
    char why[DION__TL_WHY] = "";
    uint32_t common = 0;
    dion_status_t st = pc ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory");
    dion_status_t ag = dion__comm_agree(c, st, "starting the proxy backend");
    if (ag == DION_SUCCESS) ag = dion__px_agree_engine(c, &common);
    if (ag != DION_SUCCESS) {
        free(pc);
        return ag;
    }
    pc->comm = c;
    pthread_mutex_init(&pc->mu, NULL);
    /* The first engine every rank opens; if it cannot be connected on some rank (comm_agree gives every rank
     * the same verdict), the next one, so that "verbs, else ofi" also covers a fabric the probe could not
     * judge. */
    for (int i = 0; i < DION__PX_NENG; i++) {
        if (!(common & (1u << i))) continue;
        pc->E = dion__px_engines[i];
        snprintf(pc->label, sizeof pc->label, "proxy/%s", pc->E->name);
        memset(&pc->caps, 0, sizeof pc->caps);
        st = dion__px_open(c, pc->E, &pc->e, why, sizeof why);
        if (st != DION_SUCCESS)
            st = dion__error(st, "proxy backend: the %s engine cannot run on rank %d: %s", pc->E->name,
                             c->rank, why);
        if (st == DION_SUCCESS) pc->E->query(pc->e, &pc->caps);
        ag = dion__px_connect(pc, st);
        if (ag == DION_SUCCESS) break;
        if (pc->e) pc->E->close(pc->e);
        pc->e = NULL;
        uint32_t rest = common & ~((2u << i) - 1u);
        if (!rest) break;
        int next = i + 1;
        while (!(rest & (1u << next))) next++;
        DION_LOG(DION_LOG_WARN, "proxy backend: the %s engine could not start on every rank (%s); using %s",
                 pc->E->name, dion_last_error(), dion__px_engines[next]->name);
    }
    if (ag == DION_SUCCESS) {
        DION_LOG(DION_LOG_INFO, "proxy backend: %s engine, provider %s, domain %s, order %s, GPU memory %s",
                 pc->E->name, pc->caps.provider, pc->caps.domain, pc->caps.order,
                 pc->caps.cuda_mem ? "registered" : "not registered");
        ag = dion__pxs_comm_init(pc); /* collective: every rank gets here */
        if (ag == DION_SUCCESS) ag = dion__px_threads(pc);
    }
    if (ag != DION_SUCCESS) {
        dion__proxy_threads_stop(pc->threads);
        if (pc->e) dion__pxs_comm_fini(pc);
        if (pc->e) pc->E->close(pc->e);
        pthread_mutex_destroy(&pc->mu);
        free(pc);
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
        dion__pxs_region_free(pc, x);
        free(x->rkeys);
        free(x);
    }
    dion__pxs_comm_fini(pc);
    pc->E->close(pc->e);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

static dion_status_t dion__px_export(dion_comm_t c, void *base, size_t bytes, void *desc, void *exp)
{
    dion__pxc_t *pc = dion__tl_state(c, &dion__tl_proxy);
    memset(desc, 0, sizeof(dion__px_desc_t));
    if (!pc) return dion__error(DION_ERR_INTERNAL, "proxy backend: no engine for this comm");
    return dion__pxs_export(pc, base, bytes, desc, exp);
}

static dion_status_t dion__px_import(dion_comm_t c, int peer, const void *desc, void *shared, void *imp,
                                     dion__tl_view_t *view)
{
    (void)c, (void)peer, (void)shared;
    memcpy(imp, desc, sizeof(dion__px_desc_t));
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
    if (x->pc) dion__pxs_unexport(x->pc, x); /* region_done took what it keeps */
}

static int dion__px_on_host(const void *desc)
{
    const dion__px_desc_t *d = desc;
    return d->mem.flags == DION__ENGINE_MEM_HOST && !d->gpu;
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
    r->key = x->key;
    r->shadow = x->shadow;
    r->smr = x->smr;
    r->staged = x->staged;
    r->gpu = x->gpu;
    x->mr = x->smr = NULL;
    x->shadow = NULL;
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
    dion__pxs_region_free(pc, r);
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
        free(d->glue[i].copy);
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
        g->d = d;
        g->pc = pc;
        g->cnt = calloc(DION__PX_SLOTS, 1);
        g->meta = calloc(DION__PX_SLOTS, sizeof *g->meta);
        g->copy = calloc(DION__PX_SLOTS, sizeof *g->copy);
        if (!g->cnt || !g->meta || !g->copy) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
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
            dion__px_rmap_build(pc);
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
    for (uint32_t i = 0; i < d->nrings; i++)
        if (d->glue[i].gid) pc->gtab[d->glue[i].gid] = NULL;
    dion__px_rmap_build(pc);
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
    /* the engine writes signals into host memory, and so does the proxy when it applies a notice */
    return pc && (!pc->caps.cuda_mem || pc->stage_on);
}

static const char *dion__px_label(void *state)
{
    return state ? ((dion__pxc_t *)state)->label : NULL;
}

const dion__tl_ops_t dion__tl_proxy = {
    .name = "proxy",
    .kind = DION_TRANSPORT_PROXY,
    .desc_size = sizeof(dion__px_desc_t),
    .exp_size = sizeof(dion__px_exp_t),
    .imp_size = sizeof(dion__px_desc_t),
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
    .label = dion__px_label,
};
