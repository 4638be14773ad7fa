/* gdaki's posting path (device/gdaki.cuh) from GPU warps that diverge, on one QP whose queues are pinned host
 * memory, served by a CPU thread of this test that plays a minimal NIC: it checks every doorbell and WQE with
 * the softnic model's reader (transports/gdaki/softnic/wqe_check.c), applies each fetch-add to a host word,
 * writes the old value where the WQE says and the CQE when asked. No comm, no engine: only the device code.
 *
 * 512 threads (4 blocks of 128) each do ITERS fetch-adds of 1 and wait for each old value, with random spins
 * and unsignaled NOPs in between, so that lanes of one warp reserve in separate groups and publish out of
 * order, on a ring of 256 WQEBBs (many laps, slot waits). Issue 9: a warp's lanes in different groups waited
 * for each other's turn to publish (the QP was failed after the wait timeout and the kernel hung), and an
 * old value could be read after a WQE one lap later overwrote it. Checks: the kernel ends, no thread saw an
 * error, the NIC found no broken invariant, the host word is threads * ITERS, and the old values are exactly
 * 0 .. threads * ITERS - 1 (each once: none lost, none read twice). Exits 77 without a GPU. When the NIC
 * gets no new WQE for 2 s while the kernel runs, or the kernel is still running after LIMIT_S (then it
 * fails), the QP's counters, marks and held pend words are printed (lines "stall:"): which wait holds the
 * posting up.
 * `gdaki_post_gpu turn` runs the same with the publication of before the fix (leaders wait for their turn),
 * to see on a GPU whether that alone stalls or hangs. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion_device.cuh"
extern "C" {
#include "transports/gdaki/softnic/wqe_check.h"
}

#define RING    256u
#define BLOCKS  4u
#define THREADS 128u
#define ITERS   200u
#define QPN     0x100u
#define LIMIT_S 20 /* the kernel's bound, well above what posting that works needs */

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL: ");                                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(e));
    failures++;
    return 0;
}

/* ---- the NIC, on a CPU thread ---- */

typedef struct {
    uint8_t *sq, *cq;
    uint32_t *dbr;
    uint64_t *db;
    uint64_t word; /* the target of the fetch-adds */
    uint64_t executed, cqes;
    uint64_t pi; /* the producer index of the latest doorbell (for the stall report) */
    int stop;
    char error[512];
} nic_t;

static void nic_cqe(nic_t *n, uint64_t pos, uint8_t opcode)
{
    uint8_t c[64];
    dion__mlx5_cqe_write_req(c, (uint16_t)pos, opcode, QPN, 0, (uint32_t)n->cqes & 1u);
    memcpy(n->cq, c, 60);
    uint32_t tail;
    memcpy(&tail, c + 60, 4);
    __atomic_store_n((uint32_t *)(n->cq + 60), tail, __ATOMIC_RELEASE);
    n->cqes++;
}

static void *nic_main(void *arg)
{
    nic_t *n = (nic_t *)arg;
    uint64_t db_seen = 0, pi = 0, next = 0;
    while (!__atomic_load_n(&n->stop, __ATOMIC_ACQUIRE) && !n->error[0]) {
        uint64_t db = __atomic_load_n(n->db, __ATOMIC_ACQUIRE);
        if (db != db_seen) {
            uint32_t rec = __atomic_load_n(&n->dbr[1], __ATOMIC_ACQUIRE);
            uint64_t npi = 0;
            char why[256];
            if (dion__snic_check_doorbell(db, rec, QPN, RING, pi, &npi, why, sizeof why)) {
                snprintf(n->error, sizeof n->error, "doorbell: %s", why);
                break;
            }
            pi = npi;
            db_seen = db;
            __atomic_store_n(&n->pi, pi, __ATOMIC_RELAXED);
        }
        if (next == pi) {
            struct timespec ts = {0, 2000};
            nanosleep(&ts, NULL);
            continue;
        }
        while (next < pi) {
            dion__snic_wqe_t w;
            char why[256];
            if (dion__snic_parse_wqe(n->sq, RING, next, pi, QPN, &w, why, sizeof why)) {
                snprintf(n->error, sizeof n->error, "WQE at %llu: %s", (unsigned long long)next, why);
                break;
            }
            if (w.kind == DION__SNIC_FETCH_ADD) {
                uint64_t old = n->word;
                n->word += w.swap_add;
                __atomic_store_n((uint64_t *)(uintptr_t)w.laddr, old, __ATOMIC_RELAXED);
            } else if (w.kind != DION__SNIC_NOP) {
                snprintf(n->error, sizeof n->error,
                         "WQE at %llu: kind %d, the test posts fetch-adds and NOPs", (unsigned long long)next,
                         w.kind);
                break;
            }
            __atomic_store_n(&n->executed, n->executed + 1, __ATOMIC_RELAXED);
            if (w.signaled) nic_cqe(n, next, w.opcode);
            next += w.wqebbs;
        }
    }
    return NULL;
}

