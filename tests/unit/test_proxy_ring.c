/* The proxy backend's command ring and proxy threads, in CPU mode: producers are CPU threads running the
 * device code of device/proxy.cuh, the consumer is the real proxy thread with test execute callbacks that
 * check what they get. Subtests: stress, full, quiet, hole, threads, topology (argv[1]; none: all). Every
 * check prints what failed; the exit status counts failures. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dion/device/proxy.cuh"
#include "src/internal.h"
#include "transports/proxy/proxy.h"

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                                              \
        }                                                                                                    \
    } while (0)

#define SEC 1000000000ull
#define MS  1000000ull

static void nap_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

/* A stamped command: (producer, sequence) plus a checksum over both, so that a torn or stale command shows.
 */
static uint64_t stamp_sum(uint32_t producer, uint64_t seq)
{
    uint64_t x = ((uint64_t)producer << 40) ^ seq ^ 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

static dion_proxy_cmd_t stamped(uint32_t producer, uint64_t seq)
{
    dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, (int)producer, 7, seq, 9,
                                             stamp_sum(producer, seq), seq % 4096 + 1);
    dion__proxy_cmd_signal(&c, producer, DION_SIG_ADD, ~seq);
    return c;
}

/* Checks one stamped command; returns its producer, or -1. */
static int check_stamp(const dion_proxy_cmd_t *c, int nproducers)
{
    int p = c->peer;
    if (c->version != DION_PROXY_PROTO_VERSION || c->op != DION_PROXY_OP_PUT || p < 0 || p >= nproducers)
        return -1;
    uint64_t s = c->u.rma.dst_off;
    if (c->u.rma.src_off != stamp_sum((uint32_t)p, s) || c->u.rma.bytes != s % 4096 + 1 ||
        c->u.rma.dst_win != 7 || c->u.rma.src_win != 9 || c->u.rma.sig != (uint32_t)p || c->u.rma.value != ~s)
        return -1;
    return p;
}

/* ---- a checking consumer: per-producer order, exactly once, optional slowness ---- */

#define MAXP 16
typedef struct {
    int nproducers;
    uint64_t expect[MAXP]; /* next sequence number of each producer */
    uint64_t total, nops, bad;
    uint64_t slow_every; /* sleep slow_us every this many commands (0: never) */
    unsigned slow_us;
    uint64_t next_pos; /* ring positions must arrive without gaps */
} checker_t;

static dion_status_t check_exec(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                uint32_t n, uint32_t *taken)
{
    checker_t *k = arg;
    for (uint32_t i = 0; i < n; i++) {
        const dion_proxy_cmd_t *c = &cmds[i];
        uint64_t pos = dion__proxy_cmd_pos(c);
        if (pos != k->next_pos) {
            CHECK(0, "position %llu handed over, expected %llu", (unsigned long long)pos,
                  (unsigned long long)k->next_pos);
            k->bad++;
        }
        k->next_pos = pos + 1;
        if (c->op == DION_PROXY_OP_NOP) {
            k->nops++;
        } else if (c->op == DION_PROXY_OP_QUIET || c->op == DION_PROXY_OP_FENCE) {
        } else {
            int p = check_stamp(c, k->nproducers);
            if (p < 0) {
                if (k->bad++ < 5)
                    CHECK(0, "torn or foreign command at position %llu", (unsigned long long)pos);
            } else if (c->u.rma.dst_off != k->expect[p]) {
                if (k->bad++ < 5)
                    CHECK(0, "producer %d: got sequence %llu, expected %llu (lost, duplicated or reordered)",
                          p, (unsigned long long)c->u.rma.dst_off, (unsigned long long)k->expect[p]);
            } else {
                k->expect[p]++;
            }
            k->total++;
            if (k->slow_every && k->total % k->slow_every == 0) nap_us(k->slow_us);
        }
    }
    dion__proxy_ring_complete(r, dion__proxy_cmd_pos(&cmds[n - 1]) + 1);
    *taken = n;
    return DION_SUCCESS;
}

typedef struct {
    const dion_proxy_ring_dev_t *ring;
    uint32_t id;
    uint64_t count, first;
    uint64_t timeout_ns;
    int warp;
    dion_status_t st;
    uint64_t posted;
} producer_t;

