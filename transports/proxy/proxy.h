/* The proxy backend's host half, internal interface: command rings (ring.c) and the threads that drain them
 * (threads.c). The engine glue plugs in through dion__proxy_exec_t. Device half: device/proxy.cuh; command
 * layout: device/proxy_proto.cuh; protocol and threading: docs/backends/proxy.md. */
#ifndef DION_TRANSPORT_PROXY_H
#define DION_TRANSPORT_PROXY_H

#include <sched.h>
#include <stdint.h>

#include "dion/device/proxy_proto.cuh"
#include "dion/dion.h"

#ifdef __cplusplus /* GPU tests and benchmarks call these from CUDA C++ */
extern "C" {
#endif

/* ---- rings (ring.c) ---- */

#define DION__PROXY_RING_MIN 2u
#define DION__PROXY_RING_MAX (1u << 24)

typedef struct dion__proxy_ring {
    dion_proxy_ring_dev_t dev; /* device pointers: what kernels (or CPU-mode threads) post through */
    /* host views of the same memory */
    dion_proxy_cmd_t *slots;
    dion_proxy_ctl_t *ctl;
    uint64_t *abandon;
    uint32_t nslots;
    uint32_t ctx; /* the context this ring serves; informative (logs, callbacks) */
    int on_gpu;   /* 1: slots/ctl/abandon from cudaHostAlloc and dev.prod from cudaMalloc */
    /* consumer state: touched only by the one thread that drains the ring */
    uint64_t next;      /* next position to hand to the engine */
    uint64_t freed;     /* positions whose slots may be reused (published as ctl->consumed) */
    uint64_t completed; /* positions complete as reported by the engine (published as ctl->completed) */
    uint64_t completed_pub;
    uint32_t abandon_seen; /* abandon[] entries already turned into NOPs */
    int failed;            /* the ring was failed: not drained any more */
    uint64_t executed, skipped;
} dion__proxy_ring_t;

/* Allocates a ring of nslots (a power of two in [DION__PROXY_RING_MIN, DION__PROXY_RING_MAX]) for context
 * ctx. on_gpu: slots and counters in pinned host memory mapped into the current GPU, the producer words in
 * GPU memory; otherwise (CPU mode) everything in ordinary host memory. */
dion_status_t dion__proxy_ring_create(uint32_t ctx, uint32_t nslots, int on_gpu, dion__proxy_ring_t **out);
void dion__proxy_ring_destroy(dion__proxy_ring_t *r);

/* Consumer side; one thread per ring at a time.
 * poll: up to max commands ready at r->next, contiguous in the ring (a run stops at the wrap), in order.
 * Slots of abandoned tickets come back as NOP commands. Returns 0 when nothing is ready or the ring failed.
 */
uint32_t dion__proxy_ring_poll(dion__proxy_ring_t *r, uint32_t max, dion_proxy_cmd_t **cmds);
/* The engine took the first n commands that poll returned: they are executed or in flight. Frees their slots
 * (except fetching atomics, freed once the result is written and the producer released the slot) and
 * publishes ctl->consumed. */
void dion__proxy_ring_taken(dion__proxy_ring_t *r, uint32_t n);
/* Frees slots of fetching atomics that became free since; returns 1 when some are still held. */
int dion__proxy_ring_reclaim(dion__proxy_ring_t *r);
/* Everything before ring position `upto` is complete (monotonic; the seq of a command is its position + 1,
 * so "this command and all before it" is dion__proxy_ring_complete(r, cmd->seq & ~DION_PROXY_SEQ_RELEASED)).
 */
void dion__proxy_ring_complete(dion__proxy_ring_t *r, uint64_t upto);
/* Publishes the completion count to ctl->completed if it moved. */
void dion__proxy_ring_publish(dion__proxy_ring_t *r);
/* Fails the ring with status s: producers and quiets return s; nothing more is drained. Logs why. */
void dion__proxy_ring_fail(dion__proxy_ring_t *r, dion_status_t s, const char *why);
/* Adds 1 to local counter id (DION_PROXY_F_LOCAL_COUNT). */
void dion__proxy_ring_count(dion__proxy_ring_t *r, uint32_t id);
/* Writes a fetching atomic's old value into its command (result, then result_tag). */
void dion__proxy_cmd_result(dion_proxy_cmd_t *c, uint64_t value);
/* The command's ring position. */
static inline uint64_t dion__proxy_cmd_pos(const dion_proxy_cmd_t *c)
{
    return (c->seq & ~DION_PROXY_SEQ_RELEASED) - 1;
}

/* ---- proxy threads (threads.c) ---- */

/* What a proxy thread calls; the engine glue fills it (tests fill it with checkers).
 *
 * Contract for engines, per ring (= context):
 *  - execute gets commands in ring order and must give every peer's effects in that order where the op says
 * so: PUT_SIGNAL's signal never becomes visible at the target before the put's data (provider ordering for
 *    write-after-write plus atomics, a provider fence, or holding the signal until the data's completion);
 *    SIGNAL is ordered after every earlier PUT / PUT_SIGNAL of the ring to that peer; FENCE orders everything
 *    before it before everything after it, per peer; QUIET completes only after every earlier command
 * completed.
 *  - completion is reported in ring order with dion__proxy_ring_complete: a position is complete when its
 * effects are visible at the target (data delivered, GET data in the local window and visible to the GPU).
 *  - DION_PROXY_F_LOCAL_COUNT: call dion__proxy_ring_count once the source may be reused (at the latest at
 *    completion; an engine read of the source: at its completion; bytes copied at post: at once), and in ring
 *    order among the ring's counted commands (docs/semantics.md, "Local completion counters").
 *  - fetching atomics: write the result with dion__proxy_cmd_result, always (on failure too, then fail the
 * ring); the command's slot stays valid until then.
 *  - NOP: complete in order, nothing else. */
typedef struct {
    /* Executes or starts cmds[0..n) of ring r; sets *taken (<= n; fewer when out of resources, the rest come
     * again). May not block on the network. A failure status fails the ring. `thread` is the calling proxy
     * thread's index: engines keep one instance per thread. */
    dion_status_t (*execute)(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                             uint32_t n, uint32_t *taken);
    /* May be NULL. Drives the engine of `thread` (completion queues, incoming operations of providers with
     * manual progress) and reports completions; called on every pass, idle ones included. Returns nonzero
     * while operations are in flight or it did work: the thread then does not back off. */
    int (*progress)(void *arg, uint32_t thread);
    void *arg;
    /* May be NULL. Called when the thread is about to nap: 0 with *fd set: the thread blocks on *fd (readable
     * once the engine has work for progress: peers' operations arriving) for at most the nap instead of
     * sleeping blind; 1: progress has work now (no nap); -1: no wait object, nap. Its own locking. */
    int (*wait)(void *arg, uint32_t thread, int *fd);
    /* Longest nap; 0: DION_PROXY_SLEEP_MAX. Set shorter where peers' operations need this rank's progress
     * and nothing tells the thread they arrive (no wait object, no counter): they wait for its next nap. */
    uint64_t nap_max_ns;
    /* May be NULL. Called for each ring's first batch of a pass before any execute of that pass: starts work
     * for it that execute would otherwise wait for (staged sources' copies), so that one wait covers every
     * ring's batch. Takes nothing; execute gets the same commands again. Its own locking. */
    void (*prestage)(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds, uint32_t n);
} dion__proxy_exec_t;

typedef struct dion__proxy_threads dion__proxy_threads_t;

typedef struct {
    uint64_t passes;   /* loops over the thread's rings */
    uint64_t commands; /* commands handed to execute */
    uint64_t sleeps;   /* back-off sleeps (blind naps and blocking waits) */
    uint64_t wakes;    /* naps the engine's wait object ended early or averted (work found when arming) */
    uint32_t rings;    /* rings this thread drains */
    int pinned;        /* 1 when pinned to the GPU's NUMA node */
} dion__proxy_thread_stats_t;

/* Starts min(DION_PROXY_THREADS, nrings) threads; ring i is drained by thread i % nthreads. cuda_device >= 0:
 * pin the threads to the CPUs of that GPU's NUMA node when the topology says so. The rings must outlive the
 * threads. */
dion_status_t dion__proxy_threads_start(dion__proxy_ring_t *const *rings, uint32_t nrings,
                                        const dion__proxy_exec_t *exec, int cuda_device,
                                        dion__proxy_threads_t **out);
/* Stops and joins the threads (within the back-off cap), then publishes every ring's counters. */
void dion__proxy_threads_stop(dion__proxy_threads_t *t);
uint32_t dion__proxy_threads_count(const dion__proxy_threads_t *t);
void dion__proxy_threads_stats(const dion__proxy_threads_t *t, uint32_t thread,
                               dion__proxy_thread_stats_t *out);

/* Topology (threads.c; exposed for tests). sysroot: "" for the real /sys, else a folder laid out like it.
 * Parses a Linux cpulist ("0-3,8,10-11"); returns the number of CPUs, -1 when malformed. */
int dion__proxy_parse_cpulist(const char *text, cpu_set_t *set);
/* CPUs of the NUMA node of PCI device busid ("0000:3B:00.0", any case); returns their number, 0 when the
 * topology does not say (no such files, node -1). */
int dion__proxy_numa_cpus(const char *sysroot, const char *busid, cpu_set_t *set);

#ifdef __cplusplus
}
#endif

#endif /* DION_TRANSPORT_PROXY_H */
