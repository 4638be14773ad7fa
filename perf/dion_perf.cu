/* dion-perf: DION's benchmark program for every backend (issue 10), in the manner of NVSHMEM's perftest,
 * nccl-tests and ucx_perftest. Rank 0 and rank 1 take part in the two-sided tests, every rank in barrier:
 *   dionrun -n 2 [--mps] dion-perf [latency|bandwidth|msgrate|all] [--tests LIST] [--transport KIND] ...
 * Kernel bodies are __host__ __device__: on a GPU they run as kernels and latency rows are timed per
 * iteration with %globaltimer; with --transport cpu the same bodies run on CPU threads (dion_cpu_launch) over
 * host windows, timed with the host clock. Every launch is checked and every result verified before a time
 * is printed. Output: a table on stdout and CSV rows impl,label,test,group,bytes,metric,value (--csv). */
#include <math.h>
#include <time.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_common.h"
#include "dion/dion.h"

/* The kernel bodies three times: here with the p2p device half alone (GPU code's default; the host pass,
 * which CPU mode runs, has every half), in dion_perf_proxy.cu with the proxy's too, and in dion_perf_gdaki.cu
 * with gdaki's. */
#define PERF_NS              perf_p2p
#define PERF_BLOCK_MAX       1024
#define PERF_RATE_MAX        1024
#define PERF_MSGRATE_THREADS 256
#define PERF_CPU_ENTRIES     1
#include "dion_perf_kernels.cuh"

namespace perf_proxy
{
cudaError_t gpu_launch(int op, unsigned grid, unsigned threads, const perf_args_t &a);
unsigned block_max(void);
unsigned msgrate_threads(void);
} // namespace perf_proxy
namespace perf_gdaki
{
cudaError_t gpu_launch(int op, unsigned grid, unsigned threads, const perf_args_t &a);
unsigned block_max(void);
unsigned msgrate_threads(void);
} // namespace perf_gdaki

/* ---- host side ---- */

typedef struct {
    std::string tests;
    const char *transport = "auto", *csv = NULL, *label = "", *sizes = NULL, *groups = "thread,warp,block";
    const char *impl = NULL, *kernels = "auto", *windows = "auto";
    long long min = 8, max = -1, thread_max = 4096, bw_min = -1, bw_max = -1;
    int iters = -1, warmup = -1, reps = -1, block_threads = -1;
    double row_seconds = 5;
    int cpu = 0; /* --cpu: CPU mode over the transport --transport names */
} perf_opts_t;

static perf_opts_t O;
static int rank_, nranks_, cpu_;
/* The GPU kernel set launched: the p2p device half alone, with the proxy's (DION_DEVICE_BACKENDS=3), or with
 * gdaki's (5), after the transports that serve this rank's peers. */
enum { KS_P2P, KS_PROXY, KS_GDAKI };
static int kset_;
static const char *const kset_name_[3] = {"p2p", "proxy", "gdaki"};
#define PERF_CONTEXTS 8 /* contexts: the proxy's rings, gdaki's QPs per peer (blocks of put_bw, msgrate) */
static std::string impl_ = "dion";
static dion_comm_t comm;

#define OK(call)                                                                                             \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) {                                                                            \
            fprintf(stderr, "FAIL rank %d: %s: %s: %s\n", rank_, #call, dion_status_string(s_),              \
                    dion_last_error());                                                                      \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static const char *ALL_TESTS =
    "signal,put_signal,packet,put_bw,put_bw_bidir,msgrate,put_quiet,get,fetch_add,barrier,proxy_pickup";

