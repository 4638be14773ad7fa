/* A/B measurements for the p2p rows behind NVSHMEM and NCCL's LSA API (issue 10), in one process so that one
 * run on the GPU machine compares them side by side. Rank 0 sends to rank 1; start with
 *   dionrun -n 2 [--mps] ab_bench [--tests lsa,packet,bw,ce] [--csv FILE] [--label L] [--bw-bytes N]
 * - lsa: put_signal ping-pongs written the way NCCL LSA user code writes them (int4 copy by the group, a
 * group barrier, one release store of the flag), next to dion_put_signal_warp/_block in the same process, at
 * the sizes of the rows where DION is behind: the gap left is DION's own path, not the harness.
 * - bw, ce: issue 10 goal 4 (NVLink put bandwidth at the copy engine's figure), each configuration at
 *   256 MiB and 1 GiB (--bw-bytes sets the larger; the smaller is a quarter): 16-byte ld/st copies (1-16
 *   loads in flight per thread, 1-8 blocks per SM, 256/512/1024 threads, grid-stride, per-block chunks or
 *   per-warp runs of whole 128-byte lines, cache hints), stores alone (the pattern computed in registers:
 *   the write path without loads), writes of 32/64/128 bytes per line and store instruction (what a write
 *   costs beyond its data), cp.async (LDGSTS) through shared memory, bulk copies (cp.async.bulk through
 *   shared memory), gets (the peer's memory read: the link's other direction), and the copy engine (the
 *   target; pushing, pulling, on two streams at once, and next to an SM copy). A summary after the sweep
 *   gives the best of each family at each size, the goal, and push against pull and the copy engine.
 * Every row is verified before its time is printed: the ping-pong receiver checks the bytes that landed, and
 * each bandwidth run writes a pattern of its own (the source is refilled with a new seed) that the receiving
 * rank checks at 65 sampled pages. CSV rows impl,label,test,group,bytes,metric,value as bench_common.h writes
 * them; test names say the variant (bw_ldst_u8_b264_warp = 16-byte loads, 8 in flight, 264 blocks, per-warp
 * runs; _t256 / _t1024 threads per block other than 512; _cs / _na the cache hints; bw_tma_s4x32k_b132 = bulk
 * copies, 4 stages of 32 KiB, 132 blocks; bw_get_* the peer's memory read into this rank's; bw_ce_* the copy
 * engine), the bytes column the size. */
#include <algorithm>
#include <string>
#include <vector>

#include "bench_common.h"
#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define PP_SRC 0ull
#define PP_DST (8ull << 20)

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

/* ---- put_signal ping-pongs: hand-written LSA style against DION, same flag word (DION's signal 0) ---- */

/* Who sends and who waits: LSA = both by hand, DION = both through DION, and the two mixes, which tell
 * whether a gap is in DION's put_signal or in its wait. */
enum { PS_LSA = 0, PS_DION = 1, PS_DSEND = 2, PS_DWAIT = 3 };
static const char *const ps_names[] = {"ab_ps_lsa_by_hand", "ab_ps_dion", "ab_ps_dion_send_hand_wait",
                                       "ab_ps_hand_send_dion_wait"};

/* group: 1 warp, 2 block. The LSA copy is NCCL's user pattern: int4 body split over the group, byte tail. */
template <int impl, int group>
__global__ void __launch_bounds__(group == 2 ? 1024 : 32, 1)
    ps_pingpong(dion_dev_t dev, dion_dwin_t win, size_t bytes, int iters, int warmup, uint64_t base,
                unsigned long long *out, char *mine, char *theirs)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t tid = threadIdx.x, g = blockDim.x, scope = dion__dev_scope(&dev);
    /* the scope DION's put_signal releases at (the peer's; the windows are GPU memory here) */
    const uint32_t pscope = dion__peer_scope(&dev, peer) | scope;
    uint64_t *mysig = dev.signals, *peersig = dion__peer_signals(&dev, peer);
    const int dion_send = impl == PS_DION || impl == PS_DSEND,
              dion_wait_ = impl == PS_DION || impl == PS_DWAIT;
    uint64_t t0 = 0;
    for (int i = 1; i <= warmup + iters; i++) {
        uint64_t v = base + (uint64_t)i;
        if (i == warmup + 1) t0 = bench_now_ns();
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == initiator) {
                if (dion_send) {
                    if (group == 2)
                        dion_put_signal_block(c, win, peer, PP_DST, win, PP_SRC, bytes, 0, DION_SIG_SET, v);
                    else
                        dion_put_signal_warp(c, win, peer, PP_DST, win, PP_SRC, bytes, 0, DION_SIG_SET, v);
                } else {
                    const char *src = mine + PP_SRC;
                    char *dst = theirs + PP_DST;
                    size_t n16 = bytes / 16;
                    for (size_t k = tid; k < n16; k += g) ((int4 *)dst)[k] = ((const int4 *)src)[k];
                    for (size_t k = n16 * 16 + tid; k < bytes; k += g) dst[k] = src[k];
                    if (group == 2)
                        __syncthreads();
                    else
                        __syncwarp();
                    if (tid == 0) dion__st_release(peersig, v, pscope);
                }
            } else {
                if (tid == 0) {
                    if (dion_wait_) {
                        if (dion_wait(c, 0, DION_CMP_EQ, v, NULL) != DION_SUCCESS) {
                            out[1] = 1;
                            return;
                        }
                    } else {
                        while (dion__ld_acquire(mysig, scope) != v) {
                        }
                    }
                }
                if (group == 2)
                    __syncthreads();
                else
                    __syncwarp();
            }
        }
    }
    if (tid == 0 && initiator) out[0] = bench_now_ns() - t0;
}

