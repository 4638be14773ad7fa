/* What the examples share: who is calling (a GPU block or a CPU-mode thread), a clock, small atomics for the
 * result record, bf16 conversions, and the host-side helpers that differ between the GPU build (.cu) and the
 * CPU build (.c). Each example writes its communication once, as functions of (arguments, team), called from
 * a CUDA kernel in the .cu file and from dion_cpu_launch in the .c file. */
#ifndef EXAMPLE_COMMON_H
#define EXAMPLE_COMMON_H

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define EX_HD static __host__ __device__ inline
#else
#define EX_HD static inline
#endif

/* The caller: block `block` of `nblocks`, thread `thread` of `nthreads`. In CPU mode every block is a single
 * thread (dion_cpu_launch(blocks, 1, ...)), so the warp is that thread and EX_SYNC has nothing to wait for.
 */
typedef struct {
    unsigned block, nblocks, thread, nthreads;
} ex_team_t;

#ifdef __CUDA_ARCH__
#define EX_SYNC() __syncthreads()
#else
#define EX_SYNC() ((void)0)
#endif

#ifdef __CUDACC__
static __device__ inline ex_team_t ex_team_gpu(void)
{
    ex_team_t t = {blockIdx.x, gridDim.x, threadIdx.x, blockDim.x};
    return t;
}
#endif

/* Warps of the team: in CPU mode one "warp" of one thread. */
EX_HD unsigned ex_warp(ex_team_t t)
{
    return t.thread / 32;
}
EX_HD unsigned ex_nwarps(ex_team_t t)
{
    return (t.nthreads + 31) / 32;
}

