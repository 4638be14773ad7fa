/* The floor of any CPU-proxy signal on this host, without DION: what a one-way GPU -> CPU -> CPU -> GPU
 * signal costs with nothing but flags, and with libfabric's shm between the two CPUs. Two kernels of one
 * block run at once (two streams, sides A and B), each with a CPU thread of its own as its "proxy": GPU A
 * stores v into a host word; thread A sees it and passes it on; the word GPU B polls becomes v; GPU B answers
 * the same way back; GPU A times the round trip; one-way is half of it. How thread A passes v on (the rows,
 * impl "floor"): floor_direct     thread A stores into the word GPU B polls (one CPU in the middle: the bare
 * flag echo with a second kernel; what a sender's CPU writing the target's memory could reach) floor_hop
 * thread A stores into a cache line that thread B polls, and thread B stores into the word GPU B polls (two
 * proxies, the cheapest hop between them) floor_ofi_plain  a plain atomic SET over shm into B's registered
 * word, applied by thread B's progress (fi_cq_read in its loop); B's GPU polls that word floor_ofi_fetch  a
 * fetching atomic SET (what the engine posts for a signal by default) floor_ofi_write_plain /
 * floor_ofi_write_fetch  an 8-byte write before the SET (a put_signal's two commands); each GPU checks after
 * answering that the data word holds this round's value or the next ring_ofi_fetch   floor_ofi_fetch with
 * DION's pieces in front: the GPU posts a SIGNAL command into a DION command ring (device/proxy.cuh) and a
 * DION proxy thread (threads.c, pinned as DION pins it) takes it and posts the same fetching SET; progress is
 * the same completion-queue read ring8_ofi_fetch  the same thread draining 8 rings (7 idle), as for a handle
 * with 8 contexts shm is opened as the engine opens it (FI_ORDER_* asked, mr_mode 0). Every round's value is
 * checked by the wait itself (equality); a wait that sees nothing for 10 s fails the row. With --procs 2,
 * side B runs in a child process (two CUDA contexts, MPS clients where MPS runs, as two DION ranks on one GPU
 * are; impl "floor-2proc"); the flag words are one page of shared memory that both register. proxy_floor
 * [--procs 2] [--tests floor] [--iters N] [--warmup N] [--csv FILE] [--label L] docs/backends/proxy.md, "The
 * floor on this host", uses the rows against dion-perf's signal and put_signal. */
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "bench_common.h"
#include "dion/device/proxy.cuh"
#include "ofi_probe.h"
#include "transports/proxy/proxy.h"

#define TIMEOUT_NS (10ull * 1000000000ull)

enum {
    M_DIRECT,
    M_HOP,
    M_OFI_PLAIN,
    M_OFI_FETCH,
    M_OFI_WRITE_PLAIN,
    M_OFI_WRITE_FETCH,
    M_RING_OFI_FETCH,  /* DION's command ring and proxy thread loop carry it to the fetching SET */
    M_RING8_OFI_FETCH, /* the same thread draining 8 rings, 7 of them idle (a handle's 8 contexts) */
    M_COUNT
};
static const char *const mode_names[M_COUNT] = {
    "floor_direct",          "floor_hop",      "floor_ofi_plain", "floor_ofi_fetch", "floor_ofi_write_plain",
    "floor_ofi_write_fetch", "ring_ofi_fetch", "ring8_ofi_fetch"};
static const op_t mode_ops[M_COUNT] = {{"", 0, 0, 0},
                                       {"", 0, 0, 0},
                                       {"atomic SET", 0, 0, 0},
                                       {"fetch-atomic SET", 0, 1, 0},
                                       {"write 8B + atomic SET", 1, 0, 0},
                                       {"write 8B + fetch-atomic SET", 1, 1, 0},
                                       {"fetch-atomic SET", 0, 1, 0},
                                       {"fetch-atomic SET", 0, 1, 0}};
#define RING_RINGS 8 /* rings per side in the ring8 row */

/* Polls word until it holds v; 0 after TIMEOUT_NS without it. */
static __device__ int wait_for(const uint64_t *word, uint64_t v)
{
    uint64_t start = bench_now_ns();
    for (uint32_t n = 1;; n++) {
        if (dion__ld_acquire(word, DION_SCOPE_SYS) == v) return 1;
        if ((n & 1023) == 0 && bench_now_ns() - start > TIMEOUT_NS) return 0;
    }
}

/* One side of the chain. errs[0]: a wait timed out; errs[1]: a data word held neither this round's value nor
 * the next one. */
