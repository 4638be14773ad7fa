/* One GPU thread stores a 64-bit doorbell value the way device code rings: system-scope release, then a
 * volatile 8-byte store (to the GPU-mapped UAR register or the CPU doorbell's mailbox). For gdaki_mlx5_gpu.c.
 */
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void ring(volatile uint64_t *db, uint64_t value)
{
    __threadfence_system();
    *db = value;
    __threadfence_system();
}

extern "C" int gdaki_test_ring(uint64_t *db, uint64_t value)
{
    ring<<<1, 1>>>(db, value);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}
