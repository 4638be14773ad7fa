/* dion-perf's kernel bodies, compiled three times: by dion_perf.cu with the p2p device half alone (GPU code's
 * default; its host pass, the CPU-mode bodies, has every half), by dion_perf_proxy.cu with
 * DION_DEVICE_BACKENDS=3 for runs where some peer is served by the proxy, and by dion_perf_gdaki.cu with
 * DION_DEVICE_BACKENDS=5 where some peer is served by gdaki. The p2p-only kernels are then exactly what they
 * were before the network backends existed, and their dispatch costs them nothing. Each
 * translation unit defines PERF_NS (its namespace), PERF_BLOCK_MAX and PERF_RATE_MAX (launch bounds, see
 * perf_max_threads) before including this.
 *
 * Bodies are __host__ __device__: on a GPU they run as kernels and latency rows are timed per iteration with
 * %globaltimer; in CPU mode the same bodies run on CPU threads (dion_cpu_launch). */
#include "dion/dion_device.cuh"

/* Bodies take the arguments by value and are inlined into the kernel, so that they stay in the parameter bank
 * (as p2p_bench passes the handle). */
#define PERF_HD __host__ __device__ __forceinline__

#ifndef DION_PERF_KERNEL_TYPES
#define DION_PERF_KERNEL_TYPES
/* ---- what runs (the same in both translation units) ---- */

enum {
    T_SIGNAL,
    T_SIGNAL_RELAXED,
    T_PS_THREAD,
    T_PS_WARP,
    T_PS_BLOCK,
    T_PQ_THREAD,
    T_PQ_WARP,
    T_PQ_BLOCK,
    T_GET_THREAD,
    T_GET_WARP,
    T_GET_BLOCK,
    T_FADD,
    T_BARRIER,
    T_BW,
    T_MSGRATE,
    T_PICKUP,
    T_PKT_THREAD, /* packet ping-pongs: the flags travel in the data (device/packet.cuh) */
    T_PKT_WARP,
    T_PKT_BLOCK
};

/* Window layout: sources at 0, landing area at dst, the fetch-add word at fadd. */
typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    size_t bytes, dst, fadd;
    int iters, warmup, peer;
    uint64_t base;              /* signal values continue from here, so that no run sees stale ones */
    uint64_t *times;            /* [iters] per-iteration durations (ns), written by the timing thread */
    unsigned long long *status; /* [0]: nonzero when a device call failed; [1]: data errors */
    size_t chunk, stride;       /* put_bw: bytes per block and round, and chunks per round */
    size_t nthreads;            /* msgrate: threads in the grid */
    int per_thread, msg_words;  /* msgrate: 8 B puts per thread, distinct words in the landing area */
    char *local;                /* packets: this rank's part of win (source at 0; payloads unpacked to out) */
    size_t out;                 /* packets: where a received payload is unpacked, an offset in local */
} perf_args_t;
#endif

