/* softnic: a model of a ConnectX NIC, for running the gdaki backend's device half without one. One CPU thread
 * per rank plays the NIC for all of that rank's QPs: it watches each QP's doorbell page (host memory device
 * code writes), checks the doorbell against the doorbell record, reads and checks every WQE (wqe_check.c,
 * with rdma-core's definitions), executes WRITE, READ and the atomics through the proxy's engine (ofi), so it
 * reaches other processes and other hosts, and writes CQEs in the real 64-byte format into the collapsed CQ
 * in order, one for each WQE that asked for one. A broken invariant or a failed operation completes that WQE
 * with an error CQE (and a log sentence); the QP is then in error and does nothing more, as a real QP in ERR
 * (the model writes no flush CQEs, so the first error's syndrome stays readable). DION_SOFTNIC_INJECT fails
 * a chosen WQE on purpose. What the model cannot show (PCIe ordering, MMIO, real timing): docs/gdaki.md. */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dion/device/mlx5.cuh"
#include "src/cuda.h"
#include "transports/gdaki/nic.h"
#include "transports/gdaki/softnic/wqe_check.h"
#include "transports/proxy/engine.h"

#define DION__SNIC_MAX_QPS    4096u
#define DION__SNIC_ORD_BITS   40 /* WQE ordinal bits of an engine cookie; the rest name the QP */
#define DION__SNIC_ORD_MASK   ((1ull << DION__SNIC_ORD_BITS) - 1)
#define DION__SNIC_QP_MAGIC   0x43494e53u /* "SNIC" */
#define DION__SNIC_QPN_BASE   0x100u
#define DION__SNIC_KEY_BASE   0x1000u
#define DION__SNIC_MAX_INLINE 64u

_Static_assert(sizeof(dion__engine_rkey_t) <= DION__GDAKI_MR_BLOB, "the engine's key travels in the blob");
_Static_assert(DION__SNIC_MAX_INLINE == DION__SNIC_INLINE_MAX,
               "the checker accepts exactly what the QP offers and the bounce buffer holds");

typedef struct dion__snic_mr {
    struct dion__snic_mr *next;
    uint32_t key;
    char *base;
    uint64_t bytes;
    dion__engine_mr_t *emr;
} dion__snic_mr_t;

typedef struct dion__snic_rem {
    struct dion__snic_rem *next;
    int peer;
    uint32_t rkey;
    uint64_t addr, bytes;
    dion__engine_rkey_t ek;
} dion__snic_rem_t;

/* One WQE taken by the model, until it retires in order. */
typedef struct {
    uint64_t start; /* its first WQEBB */
    uint32_t pending;
    uint8_t opcode, signaled, syndrome;
    void *result; /* fetching atomics: where the old value goes */
} dion__snic_ent_t;

struct dion__gdaki_mr {
    dion__snic_mr_t m;
};

struct dion__gdaki_qp {
    dion__gdaki_nic_t *nic;
    uint32_t id, ctx, qpn, remote_qpn;
    int peer, cpu, up, dead;
    char *block; /* SQ, doorbell record, doorbell page, CQ */
    uint8_t *sq, *cq;
    uint32_t *dbr; /* 8 bytes: [0] RQ, [1] SQ (MLX5_SND_DBR) */
    uint64_t *db;
    uint32_t nwqebb;
    uint64_t db_seen; /* the last doorbell value read */
    uint64_t pi;      /* producer index the doorbells announced (64-bit) */
    uint64_t next;    /* the next WQEBB to read */
    dion__snic_ent_t *fifo;
    uint64_t head, tail; /* ordinals of the oldest WQE not retired and of the next taken */
    uint64_t cqes;
    uint64_t inflight;
    uint8_t *bounce; /* inline payloads, DION__SNIC_MAX_INLINE bytes per FIFO entry */
    dion__engine_mr_t *bounce_mr;
    int stopped; /* an invariant broke at `next`: nothing more is read */
    int failed;
    char cause[320]; /* why the WQE that will fail the QP fails */
    char why[640];   /* the sentence once it failed */
};

struct dion__gdaki_nic {
    dion_comm_t comm;
    const dion__engine_ops_t *E;
    dion__engine_t *e;
    dion__engine_caps_t caps;
    pthread_mutex_t mu; /* the engine and every list and QP below */
    pthread_t th;
    int started, stop;
    dion__snic_mr_t *mrs;
    dion__snic_rem_t *rems;
    uint32_t next_key;
    dion__gdaki_qp_t *qps[DION__SNIC_MAX_QPS];
    uint8_t inject_syn;
    uint64_t inject_at, executed;
    uint64_t naps, wakes; /* idle naps, and those the engine's wait object ended (the model's thread only) */
};

/* ---- lookups ---- */

static dion__snic_mr_t *dion__snic_lmr(dion__gdaki_nic_t *n, uint32_t lkey, uint64_t addr, uint64_t len)
{
    for (dion__snic_mr_t *m = n->mrs; m; m = m->next)
        if (m->key == lkey) {
            uint64_t b = (uint64_t)(uintptr_t)m->base;
            return addr >= b && len <= m->bytes && addr - b <= m->bytes - len ? m : NULL;
        }
    return NULL;
}

