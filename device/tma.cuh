/* Bulk copies through the Tensor Memory Accelerator (sm_90): one thread streams a block's put through a ring
 * of shared-memory stages with cp.async.bulk (global -> shared, then shared -> peer), so that one SM keeps
 * far more bytes in flight than its threads' registers allow.
 *
 * Opt-in: define DION_PUT_BLOCK_SMEM_BYTES (e.g. 49152) before including dion_device.cuh. It reserves that
 * much static shared memory in every kernel that uses dion_put_block / dion_put_signal_block, which lowers
 * occupancy; without it the block variants use loads and stores only. */
#ifndef DION_DEVICE_TMA_CUH
#define DION_DEVICE_TMA_CUH

#include "dion/device/common.cuh"

#if DION__GPU && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(DION_PUT_BLOCK_SMEM_BYTES)
#define DION__TMA        1
#define DION__TMA_STAGES 4
#define DION__TMA_CHUNK                                                                                      \
    (((DION_PUT_BLOCK_SMEM_BYTES - 64) / DION__TMA_STAGES) & ~127) /* the barriers take the rest */

static __device__ __forceinline__ uint32_t dion__smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void dion__tma_load(uint32_t smem, const char *g, uint32_t len,
                                                      uint32_t bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(len) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem),
        "l"(g), "r"(len), "r"(bar)
        : "memory");
}

static __device__ __forceinline__ void dion__tma_wait(uint32_t bar, uint32_t phase)
{
    uint32_t done = 0;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], "
                     "%2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(bar), "r"(phase)
                     : "memory");
    } while (!done);
}

/* Called by every thread of the block with the same arguments. Returns 0, having done nothing, when the copy
 * is too small or the pointers are not congruent modulo 16 (the bulk engine needs 16-byte alignment). */
DION_HD int dion__copy_block_tma(char *dst, const char *src, size_t n)
{
    __shared__ __align__(128) char stage[DION__TMA_STAGES][DION__TMA_CHUNK];
    __shared__ __align__(8) uint64_t bar[DION__TMA_STAGES];
    if (n < 2 * (size_t)DION__TMA_CHUNK || (((uintptr_t)dst ^ (uintptr_t)src) & 15)) return 0;
    /* Data that this block wrote with ordinary stores must be visible to the bulk engine's reads. */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    __syncthreads();
    if (dion__block_thread() == 0) {
        size_t head = (16 - ((uintptr_t)dst & 15)) & 15, body = (n - head) & ~(size_t)15,
               tail = n - head - body;
        if (head) dion__copy_edge(dst, src, head);
        if (tail) dion__copy_edge(dst + n - tail, src + n - tail, tail);
        const char *s = src + head;
        char *d = dst + head;
        size_t chunks = (body + DION__TMA_CHUNK - 1) / DION__TMA_CHUNK;
        uint32_t phase = 0; /* bit i: parity stage i waits for next */
        for (int i = 0; i < DION__TMA_STAGES; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(dion__smem(&bar[i])) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::
                         : "memory"); /* the engine sees the initialized barriers */
        for (size_t k = 0; k < chunks && k < DION__TMA_STAGES; k++) {
            uint32_t len =
                (uint32_t)(body - k * DION__TMA_CHUNK < DION__TMA_CHUNK ? body - k * DION__TMA_CHUNK
                                                                        : DION__TMA_CHUNK);
            dion__tma_load(dion__smem(stage[k]), s + k * DION__TMA_CHUNK, len, dion__smem(&bar[k]));
        }
        for (size_t k = 0; k < chunks; k++) {
            int st = (int)(k % DION__TMA_STAGES);
            uint32_t len =
                (uint32_t)(body - k * DION__TMA_CHUNK < DION__TMA_CHUNK ? body - k * DION__TMA_CHUNK
                                                                        : DION__TMA_CHUNK);
            dion__tma_wait(dion__smem(&bar[st]), (phase >> st) & 1);
            phase ^= 1u << st;
            asm volatile(
                "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d + k * DION__TMA_CHUNK),
                "r"(dion__smem(stage[st])), "r"(len)
                : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            /* Refill the stage of the previous chunk once its store has read it: one store stays in flight.
             */
            if (k >= 1 && k - 1 + DION__TMA_STAGES < chunks) {
                size_t j = k - 1 + DION__TMA_STAGES;
                int sj = (int)(j % DION__TMA_STAGES);
                uint32_t lj =
                    (uint32_t)(body - j * DION__TMA_CHUNK < DION__TMA_CHUNK ? body - j * DION__TMA_CHUNK
                                                                            : DION__TMA_CHUNK);
                asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
                dion__tma_load(dion__smem(stage[sj]), s + j * DION__TMA_CHUNK, lj, dion__smem(&bar[sj]));
            }
        }
        /* Every store performed, and ordered before this thread's later generic-proxy operations (the
         * signal). */
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        asm volatile("fence.proxy.async.global;" ::: "memory");
        for (int i = 0; i < DION__TMA_STAGES; i++)
            asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(dion__smem(&bar[i])) : "memory");
    }
    __syncthreads();
    return 1;
}
#else
#define DION__TMA 0
#endif

#endif /* DION_DEVICE_TMA_CUH */
