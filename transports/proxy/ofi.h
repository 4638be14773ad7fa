/* Private to the ofi engine (engine_ofi.c: setup and registration; ofi_ops.c: posting and completions). */
#ifndef DION_OFI_H
#define DION_OFI_H

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "engine.h"
#include "ofi_sym.h"
#include "src/internal.h"

#define OFI_NONE    UINT32_MAX
#define OFI_RESERVE 4u /* operation slots only the engine's own flushes and key checks take */

enum { ORDER_MSG, ORDER_FENCE, ORDER_WAIT };

/* ABANDONED: reported as timed out; the slot waits for the provider's late completion, if any. SENT (flush
 * mode): a write the provider completed at transmit, waiting for a later fetching operation to its peer to
 * confirm delivery. READY: its completion is decided and waits in the ready ring to be returned by poll. */
enum { OP_FREE, OP_QUEUED, OP_INFLIGHT, OP_ABANDONED, OP_SENT, OP_READY };
enum { OP_PUT, OP_GET, OP_AMO, OP_MSG };
enum { CLS_WRITE = 1, CLS_READ = 2 };

/* A latency histogram for the closing log line: 100 ns buckets up to 25.6 us, the last one open. */
#define OFI_HIST_NS      100u
#define OFI_HIST_BUCKETS 256u
typedef struct {
    uint32_t n[OFI_HIST_BUCKETS];
    uint64_t count;
} ofi_hist_t;

static inline void ofi_hist_add(ofi_hist_t *h, uint64_t ns)
{
    uint64_t b = ns / OFI_HIST_NS;
    h->n[b < OFI_HIST_BUCKETS ? b : OFI_HIST_BUCKETS - 1]++;
    h->count++;
}

/* The upper edge, in us, of the bucket that holds quantile q (0 when empty). */
static inline double ofi_hist_q(const ofi_hist_t *h, double q)
{
    uint64_t want = (uint64_t)(q * (double)h->count), seen = 0;
    for (uint32_t b = 0; b < OFI_HIST_BUCKETS && h->count; b++)
        if ((seen += h->n[b]) > want) return (double)((b + 1) * OFI_HIST_NS) / 1000.0;
    return 0;
}

/* Failures the engine decides itself (op_t.fail). REFUSED: still queued DION_OFI_OP_TIMEOUT after it was
 * handed over, the provider refusing every post of it (-FI_EAGAIN); POST: a held operation's post failed;
 * SENT: taken by the provider, its delivery never confirmed by a later fetch; NOCOMP: taken, never
 * completed; BEHIND: queued to the same peer behind one of these, so never posted (order). */
enum { FAIL_NONE, FAIL_REFUSED, FAIL_POST, FAIL_SENT, FAIL_NOCOMP, FAIL_BEHIND };

/* What an operation that failed was: enough for the sentences of those queued behind it. */
typedef struct {
    const char *name;
    size_t bytes;
    uint64_t roff;
    uint32_t tries;
    uint8_t fail; /* FAIL_* of that operation */
    int err;      /* FAIL_POST: the provider's error (negative) */
} ofi_cause_t;

typedef struct {
    struct fi_context2 ctx; /* first: completions give back its address */
    uint64_t operand, compare, result;
    uint64_t cookie;
    void *local;
    void *desc;
    uint64_t raddr, rkey, roff;
    uint64_t posted_ns;
    uint64_t seq; /* submission number to its peer (flush mode) */
    size_t bytes;
    int peer;
    dion_status_t status; /* READY: the completion's status */
    uint32_t next;        /* free list, the peer's queue or its list of SENT writes */
    uint8_t state, kind, amo, cls, ordered;
    uint8_t flushed;   /* a write (or a plain add or set) posted without FI_DELIVERY_COMPLETE: a later fetch
                          confirms it */
    uint8_t internal;  /* the engine's own flush or key check: no completion for the caller */
    uint32_t vk;       /* flushed write: its (peer, key) entry (vkey_t) while the key is unchecked for klen
                          bytes, else OFI_NONE; key check (internal): the entry it checks */
    uint64_t klen;     /* the region size the write's remote key was given with, or the size checked */
    uint64_t sub_ns;   /* handed to the engine: DION_OFI_OP_TIMEOUT runs from here */
    uint32_t tries;    /* posts of it the provider refused for lack of resources (-FI_EAGAIN) */
    uint8_t counted;   /* taken by the provider: counted in its peer's inflight until retired or abandoned */
    uint8_t fail;      /* READY: a failure the engine decided (FAIL_*), worded by ready_emit */
    ofi_cause_t cause; /* FAIL_BEHIND: the failed operation it was queued behind; FAIL_POST: the error */
    /* OP_MSG (DION_OFI_SIGNAL=msg, ofi_msg.c): data at rkey/roff (bytes may be 0: a signal alone), then the
     * signal (amo: ADD or SET of operand) on the word at soff of skey; mseq: its number to the peer; compare:
     * the target's refusal code once acknowledged */
    uint64_t skey, soff, mseq;
    uint32_t mnext; /* OP_MSG: the peer's list of unacknowledged messages (next stays the held queue's) */
} op_t;

