/* The gdaki backend's device half: GPU threads (CPU threads in CPU mode) write mlx5 WQEs into the QP of
 * (context, peer), publish them with the doorbell record and the doorbell, and poll the collapsed CQ. The NIC
 * is a ConnectX through DEVX or the softnic model (transports/gdaki/softnic/); device code cannot tell them
 * apart. Descriptors: device/gdaki_proto.cuh; WQE and CQE bytes: device/mlx5.cuh; protocol: docs/gdaki.md.
 *
 * Posting (one work request or two per calling thread; dion__gdaki_post_resv):
 *  1. reserve: the lanes of a warp that call together for one QP form a group and take their WQEBBs with
 *     one atomic (dion__mlx5_reserve); every later step names the group's mask explicitly, so the group
 *     stays together by synchronizing (on sm_70 and later nothing else keeps a warp's lanes together);
 *  2. the group waits as one until the NIC has completed what used its slots one lap ago and the fetched
 *     values there were read: every lane votes, only the first lane polls and decides an exit;
 *  3. every lane builds its own WQEs in parallel;
 *  4. the group synchronizes, and its first lane fences (the WQE bytes reach the NIC's memory first), marks
 *     the group's range written, and publishes: whoever takes the QP's doorbell lock (a try-lock: nobody
 *     waits for it) publishes every marked range that follows ready_head, in reservation order: one
 *     doorbell record, one doorbell, ready_head moved on. After unlocking it looks once more, so ranges
 *     marked while the lock was held are not left behind; and a waiter that finds marked ranges at
 *     ready_head with the lock free publishes them itself, so a holder descheduled before that last look
 *     stalls nobody.
 * A waiter polls the CQ only when no other waiter of the QP is polling it (the others read cons_idx).
 * Completions are selective: a WQE asks for a CQE only when its caller waits for it (get, fetching atomics,
 * quiet's NOP) or when it covers a multiple of a quarter ring (so that slot reuse never waits on a WQE that
 * nobody will report). The CQ is collapsed: the NIC writes
 * every CQE to entry 0, and the WQE index there is the completion watermark. dion_fence sets the NIC's fence
 * flag on the next WQE of each QP of the context; quiet polls the CQ (posting a signaled NOP when the latest
 * WQE asked for no CQE). An error CQE latches the QP's error (status and decoded syndrome); every later wait
 * returns it and the caller writes an error record naming the QP, the peer and the syndrome. Every wait has
 * the handle's timeout. */
#ifndef DION_DEVICE_GDAKI_CUH
#define DION_DEVICE_GDAKI_CUH

#include "dion/device/arch.cuh"
#include "dion/device/gdaki_proto.cuh"
#include "dion/device/mlx5.cuh"

/* Largest transfer one WQE carries (DOCA splits at 1 GiB; byte_count's bit 31 is the inline flag). */
#define DION__GDAKI_MAX_MSG (1ull << 30)
/* Inline WRITE up to this many bytes (and the QP's max_inline): the WQE stays one WQEBB. */
#define DION__GDAKI_INLINE_MAX 28u

/* Work request kinds. */
enum {
    DION__GDAKI_WR_WRITE = 0,
    DION__GDAKI_WR_WRITE_INLINE,
    DION__GDAKI_WR_READ,
    DION__GDAKI_WR_FETCH_ADD, /* also signal ADD */
    DION__GDAKI_WR_SET,       /* signal SET: masked compare-swap that always swaps */
    DION__GDAKI_WR_CSWAP,
    DION__GDAKI_WR_NOP
};

typedef struct {
    uint32_t kind;
    uint32_t len; /* WRITE / READ / inline bytes */
    uint64_t raddr;
    uint32_t rkey;
    uint32_t lkey;
    uint64_t laddr;
    const void *inl;  /* inline payload */
    uint64_t operand; /* add / swap / SET value */
    uint64_t compare; /* CSWAP */
    uint32_t cqe;     /* the caller waits for this WQE: ask for a CQE */
    uint32_t result;  /* the caller reads the old value from scratch: the slot stays taken until it did */
} dion__gdaki_wr_t;