static void usage(const char *argv0)
{
    fprintf(
        stderr,
        "usage: %s [latency|bandwidth|msgrate|all] [options]\n"
        "  --tests LIST      comma-separated, from: %s\n"
        "                    (latency = signal,put_signal; bandwidth = put_bw,put_bw_bidir)\n"
        "  --transport KIND  auto, p2p, proxy, gdaki or cpu (CPU threads over host windows); gdaki needs a\n"
        "                    ConnectX or DION_GDAKI_NIC=softnic, the NIC model (a CPU thread per rank: its\n"
        "                    rows time the model, not a NIC; docs/gdaki.md)\n"
        "  --cpu             CPU mode (CPU threads play the GPU, host windows) over the transport that\n"
        "                    --transport names (--transport cpu: --cpu over the default transport)\n"
        "  --groups LIST     thread,warp,block     --block-threads N (block size; default 1024, cpu 8)\n"
        "  --min B --max B   sizes: powers of two from min to max   --sizes B,B,...   --thread-max B\n"
        "  --bw-min B --bw-max B  sizes of the bandwidth rows (default: as --min/--max)\n"
        "  --iters N --warmup N   timed and untimed rounds of latency rows   --reps N (bw, msgrate)\n"
        "  --row-seconds S   bw and msgrate rows stop repeating after S s (at least one timed run; 0: no\n"
        "                    limit; default 5)\n"
        "  --csv FILE --label L   append CSV rows (impl,label,test,group,bytes,metric,value)\n"
        "  --impl NAME       the CSV's impl column (default: dion when every peer is p2p, else\n"
        "                    dion-proxy-$DION_OFI_PROVIDER, dion-gdaki-softnic-$DION_OFI_PROVIDER (the\n"
        "                    NIC model, not a NIC) or dion-gdaki-mlx5; -hostwin: host windows)\n"
        "  --kernels KIND    auto (p2p-only kernels unless a peer is served by the proxy or gdaki), p2p,\n"
        "                    proxy (DION_DEVICE_BACKENDS=3 kernels), gdaki (5); put_bw and msgrate take\n"
        "                    the network shapes with the proxy's or gdaki's\n"
        "  --windows KIND    auto (GPU memory; host memory where the backend refuses GPU memory: the\n"
        "                    proxy's tcp engine, the softnic model), gpu, host\n",
        argv0, ALL_TESTS);
    exit(2);
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "latency") || !strcmp(a, "bandwidth") || !strcmp(a, "msgrate") || !strcmp(a, "all")) {
            const char *t = !strcmp(a, "latency")     ? "signal,put_signal"
                            : !strcmp(a, "bandwidth") ? "put_bw,put_bw_bidir"
                            : !strcmp(a, "msgrate")   ? "msgrate"
                                                      : ALL_TESTS;
            O.tests += (O.tests.empty() ? "" : ",") + std::string(t);
            continue;
        }
        if (!strcmp(a, "--cpu")) {
            O.cpu = 1;
            continue;
        }
        if (!v || a[0] != '-') usage(argv[0]);
        i++;
        if (!strcmp(a, "--tests")) {
            std::string t = v;
            if (t == "latency") t = "signal,put_signal";
            if (t == "bandwidth") t = "put_bw,put_bw_bidir";
            if (t == "all") t = ALL_TESTS;
            O.tests += (O.tests.empty() ? "" : ",") + t;
        } else if (!strcmp(a, "--transport"))
            O.transport = v;
        else if (!strcmp(a, "--csv"))
            O.csv = v;
        else if (!strcmp(a, "--label"))
            O.label = v;
        else if (!strcmp(a, "--sizes"))
            O.sizes = v;
        else if (!strcmp(a, "--groups"))
            O.groups = v;
        else if (!strcmp(a, "--min"))
            O.min = atoll(v);
        else if (!strcmp(a, "--max"))
            O.max = atoll(v);
        else if (!strcmp(a, "--thread-max"))
            O.thread_max = atoll(v);
        else if (!strcmp(a, "--iters"))
            O.iters = atoi(v);
        else if (!strcmp(a, "--warmup"))
            O.warmup = atoi(v);
        else if (!strcmp(a, "--reps"))
            O.reps = atoi(v);
        else if (!strcmp(a, "--block-threads"))
            O.block_threads = atoi(v);
        else if (!strcmp(a, "--row-seconds"))
            O.row_seconds = atof(v);
        else if (!strcmp(a, "--bw-min"))
            O.bw_min = atoll(v);
        else if (!strcmp(a, "--bw-max"))
            O.bw_max = atoll(v);
        else if (!strcmp(a, "--impl"))
            O.impl = v;
        else if (!strcmp(a, "--kernels"))
            O.kernels = v;
        else if (!strcmp(a, "--windows"))
            O.windows = v;
        else
            usage(argv[0]);
    }
    if (!bench_in_list("auto,p2p,proxy,gdaki", O.kernels) || !bench_in_list("auto,gpu,host", O.windows))
        usage(argv[0]);
    if (O.tests.empty()) O.tests = ALL_TESTS;
    if (O.tests.find("completion") != std::string::npos) O.tests += ",put_quiet"; /* p2p_bench's name */
    if (bench_in_list(O.tests.c_str(), "pickup")) O.tests += ",proxy_pickup";
}

static int wants(const char *t)
{
    return bench_in_list(O.tests.c_str(), t);
}

static std::vector<long long> size_list(long long min, long long max, const char *list)
{
    std::vector<long long> s;
    if (list) {
        for (const char *p = list; *p;) {
            char *end;
            long long b = strtoll(p, &end, 10);
            if (end == p || b <= 0) {
                fprintf(stderr, "dion-perf: --sizes wants positive byte counts: '%s'\n", list);
                exit(2);
            }
            s.push_back(b);
            p = *end == ',' ? end + 1 : end;
        }
    } else {
        for (long long b = min; b > 0 && b <= max; b *= 2) s.push_back(b);
        if (s.empty() || min <= 0 || (min & (min - 1))) {
            fprintf(stderr, "dion-perf: min %lld, max %lld: min must be a power of two >= 1 and <= max\n",
                    min, max);
            exit(2);
        }
    }
    return s;
}

/* ---- memory that is GPU memory or, in CPU mode, host memory ---- */

static void *buf_alloc(size_t n)
{
    void *p = NULL;
    if (cpu_) {
        p = calloc(1, n);
        if (!p) exit(1);
    } else {
        BENCH_CHECK_CUDA(cudaMalloc(&p, n));
        BENCH_CHECK_CUDA(cudaMemset(p, 0, n));
    }
    return p;
}

static void buf_free(void *p)
{
    if (cpu_)
        free(p);
    else
        cudaFree(p);
}

static void to_host(void *dst, const void *src, size_t n)
{
    if (cpu_)
        memcpy(dst, src, n);
    else
        BENCH_CHECK_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
}

static void to_dev(void *dst, const void *src, size_t n)
{
    if (cpu_)
        memcpy(dst, src, n);
    else
        BENCH_CHECK_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
}

static void zero(void *p, size_t n)
{
    if (cpu_)
        memset(p, 0, n);
    else
        BENCH_CHECK_CUDA(cudaMemset(p, 0, n));
}