namespace PERF_NS
{

/* The proxy and gdaki spread blocks over contexts (a command ring, or a QP per peer, each); p2p keeps
 * context 0, as before. */
#if DION__HAS_PROXY || DION__HAS_GDAKI
#define PERF_BLOCK_CTX(dev) dion_ctx(dev, dion__block_index())
#else
#define PERF_BLOCK_CTX(dev) dion_ctx(dev, 0)
#endif

static PERF_HD int perf_group_of(int op)
{
    switch (op) {
    case T_PS_WARP:
    case T_PQ_WARP:
    case T_GET_WARP:
    case T_PKT_WARP:
        return DION__WARP;
    case T_PS_BLOCK:
    case T_PQ_BLOCK:
    case T_GET_BLOCK:
    case T_PKT_BLOCK:
        return DION__BLOCK;
    default:
        return DION__THREAD;
    }
}

static PERF_HD int perf_failed(const perf_args_t &a)
{
    return *(volatile const unsigned long long *)&a.status[0] != 0;
}

static PERF_HD void perf_fail(const perf_args_t &a)
{
    *(volatile unsigned long long *)&a.status[0] = 1;
}

/* The group's sync after a round, which also tells every thread of the group whether its leader's wait or
 * quiet failed (bad: that thread's own result; 0 elsewhere). On the GPU an OR at the barrier (warp vote) the
 * round has anyway: reading the failure word instead cost every round a trip to L2 on its critical path,
 * since the wait's or quiet's acquire has just dropped the L1 (H200, 2026-12-01: relaxed signal 0.560 ->
 * 0.384 us, block put_signal 8 B 2.448 -> 1.520, block put + quiet 3.456 -> 2.176 without it; docs/results/
 * 2026-12-01-h200-s5). CPU mode: the sync, then the word. */
static PERF_HD int perf_group_failed(const perf_args_t &a, int g, int in_group, int bad)
{
#if DION__GPU
    (void)a;
    if (!in_group) return 0;
    if (g == DION__BLOCK) return __syncthreads_or(bad);
    if (g == DION__WARP) {
        uint32_t n = dion__group_size(DION__WARP);
        return __any_sync(n == 32 ? 0xffffffffu : (1u << n) - 1u, bad);
    }
    return bad;
#else
    (void)bad;
    if (g != DION__THREAD && in_group) dion__group_sync((dion__group_t)g);
    return perf_failed(a);
#endif
}

/* How the loops below pass their arguments. Each call takes win, dst and bytes either from locals read
 * before the loop (as a kernel with scalar parameters, p2p_bench's, has them) or from the fields of the
 * by-value struct at the call. The two compile differently, and neither is best for every kernel: with the
 * locals, ptxas keeps the fast path's window test and bases in registers across the loop where it otherwise
 * reloads them from the parameter bank and redoes the test after every wait (warp put_signal: 108 registers
 * instead of 96, 22 parameter-bank loads in the loop instead of 43), but in the block get kernel the same
 * change spills 48 bytes to the stack. So each call uses what measured faster (H200, one GPU, 2026-12-02,
 * docs/results/2026-12-02-h200-s7; each kernel of the p2p set has the SASS of the build it was measured in):
 * locals for put_signal (8 B one-way: thread 1.10 -> 1.01 us, warp 1.49 -> 1.20, block 1.50 -> 1.42-1.47),
 * put + quiet (8 B: thread 0.77 -> 0.67, warp 1.06 -> 0.80, block 1.44 -> 1.25; 64 KiB by a block 3.10 ->
 * 2.43) and the warp and block packets (8 B: 0.77-0.83 -> 0.70-0.72, 1.06 -> 0.77-0.78); the fields for
 * get (block 8 B: 1.57 with them, 3.20 with the locals), fetch-add (0.42 against 0.48) and the thread's
 * packets (1 KiB: 14.1 against 15.0). */

/* Ping-pong between ranks 0 and 1 on signal 0 (signal or put_signal of one group). */
template <int op> static PERF_HD void perf_pingpong(const perf_args_t a)
{
    dion_ctx_t c = dion_ctx(a.dev, 0);
    const int initiator = a.dev.rank == 0, peer = a.peer, g = perf_group_of(op);
    dion_dwin_t win = a.win;
    const size_t dst = a.dst, bytes = a.bytes;
    const uint32_t tid = dion__block_thread();
    const int in_group = g == DION__BLOCK || (g == DION__WARP && tid < 32) || tid == 0;
    uint64_t t0 = 0, prev = 0;
    for (int i = 1; i <= a.warmup + a.iters; i++) {
        uint64_t v = a.base + (uint64_t)i;
        if (i == a.warmup + 1 && tid == 0) t0 = prev = dion__time_ns();
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == initiator) {
                if (!in_group) continue;
                if (op == T_SIGNAL)
                    dion_signal(c, peer, 0, DION_SIG_SET, v);
                else if (op == T_SIGNAL_RELAXED)
                    dion_signal(c, peer, 0, DION_SIG_SET_RELAXED, v);
                else if (op == T_PS_THREAD)
                    dion_put_signal(c, win, peer, dst, win, 0, bytes, 0, DION_SIG_SET, v);
                else if (op == T_PS_WARP)
                    dion_put_signal_warp(c, win, peer, dst, win, 0, bytes, 0, DION_SIG_SET, v);
                else
                    dion_put_signal_block(c, win, peer, dst, win, 0, bytes, 0, DION_SIG_SET, v);
            } else {
                int bad = 0;
                if (tid == 0 && dion_wait(c, 0, DION_CMP_EQ, v, NULL) != DION_SUCCESS) perf_fail(a), bad = 1;
                if (perf_group_failed(a, g, in_group, bad)) return; /* the host sees the error record too */
            }
        }
        if (initiator && tid == 0 && i > a.warmup) {
            uint64_t now = dion__time_ns();
            a.times[i - a.warmup - 1] = now - prev;
            prev = now;
        }
    }
    (void)t0;
}