static void *producer_main(void *p)
{
    producer_t *a = p;
    for (uint64_t s = a->first; s < a->first + a->count; s++) {
        dion_proxy_cmd_t c = stamped(a->id, s);
        dion_status_t st = a->warp && (s & 1) ? dion__proxy_post_warp(a->ring, &c, a->timeout_ns, NULL, NULL)
                                              : dion__proxy_post(a->ring, &c, a->timeout_ns, NULL, NULL);
        if (st != DION_SUCCESS) {
            a->st = st;
            return NULL;
        }
        a->posted++;
    }
    return NULL;
}

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

/* 8 producers x DT_STRESS_COUNT commands (1,000,000 by default) through one 256-slot ring, with a consumer
 * that naps 2 ms every 100,000 commands: every command is executed once, in each producer's order, never
 * torn. */
static void test_stress(void)
{
    const int np = 8;
    uint64_t count = env_u64("DT_STRESS_COUNT", 1000000);
    dion__proxy_ring_t *r = NULL;
    CHECK(dion__proxy_ring_create(0, 256, 0, &r) == DION_SUCCESS, "%s", dion_last_error());
    if (!r) return;
    checker_t k;
    memset(&k, 0, sizeof k);
    k.nproducers = np;
    k.slow_every = 100000;
    k.slow_us = 2000;
    dion__proxy_exec_t ex = {check_exec, NULL, &k, NULL, 0, NULL};
    setenv("DION_PROXY_THREADS", "1", 1);
    dion__proxy_threads_t *th = NULL;
    CHECK(dion__proxy_threads_start(&r, 1, &ex, -1, &th) == DION_SUCCESS, "%s", dion_last_error());
    if (!th) return;
    producer_t pr[8];
    pthread_t tid[8];
    for (int i = 0; i < np; i++) {
        pr[i] = (producer_t){&r->dev, (uint32_t)i, count, 0, 60 * SEC, i % 2, DION_SUCCESS, 0};
        pthread_create(&tid[i], NULL, producer_main, &pr[i]);
    }
    for (int i = 0; i < np; i++) pthread_join(tid[i], NULL);
    for (int i = 0; i < np; i++)
        CHECK(pr[i].st == DION_SUCCESS && pr[i].posted == count, "producer %d: %s after %llu posts", i,
              dion_status_string(pr[i].st), (unsigned long long)pr[i].posted);
    CHECK(dion__proxy_quiet(&r->dev, 20 * SEC, NULL) == DION_SUCCESS, "quiet after the stress");
    dion__proxy_threads_stop(th);
    for (int i = 0; i < np; i++)
        CHECK(k.expect[i] == count, "producer %d: %llu of %llu commands executed", i,
              (unsigned long long)k.expect[i], (unsigned long long)count);
    CHECK(k.total == count * np && k.bad == 0 && k.nops == 0, "total %llu, bad %llu, nops %llu",
          (unsigned long long)k.total, (unsigned long long)k.bad, (unsigned long long)k.nops);
    CHECK(r->ctl->consumed == (uint64_t)count * np + 1 && r->ctl->completed == (uint64_t)count * np + 1,
          "consumed %llu completed %llu", (unsigned long long)r->ctl->consumed,
          (unsigned long long)r->ctl->completed);
    printf("stress: %d producers x %llu commands through 256 slots, in order, exactly once\n", np,
           (unsigned long long)count);
    dion__proxy_ring_destroy(r);
}

/* A full ring with no consumer: a post with a short timeout fails with DION_ERR_TIMEOUT and leaves the ring's
 * published commands intact; once the consumer runs, they all execute, the abandoned tickets become NOPs, and
 * posts that waited go through. An abort word ends an unbounded wait. */
