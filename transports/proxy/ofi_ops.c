/* The ofi engine's posting and completion paths: operation slots, ordering (held per-peer queues, FI_FENCE),
 * submission to libfabric, completions and error sentences, operations that never complete. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ofi.h"

/* ---- posting ---- */

static const char *const kind_names[] = {"put", "get", "atomic", "put_signal message"};
static const char *const amo_names[] = {"atomic add", "atomic set", "fetch-add", "compare-swap"};

static const char *op_name(const op_t *o)
{
    if (o->internal) return o->vk == OFI_NONE ? "flush" : "key check";
    if (o->kind == OP_MSG && !o->local) return amo_names[o->amo]; /* a signal alone, as a message */
    return o->kind == OP_AMO ? amo_names[o->amo] : kind_names[o->kind];
}

static op_t *op_alloc(dion__engine_t *e)
{
    if (e->free_head == OFI_NONE) return NULL;
    op_t *o = &e->ops[e->free_head];
    e->free_head = o->next;
    memset(&o->ctx, 0, sizeof o->ctx);
    o->next = OFI_NONE;
    o->internal = o->flushed = o->counted = o->fail = 0;
    o->tries = 0;
    o->vk = OFI_NONE;
    o->klen = 0;
    e->used++;
    return o;
}

static void op_free(dion__engine_t *e, op_t *o)
{
    e->used--;
    o->state = OP_FREE;
    o->next = e->free_head;
    e->free_head = (uint32_t)(o - e->ops);
}

void dion__ofi_op_free(dion__engine_t *e, op_t *o)
{
    op_free(e, o);
}

/* Whether an ordered operation may go to the provider now, given what is in flight to its peer. */
static int may_post(const dion__engine_t *e, const peer_t *p, const op_t *o)
{
    /* the per-peer bound (DION_OFI_PEER_OPS); the engine's own flushes and key checks pass, since they are
     * what confirms the operations that hold it (messages count in inflight until acknowledged) */
    if (e->peer_cap && p->inflight >= e->peer_cap && !o->internal) return 0;
    /* message mode: the peer applies a message only when its poll reads it, maybe after later commands */
    if (p->munacked && (o->kind == OP_MSG ? p->munacked >= e->mcredit : o->ordered)) return 0;
    if (!o->ordered || !p->inflight || e->order == ORDER_FENCE) return 1;
    if (e->order == ORDER_WAIT) return 0;
    uint64_t need = 0;
    if (o->cls & CLS_WRITE) need |= (p->writes ? FI_ORDER_WAW : 0) | (p->reads ? FI_ORDER_WAR : 0);
    if (o->cls & CLS_READ) need |= (p->writes ? FI_ORDER_RAW : 0) | (p->reads ? FI_ORDER_RAR : 0);
    return (e->msg_order & need) == need;
}

/* Whether the operation's completion means the peer processed it and, by FI_ORDER_RAW, every operation
 * submitted to it before (flush mode): fetching atomics (shm's add and set fetch too) and reads. */
static int covers(const dion__engine_t *e, const op_t *o)
{
    return o->kind == OP_GET || o->kind == OP_MSG ||
           (o->kind == OP_AMO && !o->flushed && (e->fetch_updates || o->amo >= DION__ENGINE_AMO_FETCH_ADD));
}

/* Hands one operation to libfabric: 0, -FI_EAGAIN (try again after progress) or another error. */
static ssize_t submit(dion__engine_t *e, op_t *o)
{
    peer_t *p = &e->peers[o->peer];
    uint64_t flags = FI_COMPLETION;
    if (o->ordered && e->order == ORDER_FENCE && p->inflight) flags |= FI_FENCE;
    ssize_t rc;
    if (dion__ofi_test_refuse_peer == o->peer) return -FI_EAGAIN;
    if (o->kind == OP_MSG) {
        rc = dion__ofi_msg_submit(e, o);
    } else if (o->kind != OP_AMO) {
        struct iovec iov = {.iov_base = o->local, .iov_len = o->bytes};
        struct fi_rma_iov riov = {.addr = o->raddr, .len = o->bytes, .key = o->rkey};
        struct fi_msg_rma m = {.msg_iov = &iov,
                               .desc = &o->desc,
                               .iov_count = 1,
                               .addr = p->addr,
                               .rma_iov = &riov,
                               .rma_iov_count = 1,
                               .context = &o->ctx};
        if (o->kind == OP_PUT) {
            o->flushed = e->flush && p->fvalid; /* confirmed by a later fetch instead */
            rc = fi_writemsg(e->ep, &m, flags | (e->delivery && !o->flushed ? FI_DELIVERY_COMPLETE : 0));
        } else
            rc = fi_readmsg(e->ep, &m, flags);
    } else {
        void *desc = e->ops_mr.desc;
        struct fi_ioc src = {.addr = &o->operand, .count = 1};
        struct fi_ioc res = {.addr = &o->result, .count = 1};
        struct fi_ioc cmp = {.addr = &o->compare, .count = 1};
        struct fi_rma_ioc rioc = {.addr = o->raddr, .count = 1, .key = o->rkey};
        struct fi_msg_atomic m = {.msg_iov = &src,
                                  .desc = &desc,
                                  .iov_count = 1,
                                  .addr = p->addr,
                                  .rma_iov = &rioc,
                                  .rma_iov_count = 1,
                                  .datatype = FI_UINT64,
                                  .context = &o->ctx};
        switch (o->amo) {
        case DION__ENGINE_AMO_ADD:
        case DION__ENGINE_AMO_SET:
            m.op = o->amo == DION__ENGINE_AMO_ADD ? FI_SUM : FI_ATOMIC_WRITE;
            o->flushed = e->plain_sig && p->fvalid; /* completes when queued: a later fetch confirms it */
            if (o->flushed)
                rc = fi_atomicmsg(e->ep, &m, flags);
            else if (e->fetch_updates) /* fetching atomics complete only once applied at the target */
                rc = fi_fetch_atomicmsg(e->ep, &m, &res, &desc, 1, flags);
            else
                rc = fi_atomicmsg(e->ep, &m, flags | (e->delivery ? FI_DELIVERY_COMPLETE : 0));
            break;
        case DION__ENGINE_AMO_FETCH_ADD:
            m.op = FI_SUM;
            rc = fi_fetch_atomicmsg(e->ep, &m, &res, &desc, 1, flags);
            break;
        default:
            m.op = FI_CSWAP;
            rc = fi_compare_atomicmsg(e->ep, &m, &cmp, &desc, 1, &res, &desc, 1, flags);
            break;
        }
    }
    if (rc == 0) {
        e->n_posts++;
        o->seq = ++p->seq;
        if (covers(e, o)) p->cover = o->seq;
        o->posted_ns = dion__now_ns();
        if (o->state != OP_QUEUED) o->sub_ns = o->posted_ns;
        o->state = OP_INFLIGHT;
        o->counted = 1;
        p->inflight++;
        if (o->cls & CLS_WRITE) p->writes++;
        if (o->cls & CLS_READ) p->reads++;
        e->inflight_total++;
        if (o->kind == OP_MSG) dion__ofi_msg_sent(e, o);
    }
    return rc;
}

