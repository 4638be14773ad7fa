/* Device handles: the signal table every rank shares with its peers, per-peer tables, contexts, and the error
 * ring that device code writes and dion_dev_check / the watchdog read. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "cuda.h"
#include "trace.h"
#include "transports/p2p/p2p.h" /* dion__host_alloc: CPU-mode signal tables are shared memory */
#include "transports/transport.h"
#include "dion/device/gdaki_proto.cuh"
#include "dion/device/mlx5.cuh" /* the syndrome of a gdaki record, decoded */

struct dion__devh {
    struct dion__devh *next;
    dion_comm_t comm;
    dion_dev_t dev;
    int cpu;
    uint64_t *table; /* this rank's signal table (device memory, or shared host memory in CPU mode) */
    size_t table_words;
    dion__tl_region_t *region; /* every rank's table, as each one's backend reaches it */
    struct dion_dev_peer peers_copy[DION_DEV_INLINE_PEERS];
    uint64_t **tables; /* [nranks] every table as mapped here (NULL when unreachable) */
    struct dion_dev_errors *errors_host;
    /* Records read from the ring and not yet returned by dion_dev_check: the earliest, and how many. */
    dion_err_record_t first;
    uint64_t pending, pending_dropped, dropped_seen;
    int destroying;             /* dion_dev_destroy has begun: a second one is refused */
    cudaStream_t stream;        /* non-blocking: host reads and abort writes never wait for user kernels */
    struct dion__trace *trace;  /* DION_TRACE (trace.c); NULL when off */
    int table_pinned;           /* GPU mode, table in host memory registered with CUDA (a backend asked) */
    void *tl_dev[DION__TL_MAX]; /* each backend's part of this handle (dion__tl_dev_init) */
};

/* Handles get a number from this counter (dion_dev_t.generation) so that a copy of a destroyed handle is
 * told apart from a pointer the caller never got from dion_dev_create. */
static uint32_t dion__dev_serial;

static const char *dion__op_name(uint32_t op)
{
    static const char *names[] = {"none",         "put",          "put_signal", "signal",     "wait",
                                  "signal_read",  "fence",        "quiet",      "barrier",    "get",
                                  "fetch_add",    "compare_swap", "ctx",        "put_packet", "wait_packet",
                                  "counter_wait", "counter_read"};
    return op < sizeof names / sizeof names[0] ? names[op] : "?";
}

static const char *dion__cmp_name(uint32_t cmp)
{
    static const char *names[] = {"==", "!=", ">", ">=", "<", "<="};
    return cmp < 6 ? names[cmp] : "?";
}

/* A window argument that DION_CHECK rejected (cmp holds a DION_WCHK_* reason); 0 when r is not one. */
static int dion__describe_window(const dion_err_record_t *r, char *out, size_t cap)
{
    if (r->op != DION_OP_PUT && r->op != DION_OP_PUT_SIGNAL && r->op != DION_OP_GET &&
        r->op != DION_OP_FETCH_ADD && r->op != DION_OP_COMPARE_SWAP && r->op != DION_OP_PUT_PACKET &&
        r->op != DION_OP_WAIT_PACKET)
        return 0;
    unsigned long long off = r->offset, bytes = r->bytes, rank = r->observed, limit = r->limit;
    switch (r->cmp) {
    case DION_WCHK_RANGE:
        snprintf(
            out, cap,
            "peer %d: offset %llu + %llu bytes lies outside rank %llu's part of the window (%llu bytes); "
            "nothing was touched",
            r->peer, off, bytes, rank, limit);
        return 1;
    case DION_WCHK_ALIGN:
        /* expected: the alignment the call needed (8 for atomics, 16 for packet puts) */
        snprintf(
            out, cap,
            "peer %d: offset %llu of rank %llu's part is not at an %llu-byte aligned address (that part was "
            "registered at an address that is not so aligned, or the offset is not); %s need %llu-byte "
            "aligned addresses; nothing was touched",
            r->peer, off, rank, (unsigned long long)r->expected,
            r->op == DION_OP_PUT_PACKET || r->op == DION_OP_WAIT_PACKET ? "packet puts" : "atomics",
            (unsigned long long)r->expected);
        return 1;
    case DION_WCHK_NOT_WIN:
        snprintf(out, cap,
                 "peer %d: the window argument is NULL or not a window descriptor of this process (pass "
                 "dion_win_device() of a live window); nothing was touched",
                 r->peer);
        return 1;
    case DION_WCHK_DESTROYED:
        snprintf(
            out, cap,
            "peer %d: window %llu was destroyed (dion_win_destroy) before this call used it; nothing was "
            "touched",
            r->peer, (unsigned long long)r->expected);
        return 1;
    case DION_WCHK_OTHER:
        snprintf(out, cap,
                 "peer %d: the window belongs to a communicator of another size, or rank %llu is not in it; "
                 "nothing was touched",
                 r->peer, rank);
        return 1;
    case DION_WCHK_NOT_HOST:
        snprintf(
            out, cap,
            "peer %d: the window is GPU memory and this handle runs in CPU mode, where only host windows "
            "(dion_win_alloc with on_host=1) can be used; nothing was touched",
            r->peer);
        return 1;
    case DION_WCHK_UNMAPPED:
        snprintf(out, cap, "peer %d: rank %llu's part of the window is not mapped here; nothing was touched",
                 r->peer, rank);
        return 1;
    }
    return 0;
}