/* ---- the kernel ---- */

/* where each thread is (diag, for the stall report) */
enum { PH_SPIN = 1, PH_NOP, PH_FA, PH_WAIT, PH_QUIET, PH_DONE, PH_FAILED };
static const char *const ph_name[] = {
    "?",        "spinning", "posting a NOP", "posting a fetch-add", "waiting for its fetch-add",
    "in quiet", "done",     "failed"};

__device__ uint32_t mix(uint32_t x)
{
    x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
    return x;
}

/* Mode "turn" (a diagnosis, not run by ctest): dion__gdaki_post as it was before issue 9's fix, publication
 * in turn: the group's leader waits until ready_head reaches its base, then writes the record and the
 * doorbell itself. Slot and fetched-value waits as now, so that only the publication differs. */
__device__ dion_status_t turn_post(const dion_gdaki_qp_dev_t *q, const dion__gdaki_wr_t *wr,
                                   uint64_t timeout_ns, uint64_t *start)
{
    dion_gdaki_qp_state_t *st = q->st;
    dion__mlx5_resv_t r = dion__mlx5_reserve(&st->resv_head, 1, DION__GDAKI_SSCOPE);
    uint64_t nwq = (uint64_t)q->wq_mask + 1, seen = 0;
    int leader = r.slot == r.base;
    dion_status_t s = DION_SUCCESS;
    if (leader) {
        uint64_t need = r.base + r.total > nwq ? r.base + r.total - nwq : 0;
        if (dion__ld_acquire(&st->cons_idx, DION__GDAKI_SSCOPE) < need)
            s = dion__gdaki_wait_cons(q, need, NULL, timeout_ns, &seen);
        for (uint64_t p = r.base; need && p < r.base + r.total && s == DION_SUCCESS; p++)
            s = dion__gdaki_wait_read(q, p, NULL, timeout_ns);
        if (s != DION_SUCCESS) dion__gdaki_fail(q, s, 0);
    }
    uint32_t lead_lane = __ffs(r.group) - 1u;
    s = (dion_status_t)__shfl_sync(r.group, (int)s, lead_lane);
    if (s != DION_SUCCESS) return s;
    if (wr->result) dion__st_relaxed(&q->pend[r.slot & q->wq_mask], r.slot + 1, DION__GDAKI_SSCOPE);
    int cqe = wr->cqe || dion__gdaki_flow_cqe(q, r.slot, 1);
    dion__gdaki_build(q, r.slot, wr, cqe ? DION__MLX5_CTRL_CQ_UPDATE : 0);
    *start = r.slot;
    uint32_t sig_rel = cqe ? (uint32_t)(r.slot - r.base + 1) : 0;
    sig_rel = __reduce_max_sync(r.group, sig_rel);
    __syncwarp(r.group);
    if (leader) {
        uint32_t qs = dion__gdaki_qscope(q);
        uint64_t end = r.base + r.total, start_ns = 0;
        dion__fence(qs);
        for (uint32_t polls = 0; dion__ld_acquire(&st->ready_head, DION__GDAKI_SSCOPE) != r.base; polls++) {
            if ((polls & 127) == 127) {
                uint64_t now = dion__time_ns();
                if (start_ns == 0) start_ns = now;
                if (now - start_ns > timeout_ns) {
                    s = DION_ERR_TIMEOUT;
                    break;
                }
            }
            dion__backoff(polls + 1);
        }
        if (s == DION_SUCCESS) {
            dion__st_relaxed(&st->last_wqe, end, DION__GDAKI_SSCOPE);
            if (sig_rel) dion__st_relaxed(&st->last_sig, r.base + sig_rel, DION__GDAKI_SSCOPE);
            dion__gdaki_st32(q->dbrec, dion__mlx5_dbr_sq_value((uint16_t)end), qs);
            dion__fence(qs);
            dion__st_release(q->db, dion__mlx5_db_value((uint16_t)end, q->qpn), DION_SCOPE_SYS);
            dion__st_release(&st->ready_head, end, DION__GDAKI_SSCOPE);
        } else {
            dion__gdaki_fail(q, s, 0);
        }
    }
    s = (dion_status_t)__shfl_sync(r.group, (int)s, lead_lane);
    return s;
}

