/* The ofi engine's message mode (DION_OFI_SIGNAL=msg): a small put_signal, or a signal alone, travels as one
 * message (fi_inject on the same endpoint) that the target's engine applies in its poll: it copies the data
 * into the window and then changes the signal word with a CPU atomic, and acknowledges, once per poll and
 * peer, the messages it applied. The sender completes a message at that acknowledgement.
 *
 * Order (docs/backends/proxy.md, "put_signal as one message"): shm (ordered mode) and tcp process one
 * sender's commands to one target in submission order, so a message is received after every earlier write to
 * that peer was placed. A received message is applied only when the target's engine reads its completion,
 * after the provider may have processed later commands of the same sender; so an ORDERED RMA or atomic
 * operation posted after a message is held (ofi_ops.c may_post) until the message is acknowledged, and
 * messages after messages are applied in order by the target's poll. Signals applied here are CPU atomics on
 * host memory, as shm's and tcp;ofi_rxm's software atomics are (they run in the same thread, inside poll). */
#include <stdlib.h>
#include <string.h>

#include "ofi.h"

#if DION_HAVE_FABRIC

#define MSG_PUTSIG 0x3150444du /* "MDP1" */
#define MSG_ACK    0x3141444du /* "MDA1" */
#define MSG_RX     256u        /* receives posted per engine */
#define MSG_DATA   256u        /* largest data in a put_signal message */
#define ACK_FAILS  8u

typedef struct {
    uint32_t type;
    int32_t from;
    uint64_t mseq;
    uint64_t dkey, doff;
    uint64_t skey, soff, value;
    uint32_t bytes, sig; /* sig: 1 add, 2 set */
} msg_hdr_t;

typedef struct {
    uint32_t type;
    int32_t from;
    uint64_t upto;  /* every message up to this number was applied (or refused) */
    uint32_t nfail; /* refusals among them, mseq and code */
    uint32_t pad;
    uint64_t fail[ACK_FAILS][2];
} msg_ack_t;

struct dion__ofi_rx {
    struct fi_context2 ctx; /* first */
    union {
        msg_hdr_t h;
        msg_ack_t a;
        uint8_t bytes[sizeof(msg_hdr_t) + MSG_DATA];
    } u;
};

struct dion__ofi_lkey {
    uint64_t key;
    char *base;
    size_t len;
    int mem;
};

enum { REF_NONE, REF_DKEY, REF_DRANGE, REF_DGPU, REF_SKEY, REF_SRANGE, REF_SGPU, REF_FORM };

const char *dion__ofi_msg_refusal(uint64_t code)
{
    switch (code) {
    case REF_DKEY:
        return "the data's remote key is not registered there";
    case REF_DRANGE:
        return "the data lies beyond the registered region";
    case REF_DGPU:
        return "the data's region is GPU memory, which the target's CPU cannot write";
    case REF_SKEY:
        return "the signal's remote key is not registered there";
    case REF_SRANGE:
        return "the signal word lies beyond the registered region or is not 8-byte aligned";
    case REF_SGPU:
        return "the signal word is GPU memory, which the target's CPU cannot update";
    default:
        return "the message was malformed";
    }
}

static ssize_t post_rx(dion__engine_t *e, struct dion__ofi_rx *r)
{
    return fi_recv(e->ep, &r->u, sizeof r->u, e->rx_mr.desc, FI_ADDR_UNSPEC, &r->ctx);
}