static void enqueue(dion__engine_t *e, op_t *o)
{
    peer_t *p = &e->peers[o->peer];
    o->state = OP_QUEUED;
    o->sub_ns = dion__now_ns();
    o->next = OFI_NONE;
    uint32_t idx = (uint32_t)(o - e->ops);
    if (p->qtail == OFI_NONE) {
        p->qhead = idx;
        e->queued_peers++;
    } else {
        e->ops[p->qtail].next = idx;
    }
    p->qtail = idx;
    p->queued++;
    e->queued_total++;
}

static int is_flush(const op_t *o)
{
    return o->internal && o->vk == OFI_NONE;
}

static dion_status_t post(dion__engine_t *e, op_t *o)
{
    peer_t *p = &e->peers[o->peer];
    /* a flush orders nothing (it confirms what was submitted before it): it goes ahead of the queue, and
     * waits beside it when refused (fpend) */
    int flush = is_flush(o);
    if ((flush && p->fpend == OFI_NONE) || (p->qhead == OFI_NONE && may_post(e, p, o))) {
        ssize_t rc = submit(e, o);
        if (rc == 0) return DION_SUCCESS;
        o->tries += rc == -FI_EAGAIN;
        if (rc == -FI_EAGAIN) e->busy_posts++;
        if (rc == -FI_EAGAIN && flush) {
            o->state = OP_QUEUED;
            o->sub_ns = dion__now_ns();
            p->fpend = (uint32_t)(o - e->ops);
            e->fpend_n++;
            return DION_SUCCESS;
        }
        if (rc != -FI_EAGAIN) {
            dion_status_t s = dion__error_set(DION_ERR_NETWORK,
                                              "ofi: posting a %s of %zu bytes to rank %d failed: "
                                              "%s (%zd)",
                                              op_name(o), o->bytes, o->peer, e->fi->strerror((int)-rc), rc);
            op_free(e, o);
            return s;
        }
    } else
        e->n_held++;
    enqueue(e, o); /* held for order or the bound, or the provider is out of resources: posted from poll */
    return DION_SUCCESS;
}

/* ---- flush mode: writes confirmed by a later fetch (ofi.h) ---- */

/* Whether a write held for its key is decided: 1 accepted, -1 refused, 0 not yet known. */
static int vk_verdict(const dion__engine_t *e, const op_t *w)
{
    if (w->vk == OFI_NONE) return 1;
    const vkey_t *k = &e->vks[w->vk];
    if (k->bad_len <= w->klen) return -1;
    return k->ok_len >= w->klen ? 1 : 0;
}

