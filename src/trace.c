/* DION_TRACE, host half: allocates the per-context event arrays with the device handle, takes events from
 * host threads, and writes each rank's Chrome-trace JSON ("traceEvents", opens in Perfetto) at teardown. */
#include "trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cuda.h"

#define DION__TRACE_HOST_EVENTS 65536 /* host-thread events kept per trace */
#define DION__TRACE_HOST_TID    1000  /* host thread k is Perfetto track 1000 + k, apart from the contexts */

struct dion__trace {
    int cpu;
    uint32_t num_contexts;
    struct dion_dev_trace dev; /* device (or CPU-mode host) pointers */
    dion_trace_event_t *host_events;
    uint64_t host_capacity;
    uint64_t host_head; /* claimed so far, dropped ones included */
    unsigned number;    /* traced handles this process made before this one: names the file */
};

static unsigned dion__trace_handles; /* traced handles made by this process so far */

dion_status_t dion__trace_new(int cpu, uint32_t num_contexts, uint64_t capacity, uint64_t host_capacity,
                              struct dion__trace **out)
{
    *out = NULL;
    if (num_contexts == 0 || capacity == 0 ||
        capacity > UINT64_MAX / sizeof(dion_trace_event_t) / num_contexts)
        return dion__error(DION_ERR_INVALID_ARG,
                           "trace: %u contexts of %llu events do not fit in memory; lower DION_TRACE_EVENTS",
                           num_contexts, (unsigned long long)capacity);
    struct dion__trace *t = calloc(1, sizeof *t);
    if (!t) return dion__error(DION_ERR_NO_MEMORY, "trace: out of memory");
    t->cpu = cpu;
    t->num_contexts = num_contexts;
    t->dev.capacity = capacity;
    t->host_capacity = host_capacity;
    size_t heads = sizeof(uint64_t) * num_contexts;
    size_t events = sizeof(dion_trace_event_t) * num_contexts * capacity;
    dion_status_t st = DION_SUCCESS;
    if (host_capacity) {
        t->host_events = calloc(host_capacity, sizeof *t->host_events);
        if (!t->host_events) st = dion__error(DION_ERR_NO_MEMORY, "trace: out of memory");
    }
    if (st == DION_SUCCESS && cpu) {
        t->dev.heads = calloc(1, heads);
        t->dev.events = malloc(events);
        if (!t->dev.heads || !t->dev.events)
            st = dion__error(DION_ERR_NO_MEMORY,
                             "trace: out of memory for %zu bytes of events; lower DION_TRACE_EVENTS", events);
    } else if (st == DION_SUCCESS) {
        st = dion__cuda_check(cudaMalloc((void **)&t->dev.heads, heads), "cudaMalloc for the trace counters");
        if (st == DION_SUCCESS) st = dion__cuda_zero(t->dev.heads, heads);
        if (st == DION_SUCCESS)
            st = dion__cuda_check(cudaMalloc((void **)&t->dev.events, events),
                                  "cudaMalloc for the trace events (lower DION_TRACE_EVENTS)");
    }
    if (st != DION_SUCCESS) {
        dion__trace_free(t);
        return st;
    }
    *out = t;
    return DION_SUCCESS;
}

void dion__trace_free(struct dion__trace *t)
{
    if (!t) return;
    if (t->cpu) {
        free(t->dev.heads);
        free(t->dev.events);
    } else {
        if (t->dev.heads) cudaFree(t->dev.heads);
        if (t->dev.events) cudaFree(t->dev.events);
    }
    free(t->host_events);
    free(t);
}

struct dion_dev_trace dion__trace_device(const struct dion__trace *t)
{
    return t->dev;
}

void dion__trace_host_event(struct dion__trace *t, uint32_t thread, dion_op_t op, int peer, uint32_t sig,
                            uint64_t bytes, uint64_t start_ns, uint64_t end_ns, dion_status_t status)
{
    if (!t) return;
    uint64_t n = __atomic_fetch_add(&t->host_head, 1, __ATOMIC_RELAXED);
    if (n >= t->host_capacity) return;
    dion_trace_event_t *e = &t->host_events[n];
    memset(e, 0, sizeof *e);
    e->start_ns = start_ns;
    e->end_ns = end_ns < start_ns ? start_ns : end_ns;
    e->bytes = bytes;
    e->op = (uint16_t)op;
    e->peer = peer;
    e->sig = sig;
    e->status = (uint32_t)status;
    e->thread = thread;
}

