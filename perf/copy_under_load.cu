/* Why staged GPU windows collapse when every SM posts (docs/backends/proxy.md, "Staging"): how long one small
 * cudaMemcpyAsync (GPU memory <-> pinned host memory, on its own non-blocking stream, as the proxy's staging
 * copies) takes while a kernel on every SM does one of the things msgrate's producers do:
 *   idle       no kernel
 *   clock      spins on its clock (the SMs busy, no memory traffic)
 * Each load runs for a fixed time by its own clock (1.5 s), long enough for every copy of the row; a row
 * whose copies outlasted it says so and fails. hostpoll   each thread reads a word of pinned host memory in a
 * loop (waiting for ring space or for a completion: reads across PCIe) hostnap    the same, with a 1 us nap
 * between reads atomics    each thread adds to one of 8 words of GPU memory (taking tickets on 8 rings'
 * heads) hoststore  each thread stores 16 bytes into pinned host memory in a loop (writing commands) Rows:
 * copy_<dir>_<load>, median and p99 of 200 copies of 4 KiB each, every copy's bytes checked. copy_under_load
 * [--blocks N] [--prio] [--kind] [--tests LOADS] [--iters N] [--csv FILE] [--label L]
 * --blocks: load blocks (default one per SM); --prio: the copies' stream has the highest priority; --kind:
 * the copy names its direction instead of cudaMemcpyDefault; --tests: which loads (default all). */
#include <unistd.h>

#include <chrono>
#include <vector>

#include "bench_common.h"

enum { L_IDLE, L_CLOCK, L_HOSTPOLL, L_HOSTNAP, L_ATOMICS, L_HOSTSTORE, L_COUNT };
static const char *const load_names[L_COUNT] = {"idle",    "clock",   "hostpoll",
                                                "hostnap", "atomics", "hoststore"};

/* Runs for ns nanoseconds by its clock: no stop flag, since polling one in host memory would itself be a
 * load. */
__global__ void load_kernel(int load, uint64_t ns, uint64_t *host, unsigned long long *dev,
                            unsigned long long *sink)
{
    unsigned long long acc = 0;
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t t0 = bench_now_ns();
    for (uint32_t n = 0; bench_now_ns() - t0 < ns; n++) {
        if (load == L_HOSTPOLL || load == L_HOSTNAP) {
            acc += *(volatile uint64_t *)&host[(t % 64) * 16];
            if (load == L_HOSTNAP) __nanosleep(1000);
        } else if (load == L_ATOMICS) {
            acc += atomicAdd(&dev[(t % 8) * 32], 1ull);
        } else if (load == L_HOSTSTORE) {
            uint64_t *p = &host[1024 + (t % 256) * 2];
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"((uint64_t)n),
                         "l"((uint64_t)t)
                         : "memory");
        }
    }
    if (acc == 42) sink[0] = acc;
}

