/* The same ping-pongs and bandwidth as p2p_bench, written the way a user of NCCL's device API (2.28+) writes
 * them over LSA (load/store-accessible) windows: ncclGetLsaPointer gives the peer's mapping, data moves with
 * int4 stores, and a flag in the peer's window is released at system scope. One rank per GPU (NCCL does not
 * put two ranks on one GPU). Start with: dionrun -n 2 nccl_lsa_bench [--tests ...] [--csv FILE] */
#include <cuda/atomic>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <vector>

#include "bench_common.h"
#include "dion/dion.h"

#define PP_DST  (8ull << 20)
#define SIG_OFF (4ull << 20) /* the flag lives in the window, as in NCCL LSA code */

enum { OP_SIGNAL, OP_PS_THREAD, OP_PS_WARP, OP_PS_BLOCK };

#define NCCL_OK(call)                                                                                        \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess) {                                                                             \
            fprintf(stderr, "FAIL %s: %s\n", #call, ncclGetErrorString(r_));                                 \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* int4 body with a byte tail, split over the group: what LSA user code typically writes. */
static __device__ __forceinline__ void group_copy(char *dst, const char *src, size_t bytes, uint32_t r,
                                                  uint32_t g)
{
    size_t n16 = bytes / 16;
    for (size_t i = r; i < n16; i += g) ((int4 *)dst)[i] = ((const int4 *)src)[i];
    for (size_t i = n16 * 16 + r; i < bytes; i += g) dst[i] = src[i];
}

__global__ void __launch_bounds__(1024, 1)
    pingpong(ncclWindow_t win, ncclDevComm dc, size_t bytes, int op, int iters, int warmup, uint64_t base,
             unsigned long long *out)
{
    const int me = dc.rank, peer = me ^ 1, initiator = me == 0;
    const uint32_t tid = threadIdx.x;
    char *mine = (char *)ncclGetLocalPointer(win, 0), *theirs = (char *)ncclGetLsaPointer(win, 0, peer);
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system> mysig(*(uint64_t *)(mine + SIG_OFF)),
        peersig(*(uint64_t *)(theirs + SIG_OFF));
    uint64_t t0 = 0;
    for (int i = 1; i <= warmup + iters; i++) {
        uint64_t v = base + (uint64_t)i;
        if (i == warmup + 1) t0 = bench_now_ns();
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == initiator) {
                if (op == OP_PS_THREAD && tid == 0) group_copy(theirs + PP_DST, mine, bytes, 0, 1);
                if (op == OP_PS_WARP && tid < 32) {
                    group_copy(theirs + PP_DST, mine, bytes, tid, 32);
                    __syncwarp();
                }
                if (op == OP_PS_BLOCK) {
                    group_copy(theirs + PP_DST, mine, bytes, tid, blockDim.x);
                    __syncthreads();
                }
                if (tid == 0) peersig.store(v, cuda::memory_order_release);
            } else {
                if (tid == 0)
                    while (mysig.load(cuda::memory_order_acquire) != v) {
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

__global__ void put_bw(ncclWindow_t win, size_t total, size_t dst_base, int peer)
{
    const int4 *src = (const int4 *)ncclGetLocalPointer(win, 0);
    int4 *dst = (int4 *)ncclGetLsaPointer(win, dst_base, peer);
    size_t n16 = total / 16, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) dst[i] = src[i];
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    bench_parse(argc, argv, &o);
    dion_comm_t dcomm;
    if (dion_comm_init_env(&dcomm) != DION_SUCCESS) {
        fprintf(stderr, "FAIL: %s\n", dion_last_error());
        return 1;
    }
    int rank = dion_comm_rank(dcomm), n = dion_comm_size(dcomm);
    ncclUniqueId id;
    if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    dion_comm_bcast(dcomm, &id, sizeof id, 0);
    ncclComm_t comm;
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank));
    cudaDeviceProp prop;
    int dev_id = 0;
    cudaGetDevice(&dev_id);
    cudaGetDeviceProperties(&prop, dev_id);
    int want_bw = bench_wants(&o, "put_bw");
    size_t bytes = want_bw ? 2 * (size_t)o.bw_bytes : (64ull << 20);
    void *buf = NULL;
    NCCL_OK(ncclMemAlloc(&buf, bytes));
    ncclWindow_t win;
    NCCL_OK(ncclCommWindowRegister(comm, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
    ncclDevCommRequirements reqs;
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER
    reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
    memset(&reqs, 0, sizeof reqs);
#endif
    ncclDevComm dc;
    NCCL_OK(ncclDevCommCreate(comm, &reqs, &dc));
    bench_fill<<<prop.multiProcessorCount * 4, 512>>>((char *)buf, bytes / 2, rank);
    BENCH_CHECK_LAUNCH("bench_fill");
    BENCH_CHECK_CUDA(cudaMemset((char *)buf + SIG_OFF, 0, 8));
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    unsigned long long *out;
    BENCH_CHECK_CUDA(cudaMalloc(&out, 64));
    bench_spin<<<prop.multiProcessorCount, 256>>>(400000000ull, out);
    BENCH_CHECK_LAUNCH("bench_spin");
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    dion_comm_barrier(dcomm);
    if (rank == 0) printf("# NCCL %d LSA bench: %d ranks, GPU %s\n", NCCL_VERSION_CODE, n, prop.name);
    uint64_t base_value = 0;
    int failures = 0, active = rank < 2, peer = rank ^ 1;

    for (const bench_pp_case_t &pc : bench_pp_cases(&o, OP_SIGNAL, OP_PS_THREAD, OP_PS_WARP, OP_PS_BLOCK)) {
        int iters, warmup;
        bench_pp_iters(&o, pc.bytes, &iters, &warmup);
        dion_comm_barrier(dcomm);
        if (active) {
            pingpong<<<1, pc.threads>>>(win, dc, (size_t)pc.bytes, pc.op, iters, warmup, base_value, out);
            BENCH_CHECK_LAUNCH("pingpong");
            BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        }
        base_value += (uint64_t)(iters + warmup);
        dion_comm_barrier(dcomm);
        unsigned long long t;
        BENCH_CHECK_CUDA(cudaMemcpy(&t, out, 8, cudaMemcpyDeviceToHost));
        if (active && pc.bytes)
            failures +=
                bench_check_landed("nccl_lsa", (char *)buf, PP_DST, 0, (size_t)pc.bytes, peer, pc.test);
        if (rank == 0)
            bench_row(&o, "nccl_lsa", pc.test, pc.group, pc.bytes, "oneway_us", (double)t / iters / 2 / 1000);
    }
    if (want_bw) {
        size_t total = (size_t)o.bw_bytes;
        dion_comm_barrier(dcomm);
        if (rank == 0) {
            std::vector<float> ms = bench_time_ms(
                6, [&] { put_bw<<<prop.multiProcessorCount * 4, 512>>>(win, total, total, 1); });
            bench_row(&o, "nccl_lsa", "put_bw", "block", (long long)total, "GBps_median",
                      total / (ms[ms.size() / 2] * 1e-3) / 1e9);
            bench_row(&o, "nccl_lsa", "put_bw", "block", (long long)total, "GBps_best",
                      total / (ms[0] * 1e-3) / 1e9);
        }
        dion_comm_barrier(dcomm);
    }
    if (rank == 0 || failures) printf("# nccl_lsa: %d data errors on rank %d\n", failures, rank);
    cudaFree(out);
    NCCL_OK(ncclDevCommDestroy(comm, &dc));
    NCCL_OK(ncclCommWindowDeregister(comm, win));
    NCCL_OK(ncclMemFree(buf));
    ncclCommDestroy(comm);
    dion_comm_destroy(dcomm);
    return failures ? 1 : 0;
}