static uint32_t vk_hash(int peer, uint64_t key, uint32_t cap)
{
    uint64_t x = key ^ ((uint64_t)(uint32_t)peer * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (uint32_t)x & (cap - 1u);
}

/* The entry of (peer, key), created when missing; OFI_NONE when out of memory (sentence set). */
static uint32_t vk_entry(dion__engine_t *e, int peer, uint64_t key)
{
    if (e->vhcap) {
        for (uint32_t h = vk_hash(peer, key, e->vhcap);; h = (h + 1u) & (e->vhcap - 1u)) {
            uint32_t i = e->vhash[h];
            if (!i) break;
            if (e->vks[i - 1].key == key && e->vks[i - 1].peer == peer) return i - 1;
        }
    }
    if (e->nvk == e->capvk) {
        uint32_t cap = e->capvk ? e->capvk * 2u : 16u;
        vkey_t *v = realloc(e->vks, cap * sizeof *v);
        if (!v) goto oom;
        e->vks = v;
        e->capvk = cap;
    }
    if ((e->nvk + 1u) * 2u > e->vhcap) { /* rehash at half full */
        uint32_t cap = e->vhcap ? e->vhcap * 2u : 64u;
        uint32_t *t = calloc(cap, sizeof *t);
        if (!t) goto oom;
        for (uint32_t i = 0; i < e->nvk; i++) {
            uint32_t h = vk_hash(e->vks[i].peer, e->vks[i].key, cap);
            while (t[h]) h = (h + 1u) & (cap - 1u);
            t[h] = i + 1;
        }
        free(e->vhash);
        e->vhash = t;
        e->vhcap = cap;
    }
    uint32_t idx = e->nvk++;
    e->vks[idx] = (vkey_t){.key = key, .bad_len = UINT64_MAX, .peer = peer};
    uint32_t h = vk_hash(peer, key, e->vhcap);
    while (e->vhash[h]) h = (h + 1u) & (e->vhcap - 1u);
    e->vhash[h] = idx + 1;
    return idx;
oom:
    dion__error_set(DION_ERR_NO_MEMORY, "ofi: out of memory for the remote keys checked in flush mode");
    return OFI_NONE;
}

static void ready_push(dion__engine_t *e, op_t *o, dion_status_t st)
{
    o->state = OP_READY;
    o->status = st;
    e->ready[e->rtail] = (uint32_t)(o - e->ops);
    e->rtail = e->rtail + 1 == e->nops + 1 ? 0 : e->rtail + 1;
}

void dion__ofi_ready_push(dion__engine_t *e, op_t *o, dion_status_t st)
{
    ready_push(e, o, st);
}

/* The SENT writes to p submitted before seq `below` are decided: delivered (st success: the peer processed a
 * later operation) or not confirmed (the fetch that was to confirm them failed). */
static void settle(dion__engine_t *e, peer_t *p, uint64_t below, dion_status_t st)
{
    if (st == DION_SUCCESS && below > p->delivered) p->delivered = below;
    /* a fetch that failed covers nothing: writes whose completions come later need a flush of their own */
    if (st != DION_SUCCESS && p->cover == below) p->cover = 0;
    uint32_t *link = &p->shead;
    p->smax = 0;
    while (*link != OFI_NONE) {
        op_t *w = &e->ops[*link];
        int v = vk_verdict(e, w);
        if (v < 0) { /* its key was refused: status and sentence from the check (ready_emit) */
            *link = w->next;
            ready_push(e, w, e->vks[w->vk].status);
        } else if (st == DION_SUCCESS ? w->seq < p->delivered && v > 0 : w->seq < below) {
            *link = w->next;
            ready_push(e, w, st);
        } else {
            if (w->seq > p->smax) p->smax = w->seq;
            link = &w->next;
        }
    }
}

static void want_flush(dion__engine_t *e, int peer)
{
    peer_t *p = &e->peers[peer];
    if (!p->wanted) {
        p->wanted = 1;
        e->want[e->nwant++] = peer;
    }
}

/* Posts a flush (fetch-add of 0 on the peer's flush word) to every peer whose SENT writes no fetching
 * operation submitted after them covers; one at a time per peer, so that writes that complete meanwhile wait
 * for the next and flushes batch them. */
static void flush_wanted(dion__engine_t *e)
{
    int k = 0;
    for (int i = 0; i < e->nwant; i++) {
        int r = e->want[i];
        peer_t *p = &e->peers[r];
        /* nothing left, a later fetch covers them, or they wait for a key check only */
        if (p->shead == OFI_NONE || p->smax < p->cover || p->smax < p->delivered) {
            p->wanted = 0;
            continue;
        }
        op_t *o = p->flushing ? NULL : op_alloc(e);
        if (!o) { /* after the flush in flight, or once a slot frees */
            e->want[k++] = r;
            continue;
        }
        p->wanted = 0;
        o->peer = r;
        o->kind = OP_AMO;
        o->amo = DION__ENGINE_AMO_FETCH_ADD;
        o->cls = CLS_WRITE | CLS_READ;
        o->ordered = 0;
        o->internal = 1;
        o->flushed = 0;
        o->operand = o->compare = o->result = 0;
        o->cookie = 0;
        o->raddr = p->faddr;
        o->rkey = p->fkey;
        o->roff = 0;
        o->bytes = 8;
        o->local = o->desc = NULL;
        p->flushing = 1;
        e->n_flushes++;
        if (post(e, o) != DION_SUCCESS) { /* refused for good (op freed): the writes are not confirmed */
            p->flushing = 0;
            settle(e, p, UINT64_MAX, DION_ERR_NETWORK);
        }
    }
    e->nwant = k;
}

void dion__ofi_settle(dion__engine_t *e, peer_t *p, uint64_t below, dion_status_t st)
{
    settle(e, p, below, st);
}

/* A key check failed (error completion, timeout, refused post): writes that relied on it fail with st. */
static void vk_fail(dion__engine_t *e, uint32_t idx, uint64_t len, dion_status_t st)
{
    vkey_t *k = &e->vks[idx];
    if (len < k->bad_len) {
        k->bad_len = len;
        k->status = st;
    }
    DION_LOG(DION_LOG_WARN,
             "ofi: rank %d did not confirm remote key %#llx for %llu bytes (%s): writes with it are reported "
             "failed",
             k->peer, (unsigned long long)k->key, (unsigned long long)len, dion_status_string(st));
    settle(e, &e->peers[k->peer], 0, st);
}

/* The end of an internal operation (a flush or a key check) that completed with st. */
static void internal_done(dion__engine_t *e, op_t *o, dion_status_t st)
{
    peer_t *p = &e->peers[o->peer];
    if (o->vk == OFI_NONE) { /* a flush */
        p->flushing = 0;
        if (st == DION_SUCCESS && p->shead != OFI_NONE) want_flush(e, o->peer);
    } else if (st != DION_SUCCESS) {
        vk_fail(e, o->vk, o->klen, st);
    }
}

/* The sentence of a failure the engine decided (op_t.fail). */
static void dion__ofi_fail_describe(const dion__engine_t *e, const op_t *o, char *buf, size_t cap)
{
    double t = (double)e->op_timeout_ns / 1e9;
    const ofi_cause_t *c = &o->cause;
    char cause[200] = "";
    switch (o->fail) {
    case FAIL_REFUSED:
        snprintf(buf, cap,
                 "%s of %zu bytes to rank %d at offset %llu was not accepted within %.1f s "
                 "(DION_OFI_OP_TIMEOUT): the provider kept refusing it for lack of resources (-FI_EAGAIN, "
                 "%u retries); rank %d may have stopped progressing (gone, or its queue never drains)",
                 op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, t, o->tries, o->peer);
        return;
    case FAIL_POST:
        snprintf(buf, cap, "ofi: posting a held %s of %zu bytes to rank %d failed: %s", op_name(o), o->bytes,
                 o->peer, e->fi->strerror(-c->err));
        return;
    case FAIL_SENT:
        snprintf(buf, cap,
                 "%s of %zu bytes to rank %d at offset %llu was sent, but no fetch confirmed its delivery "
                 "within %.1f s (DION_OFI_OP_TIMEOUT): the peer may be gone",
                 op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, t);
        return;
    default: /* FAIL_BEHIND */
        if (c->fail == FAIL_REFUSED)
            snprintf(cause, sizeof cause,
                     "the provider kept refusing for %.1f s (-FI_EAGAIN, %u retries, DION_OFI_OP_TIMEOUT)", t,
                     c->tries);
        else if (c->fail == FAIL_POST)
            snprintf(cause, sizeof cause, "could not be posted (%s)", e->fi->strerror(-c->err));
        else
            snprintf(cause, sizeof cause, "%s within %.1f s (DION_OFI_OP_TIMEOUT)",
                     c->fail == FAIL_SENT ? "was not confirmed delivered" : "got no completion", t);
        snprintf(buf, cap,
                 "%s of %zu bytes to rank %d at offset %llu was not posted: it was queued behind a %s of %zu "
                 "bytes at offset %llu to that rank that %s, and nothing is posted after a failed operation "
                 "to the same rank (order)",
                 op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, c->name, c->bytes,
                 (unsigned long long)c->roff, cause);
    }
}

static ofi_cause_t cause_of(const op_t *o, uint8_t fail, int err)
{
    return (ofi_cause_t){op_name(o), o->bytes, o->roff, o->tries, fail, err};
}

static op_t *dequeue(dion__engine_t *e, peer_t *p)
{
    op_t *o = &e->ops[p->qhead];
    p->qhead = o->next;
    p->queued--;
    e->queued_total--;
    if (p->qhead == OFI_NONE) {
        p->qtail = OFI_NONE;
        e->queued_peers--;
    }
    return o;
}

/* Fails every operation queued to p, in order, with st: the head with head_fail when that is not
 * FAIL_BEHIND (it is the cause), the others as queued behind *c. Their completions go through the ready
 * ring, after those already there; the engine's own (flushes, key checks) fail the writes they were to
 * confirm, with a warning. */
static void fail_queue(dion__engine_t *e, peer_t *p, uint8_t head_fail, const ofi_cause_t *c,
                       dion_status_t st)
{
    for (int first = 1; p->qhead != OFI_NONE; first = 0) {
        op_t *o = dequeue(e, p);
        o->fail = first && head_fail != FAIL_BEHIND ? head_fail : FAIL_BEHIND;
        o->cause = *c;
        if (o->internal) {
            char why[512];
            dion__ofi_fail_describe(e, o, why, sizeof why);
            DION_LOG(DION_LOG_WARN, "ofi: a %s to rank %d failed: %s", op_name(o), o->peer, why);
            settle(e, p, UINT64_MAX, st);
            if (o->vk != OFI_NONE) { /* a key check never posted says nothing about the key: the next write
                                        with it checks again */
                vkey_t *k = &e->vks[o->vk];
                if (k->chk_len > k->ok_len) k->chk_len = k->ok_len;
            } else {
                internal_done(e, o, st);
            }
            op_free(e, o);
            continue;
        }
        ready_push(e, o, st);
    }
}

/* Returns decided completions (flush mode) into out. */
static void retire(dion__engine_t *e, op_t *o);
static void ready_emit(dion__engine_t *e, dion__engine_cqe_t *out, int max, int *n)
{
    while (e->rhead != e->rtail && *n < max) {
        op_t *o = &e->ops[e->ready[e->rhead]];
        e->rhead = e->rhead + 1 == e->nops + 1 ? 0 : e->rhead + 1;
        dion__engine_cqe_t *c = &out[(*n)++];
        c->cookie = o->cookie;
        c->value = 0;
        c->peer = o->peer;
        c->status = o->status;
        c->why[0] = 0;
        if (o->fail)
            dion__ofi_fail_describe(e, o, c->why, sizeof c->why);
        else if (o->status != DION_SUCCESS && o->kind == OP_MSG)
            snprintf(
                c->why, sizeof c->why,
                "%s of %zu bytes to rank %d (data at offset %llu, signal word at offset %llu) was refused "
                "by that rank: %s; check that the keys and offsets come from the peer's live window "
                "and signal table",
                op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, (unsigned long long)o->soff,
                dion__ofi_msg_refusal(o->compare));
        else if (o->status != DION_SUCCESS && vk_verdict(e, o) < 0)
            snprintf(c->why, sizeof c->why,
                     "%s of %zu bytes to rank %d at offset %llu (key %#llx) failed: rank %d did not answer a "
                     "read of the last byte of that %llu-byte region with that key (%s); shm drops an access "
                     "it refuses (unknown key, beyond the region) at the target without telling the "
                     "initiator, so the write was most likely refused there: check that the key and size "
                     "come from the peer's live registration",
                     op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, (unsigned long long)o->rkey,
                     o->peer, (unsigned long long)o->klen, dion_status_string(o->status));
        else if (o->status != DION_SUCCESS)
            snprintf(
                c->why, sizeof c->why,
                "%s of %zu bytes to rank %d at offset %llu: its delivery could not be confirmed (%s): the "
                "fetch that follows it to that rank failed; the rank's earlier errors say why",
                op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, dion_status_string(o->status));
        retire(e, o);
    }
}

/* Posts held operations whose turn has come: per peer from the head, until one must wait (order) or the
 * provider refuses it (tried again next poll). A held operation whose post fails for good takes the ones
 * behind it with it (fail_queue): none is posted after it. */
static void drain(dion__engine_t *e)
{
    for (int r = 0; r < e->nranks && (e->queued_peers || e->fpend_n); r++) {
        peer_t *p = &e->peers[r];
        if (p->fpend != OFI_NONE) { /* a refused flush first: it confirms what holds the bound */
            op_t *o = &e->ops[p->fpend];
            ssize_t rc = submit(e, o);
            if (rc == -FI_EAGAIN) {
                e->busy_posts++;
                o->tries++;
                continue; /* the provider has no room for this peer now */
            }
            p->fpend = OFI_NONE;
            e->fpend_n--;
            if (rc != 0) {
                DION_LOG(DION_LOG_WARN, "ofi: a %s to rank %d failed: %s", "flush", r,
                         e->fi->strerror((int)-rc));
                settle(e, p, UINT64_MAX, DION_ERR_NETWORK);
                internal_done(e, o, DION_ERR_NETWORK);
                op_free(e, o);
            }
        }
        while (p->qhead != OFI_NONE) {
            op_t *o = &e->ops[p->qhead];
            if (!may_post(e, p, o)) break;
            ssize_t rc = submit(e, o);
            if (rc == -FI_EAGAIN) {
                e->busy_posts++;
                o->tries++;
                break;
            }
            if (rc == 0) {
                dequeue(e, p);
                continue;
            }
            ofi_cause_t c = cause_of(o, FAIL_POST, (int)rc);
            fail_queue(e, p, FAIL_POST, &c, DION_ERR_NETWORK);
        }
    }
}

static op_t *prepare(dion__engine_t *e, int peer, const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes,
                     const char *what, dion_status_t *s)
{
    *s = DION_SUCCESS;
    if (e->broken) {
        *s = dion__error_set(DION_ERR_NETWORK, "ofi: the engine failed earlier; %s refused", what);
        return NULL;
    }
    if (!e->peers) {
        *s = dion__error_set(DION_ERR_INVALID_ARG, "ofi %s: connect has not been called", what);
        return NULL;
    }
    if (peer < 0 || peer >= e->nranks) {
        *s =
            dion__error_set(DION_ERR_INVALID_ARG, "ofi %s: peer %d is not in [0, %d)", what, peer, e->nranks);
        return NULL;
    }
    if (!rk || rk->engine_version != DION__ENGINE_VERSION) {
        *s = dion__error_set(DION_ERR_INVALID_ARG, "ofi %s to rank %d: missing or foreign remote key", what,
                             peer);
        return NULL;
    }
    if (roff > rk->len || bytes > rk->len - roff) {
        *s = dion__error_set(DION_ERR_INVALID_ARG,
                             "ofi %s to rank %d: bytes [%llu, %llu) lie outside the %llu-byte remote region",
                             what, peer, (unsigned long long)roff, (unsigned long long)(roff + bytes),
                             (unsigned long long)rk->len);
        return NULL;
    }
    if (bytes > e->info->ep_attr->max_msg_size) {
        *s = dion__error_set(DION_ERR_INVALID_ARG,
                             "ofi %s of %zu bytes exceeds the provider's limit of %zu bytes", what, bytes,
                             e->info->ep_attr->max_msg_size);
        return NULL;
    }
    /* the last slots are the engine's own: a flush must find one, or writes waiting for it (flush mode) would
     * hold every slot forever */
    op_t *o = e->nops - e->used > OFI_RESERVE ? op_alloc(e) : NULL;
    if (!o) {
        *s = DION__ENGINE_BUSY;
        return NULL;
    }
    o->peer = peer;
    o->raddr = rk->addr + roff;
    o->rkey = rk->key;
    o->roff = roff;
    o->bytes = bytes;
    return o;
}

/* Flush mode: a write (or a plain add or set) whose key is not known to be accepted by its peer for the size
 * it was given with. The first such write is followed by a check, a 1-byte read of the region's last byte
 * with the key; the write (and any other with that key meanwhile) counts as delivered only once the check
 * came back. */
static dion_status_t put_checked(dion__engine_t *e, op_t *o, const dion__engine_rkey_t *rk)
{
    uint32_t idx = vk_entry(e, o->peer, rk->key);
    if (idx == OFI_NONE) {
        op_free(e, o);
        return DION_ERR_NO_MEMORY;
    }
    vkey_t *k = &e->vks[idx];
    o->klen = rk->len;
    if (k->ok_len >= rk->len) return post(e, o); /* checked */
    if (k->bad_len <= rk->len) {
        op_free(e, o);
        return dion__error_set(
            DION_ERR_REMOTE_ACCESS,
            "ofi %s of %zu bytes to rank %d at offset %llu: rank %d did not confirm remote "
            "key %#llx for a %llu-byte region earlier (%s); shm drops refused accesses at "
            "the target, so writes with that key are refused here",
            op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, o->peer, (unsigned long long)rk->key,
            (unsigned long long)rk->len, dion_status_string(k->status));
    }
    o->vk = idx;
    if (k->chk_len >= rk->len) return post(e, o); /* a check of this size is on its way */
    op_t *c = op_alloc(e);
    if (!c) {
        op_free(e, o);
        return DION__ENGINE_BUSY;
    }
    dion_status_t s = post(e, o);
    if (s != DION_SUCCESS) {
        op_free(e, c);
        return s;
    }
    k->chk_len = rk->len;
    c->peer = o->peer;
    c->kind = OP_GET;
    c->cls = CLS_READ;
    c->ordered = 0;
    c->internal = 1;
    c->vk = idx;
    c->klen = rk->len;
    c->cookie = 0;
    c->raddr = rk->addr + rk->len - 1;
    c->rkey = rk->key;
    c->roff = rk->len - 1;
    c->bytes = 1;
    c->local = &c->result;
    c->desc = e->ops_mr.desc;
    e->n_keychecks++;
    if (post(e, c) != DION_SUCCESS) vk_fail(e, idx, rk->len, DION_ERR_NETWORK); /* the write fails with it */
    return DION_SUCCESS;
}

static dion_status_t rma(dion__engine_t *e, int kind, int peer, dion__engine_mr_t *lmr, void *local,
                         const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes, uint32_t flags,
                         uint64_t cookie)
{
    const char *what = kind == OP_PUT ? "put" : "get";
    if (bytes && (!local || (lmr && ((char *)local < lmr->base || bytes > lmr->len ||
                                     (size_t)((char *)local - lmr->base) > lmr->len - bytes))))
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "ofi %s: the local buffer %p (+%zu) is not inside its "
                               "registration",
                               what, local, bytes);
    if (bytes && !lmr && (e->mr_mode & FI_MR_LOCAL))
        return dion__error_set(DION_ERR_INVALID_ARG, "ofi %s: provider %s needs a registered local buffer",
                               what, dion__ofi_prov_name(e->info));
    dion_status_t s;
    op_t *o = prepare(e, peer, rk, roff, bytes, what, &s);
    if (!o) return s;
    o->kind = (uint8_t)kind;
    o->cls = kind == OP_PUT ? CLS_WRITE : CLS_READ;
    o->ordered = (flags & DION__ENGINE_F_ORDERED) != 0;
    o->local = local;
    o->desc = lmr ? lmr->desc : NULL;
    o->cookie = cookie;
    if (kind == OP_PUT && e->flush && e->peers[peer].fvalid && rk->len) return put_checked(e, o, rk);
    return post(e, o);
}

