/* The engine interface: what a proxy thread calls to move bytes between ranks. Every proxy engine (ofi,
 * verbs) fills one dion__engine_ops_t; the proxy names no library. The contract is written here, at each
 * slot: whether it blocks, what it guarantees, what a failure means.
 *
 * Threading: one engine instance is used by one thread at a time (the caller serializes). Several instances
 * may live in one process (one per proxy thread); each has its own endpoint and its own registrations.
 *
 * Progress: with many providers (tcp, shm) incoming writes, reads and atomics are served only inside poll().
 * Every rank must therefore call poll regularly while any peer may target it, also when it posts nothing. */
#ifndef DION_ENGINE_H
#define DION_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "dion/dion.h"

/* Raised when a slot changes meaning or the structs below change layout. */
#define DION__ENGINE_VERSION 4

/* A post that could not be accepted right now: every operation slot is in use. Nothing was posted; poll,
 * then post again. Not an error and no sentence is set. */
#define DION__ENGINE_BUSY ((dion_status_t)1000)

/* An optional slot (put_signal) that cannot carry this operation (too large, GPU memory, mode off). Nothing
 * was posted and no sentence is set: post it the usual way (put, then an ORDERED atomic). */
#define DION__ENGINE_DECLINED ((dion_status_t)1001)

typedef struct dion__engine dion__engine_t;       /* one opened engine (endpoint, queues, peers) */
typedef struct dion__engine_mr dion__engine_mr_t; /* one local registration */

typedef struct {
    int rank, nranks;
    int cuda_device;  /* GPU ordinal for GPU registrations; -1: host memory only */
    int want_cuda;    /* 1: try to register GPU memory directly (FI_HMEM, dmabuf...) */
    uint32_t max_ops; /* operations in flight at once; 0: engine default */
} dion__engine_open_args_t;

/* What the opened engine offers; filled by query. */
typedef struct {
    char provider[64]; /* e.g. "tcp;ofi_rxm", "shm", "mlx5_0" */
    char domain[64];
    char order[16]; /* how ORDERED is kept: "msg_order", "fence", "wait" (see DION__ENGINE_F_ORDERED) */
    int cuda_mem;   /* 1: GPU memory can be registered; 0: GPU windows need staging through host memory */
    int delivery_complete; /* 1: a completion means the target memory holds the result */
    int manual_progress;   /* 1: targets make progress only inside poll */
    uint32_t max_ops;
    uint64_t max_msg;     /* largest single put/get, bytes */
    uint32_t api_version; /* the engine library's version, e.g. FI_VERSION(1, 17) */
    int peer_notice; /* how an idle thread on this engine learns that peers' operations arrive, which with
                        manual progress need its poll: DION__ENGINE_NOTICE_* */
    int connect_ondemand; /* 1: an engine with peer_addr_bytes connects each peer at its first post instead
                             (verbs, DION_IB_CONNECT): the caller exchanges one address per rank through
                             address/connect, and posts to a peer return BUSY until its connection is up */
    uint64_t max_eager;   /* 0, or the largest put the provider sends in one piece without holding back later
                             operations to that peer (shm: its inject size; larger writes go through its
                             segmentation buffers, one transfer per peer at a time, every other post refused
                             until it is done) */
} dion__engine_caps_t;

enum {
    DION__ENGINE_NOTICE_NONE = 0, /* it cannot tell: peers' operations wait for the thread's next poll */
    DION__ENGINE_NOTICE_COUNTER,  /* served() says so after poll served some (a remote-operation counter) */
    DION__ENGINE_NOTICE_WAIT,     /* wait_arm's descriptor turns readable when they arrive */
    DION__ENGINE_NOTICE_NEEDLESS, /* they need no poll here (automatic progress, RDMA NICs) */
};

/* This rank's address, as the bootstrap exchanges it (allgather of fixed-size blobs). */
#define DION__ENGINE_ADDR_MAX 248
typedef struct {
    uint32_t len;
    uint32_t engine_version;
    uint8_t bytes[DION__ENGINE_ADDR_MAX];
} dion__engine_addr_t;

/* What a peer needs to address a registered region; plain data, exchanged as is. Offsets in posts are
 * relative to the region's start; the engine turns them into whatever its library wants. */
typedef struct {
    uint64_t addr;  /* engine-defined base (virtual address, or 0 for offset-addressed providers) */
    uint64_t key;   /* remote key */
    uint64_t len;   /* registered bytes: posts beyond it are refused locally with DION_ERR_INVALID_ARG */
    uint32_t flags; /* DION__ENGINE_MEM_* of the region */
    uint32_t engine_version;
} dion__engine_rkey_t;

enum { DION__ENGINE_MEM_HOST = 0, DION__ENGINE_MEM_CUDA = 1 };

