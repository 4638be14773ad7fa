/* The proxy backend's command ring on one GPU, without a network: what the GPU-to-proxy hand-off costs.
 *  pickup:  one GPU thread posts an 8 B put command, the proxy thread takes it and completes it, the GPU sees
 *           the completion counter move; reported as the round trip and as half of it (the pickup latency).
 *  ref:     the same round trip with a bare flag in host memory that a CPU thread echoes: the floor; and the
 *           post's parts added one at a time to that flag (ref_body_echo: the command's other stores in the
 *           flag's line first; ref_ticket_echo: a ticket atomic and a dependent load in GPU memory before,
 *           as the post did until 2026-12-01; ref_ticket_overlap_echo: the two issued back to back, as now);
 *           ref_stagger_echo: the bare flag with the echo polled by several reads in flight at once;
 *           ref_relaxed_echo: no fence on either side (what the release and acquires cost);
 *           ref_lines<N>[g<gap>]_echo: the echo written into N lines and polled with one read of each in
 * flight. msgrate: commands per second from 1, 8 and all SMs (one warp each, warp posting, one ring per
 * block). proxy_ring_bench [--tests pickup,ref,msgrate] [--iters N] [--warmup N] [--csv FILE] [--label L]
 * DION_PROXY_THREADS picks the proxy threads for msgrate; DION_PROXY_SPIN defaults to 10s here so that the
 * proxy never naps during a measurement. */
#include <pthread.h>

#include <algorithm>
#include <vector>

#include "bench_common.h"
#include "dion/device/proxy.cuh"
#include "transports/proxy/proxy.h"

#define TIMEOUT_NS (10ull * 1000000000ull)

/* The impl column: proxy_ring_bench_serial (DION_PROXY_POST_SERIAL=1, the post before 2026-12-01) says so. */
#if DION_PROXY_POST_SERIAL
#define PRB_IMPL "dion-ring-serial"
#else
#define PRB_IMPL "dion-ring"
#endif

/* ---- the proxy side: every command completes as soon as it is taken ---- */

static dion_status_t complete_exec(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                   uint32_t n, uint32_t *taken)
{
    dion__proxy_ring_complete(r, dion__proxy_cmd_pos(&cmds[n - 1]) + 1);
    *taken = n;
    return DION_SUCCESS;
}

/* ---- pickup: post, wait for completion, one thread ---- */

__global__ void pickup_kernel(dion_proxy_ring_dev_t ring, int iters, int warmup, unsigned long long *lat,
                              unsigned *errs)
{
    for (int i = 0; i < warmup + iters; i++) {
        uint64_t t0 = bench_now_ns();
        dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 1, 0, 0, 0, 0, 8);
        uint64_t t = 0;
        if (dion__proxy_post(&ring, &c, TIMEOUT_NS, &t, NULL) != DION_SUCCESS ||
            dion__proxy_wait_complete(&ring, t, TIMEOUT_NS, NULL) != DION_SUCCESS) {
            errs[0]++;
            return;
        }
        uint64_t t1 = bench_now_ns();
        if (i >= warmup) lat[i - warmup] = t1 - t0;
    }
}

#define STAGGER_LOADS 4   /* loads of the word in flight at once */
#define STAGGER_GAP   400 /* clock cycles between their issues (~0.2 us) */

/* The ref_stagger_echo row (measured slower than one read at a time on the H200, 2026-12-01, and dropped from
 * the library): a read of pinned host memory takes a PCIe round trip (~1 us), so a thread that waits for each
 * read before the next sees a store up to a round trip late. Here STAGGER_LOADS relaxed reads stay in flight,
 * issued STAGGER_GAP cycles apart, and each is reissued as soon as it is checked: the word is
 * observed every round trip / LOADS instead. Returns 1 with *v the value that met the target (then an
 * acquire fence: what was released before it is visible), or 0 after a bounded number of rounds with *v the
 * last value read, so that the caller looks at its clock and failure words. */
