/* Packet puts: small messages whose flags travel inside the data (the LL protocol's idea), so the receiver
 * polls the data itself and neither side fences. Included by dion_device.cuh; docs/semantics.md, "Packet
 * puts", has the contract.
 *
 * Layout. A message of `bytes` payload bytes occupies DION_PACKET_SPAN(bytes) = 16 * ceil(bytes / 8) bytes
 * of the receiver's window, at a 16-byte aligned address: unit i carries payload bytes [8i, 8i+8) as two
 * 64-bit words, word j = payload bytes [8i+4j, 8i+4j+4) in its low half and the message's 32-bit sequence
 * number in its high half. Every word is written and read as one aligned 64-bit access, which is single-copy
 * atomic on the GPU (the 16-byte vector access is two such words as far as the PTX memory model goes), on
 * 64-bit CPUs, and for one RDMA write on the NICs DION targets: a reader that sees a word's flag equal to the
 * sequence it expects also sees that word's payload, with no fence, acquire or release on either side.
 *
 * Sequences. 32 bits, never 0 (a zeroed buffer holds no message): the next one is dion_packet_seq_next(s).
 * Each message to a region carries a sequence the region's previous message did not, so buffers are reused
 * without clearing; the receiver must have taken the previous message before the sender overwrites it (flow
 * control is the caller's: alternate two regions, or let the reply be the credit). */
#ifndef DION_DEVICE_PACKET_CUH
#define DION_DEVICE_PACKET_CUH

#include "dion/device/common.cuh"
#include "dion/device/p2p.cuh"
#include "dion/device/trace.cuh"

#define DION_PACKET_UNIT    16u /* bytes of window per unit */
#define DION_PACKET_PAYLOAD 8u  /* payload bytes per unit */
/* Bytes of window a message of `bytes` payload bytes occupies. */
#define DION_PACKET_SPAN(bytes)                                                                              \
    ((((uint64_t)(bytes) + DION_PACKET_PAYLOAD - 1) / DION_PACKET_PAYLOAD) * DION_PACKET_UNIT)

#if !DION__GPU
#ifdef __cplusplus
extern "C" {
#endif
/* CPU mode: 1 on every thread of the group when any of them passes v != 0 (all of them must call). */
DION_API int dion__cpu_group_any(int block, int v);
#ifdef __cplusplus
}
#endif
#endif

/* The next sequence number after s: wraps from 2^32 - 1 to 1, never 0. */
DION_HD uint32_t dion_packet_seq_next(uint32_t s)
{
    return s == 0xffffffffu ? 1u : s + 1u;
}

/* 1 on every thread of group g when any of them passes v != 0. */
DION_HD int dion__group_any(dion__group_t g, int v)
{
    if (g == DION__THREAD) return v != 0;
#if DION__GPU
    if (g == DION__BLOCK) return __syncthreads_or(v);
    uint32_t n = dion__group_size(DION__WARP);
    return __any_sync(n == 32 ? 0xffffffffu : (1u << n) - 1u, v);
#else
    return dion__cpu_group_any(g == DION__BLOCK, v);
#endif
}

/* ---- one unit: two 64-bit words, each written and read whole ---- */

/* The state space of the units' accesses on the GPU (a build may set it to compare, perf/CMakeLists.txt
 * p2p_bench_pkg): 0, generic addresses (LD/ST); 1, .global (LDG/STG, no generic-to-global resolution; every
 * window is global memory: device memory, CUDA IPC and VMM mappings, mapped host memory). */
#ifndef DION__PKT_GLOBAL
#define DION__PKT_GLOBAL 0
#endif
#if DION__PKT_GLOBAL
#define DION__PKT_SS ".global"
#else
#define DION__PKT_SS ""
#endif

DION_HD void dion__pkt_store(uint64_t *p, uint64_t w0, uint64_t w1, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("st.relaxed.gpu" DION__PKT_SS ".v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(w0), "l"(w1)
                     : "memory");
    else
        asm volatile("st.relaxed.sys" DION__PKT_SS ".v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(w0), "l"(w1)
                     : "memory");
#else
    (void)scope;
    __atomic_store_n(p, w0, __ATOMIC_RELAXED);
    __atomic_store_n(p + 1, w1, __ATOMIC_RELAXED);
#endif
}

DION_HD void dion__pkt_load(const uint64_t *p, uint64_t *w0, uint64_t *w1, uint32_t scope)
{
#if DION__GPU
    uint64_t a, b;
    if (scope == DION_SCOPE_GPU)
        asm volatile("ld.relaxed.gpu" DION__PKT_SS ".v2.u64 {%0, %1}, [%2];"
                     : "=l"(a), "=l"(b)
                     : "l"(p)
                     : "memory");
    else
        asm volatile("ld.relaxed.sys" DION__PKT_SS ".v2.u64 {%0, %1}, [%2];"
                     : "=l"(a), "=l"(b)
                     : "l"(p)
                     : "memory");
    *w0 = a, *w1 = b;
#else
    (void)scope;
    *w0 = __atomic_load_n(p, __ATOMIC_RELAXED);
    *w1 = __atomic_load_n(p + 1, __ATOMIC_RELAXED);
#endif
}

/* Payload bytes [8u, 8u+8) of src (n bytes in all) as two 32-bit halves; bytes past n are zero. */
DION_HD void dion__pkt_gather(const char *src, size_t n, size_t u, uint32_t *lo, uint32_t *hi)
{
    size_t at = u * DION_PACKET_PAYLOAD;
    if (at + 8 <= n && ((uintptr_t)src & 7) == 0) { /* one load for the unit */
        uint64_t v = *(const uint64_t *)(src + at);
        *lo = (uint32_t)v;
        *hi = (uint32_t)(v >> 32);
        return;
    }
    if (at + 8 <= n && ((uintptr_t)src & 3) == 0) {
        *lo = *(const uint32_t *)(src + at);
        *hi = *(const uint32_t *)(src + at + 4);
        return;
    }
    uint8_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < 8 && at + i < n; i++) b[i] = (uint8_t)src[at + i];
    *lo = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    *hi = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
}