/* Packet ping-pong of `bytes` <= 8 from one thread: by hand (one 16-byte relaxed store of payload and
 * sequence, the receiver polls it and stores the payload) against dion_put_packet / dion_wait_packet, and the
 * two mixes that tell the send side's share of a gap from the wait side's. The payload comes from the window
 * at PP_SRC and lands at PP_DST, as in p2p_bench's packet rows. mode: PK_* below. */
#define PP_PKT (16ull << 20)
enum { PK_DION = 0, PK_HAND_SEND = 1, PK_HAND_WAIT = 2, PK_HAND = 3 };
static const char *const pk_names[] = {"ab_pkt_dion", "ab_pkt_hand_send_dion_wait",
                                       "ab_pkt_dion_send_hand_wait", "ab_pkt_by_hand"};
template <int mode>
__global__ void __launch_bounds__(32, 1)
    pkt_pingpong(dion_dev_t dev, dion_dwin_t win, size_t bytes, int iters, int warmup, uint64_t base,
                 unsigned long long *out, char *mine, char *theirs)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t scope = dion__dev_scope(&dev), pscope = dion__peer_scope(&dev, peer) | scope;
    uint64_t t0 = 0;
    for (int i = 1; i <= warmup + iters; i++) {
        const uint32_t seq = (uint32_t)(base + (uint64_t)i);
        if (i == warmup + 1) t0 = bench_now_ns();
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == initiator) {
                if (mode & PK_HAND_SEND) {
                    uint64_t v = *(const uint64_t *)(mine + PP_SRC), flag = (uint64_t)seq << 32;
                    dion__pkt_store((uint64_t *)(theirs + PP_PKT), flag | (uint32_t)v, flag | (v >> 32),
                                    pscope);
                } else {
                    dion_put_packet(c, win, peer, PP_PKT, mine + PP_SRC, bytes, seq);
                }
            } else {
                if (mode & PK_HAND_WAIT) {
                    uint64_t w0, w1;
                    do {
                        dion__pkt_load((const uint64_t *)(mine + PP_PKT), &w0, &w1, scope);
                    } while ((uint32_t)(w0 >> 32) != seq || (uint32_t)(w1 >> 32) != seq);
                    *(uint64_t *)(mine + PP_DST) = (w1 << 32) | (uint32_t)w0;
                } else if (dion_wait_packet(c, win, PP_PKT, mine + PP_DST, bytes, seq) != DION_SUCCESS) {
                    out[1] = 1;
                    return;
                }
            }
        }
    }
    if (initiator) out[0] = bench_now_ns() - t0;
}

/* ---- bandwidth ---- */

/* 16-byte loads and stores, U loads in flight per thread before its stores. Layouts (L): L_STRIDE element i
 * goes to thread i mod (blocks*threads) (the hand-written copy kernel); L_CHUNK block b copies the contiguous
 * [b*chunk, (b+1)*chunk) (as dion_put_block per block does); L_WARP each warp copies runs of U*512 contiguous
 * bytes (every store instruction 4 whole 128-byte lines, a run U*4 consecutive lines), the runs handed out to
 * the warps in turn. F, the cache hints (sm_90 has no wider than 16-byte global access; multimem needs NVLS,
 * which is off): F_PLAIN plain ld/st; F_CS streaming stores (st.global.cs: evict first); F_NA loads and
 * stores that do not allocate in L1 (.L1::no_allocate). */