__global__ void chain_kernel(uint64_t *out, const uint64_t *in, const uint64_t *data, int initiator,
                             uint64_t base, int iters, int warmup, unsigned long long *lat, unsigned *errs,
                             dion_proxy_ring_dev_t ring, int use_ring)
{
    /* the ring rows post a SIGNAL command instead of storing the flag: the proxy thread passes its value on
     */
#define CHAIN_SEND(v)                                                                                        \
    do {                                                                                                     \
        if (use_ring) {                                                                                      \
            dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_SIGNAL, 1, 0, 0, 0, 0, 0);                \
            dion__proxy_cmd_signal(&c, 0, 2, v);                                                             \
            if (dion__proxy_post(&ring, &c, TIMEOUT_NS, NULL, NULL) != DION_SUCCESS) {                       \
                errs[2]++;                                                                                   \
                return;                                                                                      \
            }                                                                                                \
        } else {                                                                                             \
            dion__st_release(out, v, DION_SCOPE_SYS);                                                        \
        }                                                                                                    \
    } while (0)
    for (int i = 1; i <= warmup + iters; i++) {
        uint64_t v = base + (uint64_t)i;
        if (initiator) {
            uint64_t t0 = bench_now_ns();
            CHAIN_SEND(v);
            if (!wait_for(in, v)) {
                errs[0]++;
                return;
            }
            uint64_t t1 = bench_now_ns();
            if (i > warmup) lat[i - warmup - 1] = t1 - t0;
        } else {
            if (!wait_for(in, v)) {
                errs[0]++;
                return;
            }
            CHAIN_SEND(v);
        }
        if (data) { /* off the timed path: the answer is already on its way */
            uint64_t d = dion__ld_relaxed(data, DION_SCOPE_SYS);
            if (d != v && d != v + 1) errs[1]++;
        }
    }
#undef CHAIN_SEND
}

typedef struct side_run {
    int mode, me;
    const uint64_t *from_gpu; /* the word this side's kernel stores into */
    uint64_t *to_gpu;         /* the word the other side's kernel polls (floor_direct) */
    uint64_t *hop_out;        /* floor_hop: the line the other thread polls */
    uint64_t *hop_in;         /* floor_hop: the line this thread polls */
    uint64_t *my_gpu;         /* floor_hop: the word this side's kernel polls */
    side_t *s;
    fi_addr_t to;
    const card_t *peer;
    int stop;
} side_run_t;

static void *side_main(void *p)
{
    side_run_t *r = (side_run_t *)p;
    uint64_t last = 0, last_hop = 0, src = 0, res = 0;
    int ofi = r->mode >= M_OFI_PLAIN;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        uint64_t v = __atomic_load_n(r->from_gpu, __ATOMIC_ACQUIRE);
        if (v != last) {
            last = v;
            if (r->mode == M_DIRECT)
                __atomic_store_n(r->to_gpu, v, __ATOMIC_RELEASE);
            else if (r->mode == M_HOP)
                __atomic_store_n(r->hop_out, v, __ATOMIC_RELEASE);
            else
                post(r->s, NULL, r->to, r->peer, &mode_ops[r->mode], &src, &res, v);
        }
        if (r->mode == M_HOP) {
            uint64_t h = __atomic_load_n(r->hop_in, __ATOMIC_ACQUIRE);
            if (h != last_hop) {
                last_hop = h;
                __atomic_store_n(r->my_gpu, h, __ATOMIC_RELEASE);
            }
        }
        if (ofi) progress(r->s, NULL); /* own completions, and the peer's operations applied here */
    }
    return NULL;
}

/* The ring rows' engine glue: each SIGNAL command becomes the fetching SET of the floor rows, completed at
 * once (the floor waits for no completion either); progress reads the side's completion queue, which also
 * applies the peer's operations here. */
static dion_status_t ring_execute(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                  uint32_t n, uint32_t *taken)
{
    side_run_t *sr = (side_run_t *)arg;
    static uint64_t src[2], res[2];
    (void)thread;
    for (uint32_t i = 0; i < n; i++)
        if (cmds[i].op == DION_PROXY_OP_SIGNAL)
            post(sr->s, NULL, sr->to, sr->peer, &mode_ops[sr->mode], &src[sr->me], &res[sr->me],
                 cmds[i].u.rma.value);
    dion__proxy_ring_complete(r, dion__proxy_cmd_pos(&cmds[n - 1]) + 1);
    *taken = n;
    return DION_SUCCESS;
}

static int ring_progress(void *arg, uint32_t thread)
{
    (void)thread;
    progress(((side_run_t *)arg)->s, NULL);
    return 0;
}

