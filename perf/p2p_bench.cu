/* DION p2p benchmarks: signal and put_signal ping-pong (one-way latency), put bandwidth over all SMs,
 * put+quiet completion latency and message rate. Rank 0 and rank 1 take part; start with
 *   dionrun -n 2 [--mps] p2p_bench [--tests ...] [--csv FILE] [--label L]
 * The "ref" test times hand-written load/store sequences on the same mapping, for calibration: they are not
 * DION calls and some of them do not order data before flags ("refpp": its ping-pongs without the copy).
 * "completion_split" (not run by default) times put + quiet with each piece that dion-perf's round adds, and
 * with 1024, 256 and 64 threads a block, to tell a harness's cost from the library's. "signal" (or
 * "signal_ab" alone) also times the raw relaxed flag and DION's relaxed signal interleaved in one launch, and
 * "packet" (or "packet_ab" alone) the raw unordered put + flag, a packet by hand and DION's packet.
 * "signal_parts" (not run by default) takes the relaxed signal's round apart, one part swapped at a time, and
 * "packet_place" (not run by default) times packet_ab's written-out modes at 32 addresses of the window. */
#include <algorithm>
#include <numeric>
#include <vector>

#include "bench_common.h"
#include "dion/dion.h"
#include "dion/dion_device.cuh"

/* The packet instances of the ping-pong template leave the signal loop unreachable, by design. */
#pragma nv_diag_suppress 128

#define PP_SRC 0ull
#define PP_DST (8ull << 20) /* ping-pong data lands here; sources start at 0 */

enum {
    OP_SIGNAL,
    OP_PS_THREAD,
    OP_PS_WARP,
    OP_PS_BLOCK,
    REF_VOLATILE,      /* st.volatile / ld.volatile flag, no data */
    REF_RELAXED,       /* st.relaxed / ld.relaxed flag, no data */
    REF_RELEASE,       /* st.release / ld.acquire flag, no data: what a release signal costs by hand */
    REF_PS_UNORDERED,  /* 8 B data store then a relaxed flag: no ordering, a lower bound only */
    REF_PS_TABLE,      /* ordered 8 B put_signal by hand, window bases loaded from the table (ld.global) */
    REF_PS_TABLE_NC,   /* the same, table loaded through the read-only path (ld.global.nc) */
    REF_PS_PARAM,      /* the same, window bases passed as kernel parameters: no table load at all */
    OP_SIGNAL_RELAXED, /* dion_signal with DION_SIG_SET_RELAXED */
    REF_PS_LIBWAIT,    /* REF_PS_PARAM, but waiting with dion_wait */
    REF_PS_LIBSIGNAL,  /* REF_PS_PARAM, but signalling with dion_signal */
    REF_PS_LIBPUT,     /* REF_PS_PARAM, but the data moves with dion_put */
    OP_PKT_THREAD,     /* dion_put_packet / dion_wait_packet: the flags travel in the data */
    OP_PKT_WARP,
    OP_PKT_BLOCK,
    REF_RELAXED_ACQ,     /* REF_RELAXED, the wait ending with fence.acquire: the floor of an acquiring wait */
    REF_RELAXED_LIBWAIT, /* REF_RELAXED's store, dion_wait: the relaxed signal's wait side */
    REF_RELAXED_LIBSIGNAL /* dion_signal SET_RELAXED, REF_RELAXED's wait: its send side */
};

#define PP_PKT (16ull << 20) /* packet messages land here; their payload is unpacked to PP_DST */
/* the result words every kernel of this program writes (out): 100 for packet_place's modes and addresses */
#define OUT_BYTES 1024

static __device__ __forceinline__ char *ld_nc_ptr(char *const *p)
{
    unsigned long long v;
    asm volatile("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return (char *)v;
}

static __device__ __forceinline__ void ref_store(uint64_t *p, uint64_t v, int op, uint32_t scope)
{
    if (op == REF_VOLATILE)
        *(volatile uint64_t *)p = v;
    else if (op == REF_RELEASE)
        dion__st_release(p, v, scope);
    else
        dion__st_relaxed(p, v, scope);
}

static __device__ __forceinline__ void ref_wait(const uint64_t *p, uint64_t v, int op, uint32_t scope)
{
    if (op == REF_VOLATILE)
        while (*(volatile const uint64_t *)p != v) {
        }
    else if (op == REF_RELEASE)
        while (dion__ld_acquire(p, scope) != v) {
        }
    else {
        while (dion__ld_relaxed(p, scope) != v) {
        }
        if (op == REF_RELAXED_ACQ) { /* fence.acquire where the library's wait has it (sm_90), else acq_rel */
#if DION__POLL_MODE == 3
            dion__fence_acquire(scope);
#else
            dion__fence(scope);
#endif
        }
    }
}

/* Ping-pong between ranks 0 and 1 on signal 0. Values continue from base so that runs never see stale ones.
 * One kernel per operation (template), so that no variant pays for the registers of another. */
template <int op>
__global__ void __launch_bounds__(op == OP_PS_BLOCK || op == OP_PKT_BLOCK ? 1024 : 32, 1)
    pingpong(dion_dev_t dev, dion_dwin_t win, size_t bytes, int iters, int warmup, uint64_t base,
             unsigned long long *out, char *param_dst, char *param_src)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t tid = threadIdx.x, scope = dion__dev_scope(&dev);
    uint64_t *mysig = dev.signals, *peersig = dion__peer_signals(&dev, peer);
    uint64_t t0 = 0;
    const int pkt = op == OP_PKT_THREAD || op == OP_PKT_WARP || op == OP_PKT_BLOCK;
    const int in_group = op == OP_PKT_BLOCK || (op == OP_PKT_WARP && tid < 32) || tid == 0;
    for (int i = 1; i <= warmup + iters; i++) {
        uint64_t v = base + (uint64_t)i;
        if (i == warmup + 1) t0 = bench_now_ns();
        /* packets: one region per receiver, reused every round; the reply is the sender's credit */
        if (pkt) {
            if (!in_group) continue;
            const uint32_t seq = (uint32_t)v; /* the host keeps v below 2^32 */
            const int sending = initiator;
            for (int half = 0; half < 2; half++) {
                if ((half == 0) == sending) {
                    if (op == OP_PKT_THREAD)
                        dion_put_packet(c, win, peer, PP_PKT, param_src + PP_SRC, bytes, seq);
                    else if (op == OP_PKT_WARP)
                        dion_put_packet_warp(c, win, peer, PP_PKT, param_src + PP_SRC, bytes, seq);
                    else
                        dion_put_packet_block(c, win, peer, PP_PKT, param_src + PP_SRC, bytes, seq);
                } else {
                    dion_status_t st;
                    if (op == OP_PKT_THREAD)
                        st = dion_wait_packet(c, win, PP_PKT, param_src + PP_DST, bytes, seq);
                    else if (op == OP_PKT_WARP)
                        st = dion_wait_packet_warp(c, win, PP_PKT, param_src + PP_DST, bytes, seq);
                    else
                        st = dion_wait_packet_block(c, win, PP_PKT, param_src + PP_DST, bytes, seq);
                    if (st != DION_SUCCESS) { /* the same status on every thread of the group */
                        if (tid == 0) out[1] = 1;
                        return;
                    }
                }
            }
            continue;
        }
        for (int half = 0; half < 2; half++) {
            int sending = (half == 0) == initiator;
            if (sending) {
                switch (op) {
                case OP_SIGNAL:
                    if (tid == 0) dion_signal(c, peer, 0, DION_SIG_SET, v);
                    break;
                case OP_SIGNAL_RELAXED:
                case REF_RELAXED_LIBSIGNAL:
                    if (tid == 0) dion_signal(c, peer, 0, DION_SIG_SET_RELAXED, v);
                    break;
                case REF_PS_LIBSIGNAL:
                    if (tid == 0) {
                        *(uint64_t *)(param_dst + PP_DST) = *(const uint64_t *)(param_src + PP_SRC);
                        dion_signal(c, peer, 0, DION_SIG_SET, v);
                    }
                    break;
                case REF_PS_LIBPUT:
                    if (tid == 0) {
                        dion_put(c, win, peer, PP_DST, win, PP_SRC, 8);
                        dion__st_release(peersig, v, scope);
                    }
                    break;
                case REF_PS_TABLE:
                case REF_PS_TABLE_NC:
                case REF_PS_PARAM:
                case REF_PS_LIBWAIT:
                    if (tid == 0) {
                        char *dst, *src;
                        if (op == REF_PS_PARAM || op == REF_PS_LIBWAIT) {
                            dst = param_dst, src = param_src;
                        } else if (op == REF_PS_TABLE) {
                            dst = dion__win_peer(win, peer)->base, src = dion__win_peer(win, me)->base;
                        } else {
                            dst = ld_nc_ptr(&dion__win_peer(win, peer)->base),
                            src = ld_nc_ptr(&dion__win_peer(win, me)->base);
                        }
                        *(uint64_t *)(dst + PP_DST) = *(const uint64_t *)(src + PP_SRC);
                        dion__st_release(peersig, v, scope);
                    }
                    break;
                case OP_PS_THREAD:
                    if (tid == 0)
                        dion_put_signal(c, win, peer, PP_DST, win, PP_SRC, bytes, 0, DION_SIG_SET, v);
                    break;
                case OP_PS_WARP:
                    if (tid < 32)
                        dion_put_signal_warp(c, win, peer, PP_DST, win, PP_SRC, bytes, 0, DION_SIG_SET, v);
                    break;
                case OP_PS_BLOCK:
                    dion_put_signal_block(c, win, peer, PP_DST, win, PP_SRC, bytes, 0, DION_SIG_SET, v);
                    break;
                case REF_PS_UNORDERED:
                    if (tid == 0) {
                        char *dst = dion__win_peer(win, peer)->base + PP_DST;
                        *(uint64_t *)dst = *(const uint64_t *)(dion__win_peer(win, me)->base + PP_SRC);
                        dion__st_relaxed(peersig, v, scope);
                    }
                    break;
                default: /* the REF_RELAXED_* rows store as REF_RELAXED */
                    if (tid == 0) ref_store(peersig, v, op, scope);
                }
            } else {
                if (tid == 0) {
                    if (op <= OP_PS_BLOCK || op == OP_SIGNAL_RELAXED || op == REF_PS_LIBWAIT ||
                        op == REF_RELAXED_LIBWAIT) {
                        if (dion_wait(c, 0, DION_CMP_EQ, v, NULL) != DION_SUCCESS) {
                            out[1] = 1;
                            return; /* the host sees the error record too */
                        }
                    } else {
                        ref_wait(mysig, v,
                                 op == REF_PS_UNORDERED || op == REF_RELAXED_LIBSIGNAL ? REF_RELAXED
                                 : op == REF_RELAXED_ACQ                               ? REF_RELAXED_ACQ
                                 : op >= REF_PS_TABLE                                  ? REF_RELEASE
                                                                                       : op,
                                 scope);
                    }
                }
                if (op == OP_PS_BLOCK)
                    __syncthreads();
                else if (op == OP_PS_WARP && tid < 32)
                    __syncwarp();
            }
        }
    }
    if (tid == 0 && initiator) out[0] = bench_now_ns() - t0;
}