static dion__snic_rem_t *dion__snic_rem(dion__gdaki_nic_t *n, int peer, uint32_t rkey, uint64_t addr,
                                        uint64_t len)
{
    for (dion__snic_rem_t *r = n->rems; r; r = r->next)
        if (r->peer == peer && r->rkey == rkey)
            return addr >= r->addr && len <= r->bytes && addr - r->addr <= r->bytes - len ? r : NULL;
    return NULL;
}

static uint8_t dion__snic_status_syndrome(dion_status_t s)
{
    switch (s) {
    case DION_ERR_REMOTE_ACCESS:
        return DION__MLX5_SYND_REMOTE_ACCESS;
    case DION_ERR_PEER_FAILED:
        return DION__MLX5_SYND_TRANSPORT_RETRY;
    default:
        return DION__MLX5_SYND_REMOTE_OP;
    }
}

/* ---- completions ---- */

/* Writes a CQE into the collapsed CQ: bytes 0..59, then 0x3C..0x3F (wqe_counter, signature, op_own) in one
 * release store, so a poller never reads a counter without its opcode. */
static void dion__snic_cqe(dion__gdaki_qp_t *q, const uint8_t *cqe)
{
    memcpy(q->cq, cqe, 60);
    uint32_t tail;
    memcpy(&tail, cqe + 60, 4);
    __atomic_store_n((uint32_t *)(q->cq + 60), tail, __ATOMIC_RELEASE);
    q->cqes++;
}

static void dion__snic_fail(dion__gdaki_qp_t *q, const dion__snic_ent_t *e, const char *cause)
{
    dion__gdaki_nic_t *n = q->nic;
    uint8_t cqe[64];
    dion__mlx5_cqe_write_err(cqe, (uint16_t)e->start, e->opcode, q->qpn, e->syndrome, 0,
                             (uint32_t)q->cqes & 1u);
    snprintf(q->why, sizeof q->why,
             "softnic: rank %d context %u QP 0x%06x to rank %d: WQE index 0x%04x (%s) failed with syndrome "
             "0x%02x (%s): %s",
             n->comm->rank, q->ctx, q->qpn, q->peer, (unsigned)(uint16_t)e->start,
             dion__snic_opcode_name(e->opcode), e->syndrome, dion__snic_syndrome_name(e->syndrome),
             cause[0] ? cause : "no reason given");
    DION_LOG(DION_LOG_ERROR, "%s", q->why);
    q->failed = 1;
    dion__snic_cqe(q, cqe);
}

/* Retires WQEs in order: each finished one that asked for a CQE gets it; a failed one gets an error CQE (with
 * q->cause, what the check, the engine or the injection said) and fails the QP. */
static void dion__snic_retire(dion__gdaki_qp_t *q)
{
    while (!q->failed && q->head < q->tail) {
        dion__snic_ent_t *e = &q->fifo[q->head % q->nwqebb];
        if (e->pending) break;
        if (e->syndrome) {
            dion__snic_fail(q, e, q->cause);
            break;
        }
        if (e->signaled) {
            uint8_t cqe[64];
            dion__mlx5_cqe_write_req(cqe, (uint16_t)e->start, e->opcode, q->qpn, 0, (uint32_t)q->cqes & 1u);
            dion__snic_cqe(q, cqe);
        }
        q->head++;
    }
}

/* ---- reading and executing ---- */

static uint64_t dion__snic_cookie(const dion__gdaki_qp_t *q, uint64_t ord)
{
    return ((uint64_t)q->id << DION__SNIC_ORD_BITS) | (ord & DION__SNIC_ORD_MASK);
}

/* A WQE of the loopback QP (context, this rank): this rank's own atomics (device code sends them here so
 * that they are atomic with respect to the peers' atomics, which the engine applies with CPU atomics on the
 * same host words), executed at once with CPU atomics on this rank's registered memory. */
