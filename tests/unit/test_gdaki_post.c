/* gdaki's posting and completion logic (device/gdaki.cuh) in CPU mode, on one QP in host memory with no NIC:
 * the test writes the CQEs itself. Three defects of issue 9 each fail here without their fix:
 *  - lift: a CQE ahead of ready_head (a publisher rang the doorbell but had not moved ready_head yet) must
 *    not lift cons_idx to about 2^64 (which made every later wait pass at once);
 *  - publish: a group written after a later one, or while another thread holds the doorbell lock, is
 *    published by whoever finishes last, and no thread waits for another to publish;
 *  - pend: the scratch word of a fetching atomic is not reused (a WQE one lap later may not be posted)
 *    before its poster read the old value;
 *  - lanes (issue 9, on the H200): no lane of a warp's reservation writes a slot before every slot of the
 *    group is free (a slot whose previous lap is outstanding, or whose fetched value is unread), and the
 *    group is published only after every lane wrote. CPU threads play the lanes of one group
 *    (dion__cpu_group_t: the CPU-mode equivalent of the group's mask) in test_lanes and test_groups;
 *  - head (issue 9): a group that holds the slot at ready_head unwritten stalls the others until the timeout,
 *    which latches the QP's error for all; released in time, everything lands in order;
 *  - parked (issue 9, H200 stall dump: marks waiting at ready_head, nobody publishing): marked WQEs left to a
 *    doorbell-lock holder that unlocked but has not looked again yet are published by the waiters. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

#define RING 64u

typedef struct {
    dion_gdaki_qp_dev_t q;
    dion_gdaki_qp_state_t st;
    uint8_t sq[RING * 64];
    uint32_t dbr[2];
    uint64_t db;
    uint8_t cq[64];
    uint64_t scratch[RING], marks[RING], pend[RING];
} qp_t;

static void qp_init(qp_t *x)
{
    memset(x, 0, sizeof *x);
    x->cq[63] = 0xF0; /* INVALID, as the NIC's initial fill */
    x->q.sq = x->sq;
    x->q.dbrec = &x->dbr[1];
    x->q.db = &x->db;
    x->q.cq = x->cq;
    x->q.scratch = x->scratch;
    x->q.st = &x->st;
    x->q.marks = x->marks;
    x->q.pend = x->pend;
    x->q.scratch_addr = (uint64_t)(uintptr_t)x->scratch;
    x->q.scratch_lkey = 7;
    x->q.qpn = 0x100;
    x->q.wq_mask = RING - 1;
    x->q.flags = DION_GDAKI_QP_COLLAPSED | DION_GDAKI_QP_HOSTMEM | DION_GDAKI_QP_UP;
    x->q.max_inline = 64;
}

/* The NIC's CQE for the WQE at 64-bit position pos (the collapsed CQ keeps the latest). */
static void cqe(qp_t *x, uint64_t pos)
{
    dion__mlx5_cqe_write_req(x->cq, (uint16_t)pos, DION__MLX5_OP_NOP, x->q.qpn, 0, 0);
}

/* The doorbell's producer index (host order). */
static uint16_t db_pi(const qp_t *x)
{
    uint32_t w;
    memcpy(&w, &x->db, 4);
    return (uint16_t)(__builtin_bswap32(w) >> 8);
}

static dion__gdaki_wr_t nop(int want_cqe)
{
    dion__gdaki_wr_t w;
    memset(&w, 0, sizeof w);
    w.kind = DION__GDAKI_WR_NOP;
    w.cqe = (uint32_t)want_cqe;
    return w;
}

