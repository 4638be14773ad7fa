/* The proxy backend's device half: posting commands into a context's ring, and waiting for the counters the
 * proxy thread writes back. Runs on GPU threads and, compiled as C11, on CPU threads (CPU mode).
 *
 * A post takes a ticket with one atomic on the ring's head (device memory), waits until the consumer has
 * freed the ticket's slot (the `consumed` counter in host memory, read through a device-side cache), writes
 * the body and publishes it with a release store of seq = ticket + 1. Tickets are unique and the consumer
 * reads positions in ticket order, so a command is taken exactly once, never half-written, and one thread's
 * commands run in the order it posted them.
 *
 * A producer that waits past the timeout returns DION_ERR_TIMEOUT (the caller writes the error record) and
 * leaves its ticket in the ring's abandon list: the consumer turns that slot into a NOP when it reaches it,
 * so nothing after it is held up or lost. These functions record nothing themselves; they return the status
 * and the value they last observed. */
#ifndef DION_DEVICE_PROXY_CUH
#define DION_DEVICE_PROXY_CUH

#include "dion/device/arch.cuh"
#include "dion/device/proxy_proto.cuh"

DION_HD uint64_t dion__proxy_nslots(const dion_proxy_ring_dev_t *r)
{
    return (uint64_t)r->mask + 1;
}

#define DION__PROXY_POLL_EXACT 1 /* wait for == target rather than >= */

/* Polls *word until it is >= target (DION__PROXY_POLL_EXACT: == target), the ring failed, the comm was
 * aborted, or timeout_ns passed (0: no limit). The successful load is an acquire. *observed gets the last
 * value read. For words few threads wait on (a local counter, a fetch's result in its own slot); the ring's
 * counters that many threads wait on go through dion__proxy_poll_shared. */
DION_HD dion_status_t dion__proxy_poll(const dion_proxy_ring_dev_t *r, const uint64_t *word, uint64_t target,
                                       uint32_t how, uint64_t timeout_ns, uint64_t *observed)
{
    int exact = (how & DION__PROXY_POLL_EXACT) != 0;
    uint64_t v = dion__ld_acquire(word, DION_SCOPE_SYS);
    uint64_t start = 0;
    for (uint32_t polls = 1; !(exact ? v == target : v >= target); polls++) {
        if ((polls & 127) == 0) { /* the clock and the failure words only now and then: they cost a read */
            uint64_t st = dion__ld_relaxed(&r->ctl->status, DION_SCOPE_SYS);
            if (!st && r->abort) st = dion__ld_relaxed(r->abort, DION_SCOPE_SYS);
            if (st) {
                *observed = v;
                return (dion_status_t)st;
            }
            uint64_t now = dion__time_ns();
            if (start == 0) start = now;
            if (timeout_ns && now - start > timeout_ns) {
                *observed = v;
                return DION_ERR_TIMEOUT;
            }
        }
        dion__backoff(polls);
        v = dion__ld_acquire(word, DION_SCOPE_SYS);
    }
    *observed = v;
    return DION_SUCCESS;
}

/* Completion waits read the host counter themselves for this many polls (a lone waiter sees its completion at
 * once), then share the reading (dion__proxy_poll_shared). */
#define DION__PROXY_DIRECT_POLLS 64u

/* Naps of a waiter that has not read the host word itself in this wait before it trusts the copy enough to
 * nap by its distance: the copy may be far behind the host word (nobody refreshes it while waits end in their
 * direct polls), and a nap by a stale distance overslept 65 us, which cost put bandwidth with host windows
 * 2.5 times at 1 MiB (H200 2026-12-01 20:24); within these short naps the thread that reads for all has
 * refreshed it. */
#define DION__PROXY_STALE_NAPS   4u
#define DION__PROXY_STALE_NAP_NS 256u

