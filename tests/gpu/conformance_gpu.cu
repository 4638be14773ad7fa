/* The conformance suite on GPUs: ranks are processes (one GPU each, or sharing one under MPS), kernels run
 * the device API over GPU windows. Exits 77 (skipped) without a GPU. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "dion/dion.h"

static int dt_gpu_sync(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fprintf(stderr, "FAIL: kernel %s: %s\n", what, cudaGetErrorString(e));
    return e != cudaSuccess;
}

/* Every kernel is launched with at most DT_BLOCK threads per block: the bound keeps each within the registers
 * that block size allows (docs/gpu_kernels.md), also when built with the proxy's device half. The body is
 * always inlined: a body left out of line receives the kernel's arguments by pointer, and the compiler then
 * copies them (the whole device handle) into local memory (1.3 KB of stack in dt_cnt_kernel once the fast
 * paths made it larger). */
#define DT_KERNEL(name, type)                                                                                \
    static __forceinline__ __host__ __device__ void name##_body(type *a);                                    \
    __global__ void __launch_bounds__(DT_BLOCK, 1) name##_gpu(type arg)                                      \
    {                                                                                                        \
        name##_body(&arg);                                                                                   \
    }                                                                                                        \
    static __forceinline__ __host__ __device__ void name##_body(type *a)
#define DT_LAUNCH(name, grid, block, ptr) (name##_gpu<<<(grid), (block)>>>(*(ptr)), dt_gpu_sync(#name))
/* DT_ON_HOST=1: host windows (pinned, mapped into the GPU) instead of GPU memory, e.g. over the proxy with a
 * provider that cannot register GPU memory */
#define DT_ON_HOST        (getenv("DT_ON_HOST") && atoi(getenv("DT_ON_HOST")) ? 1 : 0)
#define DT_BLOCK          512
#define DT_PUT_ROUNDS     60
#define DT_ATOMIC_THREADS 128

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
/* cudaMemcpy from pageable memory may return before the DMA into device memory has finished: without the
 * synchronize, the tail of a poison fill could land after a peer's put that followed the next host barrier.
 */
static void dt_put(void *mem, const void *host, size_t n)
{
    if (n && (cudaMemcpy(mem, host, n, cudaMemcpyDefault) != cudaSuccess ||
              cudaDeviceSynchronize() != cudaSuccess)) {
        fprintf(stderr, "FAIL: cudaMemcpy from host\n");
        exit(1);
    }
}

static void dt_test_register_kinds(void);
#define DT_RUN_EXTRA()                                                                                       \
    DT_RUN("windows registered from cudaMalloc at an offset and from cuMem VMM", dt_test_register_kinds())

#include "../common/conformance.h"

static int dt_runner_init(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no usable GPU (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return 77;
    }
    return 0;
}

static int dt_one_rank_per_gpu(int nranks)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n >= nranks;
}

/* Driver entry points without linking libcuda: the test binary must load where no driver exists. */
template <class F> static F dt_cu(const char *name)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || !fn) {
        fprintf(stderr, "FAIL: driver entry point %s missing\n", name);
        exit(1);
    }
    return (F)fn;
}

/* A window registered from inside a cudaMalloc allocation, and one from two cuMem allocations mapped back to
 * back; both carry random puts checked byte by byte. */
static void dt_test_register_kinds(void)
{
    const size_t half = 600 * 1024;
    if (DT_ON_HOST) { /* the run asked for host windows only (e.g. a proxy provider without GPU memory) */
        if (dt_rank == 0) printf("  SKIP windows in GPU memory (DT_ON_HOST=1); the host window part runs\n");
        void *hbase = NULL;
        dion_win_t wh;
        DT_OK(dion_win_alloc(dt_comm, 2 * half, 1, &hbase, &wh));
        dt_test_puts(wh, (char *)hbase, 6, half / 2, half);
        DT_OK(dion_win_destroy(wh));
        return;
    }
    /* 1. cudaMalloc, registered 4099 bytes in */
    char *raw = (char *)dt_alloc(2 * half + 8192);
    dion_win_t w1;
    DT_OK(dion_win_register(dt_comm, raw + 4099, 2 * half - 16 * (size_t)dt_rank, &w1));
    dt_test_puts(w1, raw + 4099, 12, half - 4096, half - 4096);
    DT_OK(dion_win_destroy(w1));
    dt_free(raw);

    /* 2. a host window (shared memory, mapped into every rank and registered with CUDA) used by kernels */
    void *hbase = NULL;
    dion_win_t wh;
    DT_OK(dion_win_alloc(dt_comm, 2 * half, 1, &hbase, &wh));
    dt_test_puts(wh, (char *)hbase, 6, half / 2, half);
    DT_OK(dion_win_destroy(wh));

    /* 3. cuMem VMM: two physical allocations, exportable as file descriptors */
    auto create = dt_cu<CUresult (*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                     unsigned long long)>("cuMemCreate");
    auto granul =
        dt_cu<CUresult (*)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags)>(
            "cuMemGetAllocationGranularity");
    auto reserve = dt_cu<CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)>(
        "cuMemAddressReserve");
    auto map =
        dt_cu<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)>(
            "cuMemMap");
    auto access = dt_cu<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)>("cuMemSetAccess");
    auto release = dt_cu<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
    auto unmap = dt_cu<CUresult (*)(CUdeviceptr, size_t)>("cuMemUnmap");
    auto vfree = dt_cu<CUresult (*)(CUdeviceptr, size_t)>("cuMemAddressFree");
    int dev = 0;
    cudaGetDevice(&dev);
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g = 0;
    if (granul(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS) DT_FAIL("granularity");
    size_t chunk = (half + g - 1) / g * g, total = 2 * chunk;
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h[2];
    if (reserve(&va, total, 0, 0, 0) != CUDA_SUCCESS) DT_FAIL("cuMemAddressReserve");
    for (int i = 0; i < 2; i++) {
        if (create(&h[i], chunk, &prop, 0) != CUDA_SUCCESS) DT_FAIL("cuMemCreate");
        if (map(va + i * chunk, chunk, 0, h[i], 0) != CUDA_SUCCESS) DT_FAIL("cuMemMap");
    }
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (access(va, total, &acc, 1) != CUDA_SUCCESS) DT_FAIL("cuMemSetAccess");
    dion_win_t w2;
    char *vbase = (char *)(uintptr_t)va + 100;
    DT_OK(dion_win_register(dt_comm, vbase, total - 200, &w2));
    /* the halves straddle the boundary between the two allocations */
    dt_test_puts(w2, vbase, 12, chunk - 4096, chunk - 150);
    DT_OK(dion_win_destroy(w2));
    unmap(va, total);
    for (int i = 0; i < 2; i++) release(h[i]);
    vfree(va, total);
}

int main(int argc, char **argv)
{
    return dt_main(argc, argv);
}