/* Packet ping-pong between ranks 0 and 1: each side's message lands in the other's region at dst and is
 * unpacked to local + out; the reply is the sender's credit, so one region per side is reused every round
 * with a new sequence. No signal and no fence on either side. */
template <int op> static PERF_HD void perf_packet(const perf_args_t a)
{
    dion_ctx_t c = dion_ctx(a.dev, 0);
    const int initiator = a.dev.rank == 0, peer = a.peer, g = perf_group_of(op);
    dion_dwin_t win = a.win; /* the warp's and the block's calls (see above perf_pingpong) */
    const size_t dst = a.dst, bytes = a.bytes;
    char *const local = a.local, *const out = a.local + a.out;
    const uint32_t tid = dion__block_thread();
    const int in_group = g == DION__BLOCK || (g == DION__WARP && tid < 32) || tid == 0;
    uint64_t prev = 0;
    if (!in_group) return;
    for (int i = 1; i <= a.warmup + a.iters; i++) {
        uint32_t seq = (uint32_t)((a.base + (uint64_t)i) % 0xffffffffull) + 1u; /* never 0 */
        if (i == a.warmup + 1 && tid == 0) prev = dion__time_ns();
        for (int half = 0; half < 2; half++) {
            dion_status_t st = DION_SUCCESS;
            if ((half == 0) == initiator) {
                if (op == T_PKT_THREAD) dion_put_packet(c, a.win, peer, a.dst, a.local, a.bytes, seq);
                if (op == T_PKT_WARP) dion_put_packet_warp(c, win, peer, dst, local, bytes, seq);
                if (op == T_PKT_BLOCK) dion_put_packet_block(c, win, peer, dst, local, bytes, seq);
            } else {
                if (op == T_PKT_THREAD) st = dion_wait_packet(c, a.win, a.dst, a.local + a.out, a.bytes, seq);
                if (op == T_PKT_WARP) st = dion_wait_packet_warp(c, win, dst, out, bytes, seq);
                if (op == T_PKT_BLOCK) st = dion_wait_packet_block(c, win, dst, out, bytes, seq);
                if (st != DION_SUCCESS) { /* every thread of the group got the same status */
                    if (tid == 0) perf_fail(a);
                    return;
                }
            }
        }
        if (initiator && tid == 0 && i > a.warmup) {
            uint64_t now = dion__time_ns();
            a.times[i - a.warmup - 1] = now - prev;
            prev = now;
        }
    }
}

/* One-sided rounds timed on rank 0: put+quiet, get(+quiet), fetch-add; barrier on every rank. */
template <int op> static PERF_HD void perf_rounds(const perf_args_t a)
{
    dion_ctx_t c = dion_ctx(a.dev, 0);
    const int peer = a.peer, g = perf_group_of(op);
    dion_dwin_t win = a.win; /* the puts' calls (see above perf_pingpong) */
    const size_t dst = a.dst, bytes = a.bytes;
    const uint32_t tid = dion__block_thread();
    const int in_group = g == DION__BLOCK || (g == DION__WARP && tid < 32) || tid == 0;
    uint64_t prev = 0;
    for (int i = 0; i < a.warmup + a.iters; i++) {
        if (i == a.warmup && tid == 0) prev = dion__time_ns();
        if (in_group) {
            if (op == T_PQ_THREAD) dion_put(c, win, peer, dst, win, 0, bytes);
            if (op == T_PQ_WARP) dion_put_warp(c, win, peer, dst, win, 0, bytes);
            if (op == T_PQ_BLOCK) dion_put_block(c, win, peer, dst, win, 0, bytes);
            if (op == T_GET_THREAD) dion_get(c, a.win, a.dst, a.win, peer, 0, a.bytes);
            if (op == T_GET_WARP) dion_get_warp(c, a.win, a.dst, a.win, peer, 0, a.bytes);
            if (op == T_GET_BLOCK) dion_get_block(c, a.win, a.dst, a.win, peer, 0, a.bytes);
        }
        int bad = 0;
        if (tid == 0) {
            if (op == T_FADD) {
                uint64_t old = dion_atomic_fetch_add(c, a.win, peer, a.fadd, 1);
                if (old != (uint64_t)i) a.status[1]++; /* the word counts every round, from 0 */
            } else if (op == T_BARRIER) {
                if (dion_barrier(c) != DION_SUCCESS) perf_fail(a), bad = 1;
            } else if (dion_quiet(c) != DION_SUCCESS) {
                perf_fail(a), bad = 1;
            }
        }
        if (perf_group_failed(a, g, in_group, bad)) return;
        if (tid == 0 && i >= a.warmup) {
            uint64_t now = dion__time_ns();
            a.times[i - a.warmup] = now - prev;
            prev = now;
        }
    }
}