dion_status_t dion__ofi_put(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, const void *src,
                            const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes, uint32_t flags,
                            uint64_t cookie)
{
    return rma(e, OP_PUT, peer, lmr, (void *)src, rk, roff, bytes, flags, cookie);
}

dion_status_t dion__ofi_get(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, void *dst,
                            const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes, uint32_t flags,
                            uint64_t cookie)
{
    return rma(e, OP_GET, peer, lmr, dst, rk, roff, bytes, flags, cookie);
}

dion_status_t dion__ofi_atomic(dion__engine_t *e, int peer, dion__engine_amo_t op,
                               const dion__engine_rkey_t *rk, uint64_t roff, uint64_t operand,
                               uint64_t compare, uint32_t flags, uint64_t cookie)
{
    if ((unsigned)op >= DION__ENGINE_AMO_COUNT)
        return dion__error_set(DION_ERR_INVALID_ARG, "ofi atomic: unknown operation %d", (int)op);
    if (roff % 8)
        return dion__error_set(DION_ERR_INVALID_ARG, "ofi %s to rank %d: offset %llu is not 8-byte aligned",
                               amo_names[op], peer, (unsigned long long)roff);
    dion_status_t s;
    op_t *o = prepare(e, peer, rk, roff, 8, amo_names[op], &s);
    if (!o) return s;
    o->kind = OP_AMO;
    o->amo = (uint8_t)op;
    o->cls = op == DION__ENGINE_AMO_ADD || op == DION__ENGINE_AMO_SET ? CLS_WRITE : CLS_WRITE | CLS_READ;
    o->ordered = (flags & DION__ENGINE_F_ORDERED) != 0;
    o->operand = operand;
    o->compare = compare;
    o->result = 0;
    o->cookie = cookie;
    /* message mode: a signal alone as one message, applied and acknowledged by the peer's engine */
    if (o->cls == CLS_WRITE && dion__ofi_msg_may_carry(e, peer, NULL, 0, rk, rk)) {
        o->kind = OP_MSG;
        o->skey = rk->key;
        o->soff = roff; /* roff and bytes (8) stay for the sentences; no local data: no put in it */
        o->local = NULL;
        return post(e, o);
    }
    /* plain add and set (flush mode): shm drops one it refuses without a word, as it does writes */
    if (e->plain_sig && o->cls == CLS_WRITE && e->peers[peer].fvalid && rk->len) return put_checked(e, o, rk);
    return post(e, o);
}

