/* Proxy threads: each drains its share of the rings in batches, hands the commands to the engine through
 * dion__proxy_exec_t, frees slots and publishes completions. A thread with nothing to do spins for
 * DION_PROXY_SPIN, then sleeps with doubling naps up to DION_PROXY_SLEEP_MAX: an idle ring costs a wake-up
 * per nap, and the first command after a quiet spell waits up to one nap (docs/backends/proxy.md). Where the
 * engine has a wait object (tcp), a nap is a poll(2) on it, so peers' operations that need this rank's
 * progress end the nap when they arrive; ring producers (GPU threads among them) cannot write a descriptor,
 * so the nap's bound stays their wake-up. stop wakes every thread through an eventfd. */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "proxy.h"
#include "src/cuda.h"
#include "src/internal.h"

/* Commands handed to execute at once, and batches per ring per pass (so that one busy ring does not starve
 * the thread's others). */
#define DION__PROXY_BATCH       64u
#define DION__PROXY_RING_ROUNDS 4u
#define DION__PROXY_THREADS_MAX 256

typedef struct {
    dion__proxy_threads_t *owner;
    uint32_t index;
    pthread_t tid;
    int started;
    dion__proxy_ring_t **rings;
    uint32_t nrings;
    int pin;
    cpu_set_t cpus;
    dion__proxy_thread_stats_t stats; /* written by the thread with relaxed atomics */
} dion__proxy_thread_t;

struct dion__proxy_threads {
    dion__proxy_exec_t exec;
    uint32_t n;
    int stop;
    uint64_t spin_ns, sleep_max_ns;
    int stop_fd; /* eventfd written by stop: ends every nap at once (-1: none, naps run out) */
    dion__proxy_ring_t **all;
    uint32_t nall;
    dion__proxy_thread_t *th;
};

#define DION__STAT_ADD(field, v) __atomic_fetch_add(&(field), (v), __ATOMIC_RELAXED)

static inline void dion__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

/* One pass over one ring: up to DION__PROXY_RING_ROUNDS batches. Returns 1 when it handed over commands. */
static int dion__proxy_drain(dion__proxy_thread_t *t, dion__proxy_ring_t *r)
{
    const dion__proxy_exec_t *ex = &t->owner->exec;
    int did = 0;
    for (uint32_t round = 0; round < DION__PROXY_RING_ROUNDS && !r->failed; round++) {
        dion_proxy_cmd_t *cmds = NULL;
        uint32_t n = dion__proxy_ring_poll(r, DION__PROXY_BATCH, &cmds);
        if (n == 0) break;
        uint32_t taken = 0;
        dion_status_t st = ex->execute(ex->arg, t->index, r, cmds, n, &taken);
        if (taken > n) taken = n;
        if (taken) {
            dion__proxy_ring_taken(r, taken);
            DION__STAT_ADD(t->stats.commands, taken);
            did = 1;
        }
        if (st != DION_SUCCESS) {
            dion__proxy_ring_fail(r, st, dion_last_error());
            break;
        }
        if (taken < n) break; /* the engine is out of resources: let progress free some */
    }
    if (!r->failed && r->freed < r->next) dion__proxy_ring_reclaim(r); /* fetching atomics read since */
    dion__proxy_ring_publish(r);
    return did;
}

/* One nap of at most ns: a poll(2) on the engine's wait descriptor where it has one, and on the stop
 * eventfd. Returns 1 when the engine's descriptor (or an arm that found work) ended it: work for progress. */
