// Does a 1.1 KiB by-value kernel parameter (dion_dev_t's size) add to a ~60 us launch timed with CUDA events?
#include <cstdio>
#include <vector>
#include <algorithm>
struct big_t {
    unsigned long long w[144];
}; // 1152 bytes
__global__ void spin_small(unsigned long long ns, unsigned long long *out)
{
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned long long t = t0;
    while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = t;
}
__global__ void spin_big(big_t b, unsigned long long ns, unsigned long long *out)
{
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned long long t = t0;
    while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = t + b.w[blockIdx.x % 144];
}
template <class L> static float med(int reps, L l)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> v;
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(a);
        l();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float t;
        cudaEventElapsedTime(&t, a, b);
        if (i) v.push_back(t * 1000.f);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
int main()
{
    unsigned long long *out;
    cudaMalloc(&out, 8);
    big_t b;
    for (int i = 0; i < 144; i++) b.w[i] = i;
    for (unsigned long long ns : {0ull, 60000ull}) {
        for (int round = 0; round < 3; round++) {
            float s = med(101, [&] { spin_small<<<264, 256>>>(ns, out); });
            float g = med(101, [&] { spin_big<<<264, 256>>>(b, ns, out); });
            printf(
                "spin %llu ns, 264x256: small params %.2f us, 1152-byte param %.2f us, difference %.2f us\n",
                ns, s, g, g - s);
        }
    }
    cudaError_t e = cudaDeviceSynchronize();
    printf("status %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
}
