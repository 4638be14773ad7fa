/* Two ranks bounce 64 KiB between their GPUs (or two processes on one GPU under MPS):
 *   dionrun -n 2 [--mps] ./gpu_pingpong [rounds [warm-up rounds]]
 * One block of 1024 threads per rank; dion_put_signal_block moves the message and raises the peer's signal
 * after the data. The program checks its own result before it prints a time: every launch and its completion,
 * the final signal values, and every byte received. perf/p2p_bench measures the same loop as the row
 *   put_signal_pingpong block 65536   (p2p_bench --tests put_signal --sizes 65536 --groups block)
 *
 * The pattern worth copying:
 *   1. __launch_bounds__(THREADS, 1) on a kernel launched with THREADS threads per block. The block variants
 * of the device API need more than 64 registers per thread when the compiler is free to choose; a block of
 *      1024 threads gets at most 64 (65536 per SM / 1024), so without the bound the launch fails with
 *      "too many resources requested for launch" and nothing runs. docs/gpu_kernels.md has the numbers.
 *   2. cudaGetLastError() right after <<<...>>> (launch errors), then the result of the synchronize (errors
 *      while running), then the kernel's own status and dion_dev_check (timeouts, bad arguments).
 *   3. Verify the data and the final signals before believing a time. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define BYTES   (64 * 1024)
#define THREADS 1024
#define SEND    0     /* window offset of the bytes this rank sends */
#define RECV    BYTES /* window offset where the peer's bytes land */

typedef struct {
    unsigned long long ns;          /* rank 0: time of the timed rounds */
    unsigned long long last_signal; /* signal 0 when the kernel ended */
    int failed;                     /* a wait did not succeed (timeout, abort) */
} result_t;

static __device__ unsigned long long now_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The tests also build this file with -DPINGPONG_BOUNDS= (no bound) to show that the checks below catch the
 * failed launch. */
#ifndef PINGPONG_BOUNDS
#define PINGPONG_BOUNDS __launch_bounds__(THREADS, 1)
#endif

/* Round i: rank 0 sends and rank 1 waits for signal 0 == i, then rank 1 sends back and rank 0 waits. */
__global__ void PINGPONG_BOUNDS pingpong(dion_dev_t dev, dion_dwin_t win, int warmup, int rounds,
                                         result_t *res)
{
    __shared__ int stop;
    dion_ctx_t c = dion_ctx(dev, 0);
    const int me = dev.rank, peer = me ^ 1;
    unsigned long long t0 = now_ns();
    for (int i = 1; i <= warmup + rounds; i++) {
        if (i == warmup + 1) t0 = now_ns();
        for (int half = 0; half < 2; half++) {
            if ((half == 0) ==
                (me == 0)) { /* my turn: every thread of the block calls with the same arguments */
                dion_put_signal_block(c, win, peer, RECV, win, SEND, BYTES, 0, DION_SIG_SET, (uint64_t)i);
            } else {
                if (threadIdx.x == 0) stop = dion_wait(c, 0, DION_CMP_EQ, (uint64_t)i, NULL) != DION_SUCCESS;
                __syncthreads(); /* the whole block sends only after the wait saw the peer's data */
                if (stop) {
                    if (threadIdx.x == 0) res->failed = 1;
                    return;
                }
            }
        }
    }
    if (threadIdx.x == 0) {
        res->ns = now_ns() - t0;
        if (dion_quiet(c) != DION_SUCCESS) res->failed = 1;
        res->last_signal = dion_signal_read(c, 0);
    }
}

static unsigned char pattern(int rank, size_t i)
{
    return (unsigned char)(rank * 101 + i * 7 + (i >> 9));
}