static int dion__proxy_nap(dion__proxy_thread_t *t, uint64_t ns)
{
    dion__proxy_threads_t *o = t->owner;
    struct pollfd pf[2];
    nfds_t n = 0;
    int efd = -1;
    if (o->exec.wait) {
        int w = o->exec.wait(o->exec.arg, t->index, &efd);
        if (w > 0) {
            DION__STAT_ADD(t->stats.wakes, 1);
            return 1;
        }
        if (w < 0) efd = -1;
    }
    if (efd >= 0) pf[n++] = (struct pollfd){.fd = efd, .events = POLLIN};
    if (o->stop_fd >= 0) pf[n++] = (struct pollfd){.fd = o->stop_fd, .events = POLLIN};
    DION__STAT_ADD(t->stats.sleeps, 1);
    if (n == 0) {
        struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
        nanosleep(&ts, NULL);
        return 0;
    }
    /* poll counts milliseconds; ppoll takes the nap as it is */
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    int k = ppoll(pf, n, &ts, NULL);
    if (k > 0 && efd >= 0 && (pf[0].revents & (POLLIN | POLLERR | POLLHUP))) {
        DION__STAT_ADD(t->stats.wakes, 1);
        return 1;
    }
    return 0;
}

static void *dion__proxy_thread_main(void *p)
{
    dion__proxy_thread_t *t = p;
    dion__proxy_threads_t *o = t->owner;
    if (t->pin) {
        int e = pthread_setaffinity_np(pthread_self(), sizeof t->cpus, &t->cpus);
        if (e == 0)
            __atomic_store_n(&t->stats.pinned, 1, __ATOMIC_RELAXED);
        else
            DION_LOG(DION_LOG_INFO, "proxy thread %u not pinned: %s", t->index, strerror(e));
    }
    uint64_t idle_since = 0, nap = 0;
    int fresh = 0, fresh_busy = 0; /* the previous pass ended with a progress call, and what it said */
    while (!__atomic_load_n(&o->stop, __ATOMIC_ACQUIRE)) {
        int busy = 0;
        /* Progress, unless the previous pass just did: back to back it finds nothing new, and a command
         * that arrives meanwhile waits for it (the pickup latency). */
        if (o->exec.progress) busy |= fresh ? fresh_busy : o->exec.progress(o->exec.arg, t->index);
        fresh = 0;
        for (uint32_t i = 0; o->exec.prestage && t->nrings > 1 && i < t->nrings; i++) {
            dion_proxy_cmd_t *cmds = NULL;
            uint32_t n =
                t->rings[i]->failed ? 0 : dion__proxy_ring_poll(t->rings[i], DION__PROXY_BATCH, &cmds);
            if (n) o->exec.prestage(o->exec.arg, t->index, t->rings[i], cmds, n);
        }
        for (uint32_t i = 0; i < t->nrings; i++) busy |= dion__proxy_drain(t, t->rings[i]);
        if (busy && o->exec.progress) { /* completions of what was just issued; saves a pass */
            fresh_busy = o->exec.progress(o->exec.arg, t->index);
            for (uint32_t i = 0; i < t->nrings; i++) dion__proxy_ring_publish(t->rings[i]);
            fresh = 1;
        }
        DION__STAT_ADD(t->stats.passes, 1);
        if (busy) {
            idle_since = 0;
            nap = 0;
            continue;
        }
        uint64_t now = dion__now_ns();
        if (idle_since == 0) idle_since = now;
        if (now - idle_since < o->spin_ns) {
            dion__cpu_relax();
            continue;
        }
        nap = nap ? nap * 2 : 1000;
        if (nap > o->sleep_max_ns) nap = o->sleep_max_ns;
        /* peers' operations arrive: serve them, and nap short again (1 us, doubling) rather than spin, so
         * that a rank that only receives costs a wake-up per arrival, not a core */
        if (dion__proxy_nap(t, nap)) nap = 0;
    }
    return NULL;
}

/* ---- topology ---- */

int dion__proxy_parse_cpulist(const char *text, cpu_set_t *set)
{
    CPU_ZERO(set);
    int count = 0;
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\n' || *p == 0) return 0; /* a node without CPUs */
    for (;;) {
        if (!isdigit((unsigned char)*p)) return -1;
        char *end;
        unsigned long a = strtoul(p, &end, 10), b = a;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)p[1])) return -1;
            b = strtoul(p + 1, &end, 10);
            p = end;
            if (b < a) return -1;
        }
        for (unsigned long c = a; c <= b && c < CPU_SETSIZE; c++) {
            if (!CPU_ISSET(c, set)) count++;
            CPU_SET(c, set);
        }
        if (*p == ',') {
            p++;
            continue;
        }
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        return *p == 0 ? count : -1;
    }
}