static void launch_pingpong(int op, int threads, dion_dev_t dev, dion_dwin_t win, size_t bytes, int iters,
                            int warmup, uint64_t base, unsigned long long *out, char *pdst, char *psrc)
{
#define PP_CASE(o)                                                                                           \
    case o:                                                                                                  \
        pingpong<o><<<1, threads>>>(dev, win, bytes, iters, warmup, base, out, pdst, psrc);                  \
        break
    switch (op) {
        PP_CASE(OP_SIGNAL);
        PP_CASE(OP_PS_THREAD);
        PP_CASE(OP_PS_WARP);
        PP_CASE(OP_PS_BLOCK);
        PP_CASE(REF_VOLATILE);
        PP_CASE(REF_RELAXED);
        PP_CASE(REF_RELEASE);
        PP_CASE(REF_PS_UNORDERED);
        PP_CASE(REF_PS_TABLE);
        PP_CASE(REF_PS_TABLE_NC);
        PP_CASE(REF_PS_PARAM);
        PP_CASE(OP_SIGNAL_RELAXED);
        PP_CASE(REF_PS_LIBWAIT);
        PP_CASE(REF_PS_LIBSIGNAL);
        PP_CASE(REF_PS_LIBPUT);
        PP_CASE(OP_PKT_THREAD);
        PP_CASE(OP_PKT_WARP);
        PP_CASE(OP_PKT_BLOCK);
        PP_CASE(REF_RELAXED_ACQ);
        PP_CASE(REF_RELAXED_LIBWAIT);
        PP_CASE(REF_RELAXED_LIBSIGNAL);
    }
#undef PP_CASE
    BENCH_CHECK_LAUNCH("pingpong");
}

/* One round of the in-launch kernels' split form, written out as a kernel of one mode has it: the initiator
 * sends, then waits; the other rank waits, then sends. true when the wait failed. */
template <typename Send, typename Wait>
static __device__ __forceinline__ bool ab_round_split(int initiator, Send &send, Wait &wait)
{
    bool failed;
    if (initiator) {
        send();
        failed = wait();
    } else if (!(failed = wait())) {
        send();
    }
    return failed;
}

/* Goal 2's ratio measured in one launch: chunks of `chunk` rounds alternate between the raw relaxed flag (a
 * relaxed store, a relaxed poll loop, as REF_RELAXED) and DION's relaxed signal (dion_signal SET_RELAXED,
 * dion_wait), on the same word, the same two blocks and the same clocks. Rows launched one after another
 * vary by up to 0.1 us with the same code (H200, 2026-12-02: on one GPU signal_relaxed_pingpong took 0.398
 * or 0.491 us, two states; on another 0.279-0.332), so a ratio of two rows launched apart carries that; here
 * both halves run in the same launch. It removes the launch-to-launch part, not all of it: on the first GPU
 * the ratio was 1.04-1.065 in 11 launches, on the second 1.12-1.30 in 30, where the raw half still varied
 * (0.265-0.305 us) and DION's did not (0.341-0.345; docs/results/2026-12-02-h200-s7). The first two chunks
 * are warm-up. out[0] / out[2]: the raw / DION chunks' time on rank 0; out[1]: a failed wait.
 * split 0 (the rows signal_ab_*): every round tests which mode it runs, and ptxas gives one mode the
 * fall-through on the turnaround (sm_90, nvcc 13.0: the raw one, on the send and on the wait's exit; a taken
 * branch there costs about 22 cycles, docs/results/2026-12-02-h200-s9). split 1 (signal_ab_split_*): each
 * mode's rounds are a loop of their own, entered once per chunk, with the round written out (send then wait,
 * or wait then send) as a kernel of one mode would have it; ptxas then compiles each loop on its own, and
 * the raw one, being small, more tightly. */
template <int mode> /* 0 raw, 1 DION, -1 the run-time lib */
static __device__ __forceinline__ int signal_ab_rounds(dion_ctx_t c, int lib, int peer, int initiator,
                                                       uint32_t scope, uint64_t *mysig, uint64_t *peersig,
                                                       uint64_t *v, int chunk)
{
    const int dion_mode = mode < 0 ? lib : mode;
    auto send = [&] {
        if (dion_mode)
            dion_signal(c, peer, 0, DION_SIG_SET_RELAXED, *v);
        else
            dion__st_relaxed(peersig, *v, scope);
    };
    auto wait = [&] {
        if (dion_mode) return dion_wait(c, 0, DION_CMP_EQ, *v, NULL) != DION_SUCCESS;
        while (dion__ld_relaxed(mysig, scope) != *v) {
        }
        return false;
    };
    for (int i = 0; i < chunk; i++) {
        ++*v;
        if (mode >= 0) { /* split: the round written out, as a kernel of one mode would be */
            if (ab_round_split(initiator, send, wait)) return 1; /* the host sees the error record too */
            continue;
        }
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == initiator)
                send();
            else if (wait())
                return 1; /* the host sees the error record too */
        }
    }
    return 0;
}