/* ---- memory helpers the 64-bit ones of arch.cuh lack ---- */

DION_HD uint32_t dion__gdaki_ld32(const void *p, uint32_t scope)
{
#if DION__GPU
    uint32_t v;
    if (scope == DION_SCOPE_GPU)
        asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else
        asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
#else
    (void)scope;
    return __atomic_load_n((const uint32_t *)p, __ATOMIC_RELAXED);
#endif
}

DION_HD void dion__gdaki_st32(uint32_t *p, uint32_t v, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("st.relaxed.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
    else
        asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
    (void)scope;
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

/* One atomic maximum; on the GPU the lanes of a warp that all raise last_wqe (every lane marks for itself)
 * take one instruction, where a CAS loop would take up to 32 rounds. */
DION_HD void dion__gdaki_atom_max(uint64_t *p, uint64_t v, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("red.relaxed.gpu.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else
        asm volatile("red.relaxed.sys.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
    uint64_t cur = dion__ld_relaxed(p, scope);
    while (cur < v) {
        uint64_t seen = dion__atom_cas(p, cur, v, scope);
        if (seen == cur) break;
        cur = seen;
    }
#endif
}

/* Scope of the queue memory the NIC reads and writes; the counters stay in the posting threads' memory. */
DION_HD uint32_t dion__gdaki_qscope(const dion_gdaki_qp_dev_t *q)
{
    return (q->flags & DION_GDAKI_QP_HOSTMEM) ? DION_SCOPE_SYS : DION_SCOPE_GPU;
}

#define DION__GDAKI_SSCOPE DION_SCOPE_GPU

/* A sequentially consistent fence: the doorbell lock's hand-over needs store-load order (a lane's mark
 * before its try-lock, the holder's unlock before its last look at the marks). */
DION_HD void dion__gdaki_fence_sc(void)
{
#if DION__GPU
    asm volatile("fence.sc.gpu;" ::: "memory");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* Latches the QP's first error: status s with err_info (syndrome...). */
DION_HD void dion__gdaki_fail(const dion_gdaki_qp_dev_t *q, dion_status_t s, uint64_t info)
{
    if (dion__atom_cas(&q->st->err, 0, (uint64_t)s, DION__GDAKI_SSCOPE) == 0)
        dion__st_release(&q->st->err_info, info, DION__GDAKI_SSCOPE);
}

/* ---- publication ---- */

/* The doorbell lock's holder, with ready_head at h: publishes [h, e) and every marked range that follows e
 * (one doorbell record, one doorbell; e == h: only what is marked), moves ready_head on, unlocks, and looks
 * once more. m: marks[e] as read at most as early as the caller saw ready_head at h (a mark is written once
 * per lap and a mark at most its position is from an earlier lap, so an early read is at worst stale: the
 * last look, or the group that marked, publishes what it missed). The marks are read relaxed: the system
 * fence before the record makes them acquires. Returns nonzero when a mark waits at the new ready_head after
 * the unlock (the caller tries the lock again). */
DION_HD int dion__gdaki_publish_held(const dion_gdaki_qp_dev_t *q, uint64_t h, uint64_t e, uint64_t m)
{
    dion_gdaki_qp_state_t *st = q->st;
    uint32_t qs = dion__gdaki_qscope(q);
    while (m > e) { /* at most one lap */
        e = m;
        m = dion__ld_relaxed(&q->marks[e & q->wq_mask], DION__GDAKI_SSCOPE);
    }
    if (e != h) {
        /* the WQEs' bytes (written before their marks, or by this group) before the record */
        dion__fence(qs);
        dion__gdaki_st32(q->dbrec, dion__mlx5_dbr_sq_value((uint16_t)e), qs);
        /* the record before the doorbell: the release at system scope orders it (a fence before it would be a
         * second system fence per doorbell) */
        dion__st_release(q->db, dion__mlx5_db_value((uint16_t)e, q->qpn), DION_SCOPE_SYS);
        /* relaxed: whoever acts on ready_head takes the lock first, and the unlock's release covers it */
        dion__st_relaxed(&st->ready_head, e, DION__GDAKI_SSCOPE);
    }
    dion__st_release(&st->db_lock, 0, DION__GDAKI_SSCOPE);
    dion__gdaki_fence_sc();
    /* the mark at e, where this holder left ready_head (one load, not two: when another holder has moved it
     * on since, the caller's next round finds nothing to do) */
    return dion__ld_acquire(&q->marks[e & q->wq_mask], DION__GDAKI_SSCOPE) > e;
}

/* Publishes every written group's WQEs that follow ready_head, when the doorbell lock is free (else its
 * holder does it). The holder writes the doorbell record, then the doorbell (the NIC reads the record first),
 * then moves ready_head; after unlocking it looks again, and goes on while a mark is waiting at ready_head. A
 * group marks before it tries the lock, and the holder unlocks before it looks: with the fences between, one
 * of the two sees the other, so no written WQE stays unpublished while both run. When the holder is
 * descheduled between its unlock and its last look, waiters finish the publication (dion__gdaki_progress). */
DION_HD void dion__gdaki_publish(const dion_gdaki_qp_dev_t *q)
{
    dion_gdaki_qp_state_t *st = q->st;
    for (;;) {
        dion__gdaki_fence_sc();
        if (dion__atom_cas(&st->db_lock, 0, 1, DION__GDAKI_SSCOPE) != 0) return;
        dion__gdaki_fence_sc();
        uint64_t h = dion__ld_relaxed(&st->ready_head, DION__GDAKI_SSCOPE);
        uint64_t m = dion__ld_relaxed(&q->marks[h & q->wq_mask], DION__GDAKI_SSCOPE);
        if (!dion__gdaki_publish_held(q, h, h, m)) return;
    }
}

/* DION_GDAKI_LOCK_FIRST (default 1): a group whose range starts at ready_head tries the doorbell lock before
 * it marks; holding it, it publishes its range (and the marked ones after it) without a mark, one system
 * fence and two sequentially consistent fences fewer (H200: 5.2-5.4 M WQEs/s from one warp against 4.2-4.3
 * marking first). 0: every group marks, then publishes. */
#ifndef DION_GDAKI_LOCK_FIRST
#define DION_GDAKI_LOCK_FIRST 1
#endif

/* The group's first lane, after the group's sync: publishes the group's written range [base, end), or marks
 * it and leaves it to the doorbell lock's holder. */
DION_HD void dion__gdaki_publish_range(const dion_gdaki_qp_dev_t *q, uint64_t base, uint64_t end)
{
#if DION_GDAKI_LOCK_FIRST
    dion_gdaki_qp_state_t *st = q->st;
    /* ready_head cannot pass base before this range is published, so reading base means it is there. Both
     * loads are issued together; the system fence before the record makes them acquires (the previous
     * holder's record before this one: the record never goes back). */
    uint64_t h = dion__ld_relaxed(&st->ready_head, DION__GDAKI_SSCOPE);
    uint64_t m = dion__ld_relaxed(&q->marks[end & q->wq_mask], DION__GDAKI_SSCOPE);
    if (h == base && dion__atom_cas(&st->db_lock, 0, 1, DION__GDAKI_SSCOPE) == 0) {
        if (dion__gdaki_publish_held(q, base, end, m)) dion__gdaki_publish(q);
        return;
    }
#endif
    dion__fence(dion__gdaki_qscope(q)); /* cumulative after the sync: every lane's WQE bytes first */
    dion__st_release(&q->marks[base & q->wq_mask], end, DION__GDAKI_SSCOPE);
    dion__gdaki_publish(q);
}

/* Back-off of gdaki's waits. On the GPU a short sleep from the first turn on lets the scheduler run the
 * warp's other paths (the lane that owns the slot at ready_head may be one of them), and the cap keeps a
 * waiter's reaction within about half a microsecond. */
DION_HD void dion__gdaki_backoff(uint32_t polls)
{
#if DION__GPU
    __nanosleep(polls < 32 ? 32 : polls < 1024 ? 128 : 512);
#else
    dion__cpu_pause(polls);
#endif
}

/* ---- completions ---- */

/* The 64-bit completion count a CQE's 16-bit WQE index lo (1 + the index) stands for, given cons, a value
 * of cons_idx read before the CQE: the CQE is at least as new as the one cons came from (cons_idx moves
 * only after its CQE was read), and no WQE past cons_idx + ring is ever published, so lo lies in
 * [cons, cons + ring]. Further ahead only when the reader stalled while others moved cons_idx on: then the
 * value is not used (returns cons; the next poll reads afresh). Never above the true count. (Lifting below
 * ready_head instead is wrong while a publisher has rung the doorbell but not yet moved ready_head: a CQE
 * ahead of it lifts to about 2^64 - 65536, and every later wait would pass at once.) */
DION_HD uint64_t dion__gdaki_lift(uint64_t cons, uint16_t lo, uint32_t wq_mask)
{
    uint16_t d = (uint16_t)(lo - (uint16_t)cons);
    return d <= wq_mask + 1u ? cons + d : cons;
}

/* Reads the collapsed CQE and moves cons_idx on (or latches the error it reports). Returns cons_idx. */
DION_HD uint64_t dion__gdaki_poll_cq(const dion_gdaki_qp_dev_t *q)
{
    dion_gdaki_qp_state_t *st = q->st;
    uint32_t qs = dion__gdaki_qscope(q);
    uint64_t cons = dion__ld_acquire(&st->cons_idx, DION__GDAKI_SSCOPE); /* before the CQE */
    /* one load of 0x3C..0x3F: wqe_counter and op_own of the same write */
    dion__mlx5_cqe_tail_t t = dion__mlx5_cqe_tail(dion__gdaki_ld32(q->cq + 0x3C, qs));
    uint32_t op = dion__mlx5_cqe_opcode(t.op_own);
    if (op == DION__MLX5_CQE_INVALID) return cons;
    int err = op == DION__MLX5_CQE_REQ_ERR || op == DION__MLX5_CQE_RESP_ERR;
    uint64_t c = dion__gdaki_lift(cons, (uint16_t)(t.wqe_counter + 1u), q->wq_mask);
    if (!err && c <= cons) return cons; /* nothing new (the collapsed CQ keeps its latest CQE): no fence */
    /* acquire: the CQE's other bytes, and a READ's or atomic's data, after its tail; release: the tail
     * read before the cons_idx update below */
    dion__fence(qs);
    if (err) {
        uint8_t cqe[64];
        for (int i = 0; i < 64; i += 4) {
            uint32_t w = dion__gdaki_ld32(q->cq + i, qs);
            memcpy(cqe + i, &w, 4);
        }
        dion__mlx5_cqe_info_t e = dion__mlx5_cqe_decode(cqe);
        dion_status_t s = dion__mlx5_syndrome_status(e.syndrome, NULL);
        dion__gdaki_fail(q, s,
                         (uint64_t)e.syndrome | ((uint64_t)e.vendor_syndrome << 8) |
                             ((uint64_t)e.wqe_opcode << 16) | ((uint64_t)e.wqe_counter << 32));
        return dion__ld_relaxed(&st->cons_idx, DION__GDAKI_SSCOPE);
    }
    dion__gdaki_atom_max(&st->cons_idx, c, DION__GDAKI_SSCOPE);
    return dion__ld_relaxed(&st->cons_idx, DION__GDAKI_SSCOPE);
}

/* One turn of a wait for cons_idx >= target. The CQ (host or NIC memory, far away) is read by one waiter
 * of the QP at a time; the others read cons_idx, and one that found the poller busy for 64 turns in a row
 * polls anyway (polling is safe beside another poller: cons_idx only rises), so a descheduled poller holds
 * nobody up. When target is not published yet, marks are waiting at ready_head and nobody holds the
 * doorbell lock, the waiter publishes them itself: their group may have left them to a lock holder that
 * was descheduled between its unlock and its last look. *busy: the caller's count of busy turns (start 0).
 * Returns cons_idx. */
DION_HD uint64_t dion__gdaki_progress(const dion_gdaki_qp_dev_t *q, uint64_t target, uint32_t *busy)
{
    dion_gdaki_qp_state_t *st = q->st;
    uint64_t c;
    if (*busy >= 64) {
        c = dion__gdaki_poll_cq(q);
        *busy = 0;
    } else if (dion__ld_relaxed(&st->poller, DION__GDAKI_SSCOPE) == 0 &&
               dion__atom_cas(&st->poller, 0, 1, DION__GDAKI_SSCOPE) == 0) {
        c = dion__gdaki_poll_cq(q);
        dion__st_release(&st->poller, 0, DION__GDAKI_SSCOPE);
        *busy = 0;
    } else {
        c = dion__ld_acquire(&st->cons_idx, DION__GDAKI_SSCOPE);
        ++*busy;
    }
    if (c < target) {
        uint64_t h = dion__ld_relaxed(&st->ready_head, DION__GDAKI_SSCOPE);
        if (h < target && dion__ld_relaxed(&st->db_lock, DION__GDAKI_SSCOPE) == 0 &&
            dion__ld_acquire(&q->marks[h & q->wq_mask], DION__GDAKI_SSCOPE) > h)
            dion__gdaki_publish(q);
    }
    return c;
}

/* The exits of a wait, checked by its polling thread every few turns: the QP's latched error, the comm's
 * abort (abort_word), the timeout (timeout_ns after *start, which the first check sets; 0: never). */
DION_HD dion_status_t dion__gdaki_wait_exit(const dion_gdaki_qp_dev_t *q, uint32_t polls,
                                            const uint64_t *abort_word, uint64_t timeout_ns, uint64_t *start)
{
    uint64_t e = dion__ld_relaxed(&q->st->err, DION__GDAKI_SSCOPE);
    if (e) return (dion_status_t)e;
    if ((polls & 15) != 15) return DION_SUCCESS;
    uint64_t ab = abort_word ? dion__ld_relaxed(abort_word, DION_SCOPE_SYS) : 0;
    if (ab) return (dion_status_t)ab;
    uint64_t now = dion__time_ns();
    if (*start == 0) *start = now;
    if (timeout_ns && now - *start > timeout_ns) return DION_ERR_TIMEOUT;
    return DION_SUCCESS;
}

/* Polls until cons_idx >= target, the QP failed, the comm was aborted (abort_word), or timeout_ns passed (0:
 * never). *seen gets the last cons_idx. */
DION_HD dion_status_t dion__gdaki_wait_cons(const dion_gdaki_qp_dev_t *q, uint64_t target,
                                            const uint64_t *abort_word, uint64_t timeout_ns, uint64_t *seen)
{
    uint64_t start = 0, c = 0;
    uint32_t busy = 0;
    dion_status_t s = DION_SUCCESS;
    for (uint32_t polls = 0;; polls++) {
        c = dion__gdaki_progress(q, target, &busy);
        if (c >= target) break;
        s = dion__gdaki_wait_exit(q, polls, abort_word, timeout_ns, &start);
        if (s != DION_SUCCESS) break;
        dion__gdaki_backoff(polls);
    }
    *seen = c;
    return s;
}

/* Polls until the fetched value of the WQE one lap before position p was read (pend clear), with the exits
 * of dion__gdaki_wait_cons. Its reader needs nothing from this thread: it only waits for its own CQE. */
DION_HD dion_status_t dion__gdaki_wait_read(const dion_gdaki_qp_dev_t *q, uint64_t p,
                                            const uint64_t *abort_word, uint64_t timeout_ns)
{
    uint64_t start = 0;
    const uint64_t *w = &q->pend[p & q->wq_mask];
    for (uint32_t polls = 0; dion__ld_acquire(w, DION__GDAKI_SSCOPE) != 0; polls++) {
        dion_status_t s = dion__gdaki_wait_exit(q, polls, abort_word, timeout_ns, &start);
        if (s != DION_SUCCESS) return s;
        dion__gdaki_backoff(polls);
    }
    return DION_SUCCESS;
}

/* ---- building ---- */

DION_HD uint32_t dion__gdaki_wr_wqebbs(const dion__gdaki_wr_t *w)
{
    switch (w->kind) {
    case DION__GDAKI_WR_WRITE_INLINE:
        return dion__mlx5_wqebbs(dion__mlx5_inline_ds(w->len));
    case DION__GDAKI_WR_SET:
        return dion__mlx5_wqebbs(DION__MLX5_DS_MASKED64);
    default:
        return 1;
    }
}

/* Whether a WQE on [start, start+n) must ask for a CQE so that slot reuse can progress: it covers a multiple
 * of a quarter ring. */
DION_HD int dion__gdaki_flow_cqe(const dion_gdaki_qp_dev_t *q, uint64_t start, uint32_t n)
{
    uint64_t quarter = ((uint64_t)q->wq_mask + 1) >> 2;
    uint64_t next = (start + quarter - 1) & ~(quarter - 1); /* first multiple at or after start */
    return next < start + n;
}

DION_HD void dion__gdaki_build(const dion_gdaki_qp_dev_t *q, uint64_t pos, const dion__gdaki_wr_t *w,
                               uint8_t fm_ce_se)
{
    dion__mlx5_sq_t sq;
    sq.buf = q->sq;
    sq.mask = q->wq_mask;
    sq.qpn = q->qpn;
    uint16_t idx = (uint16_t)pos;
    /* atomics return the old value into the scratch word of their slot: unique while the WQE is outstanding
     */
    uint64_t res = q->scratch_addr + (uint64_t)(pos & q->wq_mask) * 8u;
    switch (w->kind) {
    case DION__GDAKI_WR_WRITE:
        dion__mlx5_wqe_write(&sq, idx, fm_ce_se, w->raddr, w->rkey, w->laddr, w->lkey, w->len);
        break;
    case DION__GDAKI_WR_WRITE_INLINE:
        dion__mlx5_wqe_write_inline(&sq, idx, fm_ce_se, w->raddr, w->rkey, w->inl, w->len);
        break;
    case DION__GDAKI_WR_READ:
        dion__mlx5_wqe_read(&sq, idx, fm_ce_se, w->raddr, w->rkey, w->laddr, w->lkey, w->len);
        break;
    case DION__GDAKI_WR_FETCH_ADD:
        dion__mlx5_wqe_fetch_add(&sq, idx, fm_ce_se, w->raddr, w->rkey, w->operand, res, q->scratch_lkey);
        break;
    case DION__GDAKI_WR_SET:
        dion__mlx5_wqe_set(&sq, idx, fm_ce_se, w->raddr, w->rkey, w->operand, res, q->scratch_lkey);
        break;
    case DION__GDAKI_WR_CSWAP:
        dion__mlx5_wqe_compare_swap(&sq, idx, fm_ce_se, w->raddr, w->rkey, w->operand, w->compare, res,
                                    q->scratch_lkey);
        break;
    default:
        dion__mlx5_wqe_nop(&sq, idx, fm_ce_se);
        break;
    }
}

/* ---- posting ---- */

/* Whether this lane's slots [slot, slot + n) are free for a group that needs cons_idx >= need: the WQEs of
 * one lap ago are complete (acquire: the pend words after it) and their fetched values were read. */
DION_HD int dion__gdaki_slots_free(const dion_gdaki_qp_dev_t *q, uint64_t slot, uint32_t n, uint64_t need)
{
    if (!need) return 1;
    if (dion__ld_acquire(&q->st->cons_idx, DION__GDAKI_SSCOPE) < need) return 0;
    for (uint32_t k = 0; k < n; k++)
        if (dion__ld_acquire(&q->pend[(slot + k) & q->wq_mask], DION__GDAKI_SSCOPE) != 0) return 0;
    return 1;
}

/* Posts nwr (1 or 2) work requests of the calling lane into its reservation r (its WQEBBs [r->slot, r->slot +
 * the WRs' WQEBBs)), in order; every lane of r's group calls it together. *start gets the 64-bit start of
 * this lane's last WQE (complete once cons_idx > *start). Returns the same status on every lane.
 *
 * The group stays together by construction (issue 9): it waits as one (every lane votes "my slots are
 * free" with __all_sync over the group's mask; only the first lane polls the CQ and decides an exit, and
 * its status reaches every lane), so no lane writes a slot, or sets a pend word, before every slot of the
 * group is free; then every lane builds its WQEs, the group synchronizes, and the first lane marks and
 * publishes the group's whole range once (one fence, one doorbell). The group synchronizes once more
 * before it returns, so the lane in the publication is never left to the scheduler's mercy among its
 * spinning lane mates. A failure to get the slots within the timeout fails the QP (the slots could not be
 * filled, so nothing after them may be published). Before (issue 9, H200): lanes decided on their own,
 * testing __activemask after writing; that is no convergence point on sm_70 and later, the warp split in
 * the waits, and each lane published alone (a system fence and a lock attempt per WQE), every later WQE
 * waiting on whichever split-off lane owned the slot at ready_head. */
DION_HD dion_status_t dion__gdaki_post_resv(const dion_gdaki_qp_dev_t *q, const dion__mlx5_resv_t *r,
                                            const dion__gdaki_wr_t *wr, uint32_t nwr,
                                            const uint64_t *abort_word, uint64_t timeout_ns, uint64_t *start)
{
    dion_gdaki_qp_state_t *st = q->st;
    uint32_t n0 = dion__gdaki_wr_wqebbs(&wr[0]);
    uint32_t n1 = nwr > 1 ? dion__gdaki_wr_wqebbs(&wr[1]) : 0, n = n0 + n1;
    uint64_t nwq = (uint64_t)q->wq_mask + 1;
    int first = dion__resv_first(r);
    /* 2. one wait for the whole group: the slots of one lap ago complete and their fetched values read */
    uint64_t need = r->base + r->total > nwq ? r->base + r->total - nwq : 0, t0 = 0;
    uint32_t busy = 0;
    uint64_t fw = 0;
    for (uint32_t polls = 0;; polls++) {
        /* the first lane's loads of the error and the fence request first: they overlap the others' loads */
        uint64_t s = first ? dion__ld_relaxed(&st->err, DION__GDAKI_SSCOPE) : 0;
        fw = first ? dion__ld_relaxed(&st->fence, DION__GDAKI_SSCOPE) : 0;
        int ok = dion__resv_all(r, dion__gdaki_slots_free(q, r->slot, n, need));
        if (first) {
            if (!s && !ok) {
                (void)dion__gdaki_progress(q, need, &busy);
                s = (uint64_t)dion__gdaki_wait_exit(q, polls, abort_word, timeout_ns, &t0);
                if (s) dion__gdaki_fail(q, (dion_status_t)s, 0);
            }
        }
        s = dion__resv_bcast(r, s);
        if (s) return (dion_status_t)s;
        if (ok) break;
        dion__gdaki_backoff(polls);
    }
    uint8_t fence = 0;
    if (fw && dion__atom_cas(&st->fence, 1, 0, DION__GDAKI_SSCOPE) == 1) fence = DION__MLX5_CTRL_FM_FENCE;
    /* 3. build */
    uint64_t pos = r->slot, last = r->slot, sig = 0;
    for (uint32_t i = 0; i < nwr; i++) {
        uint32_t ni = i ? n1 : n0;
        int cqe = wr[i].cqe || dion__gdaki_flow_cqe(q, pos, ni);
        if (wr[i].result) dion__st_relaxed(&q->pend[pos & q->wq_mask], pos + 1, DION__GDAKI_SSCOPE);
        dion__gdaki_build(q, pos, &wr[i],
                          (uint8_t)((i == 0 ? fence : 0) | (cqe ? DION__MLX5_CTRL_CQ_UPDATE : 0)));
        if (cqe) sig = pos + 1;
        last = pos;
        pos += ni;
    }
    if (start) *start = last;
    /* 4. one mark and one publication for the group, by its first lane, after every lane wrote */
    uint32_t lw = dion__resv_max(r, (uint32_t)(last + 1u - r->base));
    uint32_t ls = dion__resv_max(r, sig ? (uint32_t)(sig - r->base) : 0u);
    dion__resv_sync(r); /* the lanes' WQE bytes before the first lane's fence and mark */
    if (first) {
        dion__gdaki_atom_max(&st->last_wqe, r->base + lw, DION__GDAKI_SSCOPE);
        if (ls) dion__gdaki_atom_max(&st->last_sig, r->base + ls, DION__GDAKI_SSCOPE);
        dion__gdaki_publish_range(q, r->base, r->base + r->total);
    }
    dion__resv_sync(r);
    return DION_SUCCESS;
}

/* Posts nwr (1 or 2) work requests of the calling thread, in order (dion__gdaki_post_resv); on the GPU the
 * lanes that call together for the same QP share one reservation (one atomic) and one doorbell. */
DION_HD dion_status_t dion__gdaki_post(const dion_gdaki_qp_dev_t *q, const dion__gdaki_wr_t *wr, uint32_t nwr,
                                       const uint64_t *abort_word, uint64_t timeout_ns, uint64_t *start)
{
    uint32_t n = dion__gdaki_wr_wqebbs(&wr[0]) + (nwr > 1 ? dion__gdaki_wr_wqebbs(&wr[1]) : 0);
    dion__mlx5_resv_t r = dion__mlx5_reserve(&q->st->resv_head, n, DION__GDAKI_SSCOPE);
    return dion__gdaki_post_resv(q, &r, wr, nwr, abort_word, timeout_ns, start);
}

/* Everything posted to q before this call is complete (a signaled NOP closes the batch when the latest WQE
 * asked for no CQE). */
DION_HD dion_status_t dion__gdaki_quiet(const dion_gdaki_qp_dev_t *q, const uint64_t *abort_word,
                                        uint64_t timeout_ns, uint64_t *seen)
{
    dion_gdaki_qp_state_t *st = q->st;
    uint64_t e = dion__ld_relaxed(&st->err, DION__GDAKI_SSCOPE);
    if (e) return (dion_status_t)e;
    uint64_t last = dion__ld_acquire(&st->last_wqe, DION__GDAKI_SSCOPE);
    if (last == 0 || dion__ld_relaxed(&st->cons_idx, DION__GDAKI_SSCOPE) >= last) return DION_SUCCESS;
    uint64_t target = last;
    if (dion__ld_relaxed(&st->last_sig, DION__GDAKI_SSCOPE) < last) {
        dion__gdaki_wr_t nop;
        memset(&nop, 0, sizeof nop);
        nop.kind = DION__GDAKI_WR_NOP;
        nop.cqe = 1;
        uint64_t at = 0;
        dion_status_t s = dion__gdaki_post(q, &nop, 1, abort_word, timeout_ns, &at);
        if (s != DION_SUCCESS) return s;
        target = at + 1;
    }
    return dion__gdaki_wait_cons(q, target, abort_word, timeout_ns, seen);
}

/* The old value an atomic posted with result = 1 that started at WQEBB pos returned (ok: it completed), and
 * the slot handed back for reuse (also when it failed). */
DION_HD uint64_t dion__gdaki_result(const dion_gdaki_qp_dev_t *q, uint64_t pos, int ok)
{
    uint64_t v = ok ? dion__ld_relaxed(&q->scratch[pos & q->wq_mask], dion__gdaki_qscope(q)) : 0;
    dion__st_release(&q->pend[pos & q->wq_mask], 0, DION__GDAKI_SSCOPE); /* after the read */
    return v;
}

#endif /* DION_DEVICE_GDAKI_CUH */