/* ---- completions ---- */

static dion_status_t err_status(int err)
{
    switch (err) {
    case FI_EACCES:
    case FI_EPERM:
    case FI_EKEYREJECTED:
    case FI_EFAULT:
    case FI_EINVAL:
    case FI_EOVERFLOW:
    case FI_EIO:
        return DION_ERR_REMOTE_ACCESS;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ENOTCONN:
    case FI_ETIMEDOUT:
    case FI_EHOSTDOWN:
    case FI_ENETDOWN:
    case EPIPE:
        return DION_ERR_PEER_FAILED;
    default:
        return DION_ERR_NETWORK;
    }
}

static const char *err_hint(dion_status_t s, int err)
{
    if (s == DION_ERR_REMOTE_ACCESS)
        return "the target refused the access: check the remote key, and offset+size against the peer's "
               "window";
    if (s == DION_ERR_PEER_FAILED) return "the peer is unreachable or its process ended";
    if (err == FI_ECANCELED)
        return "the provider dropped the connection or the operation (tcp does so after the target refused "
               "an "
               "access: check the remote key and bounds)";
    return "see the provider's message";
}

static void uncount(dion__engine_t *e, op_t *o)
{
    peer_t *p = &e->peers[o->peer];
    p->inflight--;
    if (o->cls & CLS_WRITE) p->writes--;
    if (o->cls & CLS_READ) p->reads--;
    e->inflight_total--;
    o->counted = 0;
}

