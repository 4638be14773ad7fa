/* Shared pieces of the benchmarks: options, CSV rows, timing helpers. One-way latency is half a ping-pong
 * round trip timed inside the kernel with %globaltimer; bandwidth is bytes moved over kernel time. */
#ifndef DION_PERF_BENCH_COMMON_H
#define DION_PERF_BENCH_COMMON_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define BENCH_CHECK_CUDA(call)                                                                               \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* After every <<<...>>>: a launch that fails (too many resources, bad configuration) returns no error by
 * itself, and a synchronize afterwards can succeed with nothing run. */
#define BENCH_CHECK_LAUNCH(what)                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = cudaGetLastError();                                                                 \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: launching %s: %s\n", __FILE__, __LINE__, what,                      \
                    cudaGetErrorString(e_));                                                                 \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

typedef struct {
    const char *tests; /* comma-separated: signal,put_signal,put_bw,completion,msgrate,packet,ref */
    int iters, warmup;
    long long bw_bytes;
    const char *csv;
    const char *label;  /* e.g. "1gpu-mps" or "2gpu-nvlink" */
    const char *sizes;  /* comma-separated byte counts of the put_signal ping-pong; NULL: all */
    const char *groups; /* comma-separated thread,warp,block; NULL: all */
} bench_opts_t;

/* What bench_parse leaves in tests without --tests; a program with other tests replaces it by its own. */
#define BENCH_DEFAULT_TESTS "signal,put_signal,put_bw,completion,msgrate,packet"

static inline void bench_parse(int argc, char **argv, bench_opts_t *o)
{
    o->tests = BENCH_DEFAULT_TESTS;
    o->iters = 20000;
    o->warmup = 2000;
    o->bw_bytes = 1ll << 30;
    o->csv = NULL;
    o->label = "";
    o->sizes = NULL;
    o->groups = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tests") && i + 1 < argc)
            o->tests = argv[++i];
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            o->iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            o->warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bw-bytes") && i + 1 < argc)
            o->bw_bytes = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            o->csv = argv[++i];
        else if (!strcmp(argv[i], "--label") && i + 1 < argc)
            o->label = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            o->sizes = argv[++i];
        else if (!strcmp(argv[i], "--groups") && i + 1 < argc)
            o->groups = argv[++i];
        else {
            fprintf(
                stderr,
                "usage: %s [--tests LIST] [--iters N] [--warmup N] [--bw-bytes N] [--csv FILE] [--label L]\n"
                "          [--sizes B,B,...] [--groups thread,warp,block]   (put_signal ping-pong rows)\n",
                argv[0]);
            exit(2);
        }
    }
}

/* Whether the comma-separated list names item. */
static inline int bench_in_list(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; (p = strstr(p, item)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

static inline int bench_wants(const bench_opts_t *o, const char *test)
{
    return bench_in_list(o->tests, test);
}

/* Whether --sizes and --groups leave this put_signal ping-pong row in. */
static inline int bench_wants_row(const bench_opts_t *o, long long bytes, const char *group)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", bytes);
    return (!o->sizes || bench_in_list(o->sizes, b)) && (!o->groups || bench_in_list(o->groups, group));
}

/* One row: impl,label,test,group,bytes,metric,value */
static inline void bench_row(const bench_opts_t *o, const char *impl, const char *test, const char *group,
                             long long bytes, const char *metric, double value)
{
    printf("%-8s %-12s %-22s %-6s %10lld  %-12s %12.3f\n", impl, o->label, test, group, bytes, metric, value);
    fflush(stdout);
    if (!o->csv) return;
    FILE *f = fopen(o->csv, "a");
    if (!f) return;
    /* a new file gets the header dion-perf writes, so that every program's CSV reads the same way */
    fseek(f, 0, SEEK_END);
    if (ftell(f) == 0) fprintf(f, "impl,label,test,group,bytes,metric,value\n");
    fprintf(f, "%s,%s,%s,%s,%lld,%s,%.4f\n", impl, o->label, test, group, bytes, metric, value);
    fclose(f);
}

/* The rows of a ping-pong timed as round trips (ns): min, median and p99 round trip, and one-way = median
 * / 2. */
static inline void bench_report_rtt(const bench_opts_t *o, const char *impl, const char *test,
                                    std::vector<unsigned long long> &v)
{
    std::sort(v.begin(), v.end());
    double mn = v[0] / 1000.0, p50 = v[v.size() / 2] / 1000.0, p99 = v[v.size() * 99 / 100] / 1000.0;
    bench_row(o, impl, test, "thread", 8, "rtt_us_min", mn);
    bench_row(o, impl, test, "thread", 8, "rtt_us_median", p50);
    bench_row(o, impl, test, "thread", 8, "rtt_us_p99", p99);
    bench_row(o, impl, test, "thread", 8, "oneway_us", p50 / 2);
}

static __device__ __forceinline__ uint64_t bench_now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Busy work for about ns nanoseconds, so that clocks have ramped up before anything is timed. */
__global__ void bench_spin(uint64_t ns, unsigned long long *sink)
{
    uint64_t t0 = bench_now_ns(), x = threadIdx.x;
    while (bench_now_ns() - t0 < ns) x = x * 6364136223846793005ull + 1442695040888963407ull;
    if (x == 42) sink[0] = x;
}

/* Every rank's source bytes: a pattern the receiver can predict. */
static __host__ __device__ inline unsigned char bench_byte(int rank, size_t i)
{
    return (unsigned char)(rank * 37 + i * 13 + (i >> 8));
}

__global__ void bench_fill(char *p, size_t n, int rank)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = (char)bench_byte(rank, i);
}