/* Device events claimed over all contexts (dropped ones included). */
static uint64_t dion__trace_device_total(const struct dion__trace *t, const uint64_t *heads, uint32_t nctx)
{
    (void)t;
    uint64_t n = 0;
    for (uint32_t k = 0; k < nctx; k++) n += heads[k];
    return n;
}

/* Reads the claim counters (all contexts) into heads. */
static dion_status_t dion__trace_heads(struct dion__trace *t, uint64_t *heads)
{
    size_t bytes = sizeof(uint64_t) * t->num_contexts;
    if (t->cpu) {
        for (uint32_t i = 0; i < t->num_contexts; i++)
            heads[i] = __atomic_load_n(&t->dev.heads[i], __ATOMIC_ACQUIRE);
        return DION_SUCCESS;
    }
    return dion__cuda_check(cudaMemcpy(heads, t->dev.heads, bytes, cudaMemcpyDeviceToHost),
                            "reading the trace counters");
}

static void dion__trace_split(uint64_t head, uint64_t cap, uint64_t *kept, uint64_t *dropped)
{
    *kept = head < cap ? head : cap;
    *dropped = head - *kept;
}

dion_status_t dion__trace_counts(struct dion__trace *t, uint32_t ctx, uint64_t *kept, uint64_t *dropped)
{
    if (ctx == UINT32_MAX) {
        dion__trace_split(__atomic_load_n(&t->host_head, __ATOMIC_ACQUIRE), t->host_capacity, kept, dropped);
        return DION_SUCCESS;
    }
    if (ctx >= t->num_contexts)
        return dion__error_set(DION_ERR_INVALID_ARG, "trace: ctx=%u is not below %u", ctx, t->num_contexts);
    uint64_t *heads = calloc(t->num_contexts, sizeof *heads);
    if (!heads) return dion__error_set(DION_ERR_NO_MEMORY, "trace: out of memory");
    dion_status_t st = dion__trace_heads(t, heads);
    if (st == DION_SUCCESS) dion__trace_split(heads[ctx], t->dev.capacity, kept, dropped);
    free(heads);
    return st;
}

/* ---- JSON ---- */

static const char *dion__trace_op_name(uint32_t op)
{
    static const char *names[] = {"none",         "put",          "put_signal", "signal",     "wait",
                                  "signal_read",  "fence",        "quiet",      "barrier",    "get",
                                  "fetch_add",    "compare_swap", "ctx",        "put_packet", "wait_packet",
                                  "counter_wait", "counter_read"};
    return op < sizeof names / sizeof names[0] ? names[op] : "unknown";
}

static const char *dion__trace_cmp_name(uint32_t cmp)
{
    static const char *names[] = {"==", "!=", ">", ">=", "<", "<="};
    return cmp < 6 ? names[cmp] : "?";
}

static const char *dion__trace_sigop_name(uint32_t op)
{
    static const char *names[] = {"set", "add", "set_relaxed", "add_relaxed"};
    return op < 4 ? names[op] : "?";
}