/* gdaki records: the QP, the peer and the decoded syndrome of an error completion, or what timed out. */
static void dion__describe_gdaki(const dion_err_record_t *r, char *out, size_t cap)
{
    unsigned syn = (unsigned)(r->offset & 0xff), vendor = (unsigned)((r->offset >> 8) & 0xff);
    unsigned wop = (unsigned)((r->offset >> 16) & 0xff), idx = (unsigned)((r->offset >> 32) & 0xffff);
    const char *reason = NULL;
    switch (r->cmp) {
    case DION_GDAKI_REC_CQE:
        dion__mlx5_syndrome_status((uint8_t)syn, &reason);
        snprintf(
            out, cap,
            "gdaki QP 0x%06llx to rank %d failed: the NIC completed WQE index 0x%04x (opcode 0x%02x) with "
            "syndrome 0x%02x (vendor 0x%02x): %s; the QP is in error and takes no more work",
            (unsigned long long)r->expected, r->peer, idx, wop, syn, vendor, reason);
        break;
    case DION_GDAKI_REC_STALL:
        snprintf(out, cap,
                 "gdaki QP 0x%06llx to rank %d was failed: a thread got no ring slots or no turn to publish "
                 "within the wait timeout (%.3f s), so later work requests could not be published (%s)",
                 (unsigned long long)r->expected, r->peer, (double)r->limit / 1e9,
                 dion_status_string((dion_status_t)r->status));
        break;
    case DION_GDAKI_REC_KEY:
        snprintf(out, cap,
                 "window id %llu has no gdaki registration for rank %d (destroyed, or more than %u windows "
                 "alive at once); nothing was posted",
                 (unsigned long long)r->observed, r->peer, DION_GDAKI_KEY_ROWS);
        break;
    default:
        snprintf(out, cap,
                 "gdaki QP 0x%06llx to rank %d: the NIC did not complete the work requests within the wait "
                 "timeout (%.3f s; completed up to WQEBB %llu): the NIC or its model is stalled",
                 (unsigned long long)r->expected, r->peer, (double)r->limit / 1e9,
                 (unsigned long long)r->observed);
    }
}

/* One sentence for a device error record. */
static void dion__describe(const dion_err_record_t *r, char *out, size_t cap)
{
    int n = snprintf(out, cap, "rank %d block %u thread %u ctx %u: %s: ", r->rank, r->block, r->thread,
                     r->ctx, dion__op_name(r->op));
    if (n < 0 || (size_t)n >= cap) return;
    out += n, cap -= (size_t)n;
    if (r->detail == DION_ERR_DETAIL_PROXY) {
        char whom[32] = "its ring";
        if (r->peer >= 0) snprintf(whom, sizeof whom, "rank %d", r->peer);
        if (r->status == DION_ERR_TIMEOUT)
            snprintf(out, cap,
                     "the proxy did not take or complete a command for %s within the wait timeout (%.3f s; "
                     "last count %llu): the proxy thread is stalled or the ring stays full",
                     whom, (double)r->limit / 1e9, (unsigned long long)r->observed);
        else
            snprintf(out, cap, "the context's proxy ring failed (%s)",
                     dion_status_string((dion_status_t)r->status));
        return;
    }
    if (r->detail == DION_ERR_DETAIL_GDAKI) {
        dion__describe_gdaki(r, out, cap);
        return;
    }
    if (dion__describe_window(r, out, cap)) return;
    if (r->detail == DION_ERR_DETAIL_COUNTER) {
        snprintf(out, cap, "local counter %u is not below DION_NUM_COUNTERS=%llu; nothing was done", r->sig,
                 (unsigned long long)r->limit);
        return;
    }
    switch (r->status) {
    case DION_ERR_TIMEOUT:
        if (r->op == DION_OP_COUNTER_WAIT) {
            snprintf(out, cap,
                     "timed out after %.3f s: local counter %u never reached %llu (last value %llu); fewer "
                     "counted puts were made on this context and counter than waited for, or "
                     "DION_WAIT_TIMEOUT is too short",
                     (double)r->limit / 1e9, r->sig, (unsigned long long)r->expected,
                     (unsigned long long)r->observed);
            break;
        }
        if (r->op == DION_OP_WAIT_PACKET) {
            snprintf(
                out, cap,
                "timed out after %.3f s: the packet message with sequence %llu (%llu bytes at offset %llu) "
                "never arrived whole (its first unit's flag: %llu); the peer did not send it, sent another "
                "sequence or offset, or DION_WAIT_TIMEOUT is too short",
                (double)r->limit / 1e9, (unsigned long long)r->expected, (unsigned long long)r->bytes,
                (unsigned long long)r->offset, (unsigned long long)r->observed);
            break;
        }
        snprintf(
            out, cap,
            "timed out after %.3f s: signal %u %s %llu never held (last value %llu); the peer that should "
            "signal it did not, or DION_WAIT_TIMEOUT is too short",
            (double)r->limit / 1e9, r->sig, dion__cmp_name(r->cmp), (unsigned long long)r->expected,
            (unsigned long long)r->observed);
        break;
    case DION_ERR_UNSUPPORTED:
        snprintf(out, cap,
                 "peer %d is reached by a network backend (transport %llu), which does not carry packet puts "
                 "yet; nothing was written (use put_signal for this peer)",
                 r->peer, (unsigned long long)r->observed);
        break;
    case DION_ERR_REMOTE_ACCESS:
        snprintf(out, cap,
                 "to peer %d: offset %llu + %llu bytes lies outside rank %llu's part of the window (%llu "
                 "bytes)%s; "
                 "nothing was written",
                 r->peer, (unsigned long long)r->offset, (unsigned long long)r->bytes,
                 (unsigned long long)r->observed, (unsigned long long)r->limit,
                 r->expected > 1 ? " or the offset is not 8-byte aligned (atomics need it)" : "");
        break;
    default:
        if (r->op == DION_OP_CTX || r->detail == DION_ERR_DETAIL_CTX)
            snprintf(out, cap, "context index %llu is not below num_contexts=%llu; nothing was done",
                     (unsigned long long)r->observed, (unsigned long long)r->expected);
        else if (r->limit && r->sig >= r->limit &&
                 (r->op == DION_OP_SIGNAL || r->op == DION_OP_PUT_SIGNAL || r->op == DION_OP_WAIT ||
                  r->op == DION_OP_SIGNAL_READ))
            snprintf(out, cap, "signal index %u is not below num_signals=%llu", r->sig,
                     (unsigned long long)r->limit);
        else if (r->peer < 0 || (r->limit && (uint64_t)r->peer >= r->limit))
            snprintf(out, cap, "peer %d is not a rank in [0, %llu)", r->peer, (unsigned long long)r->limit);
        else if (r->op == DION_OP_WAIT)
            snprintf(out, cap, "comparison %u is not a dion_cmp_t", r->cmp);
        else if ((r->op == DION_OP_PUT_PACKET || r->op == DION_OP_WAIT_PACKET) && r->expected == 1)
            snprintf(out, cap, "packet sequence 0 is reserved (sequences start at 1: dion_packet_seq_next)");
        else
            snprintf(out, cap, "invalid argument (peer %d, window or signal operation); nothing was touched",
                     r->peer);
    }
}