dion_status_t dion__ofi_msg_open(dion__engine_t *e, char *why, size_t cap)
{
    size_t inj = e->info->tx_attr->inject_size;
    if (inj < sizeof(msg_ack_t) || inj < sizeof(msg_hdr_t) + 8) {
        DION_LOG(DION_LOG_WARN,
                 "ofi: DION_OFI_SIGNAL=msg but provider %s injects only %zu bytes; signals stay atomics",
                 dion__ofi_prov_name(e->info), inj);
        e->msg = 0;
        return DION_SUCCESS;
    }
    e->msg_data_max = (uint32_t)(inj - sizeof(msg_hdr_t) < MSG_DATA ? inj - sizeof(msg_hdr_t) : MSG_DATA);
    e->nrx = MSG_RX;
    e->rxb = calloc(e->nrx, sizeof *e->rxb);
    e->ackq = calloc((size_t)e->nranks, sizeof *e->ackq);
    if (!e->rxb || !e->ackq) {
        snprintf(why, cap, "ofi engine: out of memory for %u message receives", e->nrx);
        return DION_ERR_NO_MEMORY;
    }
    /* every sender (this rank too) within its share of the receives: a message that finds none posted waits
     * in the provider's unexpected queue */
    e->mcredit = e->nrx / (uint32_t)e->nranks ? e->nrx / (uint32_t)e->nranks : 1u;
    if (e->mr_mode & FI_MR_LOCAL) {
        struct iovec iov = {.iov_base = e->rxb, .iov_len = e->nrx * sizeof *e->rxb};
        struct fi_mr_attr attr = {
            .mr_iov = &iov, .iov_count = 1, .access = FI_RECV, .requested_key = e->next_key++};
        int rc = fi_mr_regattr(e->domain, &attr, 0, &e->rx_mr.mr);
        if (!rc && (e->mr_mode & FI_MR_ENDPOINT)) {
            rc = fi_mr_bind(e->rx_mr.mr, &e->ep->fid, 0);
            if (!rc) rc = fi_mr_enable(e->rx_mr.mr);
        }
        if (rc) {
            snprintf(why, cap, "libfabric fi_mr_reg(message receives) failed for provider %s: %s (%d)",
                     dion__ofi_prov_name(e->info), e->fi->strerror(-rc), rc);
            return DION_ERR_NETWORK;
        }
        e->rx_mr.desc = fi_mr_desc(e->rx_mr.mr);
    }
    for (uint32_t i = 0; i < e->nrx; i++) {
        ssize_t rc = post_rx(e, &e->rxb[i]);
        if (rc) {
            snprintf(why, cap, "libfabric fi_recv (message receive %u) failed for provider %s: %s (%zd)", i,
                     dion__ofi_prov_name(e->info), e->fi->strerror((int)-rc), rc);
            return DION_ERR_NETWORK;
        }
    }
    return DION_SUCCESS;
}

void dion__ofi_msg_close(dion__engine_t *e)
{
    if (e->rx_mr.mr) fi_close(&e->rx_mr.mr->fid);
    for (int r = 0; e->peers && r < e->nranks; r++) free(e->peers[r].mfail);
    free(e->rxb);
    free(e->ackq);
    free(e->lkeys);
}

/* ---- this rank's registrations, by key ---- */

dion_status_t dion__ofi_msg_lkey_add(dion__engine_t *e, const struct dion__engine_mr *m, uint64_t key)
{
    if (e->nlkeys == e->caplkeys) {
        uint32_t c = e->caplkeys ? e->caplkeys * 2u : 16u;
        struct dion__ofi_lkey *k = realloc(e->lkeys, c * sizeof *k);
        if (!k) return dion__error_set(DION_ERR_NO_MEMORY, "ofi: out of memory for the registration table");
        e->lkeys = k;
        e->caplkeys = c;
    }
    e->lkeys[e->nlkeys++] = (struct dion__ofi_lkey){key, m->base, m->len, m->mem};
    return DION_SUCCESS;
}

void dion__ofi_msg_lkey_del(dion__engine_t *e, const struct dion__engine_mr *m)
{
    for (uint32_t i = 0; i < e->nlkeys; i++)
        if (e->lkeys[i].base == m->base && e->lkeys[i].len == m->len) {
            e->lkeys[i] = e->lkeys[--e->nlkeys];
            return;
        }
}

static const struct dion__ofi_lkey *lkey_find(const dion__engine_t *e, uint64_t key)
{
    for (uint32_t i = 0; i < e->nlkeys; i++)
        if (e->lkeys[i].key == key) return &e->lkeys[i];
    return NULL;
}

/* ---- sending ---- */

int dion__ofi_msg_may_carry(const dion__engine_t *e, int peer, const dion__engine_mr_t *lmr, size_t bytes,
                            const dion__engine_rkey_t *rk, const dion__engine_rkey_t *sk)
{
    (void)peer;
    if (!e->msg || bytes > e->msg_data_max) return 0;
    if (sk->flags != DION__ENGINE_MEM_HOST) return 0;
    if (bytes && (rk->flags != DION__ENGINE_MEM_HOST || !lmr || lmr->mem != DION__ENGINE_MEM_HOST)) return 0;
    return 1;
}