static void test_lift(void)
{
    static qp_t x;
    qp_init(&x);
    /* 3 WQEBBs published and doorbelled up to 5, ready_head still 3: the CQE of WQE 4 is ahead of it */
    x.st.resv_head = 5;
    x.st.ready_head = 3;
    cqe(&x, 4);
    uint64_t c = dion__gdaki_poll_cq(&x.q);
    CHECK(c == 5, "cons_idx %llu after the CQE of WQE 4, expected 5", (unsigned long long)c);
    /* a stale CQE (older than cons_idx) moves nothing */
    cqe(&x, 2);
    c = dion__gdaki_poll_cq(&x.q);
    CHECK(c == 5, "cons_idx %llu after an older CQE, expected 5", (unsigned long long)c);
    /* across the 16-bit wrap */
    x.st.cons_idx = 0x1fff0;
    x.st.ready_head = 0x1fff8;
    x.st.resv_head = 0x20010;
    cqe(&x, 0x20004);
    c = dion__gdaki_poll_cq(&x.q);
    CHECK(c == 0x20005, "cons_idx 0x%llx across the wrap, expected 0x20005", (unsigned long long)c);
    /* a CQE more than a ring ahead of cons_idx cannot be placed: not used */
    x.st.cons_idx = 0x100;
    cqe(&x, 0x100 + 3 * RING);
    c = dion__gdaki_poll_cq(&x.q);
    CHECK(c == 0x100, "cons_idx 0x%llx from a CQE 3 rings ahead, expected it unmoved", (unsigned long long)c);
    for (uint16_t lo = 0; lo < 200; lo++) { /* never above the true count */
        uint64_t got = dion__gdaki_lift(0x10000 + 50, (uint16_t)(0x10000 + 50 + lo), RING - 1);
        CHECK(got == (lo <= RING ? 0x10000u + 50u + lo : 0x10000u + 50u), "lift by %u gave 0x%llx", lo,
              (unsigned long long)got);
    }
}

static void test_publish(void)
{
    static qp_t x;
    qp_init(&x);
    dion__gdaki_wr_t w = nop(0);
    uint64_t at = 0;
    /* a first post publishes itself */
    CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "post");
    CHECK(at == 0 && x.st.ready_head == 1 && db_pi(&x) == 1 && __builtin_bswap32(x.dbr[1]) == 1,
          "after one post: at %llu ready %llu doorbell %u record %u", (unsigned long long)at,
          (unsigned long long)x.st.ready_head, db_pi(&x), __builtin_bswap32(x.dbr[1]));
    /* two groups reserved (1 and 2); the later one is written first: nothing may be published past 1 */
    x.st.resv_head = 3;
    dion__gdaki_build(&x.q, 2, &w, 0);
    x.marks[2] = 3;
    dion__gdaki_publish(&x.q);
    CHECK(x.st.ready_head == 1 && db_pi(&x) == 1, "a group after an unwritten one was published (ready %llu)",
          (unsigned long long)x.st.ready_head);
    /* the earlier one is written: its publisher takes both, with one doorbell */
    dion__gdaki_build(&x.q, 1, &w, 0);
    x.marks[1] = 2;
    dion__gdaki_publish(&x.q);
    CHECK(x.st.ready_head == 3 && db_pi(&x) == 3 && __builtin_bswap32(x.dbr[1]) == 3,
          "both groups published: ready %llu doorbell %u", (unsigned long long)x.st.ready_head, db_pi(&x));
    /* while another thread holds the doorbell lock, a post returns at once and leaves its group to it */
    x.st.db_lock = 1;
    CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "post under the lock");
    CHECK(at == 3 && x.st.ready_head == 3 && x.marks[3] == 4, "under the lock: at %llu ready %llu mark %llu",
          (unsigned long long)at, (unsigned long long)x.st.ready_head, (unsigned long long)x.marks[3]);
    x.st.db_lock = 0; /* the holder unlocks, then looks again (as dion__gdaki_publish does) */
    dion__gdaki_publish(&x.q);
    CHECK(x.st.ready_head == 4 && db_pi(&x) == 4, "the holder published the group left to it: ready %llu",
          (unsigned long long)x.st.ready_head);
    CHECK(x.st.last_wqe == 4, "last_wqe %llu, expected 4", (unsigned long long)x.st.last_wqe);
    /* marks of an earlier lap are not taken for this one */
    x.st.resv_head = x.st.ready_head = x.st.cons_idx = 4 + RING;
    x.marks[(4 + RING) & (RING - 1)] = 5; /* the mark of position 4 */
    dion__gdaki_publish(&x.q);
    CHECK(x.st.ready_head == 4 + RING, "a mark of the previous lap was published (ready %llu)",
          (unsigned long long)x.st.ready_head);
}

static dion__gdaki_wr_t fetch_add1(void)
{
    dion__gdaki_wr_t fa;
    memset(&fa, 0, sizeof fa);
    fa.kind = DION__GDAKI_WR_FETCH_ADD;
    fa.raddr = 4096;
    fa.rkey = 9;
    fa.operand = 1;
    fa.cqe = 1;
    fa.result = 1;
    return fa;
}