static __device__ int poll_stagger(const uint64_t *word, uint64_t target, int exact, uint64_t *v)
{
    uint64_t r[STAGGER_LOADS];
#pragma unroll
    for (int k = 0; k < STAGGER_LOADS; k++) {
        r[k] = dion__ld_relaxed(word, DION_SCOPE_SYS);
        if (k + 1 < STAGGER_LOADS) {
            long long t0 = clock64();
            while (clock64() - t0 < STAGGER_GAP) {
            }
        }
    }
    for (int round = 0; round < 32; round++) {
#pragma unroll
        for (int k = 0; k < STAGGER_LOADS; k++) {
            uint64_t x = r[k]; /* waits for this read only: the others stay in flight */
            if (exact ? x == target : x >= target) {
                *v = x;
                dion__fence(DION_SCOPE_SYS);
                return 1;
            }
            r[k] = dion__ld_relaxed(word, DION_SCOPE_SYS);
        }
    }
    *v = r[STAGGER_LOADS - 1];
    return 0;
}

/* ---- ref: a bare flag echoed by a CPU thread ---- */

typedef struct {
    uint64_t *flag, *echo; /* host views */
    int lines;             /* the echo goes into this many 128-byte lines from echo on (0 or 1: one) */
    int stop;
} echo_t;

static void *echo_main(void *p)
{
    echo_t *e = (echo_t *)p;
    uint64_t last = 0;
    int lines = e->lines > 1 ? e->lines : 1;
    while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
        uint64_t v = __atomic_load_n(e->flag, __ATOMIC_ACQUIRE);
        if (v != last) {
            for (int k = 0; k < lines; k++) __atomic_store_n(e->echo + 16 * k, v, __ATOMIC_RELEASE);
            last = v;
        }
    }
    return NULL;
}

#define LINES_MAX 8 /* ref_lines*_echo: lines the echo is written into */

/* The echo polled over `lines` distinct lines of host memory that the CPU writes with the same value, one
 * relaxed read of each in flight at once, issued `gap` clock cycles apart and each reissued when checked: if
 * a thread's reads of one address are served one at a time (what ref_stagger_echo suggested), reads of
 * different lines are not, and the word is sampled every round trip / lines. The hit is followed by an
 * acquire fence. Returns 0 when the value never came. Measured slower than one read at a time (H200
 * 2026-12-01 19:36, round trip median 3.84 / 4.19 / 4.86 / 5.54 us with 2 / 4 / 4 (gap 250) / 8 lines against
 * 2.75 for ref_flag_echo): more reads of host memory in flight make each one slower, whatever they address;
 * kept as the evidence, the library polls one read at a time. */
static __device__ int poll_lines(const uint64_t *echo, uint64_t v, int lines, int gap)
{
    uint64_t r[LINES_MAX];
#pragma unroll
    for (int k = 0; k < LINES_MAX; k++) {
        if (k < lines) {
            if (k) {
                long long t0 = clock64();
                while (clock64() - t0 < gap) {
                }
            }
            r[k] = dion__ld_relaxed(echo + 16 * k, DION_SCOPE_SYS);
        }
    }
    for (uint64_t round = 0; round < (1ull << 26); round++) {
#pragma unroll
        for (int k = 0; k < LINES_MAX; k++) {
            if (k < lines) {
                if (r[k] == v) {
                    dion__fence(DION_SCOPE_SYS);
                    return 1;
                }
                r[k] = dion__ld_relaxed(echo + 16 * k, DION_SCOPE_SYS);
            }
        }
    }
    return 0;
}

__global__ void ref_kernel(uint64_t *flag, uint64_t *echo, uint64_t base, int iters, int warmup,
                           unsigned long long *lat, unsigned *errs)
{
    for (int i = 1; i <= warmup + iters; i++) {
        uint64_t v = base + (uint64_t)i, t0 = bench_now_ns();
        dion__st_release(flag, v, DION_SCOPE_SYS);
        uint64_t polls = 0;
        while (dion__ld_acquire(echo, DION_SCOPE_SYS) != v)
            if (++polls > (1ull << 32)) {
                errs[0]++;
                return;
            }
        uint64_t t1 = bench_now_ns();
        if (i > warmup) lat[i - warmup - 1] = t1 - t0;
    }
}