static void dion__snic_exec_self(dion__gdaki_qp_t *q, const dion__snic_wqe_t *w, dion__snic_ent_t *e)
{
    dion__gdaki_nic_t *n = q->nic;
    uint64_t rlen = w->kind == DION__SNIC_WRITE || w->kind == DION__SNIC_READ ? w->len : 8u;
    dion__snic_mr_t *r = dion__snic_lmr(n, w->rkey, w->raddr, rlen);
    dion__snic_mr_t *l = w->is_inline ? NULL : dion__snic_lmr(n, w->lkey, w->laddr, w->len);
    if (!r || (!w->is_inline && !l)) {
        e->syndrome = r ? DION__MLX5_SYND_LOCAL_PROT : DION__MLX5_SYND_REMOTE_ACCESS;
        snprintf(q->cause, sizeof q->cause,
                 "%s 0x%x with %llu bytes at 0x%llx names no registration of rank %d "
                 "that holds them (loopback QP)",
                 r ? "lkey" : "rkey", r ? w->lkey : w->rkey, (unsigned long long)(r ? w->len : rlen),
                 (unsigned long long)(r ? w->laddr : w->raddr), n->comm->rank);
        return;
    }
    void *dst = (void *)(uintptr_t)w->raddr, *local = (void *)(uintptr_t)w->laddr;
    uint64_t *word = dst, old = 0;
    switch (w->kind) {
    case DION__SNIC_WRITE:
        memcpy(dst, w->is_inline ? (const void *)w->inl : local, w->len);
        return;
    case DION__SNIC_READ:
        memcpy(local, dst, w->len);
        return;
    case DION__SNIC_FETCH_ADD:
        old = __atomic_fetch_add(word, w->swap_add, __ATOMIC_SEQ_CST);
        break;
    case DION__SNIC_CSWAP:
        old = w->compare;
        __atomic_compare_exchange_n(word, &old, w->swap_add, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        break;
    default: /* SET */
        __atomic_store_n(word, w->swap_add, __ATOMIC_SEQ_CST);
        return;
    }
    __atomic_store_n((uint64_t *)local, old, __ATOMIC_RELAXED); /* before the CQE, which is a release */
}

/* Posts what WQE w needs; BUSY: nothing posted, try again. Sets e->syndrome (and the cause) instead of
 * posting when a key or a range is wrong. */
static dion_status_t dion__snic_exec(dion__gdaki_qp_t *q, const dion__snic_wqe_t *w, dion__snic_ent_t *e,
                                     uint64_t ord)
{
    dion__gdaki_nic_t *n = q->nic;
    const dion__engine_ops_t *E = n->E;
    char *cause = q->cause;
    uint64_t ck = dion__snic_cookie(q, ord);
    if (w->kind == DION__SNIC_NOP) return DION_SUCCESS;
    if (q->peer == n->comm->rank) {
        dion__snic_exec_self(q, w, e);
        return DION_SUCCESS;
    }
    uint64_t rlen = w->kind == DION__SNIC_WRITE || w->kind == DION__SNIC_READ ? w->len : 8u;
    dion__snic_rem_t *r = dion__snic_rem(n, q->peer, w->rkey, w->raddr, rlen);
    if (!r) {
        e->syndrome = DION__MLX5_SYND_REMOTE_ACCESS;
        snprintf(cause, sizeof q->cause,
                 "rkey 0x%x with %llu bytes at 0x%llx names no registration of rank %d that holds them",
                 w->rkey, (unsigned long long)rlen, (unsigned long long)w->raddr, q->peer);
        return DION_SUCCESS;
    }
    uint64_t roff = w->raddr - r->addr;
    dion__snic_mr_t *l = NULL;
    if (!w->is_inline) {
        l = dion__snic_lmr(n, w->lkey, w->laddr, w->len);
        if (!l) {
            e->syndrome = DION__MLX5_SYND_LOCAL_PROT;
            snprintf(cause, sizeof q->cause,
                     "lkey 0x%x with %u bytes at 0x%llx names no local registration that holds them", w->lkey,
                     w->len, (unsigned long long)w->laddr);
            return DION_SUCCESS;
        }
    }
    void *local = (void *)(uintptr_t)w->laddr;
    dion_status_t st;
    /* an RC QP keeps a READ and an atomic behind the earlier operations to that peer */
    switch (w->kind) {
    case DION__SNIC_WRITE:
        if (w->is_inline) {
            uint8_t *b = q->bounce + (ord % q->nwqebb) * DION__SNIC_MAX_INLINE;
            memcpy(b, w->inl, w->len);
            st = E->put(n->e, q->peer, q->bounce_mr, b, &r->ek, roff, w->len, 0, ck);
        } else {
            st = E->put(n->e, q->peer, l->emr, local, &r->ek, roff, w->len, 0, ck);
        }
        break;
    case DION__SNIC_READ:
        st = E->get(n->e, q->peer, l->emr, local, &r->ek, roff, w->len, DION__ENGINE_F_ORDERED, ck);
        break;
    case DION__SNIC_FETCH_ADD:
        e->result = local;
        st = E->atomic(n->e, q->peer, DION__ENGINE_AMO_FETCH_ADD, &r->ek, roff, w->swap_add, 0,
                       DION__ENGINE_F_ORDERED, ck);
        break;
    case DION__SNIC_CSWAP:
        e->result = local;
        st = E->atomic(n->e, q->peer, DION__ENGINE_AMO_CSWAP, &r->ek, roff, w->swap_add, w->compare,
                       DION__ENGINE_F_ORDERED, ck);
        break;
    default: /* SET */
        st = E->atomic(n->e, q->peer, DION__ENGINE_AMO_SET, &r->ek, roff, w->swap_add, 0,
                       DION__ENGINE_F_ORDERED, ck);
        break;
    }
    if (st == DION_SUCCESS) {
        e->pending = 1;
        q->inflight++;
    } else if (st != DION__ENGINE_BUSY) {
        e->syndrome = dion__snic_status_syndrome(st);
        snprintf(cause, sizeof q->cause, "the engine refused it: %s", dion_last_error());
        st = DION_SUCCESS;
    }
    return st;
}

/* Reads a new doorbell, then takes and executes WQEs up to the producer index it names. */
static int dion__snic_serve(dion__gdaki_qp_t *q)
{
    dion__gdaki_nic_t *n = q->nic;
    int did = 0;
    uint64_t db = __atomic_load_n(q->db, __ATOMIC_ACQUIRE);
    if (db != q->db_seen && !q->stopped) {
        uint32_t rec = __atomic_load_n(&q->dbr[1], __ATOMIC_ACQUIRE);
        uint64_t pi = 0;
        char why[256];
        uint8_t syn = dion__snic_check_doorbell(db, rec, q->qpn, q->nwqebb, q->pi, &pi, why, sizeof why);
        if (syn) { /* a doorbell cannot be trusted: fail at the next WQE */
            dion__snic_ent_t *e = &q->fifo[q->tail % q->nwqebb];
            memset(e, 0, sizeof *e);
            e->start = q->next;
            e->syndrome = syn;
            snprintf(q->cause, sizeof q->cause, "%s", why);
            q->tail++;
            q->stopped = 1;
        } else {
            q->pi = pi;
        }
        q->db_seen = db;
        did = 1;
    }
    dion__snic_retire(q); /* first, so that a fence finds the earlier WQEs gone when they are done */
    while (!q->stopped && q->next < q->pi && q->tail - q->head < q->nwqebb) {
        dion__snic_wqe_t w;
        char why[256];
        uint8_t syn = dion__snic_parse_wqe(q->sq, q->nwqebb, q->next, q->pi, q->qpn, &w, why, sizeof why);
        dion__snic_ent_t *e = &q->fifo[q->tail % q->nwqebb];
        if (!syn && w.fence && q->head < q->tail) break; /* the fence: earlier WQEs complete first */
        memset(e, 0, sizeof *e);
        e->start = q->next;
        e->opcode = w.opcode;
        e->signaled = (uint8_t)w.signaled;
        if (syn) {
            e->syndrome = syn;
            snprintf(q->cause, sizeof q->cause, "broken invariant: %s", why);
            q->stopped = 1;
        } else if (n->inject_at && ++n->executed == n->inject_at) {
            e->syndrome = n->inject_syn;
            snprintf(q->cause, sizeof q->cause,
                     "injected by DION_SOFTNIC_INJECT (work request %llu of this rank's model)",
                     (unsigned long long)n->inject_at);
        } else {
            if (dion__snic_exec(q, &w, e, q->tail) == DION__ENGINE_BUSY) {
                if (n->inject_at) n->executed--; /* it is counted again when it is taken */
                break;
            }
            if (e->syndrome) q->stopped = 1;
        }
        q->tail++;
        q->next += syn ? 0 : w.wqebbs;
        did = 1;
    }
    dion__snic_retire(q);
    return did;
}

/* Engine completions: each finishes its WQE's operation (and writes a fetched value). */
static int dion__snic_progress(dion__gdaki_nic_t *n)
{
    dion__engine_cqe_t cq[32];
    int k = n->E->poll(n->e, cq, 32);
    if (k < 0) {
        for (uint32_t i = 0; i < DION__SNIC_MAX_QPS; i++) {
            dion__gdaki_qp_t *q = n->qps[i];
            if (q && !q->failed && q->head < q->tail) {
                dion__snic_ent_t *e = &q->fifo[q->head % q->nwqebb];
                e->syndrome = DION__MLX5_SYND_TRANSPORT_RETRY;
                e->pending = 0;
                snprintf(q->cause, sizeof q->cause, "the engine broke: %s", dion_last_error());
                dion__snic_retire(q);
            }
        }
        return 0;
    }
    for (int j = 0; j < k; j++) {
        uint32_t id = (uint32_t)(cq[j].cookie >> DION__SNIC_ORD_BITS);
        dion__gdaki_qp_t *q = id < DION__SNIC_MAX_QPS ? n->qps[id] : NULL;
        if (!q) continue;
        uint64_t ord = q->head + (((cq[j].cookie & DION__SNIC_ORD_MASK) - q->head) & DION__SNIC_ORD_MASK);
        dion__snic_ent_t *e = &q->fifo[ord % q->nwqebb];
        if (e->result && cq[j].status == DION_SUCCESS)
            __atomic_store_n((uint64_t *)e->result, cq[j].value, __ATOMIC_RELAXED);
        if (cq[j].status != DION_SUCCESS && !e->syndrome) {
            e->syndrome = dion__snic_status_syndrome(cq[j].status);
            snprintf(q->cause, sizeof q->cause, "%s", cq[j].why);
        }
        if (e->pending) e->pending--;
        if (q->inflight) q->inflight--;
    }
    return k > 0;
}

/* One nap of at most ns. Where the engine has a wait object that peers' operations reach (tcp), a poll(2)
 * on it, so they end the nap; the GPU's doorbells cannot, so the nap's bound stays their pickup. Returns 1
 * when the engine has work (the descriptor turned readable, or arming found some). */
static int dion__snic_nap(dion__gdaki_nic_t *n, uint64_t ns)
{
    int fd = -1, w = -1;
    pthread_mutex_lock(&n->mu);
    if (n->E->wait_arm) w = n->E->wait_arm(n->e, &fd);
    pthread_mutex_unlock(&n->mu);
    if (w > 0) return 1;
    struct timespec ts = {0, (long)ns};
    n->naps++;
    if (w < 0) {
        nanosleep(&ts, NULL);
        return 0;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int k = ppoll(&pf, 1, &ts, NULL);
    if (k > 0) n->wakes++;
    return k > 0;
}

static void *dion__snic_main(void *arg)
{
    dion__gdaki_nic_t *n = arg;
    uint64_t idle_since = 0, nap = 0;
    while (!__atomic_load_n(&n->stop, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&n->mu);
        int busy = dion__snic_progress(n);
        for (uint32_t i = 0; i < DION__SNIC_MAX_QPS; i++) {
            dion__gdaki_qp_t *q = n->qps[i];
            if (!q || !q->up || q->dead || q->failed) continue;
            busy |= dion__snic_serve(q);
            busy |= q->inflight != 0;
        }
        /* a rank whose QPs are idle still serves its peers' writes and atomics (shm, tcp: only inside poll)
         */
        busy = dion__engine_awake(n->E, n->e, busy);
        pthread_mutex_unlock(&n->mu);
        if (busy) {
            idle_since = 0;
            nap = 0;
            continue;
        }
        uint64_t now = dion__now_ns();
        if (!idle_since) idle_since = now;
        /* spin 50 us, then naps of 1 us doubling to 100 us: where the engine cannot tell served operations
         * (tcp;ofi_rxm 1.17), peers' operations on this rank progress only in this loop, so the nap bounds
         * their latency (1 ms naps made the 4-rank suite five times slower) */
        if (now - idle_since < 50000) continue;
        nap = nap ? (nap * 2 > 100000 ? 100000 : nap * 2) : 1000;
        if (dion__snic_nap(n, nap)) nap = 0; /* peers' operations arrive: serve them, nap short again */
    }
    return NULL;
}

/* ---- the NIC ops ---- */

static dion_status_t dion__snic_open_engine(dion_comm_t c, dion__engine_t **e, char *why, size_t cap)
{
    dion__engine_open_args_t oa;
    memset(&oa, 0, sizeof oa);
    oa.rank = c ? c->rank : 0;
    oa.nranks = c ? c->nranks : 1;
    oa.cuda_device = -1; /* the model's queues and the windows it serves are host memory */
    return dion__engine_ofi.open(&oa, e, why, cap);
}

static int dion__snic_usable(char *why, size_t cap)
{
    dion__engine_t *e = NULL;
    char w[256] = "";
    if (dion__snic_open_engine(NULL, &e, w, sizeof w) != DION_SUCCESS) {
        snprintf(why, cap, "the softnic model executes through the ofi engine, which cannot run here: %s", w);
        dion__error_clear();
        return 0;
    }
    dion__engine_ofi.close(e);
    return 1;
}

static dion_status_t dion__snic_inject_parse(dion__gdaki_nic_t *n)
{
    const char *v = dion__cfg_str("DION_SOFTNIC_INJECT");
    if (!v || !*v) return DION_SUCCESS;
    static const struct {
        const char *name;
        uint8_t syn;
    } kinds[] = {{"remote_access", DION__MLX5_SYND_REMOTE_ACCESS},
                 {"local_prot", DION__MLX5_SYND_LOCAL_PROT},
                 {"retry", DION__MLX5_SYND_TRANSPORT_RETRY},
                 {"remote_op", DION__MLX5_SYND_REMOTE_OP}};
    const char *at = strchr(v, '@');
    char *end = NULL;
    unsigned long long cnt = at ? strtoull(at + 1, &end, 10) : 0;
    for (size_t i = 0; at && end && !*end && cnt > 0 && i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i].name) == (size_t)(at - v) && !strncmp(v, kinds[i].name, (size_t)(at - v))) {
            n->inject_syn = kinds[i].syn;
            n->inject_at = cnt;
            DION_LOG(DION_LOG_WARN,
                     "softnic: rank %d fails its work request %llu with syndrome 0x%02x (%s) "
                     "as DION_SOFTNIC_INJECT asks",
                     n->comm->rank, cnt, kinds[i].syn, dion__snic_syndrome_name(kinds[i].syn));
            return DION_SUCCESS;
        }
    return dion__error(DION_ERR_INVALID_ARG,
                       "DION_SOFTNIC_INJECT=%s is not kind@N with kind remote_access, local_prot, retry or "
                       "remote_op and N >= 1 (e.g. remote_access@5)",
                       v);
}

