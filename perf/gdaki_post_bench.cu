/* The device-side cost of posting (issue 9): how many work requests per second GPU threads post through the
 * gdaki device half (device/gdaki.cuh) into an mlx5 send queue, next to how many commands per second they
 * post into the proxy's command ring (device/proxy.cuh), in one program run, one CSV.
 *
 * No NIC and no network. Each block has one warp of 32 lanes that post together (one QP, or one proxy ring,
 * per block: nothing is shared between blocks), from one block ("1warp") and from one block per SM ("allsm").
 * Each lane posts --per 8-byte work requests per launch, then lane 0 waits for all of them (gdaki quiet /
 * proxy quiet), so a launch's time covers posting and consumption.
 *  gdaki: RDMA WRITE with 8 bytes inline (one WQEBB) and plain RDMA WRITE (one WQEBB, a data segment). The
 *         QP's SQ, doorbell record, doorbell page and collapsed CQ are pinned host memory mapped into the GPU
 *         (the softnic model's layout); its counters are GPU memory (the gdaki backend's). A *model consumer*
 *         plays the NIC: CPU threads that watch each QP's doorbell, check it against the doorbell record,
 *         check every WQE cheaply (index, QPN, opcode, DS, flags, the work request's id; --check full also
 *         parses it with the softnic model's reader) and write one collapsed CQE per doorbell for the latest
 *         WQE that asked for one, which moves the completion watermark and frees slots. It executes nothing.
 *  proxy: the proxy's own rings and proxy threads (transports/proxy/), with an execute callback that checks
 *         every command the same way and completes it at once.
 * Both consumers run on --consumers threads (DION_PROXY_THREADS is set to the same; on a GPU both are pinned
 * to its NUMA node). Every rate is printed only after the consumer saw exactly the work requests posted:
 * each lane's ids once each and in its order, nothing else (a count per lane), the device counters agreeing
 * with the consumer, no launch or post error. A line says when a warp's work requests did not land in
 * (iteration, lane) order (its lanes split into several reservations): allowed, but it costs atomics.
 * --cpu runs the same kernel bodies on CPU threads (dion_cpu_launch, host memory): for CI.
 *   gdaki_post_bench [--tests inline,write,proxy] [--scopes 1warp,allsm] [--per N] [--reps N] [--blocks N]
 *                    [--consumers N] [--check cheap|full] [--cpu] [--csv FILE] [--label L]
 *                    [--inject skip|dup|badid]   (a broken work request that the checks must catch)
 *                    [--inject stall] [--limit S] (the consumer stops serving QP 0 in the last launch: the
 *                    watchdog must end the run after S seconds, default 60, naming the QP and its counters)
 * Rows: impl dion-gdaki-post (tests post_write_inline_*, post_write_*) and dion-proxy-post (post_cmd_*),
 * group warp, bytes 8, metrics Mposts_median / Mposts_best (posts per second over all blocks, 1e6), blocks,
 * and entries_verified (work requests the consumer checked in that row's launches, warm-up included). */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_common.h"
#include "dion/device/gdaki.cuh"
#include "dion/device/proxy.cuh"
#include "dion/dion.h"
#include "transports/proxy/proxy.h"
extern "C" {
#include "transports/gdaki/qp_mem.h"
#include "transports/gdaki/softnic/wqe_check.h"
}

#define LANES      32u
#define TIMEOUT_NS (10ull * 1000000000ull)
/* what the work requests name: never dereferenced, only checked by the consumers */
#define RBASE 0x7f0000000000ull
#define LBASE 0x100000000ull
#define RKEY  0x1234u
#define LKEY  0x5678u
#define QPN0  0x100u

enum { K_INLINE = 0, K_WRITE, K_PROXY };
enum { INJ_NONE = 0, INJ_SKIP, INJ_DUP, INJ_BADID, INJ_STALL };

typedef struct {
    const dion_gdaki_qp_dev_t *qps;     /* [blocks] */
    const dion_proxy_ring_dev_t *rings; /* [blocks] */
    uint32_t kind, per;
    uint64_t base;   /* id of lane 0's first work request in this launch */
    uint32_t inject; /* INJ_*: block 0's lane 7 breaks its second work request (checks the checkers) */
    uint64_t *errs;  /* [0]: failed posts or quiets, [1]: the first failure's status */
} post_args_t;

/* How many times lane's i-th work request is posted (--inject: block 0's lane 7, i = 1, in the last launch),
 * and the id it carries. */
static __host__ __device__ uint32_t post_times(const post_args_t *a, uint32_t b, uint32_t lane, uint32_t i,
                                               uint64_t *id)
{
    *id = a->base + (uint64_t)i * LANES + lane;
    if (a->inject == INJ_NONE || a->inject == INJ_STALL || b != 0 || lane != 7 || i != 1) return 1;
    if (a->inject == INJ_BADID) *id += LANES;
    return a->inject == INJ_SKIP ? 0 : a->inject == INJ_DUP ? 2 : 1;
}