/* Window memory: GPU memory, or host memory (CPU mode, or --windows host on a GPU). */
static int win_host_;

static void win_to_host(void *dst, const void *src, size_t n)
{
    if (win_host_)
        memcpy(dst, src, n);
    else
        to_host(dst, src, n);
}

static void win_to_dev(void *dst, const void *src, size_t n)
{
    if (win_host_)
        memcpy(dst, src, n);
    else
        to_dev(dst, src, n);
}

static void win_zero(void *p, size_t n)
{
    if (win_host_)
        memset(p, 0, n);
    else
        zero(p, n);
}

/* 1 when bytes at mem+dst are not peer's source bytes from src_off on (and says which). */
static int check_landed(const char *mem, size_t dst, size_t src_off, size_t bytes, int peer, const char *what)
{
    std::vector<unsigned char> h(bytes);
    win_to_host(h.data(), mem + dst, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (h[i] != bench_byte(peer, src_off + i)) {
            fprintf(stderr, "FAIL rank %d %s: byte %zu of %zu did not arrive (0x%02x, expected 0x%02x)\n",
                    rank_, what, i, bytes, h[i], bench_byte(peer, src_off + i));
            return 1;
        }
    return 0;
}

static double host_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Runs op on grid x threads (a kernel of the chosen set, or CPU threads) and returns its time in ns (events /
 * host clock). A launch that fails ends the run. */
static double launch(int op, unsigned grid, unsigned threads, perf_args_t *a)
{
    if (cpu_) {
        double t0 = host_ns();
        OK(dion_cpu_launch(grid, threads, perf_p2p::cpu_entry(op), a));
        return host_ns() - t0;
    }
    cudaEvent_t e0, e1;
    BENCH_CHECK_CUDA(cudaEventCreate(&e0));
    BENCH_CHECK_CUDA(cudaEventCreate(&e1));
    BENCH_CHECK_CUDA(cudaEventRecord(e0));
    cudaError_t e = kset_ == KS_GDAKI   ? perf_gdaki::gpu_launch(op, grid, threads, *a)
                    : kset_ == KS_PROXY ? perf_proxy::gpu_launch(op, grid, threads, *a)
                                        : perf_p2p::gpu_launch(op, grid, threads, *a);
    if (e != cudaSuccess) {
        fprintf(stderr, "FAIL rank %d: launching dion-perf kernel %d (%s set) on %u x %u threads: %s\n",
                rank_, op, kset_name_[kset_], grid, threads, cudaGetErrorString(e));
        exit(1);
    }
    BENCH_CHECK_CUDA(cudaEventRecord(e1));
    BENCH_CHECK_CUDA(cudaEventSynchronize(e1));
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    float ms = 0;
    BENCH_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms * 1e6;
}

/* ---- output ---- */

static void csv_row(const char *test, const char *group, long long bytes, const char *metric, double value)
{
    if (!O.csv || rank_ != 0) return;
    FILE *f = fopen(O.csv, "a");
    if (!f) {
        fprintf(stderr, "dion-perf: cannot append to %s\n", O.csv);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    if (ftell(f) == 0) fprintf(f, "impl,label,test,group,bytes,metric,value\n");
    fprintf(f, "%s,%s,%s,%s,%lld,%s,%.6g\n", impl_.c_str(), O.label, test, group, bytes, metric, value);
    fclose(f);
}

static void header(void)
{
    if (rank_ != 0) return;
    printf("%-22s %-6s %10s  %-11s %10s %10s %10s %10s  %s\n", "test", "group", "bytes", "metric", "min",
           "median", "p99", "mean", "extra");
}

/* One row: min / median / p99 (and mean) of the per-iteration values vals (microseconds) under metric; extra
 * is a derived figure (GB/s, Mops) with its own metric name, or NULL. */
static void report(const char *test, const char *group, long long bytes, const char *metric,
                   std::vector<double> vals, const char *extra_metric, double extra)
{
    if (rank_ != 0 || vals.empty()) return;
    std::sort(vals.begin(), vals.end());
    size_t n = vals.size(), k99 = (size_t)ceil(0.99 * (double)n);
    double mn = vals[0], med = vals[n / 2], p99 = vals[k99 ? k99 - 1 : 0], sum = 0;
    for (double v : vals) sum += v;
    double mean = sum / (double)n;
    char ex[64] = "";
    if (extra_metric) snprintf(ex, sizeof ex, "%.3f %s", extra, extra_metric);
    printf("%-22s %-6s %10lld  %-11s %10.3f %10.3f %10.3f %10.3f  %s\n", test, group, bytes, metric, mn, med,
           p99, mean, ex);
    fflush(stdout);
    std::string m = metric;
    csv_row(test, group, bytes, metric, mean); /* the name p2p_bench and plot.py use: the mean */
    csv_row(test, group, bytes, (m + "_min").c_str(), mn);
    csv_row(test, group, bytes, (m + "_median").c_str(), med);
    csv_row(test, group, bytes, (m + "_p99").c_str(), p99);
    if (extra_metric) csv_row(test, group, bytes, extra_metric, extra);
}

static void skipped(const char *test, const char *why)
{
    if (rank_ == 0) printf("%-22s skipped: %s\n", test, why);
}

/* Whether a repeated row (put_bw, msgrate) has had its time: after at least one timed run, once rank 0's
 * runs took --row-seconds (a slow transport then cannot eat a whole benchmark call). Collective. */
static int row_done(double *spent_ns, double ns, int rep)
{
    *spent_ns += ns;
    int done = rep >= 1 && O.row_seconds > 0 && *spent_ns > O.row_seconds * 1e9;
    OK(dion_comm_bcast(comm, &done, sizeof done, 0));
    return done;
}

/* ---- transports ---- */

/* Sets the environment before init: DION_CPU_MODE for cpu or --cpu, DION_TRANSPORT for a named transport. */
static void pick_transport(void)
{
    const char *t = O.transport;
    if (!strcmp(t, "cpu") || O.cpu) {
        setenv("DION_CPU_MODE", "1", 1);
        cpu_ = 1;
    }
    if (!strcmp(t, "p2p") || !strcmp(t, "proxy") || !strcmp(t, "gdaki"))
        setenv("DION_TRANSPORT", t, 1);
    else if (strcmp(t, "auto") != 0 && strcmp(t, "cpu") != 0) {
        fprintf(stderr, "dion-perf: --transport %s: one of auto, p2p, proxy, gdaki, cpu\n", t);
        exit(2);
    }
}

/* A setup call that fails because the requested transport is missing ends the run with 77 (skipped). */
static void setup_ok(dion_status_t s, const char *what)
{
    if (s == DION_SUCCESS) return;
    if (strcmp(O.transport, "auto") != 0 && strcmp(O.transport, "cpu") != 0) {
        const char *nic = getenv("DION_GDAKI_NIC");
        fprintf(stderr, "dion-perf: transport %s cannot run here as asked (%s: %s)%s\n", O.transport, what,
                dion_last_error(),
                !strcmp(O.transport, "gdaki") && !(nic && !strcmp(nic, "softnic"))
                    ? "; without a ConnectX, DION_GDAKI_NIC=softnic runs gdaki against the NIC model (its "
                      "times are the model's, not a NIC's)"
                    : "");
        exit(77);
    }
    fprintf(stderr, "FAIL rank %d: %s: %s: %s\n", rank_, what, dion_status_string(s), dion_last_error());
    exit(1);
}

static const char *transport_name(uint32_t t)
{
    switch (t) {
    case DION_TRANSPORT_NONE:
        return "none";
    case DION_TRANSPORT_SELF:
        return "self";
    case DION_TRANSPORT_P2P:
        return "p2p";
#ifdef DION_DEVF_PROXY
    case DION_TRANSPORT_PROXY:
        return "proxy";
#endif
#ifdef DION_DEVF_GDAKI
    case DION_TRANSPORT_GDAKI:
        return "gdaki";
#endif
    default:
        return "other";
    }
}

/* Whether some peer of this handle is served by the proxy (then the handle has rings and the flag). */
static int has_proxy_peer(const dion_dev_t *dev)
{
    return (dev->flags & DION_DEVF_PROXY) != 0;
}

/* Whether some peer of this handle is served by gdaki (then the handle has QPs and the flag). */
static int has_gdaki_peer(const dion_dev_t *dev)
{
    return (dev->flags & DION_DEVF_GDAKI) != 0;
}

/* The sum of v over all ranks. */
static dion_status_t sum_all(int v, int *sum)
{
    std::vector<int> all(nranks_);
    dion_status_t s = dion_comm_allgather(comm, &v, sizeof v, all.data());
    *sum = 0;
    for (int x : all) *sum += x;
    return s;
}

/* A transport asked for by name must serve peer 1 (DION_TRANSPORT alone may fall back or be ignored). */
static void check_transport(const dion_dev_t *dev)
{
    /* the partner of this rank in the pair rows (rank ^ 1); entry [rank] is this rank itself ("self") */
    if (rank_ >= 2) return; /* only ranks 0 and 1 run the rows */
    int partner = rank_ ^ 1;
    const char *want = O.transport, *got = transport_name(dev->peer_inline[partner].transport);
    if (!strcmp(want, "auto") || !strcmp(want, "cpu") || !strcmp(want, got)) return;
    if (!strcmp(want, "gdaki") && strcmp(got, "other") == 0) return; /* a kind this file does not name yet */
    if (rank_ == 0)
        fprintf(stderr,
                "dion-perf: transport %s is not available in this build or on this machine (peer %d is "
                "served by %s)\n",
                want, partner, got);
    exit(77);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    parse(argc, argv);
    pick_transport();
    setup_ok(dion_comm_init_env(&comm), "dion_comm_init_env");
    rank_ = dion_comm_rank(comm);
    nranks_ = dion_comm_size(comm);
    if (nranks_ < 2) {
        fprintf(stderr, "dion-perf needs at least 2 ranks (dionrun -n 2)\n");
        return 2;
    }
    const int active = rank_ < 2, peer = rank_ ^ 1;
    int nsm = 4;
    cudaDeviceProp prop;
    if (!cpu_) {
        int id = 0, count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0) {
            fprintf(stderr, "dion-perf: no usable GPU (%s); --transport cpu runs the tests on CPU threads\n",
                    e != cudaSuccess ? cudaGetErrorString(e) : "none found");
            return 77;
        }
        BENCH_CHECK_CUDA(cudaGetDevice(&id));
        BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, id));
        nsm = prop.multiProcessorCount;
    }
    /* defaults: GPU runs as p2p_bench does; CPU mode is for checking, small and short */
    if (O.max < 0) O.max = cpu_ ? 4096 : 1048576;
    if (O.bw_min < 0) O.bw_min = O.min;
    if (O.bw_max < 0) O.bw_max = O.max;
    std::vector<long long> sizes = size_list(O.min, O.max, O.sizes);
    std::vector<long long> bw_sizes =
        O.sizes && O.bw_min == O.min && O.bw_max == O.max ? sizes : size_list(O.bw_min, O.bw_max, NULL);
    long long maxb = std::max(*std::max_element(sizes.begin(), sizes.end()),
                              *std::max_element(bw_sizes.begin(), bw_sizes.end()));
    const int msg_words = cpu_ ? 512 : 65536; /* 4 KiB / 512 KiB of distinct 8-byte targets */
    size_t area = std::max((size_t)maxb, (size_t)msg_words * 8);
    area = (area + 4095) / 4096 * 4096;
    size_t win_bytes = 2 * area + 4096;

    /* Window memory. auto: GPU memory, and host memory where the proxy's engine cannot register GPU memory
     * (libfabric's tcp provider: no FI_HMEM); the registration is collective and fails on every rank alike.
     */
    char *base = NULL;
    dion_win_t win;
    win_host_ = cpu_ || !strcmp(O.windows, "host");
    std::string win_note = win_host_ ? "host memory" : "GPU memory";
    dion_status_t ws = dion_win_alloc(comm, win_bytes, win_host_, (void **)&base, &win);
    if (ws != DION_SUCCESS && !win_host_ && !strcmp(O.windows, "auto") && strcmp(O.transport, "p2p")) {
        win_note = std::string("host memory (GPU memory refused: ") + dion_last_error() + ")";
        win_host_ = 1;
        ws = dion_win_alloc(comm, win_bytes, 1, (void **)&base, &win);
    }
    setup_ok(ws, "dion_win_alloc");
    /* contexts: the proxy gives each a command ring, and spreads the blocks of msgrate and put_bw over them
     */
    dion_dev_attr_t attr = {64, PERF_CONTEXTS, 0, cpu_ ? DION_DEV_FLAG_CPU : 0u};
    dion_dev_t dev;
    setup_ok(dion_dev_create(comm, &attr, &dev), "dion_dev_create");
    check_transport(&dev);
    int any_proxy = 0, any_gdaki = 0;
    OK(sum_all(has_proxy_peer(&dev), &any_proxy));
    OK(sum_all(has_gdaki_peer(&dev), &any_gdaki));
    /* the kernel set: the one with the device half of the backend serving this rank's peers (no set has
     * both network halves: a run with peers through both is refused) */
    const int need = has_gdaki_peer(&dev) ? KS_GDAKI : has_proxy_peer(&dev) ? KS_PROXY : KS_P2P;
    if (!cpu_ && has_gdaki_peer(&dev) && has_proxy_peer(&dev)) {
        fprintf(stderr,
                "dion-perf: rank %d reaches some peers through the proxy and some through gdaki; no kernel "
                "set has both device halves (set DION_TRANSPORT=proxy or gdaki)\n",
                rank_);
        return 2;
    }
    kset_ = need;
    if (!strcmp(O.kernels, "proxy"))
        kset_ = KS_PROXY;
    else if (!strcmp(O.kernels, "gdaki"))
        kset_ = KS_GDAKI;
    else if (!strcmp(O.kernels, "p2p"))
        kset_ = KS_P2P;
    if (!cpu_ && need != KS_P2P && kset_ != need) {
        fprintf(stderr,
                "dion-perf: --kernels %s, but rank %d reaches a peer through %s: those kernels lack its "
                "device half (use auto or %s)\n",
                O.kernels, rank_, kset_name_[need], kset_name_[need]);
        return 2;
    }
    if (cpu_) kset_ = KS_P2P; /* CPU mode runs the host pass of the bodies, which has every half */
    const int net = any_proxy || any_gdaki;
    /* the CSV's impl: one line per transport, NIC and provider in plot.py. gdaki's NIC is the softnic model
     * only when DION_GDAKI_NIC=softnic asked for it (the library never picks it by itself), and the name
     * says so: its rows time the model's CPU thread, not a NIC. */
    if (O.impl) {
        impl_ = O.impl;
    } else if (net) {
        const char *prov = getenv("DION_OFI_PROVIDER"), *nic = getenv("DION_GDAKI_NIC");
        std::string p = prov && *prov ? std::string("-") + prov : std::string();
        if (any_gdaki && nic && !strcmp(nic, "softnic"))
            impl_ = "dion-gdaki-softnic" + p;
        else if (any_gdaki)
            impl_ = "dion-gdaki-mlx5";
        else
            impl_ = "dion-proxy" + p;
        if (any_gdaki && any_proxy) impl_ += "+proxy";
        if (win_host_ && !cpu_) impl_ += "-hostwin";
    }
    /* The network backends' rows take microseconds to tens of them per operation (tcp): fewer rounds. */
    if (O.iters < 0) O.iters = cpu_ ? 200 : net ? 1000 : 10000;
    if (O.warmup < 0) O.warmup = O.iters / 10;
    if (O.reps < 0) O.reps = cpu_ ? 5 : net ? 5 : 20;
    const unsigned kmax = cpu_                ? 1024u
                          : kset_ == KS_GDAKI ? perf_gdaki::block_max()
                          : kset_ == KS_PROXY ? perf_proxy::block_max()
                                              : perf_p2p::block_max();
    if (O.block_threads < 0) O.block_threads = cpu_ ? 8 : (int)kmax;
    if (O.iters < 1 || O.warmup < 0 || O.reps < 1 || O.block_threads < 1 || O.block_threads > (int)kmax) {
        fprintf(stderr, "dion-perf: --iters, --reps >= 1, --warmup >= 0, --block-threads 1..%u\n", kmax);
        return 2;
    }
    {
        std::vector<unsigned char> src(area);
        for (size_t i = 0; i < area; i++) src[i] = bench_byte(rank_, i);
        win_to_dev(base, src.data(), area);
    }
    unsigned long long *status = (unsigned long long *)buf_alloc(64);
    uint64_t *times = (uint64_t *)buf_alloc(sizeof(uint64_t) * (size_t)O.iters);
    if (!cpu_) {
        bench_spin<<<nsm, 256>>>(400000000ull, status); /* clocks up before timing anything */
        BENCH_CHECK_LAUNCH("bench_spin");
        BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        zero(status, 64);
    }
    if (rank_ == 0) {
        printf("# dion-perf: %d ranks, %s, transport %s (peer 1: %s), iters %d, warm-up %d\n", nranks_,
               cpu_ ? "CPU mode (host clock)" : prop.name, O.transport,
               transport_name(dev.peer_inline[1].transport), O.iters, O.warmup);
        printf("# impl %s, windows in %s, kernels %s\n", impl_.c_str(), win_note.c_str(),
               cpu_                ? "CPU threads"
               : kset_ == KS_GDAKI ? "with gdaki's device half (DION_DEVICE_BACKENDS=5)"
               : kset_ == KS_PROXY ? "with the proxy's device half (DION_DEVICE_BACKENDS=3)"
                                   : "p2p device half alone");
        if (any_gdaki && impl_.find("softnic") != std::string::npos)
            printf(
                "# gdaki NIC: the softnic model (DION_GDAKI_NIC=softnic), a CPU thread per rank that reads "
                "and executes the work requests through ofi %s: its times are the model's, not a NIC's\n",
                getenv("DION_OFI_PROVIDER") ? getenv("DION_OFI_PROVIDER") : "(default provider)");
        header();
    }

    perf_args_t a;
    memset(&a, 0, sizeof a);
    a.dev = dev;
    a.win = dion_win_device(win);
    a.dst = area;
    a.fadd = 2 * area;
    a.peer = peer;
    a.times = times;
    a.status = status;
    a.local = base;
    a.out = area + area / 2; /* packets land at dst (area) and are unpacked here */
    int failures = 0;
    uint64_t base_value = 0;
    const unsigned bt = (unsigned)O.block_threads, wt = cpu_ ? std::min(bt, 32u) : 32u;

    /* Runs a per-iteration latency row on the ranks in `who` (1: ranks 0 and 1, 2: rank 0, 3: all). */
    auto latency_row = [&](const char *test, const char *group, int op, long long bytes, int who,
                           const char *metric, double scale) {
        int iters = bytes >= 262144  ? std::max(1, O.iters / 20)
                    : bytes >= 16384 ? std::max(1, O.iters / 4)
                                     : O.iters;
        a.iters = iters;
        a.warmup = (int)((long long)O.warmup * iters / O.iters);
        a.bytes = (size_t)bytes;
        a.base = base_value;
        base_value += (uint64_t)(iters + a.warmup);
        unsigned threads = !strcmp(group, "block") ? bt : !strcmp(group, "warp") ? wt : 1;
        OK(dion_comm_barrier(comm));
        win_zero(base + area, area + 4096);
        zero(status, 64);
        zero(times, sizeof(uint64_t) * (size_t)iters);
        OK(dion_comm_barrier(comm));
        int runs = who == 3 || (who == 1 && active) || (who == 2 && rank_ == 0);
        if (runs) launch(op, 1, threads, &a);
        OK(dion_comm_barrier(comm));
        unsigned long long st[2];
        to_host(st, status, sizeof st);
        int bad = st[0] || st[1] || dion_dev_check(comm, &dev) != DION_SUCCESS;
        if (bad)
            fprintf(stderr, "FAIL rank %d: %s %s %lld: %s\n", rank_, test, group, bytes, dion_last_error());
        /* what each row moved: ping-pongs both ways (packets: their unpacked payloads), put+quiet to rank 1,
         * get into rank 0 */
        size_t landed = op >= T_PKT_THREAD ? a.out : area;
        if (!bad && bytes && who == 1 && active)
            bad = check_landed(base, landed, 0, (size_t)bytes, peer, test);
        if (!bad && bytes && op >= T_PQ_THREAD && op <= T_PQ_BLOCK && rank_ == 1)
            bad = check_landed(base, area, 0, (size_t)bytes, 0, test);
        if (!bad && bytes && op >= T_GET_THREAD && op <= T_GET_BLOCK && rank_ == 0)
            bad = check_landed(base, area, 0, (size_t)bytes, 1, test);
        if (!bad && op == T_FADD && rank_ == 1) {
            uint64_t w;
            win_to_host(&w, base + 2 * area, 8);
            if (w != (uint64_t)(iters + a.warmup)) {
                fprintf(stderr, "FAIL rank 1 fetch_add: the word holds %llu, expected %d\n",
                        (unsigned long long)w, iters + a.warmup);
                bad = 1;
            }
        }
        std::vector<uint64_t> t(iters);
        to_host(t.data(), times, sizeof(uint64_t) * (size_t)iters);
        std::vector<double> us;
        for (uint64_t x : t) us.push_back((double)x * scale / 1000.0);
        int all = 0;
        OK(sum_all(bad, &all));
        failures += bad;
        if (!all) report(test, group, bytes, metric, us, NULL, 0);
    };

    if (wants("signal")) {
        latency_row("signal_pingpong", "thread", T_SIGNAL, 0, 1, "oneway_us", 0.5);
        latency_row("signal_relaxed_pingpong", "thread", T_SIGNAL_RELAXED, 0, 1, "oneway_us", 0.5);
    }
    const char *gnames[3] = {"thread", "warp", "block"};
    if (wants("put_signal"))
        for (long long b : sizes)
            for (int g = 0; g < 3; g++)
                if (bench_in_list(O.groups, gnames[g]) && (g || b <= O.thread_max))
                    latency_row("put_signal_pingpong", gnames[g], T_PS_THREAD + g, b, 1, "oneway_us", 0.5);
    /* Packet puts (p2p and CPU mode only: the network backends do not carry them), at the put_signal sizes up
     * to 4 KiB for the crossover plot: each message takes twice its payload in the region at dst, which
     * must stay below the unpacked copy at area + area / 2. */
    if (wants("packet")) {
        int p2p = !strcmp(transport_name(dev.peer_inline[1].transport), "p2p");
        OK(dion_comm_bcast(comm, &p2p, sizeof p2p, 0));
        if (!p2p) {
            std::string why =
                std::string("packet puts are carried by p2p (and CPU mode over p2p) only; peer 1 "
                            "is served by ") +
                transport_name(dev.peer_inline[1].transport);
            skipped("packet_pingpong", why.c_str());
        } else {
            for (long long b : sizes)
                for (int g = 0; g < 3; g++)
                    if (bench_in_list(O.groups, gnames[g]) && (g || b <= O.thread_max) && b <= 4096 &&
                        DION_PACKET_SPAN(b) <= area / 2)
                        latency_row("packet_pingpong", gnames[g], T_PKT_THREAD + g, b, 1, "oneway_us", 0.5);
        }
    }
    if (wants("put_quiet"))
        for (long long b : sizes)
            for (int g = 0; g < 3; g++)
                if (bench_in_list(O.groups, gnames[g]) && (g || b <= O.thread_max))
                    latency_row("put_quiet", gnames[g], T_PQ_THREAD + g, b, 2, "latency_us", 1.0);
    if (wants("get"))
        for (long long b : sizes)
            for (int g = 0; g < 3; g++)
                if (bench_in_list(O.groups, gnames[g]) && (g || b <= O.thread_max))
                    latency_row("get", gnames[g], T_GET_THREAD + g, b, 2, "latency_us", 1.0);
    if (wants("fetch_add")) {
        /* the proxy stages GPU windows its engine cannot register, and refuses atomics on them (a ring failed
         * by the refusal would fail every later row) */
        if (impl_.rfind("dion-proxy", 0) == 0 && !win_host_)
            skipped("fetch_add", "atomics over the proxy need a host window (--windows host); staged GPU "
                                 "windows refuse them (docs/backends/proxy.md)");
        else
            latency_row("fetch_add", "thread", T_FADD, 8, 2, "latency_us", 1.0);
    }
    if (wants("barrier")) {
        char name[32];
        snprintf(name, sizeof name, "barrier_%dranks", nranks_);
        latency_row(name, "thread", T_BARRIER, 0, 3, "latency_us", 1.0);
    }

    /* The proxy's pickup (perf_pickup): a command into the ring, the proxy takes and completes it, the poster
     * sees the completion; one-way = half that round trip. No network: put_quiet 8 B adds the engine's. */
    if (wants("proxy_pickup")) {
        int r0 = has_proxy_peer(&dev); /* rank 0 posts into its own ring: it needs one */
        OK(dion_comm_bcast(comm, &r0, sizeof r0, 0));
        if (!r0)
            skipped("proxy_pickup", "no peer of rank 0 is served by the proxy");
        else
            latency_row("proxy_pickup", "thread", T_PICKUP, 0, 2, "oneway_us", 0.5);
    }

    /* bandwidth: uni (rank 0 -> 1) and bidirectional (both at once), one timed launch per repetition */
    for (int bidir = 0; bidir < 2; bidir++) {
        if (!wants(bidir ? "put_bw_bidir" : "put_bw")) continue;
        const char *test = bidir ? "put_bw_bidir" : "put_bw";
        for (long long b : bw_sizes) {
            /* p2p: every SM copies. The proxy and gdaki: one command (work request) per block and round, each
             * block on its own context (ring, QP), so that the proxy or NIC sees a few large puts rather than
             * thousands of small ones. */
            unsigned blocks = cpu_ ? 2 : kset_ != KS_P2P ? PERF_CONTEXTS : (unsigned)nsm * 4;
            unsigned threads = cpu_ ? bt : kset_ != KS_P2P ? 32 : 512;
            size_t chunk = ((size_t)b / blocks + 4095) / 4096 * 4096;
            if (chunk == 0) chunk = 4096;
            unsigned used = (unsigned)std::min<size_t>(blocks, ((size_t)b + chunk - 1) / chunk);
            a.bytes = (size_t)b;
            a.chunk = chunk;
            a.stride = used;
            std::vector<double> us;
            double spent = 0;
            for (int rep = 0; rep <= O.reps; rep++) {
                OK(dion_comm_barrier(comm));
                win_zero(base + area, (size_t)b);
                zero(status, 64);
                OK(dion_comm_barrier(comm));
                double ns = 0;
                if (rank_ == 0 || (bidir && rank_ == 1)) ns = launch(T_BW, used, threads, &a);
                if (rep) us.push_back(ns / 1000.0); /* the first one warms up */
                if (row_done(&spent, ns, rep)) break;
            }
            OK(dion_comm_barrier(comm));
            unsigned long long st[2];
            to_host(st, status, sizeof st);
            int bad = st[0] || dion_dev_check(comm, &dev) != DION_SUCCESS;
            if (!bad && (rank_ == 1 || (bidir && rank_ == 0)))
                bad = check_landed(base, area, 0, (size_t)b, peer, test);
            int all = 0;
            OK(sum_all(bad, &all));
            failures += bad;
            if (all || us.empty()) continue;
            std::vector<double> s = us;
            std::sort(s.begin(), s.end());
            double moved = (double)b * (bidir ? 2 : 1);
            report(test, "block", b, "time_us", us, "GBps_median", moved / (s[s.size() / 2] * 1e-6) / 1e9);
            csv_row(test, "block", b, "GBps_best", moved / (s[0] * 1e-6) / 1e9);
        }
    }

    /* message rate: 8-byte puts from 1, 8 and all SMs (CPU mode: 1, 2 and 4 blocks). Through the proxy
     * (gdaki) every put is a command (an inline WRITE): 64 threads per block, blocks spread over the
     * contexts' rings (QPs), and about 16 Ki puts per grid (a thread posts 4 to 256), so that each of the
     * three takes about as long. */
    if (wants("msgrate")) {
        const unsigned grids[3] = {1, cpu_ ? 2u : 8u, cpu_ ? 4u : (unsigned)nsm * (kset_ != KS_P2P ? 1 : 2)};
        const char *names[3] = {"put8_msgrate_1sm", "put8_msgrate_8sm", "put8_msgrate_allsm"};
        for (int k = 0; k < 3; k++) {
            unsigned threads = cpu_                ? 4
                               : kset_ == KS_GDAKI ? perf_gdaki::msgrate_threads()
                               : kset_ == KS_PROXY ? perf_proxy::msgrate_threads()
                                                   : perf_p2p::msgrate_threads();
            a.per_thread = cpu_ ? 64 : 256;
            if (kset_ != KS_P2P)
                a.per_thread = (int)std::min(256u, std::max(4u, 16384u / (grids[k] * threads)));
            a.nthreads = (size_t)grids[k] * threads;
            a.msg_words = (int)std::min<size_t>(a.nthreads * (size_t)a.per_thread, (size_t)msg_words);
            std::vector<double> us;
            double spent = 0;
            for (int rep = 0; rep <= O.reps; rep++) {
                OK(dion_comm_barrier(comm));
                win_zero(base + area, (size_t)a.msg_words * 8);
                zero(status, 64);
                OK(dion_comm_barrier(comm));
                double ns = rank_ == 0 ? launch(T_MSGRATE, grids[k], threads, &a) : 0;
                if (rep) us.push_back(ns / 1000.0);
                if (row_done(&spent, ns, rep)) break;
            }
            OK(dion_comm_barrier(comm));
            unsigned long long st[2];
            to_host(st, status, sizeof st);
            int bad = st[0] || dion_dev_check(comm, &dev) != DION_SUCCESS;
            if (!bad && rank_ == 1) { /* every word: the sender's source word (word % 1024) */
                std::vector<uint64_t> got(a.msg_words), src(1024);
                win_to_host(got.data(), base + area, got.size() * 8);
                for (size_t i = 0; i < 1024 * 8; i++) ((unsigned char *)src.data())[i] = bench_byte(0, i);
                for (int w = 0; w < a.msg_words && !bad; w++)
                    if (got[w] != src[w % 1024]) {
                        fprintf(stderr, "FAIL rank 1 %s: word %d of %d did not arrive\n", names[k], w,
                                a.msg_words);
                        bad = 1;
                    }
            }
            int all = 0;
            OK(sum_all(bad, &all));
            failures += bad;
            if (all || us.empty()) continue;
            std::vector<double> s = us;
            std::sort(s.begin(), s.end());
            double ops = (double)a.nthreads * a.per_thread;
            report(names[k], "thread", 8, "time_us", us, "Mops_median", ops / (s[s.size() / 2] * 1e-6) / 1e6);
        }
    }

    int all_fail = 0;
    OK(sum_all(failures, &all_fail));
    if (rank_ == 0) printf("# %s: %d data or device errors\n", all_fail ? "FAIL" : "ok", all_fail);
    buf_free(times);
    buf_free(status);
    OK(dion_dev_destroy(comm, &dev));
    OK(dion_win_destroy(win));
    dion_comm_destroy(comm);
    return all_fail ? 1 : 0;
}