template <int split>
__global__ void __launch_bounds__(1, 1)
    signal_ab(dion_dev_t dev, int chunks, int chunk, uint64_t base, unsigned long long *out)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t scope = dion__dev_scope(&dev);
    uint64_t *mysig = dev.signals, *peersig = dion__peer_signals(&dev, peer);
    uint64_t v = base, spent_raw = 0, spent_lib = 0;
    for (int k = 0; k < chunks; k++) {
        const int lib = k & 1;
        const uint64_t t0 = bench_now_ns();
        int failed;
        if (!split)
            failed = signal_ab_rounds<-1>(c, lib, peer, initiator, scope, mysig, peersig, &v, chunk);
        else if (lib)
            failed = signal_ab_rounds<1>(c, lib, peer, initiator, scope, mysig, peersig, &v, chunk);
        else
            failed = signal_ab_rounds<0>(c, lib, peer, initiator, scope, mysig, peersig, &v, chunk);
        if (failed) {
            out[1] = 1;
            return;
        }
        const uint64_t dt = k >= 2 ? bench_now_ns() - t0 : 0;
        if (lib)
            spent_lib += dt;
        else
            spent_raw += dt;
    }
    if (initiator) out[0] = spent_raw, out[2] = spent_lib;
}

/* Goal 3 in one launch, as signal_ab for goal 2: chunks of `chunk` rounds of an 8-byte ping-pong rotate
 * between the goal's named floor (the raw unordered put: an 8-byte store of the payload, then a relaxed flag
 * on signal 0, mode 0), a packet by hand (the payload and its sequence in one 16-byte relaxed store; the
 * receiver polls the unit and stores the payload, mode 1) and dion_put_packet / dion_wait_packet (mode 2).
 * Every mode takes its payload from the window at PP_SRC and lands it at PP_DST; the packets go through the
 * same unit at PP_PKT. The hand-written modes get their addresses as parameters, computed once. The first
 * three chunks are warm-up. out[0] / out[2] / out[3]: the modes' time on rank 0; out[1]: a failed wait.
 * split: as in signal_ab. */
template <int fixed> /* the mode, or -1 for the run-time one */
static __device__ __forceinline__ int packet_ab_rounds(dion_ctx_t c, dion_dwin_t win, int run_mode, int peer,
                                                       int initiator, uint32_t scope, uint32_t pscope,
                                                       uint64_t *mysig, uint64_t *peersig, char *mine,
                                                       char *theirs, uint64_t *v, int chunk)
{
    const int mode = fixed < 0 ? run_mode : fixed;
    uint32_t seq = 0;
    auto send = [&] {
        const uint64_t x = *(const uint64_t *)(mine + PP_SRC);
        if (mode == 0) {
            *(uint64_t *)(theirs + PP_DST) = x;
            dion__st_relaxed(peersig, *v, scope);
        } else if (mode == 1) {
            const uint64_t flag = (uint64_t)seq << 32;
            dion__pkt_store((uint64_t *)(theirs + PP_PKT), flag | (uint32_t)x, flag | (x >> 32), pscope);
        } else {
            dion_put_packet(c, win, peer, PP_PKT, mine + PP_SRC, 8, seq);
        }
    };
    auto wait = [&] {
        if (mode == 0) {
            while (dion__ld_relaxed(mysig, scope) != *v) {
            }
        } else if (mode == 1) {
            uint64_t w0, w1;
            do {
                dion__pkt_load((const uint64_t *)(mine + PP_PKT), &w0, &w1, scope);
            } while (!dion__pkt_whole(w0, w1, seq));
            *(uint64_t *)(mine + PP_DST) = (w1 << 32) | (uint32_t)w0;
        } else {
            return dion_wait_packet(c, win, PP_PKT, mine + PP_DST, 8, seq) != DION_SUCCESS;
        }
        return false;
    };
    for (int i = 0; i < chunk; i++) {
        ++*v;
        seq = (uint32_t)*v; /* the host keeps v below 2^32 */
        if (fixed >= 0) {   /* split: the round written out, as a kernel of one mode would be */
            if (ab_round_split(initiator, send, wait)) return 1; /* the host sees the error record too */
            continue;
        }
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == initiator)
                send();
            else if (wait())
                return 1; /* the host sees the error record too */
        }
    }
    return 0;
}

template <int split>
__global__ void __launch_bounds__(1, 1)
    packet_ab(dion_dev_t dev, dion_dwin_t win, int chunks, int chunk, uint64_t base, unsigned long long *out,
              char *mine, char *theirs)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t scope = dion__dev_scope(&dev), pscope = dion__peer_scope(&dev, peer) | scope;
    uint64_t *mysig = dev.signals, *peersig = dion__peer_signals(&dev, peer);
    uint64_t v = base, spent_raw = 0, spent_hand = 0, spent_lib = 0; /* scalars: an array would be stack */
    for (int k = 0; k < chunks; k++) {
        const int mode = k % 3;
        const uint64_t t0 = bench_now_ns();
#define PACKET_AB_ROUNDS(m)                                                                                  \
    packet_ab_rounds<m>(c, win, mode, peer, initiator, scope, pscope, mysig, peersig, mine, theirs, &v, chunk)
        const int failed = !split      ? PACKET_AB_ROUNDS(-1)
                           : mode == 0 ? PACKET_AB_ROUNDS(0)
                           : mode == 1 ? PACKET_AB_ROUNDS(1)
                                       : PACKET_AB_ROUNDS(2);
#undef PACKET_AB_ROUNDS
        if (failed) {
            out[1] = 1;
            return;
        }
        const uint64_t dt = k >= 3 ? bench_now_ns() - t0 : 0;
        if (mode == 0)
            spent_raw += dt;
        else if (mode == 1)
            spent_hand += dt;
        else
            spent_lib += dt;
    }
    if (initiator) out[0] = spent_raw, out[2] = spent_hand, out[3] = spent_lib;
}

/* Where the unit sits, in one launch: packet_ab's written-out round of three modes (here a raw relaxed flag
 * on the unit's own word, a packet by hand and DION's packet) at PLACE_N addresses PP_PKT + i * stride, chunk
 * k running mode k % 3 at address (k / 3) % PLACE_N, so that every address and mode gets the same share of
 * the launch. It tells a cost that follows the address (where the line sits in L2) from one that follows the
 * code: a mode's gap to another at the same address is the code's. The first 3 * PLACE_N chunks warm up.
 * out[4 + 3 i + m]: rank 0's time of mode m at address i; out[2 + rank]: the rank's SM; out[1]: a failed
 * wait. */