/* One block: lane l posts ids base + i*32 + l for i < per, then lane 0 waits for all of them. */
static __host__ __device__ void post_body(const post_args_t *a)
{
    uint32_t b = dion__block_index(), lane = dion__block_thread();
    dion_status_t s = DION_SUCCESS;
    if (a->kind == K_PROXY) {
        const dion_proxy_ring_dev_t *r = &a->rings[b];
        for (uint32_t i = 0; i < a->per && s == DION_SUCCESS; i++) {
            uint64_t id;
            for (uint32_t k = post_times(a, b, lane, i, &id); k > 0 && s == DION_SUCCESS; k--) {
                dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 1, 0, id * 8, 0, id * 8, 8);
                s = dion__proxy_post_warp(r, &c, TIMEOUT_NS, NULL, NULL);
            }
        }
        dion__group_sync(DION__WARP);
        if (lane == 0 && s == DION_SUCCESS) s = dion__proxy_quiet(r, TIMEOUT_NS, NULL);
    } else {
        const dion_gdaki_qp_dev_t *q = &a->qps[b];
        dion__gdaki_wr_t w;
        memset(&w, 0, sizeof w);
        w.kind = a->kind == K_INLINE ? DION__GDAKI_WR_WRITE_INLINE : DION__GDAKI_WR_WRITE;
        w.len = 8;
        w.rkey = RKEY;
        w.lkey = LKEY;
        uint64_t payload = 0;
        w.inl = &payload;
        for (uint32_t i = 0; i < a->per && s == DION_SUCCESS; i++) {
            uint64_t id;
            for (uint32_t k = post_times(a, b, lane, i, &id); k > 0 && s == DION_SUCCESS; k--) {
                w.raddr = RBASE + id * 8;
                w.laddr = LBASE + id * 8;
                payload = id;
                s = dion__gdaki_post(q, &w, 1, NULL, TIMEOUT_NS, NULL);
            }
        }
        dion__group_sync(DION__WARP);
        uint64_t seen = 0;
        if (lane == 0 && s == DION_SUCCESS) s = dion__gdaki_quiet(q, NULL, TIMEOUT_NS, &seen);
    }
    if (s != DION_SUCCESS) {
        dion__atom_add(&a->errs[0], 1, DION_SCOPE_SYS);
        dion__atom_cas(&a->errs[1], 0, (uint64_t)s, DION_SCOPE_SYS);
    }
}

__global__ void post_kernel(post_args_t a)
{
    post_body(&a);
}

static void post_cpu_entry(void *p)
{
    post_body((const post_args_t *)p);
}

/* ---- options ---- */

typedef struct {
    const char *tests = "inline,write,proxy", *scopes = "1warp,allsm", *check = "cheap";
    uint32_t inject = INJ_NONE;
    double limit_s = 60; /* a launch running longer is reported as hung and ends the program */
    int per = -1, reps = -1, blocks = -1, consumers = 1, cpu = 0;
    bench_opts_t row; /* csv and label for bench_row */
} opts_t;

static opts_t O;

static void usage(const char *argv0)
{
    fprintf(
        stderr,
        "usage: %s [--tests inline,write,proxy] [--scopes 1warp,allsm] [--per N] [--reps N] [--blocks N]\n"
        "          [--consumers N] [--check cheap|full] [--cpu] [--csv FILE] [--label L]\n"
        "          [--inject skip|dup|badid]   (block 0's lane 7 skips, repeats or mislabels its second "
        "work\n"
        "                                       request in the last launch: the run must fail)\n"
        "          [--inject stall] [--limit S]  (the consumer leaves QP 0 alone in the last launch: the\n"
        "                                       watchdog must end the run after S s, default 60)\n",
        argv0);
    exit(2);
}

static void parse(int argc, char **argv)
{
    memset(&O.row, 0, sizeof O.row);
    O.row.label = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--cpu")) {
            O.cpu = 1;
            continue;
        }
        if (!v) usage(argv[0]);
        i++;
        if (!strcmp(a, "--tests"))
            O.tests = v;
        else if (!strcmp(a, "--scopes"))
            O.scopes = v;
        else if (!strcmp(a, "--check") && (!strcmp(v, "cheap") || !strcmp(v, "full")))
            O.check = v;
        else if (!strcmp(a, "--per"))
            O.per = atoi(v);
        else if (!strcmp(a, "--reps"))
            O.reps = atoi(v);
        else if (!strcmp(a, "--blocks"))
            O.blocks = atoi(v);
        else if (!strcmp(a, "--consumers"))
            O.consumers = atoi(v);
        else if (!strcmp(a, "--inject") && (!strcmp(v, "skip") || !strcmp(v, "dup") || !strcmp(v, "badid")))
            O.inject = !strcmp(v, "skip") ? INJ_SKIP : !strcmp(v, "dup") ? INJ_DUP : INJ_BADID;
        else if (!strcmp(a, "--inject") && !strcmp(v, "stall"))
            O.inject = INJ_STALL;
        else if (!strcmp(a, "--limit"))
            O.limit_s = atof(v);
        else if (!strcmp(a, "--csv"))
            O.row.csv = v;
        else if (!strcmp(a, "--label"))
            O.row.label = v;
        else
            usage(argv[0]);
    }
    if (O.per < 0) O.per = O.cpu ? 16 : 4096;
    if (O.reps < 0) O.reps = O.cpu ? 3 : 5;
    if (O.per < 1 || O.reps < 2 || O.consumers < 1 || O.consumers > 64 || !(O.limit_s > 0)) {
        fprintf(stderr,
                "--per >= 1, --reps >= 2 (the first launch warms up), --consumers in [1, 64], --limit > 0\n");
        exit(2);
    }
}

/* ---- memory: GPU runs map host memory into the GPU; CPU runs use it directly ---- */

static void *host_mapped(size_t n, void **dev)
{
    void *h = NULL;
    if (O.cpu) {
        h = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
        if (!h) exit(1);
        *dev = h;
    } else {
        BENCH_CHECK_CUDA(cudaHostAlloc(&h, n, cudaHostAllocMapped | cudaHostAllocPortable));
        BENCH_CHECK_CUDA(cudaHostGetDevicePointer(dev, h, 0));
    }
    memset(h, 0, n);
    return h;
}

static void host_free(void *h)
{
    if (O.cpu)
        free(h);
    else
        cudaFreeHost(h);
}