EX_HD uint64_t ex_now_ns(void)
{
#ifdef __CUDA_ARCH__
    uint64_t v;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
    return v;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

/* What a launch reports back: the first failure, and the span [t0, t1] its blocks were busy. */
typedef struct {
    unsigned long long t0, t1;
    int failed, status;
} ex_result_t;

EX_HD void ex_result_reset(ex_result_t *r)
{
    r->t0 = ULLONG_MAX;
    r->t1 = 0;
    r->failed = 0;
    r->status = 0;
}

EX_HD void ex_record_span(ex_result_t *r, unsigned long long t0, unsigned long long t1)
{
#ifdef __CUDA_ARCH__
    atomicMin(&r->t0, t0);
    atomicMax(&r->t1, t1);
#else
    unsigned long long v = __atomic_load_n(&r->t0, __ATOMIC_RELAXED);
    while (t0 < v && !__atomic_compare_exchange_n(&r->t0, &v, t0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    v = __atomic_load_n(&r->t1, __ATOMIC_RELAXED);
    while (t1 > v && !__atomic_compare_exchange_n(&r->t1, &v, t1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
#endif
}

/* A wait or quiet failed: remember the first status; dion_dev_check on the host says which op and signal. */
EX_HD void ex_fail(ex_result_t *r, dion_status_t st)
{
#ifdef __CUDA_ARCH__
    if (atomicCAS(&r->failed, 0, 1) == 0) r->status = (int)st;
#else
    int zero = 0;
    if (__atomic_compare_exchange_n(&r->failed, &zero, 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        r->status = (int)st;
#endif
}

/* Read after EX_SYNC: thread 0's failure stops the whole block. */
EX_HD int ex_failed(const ex_result_t *r)
{
    return *(volatile const int *)&r->failed;
}

/* bf16 kept as its bits, so that the same code compiles as C11: round to nearest even (no NaNs here). */
EX_HD float ex_bf16_to_float(uint16_t b)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

EX_HD uint16_t ex_float_to_bf16(float f)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.f = f;
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

/* fused multiply-add rounded once, the same on both sides, so that GPU and host reference agree bit for bit
 */
EX_HD float ex_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

/* ---- host side ---- */

#define EX_DION(call)                                                                                        \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) {                                                                            \
            fprintf(stderr, "%s: %s failed: %s\n", ex_name, #call, dion_last_error());                       \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* Memory that kernels read besides windows: cudaMalloc'd on the GPU, malloc'd in CPU mode; zeroed. */
static void *ex_alloc(const char *ex_name, size_t bytes)
{
    void *p = NULL;
#ifdef __CUDACC__
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess) e = cudaMemset(p, 0, bytes);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: cudaMalloc(%zu) failed: %s\n", ex_name, bytes, cudaGetErrorString(e));
        exit(1);
    }
#else
    p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "%s: out of memory (%zu bytes)\n", ex_name, bytes);
        exit(1);
    }
#endif
    return p;
}

static void ex_free(void *p)
{
#ifdef __CUDACC__
    cudaFree(p);
#else
    free(p);
#endif
}

/* Host memory to what ex_alloc or a window gave (ex_to_dev), and back (ex_to_host). */
static void ex_copy(const char *ex_name, void *dst, const void *src, size_t bytes, int to_dev)
{
#ifdef __CUDACC__
    cudaError_t e = cudaMemcpy(dst, src, bytes, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: cudaMemcpy(%zu bytes) failed: %s\n", ex_name, bytes, cudaGetErrorString(e));
        exit(1);
    }
#else
    (void)ex_name, (void)to_dev;
    memcpy(dst, src, bytes);
#endif
}
#define ex_to_dev(name, dst, src, bytes)  ex_copy(name, dst, src, bytes, 1)
#define ex_to_host(name, dst, src, bytes) ex_copy(name, dst, src, bytes, 0)

/* Windows live in GPU memory in the GPU build, in host memory in CPU mode. */
#ifdef __CUDACC__
#define EX_ON_HOST   0
#define EX_DEV_FLAGS 0u
#else
#define EX_ON_HOST   1
#define EX_DEV_FLAGS DION_DEV_FLAG_CPU
#endif

/* CPU mode: dion_cpu_launch gives every thread its block index inside the library but the public API does not
 * expose it, so each thread takes a ticket: that is its block. */
typedef struct {
    void (*core)(const void *args, ex_team_t team);
    const void *args;
    unsigned nblocks, ticket;
} ex_cpu_job_t;

static void ex_cpu_entry(void *p)
{
    ex_cpu_job_t *j = (ex_cpu_job_t *)p;
    ex_team_t t = {__atomic_fetch_add(&j->ticket, 1u, __ATOMIC_RELAXED), j->nblocks, 0, 1};
    j->core(j->args, t);
}

static int ex_cpu_run(const char *ex_name, unsigned blocks, void (*core)(const void *, ex_team_t),
                      const void *args)
{
    ex_cpu_job_t j = {core, args, blocks, 0};
    if (dion_cpu_launch(blocks, 1, ex_cpu_entry, &j) != DION_SUCCESS) {
        fprintf(stderr, "%s: dion_cpu_launch failed: %s\n", ex_name, dion_last_error());
        return 1;
    }
    return 0;
}

#ifdef __CUDACC__
/* A launch is checked twice: cudaGetLastError right after <<<>>> (it did not start: too many resources, bad
 * configuration), then the synchronize (it failed while running). */
static int ex_cuda_done(const char *ex_name, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: kernel %s failed: %s\n", ex_name, what, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}
#endif

/* After a launch: its result record, then the library's own (timeouts and bad arguments, by rank and op). */
static int ex_launch_ok(const char *ex_name, dion_comm_t comm, const dion_dev_t *dev, const ex_result_t *r,
                        const char *what)
{
    if (r->failed) {
        fprintf(stderr, "%s: rank %d: %s: a wait or quiet returned %s: %s\n", ex_name, dion_comm_rank(comm),
                what, dion_status_string((dion_status_t)r->status),
                dion_dev_check(comm, dev) != DION_SUCCESS ? dion_last_error() : "(no device record)");
        return 0;
    }
    if (dion_dev_check(comm, dev) != DION_SUCCESS) {
        fprintf(stderr, "%s: rank %d: %s: %s\n", ex_name, dion_comm_rank(comm), what, dion_last_error());
        return 0;
    }
    return 1;
}

/* Every rank's verdict: 1 when all ranks passed. */
static int ex_all_ok(const char *ex_name, dion_comm_t comm, int ok)
{
    int n = dion_comm_size(comm), all_ok = 1;
    int *all = (int *)calloc((size_t)n, sizeof(int));
    EX_DION(dion_comm_allgather(comm, &ok, sizeof ok, all));
    for (int r = 0; r < n; r++)
        if (!all[r]) {
            if (dion_comm_rank(comm) == 0) fprintf(stderr, "%s: rank %d failed its checks\n", ex_name, r);
            all_ok = 0;
        }
    free(all);
    return all_ok;
}

#endif /* EXAMPLE_COMMON_H */
