/* First kernel: every rank sends 1 MiB to the next rank with one put_signal and waits for the bytes from the
 * previous rank. Run: dionrun -n 2 --mps ./first_kernel (docs/getting_started.md). */
#include <cuda_runtime.h>
#include <stdio.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define BYTES   (1 << 20)
#define THREADS 256

__global__ void __launch_bounds__(THREADS) exchange(dion_dev_t dev, dion_dwin_t win, int *status)
{
    dion_ctx_t c = dion_ctx(dev, 0);
    int next = (dev.rank + 1) % dev.nranks;
    /* my [0, BYTES) -> next rank's [BYTES, 2*BYTES); then its signal 0 becomes 1, after the data */
    dion_put_signal_block(c, win, next, BYTES, win, 0, BYTES, 0, DION_SIG_SET, 1);
    if (threadIdx.x == 0) *status = dion_wait(c, 0, DION_CMP_EQ, 1, NULL); /* the previous rank's bytes */
}

int main(void)
{
    dion_comm_t comm;
    dion_win_t win;
    dion_dev_t dev;
    void *base;
    int *status, st = -1, bad = 0;
    static unsigned char buf[BYTES];
    if (dion_comm_init_env(&comm) != DION_SUCCESS || /* dionrun, mpirun, srun, torchrun */
        dion_win_alloc(comm, 2 * BYTES, 0, &base, &win) !=
            DION_SUCCESS || /* windows first, then the handle */
        dion_dev_create(comm, NULL, &dev) != DION_SUCCESS) {
        fprintf(stderr, "first_kernel: %s\n", dion_last_error());
        return 1;
    }
    int rank = dion_comm_rank(comm), n = dion_comm_size(comm), prev = (rank + n - 1) % n;
    for (int i = 0; i < BYTES; i++) buf[i] = (unsigned char)(rank + i);
    cudaMemcpy(base, buf, BYTES, cudaMemcpyHostToDevice);
    cudaMalloc(&status, sizeof *status);
    exchange<<<1, THREADS>>>(dev, dion_win_device(win), status);
    if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) bad = 1;
    cudaMemcpy(&st, status, sizeof st, cudaMemcpyDeviceToHost);
    if (st != DION_SUCCESS || dion_dev_check(comm, &dev) != DION_SUCCESS) bad = 1; /* e.g. DION_ERR_TIMEOUT */
    cudaMemcpy(buf, (char *)base + BYTES, BYTES, cudaMemcpyDeviceToHost);
    for (int i = 0; i < BYTES && !bad; i++) bad = buf[i] != (unsigned char)(prev + i);
    printf("first_kernel: rank %d of %d: %s\n", rank, n,
           bad ? "FAILED" : "1 MiB from the previous rank verified");
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    return bad;
}