/* Unlinks a SENT write from its peer's list (and recomputes the list's highest seq). */
static void sent_unlink(dion__engine_t *e, peer_t *p, op_t *o)
{
    uint32_t *link = &p->shead, idx = (uint32_t)(o - e->ops);
    p->smax = 0;
    while (*link != OFI_NONE) {
        op_t *w = &e->ops[*link];
        if (*link == idx) {
            *link = w->next;
            continue;
        }
        if (w->seq > p->smax) p->smax = w->seq;
        link = &w->next;
    }
}

/* Every operation gets its final status within DION_OFI_OP_TIMEOUT of being handed to the engine (plus the
 * scan period). In flight: the provider never completed it (libfabric 1.17's shm drops the answer to a
 * refused access): reported as timed out, its slot kept until a late completion. SENT: a write the provider
 * took whose confirming fetch never came back. Queued: the provider refused every post of it (-FI_EAGAIN: a
 * peer that stopped draining its queue). Each takes the operations queued behind it to the same peer with it,
 * so that none is posted after a failed one. */
static void expire(dion__engine_t *e, uint64_t now, dion__engine_cqe_t *out, int max, int *n)
{
    if (!e->op_timeout_ns || now < e->next_scan_ns || !e->used) return;
    uint64_t period = e->op_timeout_ns / 8 < 100000000ull ? e->op_timeout_ns / 8 : 100000000ull;
    e->next_scan_ns = now + period;
    for (uint32_t k = 0; k < e->nops && *n < max; k++) {
        op_t *o = &e->ops[k];
        if ((o->state != OP_INFLIGHT && o->state != OP_SENT) || now - o->sub_ns < e->op_timeout_ns) continue;
        peer_t *p = &e->peers[o->peer];
        ofi_cause_t c = cause_of(o, o->state == OP_SENT ? FAIL_SENT : FAIL_NOCOMP, 0);
        if (o->state == OP_SENT) { /* its slot is free once its completion is returned */
            sent_unlink(e, p, o);
            o->fail = FAIL_SENT;
            ready_push(e, o, DION_ERR_TIMEOUT);
            fail_queue(e, p, FAIL_BEHIND, &c, DION_ERR_TIMEOUT);
            continue;
        }
        if (covers(e, o)) settle(e, p, o->seq, DION_ERR_TIMEOUT); /* the writes it was to confirm */
        if (o->internal) {
            internal_done(e, o, DION_ERR_TIMEOUT);
            uncount(e, o);
            o->state = OP_ABANDONED;
            fail_queue(e, p, FAIL_BEHIND, &c, DION_ERR_TIMEOUT);
            continue;
        }
        dion__engine_cqe_t *q = &out[(*n)++];
        q->cookie = o->cookie;
        q->value = 0;
        q->peer = o->peer;
        q->status = DION_ERR_TIMEOUT;
        snprintf(q->why, sizeof q->why,
                 "%s of %zu bytes to rank %d at offset %llu got no completion within %.1f s "
                 "(DION_OFI_OP_TIMEOUT): the peer may be gone or the provider dropped an error",
                 op_name(o), o->bytes, o->peer, (unsigned long long)o->roff, (double)e->op_timeout_ns / 1e9);
        uncount(e, o);
        o->state = OP_ABANDONED;
        fail_queue(e, p, FAIL_BEHIND, &c, DION_ERR_TIMEOUT);
    }
    /* queue heads the provider kept refusing (a head held for order or the bound waits for what is in
     * flight before it, which expires first), and refused flushes */
    for (int r = 0; r < e->nranks && (e->queued_peers || e->fpend_n); r++) {
        peer_t *p = &e->peers[r];
        if (p->fpend != OFI_NONE && now - e->ops[p->fpend].sub_ns >= e->op_timeout_ns) {
            op_t *o = &e->ops[p->fpend];
            char why[512];
            p->fpend = OFI_NONE;
            e->fpend_n--;
            o->fail = FAIL_REFUSED;
            dion__ofi_fail_describe(e, o, why, sizeof why);
            DION_LOG(DION_LOG_WARN, "ofi: a %s to rank %d failed: %s", "flush", r, why);
            settle(e, p, UINT64_MAX, DION_ERR_TIMEOUT);
            internal_done(e, o, DION_ERR_TIMEOUT);
            op_free(e, o);
        }
        if (p->qhead == OFI_NONE) continue;
        op_t *o = &e->ops[p->qhead];
        if (!o->tries || now - o->sub_ns < e->op_timeout_ns) continue;
        ofi_cause_t c = cause_of(o, FAIL_REFUSED, -FI_EAGAIN);
        fail_queue(e, p, FAIL_REFUSED, &c, DION_ERR_TIMEOUT);
    }
}