/* The post's parts on top of the bare flag (mode 1: the body's stores into the flag's line before the
 * flag's release store; 2: and before them a ticket atomic and a dependent acquire load in GPU memory; 3:
 * the load and the atomic issued back to back; 4: the bare flag, its echo polled with staggered reads; 5: no
 * fence on either side, a relaxed store and relaxed polls: what the release and the acquires cost; 6: the
 * echo polled over `lines` lines, poll_lines). ticket points to two words of GPU memory. */
__global__ void ref_parts_kernel(uint64_t *flag, uint64_t *echo, uint64_t *ticket, int mode, uint64_t base,
                                 int iters, int warmup, unsigned long long *lat, unsigned *errs, int lines,
                                 int gap)
{
    for (int i = 1; i <= warmup + iters; i++) {
        uint64_t v = base + (uint64_t)i, t0 = bench_now_ns(), t = 0, cached = 0;
        if (mode == 2) {
            t = dion__atom_add(&ticket[0], 1, DION_SCOPE_GPU);
            cached = dion__ld_acquire(&ticket[1], DION_SCOPE_GPU);
        } else if (mode == 3) {
            cached = dion__ld_relaxed(&ticket[1], DION_SCOPE_GPU);
            t = dion__atom_add(&ticket[0], 1, DION_SCOPE_GPU);
        }
        if (t - cached > (1ull << 40)) errs[1]++; /* uses both values, as the slot test does */
        if (mode <= 3) {
            flag[1] = v;
            for (int k = 2; k < 8; k += 2) *(ulonglong2 *)&flag[k] = make_ulonglong2(v, t);
        }
        if (mode == 5)
            dion__st_relaxed(flag, v, DION_SCOPE_SYS);
        else
            dion__st_release(flag, v, DION_SCOPE_SYS);
        uint64_t polls = 0, seen = 0;
        if (mode == 5) {
            while (dion__ld_relaxed(echo, DION_SCOPE_SYS) != v)
                if (++polls > (1ull << 32)) {
                    errs[0]++;
                    return;
                }
        } else if (mode == 6) {
#if DION__GPU
            if (!poll_lines(echo, v, lines, gap)) {
                errs[0]++;
                return;
            }
#endif
        } else if (mode == 4) { /* the bare flag, the echo polled with reads in flight (poll_stagger) */
#if DION__GPU
            while (!poll_stagger(echo, v, 1, &seen))
                if (++polls > (1ull << 24)) {
                    errs[0]++;
                    return;
                }
#endif
        } else {
            while (dion__ld_acquire(echo, DION_SCOPE_SYS) != v)
                if (++polls > (1ull << 32)) {
                    errs[0]++;
                    return;
                }
        }
        uint64_t t1 = bench_now_ns();
        if (i > warmup) lat[i - warmup - 1] = t1 - t0;
    }
}

/* ---- msgrate: each block's warp posts into the block's ring, then one lane waits on quiet ---- */

__global__ void msgrate_kernel(const dion_proxy_ring_dev_t *rings, int per_thread, unsigned *errs)
{
    const dion_proxy_ring_dev_t *r = &rings[blockIdx.x];
    int failed = 0;
    for (int i = 0; i < per_thread && !failed; i++) {
        dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 1, 0, (uint64_t)i * 8, 0, 0, 8);
        failed = dion__proxy_post_warp(r, &c, TIMEOUT_NS, NULL, NULL) != DION_SUCCESS;
    }
    if (failed) atomicAdd(&errs[0], 1u);
    __syncwarp();
    if (threadIdx.x == 0 && dion__proxy_quiet(r, TIMEOUT_NS, NULL) != DION_SUCCESS) atomicAdd(&errs[0], 1u);
}

static void ring_or_die(uint32_t ctx, uint32_t slots, dion__proxy_ring_t **r)
{
    if (dion__proxy_ring_create(ctx, slots, 1, r) != DION_SUCCESS) {
        fprintf(stderr, "FAIL ring: %s\n", dion_last_error());
        exit(1);
    }
}