/* Polls the host counter *word until it is >= target, like dion__proxy_poll, but without every waiting thread
 * reading host memory: waiters read *cache (producer-side memory: GPU memory on a GPU), and one of them at a
 * time, the one that takes prod->poller, reads the host word, the ring's status and the abort word, raises
 * *cache to what it read (a release) and records a failure in prod->fail_cache. Each read of host memory
 * crosses PCIe; with a waiter in every warp of every SM (producers waiting for ring space, quiet after a
 * burst) those reads took the bus from everything else: staging copies took 0.3-1.3 ms instead of 7 us under
 * 132 polling blocks on the H200 (perf/copy_under_load), and staged message rates from all SMs fell to 2% of
 * the one-SM rate. Between polls a waiter naps in proportion to how far it is from its target. The successful
 * load is an acquire: the poller's acquire of the host word and its release into *cache carry the consumer's
 * release on to the waiter. */
DION_HD dion_status_t dion__proxy_poll_shared(const dion_proxy_ring_dev_t *r, const uint64_t *word,
                                              uint64_t *cache, uint64_t target, uint64_t timeout_ns,
                                              uint64_t *observed)
{
    dion_proxy_prod_t *pr = r->prod;
    uint64_t v = dion__ld_acquire(cache, r->scope), start = 0;
    uint32_t stale = DION__PROXY_STALE_NAPS;
    for (uint32_t polls = 1; v < target; polls++) {
        uint64_t f = dion__ld_relaxed(&pr->fail_cache, r->scope);
        if (f) {
            *observed = v;
            return (dion_status_t)f;
        }
        if (dion__ld_relaxed(&pr->poller, r->scope) == 0 &&
            dion__atom_cas(&pr->poller, 0, 1, r->scope) == 0) {
            uint64_t h = dion__ld_acquire(word, DION_SCOPE_SYS);
            uint64_t st = dion__ld_relaxed(&r->ctl->status, DION_SCOPE_SYS);
            if (!st && r->abort) st = dion__ld_relaxed(r->abort, DION_SCOPE_SYS);
            if (st) dion__st_relaxed(&pr->fail_cache, st, r->scope);
            if (h > v) dion__atom_max_release(cache, h, r->scope);
            dion__st_release(&pr->poller, 0, r->scope);
            stale = 0;
            if (h > v) v = h; /* acquired from the host word itself */
            if (v >= target) break;
            if (st) {
                *observed = v;
                return (dion_status_t)st;
            }
        }
        if ((polls & 7) == 0) {
            uint64_t now = dion__time_ns();
            if (start == 0) start = now;
            if (timeout_ns && now - start > timeout_ns) {
                *observed = v;
                return DION_ERR_TIMEOUT;
            }
        }
        const int fresh = stale == 0;
        if (stale) stale--;
#if DION__GPU
        /* the counter moves one command at a time (tens of ns each at the proxy): 32 ns per command to go */
        uint64_t d = target - v;
        __nanosleep(!fresh ? DION__PROXY_STALE_NAP_NS : d > 2048 ? 65536u : (unsigned)d * 32u);
#else
        dion__backoff(fresh && polls >= 16 ? polls + 4096 : polls); /* naps let the consumer's core drain */
#endif
        v = dion__ld_acquire(cache, r->scope);
    }
    *observed = v;
    return DION_SUCCESS;
}

/* Gives ticket t up: its slot becomes a NOP for the consumer. Beyond DION_PROXY_ABANDON_MAX abandoned tickets
 * the consumer could not tell a hole from a slow writer, so the ring is failed instead. */
DION_HD void dion__proxy_abandon(const dion_proxy_ring_dev_t *r, uint64_t t)
{
    uint64_t k = dion__atom_add(&r->prod->abandon_head, 1, r->scope);
    if (k < DION_PROXY_ABANDON_MAX) {
        dion__st_release(&r->abandon[k], t + 1, DION_SCOPE_SYS);
        dion__st_release(&r->ctl->abandoned, 1, DION_SCOPE_SYS);
    } else if (!dion__ld_relaxed(&r->ctl->status, DION_SCOPE_SYS)) { /* keep an earlier, truer reason */
        dion__st_release(&r->ctl->status, DION_ERR_TIMEOUT, DION_SCOPE_SYS);
    }
}

/* DION_PROXY_POST_SERIAL=1 (a build variant for A/B runs, perf/proxy_ring_bench_serial): the post reads the
 * cached `consumed` with an acquire after taking its ticket, two dependent round trips to L2, as before. */
#ifndef DION_PROXY_POST_SERIAL
#define DION_PROXY_POST_SERIAL 0
#endif

