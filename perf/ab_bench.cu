/* A/B measurements for the p2p rows behind NVSHMEM and NCCL's LSA API (issue 10), in one process so that one
 * run on the GPU machine compares them side by side. Rank 0 sends to rank 1; start with
 *   dionrun -n 2 [--mps] ab_bench [--tests lsa,packet,bw,ce] [--csv FILE] [--label L] [--bw-bytes N]
 * - lsa: put_signal ping-pongs written the way NCCL LSA user code writes them (int4 copy by the group, a
 * group barrier, one release store of the flag), next to dion_put_signal_warp/_block in the same process, at
 * the sizes of the rows where DION is behind: the gap left is DION's own path, not the harness.
 * - bw: 1 GiB puts over the mapped window, sweeping blocks x loads in flight per thread for the 16-byte
 *   load/store copy, two layouts (each block a contiguous chunk, or grid-stride), and the bulk-copy engine
 *   (cp.async.bulk through shared memory) with several block counts and stage sizes. The copy engine
 *   (cudaMemcpyAsync to the peer's mapping) in the same run is the target (issue 10 goal 4).
 * Every row is verified before its time is printed: the ping-pong receiver checks the bytes that landed, and
 * each bandwidth configuration writes a pattern of its own (the source is refilled with a new seed) that rank
 * 1 checks at 64 sampled pages. CSV rows impl,label,test,group,bytes,metric,value as bench_common.h writes
 * them; test names say the variant (bw_ldst_u8_b264_chunk = 16-byte loads, 8 in flight, 264 blocks, chunk
 * layout; _t256 / _t1024 threads per block other than 512; _cs / _na / _lu the cache hints;
 * bw_tma_s4x32k_b132 = bulk copies, 4 stages of 32 KiB, 132 blocks; bw_get_* the peer's memory read into this
 * rank's). */
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

/* 16-byte loads and stores, U loads in flight per thread before its stores. chunk layout: block b copies
 * bytes [b*chunk, (b+1)*chunk) (as dion_put_block per block does); grid-stride: element i goes to thread
 * i mod (blocks*threads) (as the hand-written copy kernel does). n16 is a multiple of U * threads here.
 * F, the cache hints (sm_90 has no wider than 16-byte global access; multimem is out, NVLS is disabled):
 * F_PLAIN plain ld/st; F_CS streaming stores (st.global.cs: evict first, the line is not kept in L2);
 * F_NA loads and stores that do not allocate in L1 (.L1::no_allocate); F_LU last-use loads (ld.global.lu)
 * and streaming stores. */