static void dion__snic_close(dion__gdaki_nic_t *n);

static dion_status_t dion__snic_open(dion_comm_t c, dion__gdaki_nic_t **out)
{
    *out = NULL;
    dion__gdaki_nic_t *n = calloc(1, sizeof *n);
    dion__engine_addr_t me, *all = calloc((size_t)c->nranks, sizeof *all);
    char why[256] = "";
    dion_status_t st = n && all ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory");
    if (n) {
        n->comm = c;
        n->E = &dion__engine_ofi;
        n->next_key = DION__SNIC_KEY_BASE;
        pthread_mutex_init(&n->mu, NULL);
    }
    if (st == DION_SUCCESS) st = dion__snic_inject_parse(n);
    if (st == DION_SUCCESS) {
        st = dion__snic_open_engine(c, &n->e, why, sizeof why);
        if (st != DION_SUCCESS)
            st = dion__error(st, "gdaki softnic: the ofi engine cannot run on rank %d: %s", c->rank, why);
    }
    if (st == DION_SUCCESS) {
        n->E->query(n->e, &n->caps);
        memset(&me, 0, sizeof me);
        st = n->E->address(n->e, &me);
    }
    dion_status_t ag = dion__comm_agree(c, st, "opening the gdaki softnic model's engine");
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, &me, sizeof me, all);
    if (ag == DION_SUCCESS) st = n->E->connect(n->e, all, c->nranks);
    if (ag == DION_SUCCESS) ag = dion__comm_agree(c, st, "connecting the gdaki softnic model's engine");
    if (ag == DION_SUCCESS) {
        int e = pthread_create(&n->th, NULL, dion__snic_main, n);
        if (e == 0) n->started = 1;
        st = e == 0 ? DION_SUCCESS
                    : dion__error(DION_ERR_NO_MEMORY, "cannot start the softnic thread: %s", strerror(e));
        ag = dion__comm_agree(c, st, "starting the gdaki softnic model");
    }
    free(all);
    if (ag != DION_SUCCESS) {
        if (n) dion__snic_close(n);
        return ag;
    }
    DION_LOG(DION_LOG_WARN,
             "gdaki: softnic model selected (DION_GDAKI_NIC=softnic): a CPU thread of rank %d plays the NIC, "
             "reading the WQEs device code writes and executing them over the ofi engine (provider %s); "
             "nothing runs on a NIC; WQEs parsed with %s",
             c->rank, n->caps.provider,
             dion__snic_uses_mlx5dv() ? "rdma-core's mlx5dv.h" : "DION's copy of the layouts");
    *out = n;
    return DION_SUCCESS;
}