static void test_full(void)
{
    dion__proxy_ring_t *r = NULL;
    CHECK(dion__proxy_ring_create(0, 16, 0, &r) == DION_SUCCESS, "%s", dion_last_error());
    if (!r) return;
    for (uint64_t s = 0; s < 16; s++) {
        dion_proxy_cmd_t c = stamped(0, s);
        uint64_t t = 99;
        CHECK(dion__proxy_post(&r->dev, &c, SEC, &t, NULL) == DION_SUCCESS && t == s, "post %llu",
              (unsigned long long)s);
    }
    dion_proxy_cmd_t c = stamped(0, 16);
    uint64_t t = 0, seen = 99;
    CHECK(dion__proxy_post(&r->dev, &c, 20 * MS, &t, &seen) == DION_ERR_TIMEOUT, "a full ring times out");
    CHECK(t == 16 && seen == 0, "ticket %llu, consumed seen %llu", (unsigned long long)t,
          (unsigned long long)seen);
    CHECK(r->ctl->abandoned == 1 && r->abandon[0] == 17, "abandon list: flag %llu entry %llu",
          (unsigned long long)r->ctl->abandoned, (unsigned long long)r->abandon[0]);
    /* three more give up concurrently */
    producer_t late[3];
    pthread_t tid[4];
    for (int i = 0; i < 3; i++) {
        late[i] = (producer_t){&r->dev, 1, 1, 100 + (uint64_t)i, 30 * MS, 0, DION_SUCCESS, 0};
        pthread_create(&tid[i], NULL, producer_main, &late[i]);
    }
    for (int i = 0; i < 3; i++) pthread_join(tid[i], NULL);
    for (int i = 0; i < 3; i++)
        CHECK(late[i].st == DION_ERR_TIMEOUT && late[i].posted == 0, "late producer %d: %s", i,
              dion_status_string(late[i].st));
    /* nothing published was touched */
    for (uint64_t s = 0; s < 16; s++) {
        CHECK(r->slots[s].seq == s + 1 && check_stamp(&r->slots[s], 2) == 0 && r->slots[s].u.rma.dst_off == s,
              "slot %llu changed while the ring was full", (unsigned long long)s);
    }
    /* a patient producer (producer 1 again, sequence 0..39) waits for the consumer */
    producer_t patient = {&r->dev, 1, 40, 0, 30 * SEC, 0, DION_SUCCESS, 0};
    pthread_create(&tid[3], NULL, producer_main, &patient);
    nap_us(20000);
    checker_t k;
    memset(&k, 0, sizeof k);
    k.nproducers = 2;
    dion__proxy_exec_t ex = {check_exec, NULL, &k, NULL, 0, NULL};
    dion__proxy_threads_t *th = NULL;
    CHECK(dion__proxy_threads_start(&r, 1, &ex, -1, &th) == DION_SUCCESS, "%s", dion_last_error());
    pthread_join(tid[3], NULL);
    CHECK(patient.st == DION_SUCCESS && patient.posted == 40, "patient producer: %s",
          dion_status_string(patient.st));
    CHECK(dion__proxy_quiet(&r->dev, 10 * SEC, NULL) == DION_SUCCESS, "quiet");
    dion__proxy_threads_stop(th);
    CHECK(k.expect[0] == 16 && k.expect[1] == 40 && k.nops == 4 && k.bad == 0 && r->skipped == 4,
          "executed %llu + %llu, nops %llu, bad %llu", (unsigned long long)k.expect[0],
          (unsigned long long)k.expect[1], (unsigned long long)k.nops, (unsigned long long)k.bad);
    dion__proxy_ring_destroy(r);

    /* abort: a producer waiting without a limit on a full ring returns the abort status */
    CHECK(dion__proxy_ring_create(1, 2, 0, &r) == DION_SUCCESS, "%s", dion_last_error());
    if (!r) return;
    uint64_t abort_word = 0;
    r->dev.abort = &abort_word;
    producer_t stuck = {&r->dev, 0, 3, 0, 0, 0, DION_SUCCESS, 0};
    pthread_create(&tid[0], NULL, producer_main, &stuck);
    nap_us(20000);
    __atomic_store_n(&abort_word, DION_ERR_ABORTED, __ATOMIC_RELEASE);
    pthread_join(tid[0], NULL);
    CHECK(stuck.st == DION_ERR_ABORTED && stuck.posted == 2, "abort: %s after %llu posts",
          dion_status_string(stuck.st), (unsigned long long)stuck.posted);
    dion__proxy_ring_destroy(r);

    /* beyond DION_PROXY_ABANDON_MAX abandoned tickets the ring fails instead of guessing */
    CHECK(dion__proxy_ring_create(2, 2, 0, &r) == DION_SUCCESS, "%s", dion_last_error());
    if (!r) return;
    for (int i = 0; i < 2; i++) {
        c = stamped(0, (uint64_t)i);
        CHECK(dion__proxy_post(&r->dev, &c, SEC, NULL, NULL) == DION_SUCCESS, "post");
    }
    dion_status_t last = DION_SUCCESS;
    for (unsigned i = 0; i <= DION_PROXY_ABANDON_MAX; i++)
        last = dion__proxy_post(&r->dev, &c, 1000, NULL, NULL);
    CHECK(last == DION_ERR_TIMEOUT && r->ctl->status == DION_ERR_TIMEOUT,
          "overflowing abandons: %s, status %llu", dion_status_string(last),
          (unsigned long long)r->ctl->status);
    dion_proxy_cmd_t *cmds;
    CHECK(dion__proxy_ring_poll(r, 8, &cmds) == 0 && r->failed, "the consumer stops at a failed ring");
    dion__proxy_ring_destroy(r);
    printf("full: timeouts abandon tickets, published commands survive, abort ends waits\n");
}