#define CHECK_DION(call)                                                                                     \
    do {                                                                                                     \
        if ((call) != DION_SUCCESS) {                                                                        \
            fprintf(stderr, "gpu_pingpong: %s failed: %s\n", #call, dion_last_error());                      \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)
#define CHECK_CUDA(call)                                                                                     \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "gpu_pingpong: %s failed: %s\n", #call, cudaGetErrorString(e_));                 \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    /* Untimed warm-up rounds first (about 0.1 s): the GPU's clocks rise under load, and the first rounds also
     * absorb the two ranks' kernels starting at different moments. */
    int rounds = argc > 1 ? atoi(argv[1]) : 5000, warmup = argc > 2 ? atoi(argv[2]) : 20000;
    if (rounds < 1 || warmup < 0) {
        fprintf(stderr, "usage: gpu_pingpong [rounds >= 1 [warm-up rounds >= 0]]\n");
        return 2;
    }
    dion_comm_t comm;
    CHECK_DION(dion_comm_init_env(&comm));
    if (dion_comm_size(comm) != 2) {
        fprintf(stderr, "gpu_pingpong: needs 2 ranks (dionrun -n 2 [--mps] gpu_pingpong), got %d\n",
                dion_comm_size(comm));
        return 1;
    }
    const int rank = dion_comm_rank(comm), peer = rank ^ 1;
    void *base;
    dion_win_t win;
    dion_dev_t dev;
    /* the window first: the handle then carries its bases and kernels need no table lookup */
    CHECK_DION(dion_win_alloc(comm, 2 * BYTES, 0, &base, &win));
    CHECK_DION(dion_dev_create(comm, NULL, &dev));

    static unsigned char host[BYTES];
    for (size_t i = 0; i < BYTES; i++) host[i] = pattern(rank, i);
    CHECK_CUDA(cudaMemcpy((char *)base + SEND, host, BYTES, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset((char *)base + RECV, 0, BYTES));
    result_t *res;
    CHECK_CUDA(cudaMalloc(&res, sizeof *res));
    CHECK_CUDA(cudaMemset(res, 0, sizeof *res));
    CHECK_DION(dion_comm_barrier(comm)); /* the peer's source bytes are in place before anything is sent */

    pingpong<<<1, THREADS>>>(dev, dion_win_device(win), warmup, rounds, res);
    CHECK_CUDA(cudaGetLastError());      /* the launch itself: too many resources, bad configuration */
    CHECK_CUDA(cudaDeviceSynchronize()); /* the run: faults, illegal addresses */
    result_t r;
    CHECK_CUDA(cudaMemcpy(&r, res, sizeof r, cudaMemcpyDeviceToHost));

    /* This rank's verdict, then both ranks': the time is printed only when both received what was sent. */
    int bad = 0;
    if (r.failed || dion_dev_check(comm, &dev) != DION_SUCCESS) {
        fprintf(stderr, "gpu_pingpong: rank %d: a wait or quiet failed: %s\n", rank, dion_last_error());
        bad = 1;
    }
    const unsigned long long total = (unsigned long long)(warmup + rounds);
    if (!bad && r.last_signal != total) {
        fprintf(stderr, "gpu_pingpong: rank %d: signal 0 ended at %llu, expected %llu (one per round)\n",
                rank, r.last_signal, total);
        bad = 1;
    }
    CHECK_CUDA(cudaMemcpy(host, (char *)base + RECV, BYTES, cudaMemcpyDeviceToHost));
    for (size_t i = 0; !bad && i < BYTES; i++)
        if (host[i] != pattern(peer, i)) {
            fprintf(stderr, "gpu_pingpong: rank %d: byte %zu of %d is 0x%02x, expected 0x%02x from rank %d\n",
                    rank, i, BYTES, host[i], pattern(peer, i), peer);
            bad = 1;
        }
    int all[2] = {1, 1};
    CHECK_DION(dion_comm_allgather(comm, &bad, sizeof bad, all));
    if (rank == 0 && !all[0] && !all[1])
        printf("gpu_pingpong: put_signal_pingpong block %d B: %.3f us one-way (verified: %d bytes and signal "
               "%llu on both ranks; kernel time of %d round trips after %d warm-up)\n",
               BYTES, (double)r.ns / rounds / 2 / 1000, BYTES, total, rounds, warmup);
    cudaFree(res);
    CHECK_DION(dion_dev_destroy(comm, &dev));
    CHECK_DION(dion_win_destroy(win));
    CHECK_DION(dion_comm_destroy(comm));
    return all[0] || all[1];
}