/* A value of the producers' cache of `consumed`, read before the ticket is taken (dion__proxy_post): issued
 * back to back, the load and the ticket atomic share one round trip to L2 instead of two. A value from
 * before the ticket is only older (consumed grows), so the slot test stays conservative. Ordering: the slot
 * stores that follow are issued only after the test on the loaded value (a branch on it; GPUs store
 * nothing speculatively, and these stores cross PCIe), and the consumer advanced `consumed` only after its
 * last read of the slot, so they cannot overtake that read. CPU mode keeps the acquire (free on x86). */
DION_HD uint64_t dion__proxy_tail_peek(const dion_proxy_ring_dev_t *r)
{
#if DION__GPU && !DION_PROXY_POST_SERIAL
    return dion__ld_relaxed(&r->prod->tail_cache, r->scope);
#else
    return dion__ld_acquire(&r->prod->tail_cache, r->scope);
#endif
}

/* Waits until ticket t's slot is free, given `cached` (dion__proxy_tail_peek, before or after the ticket).
 * The common case reads nothing more. */
DION_HD dion_status_t dion__proxy_wait_slot_from(const dion_proxy_ring_dev_t *r, uint64_t t, uint64_t cached,
                                                 uint64_t timeout_ns, uint64_t *observed)
{
    uint64_t n = dion__proxy_nslots(r);
    if (t - cached < n) return DION_SUCCESS; /* consumed never passes an unpublished ticket: cached <= t */
    /* acquire: pairs with the release below, so this thread's writes to the slot follow the consumer's reads
     * of the slot's previous command (which happened before it advanced consumed) */
    cached = dion__ld_acquire(&r->prod->tail_cache, r->scope);
    if (t - cached < n) return DION_SUCCESS;
    return dion__proxy_poll_shared(r, &r->ctl->consumed, &r->prod->tail_cache, t - n + 1, timeout_ns,
                                   observed);
}

/* Writes cmd (all but seq) into ticket t's slot, then publishes it. */
DION_HD void dion__proxy_fill(const dion_proxy_ring_dev_t *r, uint64_t t, const dion_proxy_cmd_t *cmd)
{
    dion_proxy_cmd_t *s = &r->slots[t & r->mask];
#if DION__GPU
    const uint64_t *src = (const uint64_t *)cmd;
    uint64_t *dst = (uint64_t *)s;
    dst[1] =
        (src[1] & ~(uint64_t)0xff) | (uint64_t)DION_PROXY_PROTO_VERSION; /* version: low byte of word 1 */
    /* three 16-byte stores: fewer PCIe writes than six 8-byte ones */
    for (int i = 2; i < 8; i += 2) *(ulonglong2 *)&dst[i] = make_ulonglong2(src[i], src[i + 1]);
#else
    memcpy((char *)s + 8, (const char *)cmd + 8, sizeof *s - 8);
    s->version = DION_PROXY_PROTO_VERSION;
#endif
    dion__st_release(&s->seq, t + 1, DION_SCOPE_SYS);
}

/* Posts cmd at ticket t, which the caller reserved, given a cached `consumed` (dion__proxy_tail_peek). On
 * failure the ticket is abandoned (never a hole). */
DION_HD dion_status_t dion__proxy_post_at_from(const dion_proxy_ring_dev_t *r, uint64_t t, uint64_t cached,
                                               const dion_proxy_cmd_t *cmd, uint64_t timeout_ns,
                                               uint64_t *observed)
{
    uint64_t seen = 0;
    dion_status_t st = dion__proxy_wait_slot_from(r, t, cached, timeout_ns, &seen);
    if (observed) *observed = seen;
    if (st != DION_SUCCESS) {
        dion__proxy_abandon(r, t);
        return st;
    }
    dion__proxy_fill(r, t, cmd);
    return DION_SUCCESS;
}

/* Posts one command. *ticket (may be NULL) gets its ring position; *observed (may be NULL) the consumed count
 * last read when it failed. */