/* ---- a deferred engine: effects happen at completion, one command per progress call ---- */

typedef struct {
    pthread_mutex_t lock;
    dion__proxy_ring_t *ring;
    struct {
        dion_proxy_cmd_t copy;  /* slots of non-fetching commands are reused once taken: keep a copy */
        dion_proxy_cmd_t *slot; /* fetching ones stay put until the result is written */
    } pending[4096];
    uint32_t npending;
    int stalled;           /* nothing completes while set */
    uint64_t target[2048]; /* PUT effects: target[dst_off] = value */
    uint64_t word;         /* atomics' target */
    uint64_t done, counted;
} deferred_t;

static dion_status_t deferred_exec(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                   uint32_t n, uint32_t *taken)
{
    deferred_t *d = arg;
    uint32_t i = 0;
    for (; i < n && d->npending < 4096; i++) {
        dion_proxy_cmd_t *c = &cmds[i];
        if (c->op == DION_PROXY_OP_PUT && c->peer == 99) {
            *taken = i;
            return dion__error(DION_ERR_REMOTE_ACCESS, "test: peer 99 refuses access");
        }
        d->pending[d->npending].copy = *c;
        d->pending[d->npending++].slot = c;
    }
    *taken = i;
    return DION_SUCCESS;
}

/* Completes the oldest pending command: in order, as engines must. */
static int deferred_progress(void *arg, uint32_t thread)
{
    deferred_t *d = arg;
    if (d->npending == 0 || __atomic_load_n(&d->stalled, __ATOMIC_ACQUIRE)) return 0;
    dion_proxy_cmd_t *c = &d->pending[0].copy, *slot = d->pending[0].slot;
    switch (c->op) {
    case DION_PROXY_OP_PUT:
        __atomic_store_n(&d->target[c->u.rma.dst_off % 2048], c->u.rma.value, __ATOMIC_RELAXED);
        if (c->flags & DION_PROXY_F_LOCAL_COUNT) {
            dion__proxy_ring_count(d->ring, c->u.rma.counter);
            d->counted++;
        }
        break;
    case DION_PROXY_OP_FETCH_ADD:
        dion__proxy_cmd_result(slot, d->word);
        d->word += c->u.amo.operand;
        break;
    case DION_PROXY_OP_COMPARE_SWAP:
        dion__proxy_cmd_result(slot, d->word);
        if (d->word == c->u.amo.operand) d->word = c->u.amo.desired;
        break;
    default:
        break;
    }
    dion__proxy_ring_complete(d->ring, dion__proxy_cmd_pos(c) + 1);
    memmove(&d->pending[0], &d->pending[1], sizeof d->pending[0] * --d->npending);
    d->done++;
    return 1;
}

typedef struct {
    const dion_proxy_ring_dev_t *ring;
    int n;
    uint64_t *results;
    dion_status_t st;
} fetcher_t;