/* Bandwidth: the blocks split bytes into chunks, each a dion_put_block; then each block quiets. */
static PERF_HD void perf_bw(const perf_args_t a)
{
    dion_ctx_t c = PERF_BLOCK_CTX(a.dev);
    for (size_t off = dion__block_index() * a.chunk; off < a.bytes; off += a.stride * a.chunk) {
        size_t n = a.bytes - off < a.chunk ? a.bytes - off : a.chunk;
        dion_put_block(c, a.win, a.peer, a.dst + off, a.win, off, n);
    }
    if (dion__block_thread() == 0 && dion_quiet(c) != DION_SUCCESS) perf_fail(a);
}

/* Message rate: every thread issues per_thread 8-byte puts to distinct words, then one quiet per block. */
static PERF_HD void perf_msgrate(const perf_args_t a)
{
    dion_ctx_t c = PERF_BLOCK_CTX(a.dev);
    /* locals, and a launch bound equal to the launch (perf_max_threads): with either alone ptxas ran the
     * window test and the peer's base pick in every put (131 k against p2p_bench's 276 k Mops on one H200,
     * 2026-12-02) */
    const dion_dwin_t win = a.win;
    const int peer = a.peer, per = a.per_thread;
    const size_t dst = a.dst, nt = a.nthreads, words = (size_t)a.msg_words;
    size_t t = (size_t)dion__block_index() * dion__block_size() + dion__block_thread();
    for (int i = 0; i < per; i++) {
        size_t word = (t + (size_t)i * nt) % words;
        dion_put(c, win, peer, dst + word * 8, win, (word % 1024) * 8, 8);
    }
    dion__group_sync(DION__BLOCK);
    if (dion__block_thread() == 0 && dion_quiet(c) != DION_SUCCESS) perf_fail(a);
}

/* The proxy's pickup, one thread: post a FENCE into context 0's ring (nothing is in flight, so the proxy
 * completes it as soon as it takes it, touching no network) and poll the ring's completion counter until it
 * passes the command; each round trip is timed. One-way (reported) = half of it: the command's way to the
 * proxy thread (GPU stores over PCIe, seen by the proxy's polling) plus the completion's way back (the
 * proxy's store, seen by the GPU's polling reads), the same halving as proxy_ring_bench's flag echo. The
 * tickets must come one after another (nobody else posts to this ring): a command taken twice or lost would
 * show. */
static PERF_HD void perf_pickup(const perf_args_t a)
{
#if DION__HAS_PROXY
    dion_ctx_t c = dion_ctx(a.dev, 0);
    const dion_proxy_ring_dev_t *r = dion__ctx_ring(&c);
    uint64_t prev = 0, last = 0;
    for (int i = 0; i < a.warmup + a.iters; i++) {
        if (i == a.warmup) prev = dion__time_ns();
        dion_proxy_cmd_t cmd = dion__proxy_cmd(DION_PROXY_OP_FENCE, -1);
        uint64_t t = 0;
        if (dion__proxy_post(r, &cmd, a.dev.wait_timeout_ns, &t, NULL) != DION_SUCCESS ||
            dion__proxy_wait_complete(r, t, a.dev.wait_timeout_ns, NULL) != DION_SUCCESS) {
            perf_fail(a);
            return;
        }
        if (i && t != last + 1) a.status[1]++;
        last = t;
        if (i >= a.warmup) {
            uint64_t now = dion__time_ns();
            a.times[i - a.warmup] = now - prev;
            prev = now;
        }
    }
#else
    perf_fail(a); /* never launched: the host picks these kernels only when no peer is served by the proxy */
#endif
}