#define PLACE_N 32
template <int mode>
static __device__ __forceinline__ int place_rounds(dion_ctx_t c, dion_dwin_t win, int peer, int initiator,
                                                   uint32_t scope, uint32_t pscope, char *mine, char *theirs,
                                                   size_t at, uint64_t *v, int chunk)
{
    uint32_t seq = 0;
    auto send = [&] {
        if (mode == 0) {
            dion__st_relaxed((uint64_t *)(theirs + at), *v, pscope);
        } else if (mode == 1) {
            const uint64_t x = *(const uint64_t *)(mine + PP_SRC), flag = (uint64_t)seq << 32;
            dion__pkt_store((uint64_t *)(theirs + at), flag | (uint32_t)x, flag | (x >> 32), pscope);
        } else {
            dion_put_packet(c, win, peer, at, mine + PP_SRC, 8, seq);
        }
    };
    auto wait = [&] {
        if (mode == 0) {
            while (dion__ld_relaxed((const uint64_t *)(mine + at), scope) != *v) {
            }
        } else if (mode == 1) {
            uint64_t w0, w1;
            do {
                dion__pkt_load((const uint64_t *)(mine + at), &w0, &w1, scope);
            } while (!dion__pkt_whole(w0, w1, seq));
            *(uint64_t *)(mine + PP_DST) = (w1 << 32) | (uint32_t)w0;
        } else {
            return dion_wait_packet(c, win, at, mine + PP_DST, 8, seq) != DION_SUCCESS;
        }
        return false;
    };
    for (int i = 0; i < chunk; i++) {
        ++*v;
        seq = (uint32_t)*v;
        if (ab_round_split(initiator, send, wait)) return 1;
    }
    return 0;
}

__global__ void __launch_bounds__(1, 1)
    packet_place(dion_dev_t dev, dion_dwin_t win, int chunks, int chunk, uint64_t base,
                 unsigned long long *out, char *mine, char *theirs, uint64_t stride)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t scope = dion__dev_scope(&dev), pscope = dion__peer_scope(&dev, peer) | scope;
    uint64_t v = base;
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    out[2 + me] = smid;
    for (int k = 0; k < chunks; k++) {
        const int mode = k % 3, i = (k / 3) % PLACE_N;
        const size_t at = PP_PKT + (size_t)i * stride;
        const uint64_t t0 = bench_now_ns();
        const int failed =
            mode == 0 ? place_rounds<0>(c, win, peer, initiator, scope, pscope, mine, theirs, at, &v, chunk)
            : mode == 1
                ? place_rounds<1>(c, win, peer, initiator, scope, pscope, mine, theirs, at, &v, chunk)
                : place_rounds<2>(c, win, peer, initiator, scope, pscope, mine, theirs, at, &v, chunk);
        if (failed) {
            out[1] = 1;
            return;
        }
        if (initiator && k >= 3 * PLACE_N) out[4 + 3 * i + mode] += bench_now_ns() - t0;
    }
}

/* Goal 2's gap taken apart in one launch: the split rounds of signal_ab with its halves swapped one at a
 * time, SIGNAL_PARTS modes rotating 100 rounds at a time (the first SIGNAL_PARTS chunks warm up). Each mode's
 * rounds are a loop of their own. Rank 0's time of mode m is out[signal_parts_slot(m)]; out[1]: a failed
 * wait. The modes, by name (signal_parts_names):
 * - the acquire after relaxed polls: none (raw_send_raw_wait, the reference), fence.acquire.sys after the hit
 *   (fence: DION__WAIT_POLL 3's, by hand), one ld.acquire of the word after the hit (ldacq: POLL 1's), every
 *   poll an ld.acquire (acqpoll: POLL 0's);
 * - DION's halves: dion_signal SET_RELAXED as the send, dion_wait as the wait, or both; the send's inline
 *   p2p path alone (inline: dion__signal_p2p), the wait's word loop alone (waitword: dion__wait_word);
 * - dion_wait's loop shape by hand: 8 polls then the abort word (batch8), a count-down beside each poll
 *   (countdown);
 * - the price of time between the wait's hit and the send: delay20/60/120 clock cycles spent there;
 * - more loads in flight: the sender sets two words, 128 bytes (two_lines) or 32 bytes (two_sectors) apart,
 *   and the waiter polls both, the second load 160 cycles behind (stag2); or polls only the first
 *   (two_lines_one_polled: the cost of the second store alone). */
#define SIGNAL_PARTS 18
static const char *const signal_parts_names[SIGNAL_PARTS] = {"raw_send_raw_wait",
                                                             "raw_send_fence_wait",
                                                             "raw_send_ldacq_wait",
                                                             "raw_send_acqpoll_wait",
                                                             "dion_send_raw_wait",
                                                             "raw_send_dion_wait",
                                                             "dion_send_dion_wait",
                                                             "raw_delay20",
                                                             "raw_delay60",
                                                             "raw_send_batch8_wait",
                                                             "raw_send_countdown_wait",
                                                             "inline_send_raw_wait",
                                                             "raw_send_waitword_wait",
                                                             "inline_send_waitword_wait",
                                                             "raw_delay120",
                                                             "two_lines_stag2_wait",
                                                             "two_sectors_stag2_wait",
                                                             "two_lines_one_polled_wait"};
/* modes 7, 8, 14: the raw round with this many clock cycles spent between the wait's hit and the send */
static __device__ __forceinline__ constexpr int signal_parts_delay(int m)
{
    return m == 7 ? 20 : m == 8 ? 60 : 120;
}
/* modes 15-17: the second word the sender sets, 128 bytes (another line) or 32 bytes (another sector) on */
static __device__ __forceinline__ constexpr int signal_parts_twin(int m)
{
    return m == 16 ? 4 : 16;
}
static __device__ __host__ constexpr int signal_parts_slot(int m)
{
    return m == 0 ? 0 : m + 1;
}

template <int mode>
static __device__ __forceinline__ int signal_parts_rounds(dion_ctx_t c, int peer, int initiator,
                                                          uint32_t scope, uint64_t *mysig, uint64_t *peersig,
                                                          uint64_t *v, int chunk)
{
    constexpr bool dion_send = mode == 4 || mode == 6, dion_wait_ = mode == 5 || mode == 6;
    constexpr bool inline_send = mode == 11 || mode == 13, word_wait = mode == 12 || mode == 13;
    auto send = [&] {
        if (dion_send)
            dion_signal(c, peer, 0, DION_SIG_SET_RELAXED, *v);
        else if (inline_send)
            dion__signal_p2p(&c, peer, 0, DION_SIG_SET_RELAXED, *v, DION__LK_INLINE);
        else if (mode >= 15) {
            dion__st_relaxed(peersig, *v, scope);
            dion__st_relaxed(peersig + signal_parts_twin(mode), *v, scope);
        } else
            dion__st_relaxed(peersig, *v, scope);
    };
    auto wait = [&] {
        if (dion_wait_) return dion_wait(c, 0, DION_CMP_EQ, *v, NULL) != DION_SUCCESS;
        if (word_wait)
            return dion__wait_word(&c, c.dev.signals, DION_CMP_EQ, *v, NULL, DION_OP_WAIT, 0) != DION_SUCCESS;
        if (mode == 9) { /* the shape of dion_wait's loop by hand: 8 polls, then the abort word */
            const uint64_t *abort_word = dion__ctl_word(&c.dev, c.dev.signals, DION_CTL_ABORT);
            for (;;) {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (dion__ld_relaxed(mysig, scope) == *v) goto hit9;
                if (dion__ld_relaxed(abort_word, scope)) return true;
            }
        hit9:
            asm volatile("fence.acquire.sys;" ::: "memory");
            return false;
        }
        if (mode == 10) { /* a count-down beside each poll; the hit falls out of the loop */
            const uint64_t *abort_word = dion__ctl_word(&c.dev, c.dev.signals, DION_CTL_ABORT);
            for (;;) {
                uint32_t k = 128;
                uint64_t x;
                do {
                    x = dion__ld_relaxed(mysig, scope);
                } while (x != *v && --k);
                if (x == *v) break;
                if (dion__ld_relaxed(abort_word, scope)) return true;
            }
            asm volatile("fence.acquire.sys;" ::: "memory");
            return false;
        }
        if (mode == 3) {
            while (dion__ld_acquire(mysig, scope) != *v) {
            }
            return false;
        }
        if (mode == 15 || mode == 16) { /* two loads in flight, on two words the sender both sets */
            const uint64_t *other = mysig + signal_parts_twin(mode);
            uint64_t w0 = dion__ld_relaxed(mysig, scope);
            const long long t = clock64();
            while (clock64() - t < 160) {
            }
            uint64_t w1 = dion__ld_relaxed(other, scope);
            for (;;) {
                if (w0 == *v) break;
                w0 = dion__ld_relaxed(mysig, scope);
                if (w1 == *v) break;
                w1 = dion__ld_relaxed(other, scope);
            }
            return false;
        }
        if (mode == 7 || mode == 8 || mode == 14) {
            while (dion__ld_relaxed(mysig, scope) != *v) {
            }
            const long long t = clock64();
            while (clock64() - t < signal_parts_delay(mode)) {
            }
            return false;
        }
        while (dion__ld_relaxed(mysig, scope) != *v) {
        }
        if (mode == 1) asm volatile("fence.acquire.sys;" ::: "memory");
        if (mode == 2 && dion__ld_acquire(mysig, scope) != *v) return true; /* the word only grows here */
        return false;
    };
    for (int i = 0; i < chunk; i++) {
        ++*v;
        if (ab_round_split(initiator, send, wait)) return 1; /* the host sees the error record too */
    }
    return 0;
}