/* Device memory (GPU) or host memory (CPU runs), zeroed. */
static void *dev_alloc(size_t n)
{
    void *p = NULL;
    if (O.cpu) {
        p = aligned_alloc(64, (n + 63) & ~(size_t)63);
        if (!p) exit(1);
        memset(p, 0, n);
    } else {
        BENCH_CHECK_CUDA(cudaMalloc(&p, n));
        BENCH_CHECK_CUDA(cudaMemset(p, 0, n));
    }
    return p;
}

static void dev_free(void *p)
{
    if (O.cpu)
        free(p);
    else
        cudaFree(p);
}

static void to_dev(void *dst, const void *src, size_t n)
{
    if (O.cpu)
        memcpy(dst, src, n);
    else
        BENCH_CHECK_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
}

static void to_host(void *dst, const void *src, size_t n)
{
    if (O.cpu)
        memcpy(dst, src, n);
    else
        BENCH_CHECK_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
}

/* ---- what both consumers check: ids in order ---- */

/* Lane l's k-th work request carries id k*32 + l (ids continue over the launches): each lane's arrive once
 * each, in its order. On the GPU the lanes of a converged warp also reserve in lane order, so the n-th one
 * seen carries id n; where not (the warp split into groups), `unordered` counts it: not an error. */
typedef struct {
    uint64_t seen;            /* work requests checked */
    uint64_t lane_cnt[LANES]; /* per lane */
    uint64_t unordered;       /* seen out of (iteration, lane) order */
    int failed;
    char why[320];
} order_t;

static int order_take(order_t *o, uint64_t id)
{
    uint32_t lane = (uint32_t)(id % LANES);
    if (id != o->lane_cnt[lane] * LANES + lane) {
        snprintf(o->why, sizeof o->why,
                 "work request %llu carries id %llu: lane %u's next is %llu (lost, repeated or reordered)",
                 (unsigned long long)o->seen, (unsigned long long)id, lane,
                 (unsigned long long)(o->lane_cnt[lane] * LANES + lane));
        return 1;
    }
    o->unordered += id != o->seen;
    o->lane_cnt[lane]++;
    o->seen++;
    return 0;
}

/* After the launches: exactly `per_lane` from every lane, nothing else. 0 when so; else says why. */
static int order_final(const order_t *o, uint64_t per_lane, char *why, size_t cap)
{
    if (o->failed) {
        snprintf(why, cap, "%s", o->why);
        return 1;
    }
    for (uint32_t l = 0; l < LANES; l++)
        if (o->lane_cnt[l] != per_lane) {
            snprintf(why, cap, "lane %u: the consumer saw %llu work requests, expected %llu", l,
                     (unsigned long long)o->lane_cnt[l], (unsigned long long)per_lane);
            return 1;
        }
    return 0;
}

/* ---- the gdaki model consumer ---- */

typedef struct {
    /* host views of the queue memory (the softnic model's layout: SQ, record, doorbell, CQ) */
    uint8_t *block, *sq, *cq;
    uint32_t *dbr; /* the record's SQ word */
    uint64_t *db;
    uint32_t qpn, nwqebb;
    uint64_t last_db, pi, pos, cqes, nops, doorbells;
    order_t ord;
} mqp_t;

typedef struct {
    mqp_t *qps;
    uint32_t nqps, nthreads, index, kind;
    int full, stop;
} mctl_t;

static uint32_t ld_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

static uint64_t ld_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* The CQE for WQE idx in entry 0 (collapsed): bytes 0..59 first, then the tail with one release store, as
 * the softnic model does, so a poller never reads a counter without its opcode. */
static void model_cqe(mqp_t *q, const uint8_t *cqe)
{
    memcpy(q->cq, cqe, 60);
    uint32_t tail;
    memcpy(&tail, cqe + 60, 4);
    __atomic_store_n((uint32_t *)(q->cq + 60), tail, __ATOMIC_RELEASE);
    q->cqes++;
}

/* Fails the QP: an error CQE (local QP operation error) makes the posting threads' waits return at once. */
static void model_fail(mqp_t *q, uint16_t idx, uint8_t opcode)
{
    uint8_t cqe[64];
    dion__mlx5_cqe_write_err(cqe, idx, opcode, q->qpn, DION__MLX5_SYND_LOCAL_QP_OP, 0,
                             (uint32_t)q->cqes & 1u);
    q->ord.failed = 1;
    model_cqe(q, cqe);
}

/* Checks the WQE at q->pos (before pi); returns its WQEBBs, 0 when it broke a rule (q->ord.why says which).
 * *signaled: it asked for a CQE. */
