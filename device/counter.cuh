/* Local completion counters (dion_put_counted and friends, dion_counter_read, dion_counter_wait): per
 * context, DION_NUM_COUNTERS 64-bit counts of counted operations whose source may be reused.
 *
 * A counter is the sum of one part per backend that can serve the context, each monotonic, so the sum is
 * monotonic too:
 *  - p2p: a word in dev.lcount, which the group's leader adds 1 to once the group's copy is done (the copy
 *    has read the whole source when the call returns);
 *  - proxy: ctl->lcount[counter] of the context's ring, which the proxy thread adds 1 to once the engine no
 *    longer reads the source (transports/proxy/proxy_ops.c);
 *  - gdaki: the p2p word too, which the posting leader adds 1 to after the CQE of the put's last WQE (at once
 *    for an all-inline put), so gdaki adds no part of its own (dion__gdaki_rma_group in dion_device.cuh).
 * docs/semantics.md ("Local completion counters") says what a backend has to provide. Included by
 * dion_device.cuh after the proxy's half, whose ring it reads when compiled in. */
#ifndef DION_DEVICE_COUNTER_CUH
#define DION_DEVICE_COUNTER_CUH

#include "dion/device/common.cuh"
#if DION__HAS_GDAKI
#include "dion/device/gdaki_proto.cuh"
#endif

/* The p2p word of counter `counter` of the context. */
DION_HD uint64_t *dion__lcount_word(const dion_ctx_t *c, uint32_t counter)
{
    return c->dev.lcount + (size_t)c->index * DION_NUM_COUNTERS + counter;
}

/* p2p: called by the group's leader after the group synchronized behind its copy. Every thread's loads of the
 * source have returned by then (each store consumed its load, and the bulk-copy path waited for its reads),
 * so nothing the caller writes into the source later can change what was sent: a relaxed add is enough on
 * the GPU, and it adds no fence to the put. CPU mode uses a release, free on x86, so that the C11 model
 * orders the memcpy's reads before it too. */
DION_HD void dion__lcount_add(const dion_ctx_t *c, uint32_t counter)
{
#if DION__GPU
    dion__atom_add(dion__lcount_word(c, counter), 1, DION_SCOPE_GPU);
#else
    dion__red_add_release(dion__lcount_word(c, counter), 1, DION_SCOPE_SYS);
#endif
}

/* The counter's value now: the p2p word plus, where the context has a proxy ring, the ring's count. Both
 * loads are acquires. */
DION_HD uint64_t dion__lcount_value(const dion_ctx_t *c, uint32_t counter)
{
    uint64_t v = dion__ld_acquire(dion__lcount_word(c, counter), dion__dev_scope(&c->dev));
#if DION__HAS_PROXY
    if (c->dev.flags & DION_DEVF_PROXY)
        v += dion__ld_acquire(&dion__ctx_ring(c)->ctl->lcount[counter], DION_SCOPE_SYS);
#endif
    return v;
}

/* DION_CHECK: the counter index must be below DION_NUM_COUNTERS; the leader records it otherwise. */
DION_HD int dion__check_counter(const dion_ctx_t *c, uint32_t counter, dion_op_t op, int peer, int leader)
{
    if (counter < DION_NUM_COUNTERS) return 1;
    if (leader) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, op, peer);
        e.detail = DION_ERR_DETAIL_COUNTER;
        e.sig = counter;
        e.observed = counter;
        e.limit = DION_NUM_COUNTERS;
        dion__record(c, e);
    }
    return 0;
}

#if DION__HAS_GDAKI
/* gdaki: the first error latched by a QP of the context (a failed counted put never counts), or 0. */
DION_HD uint64_t dion__lcount_gdaki_err(const dion_ctx_t *c)
{
    const dion_gdaki_qp_dev_t *qs = c->dev.gdaki->qps + (size_t)c->index * (size_t)c->dev.nranks;
    for (int p = 0; p < c->dev.nranks; p++) {
        if (!(qs[p].flags & DION_GDAKI_QP_UP)) continue;
        uint64_t e = dion__ld_relaxed(&qs[p].st->err, DION_SCOPE_GPU);
        if (e) return e;
    }
    return 0;
}
#endif

/* Polls until the counter reaches value, the comm is aborted or a peer failed (the abort word), the
 * context's proxy ring or one of its gdaki QPs failed, or the handle's wait timeout passes; as
 * dion__wait_word, the clock and the failure words are read every 128 polls. A timeout writes an error
 * record. */
DION_HD dion_status_t dion__lcount_wait(const dion_ctx_t *c, uint32_t counter, uint64_t value,
                                        uint64_t *observed)
{
    const dion_dev_t *d = &c->dev;
    uint64_t v = dion__lcount_value(c, counter);
    const uint64_t *abort_word = dion__ctl_word(d, d->signals, DION_CTL_ABORT);
    uint64_t start = 0;
    for (uint32_t polls = 1; v < value; polls++) {
        if ((polls & 127) == 0) {
            uint64_t ab = dion__ld_relaxed(abort_word, dion__dev_scope(d));
#if DION__HAS_PROXY
            if (!ab && (d->flags & DION_DEVF_PROXY)) {
                ab = dion__ld_relaxed(&dion__ctx_ring(c)->ctl->status, DION_SCOPE_SYS);
                if (ab) dion__proxy_error(c, (dion_status_t)ab, DION_OP_COUNTER_WAIT, -1, counter, v);
            }
#endif
#if DION__HAS_GDAKI
            if (!ab && (d->flags & DION_DEVF_GDAKI)) ab = dion__lcount_gdaki_err(c);
#endif
            if (ab) {
                *observed = v;
                return (dion_status_t)ab;
            }
            uint64_t now = dion__time_ns();
            if (start == 0) start = now;
            if (d->wait_timeout_ns && now - start > d->wait_timeout_ns) {
                *observed = v;
                return dion__wait_timed_out(c, DION_OP_COUNTER_WAIT, counter, DION_CMP_GE, value, v);
            }
        }
        dion__backoff(polls);
        v = dion__lcount_value(c, counter);
    }
    *observed = v;
    return DION_SUCCESS;
}

#endif /* DION_DEVICE_COUNTER_CUH */