static int dion__proxy_read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return (int)n;
}

int dion__proxy_numa_cpus(const char *sysroot, const char *busid, cpu_set_t *set)
{
    CPU_ZERO(set);
    unsigned dom, bus, devn, fn;
    /* CUDA writes the domain with 4 or 8 hex digits and upper case; sysfs wants 4 and lower case */
    if (!busid || sscanf(busid, "%x:%x:%x.%x", &dom, &bus, &devn, &fn) != 4) return 0;
    char path[512], buf[4096];
    snprintf(path, sizeof path, "%s/sys/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", sysroot ? sysroot : "",
             dom, bus, devn, fn);
    if (dion__proxy_read_small(path, buf, sizeof buf) <= 0) return 0;
    char *end;
    long node = strtol(buf, &end, 10);
    if (end == buf || node < 0) return 0; /* -1: the platform does not say */
    snprintf(path, sizeof path, "%s/sys/devices/system/node/node%ld/cpulist", sysroot ? sysroot : "", node);
    if (dion__proxy_read_small(path, buf, sizeof buf) < 0) return 0;
    int n = dion__proxy_parse_cpulist(buf, set);
    return n > 0 ? n : 0;
}

/* CPUs near GPU dev that this process may run on; 0 when unknown or none. */
static int dion__proxy_gpu_cpus(int dev, cpu_set_t *set)
{
    char bus[64];
    cudaError_t e = cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        DION_LOG(DION_LOG_INFO, "proxy threads not pinned: no PCI bus id for GPU %d (%s)", dev,
                 cudaGetErrorString(e));
        return 0;
    }
    cpu_set_t node, allowed;
    if (dion__proxy_numa_cpus("", bus, &node) == 0) {
        DION_LOG(DION_LOG_INFO, "proxy threads not pinned: the topology gives no NUMA node for GPU %d (%s)",
                 dev, bus);
        return 0;
    }
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
    CPU_AND(set, &node, &allowed);
    int n = CPU_COUNT(set);
    if (n == 0)
        DION_LOG(DION_LOG_INFO, "proxy threads not pinned: this process may not run on GPU %d's NUMA node",
                 dev);
    else
        DION_LOG(DION_LOG_INFO, "proxy threads pinned to the %d CPUs of GPU %d's NUMA node (%s)", n, dev,
                 bus);
    return n;
}

/* ---- start / stop ---- */