static uint32_t model_wqe(mqp_t *q, uint32_t kind, int full, int *signaled)
{
    const uint8_t *w = q->sq + (size_t)(q->pos & (q->nwqebb - 1)) * 64;
    char *why = q->ord.why;
    size_t cap = sizeof q->ord.why;
    if (full) {
        dion__snic_wqe_t p;
        if (dion__snic_parse_wqe(q->sq, q->nwqebb, q->pos, q->pi, q->qpn, &p, why, cap)) return 0;
    }
    uint32_t oio = ld_be32(w), qd = ld_be32(w + 4);
    uint32_t opcode = oio & 0xffu, opmod = oio >> 24, ds = qd & 0xffu;
    uint16_t idx = (uint16_t)(oio >> 8);
    uint8_t fm = w[11];
    if (idx != (uint16_t)q->pos || (qd >> 8) != q->qpn || opmod != 0) {
        snprintf(why, cap,
                 "WQEBB %llu holds index 0x%04x, QPN 0x%06x, opmod 0x%02x (expected 0x%04x, 0x%06x, 0)",
                 (unsigned long long)q->pos, idx, qd >> 8, opmod, (unsigned)(uint16_t)q->pos, q->qpn);
        return 0;
    }
    *signaled = (fm & DION__MLX5_CTRL_CQ_UPDATE) != 0;
    if (opcode == DION__MLX5_OP_NOP) { /* quiet's: always signaled */
        if (ds != 1 || fm != DION__MLX5_CTRL_CQ_UPDATE) {
            snprintf(why, cap, "NOP at index 0x%04x with DS %u and fm_ce_se 0x%02x (expected 1 and 0x08)",
                     idx, ds, fm);
            return 0;
        }
        q->nops++;
        return 1;
    }
    /* which writes ask for a CQE is device/gdaki.cuh's choice; no fence, nothing solicited here */
    uint64_t raddr = ld_be64(w + 16), id = (raddr - RBASE) / 8;
    uint32_t rkey = ld_be32(w + 24), bc = ld_be32(w + 32);
    int ok = opcode == DION__MLX5_OP_RDMA_WRITE && ds == 3 && (fm & ~DION__MLX5_CTRL_CQ_UPDATE) == 0 &&
             raddr >= RBASE && raddr % 8 == 0 && rkey == RKEY;
    if (ok && kind == K_INLINE) {
        uint64_t v;
        memcpy(&v, w + 36, 8);
        ok = bc == (8u | DION__MLX5_INLINE_FLAG) && v == id;
    } else if (ok) {
        ok = bc == 8 && ld_be32(w + 36) == LKEY && ld_be64(w + 40) == LBASE + id * 8;
    }
    if (!ok) {
        snprintf(why, cap,
                 "WQE index 0x%04x: opcode 0x%02x DS %u fm_ce_se 0x%02x (expected 0x08, 3, 0 or 0x08), raddr "
                 "0x%llx rkey 0x%x, byte_count 0x%08x: not the %s WRITE of id %llu",
                 idx, opcode, ds, fm, (unsigned long long)raddr, rkey, bc,
                 kind == K_INLINE ? "8-byte inline" : "8-byte", (unsigned long long)id);
        return 0;
    }
    return order_take(&q->ord, id) ? 0 : 1;
}

/* One pass over one QP: a new doorbell -> check it, check every WQE up to it, one CQE for the latest
 * signaled one. Returns 1 when there was work. */
static int model_pass(mqp_t *q, uint32_t kind, int full)
{
    if (q->ord.failed) return 0;
    uint64_t db = __atomic_load_n(q->db, __ATOMIC_ACQUIRE);
    if (db == q->last_db) return 0;
    uint32_t rec = __atomic_load_n(q->dbr, __ATOMIC_ACQUIRE);
    uint64_t pi = 0;
    if (dion__snic_check_doorbell(db, rec, q->qpn, q->nwqebb, q->pi, &pi, q->ord.why, sizeof q->ord.why)) {
        model_fail(q, (uint16_t)q->pos, 0);
        return 1;
    }
    q->last_db = db;
    q->pi = pi;
    q->doorbells++;
    uint64_t sig = 0;
    uint8_t sig_op = 0;
    while (q->pos < pi) {
        int signaled = 0;
        uint8_t op = q->sq[(size_t)(q->pos & (q->nwqebb - 1)) * 64 + 3];
        uint32_t n = model_wqe(q, kind, full, &signaled);
        if (n == 0 || q->pos + n > pi) {
            if (n) snprintf(q->ord.why, sizeof q->ord.why, "a WQE runs past the doorbell's producer index");
            model_fail(q, (uint16_t)q->pos, op);
            return 1;
        }
        if (signaled) sig = q->pos + 1, sig_op = op;
        q->pos += n;
    }
    if (sig) {
        uint8_t cqe[64];
        dion__mlx5_cqe_write_req(cqe, (uint16_t)(sig - 1), sig_op, q->qpn, 0, (uint32_t)q->cqes & 1u);
        model_cqe(q, cqe);
    }
    return 1;
}

static int stall_qp0; /* --inject stall: set before the last launch; the consumer then leaves QP 0 alone */

static cpu_set_t gpu_cpus; /* the GPU's NUMA node's CPUs, where the proxy threads run too */
static int gpu_ncpus;

static void *model_main(void *p)
{
    mctl_t *m = (mctl_t *)p;
    if (gpu_ncpus > 0) pthread_setaffinity_np(pthread_self(), sizeof gpu_cpus, &gpu_cpus);
    uint32_t idle = 0;
    while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
        int busy = 0;
        for (uint32_t i = m->index; i < m->nqps; i += m->nthreads)
            if (i || !__atomic_load_n(&stall_qp0, __ATOMIC_RELAXED))
                busy |= model_pass(&m->qps[i], m->kind, m->full);
        idle = busy ? 0 : idle + 1;
        if (idle > 256) sched_yield(); /* CPU runs share few cores with the posting threads */
    }
    return NULL;
}

/* ---- the proxy's checking consumer ---- */

typedef struct {
    order_t *ord; /* [rings], by the ring's context index */
    uint64_t *quiets;
} pchk_t;