__global__ void __launch_bounds__(1, 1)
    signal_parts(dion_dev_t dev, int chunks, int chunk, uint64_t base, unsigned long long *out)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t scope = dion__dev_scope(&dev);
    uint64_t *mysig = dev.signals, *peersig = dion__peer_signals(&dev, peer);
    uint64_t v = base, spent[SIGNAL_PARTS] = {0};
    for (int k = 0; k < chunks; k++) {
        const int mode = k % SIGNAL_PARTS;
        const uint64_t t0 = bench_now_ns();
        int failed;
        switch (mode) {
#define SIGNAL_PARTS_CASE(m)                                                                                 \
    case m:                                                                                                  \
        failed = signal_parts_rounds<m>(c, peer, initiator, scope, mysig, peersig, &v, chunk);               \
        break;
            SIGNAL_PARTS_CASE(0)
            SIGNAL_PARTS_CASE(1)
            SIGNAL_PARTS_CASE(2)
            SIGNAL_PARTS_CASE(3)
            SIGNAL_PARTS_CASE(4)
            SIGNAL_PARTS_CASE(5)
            SIGNAL_PARTS_CASE(6)
            SIGNAL_PARTS_CASE(7)
            SIGNAL_PARTS_CASE(8)
            SIGNAL_PARTS_CASE(9)
            SIGNAL_PARTS_CASE(10)
            SIGNAL_PARTS_CASE(11)
            SIGNAL_PARTS_CASE(12)
            SIGNAL_PARTS_CASE(13)
            SIGNAL_PARTS_CASE(14)
            SIGNAL_PARTS_CASE(15)
            SIGNAL_PARTS_CASE(16)
        default:
            failed = signal_parts_rounds<17>(c, peer, initiator, scope, mysig, peersig, &v, chunk);
#undef SIGNAL_PARTS_CASE
        }
        if (failed) {
            out[1] = 1;
            return;
        }
        const uint64_t dt = k >= SIGNAL_PARTS ? bench_now_ns() - t0 : 0;
#pragma unroll
        for (int m = 0; m < SIGNAL_PARTS; m++) /* unrolled with constant indices: registers, not stack */
            if (m == mode) spent[m] += dt;
    }
    if (initiator)
#pragma unroll
        for (int m = 0; m < SIGNAL_PARTS; m++) out[signal_parts_slot(m)] = spent[m];
}

/* Put bandwidth: the blocks split total bytes into chunks, each a dion_put_block; then each block quiets.
 * Launched with 512 threads: the bound keeps it within 128 registers, which builds with deeper copies
 * (DION__COPY_UNROLL 8 or 16: 160-240 unbounded) would exceed, and then fail to launch. */
__global__ void __launch_bounds__(512)
    put_bw(dion_dev_t dev, dion_dwin_t win, size_t total, size_t chunk, size_t dst_base, int peer)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    for (size_t off = (size_t)blockIdx.x * chunk; off < total; off += (size_t)gridDim.x * chunk) {
        size_t n = total - off < chunk ? total - off : chunk;
        dion_put_block(c, win, peer, dst_base + off, win, off, n);
    }
    if (threadIdx.x == 0) dion_quiet(c);
}

/* The same copy by hand: int4 loads and stores through the mapped pointer (calibration). */
__global__ void ref_copy_bw(const int4 *src, int4 *dst, size_t n16)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) dst[i] = src[i];
}

/* put + quiet, one after another: completion latency. group 0 thread, 2 block (one kernel each). */
template <int group>
__global__ void __launch_bounds__(group == 2 ? 1024 : 32, 1)
    completion(dion_dev_t dev, dion_dwin_t win, size_t bytes, int iters, int warmup, unsigned long long *out)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    uint64_t t0 = 0;
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) t0 = bench_now_ns();
        if (group == 2)
            dion_put_block(c, win, 1, PP_DST, win, PP_SRC, bytes);
        else if (threadIdx.x == 0)
            dion_put(c, win, 1, PP_DST, win, PP_SRC, bytes);
        if (threadIdx.x == 0) dion_quiet(c);
        if (group == 2) __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = bench_now_ns() - t0;
}

/* put + quiet split into what dion-perf's round adds to completion<> (its block row was 1.2 us above this
 * one's on one H200): bit 0 the quiet's status is tested (the abort word is read), bit 1 the group learns of
 * a failure at the barrier (__syncthreads_or), bit 2 thread 0 stores each round's time, bit 3 the peer is a
 * kernel parameter. Each row is the mean per round; the data check after it covers every mode. */
template <int group, int mode>
__global__ void __launch_bounds__(group == 2 ? 1024 : 32, 1)
    completion_split(dion_dev_t dev, dion_dwin_t win, int peer_arg, size_t bytes, int iters, int warmup,
                     unsigned long long *out, unsigned long long *times)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int peer = (mode & 8) ? peer_arg : 1;
    uint64_t t0 = 0, prev = 0;
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) t0 = prev = bench_now_ns();
        if (group == 2)
            dion_put_block(c, win, peer, PP_DST, win, PP_SRC, bytes);
        else if (threadIdx.x == 0)
            dion_put(c, win, peer, PP_DST, win, PP_SRC, bytes);
        int bad = 0;
        if (threadIdx.x == 0) {
            dion_status_t st = dion_quiet(c);
            if ((mode & 1) && st != DION_SUCCESS) out[1] = 1, bad = 1;
        }
        if (group == 2) {
            if (mode & 2) {
                if (__syncthreads_or(bad)) return;
            } else {
                __syncthreads();
            }
        }
        /* a block without the vote goes on to its end (out[1] tells the host): thread 0 leaving alone would
         * leave the others at the next barrier */
        if (group != 2 && bad) return;
        if ((mode & 4) && threadIdx.x == 0 && i >= warmup) {
            uint64_t now = bench_now_ns();
            times[i - warmup] = now - prev;
            prev = now;
        }
    }
    if (threadIdx.x == 0) out[0] = bench_now_ns() - t0;
}

/* Message rate: every thread issues per_thread 8-byte puts to distinct words, then one quiet per block. */
__global__ void msgrate(dion_dev_t dev, dion_dwin_t win, int per_thread, size_t region)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    for (int i = 0; i < per_thread; i++) {
        size_t word = (t + (size_t)i * nt) % (region / 8);
        dion_put(c, win, 1, PP_DST + word * 8, win, PP_SRC + (word % 1024) * 8, 8);
    }
    __syncthreads();
    if (threadIdx.x == 0) dion_quiet(c);
}

static dion_comm_t comm;
static int nranks_;

