/* DION_TRACE, device half: device calls append one event per operation to their context's bounded array
 * (dion_dev_t.trace); src/trace.c copies the arrays out at dion_dev_destroy and writes Chrome-trace JSON.
 *
 * In GPU code the hooks are compiled only with -DDION_TRACE_COMPILED=1: compiled in but off, the branch and the
 * start time it keeps live cost 4-8% on the thread-level rows and the message rate of perf/p2p_bench on an
 * H200 (2026-11-30, docs/results/2026-11-30-h200x2), and "off" must cost nothing. CPU mode (host code) has them
 * by default: there a branch on a loaded flags word is free. With the hooks in and DION_TRACE unset, every hook
 * is one branch on the handle's flags word: no memory traffic, no clock read. */
#ifndef DION_DEVICE_TRACE_CUH
#define DION_DEVICE_TRACE_CUH

#include "dion/device/arch.cuh"

#ifndef DION_TRACE_COMPILED
#if defined(__CUDA_ARCH__)
#define DION_TRACE_COMPILED 0
#else
#define DION_TRACE_COMPILED 1
#endif
#endif

DION_HD int dion__trace_on(const dion_dev_t *d)
{
#if DION_TRACE_COMPILED
    return (d->flags & DION_DEVF_TRACE) != 0;
#else
    (void)d;
    return 0;
#endif
}

/* The start time of a traced operation; 0 (no clock read) when tracing is off. */
DION_HD uint64_t dion__trace_start(const dion_ctx_t *c)
{
    return dion__trace_on(&c->dev) ? dion__time_ns() : 0;
}

/* Appends one event to the caller's context. t0 == 0 makes an instant (the end time is read here). A full
 * array keeps its first events: the claim still counts, so the host reports how many were dropped. */
DION_HD void dion__trace_op(const dion_ctx_t *c, uint64_t t0, dion_op_t op, int peer, uint32_t sig,
                            uint64_t bytes, uint64_t value, uint64_t observed, uint32_t cmp, dion_status_t st)
{
    const dion_dev_t *d = &c->dev;
    if (c->index >= d->num_contexts || !d->trace.heads) return;
    uint64_t end = dion__time_ns();
    uint64_t n = dion__counter_add(&d->trace.heads[c->index], 1);
    if (n >= d->trace.capacity) return;
    dion_trace_event_t *e = &d->trace.events[(uint64_t)c->index * d->trace.capacity + n];
    e->start_ns = t0 ? t0 : end;
    e->end_ns = end;
    e->bytes = bytes;
    e->value = value;
    e->observed = observed;
    e->op = (uint16_t)op;
    e->cmp = (uint16_t)cmp;
    e->peer = peer;
    e->sig = sig;
    e->status = (uint32_t)st;
    e->block = dion__block_index();
    e->thread = dion__block_thread();
}

/* The hook the device calls use: DION__TRACE(&c, t0, op, peer, sig, bytes, value, observed, cmp, status). */
#define DION__TRACE(c, ...)                                                                                  \
    do {                                                                                                     \
        if (dion__trace_on(&(c)->dev)) dion__trace_op((c), __VA_ARGS__);                                     \
    } while (0)

#endif /* DION_DEVICE_TRACE_CUH */