static dion_status_t check_exec(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                uint32_t n, uint32_t *taken)
{
    (void)thread;
    pchk_t *pc = (pchk_t *)arg;
    order_t *o = &pc->ord[r->ctx];
    for (uint32_t k = 0; k < n; k++) {
        const dion_proxy_cmd_t *c = &cmds[k];
        if (c->op == DION_PROXY_OP_QUIET && c->version == DION_PROXY_PROTO_VERSION) {
            pc->quiets[r->ctx]++;
            continue;
        }
        int ok = c->op == DION_PROXY_OP_PUT && c->version == DION_PROXY_PROTO_VERSION && c->peer == 1 &&
                 c->u.rma.bytes == 8 && c->u.rma.dst_off % 8 == 0 && c->u.rma.src_off == c->u.rma.dst_off;
        if (!ok)
            snprintf(o->why, sizeof o->why,
                     "ring position %llu holds op %u (version %u, peer %d, %llu bytes)",
                     (unsigned long long)dion__proxy_cmd_pos(c), c->op, c->version, c->peer,
                     (unsigned long long)c->u.rma.bytes);
        if (!ok || order_take(o, c->u.rma.dst_off / 8)) {
            o->failed = 1;
            *taken = k;
            return DION_ERR_INTERNAL; /* fails the ring: the producers' waits return at once */
        }
    }
    dion__proxy_ring_complete(r, dion__proxy_cmd_pos(&cmds[n - 1]) + 1);
    *taken = n;
    return DION_SUCCESS;
}

/* ---- the watchdog: no launch may hang the program ----
 * Every device wait ends after TIMEOUT_NS with an error, so a launch that runs --limit seconds has a wait
 * that does not end (or a consumer that stopped). A watchdog thread then prints a FAIL line with what the
 * row's report hook says is stuck (each QP's counters against its consumer; each ring's progress) and ends
 * the program: a hung kernel cannot be taken back. */

typedef void (*stall_fn)(void *ctx);

static struct {
    double deadline; /* host_ns at which the running launch counts as hung; 0: none running */
    const char *what;
    int rep;
    stall_fn report;
    void *ctx;
} W;
static pthread_mutex_t W_mu = PTHREAD_MUTEX_INITIALIZER;

static double host_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&W_mu);
        int fire = W.deadline > 0 && host_ns() > W.deadline;
        pthread_mutex_unlock(&W_mu);
        if (!fire) continue;
        fprintf(stderr,
                "FAIL %s: launch %d did not end within %.0f s (every device wait times out after %llu s)\n",
                W.what, W.rep, O.limit_s, (unsigned long long)(TIMEOUT_NS / 1000000000ull));
        if (W.report) W.report(W.ctx);
        fflush(stdout);
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

static void watchdog_arm(const char *what, int rep, stall_fn report, void *ctx)
{
    pthread_mutex_lock(&W_mu);
    W.what = what;
    W.rep = rep;
    W.report = report;
    W.ctx = ctx;
    W.deadline = host_ns() + O.limit_s * 1e9;
    pthread_mutex_unlock(&W_mu);
}

static void watchdog_disarm(void)
{
    pthread_mutex_lock(&W_mu);
    W.deadline = 0;
    pthread_mutex_unlock(&W_mu);
}

/* ---- one row: create the queues, run reps launches, verify, print ---- */

static uint64_t *errs_dev; /* post_args_t.errs: device memory (host memory in CPU runs) */
/* GPU runs: the kernels' stream, and a second one on which a stall report copies counters beside them (both
 * non-blocking: the legacy stream would wait for the kernel) */
static cudaStream_t run_stream, side_stream;

static void zero_errs(void)
{
    uint64_t z[2] = {0, 0};
    to_dev(errs_dev, z, sizeof z);
}

/* Runs one launch of blocks x 32 and returns its milliseconds; a launch error ends the program. */
static double launch(const post_args_t *a, uint32_t blocks)
{
    if (O.cpu) {
        double t0 = host_ns();
        if (dion_cpu_launch(blocks, LANES, post_cpu_entry, (void *)a) != DION_SUCCESS) {
            fprintf(stderr, "FAIL dion_cpu_launch: %s\n", dion_last_error());
            exit(1);
        }
        return (host_ns() - t0) / 1e6;
    }
    /* the setup's copies and memsets ran on the legacy stream, which run_stream does not wait for */
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    BENCH_CHECK_CUDA(cudaEventCreate(&e0));
    BENCH_CHECK_CUDA(cudaEventCreate(&e1));
    BENCH_CHECK_CUDA(cudaEventRecord(e0, run_stream));
    post_kernel<<<blocks, LANES, 0, run_stream>>>(*a);
    BENCH_CHECK_LAUNCH("post_kernel");
    BENCH_CHECK_CUDA(cudaEventRecord(e1, run_stream));
    BENCH_CHECK_CUDA(cudaEventSynchronize(e1)); /* bounded by the watchdog */
    BENCH_CHECK_CUDA(cudaGetLastError());
    float ms = 0;
    BENCH_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms;
}

/* Launches reps times (ids continue); fills ms (sorted, the first launch left out). 0 when every launch
 * posted and waited without an error. */