/* A peer's mapped window base, read back from the device-side table (for hand-written reference code). */
static char *peer_base_of(dion_dwin_t dwin, int peer)
{
    std::vector<char> tab(offsetof(struct dion_win_dev, peer) + sizeof(struct dion_win_peer) * nranks_);
    BENCH_CHECK_CUDA(cudaMemcpy(tab.data(), dwin, tab.size(), cudaMemcpyDeviceToHost));
    return dion__win_peer((dion_dwin_t)tab.data(), peer)->base;
}
static int rank_;

#define OK(call)                                                                                             \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) {                                                                            \
            fprintf(stderr, "FAIL rank %d: %s: %s: %s\n", rank_, #call, dion_status_string(s_),              \
                    dion_last_error());                                                                      \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* One launch of an in-launch A/B kernel (signal_ab, packet_ab): the ranks meet with out cleared, ranks 0 and
 * 1 launch it, and its first nr words of out come back in r. 1 when the kernel (r[1]) or the handle's error
 * ring reports a failure, which is printed. */
template <typename Launch>
static int run_ab_launch(const dion_dev_t *dev, unsigned long long *out, int active, const char *name,
                         Launch launch, unsigned long long *r, size_t nr)
{
    OK(dion_comm_barrier(comm));
    BENCH_CHECK_CUDA(cudaMemset(out, 0, OUT_BYTES));
    OK(dion_comm_barrier(comm));
    if (active) {
        launch();
        BENCH_CHECK_LAUNCH(name);
        BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    }
    BENCH_CHECK_CUDA(cudaMemcpy(r, out, nr * sizeof *r, cudaMemcpyDeviceToHost));
    if (r[1] || dion_dev_check(comm, dev) != DION_SUCCESS) {
        fprintf(stderr, "FAIL rank %d: %s: %s\n", rank_, name, dion_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    bench_parse(argc, argv, &o);
    OK(dion_comm_init_env(&comm));
    rank_ = dion_comm_rank(comm);
    nranks_ = dion_comm_size(comm);
    if (nranks_ < 2) {
        fprintf(stderr, "p2p_bench needs 2 ranks (dionrun -n 2)\n");
        return 2;
    }
    const int active = rank_ < 2, peer = rank_ ^ 1;
    cudaDeviceProp prop;
    int dev_id = 0;
    BENCH_CHECK_CUDA(cudaGetDevice(&dev_id));
    BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, dev_id));
    int want_bw = bench_wants(&o, "put_bw") || bench_wants(&o, "ref");
    size_t win_bytes = want_bw ? 2 * (size_t)o.bw_bytes : (64ull << 20);
    if (win_bytes < (64ull << 20)) win_bytes = 64ull << 20;
    char *base = NULL;
    dion_win_t win;
    OK(dion_win_alloc(comm, win_bytes, 0, (void **)&base, &win));
    dion_dwin_t dwin = dion_win_device(win);
    /* the handle is made after the window, so kernels find the window in the handle's slots */
    dion_dev_attr_t attr = {64, 1, 0, 0};
    dion_dev_t dev;
    OK(dion_dev_create(comm, &attr, &dev));
    bench_fill<<<prop.multiProcessorCount * 4, 512>>>(base, win_bytes / 2, rank_);
    BENCH_CHECK_LAUNCH("bench_fill");
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    unsigned long long *out;
    BENCH_CHECK_CUDA(cudaMalloc(&out, OUT_BYTES));
    /* clocks up before timing anything */
    bench_spin<<<prop.multiProcessorCount, 256>>>(400000000ull, out);
    BENCH_CHECK_LAUNCH("bench_spin");
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    if (rank_ == 0)
        printf("# DION p2p bench: %d ranks, GPU %s (%d SMs), %s, iters %d\n", nranks_, prop.name,
               prop.multiProcessorCount, (dev.flags & DION_DEVF_SYS) ? "system scope" : "GPU scope", o.iters);
    int failures = 0;
    uint64_t base_value = 0;

    /* ---- ping-pongs ---- */
    std::vector<bench_pp_case_t> cases = bench_pp_cases(&o, OP_SIGNAL, OP_PS_THREAD, OP_PS_WARP, OP_PS_BLOCK);
    if (bench_wants(&o, "signal"))
        cases.insert(cases.begin() + 1, {"signal_relaxed_pingpong", "thread", OP_SIGNAL_RELAXED, 1, 0});
    /* packets at every power of two from 8 B to 4 KiB, and put_signal at the sizes its own test leaves out
     * (all of them when that test does not run), so that perf/plot.py finds the crossover between two
     * neighbouring sizes of the same run */
    if (bench_wants(&o, "packet"))
        for (long long b = 8; b <= 4096; b *= 2) {
            int ps_row = 0;
            for (int s = 0; s < BENCH_PS_NSIZES; s++)
                ps_row |= bench_ps_sizes[s] == b && bench_wants(&o, "put_signal");
            static const char *const gn[3] = {"thread", "warp", "block"};
            static const int threads[3] = {1, 32, 1024};
            for (int g = 0; g < 3; g++) {
                if (!bench_wants_row(&o, b, gn[g])) continue;
                cases.push_back({"packet_pingpong", gn[g], OP_PKT_THREAD + g, threads[g], b});
                if (!ps_row) cases.push_back({"put_signal_pingpong", gn[g], OP_PS_THREAD + g, threads[g], b});
            }
        }
    /* refpp: the reference ping-pongs alone, without ref's 1 GiB copy (perf/run_gpu.sh's ab step) */
    if (bench_wants(&o, "ref") || bench_wants(&o, "refpp")) {
        cases.push_back({"ref_put8_table", "thread", REF_PS_TABLE, 1, 8});
        cases.push_back({"ref_put8_table_nc", "thread", REF_PS_TABLE_NC, 1, 8});
        cases.push_back({"ref_put8_param", "thread", REF_PS_PARAM, 1, 8});
        cases.push_back({"ref_put8_param_libwait", "thread", REF_PS_LIBWAIT, 1, 8});
        cases.push_back({"ref_put8_param_libsignal", "thread", REF_PS_LIBSIGNAL, 1, 8});
        cases.push_back({"ref_put8_libput", "thread", REF_PS_LIBPUT, 1, 8});
        cases.push_back({"ref_flag_volatile", "thread", REF_VOLATILE, 1, 0});
        cases.push_back({"ref_flag_relaxed", "thread", REF_RELAXED, 1, 0});
        /* the relaxed signal's gap split: the acquire's own cost, then DION on one side each */
        cases.push_back({"ref_flag_relaxed_acq", "thread", REF_RELAXED_ACQ, 1, 0});
        cases.push_back({"ref_flag_relaxed_libwait", "thread", REF_RELAXED_LIBWAIT, 1, 0});
        cases.push_back({"ref_flag_relaxed_libsignal", "thread", REF_RELAXED_LIBSIGNAL, 1, 0});
        cases.push_back({"ref_flag_release", "thread", REF_RELEASE, 1, 0});
        cases.push_back({"ref_put8_unordered", "thread", REF_PS_UNORDERED, 1, 8});
    }
    for (const bench_pp_case_t &pc : cases) {
        int iters, warmup;
        bench_pp_iters(&o, pc.bytes, &iters, &warmup);
        OK(dion_comm_barrier(comm));
        BENCH_CHECK_CUDA(cudaMemset(base + PP_DST, 0, pc.bytes ? pc.bytes : 8));
        BENCH_CHECK_CUDA(cudaMemset(base + PP_PKT, 0, DION_PACKET_SPAN(pc.bytes ? pc.bytes : 8)));
        BENCH_CHECK_CUDA(cudaMemset(out, 0, OUT_BYTES));
        OK(dion_comm_barrier(comm));
        if (active) {
            launch_pingpong(pc.op, pc.threads, dev, dwin, (size_t)pc.bytes, iters, warmup, base_value, out,
                            peer_base_of(dwin, peer), base);
            BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        }
        base_value += (uint64_t)(iters + warmup);
        unsigned long long r[2];
        BENCH_CHECK_CUDA(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
        if (r[1] || dion_dev_check(comm, &dev) != DION_SUCCESS) {
            fprintf(stderr, "FAIL rank %d: %s %s: %s\n", rank_, pc.test, pc.group, dion_last_error());
            failures++;
        }
        if (active && pc.bytes && pc.op != REF_PS_UNORDERED)
            failures += bench_check_landed("dion", base, PP_DST, PP_SRC, (size_t)pc.bytes, peer, pc.test);
        if (rank_ == 0)
            bench_row(&o, "dion", pc.test, pc.group, pc.bytes, "oneway_us", (double)r[0] / iters / 2 / 1000);
    }

    /* goal 2's ratio in one launch (signal_ab above): the raw relaxed flag and DION's relaxed signal
     * interleaved, 100 rounds at a time; both forms (the mode tested every round, then once per chunk) */
    if (bench_wants(&o, "signal") || bench_wants(&o, "signal_ab")) {
        const int chunk = 100, per_mode = (o.iters + chunk - 1) / chunk, chunks = 2 + 2 * per_mode;
        for (int split = 0; split < 2; split++) {
            unsigned long long r[3];
            const int failed = run_ab_launch(
                &dev, out, active, "signal_ab",
                [&] {
                    if (split)
                        signal_ab<1><<<1, 1>>>(dev, chunks, chunk, base_value, out);
                    else
                        signal_ab<0><<<1, 1>>>(dev, chunks, chunk, base_value, out);
                },
                r, 3);
            base_value += (uint64_t)chunks * chunk;
            failures += failed;
            if (!failed && rank_ == 0) {
                const double rounds = (double)per_mode * chunk;
                bench_row(&o, "dion", split ? "signal_ab_split_raw_relaxed" : "signal_ab_raw_relaxed",
                          "thread", 0, "oneway_us", (double)r[0] / rounds / 2 / 1000);
                bench_row(&o, "dion", split ? "signal_ab_split_relaxed" : "signal_ab_relaxed", "thread", 0,
                          "oneway_us", (double)r[2] / rounds / 2 / 1000);
            }
        }
    }

    /* goal 2's gap taken apart (signal_parts above): the split round with one part swapped at a time */
    if (bench_wants(&o, "signal_parts") && dev.num_signals <= 16) { /* modes 15-17 set signals 4 and 16 */
        if (rank_ == 0)
            printf("# signal_parts skipped: it needs more than 16 signals, the handle has %u\n",
                   dev.num_signals);
    } else if (bench_wants(&o, "signal_parts")) {
        const int chunk = 100, per_mode = (o.iters + chunk - 1) / chunk;
        const int chunks = SIGNAL_PARTS * (1 + per_mode);
        unsigned long long r[SIGNAL_PARTS + 1];
        const int failed = run_ab_launch(
            &dev, out, active, "signal_parts",
            [&] { signal_parts<<<1, 1>>>(dev, chunks, chunk, base_value, out); }, r, SIGNAL_PARTS + 1);
        base_value += (uint64_t)chunks * chunk;
        failures += failed;
        if (!failed && rank_ == 0)
            for (int m = 0; m < SIGNAL_PARTS; m++) {
                char name[64];
                snprintf(name, sizeof name, "signal_parts_%s", signal_parts_names[m]);
                bench_row(&o, "dion", name, "thread", 0, "oneway_us",
                          (double)r[signal_parts_slot(m)] / ((double)per_mode * chunk) / 2 / 1000);
            }
    }

    /* goal 3 in one launch (packet_ab above): the raw unordered put + flag, a packet by hand and DION's
     * packet interleaved, 100 rounds at a time, in both forms; then the payload the last round landed is
     * checked */
    if (bench_wants(&o, "packet") || bench_wants(&o, "packet_ab")) {
        const int chunk = 100, per_mode = (o.iters + chunk - 1) / chunk, chunks = 3 + 3 * per_mode;
        for (int split = 0; split < 2; split++) {
            unsigned long long r[4];
            BENCH_CHECK_CUDA(cudaMemset(base + PP_DST, 0, 8)); /* before the ranks meet: nothing lands yet */
            const int failed = run_ab_launch(
                &dev, out, active, "packet_ab",
                [&] {
                    char *theirs = peer_base_of(dwin, peer); /* ranks 0 and 1 only: the others have no peer */
                    if (split)
                        packet_ab<1><<<1, 1>>>(dev, dwin, chunks, chunk, base_value, out, base, theirs);
                    else
                        packet_ab<0><<<1, 1>>>(dev, dwin, chunks, chunk, base_value, out, base, theirs);
                },
                r, 4);
            base_value += (uint64_t)chunks * chunk;
            failures += failed;
            if (failed) continue;
            if (active) failures += bench_check_landed("dion", base, PP_DST, PP_SRC, 8, peer, "packet_ab");
            if (rank_ == 0) {
                const double rounds = (double)per_mode * chunk;
                static const char *const names[2][3] = {
                    {"packet_ab_raw_put_flag", "packet_ab_by_hand", "packet_ab_dion"},
                    {"packet_ab_split_raw_put_flag", "packet_ab_split_by_hand", "packet_ab_split_dion"}};
                static const int slot[3] = {0, 2, 3};
                for (int m = 0; m < 3; m++)
                    bench_row(&o, "dion", names[split][m], "thread", 8, "oneway_us",
                              (double)r[slot[m]] / rounds / 2 / 1000);
            }
        }
    }

    /* packet_place above: 8 timed passes over the 32 addresses at each stride, one launch per stride; a row's
     * bytes column holds the address's index i (the payload is 8 bytes in every row) */
    if (bench_wants(&o, "packet_place")) {
        const int chunk = 100, reps = 8, chunks = 3 * PLACE_N * (1 + reps);
        const uint64_t strides[] = {128, 1024, 4096, 65536};
        for (uint64_t stride : strides) {
            unsigned long long r[4 + 3 * PLACE_N];
            const int failed = run_ab_launch(
                &dev, out, active, "packet_place",
                [&] {
                    char *theirs = peer_base_of(dwin, peer);
                    packet_place<<<1, 1>>>(dev, dwin, chunks, chunk, base_value, out, base, theirs, stride);
                },
                r, 4 + 3 * PLACE_N);
            base_value += (uint64_t)chunks * chunk;
            failures += failed;
            if (failed) continue;
            if (active) failures += bench_check_landed("dion", base, PP_DST, PP_SRC, 8, peer, "packet_place");
            if (rank_ == 0) {
                printf("# packet_place stride %llu sm %llu %llu\n", (unsigned long long)stride, r[2], r[3]);
                static const char *const names[3] = {"place_flag", "place_hand", "place_dion"};
                for (int i = 0; i < PLACE_N; i++)
                    for (int m = 0; m < 3; m++) {
                        char label[64];
                        snprintf(label, sizeof label, "%s_s%llu", names[m], (unsigned long long)stride);
                        bench_row(&o, "dion", label, "thread", (long long)i, "oneway_us",
                                  (double)r[4 + 3 * i + m] / ((double)reps * chunk) / 2 / 1000);
                    }
            }
        }
    }

    /* ---- bandwidth ---- */
    if (bench_wants(&o, "put_bw") || bench_wants(&o, "ref")) {
        size_t total = (size_t)o.bw_bytes;
        int blocks = prop.multiProcessorCount * 4, threads = 512;
        size_t chunk = (total / blocks + 4095) / 4096 * 4096;
        char *peer_base = peer_base_of(dwin, 1);
        for (int kind = 0; kind < 2; kind++) {
            if (kind == 0 && !bench_wants(&o, "put_bw")) continue;
            if (kind == 1 && !bench_wants(&o, "ref")) continue;
            /* the latency rows wrote into the low part of the window (packet slots, unpacked payloads): lay
             * the source pattern down again, so that what lands can be checked */
            bench_fill<<<prop.multiProcessorCount * 4, 512>>>(base, total, rank_);
            BENCH_CHECK_LAUNCH("bench_fill");
            BENCH_CHECK_CUDA(cudaDeviceSynchronize());
            OK(dion_comm_barrier(comm));
            std::vector<float> ms;
            if (rank_ == 0)
                ms = bench_time_ms(6, [&] {
                    if (kind == 0)
                        put_bw<<<blocks, threads>>>(dev, dwin, total, chunk, total, 1);
                    else
                        ref_copy_bw<<<blocks, threads>>>((const int4 *)base, (int4 *)(peer_base + total),
                                                         total / 16);
                });
            OK(dion_comm_barrier(comm));
            if (rank_ == 1 && kind == 0) {
                /* sampled check of what landed: the first and last 64 KiB and 64 pages in between */
                failures += bench_check_landed("dion", base, total, 0, 65536, 0, "put_bw head");
                failures += bench_check_landed("dion", base, total + total - 65536, total - 65536, 65536, 0,
                                               "put_bw tail");
                for (int k = 1; k < 64; k++) {
                    size_t off = (total / 64) * (size_t)k + (size_t)k * 4099 % 4096;
                    failures += bench_check_landed("dion", base, total + off, off, 4096, 0, "put_bw sample");
                }
            }
            if (rank_ == 0 && !ms.empty()) {
                double med = ms[ms.size() / 2], best = ms[0];
                const char *name = kind == 0 ? "put_bw" : "ref_copy_bw";
                bench_row(&o, "dion", name, "block", (long long)total, "GBps_median",
                          total / (med * 1e-3) / 1e9);
                bench_row(&o, "dion", name, "block", (long long)total, "GBps_best",
                          total / (best * 1e-3) / 1e9);
            }
        }
    }

    /* ---- completion latency: put + quiet ---- */
    if (bench_wants(&o, "completion")) {
        const long long sizes[] = {8, 4096, 65536, 1048576};
        for (long long b : sizes)
            for (int group = 0; group <= 2; group += 2) {
                if (group == 0 && b > 4096) continue;
                int iters = b >= 65536 ? o.iters / 10 : o.iters;
                OK(dion_comm_barrier(comm));
                if (rank_ == 0) {
                    if (group == 2)
                        completion<2><<<1, 1024>>>(dev, dwin, (size_t)b, iters, iters / 10, out);
                    else
                        completion<0><<<1, 1>>>(dev, dwin, (size_t)b, iters, iters / 10, out);
                    BENCH_CHECK_LAUNCH("completion");
                    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
                    unsigned long long t;
                    BENCH_CHECK_CUDA(cudaMemcpy(&t, out, 8, cudaMemcpyDeviceToHost));
                    bench_row(&o, "dion", "put_quiet", group == 2 ? "block" : "thread", b, "latency_us",
                              (double)t / iters / 1000);
                }
                OK(dion_comm_barrier(comm));
                if (rank_ == 1)
                    failures += bench_check_landed("dion", base, PP_DST, PP_SRC, (size_t)b, 0, "put_quiet");
            }
    }

    /* ---- put + quiet split by what dion-perf's round adds (diagnostic) ---- */
    if (bench_wants(&o, "completion_split")) {
        unsigned long long *times;
        BENCH_CHECK_CUDA(cudaMalloc(&times, sizeof(unsigned long long) * (size_t)o.iters));
        typedef void (*split_fn)(dion_dev_t, dion_dwin_t, int, size_t, int, int, unsigned long long *,
                                 unsigned long long *);
        const struct {
            const char *name, *group;
            split_fn fn;
            unsigned threads;
        } rows[] = {{"pq_split_none", "block", completion_split<2, 0>, 1024},
                    {"pq_split_status", "block", completion_split<2, 1>, 1024},
                    {"pq_split_baror", "block", completion_split<2, 2>, 1024},
                    {"pq_split_times", "block", completion_split<2, 4>, 1024},
                    {"pq_split_peer", "block", completion_split<2, 8>, 1024},
                    {"pq_split_status_baror", "block", completion_split<2, 3>, 1024},
                    {"pq_split_all", "block", completion_split<2, 15>, 1024},
                    {"pq_split_none_256", "block", completion_split<2, 0>, 256},
                    {"pq_split_all_256", "block", completion_split<2, 15>, 256},
                    {"pq_split_none_64", "block", completion_split<2, 0>, 64},
                    {"pq_split_all_64", "block", completion_split<2, 15>, 64},
                    {"pq_split_none", "thread", completion_split<0, 0>, 1},
                    {"pq_split_status", "thread", completion_split<0, 1>, 1},
                    {"pq_split_all", "thread", completion_split<0, 15>, 1}};
        for (const auto &r : rows)
            for (long long b : {8ll, 4096ll}) {
                OK(dion_comm_barrier(comm));
                if (rank_ == 0) {
                    BENCH_CHECK_CUDA(cudaMemset(out, 0, OUT_BYTES));
                    r.fn<<<1, r.threads>>>(dev, dwin, peer, (size_t)b, o.iters, o.iters / 10, out, times);
                    BENCH_CHECK_LAUNCH(r.name);
                    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
                    unsigned long long t[2];
                    BENCH_CHECK_CUDA(cudaMemcpy(t, out, 16, cudaMemcpyDeviceToHost));
                    if (t[1]) {
                        fprintf(stderr, "FAIL %s %s %lld: the quiet failed\n", r.name, r.group, b);
                        failures++;
                    } else {
                        bench_row(&o, "dion", r.name, r.group, b, "latency_us",
                                  (double)t[0] / o.iters / 1000);
                    }
                }
                OK(dion_comm_barrier(comm));
                if (rank_ == 1)
                    failures += bench_check_landed("dion", base, PP_DST, PP_SRC, (size_t)b, 0, r.name);
            }
        cudaFree(times);
    }

    /* ---- message rate ---- */
    if (bench_wants(&o, "msgrate")) {
        int blocks = prop.multiProcessorCount * 2, threads = 256, per = 256;
        const size_t region = 4u << 20;
        /* fresh sources and an empty landing area: the check after the launches sees this row's puts */
        bench_fill<<<prop.multiProcessorCount, 512>>>(base + PP_SRC, 8192, rank_);
        BENCH_CHECK_LAUNCH("bench_fill");
        BENCH_CHECK_CUDA(cudaMemset(base + PP_DST, 0, region));
        BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        OK(dion_comm_barrier(comm));
        std::vector<float> ms;
        if (rank_ == 0)
            ms =
                bench_time_ms(BENCH_RATE_REPS, [&] { msgrate<<<blocks, threads>>>(dev, dwin, per, region); });
        OK(dion_comm_barrier(comm));
        int bad =
            rank_ == 1 ? bench_check_rate_words("dion", base, PP_DST, region / 8, 0, "put8_msgrate") : 0;
        std::vector<int> bads(nranks_);
        OK(dion_comm_allgather(comm, &bad, sizeof bad, bads.data()));
        failures += bad;
        if (rank_ == 0 && !std::accumulate(bads.begin(), bads.end(), 0)) {
            double ops = (double)blocks * threads * per;
            bench_row(&o, "dion", "put8_msgrate", "thread", 8, "Mops_median",
                      ops / (ms[ms.size() / 2] * 1e-3) / 1e6);
        }
    }

    int all_fail = 0;
    std::vector<int> fails(nranks_);
    OK(dion_comm_allgather(comm, &failures, sizeof failures, fails.data()));
    for (int f : fails) all_fail += f;
    if (rank_ == 0) printf("# %s: %d data or device errors\n", all_fail ? "FAIL" : "ok", all_fail);
    cudaFree(out);
    OK(dion_win_destroy(win));
    OK(dion_dev_destroy(comm, &dev));
    dion_comm_destroy(comm);
    return all_fail ? 1 : 0;
}