ssize_t dion__ofi_msg_submit(dion__engine_t *e, op_t *o)
{
    peer_t *p = &e->peers[o->peer];
    union {
        msg_hdr_t h;
        uint8_t bytes[sizeof(msg_hdr_t) + MSG_DATA];
    } m;
    m.h = (msg_hdr_t){.type = MSG_PUTSIG,
                      .from = e->rank,
                      .mseq = p->mtx + 1,
                      .dkey = o->rkey,
                      .doff = o->roff,
                      .skey = o->skey,
                      .soff = o->soff,
                      .value = o->operand,
                      .bytes = o->local ? (uint32_t)o->bytes : 0u,
                      .sig = o->amo == DION__ENGINE_AMO_ADD ? 1u : 2u};
    if (m.h.bytes) memcpy(m.bytes + sizeof m.h, o->local, m.h.bytes);
    return fi_inject(e->ep, &m, sizeof m.h + m.h.bytes, p->addr);
}

/* After a message went out: its number, and its place in the peer's list of unacknowledged ones. */
void dion__ofi_msg_sent(dion__engine_t *e, op_t *o)
{
    peer_t *p = &e->peers[o->peer];
    o->mseq = ++p->mtx;
    o->mnext = OFI_NONE;
    uint32_t idx = (uint32_t)(o - e->ops);
    if (p->mhead == OFI_NONE)
        p->mhead = idx;
    else
        e->ops[p->mtail].mnext = idx;
    p->mtail = idx;
    p->munacked++;
    e->n_msgs++;
}

/* Messages reported as timed out (ofi_ops.c expire) leave the head of their peer's list, so that operations
 * held behind them are posted (and fail or succeed on their own) instead of waiting for an answer that may
 * never come. */
void dion__ofi_msg_prune(dion__engine_t *e)
{
    for (int r = 0; r < e->nranks; r++) {
        peer_t *p = &e->peers[r];
        while (p->mhead != OFI_NONE && e->ops[p->mhead].state == OP_ABANDONED) {
            op_t *o = &e->ops[p->mhead];
            p->mhead = o->mnext;
            if (p->mhead == OFI_NONE) p->mtail = OFI_NONE;
            p->munacked--;
            dion__ofi_op_free(e, o);
        }
    }
}

/* ---- receiving ---- */

int dion__ofi_msg_is_rx(const dion__engine_t *e, const void *ctx)
{
    const struct dion__ofi_rx *r = ctx;
    return e->rxb && r >= e->rxb && r < e->rxb + e->nrx;
}

static void owe_ack(dion__engine_t *e, int from)
{
    peer_t *p = &e->peers[from];
    if (!p->ackwant) {
        p->ackwant = 1;
        e->ackq[e->nackq++] = from;
    }
}

static int refuse(dion__engine_t *e, peer_t *p, uint64_t mseq, uint64_t code)
{
    if (p->nmfail == p->capmfail) {
        uint32_t c = p->capmfail ? p->capmfail * 2u : 8u;
        uint64_t(*f)[2] = realloc(p->mfail, c * sizeof *f);
        if (!f) return -1;
        p->mfail = f;
        p->capmfail = c;
    }
    p->mfail[p->nmfail][0] = mseq;
    p->mfail[p->nmfail][1] = code;
    p->nmfail++;
    return 0;
}

/* A peer's put_signal or signal: data, then the signal, each checked against this rank's registrations. */
static uint64_t apply(dion__engine_t *e, const msg_hdr_t *h, const uint8_t *data)
{
    const struct dion__ofi_lkey *s = lkey_find(e, h->skey);
    if (!s) return REF_SKEY;
    if (s->mem != DION__ENGINE_MEM_HOST) return REF_SGPU;
    if ((h->soff & 7) || h->soff > s->len || s->len - h->soff < 8) return REF_SRANGE;
    if (h->bytes) {
        const struct dion__ofi_lkey *d = lkey_find(e, h->dkey);
        if (!d) return REF_DKEY;
        if (d->mem != DION__ENGINE_MEM_HOST) return REF_DGPU;
        if (h->doff > d->len || d->len - h->doff < h->bytes) return REF_DRANGE;
        memcpy(d->base + h->doff, data, h->bytes);
    }
    uint64_t *w = (uint64_t *)(s->base + h->soff);
    if (h->sig == 1)
        __atomic_fetch_add(w, h->value, __ATOMIC_SEQ_CST);
    else
        __atomic_store_n(w, h->value, __ATOMIC_SEQ_CST); /* also orders the data's stores before it */
    return REF_NONE;
}

