/* gdaki's posting and completion logic (device/gdaki.cuh) in CPU mode, on one QP in host memory with no NIC:
 * the test writes the CQEs itself. Three defects of issue 9 each fail here without their fix:
 *  - lift: a CQE ahead of ready_head (a publisher rang the doorbell but had not moved ready_head yet) must
 *    not lift cons_idx to about 2^64 (which made every later wait pass at once);
 *  - publish: a group written after a later one, or while another thread holds the doorbell lock, is
 *    published by whoever finishes last, and no thread waits for another to publish;
 *  - pend: the scratch word of a fetching atomic is not reused (a WQE one lap later may not be posted)
 *    before its poster read the old value;
 *  - lanes (issue 9, on the H200): a lane of a warp's reservation that is not its first waits for its own
 *    slots and marks only its own WQEs (dion__gdaki_post_resv): it neither writes a slot whose previous lap
 *    is still outstanding, nor is published by its leader before it wrote. CPU threads reserve one by one, so
 *    the tests hand out a warp's reservation by hand (test_lanes), and test_groups has threads post both
 *    lanes of two-slot reservations in random order against a NIC thread. */
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

/* A reservation as the lanes of one warp get it: lane k of a group of total WQEBBs from base. */
static dion__mlx5_resv_t lane_resv(uint64_t base, uint32_t k, uint32_t total)
{
    dion__mlx5_resv_t r;
    memset(&r, 0, sizeof r);
    r.slot = base + k;
    r.base = base;
    r.total = total;
    r.last = k + 1 == total;
    r.group = (1u << total) - 1u;
    return r;
}

