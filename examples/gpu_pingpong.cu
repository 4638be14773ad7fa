/* Two ranks bounce a message between their GPUs (or two processes on one GPU under MPS):
 *   dionrun -n 2 [--mps] ./gpu_pingpong
 * One block per rank; dion_put_signal_block moves 64 KiB and raises the peer's signal after the data. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define BYTES  (64 * 1024)
#define ROUNDS 1000

__global__ void pingpong(dion_dev_t dev, dion_dwin_t win, int *status)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    int me = dev.rank, peer = me ^ 1;
    for (uint64_t k = 1; k <= ROUNDS; k++) {
        if (me == 1 || k > 1) { /* rank 0 starts */
            if (threadIdx.x == 0 && dion_wait(c, 0, DION_CMP_GE, me == 0 ? k - 1 : k, NULL) != DION_SUCCESS)
                *status = 1;
            __syncthreads();
        }
        if (me == 0 || k <= ROUNDS)
            dion_put_signal_block(c, win, peer, BYTES, win, 0, BYTES, 0, DION_SIG_SET, k);
    }
    if (me == 0 && threadIdx.x == 0 && dion_wait(c, 0, DION_CMP_GE, ROUNDS, NULL) != DION_SUCCESS)
        *status = 1;
}

int main(void)
{
    dion_comm_t comm;
    if (dion_comm_init_env(&comm) != DION_SUCCESS || dion_comm_size(comm) != 2) {
        fprintf(stderr, "gpu_pingpong: needs 2 ranks: %s\n", dion_last_error());
        return 1;
    }
    void *base;
    dion_win_t win;
    dion_dev_t dev;
    /* the window first: the handle then carries its bases and kernels need no table lookup */
    if (dion_win_alloc(comm, 2 * BYTES, 0, &base, &win) != DION_SUCCESS ||
        dion_dev_create(comm, NULL, &dev) != DION_SUCCESS) {
        fprintf(stderr, "gpu_pingpong: %s\n", dion_last_error());
        return 1;
    }
    int *status;
    cudaMalloc(&status, sizeof(int));
    cudaMemset(status, 0, sizeof(int));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a);
    pingpong<<<1, 1024>>>(dev, dion_win_device(win), status);
    cudaEventRecord(b);
    cudaError_t e = cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    int st = 1;
    cudaMemcpy(&st, status, sizeof st, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess || st || dion_dev_check(comm, &dev) != DION_SUCCESS)
        fprintf(stderr, "gpu_pingpong: rank %d failed: %s %s\n", dion_comm_rank(comm), cudaGetErrorString(e),
                dion_last_error());
    else if (dion_comm_rank(comm) == 0)
        printf("gpu_pingpong: %d round trips of %d KiB, %.2f us one-way on average (kernel time)\n", ROUNDS,
               BYTES / 1024, ms * 1000 / ROUNDS / 2);
    cudaFree(status);
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    return st;
}