static void *fetcher_main(void *p)
{
    fetcher_t *f = p;
    for (int i = 0; i < f->n; i++) {
        dion_proxy_cmd_t c = dion__proxy_cmd(DION_PROXY_OP_FETCH_ADD, 1);
        c.u.amo.operand = 1;
        dion_status_t st = dion__proxy_fetch(f->ring, &c, 10 * SEC, &f->results[i], NULL);
        if (st != DION_SUCCESS) {
            f->st = st;
            return NULL;
        }
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* quiet returns only when every earlier command is complete; local counters count; fetching atomics return
 * each old value once, with their slots held until read; a failed ring fails quiet. */
static void test_quiet(void)
{
    dion__proxy_ring_t *r = NULL;
    CHECK(dion__proxy_ring_create(3, 8, 0, &r) == DION_SUCCESS, "%s", dion_last_error());
    if (!r) return;
    deferred_t *d = calloc(1, sizeof *d);
    d->ring = r;
    dion__proxy_exec_t ex = {deferred_exec, deferred_progress, d, NULL, 0, NULL};
    setenv("DION_PROXY_THREADS", "1", 1);
    dion__proxy_threads_t *th = NULL;
    CHECK(dion__proxy_threads_start(&r, 1, &ex, -1, &th) == DION_SUCCESS, "%s", dion_last_error());
    if (!th) return;
    const dion_proxy_ring_dev_t *dev = &r->dev;

    /* puts whose effects land only at completion; quiet must cover all of them */
    for (int round = 1; round <= 3; round++) {
        for (uint64_t i = 0; i < 2048; i++) {
            dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 1, 0, i, 0, 0, 8);
            dion__proxy_cmd_signal(&c, 0, DION_SIG_SET, i * 3 + (uint64_t)round);
            if (i % 2) dion__proxy_cmd_count(&c, 3);
            CHECK(dion__proxy_post(dev, &c, 10 * SEC, NULL, NULL) == DION_SUCCESS, "post");
        }
        CHECK(dion__proxy_quiet(dev, 10 * SEC, NULL) == DION_SUCCESS, "quiet");
        uint64_t wrong = 0;
        for (uint64_t i = 0; i < 2048; i++)
            if (__atomic_load_n(&d->target[i], __ATOMIC_RELAXED) != i * 3 + (uint64_t)round) wrong++;
        CHECK(wrong == 0, "round %d: %llu puts not complete when quiet returned", round,
              (unsigned long long)wrong);
        uint64_t seen = 0;
        CHECK(dion__proxy_wait_counter(dev, 3, 1024ull * (uint64_t)round, SEC, &seen) == DION_SUCCESS &&
                  seen == 1024ull * (uint64_t)round,
              "local counter %llu after round %d", (unsigned long long)seen, round);
    }
    uint64_t seen = 0;
    CHECK(dion__proxy_wait_counter(dev, DION_PROXY_LCOUNTERS, 1, SEC, &seen) == DION_ERR_INVALID_ARG,
          "a counter index past the ring's counters is refused");
    CHECK(dion__proxy_wait_counter(dev, 3, 3073, 20 * MS, &seen) == DION_ERR_TIMEOUT && seen == 3072,
          "a counter that is not reached times out (%llu)", (unsigned long long)seen);

    /* quiet does not return while an earlier command is incomplete */
    __atomic_store_n(&d->stalled, 1, __ATOMIC_RELEASE);
    dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 1, 0, 5, 0, 0, 8);
    CHECK(dion__proxy_post(dev, &c, SEC, NULL, NULL) == DION_SUCCESS, "post");
    CHECK(dion__proxy_quiet(dev, 30 * MS, NULL) == DION_ERR_TIMEOUT,
          "quiet with an incomplete put times out");
    __atomic_store_n(&d->stalled, 0, __ATOMIC_RELEASE);
    CHECK(dion__proxy_quiet(dev, 10 * SEC, NULL) == DION_SUCCESS, "quiet once it completes");
    CHECK(dion__proxy_fence(dev, SEC, NULL) == DION_SUCCESS, "fence");

    /* fetching atomics from 16 threads through an 8-slot ring (more waiting fetches than slots, so slots must
     * be held until their results are read): every old value exactly once */
    enum { F = 16, N = 150 };
    uint64_t *res = calloc(F * N, sizeof *res);
    fetcher_t f[F];
    pthread_t tid[F];
    uint64_t base = d->word;
    for (int i = 0; i < F; i++) {
        f[i] = (fetcher_t){dev, N, res + i * N, DION_SUCCESS};
        pthread_create(&tid[i], NULL, fetcher_main, &f[i]);
    }
    for (int i = 0; i < F; i++) pthread_join(tid[i], NULL);
    for (int i = 0; i < F; i++)
        CHECK(f[i].st == DION_SUCCESS, "fetcher %d: %s", i, dion_status_string(f[i].st));
    qsort(res, F * N, sizeof *res, cmp_u64);
    int dup = 0;
    for (int i = 0; i < F * N; i++)
        if (res[i] != base + (uint64_t)i) dup++;
    CHECK(dup == 0, "%d fetch-add results are not a permutation of %llu..%llu", dup, (unsigned long long)base,
          (unsigned long long)(base + F * N - 1));
    free(res);
    /* compare-swap: succeeds on the right expected value only */
    uint64_t old = 0;
    dion_proxy_cmd_t cs = dion__proxy_cmd(DION_PROXY_OP_COMPARE_SWAP, 1);
    cs.u.amo.operand = base + F * N;
    cs.u.amo.desired = 77;
    CHECK(dion__proxy_fetch(dev, &cs, SEC, &old, NULL) == DION_SUCCESS && old == base + F * N, "cas old %llu",
          (unsigned long long)old);
    CHECK(dion__proxy_fetch(dev, &cs, SEC, &old, NULL) == DION_SUCCESS && old == 77, "failed cas old %llu",
          (unsigned long long)old);

    /* an execute failure fails the ring: quiet returns the engine's status */
    c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 99, 0, 0, 0, 0, 8);
    CHECK(dion__proxy_post(dev, &c, SEC, NULL, NULL) == DION_SUCCESS, "post to the refusing peer");
    CHECK(dion__proxy_quiet(dev, 10 * SEC, NULL) == DION_ERR_REMOTE_ACCESS,
          "quiet after a failure: status %llu", (unsigned long long)r->ctl->status);
    dion__proxy_threads_stop(th);
    dion__proxy_ring_destroy(r);
    free(d);
    printf("quiet: completion, local counters, fetching atomics, failures\n");
}