static void dion__snic_close(dion__gdaki_nic_t *n)
{
    if (!n) return;
    if (n->started) {
        __atomic_store_n(&n->stop, 1, __ATOMIC_RELEASE);
        pthread_join(n->th, NULL);
        DION_LOG(DION_LOG_INFO, "softnic rank %d: %llu idle naps, %llu ended by the engine's wait object",
                 n->comm ? n->comm->rank : -1, (unsigned long long)n->naps, (unsigned long long)n->wakes);
    }
    while (n->rems) {
        dion__snic_rem_t *r = n->rems;
        n->rems = r->next;
        free(r);
    }
    while (n->mrs) {
        dion__snic_mr_t *m = n->mrs;
        n->mrs = m->next;
        if (m->emr) n->E->mem_dereg(n->e, m->emr);
        free(m);
    }
    if (n->e) n->E->close(n->e);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

static dion_status_t dion__snic_mr_reg(dion__gdaki_nic_t *n, void *base, size_t bytes, int on_host,
                                       dion__gdaki_mr_t **out, uint32_t *lkey, uint64_t *laddr,
                                       dion__gdaki_rdesc_t *desc)
{
    if (!on_host)
        return dion__error(
            DION_ERR_UNSUPPORTED,
            "gdaki softnic: the model serves host memory only (its engine, ofi %s, does not register "
            "GPU memory); use host windows (dion_win_alloc on_host=1) with DION_GDAKI_NIC=softnic",
            n->caps.provider);
    dion__gdaki_mr_t *mr = calloc(1, sizeof *mr);
    if (!mr) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    dion__engine_rkey_t ek;
    memset(&ek, 0, sizeof ek);
    pthread_mutex_lock(&n->mu);
    dion_status_t st = n->E->mem_reg(n->e, base, bytes, DION__ENGINE_MEM_HOST, &mr->m.emr, &ek);
    if (st == DION_SUCCESS) {
        mr->m.key = n->next_key++;
        mr->m.base = base;
        mr->m.bytes = bytes;
        mr->m.next = n->mrs;
        n->mrs = &mr->m;
    }
    pthread_mutex_unlock(&n->mu);
    if (st != DION_SUCCESS) {
        free(mr);
        return st;
    }
    *lkey = mr->m.key;
    *laddr = (uint64_t)(uintptr_t)base;
    memset(desc, 0, sizeof *desc);
    desc->addr = (uint64_t)(uintptr_t)base;
    desc->rkey = mr->m.key;
    desc->flags = DION__GDAKI_MR_HOST;
    desc->bytes = bytes;
    memcpy(desc->blob, &ek, sizeof ek);
    *out = mr;
    return DION_SUCCESS;
}

static dion_status_t dion__snic_mr_dereg(dion__gdaki_nic_t *n, dion__gdaki_mr_t *mr)
{
    if (!mr) return DION_SUCCESS;
    pthread_mutex_lock(&n->mu);
    dion__snic_mr_t **pp = &n->mrs;
    while (*pp && *pp != &mr->m) pp = &(*pp)->next;
    if (*pp) *pp = mr->m.next;
    dion_status_t st = mr->m.emr ? n->E->mem_dereg(n->e, mr->m.emr) : DION_SUCCESS;
    pthread_mutex_unlock(&n->mu);
    free(mr);
    return st;
}

static dion_status_t dion__snic_mr_import(dion__gdaki_nic_t *n, int peer, const dion__gdaki_rdesc_t *d)
{
    dion__snic_rem_t *r = calloc(1, sizeof *r);
    if (!r) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    r->peer = peer;
    r->rkey = d->rkey;
    r->addr = d->addr;
    r->bytes = d->bytes;
    memcpy(&r->ek, d->blob, sizeof r->ek);
    pthread_mutex_lock(&n->mu);
    r->next = n->rems;
    n->rems = r;
    pthread_mutex_unlock(&n->mu);
    return DION_SUCCESS;
}

static void dion__snic_mr_forget(dion__gdaki_nic_t *n, int peer, const dion__gdaki_rdesc_t *d)
{
    pthread_mutex_lock(&n->mu);
    for (dion__snic_rem_t **pp = &n->rems; *pp; pp = &(*pp)->next)
        if ((*pp)->peer == peer && (*pp)->rkey == d->rkey && (*pp)->addr == d->addr) {
            dion__snic_rem_t *r = *pp;
            *pp = r->next;
            free(r);
            break;
        }
    pthread_mutex_unlock(&n->mu);
}

/* Queue memory: ordinary host memory in CPU mode, pinned host memory mapped into the GPU otherwise. */
static dion_status_t dion__snic_alloc(int cpu, size_t bytes, char **host, char **dev)
{
    if (cpu) {
        *host = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
        *dev = *host;
        return *host ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory for a softnic QP");
    }
    dion_status_t st =
        dion__cuda_check(cudaHostAlloc((void **)host, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                         "cudaHostAlloc for a softnic QP");
    if (st == DION_SUCCESS)
        st = dion__cuda_check(cudaHostGetDevicePointer((void **)dev, *host, 0), "cudaHostGetDevicePointer");
    return st;
}

static void dion__snic_free(int cpu, char *host)
{
    if (!host) return;
    if (cpu)
        free(host);
    else
        cudaFreeHost(host);
}

typedef struct {
    uint32_t magic, qpn, ctx;
    int32_t rank, peer;
} dion__snic_blob_t;

static dion_status_t dion__snic_qp_create(dion__gdaki_nic_t *n, const dion__gdaki_qp_args_t *a,
                                          dion__gdaki_qp_t **out, dion_gdaki_qp_dev_t *dev,
                                          uint8_t blob[DION__GDAKI_QP_BLOB])
{
    uint32_t nw = a->nwqebb;
    if (nw < 64 || nw > DION__MLX5_MAX_RING || (nw & (nw - 1)))
        return dion__error(DION_ERR_INVALID_ARG,
                           "gdaki softnic: an SQ of %u WQEBBs; it takes a power of two in "
                           "[64, 32768]",
                           nw);
    dion__gdaki_qp_t *q = calloc(1, sizeof *q);
    if (!q) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    q->nic = n;
    q->ctx = a->ctx;
    q->peer = a->peer;
    q->cpu = a->cpu;
    q->nwqebb = nw;
    q->fifo = calloc(nw, sizeof *q->fifo);
    q->bounce = aligned_alloc(64, (size_t)nw * DION__SNIC_MAX_INLINE);
    size_t sq = (size_t)nw * 64, off_dbr = sq, off_db = sq + 64, off_cq = sq + 128, bytes = sq + 192;
    char *host = NULL, *devp = NULL;
    dion_status_t st = q->fifo && q->bounce ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory");
    if (st == DION_SUCCESS) st = dion__snic_alloc(a->cpu, bytes, &host, &devp);
    if (st == DION_SUCCESS) {
        q->block = host;
        memset(host, 0, bytes);
        memset(host + off_cq, 0, 64);
        host[off_cq + 63] = (char)0xF0; /* op_own: INVALID, owner 0 (rdma-core's initial fill) */
        q->sq = (uint8_t *)host;
        q->dbr = (uint32_t *)(host + off_dbr);
        q->db = (uint64_t *)(host + off_db);
        q->cq = (uint8_t *)(host + off_cq);
        dion__engine_rkey_t ek;
        pthread_mutex_lock(&n->mu);
        st = n->E->mem_reg(n->e, q->bounce, (size_t)nw * DION__SNIC_MAX_INLINE, DION__ENGINE_MEM_HOST,
                           &q->bounce_mr, &ek);
        uint32_t id = 0;
        while (st == DION_SUCCESS && id < DION__SNIC_MAX_QPS && n->qps[id]) id++;
        if (st == DION_SUCCESS && id == DION__SNIC_MAX_QPS)
            st = dion__error(DION_ERR_NO_MEMORY, "gdaki softnic: more than %u QPs on rank %d",
                             DION__SNIC_MAX_QPS, n->comm->rank);
        if (st == DION_SUCCESS) {
            q->id = id;
            q->qpn = DION__SNIC_QPN_BASE + id;
            n->qps[id] = q;
        }
        pthread_mutex_unlock(&n->mu);
    }
    if (st != DION_SUCCESS) {
        if (q->bounce_mr) n->E->mem_dereg(n->e, q->bounce_mr);
        dion__snic_free(a->cpu, host);
        free(q->fifo);
        free(q->bounce);
        free(q);
        return st;
    }
    memset(dev, 0, sizeof *dev);
    dev->sq = (uint8_t *)devp;
    dev->dbrec = (uint32_t *)(devp + off_dbr) + 1; /* MLX5_SND_DBR */
    dev->db = (uint64_t *)(devp + off_db);
    dev->cq = (uint8_t *)(devp + off_cq);
    dev->qpn = q->qpn;
    dev->wq_mask = nw - 1;
    dev->log_ncqe = 0;
    dev->flags = DION_GDAKI_QP_COLLAPSED | DION_GDAKI_QP_HOSTMEM;
    dev->max_inline = DION__SNIC_MAX_INLINE;
    dion__snic_blob_t b = {DION__SNIC_QP_MAGIC, q->qpn, a->ctx, n->comm->rank, a->peer};
    memset(blob, 0, DION__GDAKI_QP_BLOB);
    memcpy(blob, &b, sizeof b);
    *out = q;
    return DION_SUCCESS;
}

static dion_status_t dion__snic_qp_connect(dion__gdaki_nic_t *n, dion__gdaki_qp_t *q,
                                           const uint8_t blob[DION__GDAKI_QP_BLOB])
{
    dion__snic_blob_t b;
    memcpy(&b, blob, sizeof b);
    if (b.magic != DION__SNIC_QP_MAGIC || b.rank != q->peer || b.peer != n->comm->rank || b.ctx != q->ctx)
        return dion__error(
            DION_ERR_INTERNAL,
            "gdaki softnic: rank %d's QP for context %u of rank %d got connection data from rank "
            "%d's QP for context %u of rank %d",
            n->comm->rank, q->ctx, q->peer, b.rank, b.ctx, b.peer);
    pthread_mutex_lock(&n->mu);
    q->remote_qpn = b.qpn;
    q->up = 1;
    pthread_mutex_unlock(&n->mu);
    return DION_SUCCESS;
}

static void dion__snic_qp_destroy(dion__gdaki_nic_t *n, dion__gdaki_qp_t *q)
{
    if (!q) return;
    /* operations in flight write into memory this QP names (READ data, fetched values): let them finish,
     * bounded; the thread keeps polling the engine meanwhile */
    pthread_mutex_lock(&n->mu);
    q->dead = 1;
    pthread_mutex_unlock(&n->mu);
    uint64_t t0 = dion__now_ns();
    for (;;) {
        pthread_mutex_lock(&n->mu);
        if (!n->started) dion__snic_progress(n);
        uint64_t left = q->inflight;
        pthread_mutex_unlock(&n->mu);
        if (!left || dion__now_ns() - t0 > 5000000000ull) break;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&n->mu);
    n->qps[q->id] = NULL;
    if (q->bounce_mr) n->E->mem_dereg(n->e, q->bounce_mr);
    pthread_mutex_unlock(&n->mu);
    dion__snic_free(q->cpu, q->block);
    free(q->fifo);
    free(q->bounce);
    free(q);
}

static int dion__snic_qp_why(dion__gdaki_qp_t *q, char *out, size_t cap)
{
    pthread_mutex_lock(&q->nic->mu);
    int has = q->failed && q->why[0];
    if (has) snprintf(out, cap, "%s", q->why);
    pthread_mutex_unlock(&q->nic->mu);
    return has;
}

const dion__gdaki_nic_ops_t dion__gdaki_softnic = {
    .version = DION__GDAKI_NIC_VERSION,
    .name = "softnic",
    .usable = dion__snic_usable,
    .open = dion__snic_open,
    .close = dion__snic_close,
    .mr_reg = dion__snic_mr_reg,
    .mr_dereg = dion__snic_mr_dereg,
    .mr_import = dion__snic_mr_import,
    .mr_forget = dion__snic_mr_forget,
    .qp_create = dion__snic_qp_create,
    .qp_connect = dion__snic_qp_connect,
    .qp_destroy = dion__snic_qp_destroy,
    .qp_why = dion__snic_qp_why,
};
