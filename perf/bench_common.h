/* Shared pieces of the benchmarks: options, CSV rows, timing helpers. One-way latency is half a ping-pong
 * round trip timed inside the kernel with %globaltimer; bandwidth is bytes moved over kernel time. */
#ifndef DION_PERF_BENCH_COMMON_H
#define DION_PERF_BENCH_COMMON_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_CHECK_CUDA(call)                                                                               \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

typedef struct {
    const char *tests; /* comma-separated: signal,put_signal,put_bw,completion,msgrate,ref */
    int iters, warmup;
    long long bw_bytes;
    const char *csv;
    const char *label; /* e.g. "1gpu-mps" or "2gpu-nvlink" */
} bench_opts_t;

static inline void bench_parse(int argc, char **argv, bench_opts_t *o)
{
    o->tests = "signal,put_signal,put_bw,completion,msgrate";
    o->iters = 20000;
    o->warmup = 2000;
    o->bw_bytes = 1ll << 30;
    o->csv = NULL;
    o->label = "";
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
        else {
            fprintf(
                stderr,
                "usage: %s [--tests LIST] [--iters N] [--warmup N] [--bw-bytes N] [--csv FILE] [--label L]\n",
                argv[0]);
            exit(2);
        }
    }
}

static inline int bench_wants(const bench_opts_t *o, const char *test)
{
    size_t n = strlen(test);
    for (const char *p = o->tests; (p = strstr(p, test)); p += n)
        if ((p == o->tests || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
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
    fprintf(f, "%s,%s,%s,%s,%lld,%s,%.4f\n", impl, o->label, test, group, bytes, metric, value);
    fclose(f);
}

static const long long bench_ps_sizes[] = {8, 64, 1024, 4096, 16384, 65536, 262144, 1048576};
#define BENCH_PS_NSIZES (int)(sizeof bench_ps_sizes / sizeof bench_ps_sizes[0])

#endif