static void dion__log_record(const dion_err_record_t *r, int level)
{
    char text[512];
    dion__describe(r, text, sizeof text);
    DION_LOG(level, "device error %s: %s", dion_status_string((dion_status_t)r->status), text);
}

/* Moves every complete record out of the ring (devs_lock held): logs it at level (the watchdog warns;
 * dion_dev_check returns them instead), keeps the earliest for dion_dev_check, and frees its slot for a later
 * writer. Also collects the count of records dropped for want of a slot. */
static void dion__drain_records(struct dion__devh *h, int level)
{
    if (!h->errors_host) return;
    dion_err_record_t got[DION_ERR_RING];
    uint32_t slots[DION_ERR_RING];
    int n = 0;
    for (uint32_t s = 0; s < DION_ERR_RING; s++) {
        dion_err_record_t *r = &h->errors_host->rec[s];
        if (__atomic_load_n(&r->seq, __ATOMIC_ACQUIRE) == 0) continue; /* free or still being written */
        /* sorted by number as they come in: the log and the first error follow the order of recording */
        int i = n++;
        for (; i > 0 && got[i - 1].seq > r->seq; i--) got[i] = got[i - 1], slots[i] = slots[i - 1];
        got[i] = *r;
        slots[i] = s;
        __atomic_store_n(&r->seq, 0, __ATOMIC_RELAXED);
    }
    uint64_t *claim = h->table + h->dev.num_signals + DION_CTL_ERR_CLAIM;
    uint64_t *dropped_word = h->table + h->dev.num_signals + DION_CTL_ERR_DROPPED, dropped = 0;
    /* The copies and the cleared seq words come before the slots are handed back. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (h->cpu || h->table_pinned) { /* the table is host memory */
        for (int i = 0; i < n; i++) __atomic_store_n(&claim[slots[i]], 0, __ATOMIC_RELEASE);
        dropped = __atomic_load_n(dropped_word, __ATOMIC_RELAXED);
    } else {
        static const uint64_t zero = 0;
        cudaError_t e = cudaSuccess;
        for (int i = 0; i < n && e == cudaSuccess; i++)
            e = cudaMemcpyAsync(&claim[slots[i]], &zero, 8, cudaMemcpyHostToDevice, h->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(&dropped, dropped_word, 8, cudaMemcpyDeviceToHost, h->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(h->stream);
        if (e != cudaSuccess) {
            cudaGetLastError();
            DION_LOG(DION_LOG_WARN,
                     "could not hand error-ring slots back to the device (%s); later device "
                     "errors may be dropped",
                     cudaGetErrorString(e));
            dropped = h->dropped_seen;
        }
    }
    for (int i = 0; i < n; i++) {
        dion__log_record(&got[i], level);
        if (h->pending++ == 0 || got[i].seq < h->first.seq) h->first = got[i];
    }
    if (dropped > h->dropped_seen) {
        DION_LOG(level,
                 "%llu device error records were dropped: the error ring (%d records) was full; call "
                 "dion_dev_check more often or fix the first errors",
                 (unsigned long long)(dropped - h->dropped_seen), DION_ERR_RING);
        h->pending_dropped += dropped - h->dropped_seen;
        h->dropped_seen = dropped;
    }
}

void dion__dev_report_errors(dion_comm_t c)
{
    pthread_mutex_lock(&c->devs_lock);
    if (c->cuda_device >= 0) cudaSetDevice(c->cuda_device); /* runs on the watchdog thread */
    for (struct dion__devh *h = c->devs; h; h = h->next) dion__drain_records(h, DION_LOG_WARN);
    pthread_mutex_unlock(&c->devs_lock);
}

/* Writes why and who into the control words of every table this rank can reach, its own first. The first
 * reason a word receives stays: an abort must not turn into "peer failed" when the aborting rank then exits.
 */
static void dion__devh_abort(struct dion__devh *h, dion_status_t why, int failed_rank)
{
    dion_comm_t c = h->comm;
    uint64_t words[2] = {(uint64_t)failed_rank, (uint64_t)why};
    for (int i = 0; i <= c->nranks; i++) {
        int r = i == 0 ? c->rank : i - 1;
        if (i > 0 && r == c->rank) continue;
        uint64_t *t = h->tables[r];
        if (!t) continue;
        uint64_t *ctl = t + h->dev.num_signals;
        if (h->cpu || (h->table_pinned && r == c->rank)) { /* host memory */
            uint64_t expected = 0;
            if (__atomic_compare_exchange_n(&ctl[DION_CTL_ABORT], &expected, words[1], 0, __ATOMIC_RELEASE,
                                            __ATOMIC_RELAXED))
                __atomic_store_n(&ctl[DION_CTL_ABORT_RANK], words[0], __ATOMIC_RELAXED);
            continue;
        }
        /* GPU memory: no compare-and-swap from the host; read, then write if still clear. The window between
         * the two only matters to which failure a waiter reports, never to whether it stops. */
        uint64_t cur = 0;
        if (cudaMemcpyAsync(&cur, &ctl[DION_CTL_ABORT], 8, cudaMemcpyDeviceToHost, h->stream) !=
                cudaSuccess ||
            cudaStreamSynchronize(h->stream) != cudaSuccess) {
            cudaGetLastError();
            cur = 0;
        }
        if (cur) continue;
        /* rank first, status last: a waiter that sees the status finds the rank too */
        cudaMemcpyAsync(&ctl[DION_CTL_ABORT_RANK], &words[0], 8, cudaMemcpyHostToDevice, h->stream);
        cudaMemcpyAsync(&ctl[DION_CTL_ABORT], &words[1], 8, cudaMemcpyHostToDevice, h->stream);
    }
    if (!h->cpu && cudaStreamSynchronize(h->stream) != cudaSuccess) {
        cudaGetLastError();
        DION_LOG(DION_LOG_WARN, "could not write the abort flag to every peer");
    }
}

void dion__dev_abort_all(dion_comm_t c, dion_status_t why, int failed_rank)
{
    pthread_mutex_lock(&c->devs_lock);
    if (c->cuda_device >= 0) cudaSetDevice(c->cuda_device); /* may run on the watchdog thread */
    for (struct dion__devh *h = c->devs; h; h = h->next) dion__devh_abort(h, why, failed_rank);
    pthread_mutex_unlock(&c->devs_lock);
}

static void dion__devh_free(struct dion__devh *h)
{
    dion__tl_dev_fini(h->comm, h->tl_dev);
    dion__tl_region_destroy(h->region);
    if (h->table_pinned) {
        dion__host_free(h->table); /* unregisters from CUDA too */
        h->table = NULL;
    }
    if (h->cpu) {
        if (h->table) dion__host_free(h->table);
        free(h->dev.peers);
        free(h->errors_host);
        free(h->dev.ctx_state);
        free(h->dev.stats);
        free(h->dev.lcount);
    } else {
        if (h->table) cudaFree(h->table);
        if (h->dev.peers) cudaFree(h->dev.peers);
        if (h->errors_host) cudaFreeHost(h->errors_host);
        if (h->dev.ctx_state) cudaFree(h->dev.ctx_state);
        if (h->dev.stats) cudaFree(h->dev.stats);
        if (h->dev.lcount) cudaFree(h->dev.lcount);
        if (h->stream) cudaStreamDestroy(h->stream);
    }
    dion__trace_free(h->trace);
    free(h->tables);
    free(h);
}

static dion_status_t dion__dev_alloc(struct dion__devh *h, size_t bytes, int zero, void **out)
{
    *out = NULL;
    if (!bytes) return DION_SUCCESS;
    if (h->cpu) {
        *out = calloc(1, bytes);
        return *out ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory (%zu bytes)", bytes);
    }
    DION_CUDA_TRY(cudaMalloc(out, bytes));
    return zero ? dion__cuda_zero(*out, bytes) : DION_SUCCESS;
}

static dion_status_t dion__dev_options(const dion_dev_attr_t *attr, dion_dev_attr_t *a, uint32_t *flags,
                                       int *cpu, dion_comm_t c)
{
    dion_status_t st;
    int check = 0, stats = 0, force_cpu = 0, transport = 0;
    uint64_t timeout = 0;
    memset(a, 0, sizeof *a);
    if (attr) *a = *attr;
    if (a->num_signals == 0) a->num_signals = 1024;
    if (a->num_contexts == 0) a->num_contexts = 1;
    if (a->num_signals > (1u << 24))
        return dion__error(DION_ERR_INVALID_ARG, "dion_dev_create: num_signals=%u exceeds the limit of %u",
                           a->num_signals, 1u << 24);
    if (a->num_contexts > (1u << 16))
        return dion__error(DION_ERR_INVALID_ARG, "dion_dev_create: num_contexts=%u exceeds the limit of %u",
                           a->num_contexts, 1u << 16);
    if (a->flags & ~DION_DEV_FLAG_CPU)
        return dion__error(DION_ERR_INVALID_ARG, "dion_dev_create: unknown flags 0x%x",
                           a->flags & ~DION_DEV_FLAG_CPU);
    if ((st = dion__cfg_bool("DION_CHECK", &check)) != DION_SUCCESS) return st;
    if ((st = dion__cfg_bool("DION_STATS", &stats)) != DION_SUCCESS) return st;
    if ((st = dion__cfg_bool("DION_CPU_MODE", &force_cpu)) != DION_SUCCESS) return st;
    if ((st = dion__cfg_enum("DION_TRANSPORT", &transport)) != DION_SUCCESS) return st;
    if ((st = dion__cfg_duration_ns("DION_WAIT_TIMEOUT", &timeout)) != DION_SUCCESS) return st;
    if (a->wait_timeout_ns == 0)
        a->wait_timeout_ns = timeout; /* env: 0 means forever */
    else if (a->wait_timeout_ns == UINT64_MAX)
        a->wait_timeout_ns = 0;
    *cpu = (a->flags & DION_DEV_FLAG_CPU) || force_cpu || c->cuda_device < 0;
    *flags = (check ? DION_DEVF_CHECK : 0) | (stats ? DION_DEVF_STATS : 0) | (*cpu ? DION_DEVF_CPU : 0);
    return DION_SUCCESS;
}

/* What every rank's handle must agree on. Not here, by design: wait_timeout_ns (a wait's timeout only governs
 * the waiting rank) and DION_STATS (each rank counts its own operations). */
enum {
    DION__ARG_SIGNALS,  /* the control words and barrier counters sit after the signals, and peers address */
    DION__ARG_CONTEXTS, /* them by their own layout */
    DION__ARG_CPU,      /* CPU mode, everywhere or nowhere */
    DION__ARG_CHECK,    /* DION_CHECK protects a rank only when every rank checks what it sends */
    DION__NARGS
};
typedef struct {
    uint32_t v[DION__NARGS];
} dion__dev_args_t;

/* Every rank sees the same table, so every rank rejects with the same sentence: the first argument that
 * differs, rank 0's value and the first rank whose value differs from it. */
static dion_status_t dion__dev_args_agree(dion_comm_t c, const dion__dev_args_t *all)
{
    static const char *names[DION__NARGS] = {"num_signals", "num_contexts",
                                             "CPU mode (DION_CPU_MODE or DION_DEV_FLAG_CPU)", "DION_CHECK"};
    for (int f = 0; f < DION__NARGS; f++) {
        int first = -1, others = 0;
        uint32_t v0 = all[0].v[f];
        for (int r = 1; r < c->nranks; r++)
            if (all[r].v[f] != v0) {
                if (first < 0)
                    first = r;
                else
                    others++;
            }
        if (first < 0) continue;
        uint32_t v = all[first].v[f];
        char more[64] = "";
        if (others)
            snprintf(more, sizeof more, " (and %d more rank%s)", others,
                     others > 1 ? "s differ" : " differs");
        if (f == DION__ARG_SIGNALS || f == DION__ARG_CONTEXTS)
            return dion__error(
                DION_ERR_INVALID_ARG,
                "dion_dev_create: %s differs across ranks: rank 0 asked %u, rank %d asked %u%s; "
                "pass the same dion_dev_attr_t on every rank (0 means the default)",
                names[f], v0, first, v, more);
        return dion__error(DION_ERR_INVALID_ARG,
                           "dion_dev_create: %s differs across ranks: rank 0 has it %s, rank %d %s%s; set it "
                           "the same on every rank",
                           names[f], v0 ? "on" : "off", first, v ? "on" : "off", more);
    }
    return DION_SUCCESS;
}

dion_status_t dion_dev_create(dion_comm_t c, const dion_dev_attr_t *attr, dion_dev_t *dev)
{
    dion_status_t st = dion__comm_check(c, "dion_dev_create");
    if (st != DION_SUCCESS) return st;
    if (!dev) return dion__error(DION_ERR_INVALID_ARG, "dion_dev_create: dev is NULL");
    memset(dev, 0, sizeof *dev);
    dion_dev_attr_t a;
    uint32_t flags = 0;
    int cpu = 0, n = c->nranks;
    st = dion__dev_options(attr, &a, &flags, &cpu, c);

    struct dion__devh *h = calloc(1, sizeof *h);
    struct dion_dev_peer *peers = calloc((size_t)n, sizeof *peers);
    dion__dev_args_t *args = calloc((size_t)n, sizeof *args);
    if (st == DION_SUCCESS && (!h || !peers || !args))
        st = dion__error(DION_ERR_NO_MEMORY, "out of memory creating a device handle");
    if (h) {
        h->comm = c;
        h->cpu = cpu;
        h->tables = calloc((size_t)n, sizeof *h->tables);
        if (!h->tables) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
    }
    pthread_mutex_lock(&c->lock);

    /* Every rank must run the device API the same way and lay its signal table out the same way. */
    dion_status_t ag = dion__comm_agree(c, st, "reading the device handle options");
    dion__dev_args_t mine = {
        {a.num_signals, a.num_contexts, (uint32_t)cpu, (flags & DION_DEVF_CHECK) ? 1u : 0u}};
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, &mine, sizeof mine, args);
    if (ag == DION_SUCCESS) ag = dion__dev_args_agree(c, args);

    /* This rank's signal table: user signals, control words, one barrier counter per context. */
    if (ag == DION_SUCCESS) {
        h->table_words = (size_t)a.num_signals + DION_CTL_WORDS + a.num_contexts;
        size_t bytes = (h->table_words * 8 + 4095) / 4096 * 4096;
        /* A backend that writes signals from the host (the proxy's engine) without registering GPU memory
         * needs the table in host memory; mapped into the GPU, the device API uses it as it is. */
        st = dion__tl_select(c);
        if (st == DION_SUCCESS && !cpu) h->table_pinned = dion__tl_signals_on_host(c);
        if (st != DION_SUCCESS) {
        } else if (cpu) {
            st = dion__host_alloc(bytes, (void **)&h->table); /* fresh memfd pages are zero */
        } else if (h->table_pinned) {
            if (c->cuda_device >= 0) cudaSetDevice(c->cuda_device);
            /* dion__host_alloc registers the pages with CUDA (mapped, portable) when a GPU exists, and
             * dion__host_free unregisters them: registering here again would fail as already registered. */
            st = dion__host_alloc(bytes, (void **)&h->table);
            if (st != DION_SUCCESS) h->table_pinned = 0;
            void *devp = NULL;
            if (st == DION_SUCCESS)
                st =
                    dion__cuda_check(cudaHostGetDevicePointer(&devp, h->table, 0),
                                     "mapping the host signal table into the GPU (cudaHostGetDevicePointer)");
            if (st == DION_SUCCESS && devp != (void *)h->table)
                st = dion__error(DION_ERR_UNSUPPORTED,
                                 "the GPU sees the host signal table at another address; the proxy backend "
                                 "needs unified addressing for host-resident signal tables");
            if (st == DION_SUCCESS)
                st = dion__cuda_check(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking),
                                      "cudaStreamCreate");
        } else {
            if (c->cuda_device >= 0) cudaSetDevice(c->cuda_device);
            st = dion__dev_alloc(h, bytes, 1, (void **)&h->table);
            if (st == DION_SUCCESS)
                st = dion__cuda_check(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking),
                                      "cudaStreamCreate");
        }
        ag = dion__comm_agree(c, st, "allocating the signal table");
    }
    /* Every rank's table through the backend that serves it; a peer no backend reaches fails here, on every
     * rank, with each backend's reason. */
    if (ag == DION_SUCCESS)
        ag = dion__tl_region_create(c, h->table, h->table_words * 8, "the signal table", NULL, NULL,
                                    &h->region);
    if (ag == DION_SUCCESS) {
        st = DION_SUCCESS;
        for (int r = 0; r < n; r++) {
            const dion__tl_ops_t *tl = dion__tl_of(c, r);
            h->tables[r] = (uint64_t *)dion__tl_region_view(h->region, r)->base;
            peers[r].transport = r == c->rank ? DION_TRANSPORT_SELF : tl->kind;
            peers[r].scope = r == c->rank ? DION_SCOPE_GPU : tl->peer_scope(c, r, cpu);
            peers[r].signals = h->tables[r];
            if (!h->tables[r] && tl->kind == DION_TRANSPORT_P2P && st == DION_SUCCESS)
                st = dion__error(DION_ERR_UNSUPPORTED, "rank %d cannot map rank %d's signal table (host %s)",
                                 c->rank, r, c->info[r].host);
            if (peers[r].scope == DION_SCOPE_SYS) flags |= DION_DEVF_SYS;
            if (peers[r].transport == DION_TRANSPORT_PROXY) flags |= DION_DEVF_PROXY | DION_DEVF_SYS;
            if (peers[r].transport == DION_TRANSPORT_GDAKI) flags |= DION_DEVF_GDAKI | DION_DEVF_SYS;
            if (r == n - 1 && !cpu && (flags & DION_DEVF_PROXY))
                DION_LOG(
                    DION_LOG_WARN,
                    "this GPU handle reaches some peers through the proxy: kernels that use it must be "
                    "compiled with -DDION_DEVICE_BACKENDS=3 (GPU code has the p2p half alone by default; "
                    "docs/backends/proxy.md)");
            if (r == n - 1 && !cpu && (flags & DION_DEVF_GDAKI))
                DION_LOG(DION_LOG_WARN,
                         "this GPU handle reaches some peers through gdaki: kernels that use it must be "
                         "compiled with DION_DEVICE_BACKEND_GDAKI in -DDION_DEVICE_BACKENDS (e.g. 5: p2p and "
                         "gdaki; docs/gdaki.md)");
            if (r < DION_DEV_INLINE_PEERS) h->peers_copy[r] = peers[r];
        }
        if (cpu || c->host_windows) flags |= DION_DEVF_SYS;
        if (cpu || h->table_pinned) flags |= DION_DEVF_SIGHOST;
        ag = dion__comm_agree(c, st, "mapping the peers' signal tables");
    }

    /* Device-visible pieces: peer table, error ring (host-mapped), context state, statistics. */
    if (ag == DION_SUCCESS) {
        size_t peers_bytes = sizeof *peers * (size_t)n;
        st = dion__dev_alloc(h, peers_bytes, 0, (void **)&h->dev.peers);
        if (st == DION_SUCCESS) {
            if (cpu)
                memcpy(h->dev.peers, peers, peers_bytes);
            else
                st = dion__cuda_check(cudaMemcpy(h->dev.peers, peers, peers_bytes, cudaMemcpyHostToDevice),
                                      "copying the peer table");
        }
        if (st == DION_SUCCESS) {
            if (cpu) {
                h->errors_host = calloc(1, sizeof *h->errors_host);
                h->dev.errors = h->errors_host;
                if (!h->errors_host) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
            } else {
                st = dion__cuda_check(cudaHostAlloc((void **)&h->errors_host, sizeof *h->errors_host,
                                                    cudaHostAllocMapped | cudaHostAllocPortable),
                                      "cudaHostAlloc for the error ring");
                if (st == DION_SUCCESS) {
                    memset(h->errors_host, 0, sizeof *h->errors_host);
                    st =
                        dion__cuda_check(cudaHostGetDevicePointer((void **)&h->dev.errors, h->errors_host, 0),
                                         "cudaHostGetDevicePointer");
                }
            }
        }
        if (st == DION_SUCCESS)
            st = dion__dev_alloc(h, sizeof(uint64_t) * a.num_contexts, 1, (void **)&h->dev.ctx_state);
        /* the p2p part of the local completion counters (device/counter.cuh), zero */
        if (st == DION_SUCCESS)
            st = dion__dev_alloc(h, sizeof(uint64_t) * DION_NUM_COUNTERS * a.num_contexts, 1,
                                 (void **)&h->dev.lcount);
        if (st == DION_SUCCESS && (flags & DION_DEVF_STATS))
            st = dion__dev_alloc(h, sizeof(dion_ctx_stats_t) * a.num_contexts, 1, (void **)&h->dev.stats);
        if (st == DION_SUCCESS) st = dion__trace_create(c, cpu, a.num_contexts, &h->trace);
        /* the backends' parts (the proxy's rings and threads) see the handle as kernels will */
        if (st == DION_SUCCESS) {
            h->dev.rank = c->rank;
            h->dev.nranks = n;
            h->dev.num_signals = a.num_signals;
            h->dev.num_contexts = a.num_contexts;
            h->dev.signals = h->table;
            h->dev.flags = flags;
            st = dion__tl_dev_init(c, h->region, &h->dev, cpu, h->tl_dev);
        }
        ag = dion__comm_agree(c, st, "creating the device handle");
    }
    /* Nobody signals a table before its owner has finished. */
    if (ag == DION_SUCCESS) ag = dion__boot_barrier(c->boot);
    pthread_mutex_unlock(&c->lock);

    free(peers);
    free(args);
    if (ag != DION_SUCCESS) {
        if (h) dion__devh_free(h);
        return ag;
    }
    h->dev.rank = c->rank;
    h->dev.nranks = n;
    h->dev.num_signals = a.num_signals;
    h->dev.num_contexts = a.num_contexts;
    h->dev.wait_timeout_ns = a.wait_timeout_ns;
    h->dev.flags = flags;
    h->dev.signals = h->table;
    h->dev.host = h;
    h->dev.generation = __atomic_add_fetch(&dion__dev_serial, 1, __ATOMIC_RELAXED);
    dion__trace_attach(h->trace, &h->dev);
    for (int r = 0; r < n && r < DION_DEV_INLINE_PEERS; r++) h->dev.peer_inline[r] = h->peers_copy[r];
    pthread_mutex_lock(&c->lock);
    dion__win_fill_slots(c, h->dev.win_slot, DION_DEV_WIN_SLOTS);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&c->devs_lock);
    h->next = c->devs;
    c->devs = h;
    pthread_mutex_unlock(&c->devs_lock);
    *dev = h->dev;
    DION_LOG(DION_LOG_INFO, "device handle: %s mode, %u signals, %u contexts, %s scope, check %s, stats %s",
             cpu ? "CPU" : "GPU", a.num_signals, a.num_contexts, (flags & DION_DEVF_SYS) ? "system" : "GPU",
             (flags & DION_DEVF_CHECK) ? "on" : "off", (flags & DION_DEVF_STATS) ? "on" : "off");
    return DION_SUCCESS;
}