/* Flush mode: a (peer, remote key) pair that writes used. shm drops a write it refuses (unknown key, beyond
 * the region) at the target and tells nobody, and a fetch after it still succeeds; so the first write with a
 * key is followed by a 1-byte read of the region's last byte with that key, and writes with it count as
 * delivered only once that read came back (docs/backends/proxy.md, "shm"). */
typedef struct {
    uint64_t key;
    uint64_t ok_len;      /* the check of this many bytes (from the region's start) came back */
    uint64_t chk_len;     /* the longest check posted */
    uint64_t bad_len;     /* a check of this many bytes failed (UINT64_MAX: none) */
    dion_status_t status; /* the failed check's status */
    int peer;
} vkey_t;

typedef struct {
    fi_addr_t addr;
    uint32_t inflight, writes,
        reads;                     /* posted, not completed; writes/reads by class (fetching atomics: both) */
    uint32_t qhead, qtail, queued; /* operations held back, in order */
    /* flush mode (docs/backends/proxy.md, "shm"): */
    uint64_t fkey, faddr; /* the peer's flush word */
    int fvalid;           /* the peer sent its flush word: writes to it go without FI_DELIVERY_COMPLETE */
    uint64_t seq;         /* operations submitted to the peer */
    uint64_t cover; /* seq of the last fetching operation submitted (its completion confirms earlier ones) */
    uint64_t delivered; /* every operation below this seq has been processed by the peer */
    uint64_t smax;      /* highest seq among the SENT writes */
    uint32_t shead;     /* SENT writes waiting for confirmation (a list through op_t.next) */
    uint32_t fpend;     /* a flush the provider refused, posted before the queue (it orders nothing) */
    uint8_t flushing, wanted;
    /* message mode (ofi_msg.c): sent messages waiting for the peer's acknowledgement, in order */
    uint64_t mtx; /* messages sent to the peer */
    uint32_t munacked, mhead, mtail;
    /* and the peer's messages applied here: the last one's number, the last acknowledged, refusals not yet
     * acknowledged (mseq, code) */
    uint64_t mrx, macked;
    uint64_t (*mfail)[2];
    uint32_t nmfail, capmfail;
    uint8_t ackwant;
} peer_t;

struct dion__engine_mr {
    struct fid_mr *mr;
    void *desc;
    char *base;
    size_t len;
    int mem;
};

struct dion__engine {
    const dion__fi_t *fi;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    uint32_t api;
    int rank, nranks, cuda_device;
    int order;
    int cuda_mem;
    int delivery;      /* FI_DELIVERY_COMPLETE granted */
    int fetch_updates; /* post add and set as fetching atomics, for their completion semantics (shm) */
    int plain_sig; /* flush mode, DION_OFI_SIGNAL=plain: add and set go as plain atomics, held like writes */
    int delivered; /* every completion means the target's memory holds the result */
    uint64_t op_timeout_ns, next_scan_ns;
    uint64_t
        busy_posts; /* posts the provider refused for lack of resources (-FI_EAGAIN), retried from poll */
    /* counts for the closing log line: what one command costs (docs/backends/proxy.md, Performance) */
    uint64_t n_posts, n_held, n_cq_reads, n_cq_empty, n_cqes;
    /* and times: the gap between polls (a proxy thread's pass while it spins) and a fetching operation's
     * post to its completion (the way to the peer's progress and back: signals, flushes, fetch-adds) */
    ofi_hist_t h_gap, h_fetch;
    uint64_t last_poll_ns;
    int broken;
    uint64_t mr_mode;
    uint64_t msg_order;
    uint64_t next_key;
    int live_mrs;
    peer_t *peers; /* [nranks] once connected */
    /* Flush mode: writes go without FI_DELIVERY_COMPLETE (shm then copies small ones into the peer's queue
     * and completes them at once); their completions are held until a fetching operation submitted after
     * them to the same peer completes, which by the provider's FI_ORDER_RAW the peer processed after them. */
    int flush;
    uint64_t *fword; /* the word peers flush on (fetch-add of 0), registered */
    struct dion__engine_mr fword_mr;
    uint32_t *ready, rhead, rtail; /* ops whose completion is decided, returned by the next poll */
    int *want, nwant;              /* peers whose SENT writes need a flush */
    uint64_t n_flushes, n_keychecks;
    struct fid_cntr *rx_cntr; /* peers' writes, reads and atomics served here (FI_REMOTE_WRITE|READ) */
    uint64_t rx_seen, rx_next_ns;
    vkey_t *vks; /* flush mode: checked (peer, key) pairs, append-only */
    uint32_t nvk, capvk;
    uint32_t *vhash, vhcap; /* open addressing: index + 1 into vks, 0 empty */
    int queued_peers;
    int wait_fd;     /* the CQ's wait descriptor (FI_WAIT_FD), -1: none (engine_ofi.c, wait_arm) */
    int peer_notice; /* DION__ENGINE_NOTICE_* */
    uint64_t n_waits;
    /* message mode (DION_OFI_SIGNAL=msg, ofi_msg.c): small put_signals and signals as one message each,
     * applied by the target's engine in its poll and acknowledged */
    int msg;
    uint32_t msg_data_max; /* largest put_signal data carried in a message */
    uint32_t mcredit;      /* unacknowledged messages per peer (the receives posted here, shared) */
    struct dion__ofi_rx *rxb;
    uint32_t nrx;
    struct dion__engine_mr rx_mr;
    struct dion__ofi_lkey *lkeys; /* this rank's registrations by key, for the peers' messages */
    uint32_t nlkeys, caplkeys;
    int *ackq, nackq; /* peers owed an acknowledgement */
    uint64_t n_msgs, n_msgs_rx, n_acks, n_acks_rx, msgs_rx_seen;
    ofi_hist_t h_msg; /* a message's post to its acknowledgement (the peer's poll and back) */
    op_t *ops;
    uint32_t nops, free_head, inflight_total, queued_total; /* totals over the peers: pending(-1) */
    uint32_t used;     /* slots not free: expire scans only while some are */
    uint32_t peer_cap; /* DION_OFI_PEER_OPS: unconfirmed operations per peer (0: no bound) */
    uint32_t fpend_n;  /* peers with a refused flush waiting (peer_t.fpend) */
    struct dion__engine_mr ops_mr;
};