DION_HD void dion__pkt_scatter(char *dst, size_t n, size_t u, uint32_t lo, uint32_t hi)
{
    size_t at = u * DION_PACKET_PAYLOAD;
    if (at + 8 <= n && ((uintptr_t)dst & 7) == 0) {
        *(uint64_t *)(dst + at) = (uint64_t)hi << 32 | lo;
        return;
    }
    if (at + 8 <= n && ((uintptr_t)dst & 3) == 0) {
        *(uint32_t *)(dst + at) = lo;
        *(uint32_t *)(dst + at + 4) = hi;
        return;
    }
    for (size_t i = 0; i < 8 && at + i < n; i++)
        dst[at + i] = (char)(uint8_t)((i < 4 ? lo >> (8 * i) : hi >> (8 * (i - 4))) & 0xff);
}

/* Packets need every 8-byte word to land whole: p2p and the calling rank itself give that; the network
 * backends will once their engines guarantee it for 8-byte RDMA writes (docs/semantics.md). Until then a call
 * for such a peer records DION_ERR_UNSUPPORTED and touches nothing. */
DION_HD int dion__pkt_peer_ok(const dion_ctx_t *c, int peer, dion_op_t op, int lead)
{
    uint32_t t = dion__peer_transport(&c->dev, peer);
    if (t == DION_TRANSPORT_P2P || t == DION_TRANSPORT_SELF) return 1;
    if (lead && t != DION_TRANSPORT_NONE) {
        dion__err_t e = dion__err(DION_ERR_UNSUPPORTED, op, peer);
        e.observed = t;
        dion__record(c, e);
    }
    return 0;
}

DION_HD int dion__pkt_check_seq(const dion_ctx_t *c, uint32_t seq, dion_op_t op, int peer, int lead)
{
    if (seq != 0) return 1;
    if (lead) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, op, peer);
        e.expected = 1; /* sequence numbers start at 1: 0 is what a cleared buffer holds */
        dion__record(c, e);
    }
    return 0;
}

/* Units a thread keeps in flight when it has several (a group smaller than the message): all their loads
 * are issued before their stores (put) or their checks (wait), so a thread's share of a message costs about
 * one memory round trip per DION__PKT_BATCH units instead of one per unit. A build may override it (1..32).
 */
#ifndef DION__PKT_BATCH
#define DION__PKT_BATCH 8
#endif
#if DION__PKT_BATCH < 1 || DION__PKT_BATCH > 32
#error "DION__PKT_BATCH must be 1..32"
#endif
/* Which batched polls first wait on the batch's last unit alone (one load in flight instead of up to
 * DION__PKT_BATCH on the lines the sender is writing), then check the batch: 0 none; 1 (default) a thread's;
 * 2 a thread's and a warp's (perf/CMakeLists.txt p2p_bench_pkl, pkl0). On the H200 (2026-12-01 01:58, one
 * GPU) it took a thread's 64 B from 2.19 to 1.51 us and 4 KiB from 106 to 58, and made a warp's 512 B to 4
 * KiB slower (512 B 0.96 -> 1.31 us). */
#ifndef DION__PKT_POLL_LAST
#define DION__PKT_POLL_LAST 1
#endif
#if DION__PKT_POLL_LAST < 0 || DION__PKT_POLL_LAST > 2
#error "DION__PKT_POLL_LAST must be 0, 1 or 2"
#endif
/* Blocks take one unit per thread at a time: their messages rarely exceed one unit per thread (8 bytes x
 * threads), and the batch's registers would make the 1024-thread kernels spill. The value is the `batch`
 * argument of the units' writer and poll: 0 one unit at a time, 1 batched, 2 batched with the poll waiting on
 * each batch's last unit first (DION__PKT_POLL_LAST). */
#define DION__PKT_BATCHES(g)                                                                                 \
    ((g) == DION__BLOCK                                                            ? 0                       \
     : ((g) == DION__THREAD ? DION__PKT_POLL_LAST >= 1 : DION__PKT_POLL_LAST >= 2) ? 2                       \
                                                                                   : 1)
#if DION__GPU
#define DION__PKT_UNROLL _Pragma("unroll")
#else
#define DION__PKT_UNROLL
#endif

/* Whether a call skips the bookkeeping paths: no argument checks, statistics or trace on this handle. One
 * test of the flags word instead of one per feature on the way to the stores and the poll loop. */
DION_HD int dion__pkt_lean(const dion_ctx_t *c)
{
    uint32_t slow = DION_DEVF_STATS;
#if DION_TRACE_COMPILED
    slow |= DION_DEVF_TRACE;
#endif
    if (dion__check_enabled(c)) return 0;
    return (c->dev.flags & slow) == 0;
}

/* Where the lean path finds the peer's transport and scope and the window's base and flags (a build may
 * override it to compare, perf/CMakeLists.txt p2p_bench_pktab): 0, the default, the library's selections from
 * the handle's inline entries and window slots (parameter bank; the tables beyond them); 1, read-only loads
 * from the peer table and the window's table (ld.global.nc: neither changes while kernels may use it), one
 * load each and independent of each other, an asm without side effects that the compiler may hoist out of the
 * caller's loop, against about 80 instructions of selections. GPU code only. */
#ifndef DION__PKT_LOOKUP
#define DION__PKT_LOOKUP 0
#endif

/* The fast path (GPU code): a lean call of a group whose threads have at most one unit each (a thread's
 * message up to 8 bytes, a warp's up to 256, a block's up to 8 bytes a thread) goes from its entry to the
 * payload's load and the unit's store (put), or to a poll loop whose exit stores the payload (wait), with
 * every lookup off the path from the payload's load to the store. Where the peer's transport and scope and
 * the window's base come from (a build may set DION__PKT_FAST to compare, perf/CMakeLists.txt): 1 (default)
 * the parameter bank alone, for a rank with an inline entry in the handle and a window with a slot (the fast
 * paths' DION__LK_INLINE selections, device/common.cuh): nothing reads memory, so a loop whose arguments do
 * not change may make the selections once, before the loop; 2 read-only loads of the peer table and the
 * window table (as DION__PKT_LOOKUP=1), for any rank and window: two loads, issued beside the payload's; 0 no
 * fast path (the lean path below, as before). Any other call (checks, statistics or trace on, a group with
 * several units a thread, a rank or window the mode does not cover) takes the lean path or the full one,
 * unchanged. */