static void dion__trace_json_event(FILE *f, const dion_trace_event_t *e, int rank, uint32_t tid,
                                   uint64_t base, int first)
{
    uint32_t op = e->op;
    int instant = op == DION_OP_SIGNAL || (e->end_ns == e->start_ns && tid >= DION__TRACE_HOST_TID);
    int has_bytes = op == DION_OP_PUT || op == DION_OP_PUT_SIGNAL || op == DION_OP_GET ||
                    op == DION_OP_FETCH_ADD || op == DION_OP_COMPARE_SWAP;
    int has_sig =
        op == DION_OP_PUT_SIGNAL || op == DION_OP_SIGNAL || op == DION_OP_WAIT || op == DION_OP_BARRIER;
    int device = tid < DION__TRACE_HOST_TID;
    uint64_t start = e->start_ns - base, dur = e->end_ns >= e->start_ns ? e->end_ns - e->start_ns : 0;
    fprintf(f, "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%s\",", first ? "" : ",",
            dion__trace_op_name(op), device ? "device" : "host", instant ? "i" : "X");
    if (instant) fprintf(f, "\"s\":\"t\",");
    fprintf(f, "\"pid\":%d,\"tid\":%u,\"ts\":%llu.%03llu,", rank, tid, (unsigned long long)(start / 1000),
            (unsigned long long)(start % 1000));
    if (!instant)
        fprintf(f, "\"dur\":%llu.%03llu,", (unsigned long long)(dur / 1000),
                (unsigned long long)(dur % 1000));
    fprintf(f, "\"args\":{\"op\":\"%s\",\"status\":\"%s\",\"peer\":%d", dion__trace_op_name(op),
            dion_status_string((dion_status_t)e->status), e->peer);
    if (has_bytes) fprintf(f, ",\"bytes\":%llu", (unsigned long long)e->bytes);
    if (has_sig) fprintf(f, ",\"signal\":%u", e->sig);
    if (op == DION_OP_PUT_SIGNAL || op == DION_OP_SIGNAL)
        fprintf(f, ",\"sig_op\":\"%s\",\"value\":%llu", dion__trace_sigop_name(e->cmp),
                (unsigned long long)e->value);
    if (op == DION_OP_WAIT)
        fprintf(f, ",\"cmp\":\"%s\",\"value\":%llu,\"observed\":%llu", dion__trace_cmp_name(e->cmp),
                (unsigned long long)e->value, (unsigned long long)e->observed);
    if (op == DION_OP_COUNTER_WAIT)
        fprintf(f, ",\"counter\":%u,\"value\":%llu,\"observed\":%llu", e->sig, (unsigned long long)e->value,
                (unsigned long long)e->observed);
    if (op == DION_OP_BARRIER) /* the arrivals it waited for */
        fprintf(f, ",\"value\":%llu", (unsigned long long)e->value);
    if (op == DION_OP_FETCH_ADD || op == DION_OP_COMPARE_SWAP)
        fprintf(f, ",\"value\":%llu,\"old\":%llu", (unsigned long long)e->value,
                (unsigned long long)e->observed);
    if (device) fprintf(f, ",\"block\":%u,\"thread\":%u", e->block, e->thread);
    fprintf(f, "}}");
}

/* Earlier start first; of two that start together, the longer (the enclosing call: a barrier and its quiet)
 * first, so that viewers nest them. */
static int dion__trace_order(const void *pa, const void *pb)
{
    const dion_trace_event_t *a = pa, *b = pb;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
    if (a->end_ns != b->end_ns) return a->end_ns > b->end_ns ? -1 : 1;
    return 0;
}

static void dion__trace_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static uint64_t dion__clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

