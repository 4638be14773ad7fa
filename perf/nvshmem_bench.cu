/* The same measurements as p2p_bench, through NVSHMEM's device API, for a side-by-side comparison. NVSHMEM's
 * unique id travels over DION's bootstrap, so the same launcher starts both:
 *   dionrun -n 2 [--mps] nvshmem_bench [--tests ...] [--csv FILE] [--label L]
 * Semantics differ: nvshmemx_signal_op is not ordered after earlier puts (DION's signal is a release). */
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "bench_common.h"
#include "dion/dion.h"

#define PP_DST (8ull << 20)

enum { OP_SIGNAL, OP_PS_THREAD, OP_PS_WARP, OP_PS_BLOCK };

__global__ void __launch_bounds__(1024, 1) pingpong(char *buf, uint64_t *sig, size_t bytes, int op, int iters,
                                                    int warmup, uint64_t base, unsigned long long *out)
{
    const int me = nvshmem_my_pe(), peer = me ^ 1, initiator = me == 0;
    const uint32_t tid = threadIdx.x;
    uint64_t t0 = 0;
    for (int i = 1; i <= warmup + iters; i++) {
        uint64_t v = base + (uint64_t)i;
        if (i == warmup + 1) t0 = bench_now_ns();
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == initiator) {
                switch (op) {
                case OP_SIGNAL:
                    if (tid == 0) nvshmemx_signal_op(sig, v, NVSHMEM_SIGNAL_SET, peer);
                    break;
                case OP_PS_THREAD:
                    if (tid == 0)
                        nvshmem_putmem_signal_nbi(buf + PP_DST, buf, bytes, sig, v, NVSHMEM_SIGNAL_SET, peer);
                    break;
                case OP_PS_WARP:
                    if (tid < 32)
                        nvshmemx_putmem_signal_nbi_warp(buf + PP_DST, buf, bytes, sig, v, NVSHMEM_SIGNAL_SET,
                                                        peer);
                    break;
                default:
                    nvshmemx_putmem_signal_nbi_block(buf + PP_DST, buf, bytes, sig, v, NVSHMEM_SIGNAL_SET,
                                                     peer);
                }
            } else {
                if (tid == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_EQ, v);
                if (op == OP_PS_BLOCK)
                    __syncthreads();
                else if (op == OP_PS_WARP && tid < 32)
                    __syncwarp();
            }
        }
    }
    if (tid == 0 && initiator) out[0] = bench_now_ns() - t0;
}

__global__ void put_bw(char *buf, size_t total, size_t chunk, size_t dst_base, int peer)
{
    for (size_t off = (size_t)blockIdx.x * chunk; off < total; off += (size_t)gridDim.x * chunk) {
        size_t n = total - off < chunk ? total - off : chunk;
        nvshmemx_putmem_nbi_block(buf + dst_base + off, buf + off, n, peer);
    }
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

__global__ void __launch_bounds__(1024, 1)
    completion(char *buf, size_t bytes, int group, int iters, int warmup, unsigned long long *out)
{
    uint64_t t0 = 0;
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) t0 = bench_now_ns();
        if (group == 2)
            nvshmemx_putmem_nbi_block(buf + PP_DST, buf, bytes, 1);
        else if (threadIdx.x == 0)
            nvshmem_putmem_nbi(buf + PP_DST, buf, bytes, 1);
        if (group == 2) __syncthreads();
        if (threadIdx.x == 0) nvshmem_quiet();
        if (group == 2) __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = bench_now_ns() - t0;
}