static void test_lanes(void)
{
    static qp_t x;
    qp_init(&x);
    dion__gdaki_wr_t w = nop(0), fa = fetch_add1();
    uint64_t at = 0;
    /* the leader (lane 0) of a group of two writes first: only its own WQE may be published */
    dion__mlx5_resv_t r0 = lane_resv(0, 0, 2), r1 = lane_resv(0, 1, 2);
    x.st.resv_head = 2;
    CHECK(dion__gdaki_post_resv(&x.q, &r0, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == 0,
          "lane 0");
    CHECK(x.st.ready_head == 1 && db_pi(&x) == 1,
          "lane 0 published lane 1's slot before lane 1 wrote it: ready %llu doorbell %u",
          (unsigned long long)x.st.ready_head, db_pi(&x));
    CHECK(dion__gdaki_post_resv(&x.q, &r1, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == 1,
          "lane 1");
    CHECK(x.st.ready_head == 2 && db_pi(&x) == 2 && x.st.last_wqe == 2,
          "after lane 1: ready %llu doorbell %u last_wqe %llu", (unsigned long long)x.st.ready_head,
          db_pi(&x), (unsigned long long)x.st.last_wqe);
    /* a lane whose slot's previous lap is outstanding waits itself, whatever its leader does: a fetch-add at
     * 1 (its value unread) and the rest of the lap published, nothing complete; lane 1 of a group at RING
     * takes slot RING + 1 */
    qp_init(&x);
    CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop 0");
    CHECK(dion__gdaki_post(&x.q, &fa, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == 1, "fetch-add");
    for (uint32_t i = 2; i < RING; i++)
        CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop %u", i);
    uint8_t before[64];
    memcpy(before, x.sq + 64, 64);
    x.st.resv_head = RING + 2;
    r1 = lane_resv(RING, 1, 2);
    dion_status_t s = dion__gdaki_post_resv(&x.q, &r1, &w, 1, NULL, 20000000ull, &at);
    CHECK(s == DION_ERR_TIMEOUT,
          "lane 1 took slot %u while the fetch-add of the lap before was outstanding: %s", RING + 1,
          dion_status_string(s));
    CHECK(memcmp(before, x.sq + 64, 64) == 0 && x.pend[1] == 2,
          "the outstanding fetch-add's WQE or pend word was overwritten (pend %llu)",
          (unsigned long long)x.pend[1]);
    /* the same once the lap is complete and the value read: lane 1 goes on without its leader */
    qp_init(&x);
    CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop 0");
    CHECK(dion__gdaki_post(&x.q, &fa, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == 1, "fetch-add");
    for (uint32_t i = 2; i < RING; i++)
        CHECK(dion__gdaki_post(&x.q, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS, "nop %u", i);
    cqe(&x, RING - 1);
    uint64_t seen = 0;
    CHECK(dion__gdaki_wait_cons(&x.q, 2, NULL, 1000000000ull, &seen) == DION_SUCCESS, "wait");
    (void)dion__gdaki_result(&x.q, 1, 1);
    x.st.resv_head = RING + 2;
    r0 = lane_resv(RING, 0, 2);
    r1 = lane_resv(RING, 1, 2);
    CHECK(dion__gdaki_post_resv(&x.q, &r1, &fa, 1, NULL, 1000000000ull, &at) == DION_SUCCESS &&
              at == RING + 1,
          "lane 1 after the lap");
    CHECK(x.st.ready_head == RING && x.pend[1] == RING + 2, "lane 1 before its leader: ready %llu pend %llu",
          (unsigned long long)x.st.ready_head, (unsigned long long)x.pend[1]);
    CHECK(dion__gdaki_post_resv(&x.q, &r0, &w, 1, NULL, 1000000000ull, &at) == DION_SUCCESS && at == RING,
          "lane 0 after the lap");
    CHECK(x.st.ready_head == RING + 2 && db_pi(&x) == (uint16_t)(RING + 2),
          "the leader, written last, published both: ready %llu", (unsigned long long)x.st.ready_head);
}

/* threaded */
#include <pthread.h>
#include <time.h>
#include "transports/gdaki/softnic/wqe_check.h"

#define MT_THREADS     16u
#define MT_ITERS       2000u
#define MT_GROUP_ITERS 300u /* two posts and up to two waits each */
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

typedef struct {
    qp_t *x;
    uint32_t t;
    uint64_t *olds; /* [MT_THREADS][MT_ITERS], grouped [MT_THREADS][MT_GROUP_ITERS][2] (~0: a NOP lane) */
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
        dion__gdaki_wr_t fa;
        memset(&fa, 0, sizeof fa);
        fa.kind = DION__GDAKI_WR_FETCH_ADD;
        fa.raddr = 4096;
        fa.rkey = 9;
        fa.operand = 1;
        fa.cqe = 1;
        fa.result = 1;
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

/* Each iteration takes a two-slot reservation (as two lanes of a warp share one) and posts both lanes, in
 * random order: lane 0 a fetch-add, lane 1 a NOP or a fetch-add. Slots free up only through other threads'
 * posts and the NIC, so a lane that does not wait for its own slot overwrites an outstanding WQE. */
static void *mt_group_main(void *arg)
{
    mt_worker_t *wk = (mt_worker_t *)arg;
    const dion_gdaki_qp_dev_t *q = &wk->x->q;
    for (uint32_t i = 0; i < MT_GROUP_ITERS; i++) {
        uint32_t h = mt_mix(wk->t * 7919u + i * 104729u + 7u);
        for (volatile uint32_t s = 0; s < (h & 1023u); s++) {
        }
        uint64_t base = dion__atom_add(&q->st->resv_head, 2, DION__GDAKI_SSCOPE), at[2] = {0, 0};
        dion__gdaki_wr_t w[2] = {fetch_add1(), (h & 0x10000u) ? fetch_add1() : nop(0)};
        dion_status_t st = DION_SUCCESS;
        for (uint32_t k = 0; k < 2 && st == DION_SUCCESS; k++) {
            uint32_t lane = (h & 0x20000u) ? 1 - k : k;
            dion__mlx5_resv_t r = lane_resv(base, lane, 2);
            st = dion__gdaki_post_resv(q, &r, &w[lane], 1, NULL, 5000000000ull, &at[lane]);
        }
        for (uint32_t lane = 0; lane < 2 && st == DION_SUCCESS; lane++) {
            if (w[lane].kind != DION__GDAKI_WR_FETCH_ADD) continue;
            uint64_t seen = 0;
            st = dion__gdaki_wait_cons(q, at[lane] + 1, NULL, 5000000000ull, &seen);
            wk->olds[((size_t)wk->t * MT_GROUP_ITERS + i) * 2 + lane] =
                dion__gdaki_result(q, at[lane], st == DION_SUCCESS);
        }
        if (st != DION_SUCCESS) {
            fprintf(stderr, "thread %u iter %u (slots %llu, %llu): %s\n", wk->t, i, (unsigned long long)base,
                    (unsigned long long)base + 1, dion_status_string(st));
            wk->err = 1;
            return NULL;
        }
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
    qp_init(&x);
    mt_nic_t nic;
    memset(&nic, 0, sizeof nic);
    nic.x = &x;
    size_t slots = (size_t)MT_THREADS * (grouped ? 2 * MT_GROUP_ITERS : MT_ITERS), nops = 0;
    uint64_t *olds = malloc(slots * 8);
    memset(olds, 0xff, slots * 8);
    pthread_t nt, th[MT_THREADS];
    mt_worker_t wk[MT_THREADS];
    pthread_create(&nt, NULL, mt_nic, &nic);
    for (uint32_t t = 0; t < MT_THREADS; t++) {
        wk[t] = (mt_worker_t){&x, t, olds, 0};
        pthread_create(&th[t], NULL, grouped ? mt_group_main : mt_main, &wk[t]);
    }
    int errs = 0;
    for (uint32_t t = 0; t < MT_THREADS; t++) {
        pthread_join(th[t], NULL);
        errs += wk[t].err;
    }
    __atomic_store_n(&nic.stop, 1, __ATOMIC_RELEASE);
    pthread_join(nt, NULL);
    CHECK(!nic.error[0], "%s: NIC: %s", grouped ? "groups" : "threads", nic.error);
    CHECK(errs == 0, "%d threads failed; NIC executed %llu, %llu CQEs, resv %llu ready %llu cons %llu", errs,
          (unsigned long long)nic.executed, (unsigned long long)nic.cqes, (unsigned long long)x.st.resv_head,
          (unsigned long long)x.st.ready_head, (unsigned long long)x.st.cons_idx);
    if (grouped) {
        qsort(olds, slots, 8, mt_cmp); /* the fetch-adds' old values first, then the ~0 of the NOP lanes */
        while (nops < slots && olds[nops] != UINT64_MAX) nops++;
    } else {
        nops = slots;
        qsort(olds, nops, 8, mt_cmp);
    }
    CHECK(nic.word == nops && nops >= (size_t)MT_THREADS * (grouped ? MT_GROUP_ITERS : MT_ITERS),
          "word %llu after %zu fetch-adds", (unsigned long long)nic.word, nops);
    size_t bad = 0;
    for (size_t i = 0; i < nops; i++) bad += olds[i] != i;
    CHECK(bad == 0, "%zu bad old values", bad);
    free(olds);
}

int main(void)
{
    test_threads(0);
    test_lift();
    test_publish();
    test_pend();
    test_lanes();
    test_threads(1);
    printf("%s: gdaki posting (lift, publish, pend, lanes, groups), %d failures\n",
           failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