static void retire(dion__engine_t *e, op_t *o)
{
    if (o->counted) uncount(e, o);
    op_free(e, o);
}

int dion__ofi_poll(dion__engine_t *e, dion__engine_cqe_t *out, int max)
{
    if (e->broken) {
        dion__error_set(DION_ERR_NETWORK, "ofi: the completion queue failed earlier");
        return -1;
    }
    int n = 0;
    uint64_t now = dion__now_ns(); /* one clock read per poll: timeouts, and the times of the closing line */
    if (e->last_poll_ns) ofi_hist_add(&e->h_gap, now - e->last_poll_ns);
    e->last_poll_ns = now;
    ready_emit(e, out, max, &n);
    while (n < max) {
        struct fi_cq_entry ent[16];
        int want = max - n < 16 ? max - n : 16;
        ssize_t got = fi_cq_read(e->cq, ent, (size_t)want);
        e->n_cq_reads++;
        if (got == -FI_EAGAIN) {
            e->n_cq_empty++;
            break;
        }
        if (got > 0) e->n_cqes += (uint64_t)got;
        if (got == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof err);
            if (fi_cq_readerr(e->cq, &err, 0) != 1) break;
            if (dion__ofi_msg_is_rx(e, err.op_context)) {
                dion__ofi_msg_rx(e, err.op_context, err.err);
                continue;
            }
            op_t *o = err.op_context;
            if (!o) { /* shm reports here, at the target, an access it refused */
                DION_LOG(DION_LOG_WARN, "ofi: an operation of a peer on this rank was refused: %s",
                         e->fi->strerror(err.err));
                continue;
            }
            if (o->state == OP_ABANDONED) {
                retire(e, o);
                continue;
            }
            if (covers(e, o)) settle(e, &e->peers[o->peer], o->seq, err_status(err.err));
            if (o->internal) {
                DION_LOG(DION_LOG_WARN, "ofi: a %s to rank %d failed: %s",
                         o->vk == OFI_NONE ? "flush" : "key check", o->peer, e->fi->strerror(err.err));
                internal_done(e, o, err_status(err.err));
                retire(e, o);
                continue;
            }
            dion__engine_cqe_t *c = &out[n++];
            char pmsg[128] = "";
            const char *ps = fi_cq_strerror(e->cq, err.prov_errno, err.err_data, pmsg, sizeof pmsg);
            c->cookie = o->cookie;
            c->value = 0;
            c->peer = o->peer;
            c->status = err_status(err.err);
            snprintf(c->why, sizeof c->why,
                     "%s of %zu bytes to rank %d at offset %llu (key %#llx) failed: %s%s%s; %s", op_name(o),
                     o->bytes, o->peer, (unsigned long long)o->roff, (unsigned long long)o->rkey,
                     e->fi->strerror(err.err), ps && *ps ? " / " : "", ps ? ps : "",
                     err_hint(c->status, err.err));
            retire(e, o);
            continue;
        }
        if (got < 0) {
            e->broken = 1;
            dion__error_set(DION_ERR_NETWORK, "ofi: fi_cq_read failed: %s (%zd)", e->fi->strerror((int)-got),
                            got);
            return -1;
        }
        for (ssize_t k = 0; k < got; k++) {
            if (dion__ofi_msg_is_rx(e, ent[k].op_context)) {
                dion__ofi_msg_rx(e, ent[k].op_context, 0);
                continue;
            }
            op_t *o = ent[k].op_context;
            if (o->state == OP_ABANDONED) {
                retire(e, o);
                continue;
            }
            peer_t *p = &e->peers[o->peer];
            if (o->flushed && vk_verdict(e, o) < 0) { /* its key was refused meanwhile */
                ready_push(e, o, e->vks[o->vk].status);
                continue;
            }
            if (o->flushed && (o->seq >= p->delivered || !vk_verdict(e, o))) { /* wait for a fetch, a check */
                o->state = OP_SENT;
                o->next = p->shead;
                p->shead = (uint32_t)(o - e->ops);
                if (o->seq > p->smax) p->smax = o->seq;
                want_flush(e, o->peer);
                continue;
            }
            if (o->internal && o->vk != OFI_NONE && o->klen > e->vks[o->vk].ok_len)
                e->vks[o->vk].ok_len = o->klen; /* a key check came back: before settle releases writes */
            if (covers(e, o)) {
                settle(e, p, o->seq, DION_SUCCESS);
                if (o->kind == OP_AMO) ofi_hist_add(&e->h_fetch, now - o->posted_ns);
            }
            if (o->internal) {
                internal_done(e, o, DION_SUCCESS);
                retire(e, o);
                continue;
            }
            dion__engine_cqe_t *c = &out[n++];
            c->cookie = o->cookie;
            c->value = o->kind == OP_AMO &&
                               (o->amo == DION__ENGINE_AMO_FETCH_ADD || o->amo == DION__ENGINE_AMO_CSWAP)
                           ? o->result
                           : 0;
            c->peer = o->peer;
            c->status = DION_SUCCESS;
            c->why[0] = 0;
            retire(e, o);
        }
        if (got < want) break;
    }
    if (e->nackq) dion__ofi_msg_acks(e);
    uint64_t scanned = e->next_scan_ns;
    expire(e, now, out, max, &n);
    if (e->msg && e->next_scan_ns != scanned) dion__ofi_msg_prune(e); /* after a scan for timed-out ops */
    if (e->queued_peers || e->fpend_n) drain(e);
    if (e->nwant) flush_wanted(e);
    ready_emit(e, out, max, &n);
    return n;
}