__device__ dion_status_t post1(const dion_gdaki_qp_dev_t *q, const dion__gdaki_wr_t *w, int turn,
                               uint64_t timeout_ns, uint64_t *at)
{
    return turn ? turn_post(q, w, timeout_ns, at) : dion__gdaki_post(q, w, 1, NULL, timeout_ns, at);
}

__global__ void __launch_bounds__(THREADS, 1)
    post_kernel(dion_gdaki_qp_dev_t q, uint64_t *olds, unsigned *errors, uint64_t timeout_ns, int turn,
                volatile uint64_t *diag)
{
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    /* diag[t]: (iteration << 8) | PH_* of thread t; diag[threads + t]: 1 + its latest fetch-add's position */
    volatile uint64_t *ph = &diag[t], *fa_at = &diag[BLOCKS * THREADS + t];
    for (uint32_t i = 0; i < ITERS; i++) {
        *ph = (uint64_t)i << 8 | PH_SPIN;
        uint32_t h = mix(t * 7919u + i * 104729u + 1u);
        long long t0 = clock64();
        while (clock64() - t0 < (long long)(h & 4095u)) { /* lanes of a warp drift apart */
        }
        uint64_t at = 0, seen = 0;
        dion_status_t st = DION_SUCCESS;
        if (h & 0x30000u) { /* three in four: an unsignaled NOP first, on a divergent path */
            dion__gdaki_wr_t nop;
            memset(&nop, 0, sizeof nop);
            nop.kind = DION__GDAKI_WR_NOP;
            *ph = (uint64_t)i << 8 | PH_NOP;
            st = post1(&q, &nop, turn, timeout_ns, &at);
        }
        dion__gdaki_wr_t fa;
        memset(&fa, 0, sizeof fa);
        fa.kind = DION__GDAKI_WR_FETCH_ADD;
        fa.raddr = 4096;
        fa.rkey = 0x1000;
        fa.operand = 1;
        fa.cqe = 1;
        fa.result = 1;
        *ph = (uint64_t)i << 8 | PH_FA;
        if (st == DION_SUCCESS) st = post1(&q, &fa, turn, timeout_ns, &at);
        if (st != DION_SUCCESS) {
            *ph = (uint64_t)i << 8 | PH_FAILED;
            atomicAdd(errors, 1u);
            return;
        }
        *fa_at = at + 1;
        *ph = (uint64_t)i << 8 | PH_WAIT;
        st = dion__gdaki_wait_cons(&q, at + 1, NULL, timeout_ns, &seen);
        uint64_t old = dion__gdaki_result(&q, at, st == DION_SUCCESS);
        if (st != DION_SUCCESS) {
            *ph = (uint64_t)i << 8 | PH_FAILED;
            atomicAdd(errors, 1u);
            return;
        }
        olds[(size_t)t * ITERS + i] = old;
    }
    uint64_t seen = 0;
    *ph = (uint64_t)ITERS << 8 | PH_QUIET;
    if (!turn && dion__gdaki_quiet(&q, NULL, timeout_ns, &seen) != DION_SUCCESS) atomicAdd(errors, 1u);
    *ph = (uint64_t)ITERS << 8 | PH_DONE;
}