static void test_pend(void)
{
    static qp_t x;
    qp_init(&x);
    dion__gdaki_wr_t fa = fetch_add1();
    uint64_t at = 0;
    CHECK(dion__gdaki_post(&x.q, &fa, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == 0, "fetch-add");
    CHECK(x.pend[0] == 1, "the fetching atomic's slot is not held (pend %llu)",
          (unsigned long long)x.pend[0]);
    dion__gdaki_wr_t w = nop(0);
    for (uint32_t i = 1; i < RING; i++)
        CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop %u", i);
    cqe(&x, RING - 1); /* the NIC completed the whole lap, the atomic's old value is in scratch[0] */
    x.scratch[0] = 41;
    /* slot 0 of the next lap: its fetched value was not read yet, so no post may take it */
    uint64_t t0 = dion__time_ns();
    dion_status_t s = dion__gdaki_post(&x.q, &w, 1, NULL, 20000000ull, &at);
    CHECK(s == DION_ERR_TIMEOUT, "a post reused the unread slot of a fetching atomic: %s",
          dion_status_string(s));
    CHECK(dion__time_ns() - t0 >= 20000000ull, "the post returned before the timeout");
    CHECK(x.st.err == DION_ERR_TIMEOUT, "the QP was not failed by the stall");
    /* on a fresh QP: the old value is read, then the slot is free */
    qp_init(&x);
    CHECK(dion__gdaki_post(&x.q, &fa, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "fetch-add");
    for (uint32_t i = 1; i < RING; i++)
        CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop %u", i);
    cqe(&x, RING - 1);
    x.scratch[0] = 41;
    uint64_t seen = 0;
    CHECK(dion__gdaki_wait_cons(&x.q, 1, NULL, 1000000000ull, &seen) == DION_SUCCESS, "wait");
    uint64_t v = dion__gdaki_result(&x.q, 0, 1);
    CHECK(v == 41 && x.pend[0] == 0, "result %llu, pend %llu", (unsigned long long)v,
          (unsigned long long)x.pend[0]);
    s = dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at);
    CHECK(s == DION_SUCCESS && at == RING, "the slot after its value was read: %s at %llu",
          dion_status_string(s), (unsigned long long)at);
}

/* ---- a NIC on a CPU thread: checks every doorbell and WQE, executes fetch-adds, writes CQEs ---- */
#include <pthread.h>
#include <time.h>
#include "transports/gdaki/softnic/wqe_check.h"

#define MT_THREADS     16u
#define MT_ITERS       2000u
#define MT_GROUP_ITERS 200u
#define MT_RING        RING

typedef struct {
    qp_t *x;
    uint64_t word, executed, cqes;
    int stop;
    char error[512];
} mt_nic_t;

static void *mt_nic(void *arg)
{
    mt_nic_t *n = (mt_nic_t *)arg;
    qp_t *x = n->x;
    uint64_t db_seen = 0, pi = 0, next = 0;
    while (!__atomic_load_n(&n->stop, __ATOMIC_ACQUIRE) && !n->error[0]) {
        uint64_t db = __atomic_load_n(&x->db, __ATOMIC_ACQUIRE);
        if (db != db_seen) {
            uint32_t rec = __atomic_load_n(&x->dbr[1], __ATOMIC_ACQUIRE);
            uint64_t npi = 0;
            char why[256];
            if (dion__snic_check_doorbell(db, rec, x->q.qpn, MT_RING, pi, &npi, why, sizeof why)) {
                snprintf(n->error, sizeof n->error, "doorbell: %s", why);
                break;
            }
            pi = npi;
            db_seen = db;
        }
        if (next == pi) sched_yield();
        while (next < pi) {
            dion__snic_wqe_t w;
            char why[256];
            if (dion__snic_parse_wqe(x->sq, MT_RING, next, pi, x->q.qpn, &w, why, sizeof why)) {
                snprintf(n->error, sizeof n->error, "WQE at %llu: %s", (unsigned long long)next, why);
                break;
            }
            if (w.kind == DION__SNIC_FETCH_ADD) {
                uint64_t old = n->word;
                n->word += w.swap_add;
                __atomic_store_n((uint64_t *)(uintptr_t)w.laddr, old, __ATOMIC_RELAXED);
            }
            __atomic_store_n(&n->executed, n->executed + 1, __ATOMIC_RELAXED);
            if (w.signaled) {
                uint8_t c[64];
                dion__mlx5_cqe_write_req(c, (uint16_t)next, w.opcode, x->q.qpn, 0, (uint32_t)n->cqes & 1u);
                memcpy(x->cq, c, 60);
                uint32_t tail;
                memcpy(&tail, c + 60, 4);
                __atomic_store_n((uint32_t *)(x->cq + 60), tail, __ATOMIC_RELEASE);
                n->cqes++;
            }
            next += w.wqebbs;
        }
    }
    return NULL;
}

static void nic_start(mt_nic_t *nic, qp_t *x, pthread_t *t)
{
    memset(nic, 0, sizeof *nic);
    nic->x = x;
    pthread_create(t, NULL, mt_nic, nic);
}

static void nic_stop(mt_nic_t *nic, pthread_t t, const char *what)
{
    __atomic_store_n(&nic->stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(!nic->error[0], "%s: NIC: %s", what, nic->error);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- lanes: CPU threads as the lanes of one group ---- */

typedef struct {
    const dion_gdaki_qp_dev_t *q;
    dion__mlx5_resv_t r;
    dion__gdaki_wr_t w;
    uint64_t timeout_ns, at;
    const int *go; /* when set, the lane calls only once *go is nonzero (a lane the scheduler runs late) */
    dion_status_t st;
} lane_t;

static void *lane_main(void *arg)
{
    lane_t *l = (lane_t *)arg;
    while (l->go && !__atomic_load_n(l->go, __ATOMIC_ACQUIRE)) sched_yield();
    l->st = dion__gdaki_post_resv(l->q, &l->r, &l->w, 1, NULL, l->timeout_ns, &l->at);
    return NULL;
}

/* A reservation of one WQEBB per lane for lane k of a group of n from base, sharing g. */
static dion__mlx5_resv_t lane_resv(uint64_t base, uint32_t k, uint32_t n, dion__cpu_group_t *g)
{
    dion__mlx5_resv_t r;
    memset(&r, 0, sizeof r);
    r.slot = base + k;
    r.base = base;
    r.total = n;
    r.last = k + 1 == n;
    r.group = (1u << n) - 1u;
    r.lane = k;
    r.cg = g;
    return r;
}

static void lanes_start(lane_t *l, pthread_t *t, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) pthread_create(&t[k], NULL, lane_main, &l[k]);
}

static void lanes_join(pthread_t *t, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) pthread_join(t[k], NULL);
}

/* A lap of RING WQEBBs posted with a fetch-add at 1, nothing complete yet. */
static void lap_with_fetch_add(qp_t *x)
{
    dion__gdaki_wr_t w = nop(0), fa = fetch_add1();
    uint64_t at = 0;
    qp_init(x);
    CHECK(dion__gdaki_post(&x->q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop 0");
    CHECK(dion__gdaki_post(&x->q, &fa, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == 1, "fetch-add");
    for (uint32_t i = 2; i < RING; i++)
        CHECK(dion__gdaki_post(&x->q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop %u", i);
}

static void test_lanes(void)
{
    static qp_t x;
    static dion__cpu_group_t g;
    lane_t l[2];
    pthread_t t[2];
    /* lane 1 runs late: nothing of the group (lane 0's WQE included) is published before lane 1 wrote */
    qp_init(&x);
    memset(&g, 0, sizeof g);
    g.n = 2;
    x.st.resv_head = 2;
    int go = 0;
    for (uint32_t k = 0; k < 2; k++)
        l[k] = (lane_t){&x.q, lane_resv(0, k, 2, &g), nop(0), 1000000000ull, 0, k ? &go : NULL, DION_SUCCESS};
    lanes_start(l, t, 2);
    sleep_ms(20); /* lane 0 runs meanwhile */
    CHECK(__atomic_load_n(&x.st.ready_head, __ATOMIC_ACQUIRE) == 0 && db_pi(&x) == 0,
          "the group was published before its lane 1 wrote: ready %llu doorbell %u",
          (unsigned long long)x.st.ready_head, db_pi(&x));
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    lanes_join(t, 2);
    CHECK(l[0].st == DION_SUCCESS && l[1].st == DION_SUCCESS && l[0].at == 0 && l[1].at == 1,
          "lanes: %s at %llu, %s at %llu", dion_status_string(l[0].st), (unsigned long long)l[0].at,
          dion_status_string(l[1].st), (unsigned long long)l[1].at);
    CHECK(x.st.ready_head == 2 && db_pi(&x) == 2 && x.st.last_wqe == 2 && x.marks[1] == 0 &&
              (x.marks[0] == 0 || x.marks[0] == 2),
          "after the group: ready %llu doorbell %u last_wqe %llu marks %llu %llu (at most one mark, for the "
          "whole group)",
          (unsigned long long)x.st.ready_head, db_pi(&x), (unsigned long long)x.st.last_wqe,
          (unsigned long long)x.marks[0], (unsigned long long)x.marks[1]);

    /* the lap before is complete but lane 1's slot still holds an unread fetched value: no lane may write
     * (lane 0's slot is free, yet it waits with its group), both time out, the QP's error is latched */
    lap_with_fetch_add(&x);
    cqe(&x, RING - 1);
    memset(&g, 0, sizeof g);
    g.n = 2;
    uint8_t before[128];
    memcpy(before, x.sq, 128);
    x.st.resv_head = RING + 2;
    for (uint32_t k = 0; k < 2; k++)
        l[k] = (lane_t){&x.q, lane_resv(RING, k, 2, &g), fetch_add1(), 30000000ull, 0, NULL, DION_SUCCESS};
    lanes_start(l, t, 2);
    lanes_join(t, 2);
    CHECK(l[0].st == DION_ERR_TIMEOUT && l[1].st == DION_ERR_TIMEOUT,
          "a group with an unread fetched value in a slot: lane 0 %s, lane 1 %s (both must time out)",
          dion_status_string(l[0].st), dion_status_string(l[1].st));
    CHECK(memcmp(before, x.sq, 128) == 0 && x.pend[0] == 0 && x.pend[1] == 2,
          "a lane wrote its slot before its group's slots were free (pend %llu %llu)",
          (unsigned long long)x.pend[0], (unsigned long long)x.pend[1]);
    CHECK(x.st.err == DION_ERR_TIMEOUT && x.st.ready_head == RING, "err %llu ready %llu",
          (unsigned long long)x.st.err, (unsigned long long)x.st.ready_head);

    /* the same, and the value is read while the group waits: the group goes on, one publication */
    lap_with_fetch_add(&x);
    cqe(&x, RING - 1);
    memset(&g, 0, sizeof g);
    g.n = 2;
    x.st.resv_head = RING + 2;
    for (uint32_t k = 0; k < 2; k++)
        l[k] = (lane_t){&x.q, lane_resv(RING, k, 2, &g), fetch_add1(), 1000000000ull, 0, NULL, DION_SUCCESS};
    lanes_start(l, t, 2);
    sleep_ms(20);
    CHECK(__atomic_load_n(&x.st.ready_head, __ATOMIC_ACQUIRE) == RING && x.pend[0] == 0,
          "the group went on before the fetched value was read (ready %llu)",
          (unsigned long long)x.st.ready_head);
    (void)dion__gdaki_result(&x.q, 1, 1);
    lanes_join(t, 2);
    CHECK(l[0].st == DION_SUCCESS && l[1].st == DION_SUCCESS && l[0].at == RING && l[1].at == RING + 1,
          "after the read: %s, %s", dion_status_string(l[0].st), dion_status_string(l[1].st));
    CHECK(x.st.ready_head == RING + 2 && db_pi(&x) == (uint16_t)(RING + 2) && x.pend[0] == RING + 1 &&
              x.pend[1] == RING + 2,
          "the group after the read: ready %llu pend %llu %llu", (unsigned long long)x.st.ready_head,
          (unsigned long long)x.pend[0], (unsigned long long)x.pend[1]);
}

/* ---- threads: independent posters (groups of one), and groups of CPU threads as lanes ---- */

typedef struct {
    qp_t *x;
    uint32_t t;
    uint64_t *olds; /* one per fetch-add: [MT_THREADS][MT_ITERS] or [MT_THREADS][MT_GROUP_ITERS] */
    dion__cpu_group_t *g;
    uint32_t lane;
    int err;
} mt_worker_t;

static uint32_t mt_mix(uint32_t x)
{
    x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
    return x;
}

static void *mt_main(void *arg)
{
    mt_worker_t *wk = (mt_worker_t *)arg;
    const dion_gdaki_qp_dev_t *q = &wk->x->q;
    for (uint32_t i = 0; i < MT_ITERS; i++) {
        uint32_t h = mt_mix(wk->t * 7919u + i * 104729u + 1u);
        for (volatile uint32_t s = 0; s < (h & 1023u); s++) {
        }
        uint64_t at = 0, seen = 0;
        dion_status_t st = DION_SUCCESS;
        if (h & 0x30000u) {
            dion__gdaki_wr_t w = nop(0);
            st = dion__gdaki_post(q, &w, 1, NULL, 5000000000ull, &at);
        }
        dion__gdaki_wr_t fa = fetch_add1();
        if (st == DION_SUCCESS) st = dion__gdaki_post(q, &fa, 1, NULL, 5000000000ull, &at);
        if (st != DION_SUCCESS) {
            fprintf(stderr, "thread %u iter %u: post: %s\n", wk->t, i, dion_status_string(st));
            wk->err = 1;
            return NULL;
        }
        st = dion__gdaki_wait_cons(q, at + 1, NULL, 5000000000ull, &seen);
        uint64_t old = dion__gdaki_result(q, at, st == DION_SUCCESS);
        if (st != DION_SUCCESS) {
            fprintf(stderr, "thread %u iter %u: wait for %llu: %s (cons %llu)\n", wk->t, i,
                    (unsigned long long)at + 1, dion_status_string(st), (unsigned long long)seen);
            wk->err = 1;
            return NULL;
        }
        wk->olds[(size_t)wk->t * MT_ITERS + i] = old;
    }
    return NULL;
}

/* One lane of a group of 4 threads (a warp of 4 lanes): every iteration the group reserves together, each
 * lane posting a fetch-add, a NOP, or both in one post (two WQEs of one lane); then the fetch-add lanes wait
 * for their old values. Slots free up only through the other groups' posts and the NIC, so a lane that
 * wrote before its group's slots were free would overwrite an outstanding WQE or an unread value. */
static void *mt_group_main(void *arg)
{
    mt_worker_t *wk = (mt_worker_t *)arg;
    const dion_gdaki_qp_dev_t *q = &wk->x->q;
    for (uint32_t i = 0; i < MT_GROUP_ITERS; i++) {
        uint32_t h = mt_mix(wk->t * 7919u + i * 104729u + 7u);
        for (volatile uint32_t s = 0; s < (h & 1023u); s++) {
        }
        uint32_t kind = (h >> 16) % 3u; /* 0: fetch-add, 1: NOP, 2: NOP then fetch-add */
        dion__gdaki_wr_t w[2] = {kind ? nop(0) : fetch_add1(), fetch_add1()};
        uint32_t nwr = kind == 2 ? 2 : 1;
        dion__mlx5_resv_t r =
            dion__mlx5_reserve_cpu_group(&q->st->resv_head, nwr, DION__GDAKI_SSCOPE, wk->g, wk->lane);
        uint64_t at = 0, seen = 0;
        dion_status_t st = dion__gdaki_post_resv(q, &r, w, nwr, NULL, 5000000000ull, &at);
        uint64_t old = UINT64_MAX;
        if (st == DION_SUCCESS && kind != 1) {
            st = dion__gdaki_wait_cons(q, at + 1, NULL, 5000000000ull, &seen);
            old = dion__gdaki_result(q, at, st == DION_SUCCESS);
        }
        if (st != DION_SUCCESS) {
            fprintf(stderr, "thread %u (lane %u) iter %u (slot %llu of %llu..%llu): %s\n", wk->t, wk->lane, i,
                    (unsigned long long)r.slot, (unsigned long long)r.base,
                    (unsigned long long)(r.base + r.total), dion_status_string(st));
            wk->err = 1;
            /* the group's lanes return the same status together: nobody is left waiting in a group op */
            return NULL;
        }
        wk->olds[(size_t)wk->t * MT_GROUP_ITERS + i] = old;
    }
    return NULL;
}

static int mt_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_threads(int grouped)
{
    static qp_t x;
    static dion__cpu_group_t groups[MT_THREADS / 4];
    qp_init(&x);
    memset(groups, 0, sizeof groups);
    for (uint32_t k = 0; k < MT_THREADS / 4; k++) groups[k].n = 4;
    mt_nic_t nic;
    pthread_t nt, th[MT_THREADS];
    nic_start(&nic, &x, &nt);
    size_t slots = (size_t)MT_THREADS * (grouped ? MT_GROUP_ITERS : MT_ITERS), nfa = 0;
    uint64_t *olds = malloc(slots * 8);
    memset(olds, 0xff, slots * 8);
    mt_worker_t wk[MT_THREADS];
    for (uint32_t t = 0; t < MT_THREADS; t++) {
        wk[t] = (mt_worker_t){&x, t, olds, &groups[t / 4], t % 4, 0};
        pthread_create(&th[t], NULL, grouped ? mt_group_main : mt_main, &wk[t]);
    }
    int errs = 0;
    for (uint32_t t = 0; t < MT_THREADS; t++) {
        pthread_join(th[t], NULL);
        errs += wk[t].err;
    }
    nic_stop(&nic, nt, grouped ? "groups" : "threads");
    CHECK(errs == 0, "%d threads failed; NIC executed %llu, %llu CQEs, resv %llu ready %llu cons %llu", errs,
          (unsigned long long)nic.executed, (unsigned long long)nic.cqes, (unsigned long long)x.st.resv_head,
          (unsigned long long)x.st.ready_head, (unsigned long long)x.st.cons_idx);
    qsort(olds, slots, 8, mt_cmp); /* the fetch-adds' old values first, then the ~0 of NOP-only lanes */
    while (nfa < slots && olds[nfa] != UINT64_MAX) nfa++;
    CHECK(nic.word == nfa && nfa >= (grouped ? slots / 2 : slots), "word %llu after %zu fetch-adds",
          (unsigned long long)nic.word, nfa);
    size_t bad = 0;
    for (size_t i = 0; i < nfa; i++) bad += olds[i] != i;
    CHECK(bad == 0, "%zu bad old values", bad);
    free(olds);
}

/* ---- a held head slot, a parked doorbell-lock holder ---- */

#define HEAD_POSTERS 3u
#define HEAD_NOPS    60u /* per poster: more than the ring holds in all */

typedef struct {
    qp_t *x;
    uint64_t timeout_ns;
    unsigned delay_ms; /* 0: until the QP's error is latched (at most 20 s) */
    dion_status_t st;
    uint64_t old;
} holder_t;

/* Reserves the first slot at once, writes it (a fetch-add) only after delay_ms, or once the others' stall
 * has failed the QP. */
static void *holder_main(void *arg)
{
    holder_t *h = (holder_t *)arg;
    dion__mlx5_resv_t r = dion__mlx5_reserve(&h->x->st.resv_head, 1, DION__GDAKI_SSCOPE);
    if (h->delay_ms) sleep_ms(h->delay_ms);
    for (unsigned ms = 0; !h->delay_ms && ms < 20000 && !__atomic_load_n(&h->x->st.err, __ATOMIC_ACQUIRE);
         ms++)
        sleep_ms(1);
    dion__gdaki_wr_t fa = fetch_add1();
    uint64_t at = 0, seen = 0;
    h->st = dion__gdaki_post_resv(&h->x->q, &r, &fa, 1, NULL, h->timeout_ns, &at);
    if (h->st == DION_SUCCESS) {
        h->st = dion__gdaki_wait_cons(&h->x->q, at + 1, NULL, h->timeout_ns, &seen);
        h->old = dion__gdaki_result(&h->x->q, at, h->st == DION_SUCCESS);
    }
    return NULL;
}

typedef struct {
    qp_t *x;
    uint64_t timeout_ns;
    dion_status_t st;
} poster_t;

static void *poster_main(void *arg)
{
    poster_t *p = (poster_t *)arg;
    dion__gdaki_wr_t w = nop(0);
    uint64_t at = 0, seen = 0;
    p->st = DION_SUCCESS;
    for (uint32_t i = 0; i < HEAD_NOPS && p->st == DION_SUCCESS; i++)
        p->st = dion__gdaki_post(&p->x->q, &w, 1, NULL, p->timeout_ns, &at);
    if (p->st == DION_SUCCESS) p->st = dion__gdaki_quiet(&p->x->q, NULL, p->timeout_ns, &seen);
    return NULL;
}

/* held: the owner of the first slot writes it only after delay_ms (0: after the others' stall failed the QP),
 * while others fill the ring behind it. */
static void head_run(unsigned delay_ms, uint64_t timeout_ns, int in_time)
{
    static qp_t x;
    qp_init(&x);
    mt_nic_t nic;
    pthread_t nt, ht, pt[HEAD_POSTERS];
    nic_start(&nic, &x, &nt);
    holder_t h = {&x, timeout_ns, delay_ms, DION_SUCCESS, UINT64_MAX};
    poster_t p[HEAD_POSTERS];
    pthread_create(&ht, NULL, holder_main, &h);
    while (__atomic_load_n(&x.st.resv_head, __ATOMIC_ACQUIRE) == 0) sched_yield(); /* the holder is first */
    for (uint32_t k = 0; k < HEAD_POSTERS; k++) {
        p[k] = (poster_t){&x, timeout_ns, DION_SUCCESS};
        pthread_create(&pt[k], NULL, poster_main, &p[k]);
    }
    for (uint32_t k = 0; k < HEAD_POSTERS; k++) pthread_join(pt[k], NULL);
    pthread_join(ht, NULL);
    nic_stop(&nic, nt, in_time ? "head slot released in time" : "head slot held");
    if (in_time) {
        for (uint32_t k = 0; k < HEAD_POSTERS; k++)
            CHECK(p[k].st == DION_SUCCESS, "released in time: poster %u: %s", k, dion_status_string(p[k].st));
        CHECK(h.st == DION_SUCCESS && h.old == 0,
              "released in time: the head slot's fetch-add: %s, old value %llu (it executes first: 0)",
              dion_status_string(h.st), (unsigned long long)h.old);
        CHECK(nic.executed >= 1 + HEAD_POSTERS * HEAD_NOPS && x.st.err == 0 &&
                  x.st.ready_head == x.st.resv_head && nic.word == 1,
              "released in time: NIC executed %llu, err %llu, ready %llu of %llu, word %llu",
              (unsigned long long)nic.executed, (unsigned long long)x.st.err,
              (unsigned long long)x.st.ready_head, (unsigned long long)x.st.resv_head,
              (unsigned long long)nic.word);
    } else {
        for (uint32_t k = 0; k < HEAD_POSTERS; k++)
            CHECK(p[k].st == DION_ERR_TIMEOUT, "held: poster %u: %s (expected a timeout)", k,
                  dion_status_string(p[k].st));
        CHECK(h.st == DION_ERR_TIMEOUT, "held: the late head slot's post: %s (the QP had failed)",
              dion_status_string(h.st));
        CHECK(
            x.st.err == DION_ERR_TIMEOUT && nic.executed == 0 && x.st.ready_head == 0,
            "held: err %llu (expected the timeout latched), NIC executed %llu, ready %llu (nothing past the "
            "held slot may be published)",
            (unsigned long long)x.st.err, (unsigned long long)nic.executed,
            (unsigned long long)x.st.ready_head);
    }
}

static void test_head(void)
{
    head_run(40, 5000000000ull, 1);
    head_run(0, 50000000ull, 0);
}

/* A doorbell-lock holder that unlocked but has not looked at the marks again (descheduled): the WQEs left to
 * it are published by whoever waits for them, by a CQE waiter and by a group waiting for slots. */
static void test_parked(void)
{
    static qp_t x;
    qp_init(&x);
    mt_nic_t nic;
    pthread_t nt;
    nic_start(&nic, &x, &nt);
    dion__gdaki_wr_t fa = fetch_add1(), w = nop(0);
    uint64_t at = 0, seen = 0;
    x.st.db_lock = 1;
    CHECK(dion__gdaki_post(&x.q, &fa, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == 0, "post");
    __atomic_store_n(&x.st.db_lock, 0, __ATOMIC_RELEASE); /* unlocked, and no last look */
    dion_status_t s = dion__gdaki_wait_cons(&x.q, at + 1, NULL, 1000000000ull, &seen);
    CHECK(s == DION_SUCCESS && x.st.ready_head == 1,
          "a CQE waiter behind a parked lock holder: %s (ready %llu)", dion_status_string(s),
          (unsigned long long)x.st.ready_head);
    CHECK(dion__gdaki_result(&x.q, at, s == DION_SUCCESS) == 0, "old value");
    /* a whole lap marked under the lock, then the holder parks; the next post needs the lap's slots */
    x.st.db_lock = 1;
    for (uint32_t i = 1; i < RING; i++)
        CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop %u", i);
    __atomic_store_n(&x.st.db_lock, 0, __ATOMIC_RELEASE);
    s = dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at);
    CHECK(s == DION_SUCCESS && at == RING, "a post waiting for slots behind a parked lock holder: %s",
          dion_status_string(s));
    s = dion__gdaki_quiet(&x.q, NULL, 1000000000ull, &seen);
    nic_stop(&nic, nt, "parked");
    CHECK(s == DION_SUCCESS && x.st.ready_head == x.st.resv_head && nic.executed == x.st.resv_head,
          "after quiet: %s, ready %llu resv %llu, NIC executed %llu", dion_status_string(s),
          (unsigned long long)x.st.ready_head, (unsigned long long)x.st.resv_head,
          (unsigned long long)nic.executed);
}

int main(void)
{
    test_threads(0);
    test_lift();
    test_publish();
    test_pend();
    test_lanes();
    test_threads(1);
    test_head();
    test_parked();
    printf("%s: gdaki posting (lift, publish, pend, lanes, groups, head, parked), %d failures\n",
           failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