int dion__dev_slot_uses(dion_comm_t c, const void *table)
{
    int used = 0;
    pthread_mutex_lock(&c->devs_lock);
    for (struct dion__devh *h = c->devs; h && !used; h = h->next)
        for (int k = 0; k < DION_DEV_WIN_SLOTS; k++)
            if (h->dev.win_slot[k].win == table) used = 1;
    pthread_mutex_unlock(&c->devs_lock);
    return used;
}

/* Finds dev's bookkeeping among c's live handles. The caller holds devs_lock and keeps it while it uses the
 * result: dion_dev_destroy unlinks a handle under that lock before freeing it. */
static struct dion__devh *dion__devh_of(dion_comm_t c, const dion_dev_t *dev, const char *fn)
{
    if (!dev || !dev->host) {
        dion__error(DION_ERR_INVALID_ARG, "%s: dev is NULL or was not made by dion_dev_create", fn);
        return NULL;
    }
    struct dion__devh *h = c->devs;
    while (h && !(h == dev->host && h->dev.generation == dev->generation)) h = h->next;
    if (h) return h;
    if (dev->generation != 0 && dev->generation <= __atomic_load_n(&dion__dev_serial, __ATOMIC_RELAXED))
        dion__error(DION_ERR_INVALID_ARG,
                    "%s: the handle was destroyed (dion_dev_destroy) or belongs to another communicator", fn);
    else
        dion__error(DION_ERR_INVALID_ARG, "%s: dev was not made by dion_dev_create on this communicator", fn);
    return NULL;
}