template <int op> static PERF_HD void perf_body(const perf_args_t a)
{
    if (op <= T_PS_BLOCK)
        perf_pingpong<op>(a);
    else if (op <= T_BARRIER)
        perf_rounds<op>(a);
    else if (op == T_BW)
        perf_bw(a);
    else if (op == T_MSGRATE)
        perf_msgrate(a);
    else if (op == T_PICKUP)
        perf_pickup(a);
    else
        perf_packet<op>(a);
}

/* Launch bounds, matching the launches: the block rows' kernels take up to PERF_BLOCK_MAX threads, put_bw's
 * up to PERF_RATE_MAX, msgrate's exactly PERF_MSGRATE_THREADS, the others at most a warp (so they get
 * registers as p2p_bench's do). Under p2p's former msgrate bound of 1024 threads (64 registers) ptxas kept
 * the window test and the peer's base pick inside the put loop, locals or not: 131 k Mops against 276 k. */
template <int op> struct perf_max_threads {
    enum {
        value = op == T_PS_BLOCK || op == T_PQ_BLOCK || op == T_GET_BLOCK || op == T_PKT_BLOCK
                    ? PERF_BLOCK_MAX
                : op == T_BW      ? PERF_RATE_MAX
                : op == T_MSGRATE ? PERF_MSGRATE_THREADS
                                  : 32
    };
};

template <int op> __global__ void __launch_bounds__(perf_max_threads<op>::value, 1) perf_kernel(perf_args_t a)
{
    perf_body<op>(a);
}

template <int op> static void perf_cpu_entry(void *p)
{
    perf_body<op>(*(const perf_args_t *)p);
}

#define PERF_FOR_EACH_OP(X)                                                                                  \
    X(T_SIGNAL);                                                                                             \
    X(T_SIGNAL_RELAXED);                                                                                     \
    X(T_PS_THREAD);                                                                                          \
    X(T_PS_WARP);                                                                                            \
    X(T_PS_BLOCK);                                                                                           \
    X(T_PQ_THREAD);                                                                                          \
    X(T_PQ_WARP);                                                                                            \
    X(T_PQ_BLOCK);                                                                                           \
    X(T_GET_THREAD);                                                                                         \
    X(T_GET_WARP);                                                                                           \
    X(T_GET_BLOCK);                                                                                          \
    X(T_FADD);                                                                                               \
    X(T_BARRIER);                                                                                            \
    X(T_BW);                                                                                                 \
    X(T_MSGRATE);                                                                                            \
    X(T_PICKUP);                                                                                             \
    X(T_PKT_THREAD);                                                                                         \
    X(T_PKT_WARP);                                                                                           \
    X(T_PKT_BLOCK)

/* Launches op's kernel on the current stream; the launch's own error (cudaGetLastError), else cudaSuccess. */
cudaError_t gpu_launch(int op, unsigned grid, unsigned threads, const perf_args_t &a)
{
#define PERF_GC(o)                                                                                           \
    case o:                                                                                                  \
        perf_kernel<o><<<grid, threads>>>(a);                                                                \
        break
    switch (op) {
        PERF_FOR_EACH_OP(PERF_GC);
    }
#undef PERF_GC
    return cudaGetLastError();
}

/* The largest block the block rows' kernels take. */
unsigned block_max(void)
{
    return PERF_BLOCK_MAX;
}

/* The message rate's block (its kernel's launch bound). */
unsigned msgrate_threads(void)
{
    return PERF_MSGRATE_THREADS;
}

#ifdef PERF_CPU_ENTRIES
/* op's body for dion_cpu_launch. */
void (*cpu_entry(int op))(void *)
{
#define PERF_CC(o)                                                                                           \
    case o:                                                                                                  \
        return perf_cpu_entry<o>
    switch (op) {
        PERF_FOR_EACH_OP(PERF_CC);
    }
#undef PERF_CC
    return nullptr;
}
#endif

} // namespace PERF_NS