static int run_launches(post_args_t *a, uint32_t blocks, std::vector<double> &ms, const char *what,
                        stall_fn report, void *ctx)
{
    ms.clear();
    for (int rep = 0; rep < O.reps; rep++) {
        a->base = (uint64_t)rep * O.per * LANES;
        a->inject = rep == O.reps - 1 ? O.inject : INJ_NONE;
        __atomic_store_n(&stall_qp0, a->inject == INJ_STALL, __ATOMIC_RELAXED);
        watchdog_arm(what, rep, report, ctx);
        double t = launch(a, blocks);
        watchdog_disarm();
        uint64_t e[2];
        to_host(e, errs_dev, sizeof e);
        uint64_t e0 = e[0], e1 = e[1];
        if (e0) {
            fprintf(stderr, "FAIL %s: launch %d: %llu posts or quiets failed, the first with %s\n", what, rep,
                    (unsigned long long)e0, dion_status_string((dion_status_t)e1));
            if (report) report(ctx);
            return 1;
        }
        if (rep) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return 0;
}

static void print_rows(const char *impl, const char *test, uint32_t blocks, const std::vector<double> &ms,
                       uint64_t verified, uint64_t unordered)
{
    if (unordered && !O.cpu) /* CPU threads always reserve one by one */
        printf("# %s: %llu work requests landed out of (iteration, lane) order: the warp's lanes split into "
               "several groups (each lane's own order held)\n",
               test, (unsigned long long)unordered);
    double posts = (double)blocks * LANES * O.per;
    bench_row(&O.row, impl, test, "warp", 8, "Mposts_median", posts / ms[ms.size() / 2] / 1e3);
    bench_row(&O.row, impl, test, "warp", 8, "Mposts_best", posts / ms[0] / 1e3);
    bench_row(&O.row, impl, test, "warp", 8, "blocks", blocks);
    bench_row(&O.row, impl, test, "warp", 8, "entries_verified", (double)verified);
}

/* What a stalled or failed gdaki row reports: each QP's device counters (copied beside the running kernel on
 * the side stream, bounded) against what its consumer took, for the QPs that are not done. */
typedef struct {
    const char *test;
    mqp_t *m;
    uint32_t blocks;
    const char *states;          /* the counter block as device code addresses it */
    dion_gdaki_qp_state_t *snap; /* [blocks], pinned on a GPU */
} gstall_t;

static void gdaki_stall_report(void *ctx)
{
    gstall_t *g = (gstall_t *)ctx;
    size_t n = sizeof(dion_gdaki_qp_state_t) * g->blocks;
    int have = 0;
    if (O.cpu) {
        memcpy(g->snap, g->states, n); /* racy reads of live counters: diagnostics only */
        have = 1;
    } else if (cudaMemcpyAsync(g->snap, g->states, n, cudaMemcpyDeviceToHost, side_stream) == cudaSuccess) {
        double t0 = host_ns();
        cudaError_t e;
        while ((e = cudaStreamQuery(side_stream)) == cudaErrorNotReady && host_ns() - t0 < 3e9) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        have = e == cudaSuccess;
    }
    if (!have) fprintf(stderr, "  %s: the copy of the QPs' counters did not finish\n", g->test);
    uint32_t shown = 0, stuck = 0;
    for (uint32_t b = 0; b < g->blocks; b++) {
        mqp_t *q = &g->m[b];
        uint64_t pos = __atomic_load_n(&q->pos, __ATOMIC_RELAXED),
                 pi = __atomic_load_n(&q->pi, __ATOMIC_RELAXED);
        const dion_gdaki_qp_state_t *st = &g->snap[b];
        int done = have && !st->err && !q->ord.failed && st->resv_head == pos && st->ready_head == pos &&
                   st->cons_idx == pos;
        if (done) continue;
        stuck++;
        if (shown++ >= 4) continue;
        if (have)
            fprintf(
                stderr,
                "  %s: QP 0x%06x: device resv_head %llu ready_head %llu cons_idx %llu last_wqe %llu last_sig "
                "%llu db_lock %llu poller %llu err %llu (%s); consumer took %llu WQEBBs up to doorbell pi "
                "%llu, %llu "
                "doorbells, %llu CQEs%s\n",
                g->test, q->qpn, (unsigned long long)st->resv_head, (unsigned long long)st->ready_head,
                (unsigned long long)st->cons_idx, (unsigned long long)st->last_wqe,
                (unsigned long long)st->last_sig, (unsigned long long)st->db_lock,
                (unsigned long long)st->poller, (unsigned long long)st->err,
                st->err ? dion_status_string((dion_status_t)st->err) : "none", (unsigned long long)pos,
                (unsigned long long)pi, (unsigned long long)__atomic_load_n(&q->doorbells, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&q->cqes, __ATOMIC_RELAXED),
                q->ord.failed ? "; it failed (the FAIL line says why)" : "");
        else
            fprintf(stderr, "  %s: QP 0x%06x: consumer took %llu WQEBBs up to doorbell pi %llu\n", g->test,
                    q->qpn, (unsigned long long)pos, (unsigned long long)pi);
    }
    fprintf(stderr, "  %s: %u of %u QPs not done%s\n", g->test, stuck, g->blocks,
            shown > 4 ? " (4 shown)" : "");
}

static int run_gdaki(uint32_t kind, uint32_t blocks, const char *test)
{
    const uint32_t nw = 1024; /* the gdaki backend's SQ size */
    std::vector<mqp_t> m(blocks);
    std::vector<dion_gdaki_qp_dev_t> d(blocks);
    size_t qbytes = (size_t)nw * 64 + 192;
    /* counters, marks, pend words and scratch laid out as the backend lays them (transports/gdaki/qp_mem.h)
     */
    char *states = (char *)dev_alloc(dion__gdaki_states_bytes(blocks, nw));
    dion_gdaki_qp_state_t *st = (dion_gdaki_qp_state_t *)states; /* the nq states come first */
    void *sd = NULL;
    char *scratch_h = (char *)host_mapped(dion__gdaki_scratch_bytes(blocks, nw), &sd);
    for (uint32_t b = 0; b < blocks; b++) {
        void *qd = NULL;
        uint8_t *h = (uint8_t *)host_mapped(qbytes, &qd);
        h[nw * 64 + 128 + 63] = 0xF0; /* CQE op_own: INVALID, owner 0 */
        mqp_t *q = &m[b];
        memset(q, 0, sizeof *q);
        q->block = h;
        q->sq = h;
        q->dbr = (uint32_t *)(h + nw * 64) + 1;
        q->db = (uint64_t *)(h + nw * 64 + 64);
        q->cq = h + nw * 64 + 128;
        q->qpn = QPN0 + b;
        q->nwqebb = nw;
        dion_gdaki_qp_dev_t *v = &d[b];
        memset(v, 0, sizeof *v);
        uint8_t *dq = (uint8_t *)qd;
        v->sq = dq;
        v->dbrec = (uint32_t *)(dq + nw * 64) + 1;
        v->db = (uint64_t *)(dq + nw * 64 + 64);
        v->cq = dq + nw * 64 + 128;
        /* the consumer (a CPU thread) would write fetched values at host addresses */
        dion__gdaki_qp_bind(v, states, (char *)sd, (uint64_t)(uintptr_t)scratch_h, LKEY, blocks, b, nw);
        v->qpn = q->qpn;
        v->wq_mask = nw - 1;
        v->log_ncqe = 0;
        v->flags = DION_GDAKI_QP_COLLAPSED | DION_GDAKI_QP_HOSTMEM | DION_GDAKI_QP_UP;
        v->max_inline = DION__GDAKI_INLINE_MAX;
        v->peer = 1;
    }
    dion_gdaki_qp_dev_t *dd = (dion_gdaki_qp_dev_t *)dev_alloc(sizeof *dd * blocks);
    to_dev(dd, d.data(), sizeof *dd * blocks);

    uint32_t nt = std::min((uint32_t)O.consumers, blocks);
    std::vector<mctl_t> ctl(nt);
    std::vector<pthread_t> tid(nt);
    for (uint32_t t = 0; t < nt; t++) {
        ctl[t] = {m.data(), blocks, nt, t, kind, !strcmp(O.check, "full"), 0};
        pthread_create(&tid[t], NULL, model_main, &ctl[t]);
    }
    zero_errs();
    post_args_t a = {dd, NULL, kind, (uint32_t)O.per, 0, INJ_NONE, errs_dev};
    std::vector<double> ms;
    gstall_t gs = {test, m.data(), blocks, states, NULL};
    if (O.cpu)
        gs.snap = (dion_gdaki_qp_state_t *)malloc(sizeof *gs.snap * blocks);
    else
        BENCH_CHECK_CUDA(cudaMallocHost((void **)&gs.snap, sizeof *gs.snap * blocks));
    int rc = run_launches(&a, blocks, ms, test, gdaki_stall_report, &gs);
    for (uint32_t t = 0; t < nt; t++) __atomic_store_n(&ctl[t].stop, 1, __ATOMIC_RELEASE);
    for (uint32_t t = 0; t < nt; t++) pthread_join(tid[t], NULL);

    /* what the consumer saw against what was posted, and the device counters against the consumer */
    std::vector<dion_gdaki_qp_state_t> sh(blocks);
    to_host(sh.data(), st, sizeof *st * blocks);
    uint64_t verified = 0, unordered = 0;
    for (uint32_t b = 0; b < blocks; b++) {
        char why[400];
        mqp_t *q = &m[b];
        if (order_final(&q->ord, (uint64_t)O.reps * O.per, why, sizeof why)) {
            if (q->ord.failed || rc == 0) fprintf(stderr, "FAIL %s: QP 0x%06x: %s\n", test, q->qpn, why);
            rc = 1;
        } else if (q->ord.seen + q->nops != q->pos || sh[b].err || sh[b].resv_head != q->pos ||
                   sh[b].ready_head != q->pos || sh[b].cons_idx != q->pos) {
            fprintf(stderr,
                    "FAIL %s: QP 0x%06x: the consumer took %llu WQEBBs (%llu writes, %llu NOPs); the device "
                    "reserved %llu, published %llu, saw %llu complete, error %llu\n",
                    test, q->qpn, (unsigned long long)q->pos, (unsigned long long)q->ord.seen,
                    (unsigned long long)q->nops, (unsigned long long)sh[b].resv_head,
                    (unsigned long long)sh[b].ready_head, (unsigned long long)sh[b].cons_idx,
                    (unsigned long long)sh[b].err);
            rc = 1;
        }
        verified += q->ord.seen;
        unordered += q->ord.unordered;
    }
    if (rc == 0) print_rows("dion-gdaki-post", test, blocks, ms, verified, unordered);
    for (uint32_t b = 0; b < blocks; b++) host_free(m[b].block);
    if (O.cpu)
        free(gs.snap);
    else
        cudaFreeHost(gs.snap);
    host_free(scratch_h);
    dev_free(dd);
    dev_free(states);
    return rc;
}

/* What a stalled or failed proxy row reports: each ring's progress against its checking consumer. */
typedef struct {
    const char *test;
    std::vector<dion__proxy_ring_t *> *rings;
    std::vector<order_t> *ord;
} pstall_t;

static void proxy_stall_report(void *ctx)
{
    pstall_t *p = (pstall_t *)ctx;
    uint32_t shown = 0;
    for (size_t b = 0; b < p->rings->size() && shown < 4; b++) {
        dion__proxy_ring_t *r = (*p->rings)[b];
        order_t *o = &(*p->ord)[b];
        shown++;
        fprintf(stderr, "  %s: ring %zu: %llu positions complete, %llu commands checked, failed %d%s\n",
                p->test, b, (unsigned long long)__atomic_load_n(&r->completed, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&o->seen, __ATOMIC_RELAXED), r->failed,
                o->failed ? " (the FAIL line says why)" : "");
    }
}

static int run_proxy(uint32_t blocks, const char *test)
{
    std::vector<dion__proxy_ring_t *> rings(blocks);
    std::vector<dion_proxy_ring_dev_t> devs(blocks);
    std::vector<order_t> ord(blocks);
    std::vector<uint64_t> quiets(blocks, 0);
    for (uint32_t b = 0; b < blocks; b++) {
        if (dion__proxy_ring_create(b, 1024, !O.cpu, &rings[b]) != DION_SUCCESS) {
            fprintf(stderr, "FAIL proxy ring: %s\n", dion_last_error());
            exit(1);
        }
        devs[b] = rings[b]->dev;
        memset(&ord[b], 0, sizeof ord[b]);
    }
    dion_proxy_ring_dev_t *dd = (dion_proxy_ring_dev_t *)dev_alloc(sizeof *dd * blocks);
    to_dev(dd, devs.data(), sizeof *dd * blocks);
    pchk_t pc = {ord.data(), quiets.data()};
    dion__proxy_exec_t ex = {check_exec, NULL, &pc};
    dion__proxy_threads_t *th = NULL;
    if (dion__proxy_threads_start(rings.data(), blocks, &ex, O.cpu ? -1 : 0, &th) != DION_SUCCESS) {
        fprintf(stderr, "FAIL proxy threads: %s\n", dion_last_error());
        exit(1);
    }
    zero_errs();
    post_args_t a = {NULL, dd, K_PROXY, (uint32_t)O.per, 0, INJ_NONE, errs_dev};
    std::vector<double> ms;
    pstall_t ps = {test, &rings, &ord};
    int rc = run_launches(&a, blocks, ms, test, proxy_stall_report, &ps);
    dion__proxy_threads_stop(th);
    uint64_t verified = 0, unordered = 0;
    for (uint32_t b = 0; b < blocks; b++) {
        char why[400];
        if (order_final(&ord[b], (uint64_t)O.reps * O.per, why, sizeof why)) {
            if (ord[b].failed || rc == 0) fprintf(stderr, "FAIL %s: ring %u: %s\n", test, b, why);
            rc = 1;
        } else if (quiets[b] != (uint64_t)O.reps || rings[b]->failed ||
                   rings[b]->completed != ord[b].seen + quiets[b]) {
            fprintf(stderr,
                    "FAIL %s: ring %u: %llu quiets for %d launches, %llu positions complete for %llu "
                    "commands, failed %d\n",
                    test, b, (unsigned long long)quiets[b], O.reps, (unsigned long long)rings[b]->completed,
                    (unsigned long long)(ord[b].seen + quiets[b]), rings[b]->failed);
            rc = 1;
        }
        verified += ord[b].seen;
        unordered += ord[b].unordered;
    }
    if (rc == 0) print_rows("dion-proxy-post", test, blocks, ms, verified, unordered);
    for (uint32_t b = 0; b < blocks; b++) dion__proxy_ring_destroy(rings[b]);
    dev_free(dd);
    return rc;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a run killed from outside still shows what it printed */
    parse(argc, argv);
    pthread_t wd;
    if (pthread_create(&wd, NULL, watchdog_main, NULL) != 0) {
        fprintf(stderr, "FAIL: cannot start the watchdog thread\n");
        return 1;
    }
    pthread_detach(wd);
    int nsm = 2;
    if (!O.cpu) {
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
            fprintf(stderr, "gdaki_post_bench needs a GPU (--cpu runs it on CPU threads)\n");
            return 77;
        }
        BENCH_CHECK_CUDA(cudaSetDevice(0));
        BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&run_stream, cudaStreamNonBlocking));
        BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking));
        cudaDeviceProp prop;
        BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
        nsm = prop.multiProcessorCount;
        unsigned long long *sink;
        BENCH_CHECK_CUDA(cudaMalloc(&sink, 64));
        bench_spin<<<nsm, 256>>>(200000000ull, sink); /* clocks up */
        BENCH_CHECK_LAUNCH("bench_spin");
        BENCH_CHECK_CUDA(cudaDeviceSynchronize());
        cudaFree(sink);
        char bus[32] = "";
        if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, 0) == cudaSuccess)
            gpu_ncpus = dion__proxy_numa_cpus("", bus, &gpu_cpus);
        printf("# %s, %d SMs; consumer threads pinned to %d CPUs of its NUMA node (0: not pinned)\n",
               prop.name, nsm, gpu_ncpus);
    }
    uint32_t all = O.blocks > 0 ? (uint32_t)O.blocks : (uint32_t)nsm;
    char n[16];
    snprintf(n, sizeof n, "%d", O.consumers);
    setenv("DION_PROXY_THREADS", n, 1);  /* the proxy drains with as many threads as the model consumer */
    setenv("DION_PROXY_SPIN", "10s", 0); /* never napping during a measurement */
    errs_dev = (uint64_t *)dev_alloc(64);
    printf("# one warp of 32 lanes per block, one QP (gdaki) or ring (proxy) per block, 1024 slots each; %d "
           "posts "
           "per lane per launch, %d launches (first dropped); consumer threads %d, check %s; %s\n",
           O.per, O.reps, O.consumers, O.check, O.cpu ? "CPU threads (dion_cpu_launch)" : "GPU 0");
    printf("# gdaki queues: pinned host memory (the softnic layout), consumed by a model NIC that checks and "
           "completes WQEs and executes nothing\n");
    int rc = 0;
    const char *scopes[2] = {"1warp", "allsm"};
    for (int s = 0; s < 2; s++) {
        if (!bench_in_list(O.scopes, scopes[s])) continue;
        uint32_t blocks = s ? all : 1;
        char t[64];
        if (bench_in_list(O.tests, "inline")) {
            snprintf(t, sizeof t, "post_write_inline_%s", scopes[s]);
            rc |= run_gdaki(K_INLINE, blocks, t);
        }
        if (bench_in_list(O.tests, "write")) {
            snprintf(t, sizeof t, "post_write_%s", scopes[s]);
            rc |= run_gdaki(K_WRITE, blocks, t);
        }
        if (bench_in_list(O.tests, "proxy")) {
            snprintf(t, sizeof t, "post_cmd_%s", scopes[s]);
            rc |= run_proxy(blocks, t);
        }
    }
    dev_free(errs_dev);
    return rc;
}
