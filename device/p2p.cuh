/* The p2p backend's device half: the peer's window and signal table are mapped into this address space
 * (CUDA IPC over NVLink or PCIe, the same GPU under MPS, or shared memory in CPU mode), so every operation is
 * a load, a store or an atomic by the calling threads. Completion is a fence at the peer's scope. */
#ifndef DION_DEVICE_P2P_CUH
#define DION_DEVICE_P2P_CUH

#include "dion/device/common.cuh"
#include "dion/device/tma.cuh"

/* Where the threads of a block put find the two window bases (a build may override it to compare):
 *  0: every thread selects them from the handle's slots with masks (parameter bank, no memory load, no
 * branch; about 190 instructions per base when the compiler cannot hoist them out of the caller's loop, and
 * every one of the block's warps pays them on the same 4 schedulers); 1: every thread loads them from the
 * window's table (one load per base, an L2 round trip after an acquire); 2: warps 0-3 (one per scheduler)
 * select with masks, the others load from the table; 3: every thread selects with branches on the slot and
 * the rank's bits (about 30 instructions per base). DION__BLOCK_BASES_FROM_TABLE=1 is the older name of 1.
 * Warp and thread puts always take 0 (a lone warp's latency favours independent loads over dependent
 * branches). */
#ifndef DION__BLOCK_BASES
#if defined(DION__BLOCK_BASES_FROM_TABLE) && DION__BLOCK_BASES_FROM_TABLE
#define DION__BLOCK_BASES 1
#else
/* 2 by measurement: H200, 2 ranks under MPS, 2026-11-30, the A/B step of perf/run_gpu.sh (docs/results/
 * 2026-11-30-s2-h200): put_signal block 8 B 1.63 µs (0: 1.57, 1: 1.71, 3: 2.02), 64 KiB 2.79 (0: 2.73,
 * 3: 5.41), put+quiet block 64 KiB 2.29 (0: 3.08, 1: 2.22, 3: 3.59): the only choice ahead of NVSHMEM on
 * all three rows. */
#define DION__BLOCK_BASES 2
#endif
#endif

/* rank's base of window w read from w's table. A window's table does not change while kernels may use the
 * window, so on the GPU the load is a read-only one that the compiler may hoist out of the caller's loop or
 * merge with another (an asm without side effects), as it does with the handle's parameters. */