dion_status_t dion_dev_destroy(dion_comm_t c, dion_dev_t *dev)
{
    dion_status_t st = dion__comm_check(c, "dion_dev_destroy");
    if (st != DION_SUCCESS) return st;
    pthread_mutex_lock(&c->devs_lock);
    struct dion__devh *h = dion__devh_of(c, dev, "dion_dev_destroy");
    if (h && h->destroying) {
        dion__error(DION_ERR_INVALID_ARG, "dion_dev_destroy: another thread is destroying this handle");
        h = NULL;
    }
    if (h) h->destroying = 1;
    pthread_mutex_unlock(&c->devs_lock);
    if (!h) return DION_ERR_INVALID_ARG;
    /* This rank's kernels end before the barrier, so that once every rank has passed it no kernel anywhere
     * still touches a table that is about to be freed. */
    int leak = 0;
    if (h->cpu) {
        uint64_t limit = 0;
        if (dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &limit) != DION_SUCCESS) limit = 60000000000ull;
        if (dion__cpu_launches_wait(limit) != DION_SUCCESS) {
            st = dion__error(DION_ERR_TIMEOUT,
                             "dion_dev_destroy: a CPU-mode launch of this process was still running after "
                             "DION_BOOTSTRAP_TIMEOUT (%.1f s); the handle's memory stays allocated until the "
                             "process exits. End kernels before destroying the handle they use",
                             (double)limit / 1e9);
            leak = 1;
        }
    } else {
        if (c->cuda_device >= 0) cudaSetDevice(c->cuda_device);
        st = dion__cuda_check(cudaDeviceSynchronize(), "dion_dev_destroy: waiting for this rank's kernels");
    }
    pthread_mutex_lock(&c->lock);
    /* Every rank stops using everybody's tables before anyone frees its own. */
    dion_status_t bst = dion__boot_barrier(c->boot);
    pthread_mutex_unlock(&c->lock);
    if (st == DION_SUCCESS) st = bst;
    pthread_mutex_lock(&c->devs_lock);
    struct dion__devh **pp = &c->devs;
    while (*pp != h) pp = &(*pp)->next;
    *pp = h->next;
    pthread_mutex_unlock(&c->devs_lock);
    if (!leak) { /* kernels that may still run keep their trace buffers too */
        dion__trace_finish(c, &h->trace);
        dion__devh_free(h);
    }
    memset(dev, 0, sizeof *dev);
    return st;
}

