/* Ordering and atomic primitives for device code, and thread/warp/block identity.
 *
 * Three compilation passes read this header:
 *  - nvcc's device pass (__CUDA_ARCH__ defined): PTX with explicit scopes;
 *  - nvcc's host pass and plain C11 compilers (CPU mode): GCC/Clang __atomic builtins on ordinary memory,
 *    with thread identity supplied by dion_cpu_launch.
 * Every primitive takes the scope the caller needs (dion_scope_t): GPU when both ends are threads of one
 * device, SYS otherwise (another GPU, or host memory that CPU threads may read). docs/semantics.md justifies
 * each choice. */
#ifndef DION_DEVICE_ARCH_CUH
#define DION_DEVICE_ARCH_CUH

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dion/dion_types.h"

#if defined(__CUDACC__)
#define DION_HD static __forceinline__ __host__ __device__
#else
#define DION_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define DION__GPU 1
#else
#define DION__GPU 0
#endif

#if !DION__GPU
#ifdef __cplusplus
extern "C" {
#endif
/* CPU mode: identity of the calling thread inside dion_cpu_launch (NULL outside: a group of one). */
typedef struct {
    uint32_t block, thread, nblocks, nthreads;
} dion_cpu_ids_t;
DION_API const dion_cpu_ids_t *dion__cpu_ids(void);
DION_API void dion__cpu_sync_block(void);
DION_API void dion__cpu_sync_warp(void);
DION_API void dion__cpu_pause(uint32_t spins);
DION_API uint64_t dion__cpu_time_ns(void);
#ifdef __cplusplus
}
#endif
#endif

/* ---- loads and stores of 64-bit words that other ranks also access ---- */

DION_HD uint64_t dion__ld_acquire(const uint64_t *p, uint32_t scope)
{
#if DION__GPU
    uint64_t v;
    if (scope == DION_SCOPE_GPU)
        asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else
        asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
#else
    (void)scope;
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

DION_HD uint64_t dion__ld_relaxed(const uint64_t *p, uint32_t scope)
{
#if DION__GPU
    uint64_t v;
    if (scope == DION_SCOPE_GPU)
        asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else
        asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
#else
    (void)scope;
    return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

DION_HD void dion__st_release(uint64_t *p, uint64_t v, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else
        asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
    (void)scope;
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

DION_HD void dion__st_relaxed(uint64_t *p, uint64_t v, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("st.relaxed.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else
        asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
    (void)scope;
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

/* ---- read-modify-write ---- */

/* Release add without a result: signals. */
DION_HD void dion__red_add_release(uint64_t *p, uint64_t v, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("red.release.gpu.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else
        asm volatile("red.release.sys.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
    (void)scope;
    __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
#endif
}

DION_HD uint64_t dion__atom_add(uint64_t *p, uint64_t v, uint32_t scope)
{
#if DION__GPU
    uint64_t old;
    if (scope == DION_SCOPE_GPU)
        asm volatile("atom.relaxed.gpu.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
    else
        asm volatile("atom.relaxed.sys.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
    return old;
#else
    (void)scope;
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#endif
}

DION_HD uint64_t dion__atom_cas(uint64_t *p, uint64_t expected, uint64_t desired, uint32_t scope)
{
#if DION__GPU
    uint64_t old;
    if (scope == DION_SCOPE_GPU)
        asm volatile("atom.relaxed.gpu.cas.b64 %0, [%1], %2, %3;"
                     : "=l"(old)
                     : "l"(p), "l"(expected), "l"(desired)
                     : "memory");
    else
        asm volatile("atom.relaxed.sys.cas.b64 %0, [%1], %2, %3;"
                     : "=l"(old)
                     : "l"(p), "l"(expected), "l"(desired)
                     : "memory");
    return old;
#else
    (void)scope;
    __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return expected; /* on failure the builtin stored the current value here; on success it is the old one */
#endif
}

/* *p = max(*p, v), a release (words that only grow, published for other threads to acquire). */
DION_HD void dion__atom_max_release(uint64_t *p, uint64_t v, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("red.release.gpu.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else
        asm volatile("red.release.sys.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
    (void)scope;
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
#endif
}

/* Local counters (statistics, error-ring slots): device scope is enough, nobody orders by them. */
DION_HD uint64_t dion__counter_add(uint64_t *p, uint64_t v)
{
#if DION__GPU
    return atomicAdd((unsigned long long *)p, (unsigned long long)v);
#else
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#endif
}

/* ---- fences ---- */

/* Orders this thread's earlier memory operations before its later ones for observers within scope, and
 * (being cumulative) everything this thread has observed, e.g. other threads' writes before a barrier. */
DION_HD void dion__fence(uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    else
        asm volatile("fence.acq_rel.sys;" ::: "memory");
#else
    (void)scope;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* ---- time and backoff ---- */

DION_HD uint64_t dion__time_ns(void)
{
#if DION__GPU
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    return dion__cpu_time_ns();
#endif
}

/* Called in polling loops with the number of polls so far: spin first, then back off. */
DION_HD void dion__backoff(uint32_t polls)
{
#if DION__GPU
    if (polls > 4096) __nanosleep(polls > 65536 ? 1000 : 100);
#else
    dion__cpu_pause(polls);
#endif
}

/* ---- identity and cooperation ---- */

/* Groups that cooperate in the warp and block variants. */
typedef enum { DION__THREAD = 0, DION__WARP = 1, DION__BLOCK = 2 } dion__group_t;

DION_HD uint32_t dion__block_thread(void)
{
#if DION__GPU
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
#else
    const dion_cpu_ids_t *id = dion__cpu_ids();
    return id ? id->thread : 0;
#endif
}

DION_HD uint32_t dion__block_size(void)
{
#if DION__GPU
    return blockDim.x * blockDim.y * blockDim.z;
#else
    const dion_cpu_ids_t *id = dion__cpu_ids();
    return id ? id->nthreads : 1;
#endif
}

DION_HD uint32_t dion__block_index(void)
{
#if DION__GPU
    return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
#else
    const dion_cpu_ids_t *id = dion__cpu_ids();
    return id ? id->block : 0;
#endif
}

#define DION__WARP_SIZE 32u

/* Rank and size of the caller within its group. A partial last warp has fewer threads. */
DION_HD uint32_t dion__group_rank(dion__group_t g)
{
    if (g == DION__THREAD) return 0;
    uint32_t t = dion__block_thread();
    return g == DION__WARP ? t % DION__WARP_SIZE : t;
}

DION_HD uint32_t dion__group_size(dion__group_t g)
{
    if (g == DION__THREAD) return 1;
    uint32_t n = dion__block_size();
    if (g == DION__BLOCK) return n;
    uint32_t first = dion__block_thread() / DION__WARP_SIZE * DION__WARP_SIZE;
    return n - first < DION__WARP_SIZE ? n - first : DION__WARP_SIZE;
}

DION_HD void dion__group_sync(dion__group_t g)
{
    if (g == DION__THREAD) return;
#if DION__GPU
    if (g == DION__BLOCK) {
        __syncthreads();
    } else {
        /* A whole warp takes the constant mask: a computed one costs a convergence check (MATCH, REDUX,
         * BRA.DIV) on every warp put. */
        uint32_t n = dion__group_size(DION__WARP);
        if (n == 32)
            __syncwarp();
        else
            __syncwarp((1u << n) - 1u);
    }
#else
    if (g == DION__BLOCK)
        dion__cpu_sync_block();
    else
        dion__cpu_sync_warp();
#endif
}

#endif /* DION_DEVICE_ARCH_CUH */