enum { L_STRIDE = 0, L_CHUNK = 1, L_WARP = 2 };
static const char *const l_names[] = {"stride", "chunk", "warp"};
enum { F_PLAIN = 0, F_CS = 1, F_NA = 2 };
static const char *const f_names[] = {"", "_cs", "_na"};
/* Volatile asm keeps the U loads ahead of the U stores (the compiler would otherwise interleave them). */
template <int F> static __device__ __forceinline__ ulonglong2 ld16(const ulonglong2 *p)
{
    ulonglong2 v;
    if (F == F_NA)
        asm volatile("ld.global.L1::no_allocate.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
    else
        asm volatile("ld.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
    return v;
}

template <int F> static __device__ __forceinline__ void st16(ulonglong2 *p, ulonglong2 v)
{
    if (F == F_CS)
        asm volatile("st.global.cs.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.x), "l"(v.y) : "memory");
    else if (F == F_NA)
        asm volatile("st.global.L1::no_allocate.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.x), "l"(v.y)
                     : "memory");
    else
        asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.x), "l"(v.y) : "memory");
}

template <int U, int L, int F> __global__ void bw_ldst(const ulonglong2 *src, ulonglong2 *dst, size_t n16)
{
    if (L == L_WARP) {
        const size_t run = (size_t)U * 32, lane = threadIdx.x & 31,
                     warps = ((size_t)gridDim.x * blockDim.x) >> 5;
        size_t k = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
        for (; (k + 1) * run <= n16; k += warps) {
            ulonglong2 t[U];
#pragma unroll
            for (int u = 0; u < U; u++) t[u] = ld16<F>(src + k * run + u * 32 + lane);
#pragma unroll
            for (int u = 0; u < U; u++) st16<F>(dst + k * run + u * 32 + lane, t[u]);
        }
        for (size_t i = k * run + lane; i < n16 && i < (k + 1) * run; i += 32)
            st16<F>(dst + i, ld16<F>(src + i));
        return;
    }
    size_t hi, step, i;
    if (L == L_CHUNK) {
        size_t per = (n16 + gridDim.x - 1) / gridDim.x, lo = per * blockIdx.x;
        hi = lo + per < n16 ? lo + per : n16;
        step = blockDim.x;
        i = lo + threadIdx.x;
    } else {
        hi = n16;
        step = (size_t)gridDim.x * blockDim.x;
        i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    }
    for (; i + (U - 1) * step < hi; i += U * step) {
        ulonglong2 t[U];
#pragma unroll
        for (int u = 0; u < U; u++) t[u] = ld16<F>(src + i + u * step);
#pragma unroll
        for (int u = 0; u < U; u++) st16<F>(dst + i + u * step, t[u]);
    }
    for (; i < hi; i += step) st16<F>(dst + i, ld16<F>(src + i));
}

typedef void (*ldst_fn)(const ulonglong2 *, ulonglong2 *, size_t);
/* The instantiations the sweep uses (each one costs compile time); NULL for any other. */
static ldst_fn ldst_kernel(int u, int l, int f)
{
#define AB_K(U_, L_, F_)                                                                                     \
    if (u == U_ && l == L_ && f == F_) return bw_ldst<U_, L_, F_>;
#define AB_KL(U_) AB_K(U_, L_STRIDE, F_PLAIN) AB_K(U_, L_CHUNK, F_PLAIN) AB_K(U_, L_WARP, F_PLAIN)
    AB_KL(1) AB_KL(2) AB_KL(4) AB_KL(8) AB_KL(16);
    AB_K(4, L_STRIDE, F_CS) AB_K(8, L_STRIDE, F_CS) AB_K(4, L_STRIDE, F_NA) AB_K(8, L_STRIDE, F_NA);
#undef AB_KL
#undef AB_K
    return NULL;
}

/* Stores only, no loads: each 16 bytes of bench_fill's pattern for `pat` computed in registers (bytes
 * pat*37 + i*13 + (i >> 8) mod 256; i >> 8 is the same for the 16 bytes of an aligned element) and stored, 4
 * per thread per step, grid-stride. What the SMs' write path alone moves over the link. */
__global__ void bw_gen(ulonglong2 *dst, size_t n16, int pat)
{
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n16; e += step) {
        size_t i = e * 16;
        unsigned b = (unsigned)(pat * 37 + i * 13 + (i >> 8)) & 255u, rep = b * 0x01010101u;
        /* byte k of the element is b + 13k mod 256: per-byte sums without carries between bytes */
        unsigned w0 = __vadd4(rep, 0x271a0d00u), w1 = __vadd4(rep, 0x5b4e4134u),
                 w2 = __vadd4(rep, 0x8f827568u), w3 = __vadd4(rep, 0xc3b6a99cu);
        ulonglong2 v;
        v.x = (unsigned long long)w0 | ((unsigned long long)w1 << 32);
        v.y = (unsigned long long)w2 | ((unsigned long long)w3 << 32);
        st16<F_PLAIN>(dst + e, v);
    }
}

/* Write size per request: each store instruction of a warp writes S bytes of each of 512 / S lines (S = 32:
 * one 32-byte sector of 16 lines; 64: half of 8 lines; 128: 4 whole lines), so that 128 / S instructions
 * fill a tile of whole lines; the loads of a tile come first. Unless something between the SM and the link
 * merges them, the link carries S-byte writes: GB/s against S tells what each write costs beyond its data. */
template <int S> __global__ void bw_gran(const ulonglong2 *src, ulonglong2 *dst, size_t n16)
{
    constexpr int Q = 128 / S, per_line = S / 16; /* instructions per tile, lanes per line and instruction */
    const size_t tile = (size_t)Q * 32, lane = threadIdx.x & 31,
                 warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; (w + 1) * tile <= n16; w += warps) {
        ulonglong2 t[Q];
        size_t e[Q];
#pragma unroll
        for (int q = 0; q < Q;
             q++) { /* line lane / per_line, piece q of it, this lane's 16 bytes of the piece */
            e[q] = w * tile + (lane / per_line) * 8 + (size_t)q * per_line + lane % per_line;
            t[q] = ld16<F_PLAIN>(src + e[q]);
        }
#pragma unroll
        for (int q = 0; q < Q; q++) st16<F_PLAIN>(dst + e[q], t[q]);
    }
    /* the elements after the last whole tile, by the first warp */
    if (blockIdx.x == 0 && threadIdx.x < 32)
        for (size_t i = n16 / tile * tile + lane; i < n16; i += 32)
            st16<F_PLAIN>(dst + i, ld16<F_PLAIN>(src + i));
}

/* LDGSTS: each thread's elements (grid-stride) in batches of U, copied global -> shared by cp.async (no
 * registers held while the loads fly), two batches in flight, each stored from shared memory to the peer
 * with 16-byte stores. Shared memory: 2 * U * 16 bytes per thread. */
template <int U> __global__ void bw_ldgsts(const ulonglong2 *src, ulonglong2 *dst, size_t n16)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) ulonglong2 buf[]; /* [stage][u][thread] */
    const size_t step = (size_t)gridDim.x * blockDim.x, T = blockDim.x;
    auto issue = [&](size_t i, int s) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * step < n16) {
                uint32_t sm = (uint32_t)__cvta_generic_to_shared(&buf[((size_t)s * U + u) * T + threadIdx.x]);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sm), "l"(src + i + u * step)
                             : "memory");
            }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int s = 0;
    if (i >= n16) return;
    issue(i, 0);
    for (;;) {
        size_t next = i + (size_t)U * step;
        issue(next, s ^ 1); /* an empty group past the end */
        asm volatile("cp.async.wait_group 1;" ::: "memory");
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * step < n16)
                st16<F_PLAIN>(dst + i + u * step, buf[((size_t)s * U + u) * T + threadIdx.x]);
        if (next >= n16) break;
        i = next;
        s ^= 1;
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}