#ifndef DION__PKT_FAST
#define DION__PKT_FAST 1
#endif
#if DION__PKT_FAST < 0 || DION__PKT_FAST > 2
#error "DION__PKT_FAST must be 0, 1 or 2"
#endif

/* The fast path's common case (GPU code, a thread's call): a whole unit (8 payload bytes) from or to an
 * 8-byte aligned address, under one test that branches to the general code. The put loads the payload as
 * one 8-byte word and stores the unit (sm_90: 14 instructions from the test to the store, against 29 and 7
 * branches in the general fast path); the wait's poll loop ends in one 8-byte store of the payload.
 * 0 (perf/CMakeLists.txt, p2p_bench_pkt2old): no such case, the fast path as before. */
#ifndef DION__PKT_FAST8
#define DION__PKT_FAST8 1
#endif

/* The shape of that case's poll loop (perf/CMakeLists.txt p2p_bench_pk3old, pkh2): 1 (default) both
 * addresses are pinned in registers before the first poll and a hit stores the payload from inside the loop
 * and returns (the poll that sees the message is followed by the store and nothing else of the wait's); 2 the
 * same in one loop instead of two nested ones (a miss counts its polls and tests for the rare round itself),
 * so that the hit leaves by one branch with no convergence region to break out of; 0 the loop of pkt2, whose
 * exit tests the flag again and builds the destination after the hit. */
#ifndef DION__PKT_HIT
#define DION__PKT_HIT 1
#endif

/* A thread's 8-byte put (the fast path's common case, GPU code, DION__PKT_FAST 1): 1 (default) its payload
 * load and unit store are predicated on the fast-path test and the branch to the general path follows the
 * store, so nothing is tested between the caller's last instruction and the store; 0 (perf/CMakeLists.txt
 * p2p_bench_pkpred0) the test first, a branch around the general path to the store (ptxas makes the store
 * the taken side: sm_90, nvcc 13.0, docs/results/2026-12-03-h200-s13). */
#ifndef DION__PKT_PRED
#define DION__PKT_PRED 1
#endif