dion_status_t dion_dev_check(dion_comm_t c, const dion_dev_t *dev)
{
    dion_status_t st = dion__comm_check(c, "dion_dev_check");
    if (st != DION_SUCCESS) return st;
    pthread_mutex_lock(&c->devs_lock);
    struct dion__devh *h = dion__devh_of(c, dev, "dion_dev_check");
    if (!h) {
        pthread_mutex_unlock(&c->devs_lock);
        return DION_ERR_INVALID_ARG;
    }
    if (c->cuda_device >= 0 && !h->cpu) cudaSetDevice(c->cuda_device);
    dion__drain_records(h, DION_LOG_DEBUG);
    dion_err_record_t first = h->first;
    uint64_t count = h->pending, dropped = h->pending_dropped;
    h->pending = h->pending_dropped = 0;
    /* The abort words: why the comm was aborted, and by or because of which rank. */
    uint64_t ctl[2] = {0, 0};
    uint64_t *words = h->table + h->dev.num_signals + DION_CTL_ABORT;
    if (h->cpu || h->table_pinned) {
        ctl[0] = __atomic_load_n(&words[DION_CTL_ABORT], __ATOMIC_ACQUIRE);
        ctl[1] = __atomic_load_n(&words[DION_CTL_ABORT_RANK], __ATOMIC_RELAXED);
    } else if (cudaMemcpyAsync(ctl, words, sizeof ctl, cudaMemcpyDeviceToHost, h->stream) != cudaSuccess ||
               cudaStreamSynchronize(h->stream) != cudaSuccess) {
        cudaGetLastError();
        ctl[0] = 0;
    }
    pthread_mutex_unlock(&c->devs_lock);
    if (count == 0 && dropped == 0 && ctl[0] == 0) {
        dion__error_clear();
        return DION_SUCCESS;
    }
    char drops[160] = "", abort_text[200] = "";
    if (dropped)
        snprintf(drops, sizeof drops,
                 "; %llu more were dropped because the error ring (%d records) was full: call dion_dev_check "
                 "more often",
                 (unsigned long long)dropped, DION_ERR_RING);
    if (ctl[0] == DION_ERR_PEER_FAILED)
        snprintf(abort_text, sizeof abort_text,
                 "rank %d failed (its bootstrap link closed): device waits, quiets and barriers return "
                 "DION_ERR_PEER_FAILED",
                 (int)ctl[1]);
    else if (ctl[0])
        snprintf(abort_text, sizeof abort_text,
                 "rank %d aborted the communicator (%s): device waits, quiets and barriers return it",
                 (int)ctl[1], dion_status_string((dion_status_t)ctl[0]));
    if (count == 0 && ctl[0]) return dion__error((dion_status_t)ctl[0], "%s%s", abort_text, drops);
    if (count == 0) return dion__error(DION_ERR_INTERNAL, "no device error record was left to read%s", drops);
    char text[1024], more[64] = "";
    dion__describe(&first, text, sizeof text);
    if (first.detail == DION_ERR_DETAIL_PROXY ||
        first.detail == DION_ERR_DETAIL_GDAKI) { /* the backend's own sentence names the peer and the cause */
        size_t len = strlen(text);
        pthread_mutex_lock(&c->devs_lock);
        struct dion__devh *h2 = dion__devh_of(c, dev, "dion_dev_check");
        if (h2 && len + 3 < sizeof text) {
            memcpy(text + len, ": ", 3);
            if (!dion__tl_dev_why(c, h2->tl_dev, first.ctx, text + len + 2, sizeof text - len - 2))
                text[len] = 0;
        }
        pthread_mutex_unlock(&c->devs_lock);
    }
    if (count > 1)
        snprintf(more, sizeof more, " (and %llu more device errors)", (unsigned long long)(count - 1));
    return dion__error((dion_status_t)first.status, "%s%s%s%s%s", text, more, drops, ctl[0] ? "; " : "",
                       abort_text);
}