DION_HD dion_status_t dion__proxy_post(const dion_proxy_ring_dev_t *r, const dion_proxy_cmd_t *cmd,
                                       uint64_t timeout_ns, uint64_t *ticket, uint64_t *observed)
{
#if DION_PROXY_POST_SERIAL
    uint64_t t = dion__atom_add(&r->prod->head, 1, r->scope);
    uint64_t cached = dion__proxy_tail_peek(r);
#else
    uint64_t cached = dion__proxy_tail_peek(r); /* before the ticket: both in flight at once */
    uint64_t t = dion__atom_add(&r->prod->head, 1, r->scope);
#endif
    if (ticket) *ticket = t;
    return dion__proxy_post_at_from(r, t, cached, cmd, timeout_ns, observed);
}

/* Every active lane of a warp posts its own command, with one atomic for the warp: the lowest active lane
 * takes as many tickets as there are active lanes, and lanes take them in lane order. In CPU mode each thread
 * takes its own ticket (same guarantees, no contiguity). */
DION_HD dion_status_t dion__proxy_post_warp(const dion_proxy_ring_dev_t *r, const dion_proxy_cmd_t *cmd,
                                            uint64_t timeout_ns, uint64_t *ticket, uint64_t *observed)
{
#if DION__GPU
    unsigned active = __activemask();
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    unsigned leader = (unsigned)__ffs(active) - 1;
    unsigned long long base = 0, cached = 0;
    if (lane == leader) {
#if DION_PROXY_POST_SERIAL
        base = dion__atom_add(&r->prod->head, (uint64_t)__popc(active), r->scope);
        cached = dion__proxy_tail_peek(r);
#else
        cached = dion__proxy_tail_peek(r); /* before the tickets: both in flight at once */
        base = dion__atom_add(&r->prod->head, (uint64_t)__popc(active), r->scope);
#endif
    }
    base = __shfl_sync(active, base, leader);
    cached = __shfl_sync(active, cached, leader);
    uint64_t t = base + (uint64_t)__popc(active & ((1u << lane) - 1u));
    if (ticket) *ticket = t;
    return dion__proxy_post_at_from(r, t, cached, cmd, timeout_ns, observed);
#else
    return dion__proxy_post(r, cmd, timeout_ns, ticket, observed);
#endif
}

/* Builders for the commands the device API posts. Fields that an op does not use stay zero. */
DION_HD dion_proxy_cmd_t dion__proxy_cmd(dion_proxy_op_t op, int peer)
{
    dion_proxy_cmd_t c;
    memset(&c, 0, sizeof c);
    c.version = DION_PROXY_PROTO_VERSION;
    c.op = (uint8_t)op;
    c.peer = peer;
    return c;
}

DION_HD dion_proxy_cmd_t dion__proxy_cmd_rma(dion_proxy_op_t op, int peer, uint32_t dst_win, uint64_t dst_off,
                                             uint32_t src_win, uint64_t src_off, uint64_t bytes)
{
    dion_proxy_cmd_t c = dion__proxy_cmd(op, peer);
    c.u.rma.dst_win = dst_win;
    c.u.rma.dst_off = dst_off;
    c.u.rma.src_win = src_win;
    c.u.rma.src_off = src_off;
    c.u.rma.bytes = bytes;
    return c;
}

/* Asks that local counter `counter` be incremented once the command's source may be reused. */
DION_HD void dion__proxy_cmd_count(dion_proxy_cmd_t *c, uint32_t counter)
{
    c->flags |= DION_PROXY_F_LOCAL_COUNT;
    c->u.rma.counter = (uint16_t)counter;
}

DION_HD void dion__proxy_cmd_signal(dion_proxy_cmd_t *c, uint32_t sig, uint32_t sig_op, uint64_t value)
{
    c->u.rma.sig = sig;
    c->u.rma.sig_op = (uint8_t)sig_op;
    c->u.rma.value = value;
}