/* The remote-operation counter, read at most every 4 us: fi_cntr_read runs the provider's progress again, and
 * the proxy's spin before napping is ten times longer. */
int dion__ofi_served(dion__engine_t *e)
{
    if (e->n_msgs_rx != e->msgs_rx_seen) { /* peers' messages, applied by poll */
        e->msgs_rx_seen = e->n_msgs_rx;
        return 1;
    }
    if (!e->rx_cntr) return 0;
    uint64_t now = dion__now_ns();
    if (now < e->rx_next_ns) return 0;
    e->rx_next_ns = now + 4000;
    uint64_t v = fi_cntr_read(e->rx_cntr);
    if (v == e->rx_seen) return 0;
    e->rx_seen = v;
    return 1;
}

uint32_t dion__ofi_pending(dion__engine_t *e, int peer)
{
    if (!e->peers) return 0;
    if (peer >= 0 && peer < e->nranks)
        return e->peers[peer].inflight + e->peers[peer].queued + (e->peers[peer].fpend != OFI_NONE);
    /* the glue asks once per batch: no walk over the peers */
    return e->inflight_total + e->queued_total + e->fpend_n;
}

void dion__ofi_counts(dion__engine_t *e, dion__engine_counts_t *out)
{
    out->posts = e->n_posts;
    out->held = e->n_held;
    out->refused = e->busy_posts;
    out->flushes = e->n_flushes;
}

dion_status_t dion__ofi_put_signal(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, const void *src,
                                   const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes,
                                   const dion__engine_rkey_t *sk, uint64_t soff, int sig_add, uint64_t value,
                                   uint64_t cookie)
{
    if (!e->peers || peer < 0 || peer >= e->nranks || !rk || !sk ||
        !dion__ofi_msg_may_carry(e, peer, lmr, bytes, rk, sk))
        return DION__ENGINE_DECLINED;
    if (bytes && !src)
        return dion__error_set(DION_ERR_INVALID_ARG, "ofi put_signal to rank %d: no source buffer", peer);
    if (soff % 8)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "ofi put_signal to rank %d: signal offset %llu is not 8-byte aligned", peer,
                               (unsigned long long)soff);
    dion_status_t s;
    /* both ranges against the sizes the peer gave (the target checks again against its registrations) */
    op_t *o = prepare(e, peer, sk, soff, 8, "put_signal (signal)", &s);
    if (!o) return s;
    if (roff > rk->len || bytes > rk->len - roff) {
        op_free(e, o);
        return dion__error_set(
            DION_ERR_INVALID_ARG,
            "ofi put_signal to rank %d: bytes [%llu, %llu) lie outside the %llu-byte remote "
            "region",
            peer, (unsigned long long)roff, (unsigned long long)(roff + bytes), (unsigned long long)rk->len);
    }
    o->kind = OP_MSG;
    o->cls = CLS_WRITE;
    o->ordered = 1;
    o->amo = sig_add ? DION__ENGINE_AMO_ADD : DION__ENGINE_AMO_SET;
    o->operand = value;
    o->skey = sk->key;
    o->soff = soff;
    o->rkey = rk->key;
    o->roff = roff;
    o->bytes = bytes;
    o->local = (void *)src;
    o->cookie = cookie;
    return post(e, o);
}