/* An abandoned ticket whose slot still holds an unread fetching atomic: the consumer must not turn the slot
 * into a NOP before the fetch's result is written and read, or the fetch would lose its result. */
static void test_hole(void)
{
    dion__proxy_ring_t *r = NULL;
    CHECK(dion__proxy_ring_create(5, 2, 0, &r) == DION_SUCCESS, "%s", dion_last_error());
    if (!r) return;
    deferred_t *d = calloc(1, sizeof *d);
    d->ring = r;
    d->stalled = 1;
    d->word = 500;
    dion__proxy_exec_t ex = {deferred_exec, deferred_progress, d, NULL, 0, NULL};
    setenv("DION_PROXY_THREADS", "1", 1);
    dion__proxy_threads_t *th = NULL;
    CHECK(dion__proxy_threads_start(&r, 1, &ex, -1, &th) == DION_SUCCESS, "%s", dion_last_error());
    if (!th) return;
    uint64_t result = 0;
    fetcher_t f = {&r->dev, 1, &result, DION_SUCCESS}; /* ticket 0, slot 0 */
    pthread_t tid;
    pthread_create(&tid, NULL, fetcher_main, &f);
    while (__atomic_load_n(&r->slots[0].seq, __ATOMIC_ACQUIRE) != 1) nap_us(1000);
    dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 1, 0, 1, 0, 0, 8); /* ticket 1, slot 1 */
    CHECK(dion__proxy_post(&r->dev, &c, SEC, NULL, NULL) == DION_SUCCESS, "post");
    uint64_t t = 0;
    CHECK(dion__proxy_post(&r->dev, &c, 30 * MS, &t, NULL) == DION_ERR_TIMEOUT && t == 2,
          "slot 0 is held by the unread fetch: ticket %llu times out", (unsigned long long)t);
    nap_us(30000); /* the consumer meets the abandoned ticket 2 many times meanwhile */
    CHECK(r->slots[0].op == DION_PROXY_OP_FETCH_ADD && (r->slots[0].seq & ~DION_PROXY_SEQ_RELEASED) == 1,
          "the held fetch was overwritten (op %u, seq %llu)", r->slots[0].op,
          (unsigned long long)r->slots[0].seq);
    __atomic_store_n(&d->stalled, 0, __ATOMIC_RELEASE);
    pthread_join(tid, NULL);
    CHECK(f.st == DION_SUCCESS && result == 500, "fetch: %s, old value %llu", dion_status_string(f.st),
          (unsigned long long)result);
    CHECK(dion__proxy_quiet(&r->dev, 10 * SEC, NULL) == DION_SUCCESS, "quiet");
    dion__proxy_threads_stop(th);
    CHECK(r->skipped == 1 && d->word == 501, "skipped %llu, word %llu", (unsigned long long)r->skipped,
          (unsigned long long)d->word);
    dion__proxy_ring_destroy(r);
    free(d);
    printf("hole: an abandoned ticket waits for the fetch that holds its slot\n");
}

/* ---- several rings over DION_PROXY_THREADS threads ---- */

#define NR 7
typedef struct {
    checker_t k[NR];
    int thread_of[NR]; /* -1: not seen yet; else the one thread that must drain ring i */
    int moved;
} multi_t;

static dion_status_t multi_exec(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                uint32_t n, uint32_t *taken)
{
    multi_t *m = arg;
    if (m->thread_of[r->ctx] < 0) m->thread_of[r->ctx] = (int)thread;
    if (m->thread_of[r->ctx] != (int)thread) __atomic_fetch_add(&m->moved, 1, __ATOMIC_RELAXED);
    return check_exec(&m->k[r->ctx], thread, r, cmds, n, taken);
}