dion_status_t dion__proxy_threads_start(dion__proxy_ring_t *const *rings, uint32_t nrings,
                                        const dion__proxy_exec_t *exec, int cuda_device,
                                        dion__proxy_threads_t **out)
{
    if (!exec || !exec->execute || (nrings && !rings))
        return dion__error(DION_ERR_INVALID_ARG, "proxy threads: no execute callback or no ring array");
    long long want = 1;
    uint64_t spin = 0, sleep_max = 0;
    dion_status_t st = dion__cfg_int("DION_PROXY_THREADS", 1, DION__PROXY_THREADS_MAX, &want);
    if (st == DION_SUCCESS) st = dion__cfg_duration_ns("DION_PROXY_SPIN", &spin);
    if (st == DION_SUCCESS) st = dion__cfg_duration_ns("DION_PROXY_SLEEP_MAX", &sleep_max);
    if (st != DION_SUCCESS) return st;
    if (exec->nap_max_ns && exec->nap_max_ns < sleep_max) sleep_max = exec->nap_max_ns;
    if (sleep_max < 1000) sleep_max = 1000;
    uint32_t n = nrings < (uint32_t)want ? nrings : (uint32_t)want;
    if (n == 0) n = 1; /* a thread also drives the engine's progress when there is no ring yet */
    dion__proxy_threads_t *o = calloc(1, sizeof *o);
    if (o) o->th = calloc(n, sizeof *o->th);
    /* the rings grouped by thread: ring i goes to thread i % n, and each thread's list is a run of o->all */
    if (o && nrings) o->all = calloc(nrings, sizeof *o->all);
    if (!o || !o->th || (nrings && !o->all)) {
        if (o) {
            free(o->th);
            free(o->all);
        }
        free(o);
        return dion__error(DION_ERR_NO_MEMORY, "out of memory for proxy threads");
    }
    o->exec = *exec;
    o->n = n;
    o->spin_ns = spin;
    o->sleep_max_ns = sleep_max;
    o->nall = nrings;
    o->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* without one, stop waits for the naps to end */
    cpu_set_t near;
    int pin = cuda_device >= 0 && dion__proxy_gpu_cpus(cuda_device, &near) > 0;
    uint32_t k = 0;
    for (uint32_t th = 0; th < n; th++) {
        dion__proxy_thread_t *t = &o->th[th];
        t->owner = o;
        t->index = th;
        t->rings = o->all ? o->all + k : NULL;
        for (uint32_t i = th; i < nrings; i += n) o->all[k++] = rings[i];
        t->nrings = t->rings ? (uint32_t)(o->all + k - t->rings) : 0;
        t->stats.rings = t->nrings;
        t->pin = pin;
        if (pin) t->cpus = near;
    }
    for (uint32_t th = 0; th < n; th++) {
        int e = pthread_create(&o->th[th].tid, NULL, dion__proxy_thread_main, &o->th[th]);
        if (e != 0) {
            dion__proxy_threads_stop(o);
            return dion__error(DION_ERR_NO_MEMORY, "cannot start proxy thread %u of %u: %s", th, n,
                               strerror(e));
        }
        o->th[th].started = 1;
    }
    DION_LOG(DION_LOG_INFO, "%u proxy thread%s for %u ring%s (spin %llu ns, naps up to %llu ns%s)", n,
             n == 1 ? "" : "s", nrings, nrings == 1 ? "" : "s", (unsigned long long)spin,
             (unsigned long long)sleep_max,
             exec->wait ? ", blocking on the engine's wait object where it has one" : "");
    *out = o;
    return DION_SUCCESS;
}

void dion__proxy_threads_stop(dion__proxy_threads_t *o)
{
    if (!o) return;
    __atomic_store_n(&o->stop, 1, __ATOMIC_RELEASE);
    if (o->stop_fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(o->stop_fd, &one, sizeof one); /* should it fail, the naps run out instead */
        (void)w;
    }
    for (uint32_t i = 0; i < o->n; i++)
        if (o->th[i].started) {
            pthread_join(o->th[i].tid, NULL);
            const dion__proxy_thread_stats_t *s = &o->th[i].stats;
            if (s->commands)
                DION_LOG(DION_LOG_INFO,
                         "proxy thread %u: %llu commands, %llu passes, %llu naps (%llu ended by the engine)",
                         i, (unsigned long long)s->commands, (unsigned long long)s->passes,
                         (unsigned long long)s->sleeps, (unsigned long long)s->wakes);
        }
    if (o->stop_fd >= 0) close(o->stop_fd);
    for (uint32_t i = 0; i < o->nall; i++) dion__proxy_ring_publish(o->all[i]);
    free(o->all);
    free(o->th);
    free(o);
}

uint32_t dion__proxy_threads_count(const dion__proxy_threads_t *o)
{
    return o->n;
}

void dion__proxy_threads_stats(const dion__proxy_threads_t *o, uint32_t thread,
                               dion__proxy_thread_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (thread >= o->n) return;
    const dion__proxy_thread_stats_t *s = &o->th[thread].stats;
    out->passes = __atomic_load_n(&s->passes, __ATOMIC_RELAXED);
    out->commands = __atomic_load_n(&s->commands, __ATOMIC_RELAXED);
    out->sleeps = __atomic_load_n(&s->sleeps, __ATOMIC_RELAXED);
    out->wakes = __atomic_load_n(&s->wakes, __ATOMIC_RELAXED);
    out->rings = s->rings;
    out->pinned = __atomic_load_n(&s->pinned, __ATOMIC_RELAXED);
}