/* The bulk-copy engine: thread 0 of each block streams its contiguous chunk through S shared-memory stages of
 * C bytes (cp.async.bulk global -> shared, then shared -> peer), keeping up to S - 1 stores in flight. Bytes
 * and chunk sizes are multiples of 16 here (the benchmark picks them so). */
__global__ void bw_tma(const char *src, char *dst, size_t total, uint32_t stage_bytes, int stages)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) char smem[];
    uint64_t *bar = (uint64_t *)smem; /* stages barriers, then the stages at offset 128 */
    char *stage0 = smem + 128;
    size_t per = ((total + gridDim.x - 1) / gridDim.x + 15) & ~(size_t)15;
    size_t lo = per * blockIdx.x, hi = lo + per < total ? lo + per : total;
    if (threadIdx.x != 0 || lo >= hi) return;
    size_t n = hi - lo, chunks = (n + stage_bytes - 1) / stage_bytes;
    for (int s = 0; s < stages; s++)
        asm volatile(
            "mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((uint32_t)__cvta_generic_to_shared(&bar[s]))
            : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    auto len_of = [&](size_t k) {
        return (uint32_t)(n - k * stage_bytes < stage_bytes ? n - k * stage_bytes : stage_bytes);
    };
    auto load = [&](size_t k) {
        int s = (int)(k % stages);
        uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar[s]);
        uint32_t sm = (uint32_t)__cvta_generic_to_shared(stage0 + (size_t)s * stage_bytes);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(len_of(k))
                     : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                sm),
            "l"(src + lo + k * stage_bytes), "r"(len_of(k)), "r"(b)
            : "memory");
    };
    uint32_t phase = 0;
    for (size_t k = 0; k < chunks && k < (size_t)stages; k++) load(k);
    for (size_t k = 0; k < chunks; k++) {
        int s = (int)(k % stages);
        uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar[s]), done = 0;
        do {
            asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                         "selp.u32 %0, 1, 0, p;\n\t}"
                         : "=r"(done)
                         : "r"(b), "r"((phase >> s) & 1)
                         : "memory");
        } while (!done);
        phase ^= 1u << s;
        uint32_t sm = (uint32_t)__cvta_generic_to_shared(stage0 + (size_t)s * stage_bytes);
        asm volatile(
            "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + lo + k * stage_bytes),
            "r"(sm), "r"(len_of(k))
            : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        /* refill the stage of the previous chunk once its store has read it: one store stays in flight */
        if (k >= 1 && k - 1 + stages < chunks) {
            asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
            load(k - 1 + stages);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

/* One bandwidth result, and the summary printed after the sweep: the best configuration of each family at
 * each size, the goal, and push against pull and the copy engine at the largest size. */
struct bw_res_t {
    std::string name, family;
    size_t bytes;
    double gbps;
};

static void bw_summary(const std::vector<bw_res_t> &res, const std::vector<size_t> &sizes, int same_gpu)
{
    std::vector<std::string> fams;
    for (const bw_res_t &r : res)
        if (std::find(fams.begin(), fams.end(), r.family) == fams.end()) fams.push_back(r.family);
    /* by prefix, copies only: stores alone read nothing (on one GPU they move half a copy's memory traffic)
     */
    auto best = [&](size_t bytes, const char *prefix, const std::string *fam) -> const bw_res_t * {
        const bw_res_t *b = NULL;
        for (const bw_res_t &r : res)
            if (r.bytes == bytes &&
                (fam ? r.family == *fam : r.family.rfind(prefix, 0) == 0 && r.family != "put stores only") &&
                (!b || r.gbps > b->gbps))
                b = &r;
        return b;
    };
    printf("# bandwidth summary, GB/s (median of 5 copies), peer %s: best configuration per family\n",
           same_gpu ? "on this GPU (MPS)" : "on another GPU (NVLink)");
    printf("# %-20s", "family");
    for (size_t s : sizes) printf(" %7zu MiB %-26s", s >> 20, "config");
    printf("\n");
    for (const std::string &f : fams) {
        printf("# %-20s", f.c_str());
        for (size_t s : sizes) {
            const bw_res_t *b = best(s, "", &f);
            if (b)
                printf(" %11.1f %-26s", b->gbps, b->name.c_str());
            else
                printf(" %11s %-26s", "-", "");
        }
        printf("\n");
    }
    size_t big = sizes.back();
    const bw_res_t *put = best(big, "put", NULL), *get = best(big, "get", NULL), *ce = NULL;
    for (const bw_res_t &r : res)
        if (r.bytes == big && r.name == "bw_copy_engine") ce = &r;
    auto val = [&](const char *fam) {
        std::string f = fam;
        const bw_res_t *b = best(big, "", &f);
        return b ? b->gbps : 0.0;
    };
    if (put) {
        printf("# goal (issue 10 goal 4) at %zu MiB: best put kernel %s %.1f GB/s", big >> 20,
               put->name.c_str(), put->gbps);
        if (ce) printf(" = %.3f x the copy engine (%.1f)", put->gbps / ce->gbps, ce->gbps);
        if (!same_gpu) printf("; >= 395 over NVLink: %s", put->gbps >= 395 ? "MET" : "missed");
        printf("\n");
    }
    printf("# at %zu MiB: put ld/st %.1f, stores only %.1f, bulk %.1f; get ld/st %.1f (best get %.1f); copy "
           "engine push %.1f, pull %.1f, 2 streams %.1f, with SMs %.1f\n",
           big >> 20, std::max(std::max(val("put ldst stride"), val("put ldst chunk")), val("put ldst warp")),
           val("put stores only"), val("put tma"), val("get ldst"), get ? get->gbps : 0.0, val("ce push"),
           val("ce pull"), val("ce push, 2 streams"), val("ce + SMs push"));
    printf("# write size per request at %zu MiB:", big >> 20);
    double r64 = 0, r128 = 0;
    for (const bw_res_t &r : res)
        if (r.bytes == big && r.family == "put write size") {
            printf(" %s %.1f", r.name.c_str(), r.gbps);
            if (r.name.rfind("bw_gran64_", 0) == 0) r64 = r.gbps;
            if (r.name.rfind("bw_gran128_", 0) == 0) r128 = r.gbps;
        }
    printf(" GB/s\n");
    /* GB/s = L x S / (S + h) for writes of S bytes with h bytes of overhead each, on a link of L: two sizes
     * give both (meaningful where the link, not memory, is the limit: over NVLink) */
    double q = r64 > 0 ? r128 / r64 : 0;
    if (!same_gpu && q > 1.0 && q < 2.0) {
        double h = 128 * (q - 1) / (2 - q), L = r128 * (128 + h) / 128;
        printf("# from 64 and 128-byte writes: %.0f bytes of overhead per write, a ceiling of %.1f GB/s for "
               "writes of any size; 256-byte writes would give %.1f\n",
               h, L, L * 256 / (256 + h));
    }
}

static char *peer_base_of(dion_dwin_t dwin, int nranks, int peer)
{
    std::vector<char> tab(offsetof(struct dion_win_dev, peer) + sizeof(struct dion_win_peer) * nranks);
    BENCH_CHECK_CUDA(cudaMemcpy(tab.data(), dwin, tab.size(), cudaMemcpyDeviceToHost));
    return dion__win_peer((dion_dwin_t)tab.data(), peer)->base;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    bench_parse(argc, argv, &o);
    if (!strcmp(o.tests, BENCH_DEFAULT_TESTS)) o.tests = "lsa,packet,bw,ce";
    dion_comm_t comm;
    OK(dion_comm_init_env(&comm));
    rank_ = dion_comm_rank(comm);
    int nranks = dion_comm_size(comm);
    if (nranks < 2) {
        fprintf(stderr, "ab_bench needs 2 ranks (dionrun -n 2)\n");
        return 2;
    }
    const int active = rank_ < 2, peer = rank_ ^ 1;
    cudaDeviceProp prop;
    int dev_id = 0;
    BENCH_CHECK_CUDA(cudaGetDevice(&dev_id));
    BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, dev_id));
    const int sms = prop.multiProcessorCount;
    int want_bw = bench_wants(&o, "bw") || bench_wants(&o, "ce");
    size_t total = (size_t)o.bw_bytes;
    size_t win_bytes = want_bw ? 2 * total : (64ull << 20);
    if (win_bytes < (64ull << 20)) win_bytes = 64ull << 20;
    char *base = NULL;
    dion_win_t win;
    OK(dion_win_alloc(comm, win_bytes, 0, (void **)&base, &win));
    dion_dwin_t dwin = dion_win_device(win);
    dion_dev_attr_t attr = {64, 1, 0, 0};
    dion_dev_t dev;
    OK(dion_dev_create(comm, &attr, &dev));
    bench_fill<<<sms * 4, 512>>>(base, win_bytes / 2, rank_);
    BENCH_CHECK_LAUNCH("bench_fill");
    unsigned long long *out;
    BENCH_CHECK_CUDA(cudaMalloc(&out, 64));
    bench_spin<<<sms, 256>>>(400000000ull, out);
    BENCH_CHECK_LAUNCH("bench_spin");
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    char *theirs = peer_base_of(dwin, nranks, peer);
    if (rank_ == 0)
        printf(
            "# DION A/B bench: %d ranks, GPU %s (%d SMs), %s, wait poll %d, block bases %d, copy unroll %d\n",
            nranks, prop.name, sms, (dev.flags & DION_DEVF_SYS) ? "system scope" : "GPU scope",
            DION__WAIT_POLL, DION__BLOCK_BASES, DION__COPY_UNROLL);
    int failures = 0;
    uint64_t base_value = 1u << 30; /* above anything p2p_bench leaves in signal 0 */

    /* ---- ping-pongs ---- */
    struct pp_t {
        const char *name, *group;
        int kind, impl, threads; /* kind 0 put_signal, 1 packet */
        long long bytes;
    };
    std::vector<pp_t> pps;
    if (bench_wants(&o, "lsa")) {
        static const long long sizes[] = {8, 64, 1024, 4096, 65536};
        for (int group = 1; group <= 2; group++)
            for (long long b : sizes)
                for (int impl = 0; impl < 4; impl++)
                    if (bench_wants_row(&o, b, group == 2 ? "block" : "warp"))
                        pps.push_back({ps_names[impl], group == 2 ? "block" : "warp", 0, impl,
                                       group == 2 ? 1024 : 32, b});
    }
    if (bench_wants(&o, "packet")) {
        for (int m = PK_HAND; m >= PK_DION; m--) pps.push_back({pk_names[m], "thread", 1, m, 1, 8});
    }
    for (const pp_t &pp : pps) {
        int iters, warmup;
        bench_pp_iters(&o, pp.bytes, &iters, &warmup);
        OK(dion_comm_barrier(comm));
        BENCH_CHECK_CUDA(cudaMemset(base + PP_DST, 0, (size_t)pp.bytes));
        BENCH_CHECK_CUDA(cudaMemset(base + (16ull << 20), 0, 4096));
        BENCH_CHECK_CUDA(cudaMemset(out, 0, 64));
        OK(dion_comm_barrier(comm));
        if (active) {
            size_t b = (size_t)pp.bytes;
#define AB_PS(i, gr)                                                                                         \
    if (pp.kind == 0 && pp.impl == i && pp.threads == (gr == 2 ? 1024 : 32))                                 \
    ps_pingpong<i, gr><<<1, pp.threads>>>(dev, dwin, b, iters, warmup, base_value, out, base, theirs)
            AB_PS(PS_LSA, 1);
            AB_PS(PS_LSA, 2);
            AB_PS(PS_DION, 1);
            AB_PS(PS_DION, 2);
            AB_PS(PS_DSEND, 1);
            AB_PS(PS_DSEND, 2);
            AB_PS(PS_DWAIT, 1);
            AB_PS(PS_DWAIT, 2);
#undef AB_PS
#define AB_PK(m)                                                                                             \
    if (pp.kind == 1 && pp.impl == m)                                                                        \
    pkt_pingpong<m><<<1, 1>>>(dev, dwin, b, iters, warmup, base_value, out, base, theirs)
            AB_PK(PK_DION);
            AB_PK(PK_HAND_SEND);
            AB_PK(PK_HAND_WAIT);
            AB_PK(PK_HAND);
#undef AB_PK
            BENCH_CHECK_LAUNCH(pp.name);
            BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        }
        base_value += (uint64_t)(iters + warmup);
        unsigned long long r[2];
        BENCH_CHECK_CUDA(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
        if (r[1] || dion_dev_check(comm, &dev) != DION_SUCCESS) {
            fprintf(stderr, "FAIL rank %d: %s: %s\n", rank_, pp.name, dion_last_error());
            failures++;
        }
        int bad = 0;
        if (active) bad = bench_check_landed("ab", base, PP_DST, PP_SRC, (size_t)pp.bytes, peer, pp.name);
        failures += bad;
        if (rank_ == 0 && !bad && !r[1])
            bench_row(&o, "dion", pp.name, pp.group, pp.bytes, "oneway_us", (double)r[0] / iters / 2 / 1000);
    }

    /* ---- bandwidth: rank 0 copies [0, size) of one window into [total, total + size) of the other, for size
     * total / 4 and total (256 MiB and 1 GiB by default); a push writes the peer's memory, a get (pull)
     * reads it. ---- */
    if (want_bw) {
        enum {
            K_LDST,
            K_TMA,
            K_CE,
            K_GET_LDST,
            K_GET_TMA,
            K_CE_GET,
            K_CE2,
            K_CE_LDST,
            K_GEN,
            K_LDGSTS,
            K_GRAN
        };
        struct cfg_t {
            std::string name, family;
            int kind, unroll, layout, blocks, threads;
            uint32_t stage;
            int stages, flavor;
        };
        std::vector<cfg_t> cfgs;
        auto ldst = [&](int kind, int u, int layout, int blocks, int threads, int f) {
            char nm[96], th[16] = "";
            if (threads != 512) snprintf(th, sizeof th, "_t%d", threads);
            snprintf(nm, sizeof nm, "bw_%sldst_u%d_b%d%s_%s%s", kind == K_GET_LDST ? "get_" : "", u, blocks,
                     th, l_names[layout], f_names[f]);
            std::string fam = kind == K_GET_LDST ? "get ldst"
                              : f                ? std::string("put ldst ") + (f == F_CS ? ".cs" : ".na")
                                                 : std::string("put ldst ") + l_names[layout];
            cfgs.push_back({nm, fam, kind, u, layout, blocks, threads, 0, 0, f});
        };
        auto tma = [&](int kind, uint32_t kib, int st, int blocks) {
            char nm[96];
            snprintf(nm, sizeof nm, "bw_%stma_s%dx%uk_b%d", kind == K_GET_TMA ? "get_" : "", st, kib, blocks);
            cfgs.push_back(
                {nm, kind == K_GET_TMA ? "get tma" : "put tma", kind, 0, 0, blocks, 32, kib * 1024, st, 0});
        };
        auto other = [&](int kind, const char *nm, const char *fam, int u, int blocks, int threads) {
            std::string full = nm;
            if (u) full += "_u" + std::to_string(u);
            if (blocks) full += "_b" + std::to_string(blocks);
            if (threads && threads != 512) full += "_t" + std::to_string(threads);
            cfgs.push_back({full, fam, kind, u, L_STRIDE, blocks, threads, 0, 0, F_PLAIN});
        };
        if (bench_wants(&o, "ce")) {
            /* the copy engine: the target; pulling; two engines at once (halves on two streams); the copy
             * engine and SMs at once (halves): whether the link carries more than one copy engine moves */
            other(K_CE, "bw_copy_engine", "ce push", 0, 0, 0);
            other(K_CE_GET, "bw_ce_get", "ce pull", 0, 0, 0);
            other(K_CE2, "bw_ce_2streams", "ce push, 2 streams", 0, 0, 0);
            other(K_CE_LDST, "bw_ce_plus_ldst", "ce + SMs push", 4, 2 * sms, 512);
        }
        if (bench_wants(&o, "bw")) {
            /* 16-byte ld/st, grid-stride: loads in flight per thread x blocks per SM */
            for (int u : {1, 2, 4, 8, 16})
                for (int m : {1, 2, 4}) ldst(K_LDST, u, L_STRIDE, m * sms, 512, F_PLAIN);
            for (int u : {4, 8})
                for (int m : {1, 2}) ldst(K_LDST, u, L_STRIDE, m * sms, 1024, F_PLAIN);
            for (int u : {4, 8})
                for (int m : {4, 8}) ldst(K_LDST, u, L_STRIDE, m * sms, 256, F_PLAIN);
            /* fewer SMs, deeper pipelines: does the link saturate before every SM pushes? */
            for (int u : {8, 16}) ldst(K_LDST, u, L_STRIDE, sms / 2, 512, F_PLAIN);
            ldst(K_LDST, 16, L_STRIDE, sms / 4, 512, F_PLAIN);
            /* each block a contiguous chunk (the library's dion_put_block per block); each warp runs of
             * whole 128-byte lines */
            for (int layout : {L_CHUNK, L_WARP})
                for (int u : {4, 8, 16})
                    for (int m : {1, 2, 4}) ldst(K_LDST, u, layout, m * sms, 512, F_PLAIN);
            /* cache hints */
            for (int f : {F_CS, F_NA})
                for (int u : {4, 8})
                    for (int m : {1, 4}) ldst(K_LDST, u, L_STRIDE, m * sms, 512, f);
            /* stores only: the SMs' write path without the loads */
            for (int m : {1, 2, 4}) other(K_GEN, "bw_stores_only", "put stores only", 0, m * sms, 512);
            other(K_GEN, "bw_stores_only", "put stores only", 0, sms, 1024);
            /* write size per request: 32, 64 and 128 bytes of a line per store instruction */
            for (int g : {32, 64, 128})
                cfgs.push_back({"bw_gran" + std::to_string(g) + "_b" + std::to_string(2 * sms),
                                "put write size", K_GRAN, g, L_STRIDE, 2 * sms, 512, 0, 0, F_PLAIN});
            /* cp.async (LDGSTS) global -> shared, stores from shared memory */
            other(K_LDGSTS, "bw_ldgsts", "put ldgsts", 4, 2 * sms, 512);
            other(K_LDGSTS, "bw_ldgsts", "put ldgsts", 8, sms, 512);
            other(K_LDGSTS, "bw_ldgsts", "put ldgsts", 8, 2 * sms, 256);
            /* bulk copies: stages x stage size x blocks per SM (shared memory per SM: 228 KiB) */
            static const struct {
                uint32_t kib;
                int st, m;
            } tc[] = {{8, 4, 2},  {8, 4, 4},  {16, 4, 1}, {16, 4, 2}, {32, 2, 2},
                      {32, 4, 1}, {32, 6, 1}, {48, 4, 1}, {64, 3, 1}};
            for (const auto &t : tc) tma(K_TMA, t.kib, t.st, t.m * sms);
            /* the other direction: reads from the peer into this rank (a get), a diagnostic of the link */
            for (int u : {4, 8, 16})
                for (int m : {1, 2, 4}) ldst(K_GET_LDST, u, L_STRIDE, m * sms, 512, F_PLAIN);
            ldst(K_GET_LDST, 8, L_CHUNK, 2 * sms, 512, F_PLAIN);
            tma(K_GET_TMA, 16, 4, 2 * sms);
            tma(K_GET_TMA, 32, 4, sms);
            tma(K_GET_TMA, 64, 3, sms);
        }
        BENCH_CHECK_CUDA(
            cudaFuncSetAttribute(bw_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 224 * 1024));
        BENCH_CHECK_CUDA(
            cudaFuncSetAttribute(bw_ldgsts<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 224 * 1024));
        BENCH_CHECK_CUDA(
            cudaFuncSetAttribute(bw_ldgsts<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 224 * 1024));
        cudaStream_t st[2];
        cudaEvent_t fork, join[2];
        for (int k = 0; k < 2; k++) {
            BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
            BENCH_CHECK_CUDA(cudaEventCreateWithFlags(&join[k], cudaEventDisableTiming));
        }
        BENCH_CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        /* whether the peer is this GPU (MPS) or another one (NVLink): PCI addresses of both */
        int pci[2] = {prop.pciDomainID, prop.pciBusID}, same_gpu = 1;
        std::vector<int> pcis(2 * (size_t)nranks);
        OK(dion_comm_allgather(comm, pci, sizeof pci, pcis.data()));
        same_gpu = pcis[0] == pcis[2] && pcis[1] == pcis[3];
        std::vector<bw_res_t> results;
        std::vector<size_t> sizes;
        if (total / 4 >= (1u << 20)) sizes.push_back(total / 4);
        sizes.push_back(total);
        int seed = 0;
        for (const cfg_t &cf : cfgs) {
            ldst_fn lk = NULL;
            if (cf.kind == K_LDST || cf.kind == K_GET_LDST) {
                lk = ldst_kernel(cf.unroll, cf.layout, cf.flavor);
                if (!lk) {
                    fprintf(stderr, "ab_bench: %s has no kernel instantiated, skipped\n", cf.name.c_str());
                    continue;
                }
            }
            for (size_t size : sizes) {
                seed++;
                /* a fresh pattern per run (the rank number stands in for it), and a cleared target */
                int pat = 16 + seed % 200,
                    pull = cf.kind == K_GET_LDST || cf.kind == K_GET_TMA || cf.kind == K_CE_GET,
                    writer = pull ? 1 : 0;
                if (rank_ == writer && cf.kind != K_GEN) { /* the rank whose [0, size) is copied */
                    bench_fill<<<sms * 4, 512>>>(base, size, pat);
                    BENCH_CHECK_LAUNCH("bench_fill");
                }
                if (rank_ == (writer ^ 1)) BENCH_CHECK_CUDA(cudaMemset(base + total, 0, size));
                BENCH_CHECK_CUDA(cudaDeviceSynchronize());
                OK(dion_comm_barrier(comm));
                std::vector<float> ms;
                const char *s = pull ? theirs : base;
                char *d = (pull ? base : theirs) + total;
                size_t half = size / 2;
                if (rank_ == 0) {
                    ms = bench_time_ms(6, [&] {
                        switch (cf.kind) {
                        case K_CE:
                        case K_CE_GET:
                            BENCH_CHECK_CUDA(cudaMemcpyAsync(d, s, size, cudaMemcpyDeviceToDevice));
                            break;
                        case K_CE2:
                        case K_CE_LDST:
                            BENCH_CHECK_CUDA(cudaEventRecord(fork, 0));
                            for (int k = 0; k < 2; k++) BENCH_CHECK_CUDA(cudaStreamWaitEvent(st[k], fork, 0));
                            BENCH_CHECK_CUDA(cudaMemcpyAsync(d, s, half, cudaMemcpyDeviceToDevice, st[0]));
                            if (cf.kind == K_CE2)
                                BENCH_CHECK_CUDA(cudaMemcpyAsync(d + half, s + half, size - half,
                                                                 cudaMemcpyDeviceToDevice, st[1]));
                            else
                                bw_ldst<4, L_STRIDE, F_PLAIN><<<cf.blocks, cf.threads, 0, st[1]>>>(
                                    (const ulonglong2 *)(s + half), (ulonglong2 *)(d + half),
                                    (size - half) / 16);
                            for (int k = 0; k < 2; k++) {
                                BENCH_CHECK_CUDA(cudaEventRecord(join[k], st[k]));
                                BENCH_CHECK_CUDA(cudaStreamWaitEvent(0, join[k], 0));
                            }
                            break;
                        case K_TMA:
                        case K_GET_TMA:
                            bw_tma<<<cf.blocks, cf.threads, 128 + (size_t)cf.stage * cf.stages>>>(
                                s, d, size, cf.stage, cf.stages);
                            break;
                        case K_GEN:
                            bw_gen<<<cf.blocks, cf.threads>>>((ulonglong2 *)d, size / 16, pat);
                            break;
                        case K_GRAN:
                            if (cf.unroll == 32)
                                bw_gran<32><<<cf.blocks, cf.threads>>>((const ulonglong2 *)s, (ulonglong2 *)d,
                                                                       size / 16);
                            else if (cf.unroll == 64)
                                bw_gran<64><<<cf.blocks, cf.threads>>>((const ulonglong2 *)s, (ulonglong2 *)d,
                                                                       size / 16);
                            else
                                bw_gran<128><<<cf.blocks, cf.threads>>>((const ulonglong2 *)s,
                                                                        (ulonglong2 *)d, size / 16);
                            break;
                        case K_LDGSTS: {
                            size_t smem = 2 * (size_t)cf.unroll * 16 * cf.threads;
                            if (cf.unroll == 4)
                                bw_ldgsts<4><<<cf.blocks, cf.threads, smem>>>((const ulonglong2 *)s,
                                                                              (ulonglong2 *)d, size / 16);
                            else
                                bw_ldgsts<8><<<cf.blocks, cf.threads, smem>>>((const ulonglong2 *)s,
                                                                              (ulonglong2 *)d, size / 16);
                            break;
                        }
                        default:
                            lk<<<cf.blocks, cf.threads>>>((const ulonglong2 *)s, (ulonglong2 *)d, size / 16);
                        }
                    });
                }
                OK(dion_comm_barrier(comm));
                int bad = 0;
                if (rank_ == (writer ^ 1)) { /* the rank that received checks 65 sampled pages */
                    for (int k = 0; k < 64 && !bad; k++) {
                        size_t off = (size / 64) * (size_t)k + (size_t)k * 4099 % 4096;
                        if (off + 4096 > size) off = size - 4096;
                        bad += bench_check_landed("ab", base, total + off, off, 4096, pat, cf.name.c_str());
                    }
                    bad += bench_check_landed("ab", base, total + size - 4096, size - 4096, 4096, pat,
                                              cf.name.c_str());
                }
                failures += bad;
                int all_bad = 0;
                std::vector<int> v(nranks);
                OK(dion_comm_allgather(comm, &bad, sizeof bad, v.data()));
                for (int x : v) all_bad += x;
                if (rank_ == 0 && !ms.empty() && !all_bad) {
                    double med = size / (ms[ms.size() / 2] * 1e-3) / 1e9;
                    bench_row(&o, "dion", cf.name.c_str(), "block", (long long)size, "GBps_median", med);
                    bench_row(&o, "dion", cf.name.c_str(), "block", (long long)size, "GBps_best",
                              size / (ms[0] * 1e-3) / 1e9);
                    results.push_back({cf.name, cf.family, size, med});
                }
            }
        }
        for (int k = 0; k < 2; k++) {
            cudaStreamDestroy(st[k]);
            cudaEventDestroy(join[k]);
        }
        cudaEventDestroy(fork);
        if (rank_ == 0 && !results.empty()) bw_summary(results, sizes, same_gpu);
    }

    int all_fail = 0;
    std::vector<int> fails(nranks);
    OK(dion_comm_allgather(comm, &failures, sizeof failures, fails.data()));
    for (int f : fails) all_fail += f;
    if (rank_ == 0) printf("# %s: %d data or device errors\n", all_fail ? "FAIL" : "ok", all_fail);
    cudaFree(out);
    OK(dion_win_destroy(win));
    OK(dion_dev_destroy(comm, &dev));
    dion_comm_destroy(comm);
    return all_fail ? 1 : 0;
}