/* Waits until every command up to and including ticket t is complete. */
DION_HD dion_status_t dion__proxy_wait_complete(const dion_proxy_ring_dev_t *r, uint64_t t,
                                                uint64_t timeout_ns, uint64_t *observed)
{
    uint64_t seen = dion__ld_acquire(&r->ctl->completed, DION_SCOPE_SYS);
    dion_status_t st = DION_SUCCESS;
    for (uint32_t polls = 1; seen < t + 1 && polls < DION__PROXY_DIRECT_POLLS; polls++)
        seen = dion__ld_acquire(&r->ctl->completed, DION_SCOPE_SYS);
    if (seen < t + 1)
        st = dion__proxy_poll_shared(r, &r->ctl->completed, &r->prod->done_cache, t + 1, timeout_ns, &seen);
    if (observed) *observed = seen & ~DION_PROXY_COMPLETED_FAILED;
    /* A failure the consumer found while completing still counts. It publishes it in the same word, so the
     * common case costs no second read of host memory (one PCIe round trip per quiet on a GPU). */
    if (st == DION_SUCCESS && (seen & DION_PROXY_COMPLETED_FAILED)) {
        uint64_t f = dion__ld_relaxed(&r->ctl->status, DION_SCOPE_SYS);
        st = f ? (dion_status_t)f : DION_ERR_INTERNAL;
    }
    return st;
}

/* quiet: a QUIET command, complete only when every earlier command of the ring is; waiting for it covers
 * every command any thread posted before this thread's ticket (a superset of "this thread's earlier
 * commands"). */
DION_HD dion_status_t dion__proxy_quiet(const dion_proxy_ring_dev_t *r, uint64_t timeout_ns,
                                        uint64_t *observed)
{
    dion_proxy_cmd_t c = dion__proxy_cmd(DION_PROXY_OP_QUIET, -1);
    uint64_t t = 0;
    dion_status_t st = dion__proxy_post(r, &c, timeout_ns, &t, observed);
    if (st != DION_SUCCESS) return st;
    return dion__proxy_wait_complete(r, t, timeout_ns, observed);
}

/* fence: commands after it reach each peer only after those before it (the engine keeps this; see
 * docs/backends/proxy.md). Returns at once, like dion_fence; a failure is a full ring or a failed one. */
DION_HD dion_status_t dion__proxy_fence(const dion_proxy_ring_dev_t *r, uint64_t timeout_ns,
                                        uint64_t *observed)
{
    dion_proxy_cmd_t c = dion__proxy_cmd(DION_PROXY_OP_FENCE, -1);
    return dion__proxy_post(r, &c, timeout_ns, NULL, observed);
}

/* Waits until local counter `counter` reaches value (sources of that many counted commands are reusable). */
DION_HD dion_status_t dion__proxy_wait_counter(const dion_proxy_ring_dev_t *r, uint32_t counter,
                                               uint64_t value, uint64_t timeout_ns, uint64_t *observed)
{
    uint64_t seen = 0;
    if (counter >= DION_PROXY_LCOUNTERS) return DION_ERR_INVALID_ARG;
    dion_status_t st = dion__proxy_poll(r, &r->ctl->lcount[counter], value, 0, timeout_ns, &seen);
    if (observed) *observed = seen;
    return st;
}

/* Fetching atomics: posts cmd (FETCH_ADD or COMPARE_SWAP), waits for the proxy to write the old value into
 * the slot, reads it, and then releases the slot (seq | DION_PROXY_SEQ_RELEASED); the consumer does not reuse
 * the slot before both the result is written and the slot released. On timeout the slot is released too: the
 * atomic may still be applied later, its result unread. */
DION_HD dion_status_t dion__proxy_fetch(const dion_proxy_ring_dev_t *r, const dion_proxy_cmd_t *cmd,
                                        uint64_t timeout_ns, uint64_t *result, uint64_t *observed)
{
    uint64_t t = 0, seen = 0;
    dion_status_t st = dion__proxy_post(r, cmd, timeout_ns, &t, observed);
    if (st != DION_SUCCESS) return st;
    dion_proxy_cmd_t *s = &r->slots[t & r->mask];
    st = dion__proxy_poll(r, &s->u.amo.result_tag, t + 1, DION__PROXY_POLL_EXACT, timeout_ns, &seen);
    if (st == DION_SUCCESS)
        *result = dion__ld_relaxed(&s->u.amo.result, DION_SCOPE_SYS);
    else if (observed)
        *observed = seen;
    /* release: the read of result comes before the consumer may hand the slot to another producer */
    dion__st_release(&s->seq, (t + 1) | DION_PROXY_SEQ_RELEASED, DION_SCOPE_SYS);
    return st;
}

#endif /* DION_DEVICE_PROXY_CUH */
