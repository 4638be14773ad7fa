// Does a taken branch over cold code on a ping-pong's turnaround cost time? Two blocks of one thread
// ping-pong a 16-byte packet (payload + sequence in both words, as DION's unit); PAD instructions of
// never-run code sit between the poll's exit and the reply's store (forward branch over them).
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)
__device__ __forceinline__ void st16(uint64_t *p, uint64_t a, uint64_t b) {
    asm volatile("st.relaxed.gpu.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory"); }
__device__ __forceinline__ void ld16(const uint64_t *p, uint64_t &a, uint64_t &b) {
    asm volatile("ld.relaxed.gpu.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory"); }
template <int PAD, int WHERE>
__global__ void __launch_bounds__(32, 1) pp(uint64_t *units, uint64_t *src, uint64_t *dst, int iters, int never,
                                            unsigned long long *out, float *sink)
{
    const int me = blockIdx.x, peer = me ^ 1;
    uint64_t *mine = units + 16 * me, *theirs = units + 16 * peer;
    float acc = (float)never;
    unsigned long long t0 = 0;
    for (int i = 1; i <= iters + 1000; i++) {
        if (i == 1001) t0 = clock64();
        const uint32_t seq = (uint32_t)i;
        for (int half = 0; half < 2; half++) {
            if ((half == 0) == (me == 0)) {
                uint64_t x = src[me], f = (uint64_t)seq << 32;
                st16(theirs, f | (uint32_t)x, f | (x >> 32));
            } else {
                uint64_t w0, w1;
                do { ld16(mine, w0, w1); } while ((uint32_t)(w0 >> 32) != seq || (uint32_t)(w1 >> 32) != seq);
                if (WHERE == 0 && never) {
#pragma unroll
                    for (int j = 0; j < PAD; j++) acc = acc * 1.0001f + (float)j * (float)w0;
                    sink[me] = acc;
                }
                dst[me] = (w1 << 32) | (uint32_t)w0;
                if (WHERE == 1 && never) {
#pragma unroll
                    for (int j = 0; j < PAD; j++) acc = acc * 1.0001f + (float)j * (float)w1;
                    sink[me] = acc;
                }
            }
        }
    }
    if (me == 0) out[0] = clock64() - t0;
}
template <int PAD, int WHERE> int run(uint64_t *u, uint64_t *s, uint64_t *d, unsigned long long *o, float *sk, int iters)
{
    double best = 1e30, sum = 0; int n = 7;
    for (int r = 0; r < n; r++) {
        CK(cudaMemset(u, 0, 4096));
        cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
        cudaEventRecord(a);
        pp<PAD, WHERE><<<2, 1>>>(u, s, d, iters, 0, o, sk);
        cudaEventRecord(b);
        CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        float ms; cudaEventElapsedTime(&ms, a, b);
        unsigned long long cyc; CK(cudaMemcpy(&cyc, o, 8, cudaMemcpyDeviceToHost));
        uint64_t got[2]; CK(cudaMemcpy(got, d, 16, cudaMemcpyDeviceToHost));
        if (got[0] != 0x1111111122222222ull + 1 || got[1] != 0x1111111122222222ull) { printf("FAIL data %llx %llx\n", (unsigned long long)got[0], (unsigned long long)got[1]); return 1; }
        double c = (double)cyc / iters / 2; sum += c; if (c < best) best = c;
    }
    printf("pad %5d where %d: one-way %.1f cycles (min of %d), mean %.1f\n", PAD, WHERE, best, n, sum / n);
    return 0;
}
int main()
{
    uint64_t *u, *s, *d; unsigned long long *o; float *sk;
    CK(cudaMalloc(&u, 4096)); CK(cudaMalloc(&s, 64)); CK(cudaMalloc(&d, 64)); CK(cudaMalloc(&o, 64)); CK(cudaMalloc(&sk, 64));
    uint64_t sv[2] = {0x1111111122222222ull, 0x1111111122222222ull + 1};
    CK(cudaMemcpy(s, sv, 16, cudaMemcpyHostToDevice));
    int it = 20000, rc = 0;
    int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0); printf("clock %d kHz\n", clk);
    rc |= run<0, 0>(u, s, d, o, sk, it);
    rc |= run<64, 0>(u, s, d, o, sk, it);
    rc |= run<512, 0>(u, s, d, o, sk, it);
    rc |= run<2048, 0>(u, s, d, o, sk, it);
    rc |= run<8192, 0>(u, s, d, o, sk, it);
    rc |= run<64, 1>(u, s, d, o, sk, it);
    rc |= run<512, 1>(u, s, d, o, sk, it);
    rc |= run<2048, 1>(u, s, d, o, sk, it);
    rc |= run<8192, 1>(u, s, d, o, sk, it);
    rc |= run<0, 0>(u, s, d, o, sk, it);
    return rc;
}