__global__ void msgrate(char *buf, int per_thread, size_t region)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    for (int i = 0; i < per_thread; i++) {
        size_t word = (t + (size_t)i * nt) % (region / 8);
        nvshmem_putmem_nbi(buf + PP_DST + word * 8, buf + (word % 1024) * 8, 8, 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    bench_parse(argc, argv, &o);
    dion_comm_t comm;
    if (dion_comm_init_env(&comm) != DION_SUCCESS) {
        fprintf(stderr, "FAIL: %s\n", dion_last_error());
        return 1;
    }
    int rank = dion_comm_rank(comm), n = dion_comm_size(comm);
    nvshmemx_uniqueid_t uid;
    memset(&uid, 0, sizeof uid);
    if (rank == 0) nvshmemx_get_uniqueid(&uid);
    dion_comm_bcast(comm, &uid, sizeof uid, 0);
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args(rank, n, &uid, &attr);
    if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
        fprintf(stderr, "FAIL: nvshmemx_init_attr\n");
        return 1;
    }
    cudaDeviceProp prop;
    int dev_id = 0;
    cudaGetDevice(&dev_id);
    cudaGetDeviceProperties(&prop, dev_id);
    int want_bw = bench_wants(&o, "put_bw");
    size_t buf_bytes = want_bw ? 2 * (size_t)o.bw_bytes : (64ull << 20);
    if (buf_bytes < (64ull << 20)) buf_bytes = 64ull << 20; /* the message rate lands at 8-12 MiB */
    char *buf = (char *)nvshmem_malloc(buf_bytes);
    uint64_t *sig = (uint64_t *)nvshmem_calloc(8, sizeof(uint64_t));
    if (!buf || !sig) {
        fprintf(stderr, "FAIL: nvshmem_malloc(%zu); raise NVSHMEM_SYMMETRIC_SIZE\n", buf_bytes);
        return 1;
    }
    bench_fill<<<prop.multiProcessorCount * 4, 512>>>(buf, buf_bytes / 2, rank);
    BENCH_CHECK_LAUNCH("bench_fill");
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    unsigned long long *out;
    BENCH_CHECK_CUDA(cudaMalloc(&out, 64));
    bench_spin<<<prop.multiProcessorCount, 256>>>(400000000ull, out);
    BENCH_CHECK_LAUNCH("bench_spin");
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    if (rank == 0) printf("# NVSHMEM bench: %d PEs, GPU %s, iters %d\n", n, prop.name, o.iters);
    int failures = 0, active = rank < 2, peer = rank ^ 1;
    uint64_t base_value = 0;

    for (const bench_pp_case_t &pc : bench_pp_cases(&o, OP_SIGNAL, OP_PS_THREAD, OP_PS_WARP, OP_PS_BLOCK)) {
        int iters, warmup;
        bench_pp_iters(&o, pc.bytes, &iters, &warmup);
        BENCH_CHECK_CUDA(cudaMemset(buf + PP_DST, 0, pc.bytes ? pc.bytes : 8));
        nvshmem_barrier_all();
        if (active) {
            pingpong<<<1, pc.threads>>>(buf, sig, (size_t)pc.bytes, pc.op, iters, warmup, base_value, out);
            BENCH_CHECK_LAUNCH("pingpong");
            BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        }
        base_value += (uint64_t)(iters + warmup);
        nvshmem_barrier_all();
        unsigned long long t;
        BENCH_CHECK_CUDA(cudaMemcpy(&t, out, 8, cudaMemcpyDeviceToHost));
        if (active && pc.bytes)
            failures += bench_check_landed("nvshmem", buf, PP_DST, 0, (size_t)pc.bytes, peer, pc.test);
        if (rank == 0)
            bench_row(&o, "nvshmem", pc.test, pc.group, pc.bytes, "oneway_us", (double)t / iters / 2 / 1000);
    }

    if (want_bw) {
        size_t total = (size_t)o.bw_bytes;
        int blocks = prop.multiProcessorCount * 4, threads = 512;
        size_t chunk = (total / blocks + 4095) / 4096 * 4096;
        nvshmem_barrier_all();
        if (rank == 0) {
            std::vector<float> ms =
                bench_time_ms(6, [&] { put_bw<<<blocks, threads>>>(buf, total, chunk, total, 1); });
            bench_row(&o, "nvshmem", "put_bw", "block", (long long)total, "GBps_median",
                      total / (ms[ms.size() / 2] * 1e-3) / 1e9);
            bench_row(&o, "nvshmem", "put_bw", "block", (long long)total, "GBps_best",
                      total / (ms[0] * 1e-3) / 1e9);
        }
        nvshmem_barrier_all();
        if (rank == 1)
            failures += bench_check_landed("nvshmem", buf, total + total - 65536, total - 65536, 65536, 0,
                                           "put_bw tail");
    }

    if (bench_wants(&o, "completion")) {
        const long long sizes[] = {8, 4096, 65536, 1048576};
        for (long long b : sizes)
            for (int group = 0; group <= 2; group += 2) {
                if (group == 0 && b > 4096) continue;
                int iters = b >= 65536 ? o.iters / 10 : o.iters;
                nvshmem_barrier_all();
                if (rank == 0) {
                    completion<<<1, group == 2 ? 1024 : 1>>>(buf, (size_t)b, group, iters, iters / 10, out);
                    BENCH_CHECK_LAUNCH("completion");
                    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
                    unsigned long long t;
                    BENCH_CHECK_CUDA(cudaMemcpy(&t, out, 8, cudaMemcpyDeviceToHost));
                    bench_row(&o, "nvshmem", "put_quiet", group == 2 ? "block" : "thread", b, "latency_us",
                              (double)t / iters / 1000);
                }
                nvshmem_barrier_all();
            }
    }

    if (bench_wants(&o, "msgrate")) { /* as p2p_bench's row: fresh sources, an empty area, checked */
        int blocks = prop.multiProcessorCount * 2, threads = 256, per = 256;
        const size_t region = 4u << 20;
        bench_fill<<<prop.multiProcessorCount, 512>>>(buf, 8192, rank);
        BENCH_CHECK_LAUNCH("bench_fill");
        BENCH_CHECK_CUDA(cudaMemset(buf + PP_DST, 0, region));
        BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        nvshmem_barrier_all();
        std::vector<float> ms;
        if (rank == 0)
            ms = bench_time_ms(BENCH_RATE_REPS, [&] { msgrate<<<blocks, threads>>>(buf, per, region); });
        nvshmem_barrier_all();
        int bad =
            rank == 1 ? bench_check_rate_words("nvshmem", buf, PP_DST, region / 8, 0, "put8_msgrate") : 0;
        std::vector<int> bads(n);
        if (dion_comm_allgather(comm, &bad, sizeof bad, bads.data()) != DION_SUCCESS) bads.assign(n, 1);
        failures += bad;
        if (rank == 0 && !std::accumulate(bads.begin(), bads.end(), 0)) {
            double ops = (double)blocks * threads * per;
            bench_row(&o, "nvshmem", "put8_msgrate", "thread", 8, "Mops_median",
                      ops / (ms[ms.size() / 2] * 1e-3) / 1e6);
        }
    }
    if (rank == 0 || failures) printf("# nvshmem: %d data errors on rank %d\n", failures, rank);
    cudaFree(out);
    nvshmem_free(sig);
    nvshmem_free(buf);
    nvshmem_finalize();
    dion_comm_destroy(comm);
    return failures ? 1 : 0;
}