#if DION__GPU && (DION__PKT_LOOKUP == 1 || DION__PKT_FAST == 2)
DION_HD uint64_t dion__pkt_ldnc(const void *p)
{
    uint64_t v;
    asm("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}
#endif

DION_HD int dion__pkt_fast(const dion_ctx_t *c, dion_dwin_t w, int rank)
{
#if DION__GPU && DION__PKT_FAST == 1
    return dion__pkt_lean(c) & ((unsigned)rank < DION_DEV_INLINE_PEERS) & dion__win_in_slot(&c->dev, w);
#elif DION__GPU && DION__PKT_FAST == 2
    (void)w, (void)rank;
    return dion__pkt_lean(c);
#else
    (void)c, (void)w, (void)rank;
    return 0;
#endif
}

/* The lean path's target: rank's base of window w and the scope of accesses there; 0 when rank is not
 * reached by loads and stores or has no base there (the caller then takes the full path, which records why).
 * fast: dion__pkt_fast holds (the selections read what DION__PKT_FAST says). */
DION_HD int dion__pkt_target(const dion_ctx_t *c, dion_dwin_t w, int rank, int fast, char **base,
                             uint32_t *scope)
{
#if DION__GPU && DION__PKT_FAST
    if (fast) {
#if DION__PKT_FAST == 1
        const dion_dev_t *d = &c->dev;
        /* transport and scope side by side in the entry: one 8-byte parameter load per candidate */
#define DION__PKT_TS(k)                                                                                      \
    (((uint64_t)d->peer_inline[k].scope << 32 | d->peer_inline[k].transport) & (0 - (uint64_t)(rank == (k))))
        uint64_t ts = DION__PKT_TS(0) | DION__PKT_TS(1) | DION__PKT_TS(2) | DION__PKT_TS(3) |
                      DION__PKT_TS(4) | DION__PKT_TS(5) | DION__PKT_TS(6) | DION__PKT_TS(7);
#undef DION__PKT_TS
        uint32_t t = (uint32_t)ts;
        *scope = (uint32_t)(ts >> 32) |
                 ((dion__win_flags_inl(d, w) & DION_WIN_HOST) ? DION_SCOPE_SYS : DION_SCOPE_GPU);
        *base = dion__win_base_inl(d, w, rank);
#else
        uint64_t ts = dion__pkt_ldnc(&c->dev.peers[rank].transport); /* transport, then scope: one word */
        uint32_t t = (uint32_t)ts, wf = (uint32_t)(dion__pkt_ldnc(w) >> 32); /* magic, then flags */
        *base = (char *)(uintptr_t)dion__pkt_ldnc(&dion__win_peer(w, rank)->base);
        *scope = (uint32_t)(ts >> 32) | ((wf & DION_WIN_HOST) ? DION_SCOPE_SYS : DION_SCOPE_GPU);
#endif
        return ((t == DION_TRANSPORT_P2P) | (t == DION_TRANSPORT_SELF)) & (*base != NULL);
    }
#endif
    (void)fast;
#if DION__GPU && DION__PKT_LOOKUP == 1
    uint64_t ts = dion__pkt_ldnc(&c->dev.peers[rank].transport); /* transport, then scope: one 8-byte word */
    uint32_t t = (uint32_t)ts, wf = (uint32_t)(dion__pkt_ldnc(w) >> 32); /* magic, then flags */
    *base = (char *)(uintptr_t)dion__pkt_ldnc(&dion__win_peer(w, rank)->base);
    *scope = (uint32_t)(ts >> 32) | ((wf & DION_WIN_HOST) ? DION_SCOPE_SYS : DION_SCOPE_GPU);
#else
    /* both selections from the peer's inline entry side by side, so they share its index tests */
    uint32_t t = dion__peer_transport(&c->dev, rank);
    *scope = dion__p2p_scope(c, rank, w);
    *base = dion__win_base(&c->dev, w, rank);
#endif
    /* no short circuit: the base's load goes out beside the transport's, not after a branch on it */
    return ((t == DION_TRANSPORT_P2P) | (t == DION_TRANSPORT_SELF)) & (*base != NULL);
}

/* This rank's base of window w, for the lean wait (fast: as in dion__pkt_target). */
DION_HD char *dion__pkt_own_base(const dion_ctx_t *c, dion_dwin_t w, int fast)
{
#if DION__GPU && DION__PKT_FAST == 1
    if (fast) return dion__win_self_inl(&c->dev, w);
#elif DION__GPU && DION__PKT_FAST == 2
    if (fast) return (char *)(uintptr_t)dion__pkt_ldnc(&dion__win_peer(w, c->dev.rank)->base);
#endif
    (void)fast;
#if DION__GPU && DION__PKT_LOOKUP == 1
    return (char *)(uintptr_t)dion__pkt_ldnc(&dion__win_peer(w, c->dev.rank)->base);
#else
    return dion__win_base(&c->dev, w, c->dev.rank);
#endif
}

/* ---- put ---- */

/* Thread r of n writes its units (r, r+n, ...) of the message: payload from src, sequence seq. With batch and
 * an 8-byte aligned src the whole units go DION__PKT_BATCH at a time (all loads, then all stores); a partial
 * last unit, unaligned sources and batch 0 go one at a time. */
DION_HD void dion__pkt_put_units(uint64_t *to, const char *src, size_t bytes, uint32_t seq, uint32_t r,
                                 uint32_t n, uint32_t scope, int batch)
{
    uint64_t flag = (uint64_t)seq << 32;
    size_t units = (bytes + DION_PACKET_PAYLOAD - 1) / DION_PACKET_PAYLOAD; /* a shift */
    if (units <= n) { /* at most one unit per thread (a thread's message of up to 8 bytes): no loop */
        if (r < units) {
            uint32_t lo, hi;
            dion__pkt_gather(src, bytes, r, &lo, &hi);
            dion__pkt_store(to + 2 * (size_t)r, flag | lo, flag | hi, scope);
        }
        return;
    }
    size_t u = r;
    if (batch && ((uintptr_t)src & 7) == 0) {
        size_t whole = bytes / DION_PACKET_PAYLOAD;
        while (u < whole) {                    /* u ends at this thread's first unit past the whole ones */
            uint64_t v[DION__PKT_BATCH] = {0}; /* all set before use; gcc cannot tell */
            uint32_t cnt = 0;
            DION__PKT_UNROLL
            for (int k = 0; k < DION__PKT_BATCH; k++)
                if (u + (size_t)k * n < whole) v[k] = ((const uint64_t *)src)[u + (size_t)k * n], cnt++;
            DION__PKT_UNROLL
            for (int k = 0; k < DION__PKT_BATCH; k++)
                if ((uint32_t)k < cnt)
                    dion__pkt_store(to + 2 * (u + (size_t)k * n), flag | (uint32_t)v[k], flag | (v[k] >> 32),
                                    scope);
            u += (size_t)cnt * n;
        }
    }
    for (; u < units; u += n) { /* a partial last unit, or an unaligned source */
        uint32_t lo, hi;
        dion__pkt_gather(src, bytes, u, &lo, &hi);
        dion__pkt_store(to + 2 * u, flag | lo, flag | hi, scope);
    }
}

#if DION__GPU && DION__PKT_PRED
/* DION__PKT_PRED's 8-byte case: the payload's load and the unit's store predicated on go (no branch before
 * the store; other calls go to the general path after it). Nothing is read or written when go is 0. */
DION_HD void dion__pkt_put8_if(char *to, const void *src, uint32_t seq, uint32_t scope, uint32_t go)
{
    uint64_t v = 0; /* a C load, so that a payload in registers stays there; ptxas predicates it */
    if (go) v = *(const uint64_t *)src;
    uint64_t flag = (uint64_t)seq << 32, w0 = flag | (uint32_t)v, w1 = flag | (v >> 32);
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 p, %3, 0;\n\tsetp.eq.and.u32 q, %4, %5, p;\n\t"
                 "setp.ne.and.u32 p, %4, %5, p;\n\t@q st.relaxed.gpu.v2.u64 [%0], {%1, %2};\n\t"
                 "@p st.relaxed.sys.v2.u64 [%0], {%1, %2};\n\t}" ::"l"(to),
                 "l"(w0), "l"(w1), "r"(go), "r"(scope), "r"((uint32_t)DION_SCOPE_GPU)
                 : "memory");
}
#endif

DION_HD void dion__put_packet_group(dion_ctx_t c, dion__group_t g, dion_dwin_t dst, int peer, size_t dst_off,
                                    const void *src, size_t bytes, uint32_t seq)
{
    uint32_t r = dion__group_rank(g), n = dion__group_size(g);
    int fast = dion__pkt_fast(&c, dst, peer);
#if DION__GPU && DION__PKT_FAST == 1 && DION__PKT_FAST8 && DION__PKT_PRED
    if (g == DION__THREAD) { /* a whole unit from an aligned source: the load and store, then the test */
        char *base;
        uint32_t scope;
        uint32_t go = fast & dion__pkt_target(&c, dst, peer, 1, &base, &scope) &
                      (bytes == DION_PACKET_PAYLOAD) & (((uintptr_t)src & 7) == 0);
        dion__pkt_put8_if(base + dst_off, src, seq, scope, go);
        if (__builtin_expect(go, 1)) return;
    }
#elif DION__GPU && DION__PKT_FAST && DION__PKT_FAST8
    if (g == DION__THREAD) { /* a whole unit from an aligned source: one test, one load, one store */
        char *base;
        uint32_t scope;
#if DION__PKT_FAST == 1 /* the selections read the parameter bank alone: computed whatever fast says */
        int ok = fast & dion__pkt_target(&c, dst, peer, 1, &base, &scope);
#else
        int ok = fast;
#endif
        if (__builtin_expect(ok & (bytes == DION_PACKET_PAYLOAD) & (((uintptr_t)src & 7) == 0), 1)) {
            uint64_t v = *(const uint64_t *)src, flag = (uint64_t)seq << 32;
#if DION__PKT_FAST == 2
            if (dion__pkt_target(&c, dst, peer, 1, &base, &scope))
#endif
            {
                dion__pkt_store((uint64_t *)(base + dst_off), flag | (uint32_t)v, flag | (v >> 32), scope);
                return;
            }
        }
    }
#endif
#if DION__GPU && DION__PKT_FAST
    if ((bytes + DION_PACKET_PAYLOAD - 1) / DION_PACKET_PAYLOAD <= n) { /* at most one unit a thread */
        /* The payload's load goes out first: the lookups and tests below run while it is in flight, and the
         * store is the only thing that waits for it. src holds `bytes` readable bytes whichever path runs. */
        int mine = r * DION_PACKET_PAYLOAD < bytes;
        uint32_t lo = 0, hi = 0;
        if (mine) dion__pkt_gather((const char *)src, bytes, r, &lo, &hi);
        char *base;
        uint32_t scope;
        if (fast && dion__pkt_target(&c, dst, peer, 1, &base, &scope)) {
            uint64_t flag = (uint64_t)seq << 32;
            if (mine)
                dion__pkt_store((uint64_t *)(base + dst_off) + 2 * (size_t)r, flag | lo, flag | hi, scope);
            dion__group_sync(g);
            return;
        }
    }
#endif
    /* The lean path: one flags test, the peer's transport, the window base and the scope, then the stores. */
    if (fast || dion__pkt_lean(&c)) {
        char *base;
        uint32_t scope;
        if (dion__pkt_target(&c, dst, peer, fast, &base, &scope)) {
            dion__pkt_put_units((uint64_t *)(base + dst_off), (const char *)src, bytes, seq, r, n, scope,
                                DION__PKT_BATCHES(g));
            dion__group_sync(g);
            return;
        }
    }
    int lead = r == 0;
    uint64_t t0 = dion__trace_start(&c);
    uint64_t span = DION_PACKET_SPAN(bytes);
    if (dion__check_enabled(&c)) {
        if (!dion__check_ctx(&c, DION_OP_PUT_PACKET, lead) ||
            !dion__check_peer(&c, peer, DION_OP_PUT_PACKET, lead) ||
            !dion__pkt_check_seq(&c, seq, DION_OP_PUT_PACKET, peer, lead) ||
            !dion__check_range(&c, dst, peer, dst_off, span, DION_PACKET_UNIT, DION_OP_PUT_PACKET, peer,
                               lead))
            return;
    }
    if (!dion__pkt_peer_ok(&c, peer, DION_OP_PUT_PACKET, lead)) return;
    uint64_t *to = (uint64_t *)(dion__win_base(&c.dev, dst, peer) + dst_off);
    dion__pkt_put_units(to, (const char *)src, bytes, seq, r, n, dion__p2p_scope(&c, peer, dst),
                        DION__PKT_BATCHES(g));
    dion__group_sync(g);
    if (lead) {
        DION__STAT(&c, puts, 1);
        DION__STAT(&c, put_bytes, bytes);
        DION__TRACE(&c, t0, DION_OP_PUT_PACKET, peer, 0, bytes, seq, 0, 0, DION_SUCCESS);
    }
}

/* ---- wait ---- */

/* Polls in a row before a poll loop looks at the abort word, the clock and the back-off: 128 on the GPU until
 * the back-off starts (after 4096 polls), then 1, so a poll that finds nothing costs its load, the flag
 * comparison and a count-down beside it (one taken branch, as in a hand-written loop). CPU mode: 1 (its
 * back-off yields on every poll). */
#if DION__GPU
#define DION__PKT_ROUND(polls) ((polls) < 4096 ? 128u : 1u)
#else
#define DION__PKT_ROUND(polls) 1u
#endif

/* The rare part of a poll loop, after polls polls: abort word and clock every 128 polls, then the back-off.
 * Returns DION_SUCCESS to keep polling, else the status to stop with. */
DION_HD dion_status_t dion__pkt_rare(const dion_dev_t *d, uint32_t scope, uint32_t polls, uint64_t *start)
{
    if ((polls & 127) == 0) {
        uint64_t ab = dion__ld_relaxed(dion__ctl_word(d, d->signals, DION_CTL_ABORT), scope);
        if (ab) return (dion_status_t)ab;
        uint64_t now = dion__time_ns();
        if (*start == 0) *start = now;
        if (d->wait_timeout_ns && now - *start > d->wait_timeout_ns) return DION_ERR_TIMEOUT;
    }
    dion__backoff(polls);
    return DION_SUCCESS;
}

DION_HD int dion__pkt_whole(uint64_t w0, uint64_t w1, uint32_t seq)
{
    return (uint32_t)(w0 >> 32) == seq && (uint32_t)(w1 >> 32) == seq;
}

/* Polls unit u of the message at p until it carries seq in both words and copies its payload to dst: the
 * inner loop is the load, the flag comparison and a count-down (the data is the flag: no separate signal, no
 * fence). Stops on abort or timeout with *seen = the flag last read. */
DION_HD dion_status_t dion__pkt_poll_one(const dion_dev_t *d, uint32_t scope, const uint64_t *p, char *dst,
                                         size_t bytes, uint32_t seq, size_t u, uint32_t *polls,
                                         uint64_t *start, uint32_t *seen)
{
    const uint64_t *q = p + 2 * u;
    uint64_t w0, w1;
    for (;;) {
        uint32_t k = DION__PKT_ROUND(*polls);
        *polls += k;
        int whole;
        do {
            dion__pkt_load(q, &w0, &w1, scope);
            whole = dion__pkt_whole(w0, w1, seq);
        } while (!whole && --k);
        if (whole) break;
        dion_status_t st = dion__pkt_rare(d, scope, *polls, start);
        if (st != DION_SUCCESS) {
            *seen = (uint32_t)(w0 >> 32) != seq ? (uint32_t)(w0 >> 32) : (uint32_t)(w1 >> 32);
            return st;
        }
    }
    dion__pkt_scatter(dst, bytes, u, (uint32_t)w0, (uint32_t)w1);
    return DION_SUCCESS;
}

/* How many loads of the fast path's poll are in flight (a build may set it to compare, perf/CMakeLists.txt):
 * 1, one after the other; 2, two, the second issued DION__PKT_STAGGER clock cycles after the first and each
 * reissued as soon as it returns, so the unit is sampled about twice per memory round trip and a message is
 * seen about a quarter of a round trip sooner on average. */
#ifndef DION__PKT_POLL_DEPTH
#define DION__PKT_POLL_DEPTH 1
#endif
#if DION__PKT_POLL_DEPTH != 1 && DION__PKT_POLL_DEPTH != 2
#error "DION__PKT_POLL_DEPTH must be 1 or 2"
#endif
#ifndef DION__PKT_STAGGER
#define DION__PKT_STAGGER 160u /* about half an L2 round trip of an H200, in SM clock cycles */
#endif

/* The payload of unit u (words w0, w1) to dst: to, when the fast wait chose it, takes the two halves as
 * they sit in the words' registers (one 64-bit store would first copy them into a register pair, and the
 * copy may have to wait for a poll still in flight whose registers it reuses). */
DION_HD void dion__pkt_land(uint64_t *to, char *dst, size_t bytes, size_t u, uint64_t w0, uint64_t w1)
{
    if (to)
        ((uint32_t *)to)[0] = (uint32_t)w0, ((uint32_t *)to)[1] = (uint32_t)w1;
    else
        dion__pkt_scatter(dst, bytes, u, (uint32_t)w0, (uint32_t)w1);
}

/* The fast path's wait for unit u of the message at p (u * 8 < bytes): the payload's destination is chosen
 * before the first poll, so the exit from the poll loop is a compare, a branch and the store. Stops on abort
 * or timeout (every 128 polls, as dion__pkt_poll_one) with *seen = the flag last read. */
DION_HD dion_status_t dion__pkt_poll_unit(const dion_dev_t *d, const uint64_t *p, char *dst, size_t bytes,
                                          uint32_t seq, uint32_t u, uint32_t *seen)
{
    uint32_t scope = dion__dev_scope(d);
    const uint64_t *q = p + 2 * (size_t)u;
    /* a whole, aligned word goes with one store; the choice is pinned before the loop so that the compiler
     * does not sink it to the loop's exit */
    uint64_t *to = ((size_t)u + 1) * DION_PACKET_PAYLOAD <= bytes && ((uintptr_t)dst & 7) == 0
                       ? (uint64_t *)dst + u
                       : NULL;
#if DION__GPU
    asm volatile("" : "+l"(to));
#endif
    uint64_t start = 0, w0, w1;
    uint32_t polls = 0;
#if DION__GPU && DION__PKT_POLL_DEPTH == 2
    uint64_t b0, b1;
    dion__pkt_load(q, &w0, &w1, scope);
    for (uint32_t t0 = (uint32_t)clock(); (uint32_t)clock() - t0 < DION__PKT_STAGGER;) {
    }
    dion__pkt_load(q, &b0, &b1, scope);
#endif
    for (;;) {
        uint32_t k = DION__PKT_ROUND(polls);
        polls += k;
        int whole;
#if DION__GPU && DION__PKT_POLL_DEPTH == 2
        whole = 0;
        do { /* w and b alternate: each is checked when it returns and reissued at once. Each exit copies
              * the words that hit and nothing else: reading the other pair (a copy, a select) would wait
              * for its load in flight. */
            if (dion__pkt_whole(w0, w1, seq)) {
                dion__pkt_land(to, dst, bytes, u, w0, w1);
                return DION_SUCCESS;
            }
            dion__pkt_load(q, &w0, &w1, scope);
            if (dion__pkt_whole(b0, b1, seq)) {
                dion__pkt_land(to, dst, bytes, u, b0, b1);
                return DION_SUCCESS;
            }
            dion__pkt_load(q, &b0, &b1, scope);
        } while (--k);
#else
        do {
            dion__pkt_load(q, &w0, &w1, scope);
            whole = dion__pkt_whole(w0, w1, seq);
        } while (!whole && --k);
#endif
        if (whole) break;
        dion_status_t st = dion__pkt_rare(d, scope, polls, &start);
        if (st != DION_SUCCESS) {
            *seen = (uint32_t)(w0 >> 32) != seq ? (uint32_t)(w0 >> 32) : (uint32_t)(w1 >> 32);
            return st;
        }
    }
    dion__pkt_land(to, dst, bytes, u, w0, w1);
    return DION_SUCCESS;
}

#if DION__GPU && DION__PKT_FAST && DION__PKT_FAST8 && DION__PKT_POLL_DEPTH == 1 && !DION__PKT_HIT
/* The fast path's wait for a thread's one whole unit at q, its payload to the 8-byte aligned to: a miss costs
 * the load, the flag comparison and a count-down (one branch); a hit goes straight to one 8-byte store of the
 * payload, with no choice of destination or store width left after the loop (dion__pkt_poll_unit). Abort
 * word, clock and back-off as dion__pkt_poll_one (dion__pkt_rare after 128, 256, ... polls, every poll from
 * 4096).
 */
DION_HD dion_status_t dion__pkt_poll8(const dion_dev_t *d, const uint64_t *q, uint64_t *to, uint32_t seq,
                                      uint32_t *seen)
{
    uint32_t scope = dion__dev_scope(d);
    uint64_t start = 0, w0, w1;
    uint32_t polls = 0;
    for (;;) {
        uint32_t k = DION__PKT_ROUND(polls);
        polls += k;
        int whole;
        do { /* one branch a miss: on the flag and the count together */
            dion__pkt_load(q, &w0, &w1, scope);
            whole = dion__pkt_whole(w0, w1, seq);
        } while (!whole && --k);
        if (__builtin_expect(whole, 1)) break;
        dion_status_t st = dion__pkt_rare(d, scope, polls, &start);
        if (st != DION_SUCCESS) {
            *seen = (uint32_t)(w0 >> 32) != seq ? (uint32_t)(w0 >> 32) : (uint32_t)(w1 >> 32);
            return st;
        }
    }
    *to = (w1 << 32) | (uint32_t)w0;
    return DION_SUCCESS;
}
#endif

/* Polls this thread's units (r, r+n, ...) of the message at p until each carries seq in both words, copying
 * their payload to dst; stops on abort or timeout. With batch and an 8-byte aligned dst the whole units are
 * polled DION__PKT_BATCH at a time (all loads, then the checks; batch 2: after the batch's last unit alone
 * has arrived); a partial last unit, unaligned destinations and batch 0 one at a time. *seen: the flag last
 * read from a unit that was not ready. */
DION_HD dion_status_t dion__pkt_poll(const dion_ctx_t *c, const uint64_t *p, char *dst, size_t bytes,
                                     uint32_t seq, uint32_t r, uint32_t n, uint32_t *seen, int batch)
{
    const dion_dev_t *d = &c->dev;
    uint32_t scope = dion__dev_scope(d);
    size_t units = (bytes + DION_PACKET_PAYLOAD - 1) / DION_PACKET_PAYLOAD;
    uint64_t start = 0;
    uint32_t polls = 0;
    if (units <= n) /* at most one unit per thread (a thread's message of up to 8 bytes) */
        return r < units ? dion__pkt_poll_one(d, scope, p, dst, bytes, seq, r, &polls, &start, seen)
                         : DION_SUCCESS;
    size_t u = r;
    if (batch && ((uintptr_t)dst & 7) == 0) {
        size_t whole = bytes / DION_PACKET_PAYLOAD;
        while (u < whole) { /* u ends at this thread's first unit past the whole ones */
            uint32_t need = 0, done = 0, cnt = 0;
            DION__PKT_UNROLL
            for (int k = 0; k < DION__PKT_BATCH; k++)
                if (u + (size_t)k * n < whole) need |= 1u << k, cnt++;
            for (const uint64_t *q = p + 2 * (u + (size_t)(cnt - 1) * n);
                 batch == 2;) { /* its last unit alone */
                uint64_t w0, w1;
                dion__pkt_load(q, &w0, &w1, scope);
                if (dion__pkt_whole(w0, w1, seq)) break;
                dion_status_t st = dion__pkt_rare(d, scope, ++polls, &start);
                if (st != DION_SUCCESS) {
                    *seen = (uint32_t)(w0 >> 32) != seq ? (uint32_t)(w0 >> 32) : (uint32_t)(w1 >> 32);
                    return st;
                }
            }
            for (;;) {
                uint32_t unseen = need & ~done, flag = 0;
                uint64_t a[DION__PKT_BATCH], b[DION__PKT_BATCH];
                DION__PKT_UNROLL
                for (int k = 0; k < DION__PKT_BATCH; k++)
                    if ((unseen >> k) & 1) dion__pkt_load(p + 2 * (u + (size_t)k * n), &a[k], &b[k], scope);
                DION__PKT_UNROLL
                for (int k = 0; k < DION__PKT_BATCH; k++) {
                    if (!((unseen >> k) & 1)) continue;
                    if (dion__pkt_whole(a[k], b[k], seq)) {
                        ((uint64_t *)dst)[u + (size_t)k * n] = (b[k] << 32) | (uint32_t)a[k];
                        done |= 1u << k;
                    } else {
                        flag =
                            (uint32_t)(a[k] >> 32) != seq ? (uint32_t)(a[k] >> 32) : (uint32_t)(b[k] >> 32);
                    }
                }
                if (done == need) break;
                /* a batch is a round of one poll: the bookkeeping's share is small next to its loads */
                dion_status_t st = dion__pkt_rare(d, scope, ++polls, &start);
                if (st != DION_SUCCESS) {
                    *seen = flag;
                    return st;
                }
            }
            u += (size_t)cnt * n;
        }
    }
    for (; u < units; u += n) { /* a partial last unit, or an unaligned destination */
        dion_status_t st = dion__pkt_poll_one(d, scope, p, dst, bytes, seq, u, &polls, &start, seen);
        if (st != DION_SUCCESS) return st;
    }
    return DION_SUCCESS;
}

/* The end of a group's wait: one status for the group (success only when every unit arrived), the leader's
 * error record on a timeout, and for a warp the barrier after which every lane has the whole payload (a
 * block's vote is already one). */
DION_HD dion_status_t dion__pkt_wait_end(const dion_ctx_t *c, dion__group_t g, dion_dwin_t win, size_t off,
                                         size_t bytes, uint32_t seq, dion_status_t st, uint32_t seen)
{
    const dion_dev_t *d = &c->dev;
    if (dion__group_any(g, st != DION_SUCCESS)) {
        uint64_t ab = dion__ld_relaxed(dion__ctl_word(d, d->signals, DION_CTL_ABORT), dion__dev_scope(d));
        st = ab ? (dion_status_t)ab : DION_ERR_TIMEOUT;
        if (dion__group_rank(g) == 0 && st == DION_ERR_TIMEOUT) {
            uint64_t w0, w1;
            dion__pkt_load((const uint64_t *)(dion__win_base(d, win, d->rank) + off), &w0, &w1,
                           dion__dev_scope(d));
            dion__err_t e = dion__err(DION_ERR_TIMEOUT, DION_OP_WAIT_PACKET, d->rank);
            e.cmp = DION_CMP_EQ;
            e.expected = seq;
            e.observed = g == DION__THREAD ? seen : (uint32_t)(w0 >> 32); /* the first unit's flag */
            e.offset = off;
            e.bytes = bytes;
            e.limit = d->wait_timeout_ns;
            dion__record(c, e);
            DION__STAT(c, wait_timeouts, 1);
        }
    } else if (g == DION__WARP) {
        dion__group_sync(g);
    }
    return st;
}

#if DION__GPU && DION__PKT_FAST && DION__PKT_FAST8 && DION__PKT_POLL_DEPTH == 1 && DION__PKT_HIT
/* dion__pkt_poll8 with the wait's end inside: both addresses are in registers before the first poll, and the
 * poll that sees the message leaves the loop to the payload's store and the return, with no flag tested again
 * and no destination built after the hit. Abort, timeout and its record in the rare branch (the status the
 * caller gets is the final one, with no second test of it on the way out). */
DION_HD dion_status_t dion__pkt_wait8(const dion_ctx_t *c, dion_dwin_t win, size_t off, const uint64_t *q,
                                      uint64_t *to, uint32_t seq)
{
    const dion_dev_t *d = &c->dev;
    uint32_t scope = dion__dev_scope(d);
    uint64_t start = 0, w0, w1;
    uint32_t polls = 0;
    /* else the compiler builds the destination from the parameter bank after the hit */
    asm volatile("" : "+l"(to), "+l"(q));
#if DION__PKT_HIT == 2
    /* one loop: the hit is the expected way on (the store and the return), a miss counts and goes round */
    for (;;) {
        dion__pkt_load(q, &w0, &w1, scope);
        if (__builtin_expect(dion__pkt_whole(w0, w1, seq), 1)) {
            *to = (w1 << 32) | (uint32_t)w0;
            return DION_SUCCESS;
        }
        polls++;
        if (__builtin_expect(((polls & 127) == 0) | (polls >= 4096), 0)) {
            dion_status_t st = dion__pkt_rare(d, scope, polls, &start);
            if (st != DION_SUCCESS) {
                uint32_t seen = (uint32_t)(w0 >> 32) != seq ? (uint32_t)(w0 >> 32) : (uint32_t)(w1 >> 32);
                return dion__pkt_wait_end(c, DION__THREAD, win, off, DION_PACKET_PAYLOAD, seq, st, seen);
            }
        }
    }
#else
    for (;;) {
        uint32_t k = DION__PKT_ROUND(polls);
        polls += k;
        do {
            dion__pkt_load(q, &w0, &w1, scope);
            if (dion__pkt_whole(w0, w1, seq)) {
                *to = (w1 << 32) | (uint32_t)w0;
                return DION_SUCCESS;
            }
        } while (--k);
        dion_status_t st = dion__pkt_rare(d, scope, polls, &start);
        if (st != DION_SUCCESS) {
            uint32_t seen = (uint32_t)(w0 >> 32) != seq ? (uint32_t)(w0 >> 32) : (uint32_t)(w1 >> 32);
            return dion__pkt_wait_end(c, DION__THREAD, win, off, DION_PACKET_PAYLOAD, seq, st, seen);
        }
    }
#endif
}
#endif

DION_HD dion_status_t dion__wait_packet_group(dion_ctx_t c, dion__group_t g, dion_dwin_t win, size_t off,
                                              void *dst, size_t bytes, uint32_t seq)
{
    uint32_t r = dion__group_rank(g), n = dion__group_size(g);
    int lead = r == 0;
    int me = c.dev.rank;
    uint32_t seen = 0;
    dion_status_t st;
    int fast = dion__pkt_fast(&c, win, me);
#if DION__GPU && DION__PKT_FAST && DION__PKT_FAST8 && DION__PKT_POLL_DEPTH == 1
    /* a thread's whole unit to an aligned destination: one test before the poll loop (pkd2 keeps its own) */
    if (g == DION__THREAD &&
        __builtin_expect(fast & (bytes == DION_PACKET_PAYLOAD) & (((uintptr_t)dst & 7) == 0), 1)) {
#if DION__PKT_HIT
        return dion__pkt_wait8(&c, win, off, (const uint64_t *)(dion__pkt_own_base(&c, win, 1) + off),
                               (uint64_t *)dst, seq);
#else
        st = dion__pkt_poll8(&c.dev, (const uint64_t *)(dion__pkt_own_base(&c, win, 1) + off),
                             (uint64_t *)dst, seq, &seen);
        if (st == DION_SUCCESS) return st;
        return dion__pkt_wait_end(&c, g, win, off, bytes, seq, st, seen);
#endif
    }
#endif
#if DION__GPU && DION__PKT_FAST
    if (fast &&
        (bytes + DION_PACKET_PAYLOAD - 1) / DION_PACKET_PAYLOAD <= n) { /* at most one unit a thread */
        const uint64_t *p = (const uint64_t *)(dion__pkt_own_base(&c, win, 1) + off);
        st = r * DION_PACKET_PAYLOAD < bytes
                 ? dion__pkt_poll_unit(&c.dev, p, (char *)dst, bytes, seq, r, &seen)
                 : DION_SUCCESS;
        if (g == DION__THREAD && st == DION_SUCCESS) return st;
        return dion__pkt_wait_end(&c, g, win, off, bytes, seq, st, seen);
    }
#endif
    if (fast || dion__pkt_lean(&c)) { /* straight to the poll loop; the error path below is the same */
        st = dion__pkt_poll(&c, (const uint64_t *)(dion__pkt_own_base(&c, win, fast) + off), (char *)dst,
                            bytes, seq, r, n, &seen, DION__PKT_BATCHES(g));
        if (g == DION__THREAD && st == DION_SUCCESS) return st;
    } else {
        uint64_t span = DION_PACKET_SPAN(bytes);
        if (dion__check_enabled(&c)) {
            if (!dion__check_ctx(&c, DION_OP_WAIT_PACKET, lead) ||
                !dion__pkt_check_seq(&c, seq, DION_OP_WAIT_PACKET, me, lead) ||
                !dion__check_range(&c, win, me, off, span, DION_PACKET_UNIT, DION_OP_WAIT_PACKET, me, lead))
                return DION_ERR_INVALID_ARG;
        }
        if (lead) DION__STAT(&c, waits, 1);
        uint64_t t0 = dion__trace_start(&c);
        st = dion__pkt_poll(&c, (const uint64_t *)(dion__win_base(&c.dev, win, me) + off), (char *)dst, bytes,
                            seq, r, n, &seen, DION__PKT_BATCHES(g));
        st = dion__pkt_wait_end(&c, g, win, off, bytes, seq, st, seen);
        if (lead) DION__TRACE(&c, t0, DION_OP_WAIT_PACKET, me, 0, bytes, seq, seen, DION_CMP_EQ, st);
        return st;
    }
    return dion__pkt_wait_end(&c, g, win, off, bytes, seq, st, seen);
}

#endif /* DION_DEVICE_PACKET_CUH */