/* An acknowledgement from rank `from`: its messages up to a.upto are done (refused ones fail). */
static void acked(dion__engine_t *e, const msg_ack_t *a)
{
    peer_t *p = &e->peers[a->from];
    uint64_t last = 0, now = dion__now_ns();
    e->n_acks_rx++;
    while (p->mhead != OFI_NONE && e->ops[p->mhead].mseq <= a->upto) {
        op_t *o = &e->ops[p->mhead];
        p->mhead = o->mnext;
        if (p->mhead == OFI_NONE) p->mtail = OFI_NONE;
        p->munacked--;
        last = o->seq;
        if (o->state == OP_ABANDONED) { /* reported as timed out already */
            dion__ofi_op_free(e, o);
            continue;
        }
        ofi_hist_add(&e->h_msg, now - o->posted_ns);
        o->compare = REF_NONE;
        for (uint32_t i = 0; i < a->nfail && i < ACK_FAILS; i++)
            if (a->fail[i][0] == o->mseq) o->compare = a->fail[i][1];
        dion__ofi_ready_push(e, o, o->compare == REF_NONE ? DION_SUCCESS : DION_ERR_REMOTE_ACCESS);
    }
    /* the peer processed every earlier operation of this rank to it: writes waiting for a fetch are in */
    if (last) dion__ofi_settle(e, p, last, DION_SUCCESS);
}

void dion__ofi_msg_rx(dion__engine_t *e, void *ctx, int err)
{
    struct dion__ofi_rx *r = ctx;
    if (err) {
        DION_LOG(DION_LOG_WARN, "ofi: a message receive failed: %s", e->fi->strerror(err));
    } else if (r->u.h.type == MSG_ACK && r->u.a.from >= 0 && r->u.a.from < e->nranks) {
        acked(e, &r->u.a);
    } else if (r->u.h.type == MSG_PUTSIG && r->u.h.from >= 0 && r->u.h.from < e->nranks) {
        const msg_hdr_t *h = &r->u.h;
        peer_t *p = &e->peers[h->from];
        uint64_t code =
            h->bytes > MSG_DATA || h->mseq != p->mrx + 1 ? REF_FORM : apply(e, h, r->u.bytes + sizeof *h);
        if (h->mseq != p->mrx + 1)
            DION_LOG(DION_LOG_WARN, "ofi: message %llu from rank %d arrived after message %llu",
                     (unsigned long long)h->mseq, h->from, (unsigned long long)p->mrx);
        if (h->mseq > p->mrx) p->mrx = h->mseq;
        if (code != REF_NONE && refuse(e, p, h->mseq, code))
            DION_LOG(DION_LOG_WARN, "ofi: out of memory recording a refused message of rank %d", h->from);
        e->n_msgs_rx++;
        owe_ack(e, h->from);
    } else {
        DION_LOG(DION_LOG_WARN, "ofi: a message of unknown type %#x arrived", r->u.h.type);
    }
    ssize_t rc = post_rx(e, r);
    if (rc) /* the receive is lost; peers' messages wait for the others */
        DION_LOG(DION_LOG_WARN, "ofi: reposting a message receive failed: %s", e->fi->strerror((int)-rc));
}

/* One acknowledgement per peer owed one: what was applied, with up to ACK_FAILS refusals (more: the rest in
 * the next). A peer whose acknowledgement the provider refuses now keeps its place for the next poll. */
void dion__ofi_msg_acks(dion__engine_t *e)
{
    int k = 0;
    for (int i = 0; i < e->nackq; i++) {
        int r = e->ackq[i];
        peer_t *p = &e->peers[r];
        msg_ack_t a = {.type = MSG_ACK, .from = e->rank, .upto = p->mrx};
        uint32_t nf = p->nmfail < ACK_FAILS ? p->nmfail : ACK_FAILS;
        for (uint32_t f = 0; f < nf; f++) {
            a.fail[f][0] = p->mfail[f][0];
            a.fail[f][1] = p->mfail[f][1];
        }
        a.nfail = nf;
        if (nf < p->nmfail) a.upto = p->mfail[nf][0] - 1; /* stop before the first refusal left out */
        ssize_t rc = fi_inject(e->ep, &a, sizeof a, p->addr);
        if (rc == 0) {
            e->n_acks++;
            p->macked = a.upto;
            if (nf) { /* mfail is NULL until a refusal was recorded */
                memmove(p->mfail, p->mfail + nf, (p->nmfail - nf) * sizeof *p->mfail);
                p->nmfail -= nf;
            }
            if (p->macked < p->mrx) {
                e->ackq[k++] = r;
                continue;
            }
            p->ackwant = 0;
            continue;
        }
        if (rc != -FI_EAGAIN)
            DION_LOG(DION_LOG_WARN, "ofi: acknowledging rank %d's messages failed: %s (retried)", r,
                     e->fi->strerror((int)-rc));
        e->ackq[k++] = r;
    }
    e->nackq = k;
}

#endif