dion_status_t dion__trace_write(struct dion__trace *t, const char *path, int rank, const char *host)
{
    uint32_t nctx = t->num_contexts;
    uint64_t cap = t->dev.capacity;
    uint64_t *heads = calloc(nctx, sizeof *heads);
    dion_trace_event_t *ev = t->cpu ? t->dev.events : malloc(sizeof *ev * nctx * cap);
    if (!heads || !ev) {
        free(heads);
        if (ev != t->dev.events) free(ev);
        return dion__error_set(DION_ERR_NO_MEMORY, "trace: out of memory reading the events");
    }
    dion_status_t st = dion__trace_heads(t, heads);
    /* device events: only the part of each array that was filled */
    for (uint32_t k = 0; st == DION_SUCCESS && !t->cpu && k < nctx; k++) {
        uint64_t kept = heads[k] < cap ? heads[k] : cap;
        if (kept)
            st = dion__cuda_check(cudaMemcpy(ev + (size_t)k * cap, t->dev.events + (size_t)k * cap,
                                             sizeof *ev * kept, cudaMemcpyDeviceToHost),
                                  "reading the trace events");
    }
    /* Device times are CLOCK_MONOTONIC in CPU mode and the globaltimer (ns since the epoch) on the GPU; host
     * events are CLOCK_MONOTONIC and move to the device clock. epoch_offset takes the file's clock to the
     * epoch, for dion-trace-merge. */
    uint64_t mono = dion__clock_ns(CLOCK_MONOTONIC), real = dion__clock_ns(CLOCK_REALTIME);
    int64_t mono_to_epoch = (int64_t)(real - mono);
    int64_t host_shift = t->cpu ? 0 : mono_to_epoch;
    uint64_t host_kept, host_dropped;
    dion__trace_split(t->host_head, t->host_capacity, &host_kept, &host_dropped);
    uint64_t base = UINT64_MAX, dropped = 0;
    for (uint32_t k = 0; k < nctx; k++) {
        uint64_t kept = heads[k] < cap ? heads[k] : cap;
        dropped += heads[k] - kept;
        qsort(ev + (size_t)k * cap, kept, sizeof *ev, dion__trace_order);
        if (kept && ev[k * cap].start_ns < base) base = ev[k * cap].start_ns;
    }
    for (uint64_t i = 0; i < host_kept; i++) {
        t->host_events[i].start_ns += (uint64_t)host_shift;
        t->host_events[i].end_ns += (uint64_t)host_shift;
        if (t->host_events[i].start_ns < base) base = t->host_events[i].start_ns;
    }
    if (base == UINT64_MAX) base = t->cpu ? mono : real;

    FILE *f = st == DION_SUCCESS ? fopen(path, "w") : NULL;
    if (st == DION_SUCCESS && !f)
        st = dion__error_set(DION_ERR_INVALID_ARG,
                             "trace: cannot create %s: %s; set DION_TRACE to a writable path", path,
                             strerror(errno));
    if (f) {
        fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"dion_trace\":1,\"rank\":%d,\"host\":", rank);
        dion__trace_json_string(f, host ? host : "?");
        fprintf(f,
                ",\"clock\":\"%s\",\"base_ns\":%llu,\"epoch_offset_ns\":%lld,\"contexts\":%u,"
                "\"capacity\":%llu,\"dropped\":%llu,\"host_dropped\":%llu,\"dropped_per_context\":[",
                t->cpu ? "monotonic" : "globaltimer", (unsigned long long)base,
                (long long)(t->cpu ? mono_to_epoch : 0), nctx, (unsigned long long)cap,
                (unsigned long long)dropped, (unsigned long long)host_dropped);
        for (uint32_t k = 0; k < nctx; k++)
            fprintf(f, "%s%llu", k ? "," : "",
                    (unsigned long long)(heads[k] - (heads[k] < cap ? heads[k] : cap)));
        fprintf(f, "]},\n\"traceEvents\":[");
        fprintf(
            f,
            "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}",
            rank, rank);
        fprintf(f,
                ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_"
                "index\":%d}}",
                rank, rank);
        for (uint32_t k = 0; k < nctx; k++)
            if (heads[k])
                fprintf(f,
                        ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":"
                        "\"ctx %u\"}}",
                        rank, k, k);
        for (uint32_t k = 0; k < nctx; k++) {
            uint64_t kept = heads[k] < cap ? heads[k] : cap;
            for (uint64_t i = 0; i < kept; i++) dion__trace_json_event(f, &ev[k * cap + i], rank, k, base, 0);
        }
        for (uint64_t i = 0; i < host_kept; i++) {
            uint32_t tid = DION__TRACE_HOST_TID + t->host_events[i].thread;
            dion__trace_json_event(f, &t->host_events[i], rank, tid, base, 0);
        }
        /* thread names of the host tracks, after their events: a track may appear in any order */
        for (uint64_t i = 0; i < host_kept; i++) {
            uint32_t th = t->host_events[i].thread;
            int seen = 0;
            for (uint64_t j = 0; j < i && !seen; j++) seen = t->host_events[j].thread == th;
            if (!seen)
                fprintf(f,
                        ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":"
                        "\"proxy %u\"}}",
                        rank, DION__TRACE_HOST_TID + th, th);
        }
        fprintf(f, "\n]}\n");
        if (ferror(f) | (fclose(f) != 0))
            st = dion__error_set(DION_ERR_INVALID_ARG, "trace: writing %s failed: %s", path, strerror(errno));
        /* the host events were shifted in place: shift them back so that a second write agrees */
        for (uint64_t i = 0; i < host_kept; i++) {
            t->host_events[i].start_ns -= (uint64_t)host_shift;
            t->host_events[i].end_ns -= (uint64_t)host_shift;
        }
        uint64_t recorded = dion__trace_device_total(t, heads, nctx);
        if (st == DION_SUCCESS && !t->cpu && recorded == 0)
            DION_LOG(DION_LOG_WARN,
                     "trace %s: no device operation was recorded; GPU kernels record only when compiled with "
                     "-DDION_TRACE_COMPILED=1 (docs/tracing.md)",
                     path);
        if (st == DION_SUCCESS && dropped + host_dropped)
            DION_LOG(
                DION_LOG_WARN,
                "trace %s: %llu events dropped (the arrays hold %llu per context); raise DION_TRACE_EVENTS",
                path, (unsigned long long)(dropped + host_dropped), (unsigned long long)cap);
    }
    free(heads);
    if (!t->cpu) free(ev);
    return st;
}