static void test_threads(void)
{
    dion__proxy_ring_t *rings[NR];
    multi_t *m = calloc(1, sizeof *m);
    for (int i = 0; i < NR; i++) {
        CHECK(dion__proxy_ring_create((uint32_t)i, 64, 0, &rings[i]) == DION_SUCCESS, "%s",
              dion_last_error());
        m->k[i].nproducers = 3;
        m->thread_of[i] = -1;
    }
    dion__proxy_exec_t ex = {multi_exec, NULL, m, NULL, 0, NULL};
    dion__proxy_threads_t *th = NULL;
    setenv("DION_PROXY_THREADS", "0", 1);
    CHECK(dion__proxy_threads_start(rings, NR, &ex, -1, &th) == DION_ERR_INVALID_ARG &&
              strstr(dion_last_error(), "DION_PROXY_THREADS"),
          "DION_PROXY_THREADS=0 is refused with a sentence naming it: %s", dion_last_error());
    setenv("DION_PROXY_THREADS", "3", 1);
    setenv("DION_PROXY_SPIN", "1ms", 1);
    setenv("DION_PROXY_SLEEP_MAX", "2ms", 1);
    CHECK(dion__proxy_threads_start(rings, NR, &ex, -1, &th) == DION_SUCCESS, "%s", dion_last_error());
    if (!th) return;
    CHECK(dion__proxy_threads_count(th) == 3, "%u threads", dion__proxy_threads_count(th));
    /* ring i gets producers 0 and 1; ring 0 also producer 2 */
    enum { PER = 20000 };
    producer_t pr[2 * NR + 1];
    pthread_t tid[2 * NR + 1];
    int np = 0;
    for (int i = 0; i < NR; i++)
        for (uint32_t p = 0; p < (i == 0 ? 3u : 2u); p++) {
            pr[np] = (producer_t){&rings[i]->dev, p, PER, 0, 30 * SEC, (int)p, DION_SUCCESS, 0};
            pthread_create(&tid[np], NULL, producer_main, &pr[np]);
            np++;
        }
    for (int i = 0; i < np; i++) pthread_join(tid[i], NULL);
    for (int i = 0; i < np; i++)
        CHECK(pr[i].st == DION_SUCCESS, "producer %d: %s", i, dion_status_string(pr[i].st));
    for (int i = 0; i < NR; i++)
        CHECK(dion__proxy_quiet(&rings[i]->dev, 10 * SEC, NULL) == DION_SUCCESS, "quiet %d", i);
    /* idle: threads back off to naps (each within 1 ms of idling; allow 5 s on a loaded machine), and still
     * pick up work afterwards */
    dion__proxy_thread_stats_t s[3];
    uint64_t cmds = 0;
    for (int tries = 0; tries < 500; tries++) {
        int asleep = 0;
        for (uint32_t t = 0; t < 3; t++) {
            dion__proxy_threads_stats(th, t, &s[t]);
            asleep += s[t].sleeps > 0;
        }
        if (asleep == 3) break;
        nap_us(10000);
    }
    for (uint32_t t = 0; t < 3; t++) {
        CHECK(s[t].sleeps > 0, "thread %u never slept while idle", t);
        cmds += s[t].commands;
    }
    CHECK(s[0].rings == 3 && s[1].rings == 2 && s[2].rings == 2, "rings per thread %u %u %u", s[0].rings,
          s[1].rings, s[2].rings);
    for (int i = 0; i < NR; i++) {
        dion_proxy_cmd_t c = stamped(1, PER);
        CHECK(dion__proxy_post(&rings[i]->dev, &c, SEC, NULL, NULL) == DION_SUCCESS, "post after idle");
        CHECK(dion__proxy_quiet(&rings[i]->dev, 10 * SEC, NULL) == DION_SUCCESS, "quiet after idle");
    }
    dion__proxy_threads_stop(th);
    uint64_t total = 0;
    for (int i = 0; i < NR; i++) {
        checker_t *k = &m->k[i];
        CHECK(k->expect[0] == PER && k->expect[1] == PER + 1 && k->expect[2] == (i == 0 ? PER : 0u) &&
                  k->bad == 0,
              "ring %d: %llu %llu %llu, bad %llu", i, (unsigned long long)k->expect[0],
              (unsigned long long)k->expect[1], (unsigned long long)k->expect[2], (unsigned long long)k->bad);
        CHECK(m->thread_of[i] == i % 3, "ring %d drained by thread %d", i, m->thread_of[i]);
        total += k->total;
    }
    CHECK(m->moved == 0, "%d batches ran on another thread than their ring's", m->moved);
    CHECK(total == (uint64_t)PER * (2 * NR + 1) + NR, "total %llu", (unsigned long long)total);
    CHECK(cmds >= total, "thread stats count %llu commands", (unsigned long long)cmds);
    unsetenv("DION_PROXY_SPIN");
    unsetenv("DION_PROXY_SLEEP_MAX");
    for (int i = 0; i < NR; i++) dion__proxy_ring_destroy(rings[i]);
    free(m);
    printf("threads: %d rings over 3 threads, sharded, in order, idle naps\n", NR);
}