DION_HD char *dion__win_base_table(dion_dwin_t w, int rank)
{
#if DION__GPU
    uint64_t v;
    asm("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(&dion__win_peer(w, rank)->base));
    return (char *)(uintptr_t)v;
#else
    return dion__win_peer(w, rank)->base;
#endif
}

/* Scope an operation on peer's part of window w needs: the peer's, widened to system for host memory. mode:
 * where the lookups read (DION__LK_*, device/common.cuh). */
DION_HD uint32_t dion__p2p_scope_at(const dion_ctx_t *c, int peer, dion_dwin_t w, int mode)
{
    return dion__peer_scope_at(&c->dev, peer, mode) |
           ((dion__win_flags_at(&c->dev, w, mode) & DION_WIN_HOST) ? DION_SCOPE_SYS : DION_SCOPE_GPU);
}

DION_HD uint32_t dion__p2p_scope(const dion_ctx_t *c, int peer, dion_dwin_t w)
{
    return dion__p2p_scope_at(c, peer, w, 0);
}

/* Whether a block's p2p copies keep the compiler from holding per-thread values across the caller's loop (a
 * candidate, off: perf/CMakeLists.txt p2p_bench_bns and _bns2, perf/run_gpu.sh step bns). In a kernel that
 * loops over a block put_signal and a wait, the compiler hoists the fast path's bases, the addresses each
 * thread derives from them for every element width and the general copy's inline selections out of the loop;
 * with 1024 threads (64 registers) it cannot hold them all and keeps some on the stack (perf/p2p_bench.cu
 * pingpong<3>: 136 bytes, ab_bench's DION block sends: 120-128; 48 each since 2026-12-02), and the wait's
 * acquire (CCTL.IVALL on sm_90) has just dropped the L1, so each reload before the copy is an L2 round trip.
 * 1: every block copy's two bases pass through an empty asm, so that what each thread derives from them is
 * computed in the call (a block's general copy reads the tables in every build since 2026-12-02,
 * DION__LK_GENERAL; before, only these variants did): those kernels keep nothing on the stack, and block
 * put_signal got 0.09-0.23 us faster on one H200, but block put + quiet 0.3-0.53 us slower (the asm holds the
 * bases in vector registers, so the compiler reselects them in every round instead of keeping them in uniform
 * ones). 2: the same for put_signal's copy alone, so put + quiet keeps the default's code (it got 0.04 us
 * faster). But either gives dion-perf's block put_signal kernel, which keeps nothing on the stack by default,
 * 24 bytes of its own loop state, and that row 1.2 us more per round (2026-12-01 22:13 and 22:28; nvcc 13.0,
 * sm_90; docs/results/2026-12-01-h200-s5): what a kernel reloads after its wait depends on the whole kernel,
 * so neither is the default. */
#ifndef DION__BLOCK_NOSPILL
#define DION__BLOCK_NOSPILL 0
#endif

/* Whether a block put's threads with no element of the copy leave before the peer's base is selected. Its
 * 8-way pick over the 4 slots is about 160 instructions a warp where the caller's loop does not hoist it, and
 * a block of 1024 threads issues 8 warps on each scheduler, so they cost what 8 times as many would cost one
 * warp: dion-perf's put + quiet by a block, whose loop keeps the pick inside, ran 238 instructions a warp per
 * round against 95 in p2p_bench's (ncu, H200, 2026-12-01), and took 2.14 us against 0.95. 1: the test on the
 * offsets and the windows' alignment flags (with every base 16-byte aligned, the addresses' alignment is the
 * offsets'); 2: only the threads past the last byte; 0: none. The early leave makes the pick conditional, so
 * a loop that hoisted it may stop doing so, and then the copying warp pays it: put_signal by a block lost
 * 0.15-0.2 us with 1 in both programs, so put_signal never leaves early; put + quiet by a block got 0.64-0.74
 * us faster in dion-perf and 0.05-0.10 slower in p2p_bench (perf/CMakeLists.txt p2p_bench_el0, _el2,
 * dion-perf-el0, -el2; docs/results/2026-12-01-h200-s6). */
#ifndef DION__BLOCK_EARLY
#define DION__BLOCK_EARLY 1
#endif

/* A block put on the fast path (DION__BLOCK_FAST, include/dion/dion_device.cuh): peer, this rank and both
 * windows have inline entries. Every warp of the block runs what comes before its copy and its barrier on the
 * same 4 schedulers, so this is kept to what a hand-written copy runs: both bases from the parameter bank
 * (no load, so a caller's loop computes them once), one alignment test on the addresses, and threads without
 * a 16-byte element leave before any of the copy's set-up. */
DION_HD void dion__p2p_put_block_inl(const dion_dev_t *d, dion_dwin_t dst, int peer, size_t dst_off,
                                     dion_dwin_t src, size_t src_off, size_t bytes, uint32_t r, uint32_t g,
                                     int opaque, int early)
{
    if (early == 1 && r != 0 && (size_t)r * 16 >= bytes &&
        ((size_t)r >= bytes ||
         (((dst_off | src_off | bytes) & 15) == 0 &&
          (dion__win_flags_inl(d, dst) & dion__win_flags_inl(d, src) & DION_WIN_ALIGN16))))
        return;
    if (early == 2 && r != 0 && (size_t)r >= bytes) return;
    char *to = dion__win_base_inl(d, dst, peer) + dst_off;
    const char *from = dion__win_self_inl(d, src) + src_off;
#if DION__GPU
    if (opaque) /* DION__BLOCK_NOSPILL: the bases may be hoisted, what derives from them stays in the call */
        asm volatile("" : "+l"(to), "+l"(from));
#else
    (void)opaque;
#endif
    if ((((uintptr_t)to | (uintptr_t)from | (uintptr_t)bytes) & 15) == 0) {
        if ((size_t)r < (bytes >> 4))
            dion__copy_body_16((dion__v16_t *)to, (const dion__v16_t *)from, bytes >> 4, r, g);
        return;
    }
    if (r != 0 && (size_t)r >= bytes)
        return; /* no element at any width (the leader copies heads and tails) */
    dion__copy(to, from, bytes, r, g);
}

/* mode: where the lookups read (DION__LK_*, a constant at every call; DION__LK_INLINE only when the caller
 * made sure that peer, this rank and both windows have inline entries). */
DION_HD void dion__p2p_put_at(const dion_dev_t *d, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                              size_t src_off, size_t bytes, uint32_t r, uint32_t g, dion__group_t kind,
                              int mode)
{
    /* Threads of a group that will have no part of the copy leave before selecting any base: with 16-byte
     * congruent offsets into windows whose bases are all 16-byte aligned, only the first ceil(bytes/16)
     * threads get a 16-byte element (the leader also copies the head and the tail). In a block the others
     * would otherwise spend 32 warps' issue slots on work nobody uses. */
#if DION__GPU && !DION__TMA
    if (kind == DION__BLOCK && mode == DION__LK_INLINE) { /* DION__BLOCK_FAST */
        dion__p2p_put_block_inl(d, dst, peer, dst_off, src, src_off, bytes, r, g, DION__BLOCK_NOSPILL == 1,
                                DION__BLOCK_EARLY);
        return;
    }
#endif
#if DION__GPU /* CPU mode splits copies into contiguous slices instead */
#if DION__TMA
    /* every thread of the block meets in the bulk-copy path's barriers: nobody may leave early there */
    const int may_leave = !(kind == DION__BLOCK && bytes >= 2 * (size_t)DION__TMA_CHUNK);
#else
    const int may_leave = 1;
#endif
    /* r >= bytes: no element at any width (only the leader copies heads and tails), decided with no load */
    if (may_leave && r != 0 && (size_t)r * 16 >= bytes &&
        ((size_t)r >= bytes ||
         (((dst_off ^ src_off) & 15) == 0 &&
          (dion__win_flags_at(d, dst, mode) & dion__win_flags_at(d, src, mode) & DION_WIN_ALIGN16))))
        return;
#endif
    char *to;
    const char *from;
#if DION__BLOCK_BASES == 1 || DION__BLOCK_BASES == 2
    /* A block's 32 warps would each run the selection from the handle's slots; one broadcast load of the
     * table costs them a single instruction each. */
    if (kind == DION__BLOCK && (DION__BLOCK_BASES == 1 || r >= 4 * DION__WARP_SIZE)) {
        to = dion__win_base_table(dst, peer) + dst_off;
        from = dion__win_base_table(src, d->rank) + src_off;
    } else
#endif
#if DION__BLOCK_BASES == 3
        if (kind == DION__BLOCK && mode == DION__LK_ANY) {
        to = dion__win_base_branchy(d, dst, peer) + dst_off;
        from = dion__win_base_branchy(d, src, d->rank) + src_off;
    } else
#endif
    {
        to = dion__win_base_at(d, dst, peer, mode) + dst_off;
        from = dion__win_self_at(d, src, mode) + src_off;
    }
#if DION__TMA
    /* large block copies between GPU windows go through the bulk engine when the kernel opted in */
    if (kind == DION__BLOCK &&
        !((dion__win_flags_at(d, dst, mode) | dion__win_flags_at(d, src, mode)) & DION_WIN_HOST) &&
        dion__copy_block_tma(to, from, bytes))
        return;
#else
    (void)kind;
#endif
    dion__copy(to, from, bytes, r, g);
}

DION_HD void dion__p2p_put(const dion_dev_t *d, dion_dwin_t dst, int peer, size_t dst_off, dion_dwin_t src,
                           size_t src_off, size_t bytes, uint32_t r, uint32_t g, dion__group_t kind)
{
    dion__p2p_put_at(d, dst, peer, dst_off, src, src_off, bytes, r, g, kind, 0);
}

DION_HD void dion__p2p_signal(const dion_ctx_t *c, int peer, uint32_t sig, dion_sig_op_t op, uint64_t value,
                              uint32_t scope, int mode)
{
    uint64_t *word = dion__peer_signals_at(&c->dev, peer, mode) + sig;
    /* Release: the target sees the new value only after everything this thread (and what it synchronized
     * with) wrote before. The relaxed forms order nothing and skip the fence. */
    switch (op) {
    case DION_SIG_SET:
        dion__st_release(word, value, scope);
        break;
    case DION_SIG_ADD:
        dion__red_add_release(word, value, scope);
        break;
    case DION_SIG_SET_RELAXED:
        dion__st_relaxed(word, value, scope);
        break;
    default:
        dion__atom_add(word, value, scope);
        break;
    }
}

DION_HD uint64_t dion__p2p_fetch_add(const dion_dev_t *d, dion_dwin_t w, int peer, size_t off, uint64_t value,
                                     uint32_t scope)
{
    return dion__atom_add((uint64_t *)(dion__win_base(d, w, peer) + off), value, scope);
}

DION_HD uint64_t dion__p2p_compare_swap(const dion_dev_t *d, dion_dwin_t w, int peer, size_t off,
                                        uint64_t expected, uint64_t desired, uint32_t scope)
{
    return dion__atom_cas((uint64_t *)(dion__win_base(d, w, peer) + off), expected, desired, scope);
}

/* Variants of the fences of quiet and put_signal (perf/CMakeLists.txt, p2p_bench_qsc / _pssc): NVSHMEM
 * completes p2p puts with fence.sc.sys (__threadfence_system: MEMBAR.SC.SYS) where DION's fence.acq_rel.sys
 * and st.release.sys give MEMBAR.ALL.SYS, and NVSHMEM's block put + quiet over NVLink was ahead of DION's
 * (2026-11-30 23:21). fence.sc is stronger than fence.acq_rel, and a fence followed by a strong store or
 * add is a release pattern in the PTX memory model, so neither changes what DION promises. Off: no gain on
 * one H200 (2026-12-01, docs/results/perf10-notes.md); the NVLink rows, where the question is, were not
 * measured. DION__QUIET_SC=1: quiet (and fence) with fence.sc at the handle's scope. DION__PS_SC=1:
 * put_signal's signal as fence.sc then a relaxed store or add, instead of a release one. */
#ifndef DION__QUIET_SC
#define DION__QUIET_SC 0
#endif
#ifndef DION__PS_SC
#define DION__PS_SC 0
#endif

DION_HD void dion__p2p_fence_sc(uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("fence.sc.gpu;" ::: "memory");
    else
        asm volatile("fence.sc.sys;" ::: "memory");
#else
    (void)scope;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* The signal of a put_signal, once the group's copy and sync are done: never seen before the data. */
DION_HD void dion__p2p_signal_after_data(uint64_t *word, uint64_t value, uint32_t add, uint32_t scope)
{
#if DION__PS_SC
    dion__p2p_fence_sc(scope);
    if (!add) dion__st_relaxed(word, value, scope);
#if DION__GPU
    else if (scope == DION_SCOPE_GPU)
        asm volatile("red.relaxed.gpu.add.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
    else
        asm volatile("red.relaxed.sys.add.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
#else
    else
        __atomic_fetch_add(word, value, __ATOMIC_RELAXED);
#endif
#else
    if (add)
        dion__red_add_release(word, value, scope);
    else
        dion__st_release(word, value, scope);
#endif
}

/* Stores are performed in order for every observer within scope once the fence completes: this is both
 * fence and quiet on p2p. */
DION_HD void dion__p2p_quiet(const dion_ctx_t *c)
{
#if DION__QUIET_SC
    dion__p2p_fence_sc(dion__dev_scope(&c->dev));
#else
    dion__fence(dion__dev_scope(&c->dev));
#endif
}

#endif /* DION_DEVICE_P2P_CUH */