/* Appends text before a trailing ".json" of buf (or at its end). */
static int dion__trace_insert(char *buf, size_t cap, const char *text)
{
    size_t n = strlen(buf), k = strlen(text);
    size_t at = n >= 5 && !strcmp(buf + n - 5, ".json") ? n - 5 : n;
    if (n + k + 1 > cap) return 0;
    memmove(buf + at + k, buf + at, n - at + 1);
    memcpy(buf + at, text, k);
    return 1;
}

int dion__trace_path(const char *pattern, int rank, unsigned n, char *out, size_t cap)
{
    char num[32];
    snprintf(num, sizeof num, "%d", rank);
    size_t k = 0;
    int subst = 0;
    for (const char *p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            size_t len = strlen(num);
            if (k + len >= cap) return 0;
            memcpy(out + k, num, len);
            k += len;
            p++;
            subst = 1;
            continue;
        }
        if (k + 1 >= cap) return 0;
        out[k++] = *p;
    }
    if (k >= cap) return 0;
    out[k] = 0;
    if (!subst) {
        char rk[48];
        snprintf(rk, sizeof rk, ".rank%d", rank);
        if (!dion__trace_insert(out, cap, rk)) return 0;
        if (strlen(out) < 5 || strcmp(out + strlen(out) - 5, ".json") != 0)
            if (!dion__trace_insert(out, cap, ".json")) return 0;
    }
    if (n > 0) {
        char dv[32];
        snprintf(dv, sizeof dv, ".dev%u", n);
        if (!dion__trace_insert(out, cap, dv)) return 0;
    }
    return 1;
}

/* ---- dev.c's hooks ---- */

dion_status_t dion__trace_create(dion_comm_t c, int cpu, uint32_t num_contexts, struct dion__trace **out)
{
    *out = NULL;
    const char *path = dion__cfg_str("DION_TRACE");
    if (!path || !*path) return DION_SUCCESS;
    long long events = 0;
    dion_status_t st = dion__cfg_int("DION_TRACE_EVENTS", 1, 1 << 24, &events);
    if (st != DION_SUCCESS) return st;
    if (!cpu && c->cuda_device >= 0) cudaSetDevice(c->cuda_device);
    st = dion__trace_new(cpu, num_contexts, (uint64_t)events, DION__TRACE_HOST_EVENTS, out);
    /* handles are made collectively, so every rank numbers them alike */
    if (st == DION_SUCCESS) (*out)->number = __atomic_fetch_add(&dion__trace_handles, 1, __ATOMIC_RELAXED);
    if (st == DION_SUCCESS)
        DION_LOG(DION_LOG_INFO, "trace: %u contexts x %lld events, written to %s at dion_dev_destroy",
                 num_contexts, events, path);
    return st;
}

void dion__trace_attach(struct dion__trace *t, dion_dev_t *dev)
{
    if (!t) return;
    dev->trace = t->dev;
    dev->flags |= DION_DEVF_TRACE;
}

void dion__trace_finish(dion_comm_t c, struct dion__trace **tp)
{
    struct dion__trace *t = *tp;
    *tp = NULL;
    if (!t) return;
    const char *pattern = dion__cfg_str("DION_TRACE");
    char path[4096];
    if (!pattern || !dion__trace_path(pattern, c->rank, t->number, path, sizeof path)) {
        DION_LOG(DION_LOG_WARN, "trace: DION_TRACE is unset or too long; the trace was not written");
    } else {
        if (!t->cpu && c->cuda_device >= 0) cudaSetDevice(c->cuda_device);
        if (dion__trace_write(t, path, c->rank, c->info[c->rank].host) != DION_SUCCESS)
            DION_LOG(DION_LOG_WARN, "%s", dion_last_error());
        else
            DION_LOG(DION_LOG_INFO, "trace written to %s", path);
    }
    dion__trace_free(t);
}