/* ---- topology ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_topology(void)
{
    cpu_set_t s;
    CHECK(dion__proxy_parse_cpulist("0-3,8,10-11\n", &s) == 7 && CPU_ISSET(2, &s) && CPU_ISSET(11, &s) &&
              !CPU_ISSET(9, &s),
          "cpulist with ranges");
    CHECK(dion__proxy_parse_cpulist("\n", &s) == 0, "empty node");
    CHECK(dion__proxy_parse_cpulist("5", &s) == 1 && CPU_ISSET(5, &s), "single CPU");
    const char *bad[] = {"3-1", "a", "1,,2", "1-", "-1", "1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(dion__proxy_parse_cpulist(bad[i], &s) == -1, "'%s' accepted", bad[i]);

    char root[] = "/tmp/dion-topoXXXXXX";
    if (!mkdtemp(root)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char p[512];
    const char *dirs[] = {"/sys",
                          "/sys/bus",
                          "/sys/bus/pci",
                          "/sys/bus/pci/devices",
                          "/sys/bus/pci/devices/0000:3b:00.0",
                          "/sys/bus/pci/devices/0000:5e:00.0",
                          "/sys/devices",
                          "/sys/devices/system",
                          "/sys/devices/system/node",
                          "/sys/devices/system/node/node1"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s%s", root, dirs[i]);
        mkdir(p, 0700);
    }
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/0000:3b:00.0/numa_node", root);
    write_file(p, "1\n");
    snprintf(p, sizeof p, "%s/sys/bus/pci/devices/0000:5e:00.0/numa_node", root);
    write_file(p, "-1\n");
    snprintf(p, sizeof p, "%s/sys/devices/system/node/node1/cpulist", root);
    write_file(p, "2-3,6\n");
    CHECK(dion__proxy_numa_cpus(root, "00000000:3B:00.0", &s) == 3 && CPU_ISSET(6, &s) && !CPU_ISSET(4, &s),
          "CUDA's bus id (8-digit domain, upper case) finds node 1");
    CHECK(dion__proxy_numa_cpus(root, "0000:5e:00.0", &s) == 0, "node -1: no pinning");
    CHECK(dion__proxy_numa_cpus(root, "0000:99:00.0", &s) == 0, "unknown device: no pinning");
    CHECK(dion__proxy_numa_cpus(root, "garbage", &s) == 0, "malformed bus id");
    /* the real /sys answers without failing, whatever it says */
    CHECK(dion__proxy_numa_cpus("", "0000:00:00.0", &s) >= 0, "real sysfs");
    snprintf(p, sizeof p, "rm -rf '%s'", root);
    CHECK(system(p) == 0, "cleanup");

    /* ring sizes: powers of two in range only, with a sentence */
    dion__proxy_ring_t *r = NULL;
    CHECK(dion__proxy_ring_create(4, 100, 0, &r) == DION_ERR_INVALID_ARG && strstr(dion_last_error(), "100"),
          "ring of 100 slots: %s", dion_last_error());
    CHECK(dion__proxy_ring_create(4, 1, 0, &r) == DION_ERR_INVALID_ARG, "ring of 1 slot");
    printf("topology: cpulists, NUMA lookup, ring sizes\n");
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    int all = strcmp(which, "all") == 0;
    if (all || !strcmp(which, "topology")) test_topology();
    if (all || !strcmp(which, "full")) test_full();
    if (all || !strcmp(which, "quiet")) test_quiet();
    if (all || !strcmp(which, "hole")) test_hole();
    if (all || !strcmp(which, "threads")) test_threads();
    if (all || !strcmp(which, "stress")) test_stress();
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