dion_status_t dion_dev_stats(dion_comm_t c, const dion_dev_t *dev, uint32_t ctx, dion_ctx_stats_t *out)
{
    dion_status_t st = dion__comm_check(c, "dion_dev_stats");
    if (st != DION_SUCCESS) return st;
    if (!out) return dion__error(DION_ERR_INVALID_ARG, "dion_dev_stats: out is NULL");
    pthread_mutex_lock(&c->devs_lock);
    struct dion__devh *h = dion__devh_of(c, dev, "dion_dev_stats");
    if (!h)
        st = DION_ERR_INVALID_ARG;
    else if (ctx >= h->dev.num_contexts)
        st = dion__error(DION_ERR_INVALID_ARG, "dion_dev_stats: ctx=%u is not below num_contexts=%u", ctx,
                         h->dev.num_contexts);
    else if (!h->dev.stats)
        st = dion__error(DION_ERR_UNSUPPORTED, "dion_dev_stats: counting is off; set DION_STATS=1 before "
                                               "dion_dev_create");
    else if (h->cpu) {
        uint64_t *src = (uint64_t *)&h->dev.stats[ctx], *dst = (uint64_t *)out;
        for (size_t i = 0; i < sizeof *out / 8; i++) dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    } else {
        if (c->cuda_device >= 0) cudaSetDevice(c->cuda_device);
        st = dion__cuda_check(
            cudaMemcpyAsync(out, &h->dev.stats[ctx], sizeof *out, cudaMemcpyDeviceToHost, h->stream),
            "dion_dev_stats: reading the counters");
        if (st == DION_SUCCESS)
            st = dion__cuda_check(cudaStreamSynchronize(h->stream), "dion_dev_stats: reading the counters");
    }
    pthread_mutex_unlock(&c->devs_lock);
    return st;
}