static inline const char *dion__ofi_prov_name(const struct fi_info *i)
{
    return i && i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "?";
}

/* ofi_ops.c: the engine slots that post and complete operations (see engine.h for their contracts). */
dion_status_t dion__ofi_put(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, const void *src,
                            const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes, uint32_t flags,
                            uint64_t cookie);
dion_status_t dion__ofi_get(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, void *dst,
                            const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes, uint32_t flags,
                            uint64_t cookie);
dion_status_t dion__ofi_atomic(dion__engine_t *e, int peer, dion__engine_amo_t op,
                               const dion__engine_rkey_t *rk, uint64_t roff, uint64_t operand,
                               uint64_t compare, uint32_t flags, uint64_t cookie);
int dion__ofi_poll(dion__engine_t *e, dion__engine_cqe_t *out, int max);
int dion__ofi_served(dion__engine_t *e);
dion_status_t dion__ofi_put_signal(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, const void *src,
                                   const dion__engine_rkey_t *rk, uint64_t roff, size_t bytes,
                                   const dion__engine_rkey_t *sk, uint64_t soff, int sig_add, uint64_t value,
                                   uint64_t cookie);

/* ofi_msg.c: message mode (DION_OFI_SIGNAL=msg). */
dion_status_t dion__ofi_msg_open(dion__engine_t *e, char *why, size_t cap);
void dion__ofi_msg_close(dion__engine_t *e);
dion_status_t dion__ofi_msg_lkey_add(dion__engine_t *e, const struct dion__engine_mr *m, uint64_t key);
void dion__ofi_msg_lkey_del(dion__engine_t *e, const struct dion__engine_mr *m);
int dion__ofi_msg_may_carry(const dion__engine_t *e, int peer, const dion__engine_mr_t *lmr, size_t bytes,
                            const dion__engine_rkey_t *rk, const dion__engine_rkey_t *sk);
ssize_t dion__ofi_msg_submit(dion__engine_t *e, op_t *o);
void dion__ofi_msg_sent(dion__engine_t *e, op_t *o);
int dion__ofi_msg_is_rx(const dion__engine_t *e, const void *ctx);
/* A receive completed (ctx from the CQ; err: its error code, 0 when it completed): a peer's message is
 * applied, an acknowledgement decides this rank's messages (ready_push). */
void dion__ofi_msg_rx(dion__engine_t *e, void *ctx, int err);
void dion__ofi_msg_acks(dion__engine_t *e);
void dion__ofi_msg_prune(dion__engine_t *e);
const char *dion__ofi_msg_refusal(uint64_t code);
/* ofi_ops.c, for ofi_msg.c */
void dion__ofi_ready_push(dion__engine_t *e, op_t *o, dion_status_t st);
void dion__ofi_settle(dion__engine_t *e, peer_t *p, uint64_t below, dion_status_t st);
void dion__ofi_op_free(dion__engine_t *e, op_t *o);
uint32_t dion__ofi_pending(dion__engine_t *e, int peer);
void dion__ofi_counts(dion__engine_t *e, dion__engine_counts_t *out);

#endif