int main(int argc, char **argv)
{
    int blocks = 0, prio = 0,
        kind = 0; /* --blocks N (0: one per SM), --prio (copy stream of highest priority),
                     --kind (cudaMemcpyDeviceToHost / HostToDevice, not Default) */
    for (int i = 1; i < argc;) {
        int drop = 0;
        if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
            blocks = atoi(argv[i + 1]), drop = 2;
        else if (!strcmp(argv[i], "--prio"))
            prio = 1, drop = 1;
        else if (!strcmp(argv[i], "--kind"))
            kind = 1, drop = 1;
        if (!drop) {
            i++;
            continue;
        }
        for (int j = i; j + drop <= argc; j++) argv[j] = argv[j + drop];
        argc -= drop;
    }
    bench_opts_t o;
    bench_parse(argc, argv, &o);
    if (!strcmp(o.tests, BENCH_DEFAULT_TESTS)) o.tests = "idle,clock,hostpoll,hostnap,atomics,hoststore";
    if (o.iters == 20000) o.iters = 200;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "copy_under_load needs a GPU\n");
        return 77;
    }
    BENCH_CHECK_CUDA(cudaSetDevice(0));
    cudaDeviceProp prop;
    BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    const size_t bytes = 4096;
    char *gbuf, *hbuf;
    uint64_t *host;
    unsigned long long *dev, *sink;
    BENCH_CHECK_CUDA(cudaMalloc(&gbuf, bytes));
    BENCH_CHECK_CUDA(cudaHostAlloc((void **)&hbuf, bytes, cudaHostAllocPortable));
    BENCH_CHECK_CUDA(cudaHostAlloc((void **)&host, 65536, cudaHostAllocMapped | cudaHostAllocPortable));
    BENCH_CHECK_CUDA(cudaMalloc(&dev, 8 * 32 * sizeof *dev));
    BENCH_CHECK_CUDA(cudaMalloc(&sink, 64));
    memset(host, 0, 65536);
    cudaStream_t ks, cs;
    BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking));
    int lo = 0, hi = 0;
    BENCH_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    BENCH_CHECK_CUDA(cudaStreamCreateWithPriority(&cs, cudaStreamNonBlocking, prio ? hi : lo));
    if (blocks <= 0) blocks = prop.multiProcessorCount;
    std::vector<char> pattern(bytes);
    int rc = 0;
    for (int load = 0; load < L_COUNT && !rc; load++) {
        if (!bench_wants(&o, load_names[load])) continue;
        if (load != L_IDLE) {
            /* as msgrate's all-SM row: one block of 64 threads per SM */
            load_kernel<<<blocks, 64, 0, ks>>>(load, 1500000000ull, host, dev, sink);
            BENCH_CHECK_LAUNCH("load_kernel");
            usleep(20000); /* every block resident */
        }
        for (int dir = 0; dir < 2 && !rc;
             dir++) { /* 0: GPU -> host (a staged source), 1: host -> GPU (landed) */
            std::vector<unsigned long long> lat;
            for (int i = 0; i < o.iters + 10; i++) {
                for (size_t b = 0; b < bytes; b++) pattern[b] = (char)(b * 7 + i + load * 13 + dir);
                if (dir == 0) {
                    BENCH_CHECK_CUDA(cudaMemcpy(gbuf, pattern.data(), bytes, cudaMemcpyHostToDevice));
                } else {
                    memcpy(hbuf, pattern.data(), bytes);
                }
                auto t0 = std::chrono::steady_clock::now();
                BENCH_CHECK_CUDA(cudaMemcpyAsync(dir == 0 ? (void *)hbuf : (void *)gbuf,
                                                 dir == 0 ? (const void *)gbuf : (const void *)hbuf, bytes,
                                                 !kind      ? cudaMemcpyDefault
                                                 : dir == 0 ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyHostToDevice,
                                                 cs));
                BENCH_CHECK_CUDA(cudaStreamSynchronize(cs));
                auto t1 = std::chrono::steady_clock::now();
                if (dir == 1) BENCH_CHECK_CUDA(cudaMemcpy(hbuf, gbuf, bytes, cudaMemcpyDeviceToHost));
                if (memcmp(hbuf, pattern.data(), bytes) != 0) {
                    fprintf(stderr, "FAIL copy %d under %s: the bytes differ\n", i, load_names[load]);
                    rc = 1;
                    break;
                }
                if (i >= 10)
                    lat.push_back(
                        (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0)
                            .count());
            }
            if (rc) break;
            std::sort(lat.begin(), lat.end());
            char test[64];
            snprintf(test, sizeof test, "copy_%s_%s", dir == 0 ? "d2h" : "h2d", load_names[load]);
            bench_row(&o, "cuda", test, "thread", (long long)bytes, "us_median",
                      lat[lat.size() / 2] / 1000.0);
            bench_row(&o, "cuda", test, "thread", (long long)bytes, "us_p99",
                      lat[lat.size() * 99 / 100] / 1000.0);
        }
        if (load != L_IDLE && cudaStreamQuery(ks) != cudaErrorNotReady) {
            fprintf(stderr, "FAIL the %s load ended before its copies did: its rows do not count\n",
                    load_names[load]);
            rc = 1;
        }
        BENCH_CHECK_CUDA(cudaStreamSynchronize(ks));
        BENCH_CHECK_CUDA(cudaGetLastError());
    }
    return rc;
}