enum { F_PLAIN = 0, F_CS = 1, F_NA = 2, F_LU = 3 };
static const char *const f_names[] = {"", "_cs", "_na", "_lu"};
/* Volatile asm keeps the U loads ahead of the U stores (the compiler would otherwise interleave them). */
template <int F> static __device__ __forceinline__ ulonglong2 ld16(const ulonglong2 *p)
{
    ulonglong2 v;
    if (F == F_NA)
        asm volatile("ld.global.L1::no_allocate.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
    else if (F == F_LU)
        asm volatile("ld.global.lu.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
    else
        asm volatile("ld.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
    return v;
}

template <int F> static __device__ __forceinline__ void st16(ulonglong2 *p, ulonglong2 v)
{
    if (F == F_CS || F == F_LU)
        asm volatile("st.global.cs.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.x), "l"(v.y) : "memory");
    else if (F == F_NA)
        asm volatile("st.global.L1::no_allocate.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.x), "l"(v.y)
                     : "memory");
    else
        asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.x), "l"(v.y) : "memory");
}

template <int U, int chunked, int F>
__global__ void bw_ldst(const ulonglong2 *src, ulonglong2 *dst, size_t n16)
{
    size_t hi, step, i;
    if (chunked) {
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
    if (!strcmp(o.tests, "signal,put_signal,put_bw,completion,msgrate,packet")) o.tests = "lsa,packet,bw,ce";
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

    /* ---- bandwidth: rank 0 writes [0, total) of its window into rank 1's [total, 2 total) ---- */
    if (want_bw) {
        struct cfg_t {
            std::string name;
            /* 0 ldst, 1 tma, 2 copy engine, 3 ldst pulling (rank 0 reads rank 1's part: a get), 4 tma pulling
             */
            int kind;
            int unroll, chunked, blocks, threads;
            uint32_t stage;
            int stages;
            int flavor; /* F_* for ldst */
        };
        std::vector<cfg_t> cfgs;
        auto ldst = [&](int kind, int u, int chunked, int blocks, int threads, int f) {
            char nm[96];
            char th[16] = "";
            if (threads != 512) snprintf(th, sizeof th, "_t%d", threads);
            snprintf(nm, sizeof nm, "bw_%sldst_u%d_b%d%s_%s%s", kind == 3 ? "get_" : "", u, blocks, th,
                     chunked ? "chunk" : "stride", f_names[f]);
            cfgs.push_back({nm, kind, u, chunked, blocks, threads, 0, 0, f});
        };
        auto tma = [&](int kind, uint32_t kib, int st, int blocks) {
            char nm[96];
            snprintf(nm, sizeof nm, "bw_%stma_s%dx%uk_b%d", kind == 4 ? "get_" : "", st, kib, blocks);
            cfgs.push_back({nm, kind, 0, 1, blocks, 32, kib * 1024, st, 0});
        };
        if (bench_wants(&o, "ce")) cfgs.push_back({"bw_copy_engine", 2, 0, 0, 0, 0, 0, 0, 0});
        if (bench_wants(&o, "bw")) {
            static const int unrolls[] = {1, 2, 4, 8, 16};
            static const int mult[] = {1, 2, 4, 8}; /* blocks per SM */
            for (int chunked = 0; chunked < 2; chunked++)
                for (int u : unrolls)
                    for (int m : mult) ldst(0, u, chunked, m * sms, 512, F_PLAIN);
            /* cache hints on the deeper pipelines */
            for (int f = F_CS; f <= F_LU; f++)
                for (int chunked = 0; chunked < 2; chunked++)
                    for (int u = 4; u <= 16; u *= 2)
                        for (int m = 1; m <= 4; m *= 2) ldst(0, u, chunked, m * sms, 512, f);
            /* warps per block: 8 and 32 instead of 16 */
            for (int f = F_PLAIN; f <= F_CS; f++)
                for (int u = 4; u <= 8; u *= 2) {
                    for (int m = 2; m <= 8; m *= 2) ldst(0, u, 0, m * sms, 256, f);
                    for (int m = 1; m <= 2; m++) ldst(0, u, 0, m * sms, 1024, f);
                }
            /* fewer SMs, deeper pipelines: does the link saturate before every SM pushes? */
            for (int f = F_PLAIN; f <= F_CS; f++)
                for (int u = 8; u <= 16; u *= 2)
                    for (int div = 2; div <= 4; div *= 2) ldst(0, u, 0, sms / div, 1024, f);
            /* the other direction of the link for comparison: reads from the peer into this rank */
            for (int u = 4; u <= 8; u *= 2)
                for (int m = 1; m <= 4; m *= 2) ldst(3, u, 1, m * sms, 512, F_PLAIN);
            /* bulk copies: stages x stage size x blocks per SM (shared memory per SM: 228 KiB) */
            static const struct {
                uint32_t kib;
                int st;
            } tc[] = {{8, 2}, {8, 4}, {16, 2}, {16, 4}, {32, 2}, {32, 4}, {32, 6}, {48, 4}, {64, 3}};
            for (const auto &t : tc)
                for (int m = 1; m <= 2; m++)
                    if (((size_t)t.kib * 1024 * t.st + 128) * m <= 224 * 1024) tma(1, t.kib, t.st, m * sms);
            tma(4, 16, 4, 2 * sms);
            tma(4, 32, 4, sms);
            tma(4, 64, 3, sms);
        }
        BENCH_CHECK_CUDA(
            cudaFuncSetAttribute(bw_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 224 * 1024));
        int seed = 0;
        for (const cfg_t &cf : cfgs) {
            seed++;
            /* a fresh pattern per configuration (the rank number stands in for it), and a cleared target */
            int pat = 16 + seed, pull = cf.kind == 3 || cf.kind == 4, writer = pull ? 1 : 0;
            if (rank_ == writer) { /* the rank whose [0, total) is copied */
                bench_fill<<<sms * 4, 512>>>(base, total, pat);
                BENCH_CHECK_LAUNCH("bench_fill");
            }
            if (rank_ == (writer ^ 1)) BENCH_CHECK_CUDA(cudaMemset(base + total, 0, total));
            BENCH_CHECK_CUDA(cudaDeviceSynchronize());
            OK(dion_comm_barrier(comm));
            std::vector<float> ms;
            if (rank_ == 0) {
                ms = bench_time_ms(6, [&] {
                    if (cf.kind == 2) {
                        BENCH_CHECK_CUDA(
                            cudaMemcpyAsync(theirs + total, base, total, cudaMemcpyDeviceToDevice));
                    } else if (cf.kind == 1 || cf.kind == 4) {
                        bw_tma<<<cf.blocks, cf.threads, 128 + (size_t)cf.stage * cf.stages>>>(
                            pull ? theirs : base, (pull ? base : theirs) + total, total, cf.stage, cf.stages);
                    } else {
                        const ulonglong2 *s = (const ulonglong2 *)(pull ? theirs : base);
                        ulonglong2 *d = (ulonglong2 *)((pull ? base : theirs) + total);
                        size_t n16 = total / 16;
#define AB_BWF(u, f)                                                                                         \
    if (cf.unroll == u && cf.flavor == f) {                                                                  \
        if (cf.chunked)                                                                                      \
            bw_ldst<u, 1, f><<<cf.blocks, cf.threads>>>(s, d, n16);                                          \
        else                                                                                                 \
            bw_ldst<u, 0, f><<<cf.blocks, cf.threads>>>(s, d, n16);                                          \
    }
#define AB_BW(u) AB_BWF(u, F_PLAIN) AB_BWF(u, F_CS) AB_BWF(u, F_NA) AB_BWF(u, F_LU)
                        AB_BW(1) AB_BW(2) AB_BW(4) AB_BW(8) AB_BW(16)
#undef AB_BW
#undef AB_BWF
                    }
                });
            }
            OK(dion_comm_barrier(comm));
            int bad = 0;
            if (rank_ == (writer ^ 1)) { /* the rank that received checks */
                for (int k = 0; k < 64 && !bad; k++) {
                    size_t off = (total / 64) * (size_t)k + (size_t)k * 4099 % 4096;
                    if (off + 4096 > total) off = total - 4096;
                    bad += bench_check_landed("ab", base, total + off, off, 4096, pat, cf.name.c_str());
                }
                bad += bench_check_landed("ab", base, total + total - 4096, total - 4096, 4096, pat,
                                          cf.name.c_str());
            }
            failures += bad;
            int all_bad = 0;
            std::vector<int> v(nranks);
            OK(dion_comm_allgather(comm, &bad, sizeof bad, v.data()));
            for (int x : v) all_bad += x;
            if (rank_ == 0 && !ms.empty() && !all_bad) {
                bench_row(&o, "dion", cf.name.c_str(), "block", (long long)total, "GBps_median",
                          total / (ms[ms.size() / 2] * 1e-3) / 1e9);
                bench_row(&o, "dion", cf.name.c_str(), "block", (long long)total, "GBps_best",
                          total / (ms[0] * 1e-3) / 1e9);
            }
        }
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