/* 1 when the bytes at mem+dst are not peer's source bytes from src_off on (and says which). */
static inline int bench_check_landed(const char *impl, const char *mem, size_t dst, size_t src_off,
                                     size_t bytes, int peer, const char *what)
{
    std::vector<unsigned char> h(bytes);
    BENCH_CHECK_CUDA(cudaMemcpy(h.data(), mem + dst, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bytes; i++)
        if (h[i] != bench_byte(peer, src_off + i)) {
            fprintf(stderr, "FAIL %s %s: byte %zu of %zu did not arrive (0x%02x, expected 0x%02x)\n", impl,
                    what, i, bytes, h[i], bench_byte(peer, src_off + i));
            return 1;
        }
    return 0;
}

/* The message rate's landing area after its launches: word w holds the sender's source word w % 1024 (each
 * launch writes every word of the area). 0, or 1 with the first wrong word on stderr. */
static inline int bench_check_rate_words(const char *impl, const char *mem, size_t dst, size_t words,
                                         int sender, const char *what)
{
    std::vector<uint64_t> h(words);
    BENCH_CHECK_CUDA(cudaMemcpy(h.data(), mem + dst, words * 8, cudaMemcpyDeviceToHost));
    for (size_t w = 0; w < words; w++) {
        uint64_t want = 0;
        for (int k = 7; k >= 0; k--) want = want << 8 | bench_byte(sender, (w % 1024) * 8 + k);
        if (h[w] != want) {
            fprintf(stderr, "FAIL %s %s: word %zu of %zu did not arrive (0x%016llx, expected 0x%016llx)\n",
                    impl, what, w, words, (unsigned long long)h[w], (unsigned long long)want);
            return 1;
        }
    }
    return 0;
}

/* Launches of a message-rate row (the first one dropped): a launch takes about 60 us on an H200, so 15 timed
 * ones cost a millisecond, and their median is not set by one slow launch as the median of 3 could be. */
#define BENCH_RATE_REPS 16

/* Times reps launches with CUDA events; the first one warms up and is dropped. Sorted milliseconds. */
template <class Launch> static std::vector<float> bench_time_ms(int reps, Launch launch)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ms;
    for (int rep = 0; rep < reps; rep++) {
        cudaEventRecord(a);
        launch();
        BENCH_CHECK_LAUNCH("a timed kernel");
        cudaEventRecord(b);
        BENCH_CHECK_CUDA(cudaEventSynchronize(b));
        float t = 0;
        cudaEventElapsedTime(&t, a, b);
        if (rep) ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return ms;
}

static const long long bench_ps_sizes[] = {8, 64, 1024, 4096, 16384, 65536, 262144, 1048576};
#define BENCH_PS_NSIZES (int)(sizeof bench_ps_sizes / sizeof bench_ps_sizes[0])

/* One ping-pong measurement: the standard list is the signal ping-pong and put_signal at every size for a
 * thread (up to 4 KiB), a warp and a block of 1024; op codes are each benchmark's own. */
typedef struct {
    const char *test, *group;
    int op, threads;
    long long bytes;
} bench_pp_case_t;

static inline std::vector<bench_pp_case_t> bench_pp_cases(const bench_opts_t *o, int op_signal, int op_thread,
                                                          int op_warp, int op_block)
{
    std::vector<bench_pp_case_t> cases;
    if (bench_wants(o, "signal")) cases.push_back({"signal_pingpong", "thread", op_signal, 1, 0});
    if (bench_wants(o, "put_signal"))
        for (int s = 0; s < BENCH_PS_NSIZES; s++) {
            long long b = bench_ps_sizes[s];
            if (b <= 4096 && bench_wants_row(o, b, "thread"))
                cases.push_back({"put_signal_pingpong", "thread", op_thread, 1, b});
            if (bench_wants_row(o, b, "warp"))
                cases.push_back({"put_signal_pingpong", "warp", op_warp, 32, b});
            if (bench_wants_row(o, b, "block"))
                cases.push_back({"put_signal_pingpong", "block", op_block, 1024, b});
        }
    return cases;
}

/* Fewer round trips for large messages, so that every case takes about as long. */
static inline void bench_pp_iters(const bench_opts_t *o, long long bytes, int *iters, int *warmup)
{
    *iters = bytes >= 262144 ? o->iters / 20 : bytes >= 16384 ? o->iters / 4 : o->iters;
    *warmup = (int)((long long)o->warmup * *iters / o->iters);
}

#endif