/* When the NIC has had nothing to do for a while but the kernel still runs: copies the QP's counters, marks
 * and pend words out of device memory (a copy beside the running kernel) and prints what stands still, so
 * that one run on a GPU tells which wait holds the posting up. */
static void stall_report(const char *ctr, char *snap, const uint64_t *diag, uint64_t *diag_h,
                         const nic_t *nic, cudaStream_t side)
{
    const size_t nthreads = (size_t)BLOCKS * THREADS;
    if (cudaMemcpyAsync(snap, ctr, sizeof(dion_gdaki_qp_state_t) + 2 * RING * 8, cudaMemcpyDeviceToHost,
                        side) != cudaSuccess ||
        cudaMemcpyAsync(diag_h, diag, 2 * nthreads * 8, cudaMemcpyDeviceToHost, side) != cudaSuccess)
        return;
    time_t t0 = time(NULL);
    while (cudaStreamQuery(side) == cudaErrorNotReady && time(NULL) - t0 < 3) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (cudaStreamQuery(side) != cudaSuccess) {
        fprintf(stderr, "  stall: the copy of the QP's counters did not finish\n");
        return;
    }
    const dion_gdaki_qp_state_t *st = (const dion_gdaki_qp_state_t *)snap;
    const uint64_t *marks = (const uint64_t *)(snap + sizeof *st), *pend = marks + RING;
    uint32_t tail;
    memcpy(&tail, nic->cq + 60, 4);
    fprintf(stderr,
            "  stall: resv_head %llu ready_head %llu last_wqe %llu last_sig %llu db_lock %llu poller %llu "
            "cons_idx %llu "
            "err %llu; NIC pi %llu executed %llu CQEs %llu; CQE tail 0x%08x\n",
            (unsigned long long)st->resv_head, (unsigned long long)st->ready_head,
            (unsigned long long)st->last_wqe, (unsigned long long)st->last_sig,
            (unsigned long long)st->db_lock, (unsigned long long)st->poller, (unsigned long long)st->cons_idx,
            (unsigned long long)st->err, (unsigned long long)nic->pi, (unsigned long long)nic->executed,
            (unsigned long long)nic->cqes, tail);
    for (uint64_t p = st->ready_head, k = 0; p < st->resv_head && k < 8; k++) { /* the groups waiting */
        uint64_t m = marks[p & (RING - 1)];
        fprintf(stderr, "  stall: mark at %llu is %llu%s\n", (unsigned long long)p, (unsigned long long)m,
                m > p ? "" : " (not written)");
        if (m <= p) break;
        p = m;
    }
    for (uint32_t i = 0, k = 0; i < RING; i++) {
        if (!pend[i] || k++ >= 16) continue;
        int owner = -1;
        for (size_t t = 0; t < nthreads; t++)
            if (diag_h[nthreads + t] == pend[i]) owner = (int)t;
        uint64_t d = owner >= 0 ? diag_h[owner] : 0;
        fprintf(
            stderr,
            "  stall: pend[%u] held by the fetch-add at %llu (%s): thread %d (warp %d) in iteration %llu, "
            "%s\n",
            i, (unsigned long long)pend[i] - 1, pend[i] <= st->cons_idx ? "complete" : "not complete", owner,
            owner / 32, (unsigned long long)(d >> 8), ph_name[d & 0xff]);
    }
    static unsigned count[ITERS + 1][PH_FAILED + 1];
    memset(count, 0, sizeof count);
    for (size_t t = 0; t < nthreads; t++) {
        uint64_t it = diag_h[t] >> 8, p = diag_h[t] & 0xff;
        if (it <= ITERS && p <= PH_FAILED) count[it][p]++;
    }
    for (uint32_t it = 0; it <= ITERS; it++)
        for (uint32_t p = 1; p <= PH_FAILED; p++)
            if (count[it][p])
                fprintf(stderr, "  stall: %u threads in iteration %u %s\n", count[it][p], it, ph_name[p]);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a run killed by ctest still shows what it printed */
    int turn = argc > 1 && !strcmp(argv[1], "turn"), ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no usable GPU\n");
        return 77;
    }
    const size_t nthreads = (size_t)BLOCKS * THREADS, nops = nthreads * ITERS;
    /* queues: SQ, doorbell record, doorbell, CQ on their own lines; scratch: where old values land */
    size_t qbytes = (size_t)RING * 64 + 192;
    char *qh = NULL, *qd = NULL;
    uint64_t *sh = NULL, *sd = NULL;
    char *ctr = NULL;
    uint64_t *olds = NULL;
    unsigned *errors = NULL;
    if (!cuda_ok(cudaHostAlloc((void **)&qh, qbytes, cudaHostAllocMapped), "cudaHostAlloc queues") ||
        !cuda_ok(cudaHostGetDevicePointer((void **)&qd, qh, 0), "queue device pointer") ||
        !cuda_ok(cudaHostAlloc((void **)&sh, RING * 8, cudaHostAllocMapped), "cudaHostAlloc scratch") ||
        !cuda_ok(cudaHostGetDevicePointer((void **)&sd, sh, 0), "scratch device pointer") ||
        !cuda_ok(cudaMalloc((void **)&ctr, sizeof(dion_gdaki_qp_state_t) + 2 * RING * 8), "cudaMalloc") ||
        !cuda_ok(cudaMemset(ctr, 0, sizeof(dion_gdaki_qp_state_t) + 2 * RING * 8), "cudaMemset") ||
        !cuda_ok(cudaMalloc((void **)&olds, nops * 8), "cudaMalloc olds") ||
        !cuda_ok(cudaMemset(olds, 0xff, nops * 8), "cudaMemset olds") ||
        !cuda_ok(cudaMalloc((void **)&errors, sizeof *errors), "cudaMalloc errors") ||
        !cuda_ok(cudaMemset(errors, 0, sizeof *errors), "cudaMemset errors"))
        return 1;
    memset(qh, 0, qbytes);
    memset(sh, 0, RING * 8);
    size_t off_dbr = (size_t)RING * 64, off_db = off_dbr + 64, off_cq = off_dbr + 128;
    qh[off_cq + 63] = (char)0xF0; /* INVALID */
    nic_t nic;
    memset(&nic, 0, sizeof nic);
    nic.sq = (uint8_t *)qh;
    nic.dbr = (uint32_t *)(qh + off_dbr);
    nic.db = (uint64_t *)(qh + off_db);
    nic.cq = (uint8_t *)(qh + off_cq);

    dion_gdaki_qp_dev_t q;
    memset(&q, 0, sizeof q);
    q.sq = (uint8_t *)qd;
    q.dbrec = (uint32_t *)(qd + off_dbr) + 1;
    q.db = (uint64_t *)(qd + off_db);
    q.cq = (uint8_t *)(qd + off_cq);
    q.scratch = sd;
    q.st = (dion_gdaki_qp_state_t *)ctr;
    q.marks = (uint64_t *)(ctr + sizeof(dion_gdaki_qp_state_t));
    q.pend = q.marks + RING;
    q.scratch_addr = (uint64_t)(uintptr_t)sh; /* the NIC writes old values at host addresses */
    q.scratch_lkey = 0x1001;
    q.qpn = QPN;
    q.wq_mask = RING - 1;
    q.flags = DION_GDAKI_QP_COLLAPSED | DION_GDAKI_QP_HOSTMEM | DION_GDAKI_QP_UP;

    pthread_t th;
    if (pthread_create(&th, NULL, nic_main, &nic) != 0) {
        fprintf(stderr, "FAIL: cannot start the NIC thread\n");
        return 1;
    }
    if (turn) printf("mode turn: the publication of before issue 9's fix (leaders wait for their turn)\n");
    cudaStream_t side = NULL, run = NULL;
    char *snap = NULL; /* pinned: the copy runs beside the kernel */
    uint64_t *diag = NULL, *diag_h = NULL;
    if (!cuda_ok(cudaHostAlloc((void **)&snap, sizeof(dion_gdaki_qp_state_t) + 2 * RING * 8, 0),
                 "snapshot") ||
        !cuda_ok(cudaHostAlloc((void **)&diag_h, 2 * nthreads * 8, 0), "phases") ||
        !cuda_ok(cudaMalloc((void **)&diag, 2 * nthreads * 8), "cudaMalloc phases") ||
        !cuda_ok(cudaMemset(diag, 0, 2 * nthreads * 8), "cudaMemset phases") ||
        !cuda_ok(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "side stream") ||
        !cuda_ok(cudaStreamCreateWithFlags(&run, cudaStreamNonBlocking), "kernel stream"))
        return 1;
    /* the memsets above ran on the legacy stream, which a non-blocking stream does not wait for */
    if (!cuda_ok(cudaDeviceSynchronize(), "setup")) return 1;
    post_kernel<<<BLOCKS, THREADS, 0, run>>>(q, olds, errors, 10000000000ull, turn, diag);
    cuda_ok(cudaGetLastError(), "launch");
    /* bounded wait: a hang is reported (and the process exits) instead of blocking in a synchronize; when
     * the NIC gets nothing new for 2 s (the posting timeout is 10 s), or the kernel is still running at the
     * limit, the QP's state is reported once */
    time_t t0 = time(NULL), moved = t0;
    uint64_t last_exec = 0;
    int reported = 0;
    cudaError_t qe;
    while ((qe = cudaStreamQuery(run)) == cudaErrorNotReady && time(NULL) - t0 < LIMIT_S) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        uint64_t ex = __atomic_load_n(&nic.executed, __ATOMIC_RELAXED);
        if (ex != last_exec) last_exec = ex, moved = time(NULL);
        if (!reported && time(NULL) - moved >= 2) {
            reported = 1;
            stall_report(ctr, snap, diag, diag_h, &nic, side);
        }
    }
    if (qe == cudaErrorNotReady) {
        if (!reported) stall_report(ctr, snap, diag, diag_h, &nic, side);
        fprintf(stderr,
                "FAIL: the kernel did not end within %d s (NIC executed %llu WQEs, wrote %llu CQEs%s%s): "
                "posting stalled or crawled (stall: lines above)\n",
                LIMIT_S, (unsigned long long)__atomic_load_n(&nic.executed, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&nic.cqes, __ATOMIC_RELAXED), nic.error[0] ? "; " : "",
                nic.error);
        fflush(stderr);
        _exit(1);
    }
    cuda_ok(qe, "kernel");
    __atomic_store_n(&nic.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    CHECK(!nic.error[0], "the NIC thread found a broken invariant: %s", nic.error);
    unsigned nerr = 0;
    cuda_ok(cudaMemcpy(&nerr, errors, sizeof nerr, cudaMemcpyDeviceToHost), "copy errors");
    CHECK(nerr == 0, "%u threads got an error status from post, wait or quiet", nerr);
    CHECK(nic.word == nops, "the word holds %llu after %zu fetch-adds of 1", (unsigned long long)nic.word,
          nops);
    uint64_t *h = (uint64_t *)malloc(nops * 8);
    if (h && cuda_ok(cudaMemcpy(h, olds, nops * 8, cudaMemcpyDeviceToHost), "copy olds")) {
        qsort(h, nops, 8, cmp_u64);
        size_t bad = 0;
        for (size_t i = 0; i < nops; i++)
            if (h[i] != i && bad++ < 5)
                fprintf(stderr, "  sorted old value %zu is %llu\n", i, (unsigned long long)h[i]);
        CHECK(bad == 0, "%zu of %zu old values are not 0 .. %zu - 1 each once (lost or read twice)", bad,
              nops, nops);
    }
    free(h);
    printf("%s: gdaki_post_gpu: %zu threads x %u fetch-adds (with unsignaled NOPs) on a ring of %u WQEBBs, "
           "NIC executed %llu WQEs and wrote %llu CQEs\n",
           failures ? "FAIL" : "PASS", nthreads, ITERS, RING, (unsigned long long)nic.executed,
           (unsigned long long)nic.cqes);
    return failures ? 1 : 0;
}