static void threads_or_die(dion__proxy_ring_t **rings, uint32_t n, dion__proxy_exec_t *ex,
                           dion__proxy_threads_t **t)
{
    if (dion__proxy_threads_start(rings, n, ex, 0, t) != DION_SUCCESS) {
        fprintf(stderr, "FAIL proxy threads: %s\n", dion_last_error());
        exit(1);
    }
}

/* Rows under impl dion-ring (the ring alone, no ranks), so that they sit next to dion-perf's rows in one CSV
 * (perf/run_gpu.sh, step proxy): the round trip's min / median / p99, and one-way = half the median. */
static void report_latency(const bench_opts_t *o, const char *test, std::vector<unsigned long long> &v)
{
    bench_report_rtt(o, PRB_IMPL, test, v);
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    bench_parse(argc, argv, &o);
    if (!strcmp(o.tests, BENCH_DEFAULT_TESTS)) o.tests = "pickup,ref,msgrate";
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "proxy_ring_bench needs a GPU\n");
        return 77;
    }
    setenv("DION_PROXY_SPIN", "10s", 0);
    BENCH_CHECK_CUDA(cudaSetDevice(0));
    cudaDeviceProp prop;
    BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    unsigned *errs;
    BENCH_CHECK_CUDA(cudaMallocManaged(&errs, 4 * sizeof(unsigned)));
    memset(errs, 0, 4 * sizeof(unsigned));
    unsigned long long *lat;
    BENCH_CHECK_CUDA(cudaMallocManaged(&lat, sizeof *lat * (size_t)o.iters));
    unsigned long long *sink;
    BENCH_CHECK_CUDA(cudaMalloc(&sink, 64));
    bench_spin<<<prop.multiProcessorCount, 256>>>(200000000ull, sink); /* clocks up */
    BENCH_CHECK_CUDA(cudaGetLastError());
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    dion__proxy_exec_t ex = {complete_exec, NULL, NULL};
    int rc = 0;

    if (bench_wants(&o, "pickup")) {
        dion__proxy_ring_t *r;
        dion__proxy_threads_t *t;
        ring_or_die(0, 1024, &r);
        threads_or_die(&r, 1, &ex, &t);
        pickup_kernel<<<1, 1>>>(r->dev, o.iters, o.warmup, lat, errs);
        BENCH_CHECK_CUDA(cudaGetLastError());
        BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        dion__proxy_threads_stop(t);
        if (errs[0]) {
            fprintf(stderr, "FAIL pickup: a post or completion wait failed\n");
            rc = 1;
        } else {
            std::vector<unsigned long long> v(lat, lat + o.iters);
            report_latency(&o, "proxy_pickup", v);
        }
        dion__proxy_ring_destroy(r);
    }

    if (bench_wants(&o, "ref")) {
        uint64_t *words, *dwords;
        /* the flag in the first line, the echo from the second on (LINES_MAX lines of 128 bytes) */
        const size_t WORDS_BYTES = 128 * (1 + LINES_MAX);
        BENCH_CHECK_CUDA(
            cudaHostAlloc((void **)&words, WORDS_BYTES, cudaHostAllocMapped | cudaHostAllocPortable));
        memset(words, 0, WORDS_BYTES);
        BENCH_CHECK_CUDA(cudaHostGetDevicePointer((void **)&dwords, words, 0));
        echo_t e = {words, words + 16, 1, 0};
        pthread_t tid;
        pthread_create(&tid, NULL, echo_main, &e);
        errs[0] = 0;
        ref_kernel<<<1, 1>>>(dwords, dwords + 16, 0, o.iters, o.warmup, lat, errs);
        BENCH_CHECK_CUDA(cudaGetLastError());
        BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        __atomic_store_n(&e.stop, 1, __ATOMIC_RELEASE);
        pthread_join(tid, NULL);
        if (errs[0]) {
            fprintf(stderr, "FAIL ref: the echo never came\n");
            rc = 1;
        } else {
            std::vector<unsigned long long> v(lat, lat + o.iters);
            report_latency(&o, "ref_flag_echo", v);
        }
        /* the post's parts, one echo thread per mode (the flag restarts from 0 in fresh memory); then the
         * echo over several lines (mode 6) at a few line counts and gaps */
        struct {
            const char *name;
            int mode, lines, gap;
        } parts[] = {{"ref_body_echo", 1, 1, 0},           {"ref_ticket_echo", 2, 1, 0},
                     {"ref_ticket_overlap_echo", 3, 1, 0}, {"ref_stagger_echo", 4, 1, 0},
                     {"ref_relaxed_echo", 5, 1, 0},        {"ref_lines2_echo", 6, 2, 1000},
                     {"ref_lines4_echo", 6, 4, 500},       {"ref_lines4g250_echo", 6, 4, 250},
                     {"ref_lines8_echo", 6, 8, 250}};
        uint64_t *tick;
        BENCH_CHECK_CUDA(cudaMalloc(&tick, 16));
        BENCH_CHECK_CUDA(cudaMemset(tick, 0, 16));
        for (size_t m = 0; m < sizeof parts / sizeof parts[0] && !rc; m++) {
            memset(words, 0, WORDS_BYTES);
            echo_t pe = {words, words + 16, parts[m].lines, 0};
            pthread_create(&tid, NULL, echo_main, &pe);
            errs[0] = errs[1] = 0;
            ref_parts_kernel<<<1, 1>>>(dwords, dwords + 16, tick, parts[m].mode, 0, o.iters, o.warmup, lat,
                                       errs, parts[m].lines, parts[m].gap);
            BENCH_CHECK_CUDA(cudaGetLastError());
            BENCH_CHECK_CUDA(cudaDeviceSynchronize());
            __atomic_store_n(&pe.stop, 1, __ATOMIC_RELEASE);
            pthread_join(tid, NULL);
            if (errs[0] || errs[1]) {
                fprintf(stderr, "FAIL %s: the echo never came (%u) or a ticket ran wild (%u)\n",
                        parts[m].name, errs[0], errs[1]);
                rc = 1;
            } else {
                std::vector<unsigned long long> v(lat, lat + o.iters);
                report_latency(&o, parts[m].name, v);
            }
        }
        cudaFree(tick);
        cudaFreeHost(words);
    }

    if (bench_wants(&o, "msgrate")) {
        int counts[3] = {1, 8, prop.multiProcessorCount};
        for (int ci = 0; ci < 3; ci++) {
            int blocks = counts[ci], per = 4096;
            std::vector<dion__proxy_ring_t *> rings(blocks);
            std::vector<dion_proxy_ring_dev_t> devs(blocks);
            for (int b = 0; b < blocks; b++) {
                ring_or_die((uint32_t)b, 1024, &rings[b]);
                devs[b] = rings[b]->dev;
            }
            dion_proxy_ring_dev_t *ddevs;
            BENCH_CHECK_CUDA(cudaMalloc(&ddevs, sizeof *ddevs * blocks));
            BENCH_CHECK_CUDA(cudaMemcpy(ddevs, devs.data(), sizeof *ddevs * blocks, cudaMemcpyHostToDevice));
            dion__proxy_threads_t *t;
            threads_or_die(rings.data(), (uint32_t)blocks, &ex, &t);
            errs[0] = 0;
            std::vector<float> ms = bench_time_ms(4, [&] {
                msgrate_kernel<<<blocks, 32>>>(ddevs, per, errs);
                BENCH_CHECK_CUDA(cudaGetLastError());
            });
            char group[32];
            snprintf(group, sizeof group, "%dblk", blocks);
            if (errs[0]) {
                fprintf(stderr, "FAIL msgrate %s: %u posts or quiets failed\n", group, errs[0]);
                rc = 1;
            } else {
                double cmds = (double)blocks * 32 * per;
                bench_row(&o, "dion-ring", "proxy_msgrate", group, 8, "Mcmds_median",
                          cmds / ms[ms.size() / 2] / 1e3);
                bench_row(&o, "dion-ring", "proxy_msgrate", group, 8, "Mcmds_best", cmds / ms[0] / 1e3);
            }
            dion__proxy_threads_stop(t);
            for (int b = 0; b < blocks; b++) dion__proxy_ring_destroy(rings[b]);
            cudaFree(ddevs);
        }
    }
    cudaFree(sink);
    cudaFree(lat);
    cudaFree(errs);
    return rc;
}
