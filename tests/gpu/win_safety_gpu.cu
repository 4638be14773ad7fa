/* Window safety and argument agreement (tests/common/win_safety.h) on GPUs: kernels run the device API over
 * GPU windows. Two modes exist only here: gpuwin (a GPU window used by a CPU-mode handle under DION_CHECK)
 * and kinds (host memory on one rank, GPU memory on another, in one window). Exits 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/dion.h"

static int dt_gpu_sync(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fprintf(stderr, "FAIL: kernel %s: %s\n", what, cudaGetErrorString(e));
    return e != cudaSuccess;
}

#define DT_KERNEL(name, type)                                                                                \
    static __host__ __device__ void name##_body(type *a);                                                    \
    __global__ void name##_gpu(type arg)                                                                     \
    {                                                                                                        \
        name##_body(&arg);                                                                                   \
    }                                                                                                        \
    static __host__ __device__ void name##_body(type *a)
#define DT_LAUNCH(name, grid, block, ptr) (name##_gpu<<<(grid), (block)>>>(*(ptr)), dt_gpu_sync(#name))
#define DT_ON_HOST                        0

static void *dt_alloc(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess || cudaMemset(p, 0, n) != cudaSuccess) {
        fprintf(stderr, "FAIL: cudaMalloc(%zu)\n", n);
        exit(1);
    }
    return p;
}
static void dt_free(void *p)
{
    cudaFree(p);
}
static void dt_get(void *host, const void *mem, size_t n)
{
    if (n && cudaMemcpy(host, mem, n, cudaMemcpyDefault) != cudaSuccess) {
        fprintf(stderr, "FAIL: cudaMemcpy to host\n");
        exit(1);
    }
}
static void dt_put(void *mem, const void *host, size_t n)
{
    if (n && cudaMemcpy(mem, host, n, cudaMemcpyDefault) != cudaSuccess) {
        fprintf(stderr, "FAIL: cudaMemcpy from host\n");
        exit(1);
    }
}
static int ws_runner_init(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no usable GPU (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return 77;
    }
    return 0;
}

static int ws_run_extra(const char *mode);
#define WS_RUN_EXTRA(mode) ws_run_extra(mode)
#define WS_EXTRA_MODES     "|gpuwin|kinds"

#include "../common/win_safety.h"

/* Defect 5 on a GPU: a CPU-mode handle given a GPU window records an error instead of reading device memory.
 * Both the destination and the source side, and the atomic, are tried. */
static void ws_test_gpuwin(void)
{
    void *gpu_base = NULL, *hb = NULL;
    dion_win_t gw, good;
    WS_OK(dion_win_alloc(ws_comm, WS_BYTES, 0, &gpu_base, &gw));
    WS_OK(dion_win_alloc(ws_comm, WS_BYTES, 1, &hb, &good));
    ws_fill(gpu_base, 0x21);
    ws_badwin_run(dion_win_device(gw), good, hb, "a GPU window on a CPU-mode handle", "is GPU memory",
                  ws_badwin_cpu_launch);
    ws_verify(gpu_base, 0x21, "the GPU window");
    WS_OK(dion_win_destroy(good));
    WS_OK(dion_win_destroy(gw));
}

/* Defect 1 for windows: on_host must agree (rank 0 host, the others GPU); 0-byte parts do not count. */
static void ws_test_kinds(void)
{
    void *base = NULL;
    dion_win_t w = NULL;
    ws_expect(dion_win_alloc(ws_comm, 4096, ws_rank == 0, &base, &w), DION_ERR_INVALID_ARG,
              "dion_win_alloc with on_host differing",
              "on_host differs across ranks: rank 0 asked 1, rank 1 asked 0", NULL);
    if (w || base) WS_FAIL("a refused allocation returned memory or a window");
    /* registration: rank 0 registers host memory, the others GPU memory */
    void *hb = NULL, *gb = dt_alloc(4096);
    dion_win_t hw;
    WS_OK(dion_win_alloc(ws_comm, ws_rank == 0 ? 4096 : 0, 1, &hb, &hw));
    ws_expect(dion_win_register(ws_comm, ws_rank == 0 ? hb : gb, 4096, &w), DION_ERR_INVALID_ARG,
              "dion_win_register of host and GPU memory", "rank 0 registered host memory, rank 1 GPU memory",
              NULL);
    /* a 0-byte part of either kind joins any window */
    WS_OK(dion_win_alloc(ws_comm, ws_rank == 1 ? 0 : 4096, ws_rank == 1, &base, &w));
    WS_OK(dion_win_destroy(w));
    WS_OK(dion_win_destroy(hw));
    dt_free(gb);
}

static int ws_run_extra(const char *mode)
{
    if (!strcmp(mode, "gpuwin"))
        ws_test_gpuwin();
    else if (!strcmp(mode, "kinds"))
        ws_test_kinds();
    else
        return 0;
    return 1;
}

int main(int argc, char **argv)
{
    return ws_main(argc, argv);
}