/* Post flags. */
enum {
    /* The operation takes effect at the target only after every operation posted earlier on this engine to
     * the same peer has taken effect there (a put's data is in memory before this signal atomic changes its
     * word; an earlier atomic's result is in place). Later operations are not held back by it. The engine
     * gets this from the provider's ordering, a provider fence, or by holding the operation until the
     * earlier ones completed; caps.order says which. */
    DION__ENGINE_F_ORDERED = 1u << 0,
};

typedef enum {
    DION__ENGINE_AMO_ADD = 0,   /* *target += operand */
    DION__ENGINE_AMO_SET,       /* *target = operand (atomic 64-bit write) */
    DION__ENGINE_AMO_FETCH_ADD, /* old = *target; *target += operand; the completion carries old */
    DION__ENGINE_AMO_CSWAP, /* old = *target; if old == compare *target = operand; completion carries old */
    DION__ENGINE_AMO_COUNT
} dion__engine_amo_t;

/* One completion. Every posted operation produces exactly one, successful or not, unless the engine was
 * closed first. */
typedef struct {
    uint64_t cookie;      /* the value given at post */
    uint64_t value;       /* fetch-add and compare-swap: the target's old value; else 0 */
    dion_status_t status; /* DION_SUCCESS, DION_ERR_REMOTE_ACCESS (bad key, out of bounds, protection),
                             DION_ERR_PEER_FAILED (peer unreachable), DION_ERR_NETWORK (other) */
    int peer;
    char why[512]; /* when status is not DION_SUCCESS: a sentence naming the operation, peer and cause */
} dion__engine_cqe_t;

/* Counts of an engine's work (counts slot). */
typedef struct {
    uint64_t posts;   /* operations the provider took */
    uint64_t held;    /* operations queued in the engine first: for order, behind a refused one, or over the
                         per-peer bound (DION_OFI_PEER_OPS) */
    uint64_t refused; /* posts the provider refused for lack of resources (-FI_EAGAIN), each retry counted */
    uint64_t flushes; /* the engine's own fetches that confirm writes (ofi, shm's flush mode) */
} dion__engine_counts_t;

