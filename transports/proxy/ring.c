/* Command rings, host side: allocation where both the GPU and the proxy reach them, and the consumer's half
 * of the protocol (take commands in position order, turn abandoned tickets into NOPs, free slots, publish the
 * counters). The producers' half is device/proxy.cuh. */
#include <stdlib.h>
#include <string.h>

#include "proxy.h"
#include "src/cuda.h"
#include "src/internal.h"

static size_t dion__proxy_host_bytes(uint32_t nslots)
{
    return (size_t)nslots * sizeof(dion_proxy_cmd_t) + sizeof(dion_proxy_ctl_t) +
           DION_PROXY_ABANDON_MAX * sizeof(uint64_t);
}

static void dion__proxy_ring_free(dion__proxy_ring_t *r)
{
    if (r->on_gpu) {
        if (r->slots) cudaFreeHost(r->slots);
        if (r->dev.prod) cudaFree(r->dev.prod);
    } else {
        free(r->slots);
        free(r->dev.prod);
    }
    free(r);
}

dion_status_t dion__proxy_ring_create(uint32_t ctx, uint32_t nslots, int on_gpu, dion__proxy_ring_t **out)
{
    if (nslots < DION__PROXY_RING_MIN || nslots > DION__PROXY_RING_MAX || (nslots & (nslots - 1)))
        return dion__error(
            DION_ERR_INVALID_ARG,
            "proxy ring for context %u: %u slots is not a power of two in [%u, %u]; choose one "
            "in that range",
            ctx, nslots, DION__PROXY_RING_MIN, DION__PROXY_RING_MAX);
    dion__proxy_ring_t *r = calloc(1, sizeof *r);
    if (!r) return dion__error(DION_ERR_NO_MEMORY, "out of memory for a proxy ring");
    r->nslots = nslots;
    r->ctx = ctx;
    r->on_gpu = on_gpu;
    size_t bytes = dion__proxy_host_bytes(nslots);
    char *host = NULL, *dev = NULL;
    dion_status_t st = DION_SUCCESS;
    if (on_gpu) {
        /* pinned and mapped: GPU threads write commands over PCIe, the proxy reads them from its own memory;
         * portable: any context of this process may post */
        st = dion__cuda_check(
            cudaHostAlloc((void **)&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
            "cudaHostAlloc for a proxy ring");
        if (st == DION_SUCCESS) {
            r->slots = (dion_proxy_cmd_t *)host;
            memset(host, 0, bytes);
            st = dion__cuda_check(cudaHostGetDevicePointer((void **)&dev, host, 0),
                                  "cudaHostGetDevicePointer for a proxy ring");
        }
        /* the producers' words stay in GPU memory: their atomics never cross PCIe */
        if (st == DION_SUCCESS)
            st = dion__cuda_check(cudaMalloc((void **)&r->dev.prod, sizeof(dion_proxy_prod_t)),
                                  "cudaMalloc for a proxy ring's head");
        if (st == DION_SUCCESS) st = dion__cuda_zero(r->dev.prod, sizeof(dion_proxy_prod_t));
    } else {
        host = aligned_alloc(64, bytes);
        r->slots = (dion_proxy_cmd_t *)host;
        r->dev.prod = aligned_alloc(64, sizeof(dion_proxy_prod_t));
        if (!host || !r->dev.prod) {
            st = dion__error(DION_ERR_NO_MEMORY, "out of memory for a proxy ring of %u slots", nslots);
        } else {
            memset(host, 0, bytes);
            memset(r->dev.prod, 0, sizeof(dion_proxy_prod_t));
            dev = host;
        }
    }
    if (st != DION_SUCCESS) {
        dion__proxy_ring_free(r);
        return st;
    }
    size_t ctl_off = (size_t)nslots * sizeof(dion_proxy_cmd_t);
    size_t ab_off = ctl_off + sizeof(dion_proxy_ctl_t);
    r->ctl = (dion_proxy_ctl_t *)(host + ctl_off);
    r->abandon = (uint64_t *)(host + ab_off);
    r->dev.slots = (dion_proxy_cmd_t *)dev;
    r->dev.ctl = (dion_proxy_ctl_t *)(dev + ctl_off);
    r->dev.abandon = (uint64_t *)(dev + ab_off);
    r->dev.abort = NULL;
    r->dev.mask = nslots - 1;
    r->dev.scope = on_gpu ? DION_SCOPE_GPU : DION_SCOPE_SYS;
    *out = r;
    return DION_SUCCESS;
}

void dion__proxy_ring_destroy(dion__proxy_ring_t *r)
{
    if (r) dion__proxy_ring_free(r);
}

void dion__proxy_ring_fail(dion__proxy_ring_t *r, dion_status_t s, const char *why)
{
    if (r->failed) return;
    uint64_t expected = 0; /* keep a status a producer wrote first */
    __atomic_compare_exchange_n(&r->ctl->status, &expected, (uint64_t)s, 0, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
    /* after status: a publish that sees failed sets DION_PROXY_COMPLETED_FAILED, and a waiter that sees that
     * bit reads status */
    __atomic_store_n(&r->failed, 1, __ATOMIC_RELEASE);
    DION_LOG(DION_LOG_ERROR, "proxy ring of context %u failed at position %llu (%s): %s", r->ctx,
             (unsigned long long)r->next, dion_status_string(s), why);
}

/* Whether a producer gave up ticket pos: it is then in abandon[] as pos + 1. */
static int dion__proxy_ring_abandoned(dion__proxy_ring_t *r, uint64_t pos)
{
    if (!__atomic_load_n(&r->ctl->abandoned, __ATOMIC_ACQUIRE)) return 0;
    /* entries are claimed in order but may be written out of order: look at all of them */
    for (uint32_t k = 0; k < DION_PROXY_ABANDON_MAX; k++)
        if (__atomic_load_n(&r->abandon[k], __ATOMIC_ACQUIRE) == pos + 1) return 1;
    return 0;
}

static int dion__proxy_op_fetches(uint8_t op)
{
    return op == DION_PROXY_OP_FETCH_ADD || op == DION_PROXY_OP_COMPARE_SWAP;
}

uint32_t dion__proxy_ring_poll(dion__proxy_ring_t *r, uint32_t max, dion_proxy_cmd_t **cmds)
{
    if (r->failed) return 0;
    uint64_t st = __atomic_load_n(&r->ctl->status, __ATOMIC_ACQUIRE);
    if (st) { /* a producer failed it: more than DION_PROXY_ABANDON_MAX tickets abandoned */
        dion__proxy_ring_fail(r, (dion_status_t)st,
                              "producers abandoned more tickets than the ring can track after timeouts");
        return 0;
    }
    uint64_t pos = r->next;
    uint32_t room = r->nslots - (uint32_t)(pos & r->dev.mask); /* a run stops at the wrap */
    uint32_t limit = max < room ? max : room, n = 0;
    for (; n < limit; n++) {
        uint64_t p = pos + n;
        dion_proxy_cmd_t *c = &r->slots[p & r->dev.mask];
        uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) & ~DION_PROXY_SEQ_RELEASED;
        if (seq != p + 1) {
            /* Not published. A hole only if its producer gave up, and then the slot must also be free of its
             * previous command (a fetching atomic may still hold it) before it is overwritten. */
            if (p >= r->freed + r->nslots || !dion__proxy_ring_abandoned(r, p)) break;
            memset(c, 0, sizeof *c);
            c->version = DION_PROXY_PROTO_VERSION;
            c->op = DION_PROXY_OP_NOP;
            c->peer = -1;
            __atomic_store_n(&c->seq, p + 1, __ATOMIC_RELAXED);
            r->skipped++;
            DION_LOG(DION_LOG_WARN,
                     "proxy ring of context %u: position %llu was abandoned by its producer after "
                     "a timeout; skipped",
                     r->ctx, (unsigned long long)p);
            continue;
        }
        if (c->version != DION_PROXY_PROTO_VERSION || c->op >= DION_PROXY_OP_COUNT) {
            char why[200];
            snprintf(why, sizeof why,
                     "the command has protocol version %u and op %u, this library speaks version %u with ops "
                     "below "
                     "%u: rebuild the kernels against this library's headers",
                     c->version, c->op, DION_PROXY_PROTO_VERSION, (unsigned)DION_PROXY_OP_COUNT);
            if (n == 0) {
                dion__proxy_ring_fail(r, DION_ERR_UNSUPPORTED, why);
                return 0;
            }
            break; /* hand over the good ones first; the next poll fails the ring here */
        }
    }
    *cmds = &r->slots[pos & r->dev.mask];
    return n;
}

int dion__proxy_ring_reclaim(dion__proxy_ring_t *r)
{
    uint64_t f = r->freed;
    while (f < r->next) {
        dion_proxy_cmd_t *c = &r->slots[f & r->dev.mask];
        if (dion__proxy_op_fetches(c->op)) {
            /* free once the producer read the result (or gave up) and the result was written: after that
             * nobody writes this slot until its next producer */
            uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
            if (!(seq & DION_PROXY_SEQ_RELEASED) ||
                __atomic_load_n(&c->u.amo.result_tag, __ATOMIC_RELAXED) != f + 1)
                break;
        }
        f++;
    }
    if (f != r->freed) {
        r->freed = f;
        /* release: this thread's reads of the freed slots come before a producer's writes into them */
        __atomic_store_n(&r->ctl->consumed, f, __ATOMIC_RELEASE);
    }
    return f < r->next;
}

void dion__proxy_ring_taken(dion__proxy_ring_t *r, uint32_t n)
{
    r->next += n;
    r->executed += n;
    dion__proxy_ring_reclaim(r);
}

void dion__proxy_ring_complete(dion__proxy_ring_t *r, uint64_t upto)
{
    if (upto > r->completed) r->completed = upto;
}

void dion__proxy_ring_publish(dion__proxy_ring_t *r)
{
    /* a failed ring says so in the word its waiters poll (status is written before: ring_fail) */
    uint64_t v =
        r->completed | (__atomic_load_n(&r->failed, __ATOMIC_ACQUIRE) ? DION_PROXY_COMPLETED_FAILED : 0);
    if (v == r->completed_pub) return;
    r->completed_pub = v;
    /* release: effects the engine made visible (GET data, results) come before the count */
    __atomic_store_n(&r->ctl->completed, v, __ATOMIC_RELEASE);
}

void dion__proxy_ring_count(dion__proxy_ring_t *r, uint32_t id)
{
    if (id < DION_PROXY_LCOUNTERS) {
        __atomic_fetch_add(&r->ctl->lcount[id], 1, __ATOMIC_RELEASE);
        return;
    }
    /* dropping the count would leave its waiter to time out with no reason given */
    char why[128];
    snprintf(why, sizeof why, "a command asked for local counter %u; a ring has %u", id,
             DION_PROXY_LCOUNTERS);
    dion__proxy_ring_fail(r, DION_ERR_INVALID_ARG, why);
}

void dion__proxy_cmd_result(dion_proxy_cmd_t *c, uint64_t value)
{
    __atomic_store_n(&c->u.amo.result, value, __ATOMIC_RELAXED);
    __atomic_store_n(&c->u.amo.result_tag, dion__proxy_cmd_pos(c) + 1, __ATOMIC_RELEASE);
}