static void *dev_ptr(void *host)
{
    void *d = NULL;
    BENCH_CHECK_CUDA(cudaHostGetDevicePointer(&d, host, 0));
    return d;
}

/* What both sides share: the flag words (each on its own 128-byte line), the shm address cards, and a
 * barrier between the two processes of --procs 2. One page of shared anonymous memory, mapped before fork
 * and registered with CUDA by each process. */
typedef struct {
    uint64_t
        w[128]; /* [0], [16]: A's and B's out; [32], [48]: their in (direct, hop); [64], [80]: hop lines */
    card_t cards[2];
    unsigned barrier, failed;
} shared_t;

/* Both processes (or the one) arrive; 0 after 60 s without the other. */
static int meet(shared_t *sh, int procs, unsigned *round)
{
    *round += (unsigned)procs;
    __atomic_add_fetch(&sh->barrier, 1, __ATOMIC_ACQ_REL);
    for (uint64_t t0 = now_ns(); __atomic_load_n(&sh->barrier, __ATOMIC_ACQUIRE) < *round;)
        if (now_ns() - t0 > 60000000000ull || __atomic_load_n(&sh->failed, __ATOMIC_ACQUIRE)) return 0;
    return 1;
}

int main(int argc, char **argv)
{
    int procs = 1; /* --procs 2: side B in a child process (two CUDA contexts: MPS clients under MPS) */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--procs")) {
            procs = atoi(argv[i + 1]) == 2 ? 2 : 1;
            for (int j = i; j + 2 <= argc; j++) argv[j] = argv[j + 2];
            argc -= 2;
            break;
        }
    bench_opts_t o;
    bench_parse(argc, argv, &o);
    if (!strcmp(o.tests, BENCH_DEFAULT_TESTS)) o.tests = "floor";
    if (!bench_wants(&o, "floor")) return 0;
    shared_t *sh = (shared_t *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("proxy_floor: mmap");
        return 1;
    }
    memset(sh, 0, 4096);
    fflush(stdout);
    pid_t child = procs == 2 ? fork() : 0;
    if (child < 0) {
        perror("proxy_floor: fork");
        return 1;
    }
    const int me = procs == 2 && child == 0; /* 0: side A (and B with one process), 1: side B alone */
    const int first = procs == 2 ? me : 0, last = procs == 2 ? me : 1;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "proxy_floor needs a GPU\n");
        if (me) _exit(77);
        if (child > 0) waitpid(child, NULL, 0);
        return 77;
    }
    BENCH_CHECK_CUDA(cudaSetDevice(0));
    setenv("DION_PROXY_SPIN", "10s", 0); /* the ring rows' proxy threads never nap, as in the proxy step */
    int have_ofi = ofi_probe_load("proxy_floor") == 0;
    if (!have_ofi && !me) fprintf(stderr, "proxy_floor: the floor_ofi_* rows are skipped\n");

    BENCH_CHECK_CUDA(cudaHostRegister(sh, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable));
    uint64_t *w = sh->w, *dw = ((shared_t *)dev_ptr(sh))->w;
    unsigned *errs;
    BENCH_CHECK_CUDA(cudaMallocManaged(&errs, 4 * sizeof(unsigned)));
    unsigned long long *lat;
    BENCH_CHECK_CUDA(cudaMallocManaged(&lat, sizeof *lat * (size_t)o.iters));
    cudaStream_t st[2];
    for (int k = 0; k < 2; k++) BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
    unsigned long long *sink;
    BENCH_CHECK_CUDA(cudaMalloc(&sink, 64));
    cudaDeviceProp prop;
    BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    bench_spin<<<prop.multiProcessorCount, 256>>>(200000000ull, sink); /* clocks up */
    BENCH_CHECK_LAUNCH("bench_spin");
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());

    side_t sides[2];
    fi_addr_t to[2] = {0, 0};
    uint64_t *dmem[2] = {NULL, NULL};
    if (have_ofi) {
        struct fi_info *i = info_for(1);
        for (int k = first; k <= last; k++) {
            side_open(&sides[k], i, 20 + (uint64_t)k);
            card_fill(&sh->cards[k], &sides[k]);
            BENCH_CHECK_CUDA(cudaHostRegister(sides[k].mem, 4096, cudaHostRegisterMapped));
            dmem[k] = (uint64_t *)dev_ptr(sides[k].mem);
        }
        for (int k = first; k <= last; k++) to[k] = side_connect(&sides[k], &sh->cards[1 - k]);
    }

    int rc = 0;
    unsigned round = 0;
    for (int mode = 0; mode < M_COUNT && !rc; mode++) {
        int ofi = mode >= M_OFI_PLAIN;
        if (ofi && !have_ofi) continue;
        uint64_t base = (uint64_t)(mode + 1) << 40;
        if (!me) memset(w, 0, sizeof sh->w);
        if (!meet(sh, procs, &round)) {
            rc = 1;
            break;
        }
        const int ringed = mode >= M_RING_OFI_FETCH, nrings = mode == M_RING8_OFI_FETCH ? RING_RINGS : 1;
        side_run_t r[2];
        pthread_t tid[2];
        dion__proxy_ring_t *rings[2][RING_RINGS];
        dion__proxy_threads_t *thr[2] = {NULL, NULL};
        dion__proxy_exec_t ex[2];
        memset(errs, 0, 4 * sizeof(unsigned));
        for (int k = first; k <= last; k++) {
            memset(&r[k], 0, sizeof r[k]);
            r[k].mode = mode;
            r[k].me = k;
            r[k].from_gpu = w + 16 * k;
            r[k].to_gpu = w + 32 + 16 * (1 - k);
            r[k].my_gpu = w + 32 + 16 * k;
            r[k].hop_out = w + 64 + 16 * (1 - k);
            r[k].hop_in = w + 64 + 16 * k;
            if (ofi) {
                r[k].s = &sides[k];
                r[k].to = to[k];
                r[k].peer = &sh->cards[1 - k];
            }
            if (!ringed) {
                pthread_create(&tid[k], NULL, side_main, &r[k]);
                continue;
            }
            memset(&ex[k], 0, sizeof ex[k]);
            ex[k].execute = ring_execute;
            ex[k].progress = ring_progress;
            ex[k].arg = &r[k];
            for (int q = 0; q < nrings; q++)
                if (dion__proxy_ring_create((uint32_t)q, 1024, 1, &rings[k][q]) != DION_SUCCESS) {
                    fprintf(stderr, "FAIL ring: %s\n", dion_last_error());
                    return 1;
                }
            /* pinned as DION pins its proxy threads (the GPU's NUMA node, where the topology says it) */
            if (dion__proxy_threads_start(rings[k], (uint32_t)nrings, &ex[k], 0, &thr[k]) != DION_SUCCESS) {
                fprintf(stderr, "FAIL proxy threads: %s\n", dion_last_error());
                return 1;
            }
        }
        /* B first, so that it polls before A's first store (not needed for correctness: values are levels) */
        for (int k = last; k >= first; k--) {
            const uint64_t *in = ofi ? dmem[k] : dw + 32 + 16 * k;
            const uint64_t *data = ofi && mode_ops[mode].write ? dmem[k] + 1 : NULL;
            dion_proxy_ring_dev_t rd;
            memset(&rd, 0, sizeof rd);
            if (ringed) rd = rings[k][0]->dev;
            chain_kernel<<<1, 1, 0, st[k]>>>(dw + 16 * k, in, data, k == 0, base, o.iters, o.warmup, lat,
                                             errs, rd, ringed);
            BENCH_CHECK_LAUNCH(k ? "chain_kernel B" : "chain_kernel A");
        }
        for (int k = first; k <= last; k++) BENCH_CHECK_CUDA(cudaStreamSynchronize(st[k]));
        for (int k = first; k <= last; k++) {
            if (ringed) {
                dion__proxy_threads_stop(thr[k]);
                for (int q = 0; q < nrings; q++) dion__proxy_ring_destroy(rings[k][q]);
                continue;
            }
            __atomic_store_n(&r[k].stop, 1, __ATOMIC_RELEASE);
            pthread_join(tid[k], NULL);
        }
        if (errs[0] || errs[1] || errs[2]) {
            fprintf(
                stderr,
                "FAIL %s (side %s): %u waits timed out, %u data words held a wrong value, %u posts failed\n",
                mode_names[mode], me ? "B" : "A", errs[0], errs[1], errs[2]);
            __atomic_store_n(&sh->failed, 1, __ATOMIC_RELEASE);
            rc = 1;
        } else if (!me) {
            std::vector<unsigned long long> v(lat, lat + o.iters);
            bench_report_rtt(&o, procs == 2 ? "floor-2proc" : "floor", mode_names[mode], v);
        }
        if (!meet(sh, procs, &round)) rc = 1; /* both sides' threads are gone before the words are reset */
    }
    if (me) _exit(rc);
    if (child > 0) {
        int status = 0;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "FAIL proxy_floor: side B's process ended with status %d\n", status);
            rc = 1;
        }
    }
    return rc;
}