typedef struct dion__engine_ops {
    uint32_t version; /* DION__ENGINE_VERSION */
    const char *name; /* "ofi", "verbs" */

    /* Opens the library, picks a device/provider, creates endpoint and queues. Blocks (library loading and
     * provider discovery: tens of ms). DION_ERR_UNSUPPORTED: this engine cannot run here; why (always filled
     * on failure, up to why_cap bytes) says which piece is missing and what to do. Not logged as an error:
     * the caller decides whether another engine will do. */
    dion_status_t (*open)(const dion__engine_open_args_t *args, dion__engine_t **out, char *why,
                          size_t why_cap);
    /* Fills caps. Does not block. */
    void (*query)(dion__engine_t *e, dion__engine_caps_t *caps);
    /* This rank's address for the bootstrap exchange. Does not block. Used when peer_addr_bytes is 0 or
     * caps.connect_ondemand is 1. */
    dion_status_t (*address)(dion__engine_t *e, dion__engine_addr_t *out);
    /* Makes every rank addressable as a peer, given all ranks' addresses (all[rank], own included).
     * Collective in spirit: every rank calls it with the same array. May block briefly (address vector
     * insertion); connections themselves may be made lazily on first use, never waited on here. */
    dion_status_t (*connect)(dion__engine_t *e, const dion__engine_addr_t *all, int nranks);

    /* Engines with one connection per peer (verbs: an RC QP each) use these instead of address/connect,
     * unless caps.connect_ondemand says they connect at first use; 0 and NULL for the others. Every rank
     * builds a row of nranks entries of peer_addr_bytes (its address towards each peer it will talk to, zeros
     * for the others), the rows are allgathered, and each rank connects to peer p with p's entry for it.
     * peer_address may create the connection's local end (a QP in INIT): it blocks for the device's firmware
     * (about 100 us each on NICs). peer_connect makes it ready to post (RTR, RTS); the peer need not have
     * connected yet. Both: sentence on failure. */
    uint32_t peer_addr_bytes;
    dion_status_t (*peer_address)(dion__engine_t *e, int peer, uint8_t *out);
    dion_status_t (*peer_connect)(dion__engine_t *e, int peer, const uint8_t *theirs);

    /* Registers [base, base+bytes) for local use as a put source or get destination and for remote access
     * by peers; fills *rkey for the exchange. mem is DION__ENGINE_MEM_HOST or _CUDA; CUDA memory when
     * caps.cuda_mem is 0 fails with DION_ERR_UNSUPPORTED ("needs staging"). Blocks (pinning: may take ms
     * for large regions). */
    dion_status_t (*mem_reg)(dion__engine_t *e, void *base, size_t bytes, int mem, dion__engine_mr_t **mr,
                             dion__engine_rkey_t *rkey);
    /* Releases a registration. The caller guarantees no operation using it is in flight (locally or from
     * peers). Does not block beyond the library's unpinning. */
    dion_status_t (*mem_dereg)(dion__engine_t *e, dion__engine_mr_t *mr);

    /* The posts below do not block: they return DION_SUCCESS (a completion with cookie will follow),
     * DION__ENGINE_BUSY (nothing posted), or an error with the sentence set (bad arguments, endpoint
     * broken; nothing posted). Sources must stay unchanged, destinations untouched, until the completion. */

    /* RDMA write: bytes from src (inside lmr) to the peer's region rkey at roff. bytes may be 0. */
    dion_status_t (*put)(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, const void *src,
                         const dion__engine_rkey_t *rkey, uint64_t roff, size_t bytes, uint32_t flags,
                         uint64_t cookie);
    /* RDMA read: bytes from the peer's region rkey at roff into dst (inside lmr). */
    dion_status_t (*get)(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, void *dst,
                         const dion__engine_rkey_t *rkey, uint64_t roff, size_t bytes, uint32_t flags,
                         uint64_t cookie);
    /* 64-bit atomic on the peer's word at roff (8-byte aligned). Operands are passed by value: the caller
     * registers nothing for atomics. */
    dion_status_t (*atomic)(dion__engine_t *e, int peer, dion__engine_amo_t op,
                            const dion__engine_rkey_t *rkey, uint64_t roff, uint64_t operand,
                            uint64_t compare, uint32_t flags, uint64_t cookie);

    /* Makes progress (also for operations that peers target at this rank) and returns up to max
     * completions in out. Does not block. Returns how many were written, or -1 when the engine itself
     * broke (sentence set; every later call fails the same way). */
    int (*poll)(dion__engine_t *e, dion__engine_cqe_t *out, int max);
    /* Operations posted to peer (-1: to any peer) and not yet returned by poll. Does not block. */
    uint32_t (*pending)(dion__engine_t *e, int peer);

    /* Closes the engine; operations still in flight are dropped without completions. Blocks briefly (the
     * library tears down connections); never waits for peers. Registrations must be released first. */
    void (*close)(dion__engine_t *e);

    /* Optional (NULL where peers' operations need no local CPU: RDMA NICs). 1 when poll served operations of
     * peers since the last call (incoming writes and atomics give this rank no completion, so poll's count
     * cannot show them), else 0, also when the engine cannot tell. The proxy stays awake while it says 1: a
     * rank that only receives must not nap while peers write to it. Does not block; may look only now and
     * then. */
    int (*served)(dion__engine_t *e);

    /* Optional (NULL: no wait object). Prepares a blocking wait for peers' operations and completions, so
     * that an idle thread blocks instead of napping blind. 0: armed, *fd is a descriptor that poll(2) shows
     * readable (POLLIN) once the engine has something for poll: peers' operations arriving, completions; the
     * caller may then block on it (with its own timeout: the descriptor may stay quiet while a peer's
     * operation waits in a buffer the provider already read, so every block is bounded) and calls poll
     * after. 1: there is work now; call poll instead of blocking. -1: this engine has no such descriptor, or
     * one that peers' operations do not reach (caps.peer_notice). Call with the engine's lock held; the
     * block itself needs no lock. Does not block. */
    int (*wait_arm)(dion__engine_t *e, int *fd);

    /* Optional: what the engine did so far (the counts of its closing log line), for tests and benchmarks. */
    void (*counts)(dion__engine_t *e, dion__engine_counts_t *out);

    /* Optional (NULL: none). A put of bytes from src (inside lmr) to rkey at roff followed by an ORDERED add
     * (sig_add 1) or set (0) of value on the 8-byte word at soff of skey, as one operation with one
     * completion (cookie): the data is in place before the signal changes, and the completion means both
     * are. DION__ENGINE_DECLINED when this engine cannot carry it (size, memory kind, mode): nothing posted;
     * otherwise as put. */
    dion_status_t (*put_signal)(dion__engine_t *e, int peer, dion__engine_mr_t *lmr, const void *src,
                                const dion__engine_rkey_t *rkey, uint64_t roff, size_t bytes,
                                const dion__engine_rkey_t *skey, uint64_t soff, int sig_add, uint64_t value,
                                uint64_t cookie);
} dion__engine_ops_t;

/* Whether a progress thread on this engine must stay awake: its own work (busy), else peers' operations that
 * the last poll served (served; asked only when idle, since it may cost a provider call). Engines without the
 * slot say 0: their thread naps after its idle spin, and peers' operations wait for its next poll. The
 * proxy's threads and the gdaki softnic model both decide with this. */
static inline int dion__engine_awake(const dion__engine_ops_t *E, dion__engine_t *e, int busy)
{
    return busy || (E->served && E->served(e));
}

/* The engines built into libdion, in the order the proxy prefers them. An engine built without its
 * library's headers still exists: its open says so. */
extern const dion__engine_ops_t dion__engine_verbs;
extern const dion__engine_ops_t dion__engine_ofi;
/* Test hook (tests only): while it names a peer, the ofi engine treats every post to that peer as refused for
 * lack of resources (-FI_EAGAIN), as a provider does whose peer stopped draining its queue. -1: off. */
extern volatile int dion__ofi_test_refuse_peer;

#endif
