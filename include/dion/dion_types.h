/** \file dion_types.h
 * Types shared by the host API (dion.h) and the device API (dion_device.cuh).
 * Plain C11: the same header is read by nvcc for kernels and by a C compiler for CPU mode. */
#ifndef DION_TYPES_H
#define DION_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the functions libdion exports. */
#if defined(__GNUC__)
#define DION_API __attribute__((visibility("default")))
#else
#define DION_API
#endif

#define DION_VERSION_MAJOR 0 /**< version of these headers (dion_version_string: the library's) */
#define DION_VERSION_MINOR 1 /**< see DION_VERSION_MAJOR */
#define DION_VERSION_PATCH 0 /**< see DION_VERSION_MAJOR */

/** What every host call (and dion_wait, dion_quiet, dion_barrier) returns; dion_status_string names it. */
typedef enum {
    DION_SUCCESS = 0,       /**< done */
    DION_ERR_INVALID_ARG,   /**< a bad argument; dion_last_error() names it and the limit */
    DION_ERR_NO_MEMORY,     /**< an allocation failed */
    DION_ERR_UNSUPPORTED,   /**< not available in this build or on this machine */
    DION_ERR_CUDA,          /**< a CUDA call failed */
    DION_ERR_NETWORK,       /**< a network backend failed */
    DION_ERR_BOOTSTRAP,     /**< the bootstrap (root, environment, MPI) failed */
    DION_ERR_TIMEOUT,       /**< a wait ran past its timeout */
    DION_ERR_PEER_FAILED,   /**< another rank exited or failed */
    DION_ERR_REMOTE_ACCESS, /**< a peer's memory could not be accessed */
    DION_ERR_ABORTED,       /**< the comm was aborted (dion_comm_abort) */
    DION_ERR_INTERNAL       /**< a bug in DION */
} dion_status_t;

/** How a signal word is updated. SET and ADD are releases: ordered after the caller's earlier puts to that
 * peer. The _RELAXED forms carry no ordering (pure synchronization, no data): they skip the fence and cost a
 * store. */
typedef enum {
    DION_SIG_SET = 0,         /**< signal = value, release */
    DION_SIG_ADD = 1,         /**< signal += value, release */
    DION_SIG_SET_RELAXED = 2, /**< signal = value, no ordering */
    DION_SIG_ADD_RELAXED = 3  /**< signal += value, no ordering */
} dion_sig_op_t;

/** Comparisons for dion_wait: "signal CMP value" (unsigned 64-bit). */
typedef enum {
    DION_CMP_EQ = 0, /**< == */
    DION_CMP_NE,     /**< != */
    DION_CMP_GT,     /**< > */
    DION_CMP_GE,     /**< >= */
    DION_CMP_LT,     /**< < */
    DION_CMP_LE      /**< <= */
} dion_cmp_t;

/** Per-context counters, kept when DION_STATS=1 (dion_dev_stats); named after the calls they count. */
typedef struct {
    uint64_t puts;          /**< puts and put_signals */
    uint64_t put_bytes;     /**< their bytes */
    uint64_t gets;          /**< gets */
    uint64_t get_bytes;     /**< their bytes */
    uint64_t signals;       /**< signals and put_signals */
    uint64_t waits;         /**< waits (dion_wait and dion_counter_wait) */
    uint64_t wait_timeouts; /**< waits that timed out */
    uint64_t atomics;       /**< fetch_add and compare_swap */
    uint64_t fences;        /**< fences */
    uint64_t quiets;        /**< quiets (barriers' included) */
    uint64_t barriers;      /**< barriers */
    uint64_t errors;        /**< error records written */
} dion_ctx_stats_t;

/** Device-side operation codes, used in error records and traces: DION_OP_X is dion_x (DION_OP_CTX:
 * dion_ctx).
 */
typedef enum {
    DION_OP_NONE = 0,
    DION_OP_PUT,
    DION_OP_PUT_SIGNAL,
    DION_OP_SIGNAL,
    DION_OP_WAIT,
    DION_OP_SIGNAL_READ,
    DION_OP_FENCE,
    DION_OP_QUIET,
    DION_OP_BARRIER,
    DION_OP_GET,
    DION_OP_FETCH_ADD,
    DION_OP_COMPARE_SWAP,
    DION_OP_CTX,
    DION_OP_PUT_PACKET,
    DION_OP_WAIT_PACKET,
    DION_OP_COUNTER_WAIT,
    DION_OP_COUNTER_READ
} dion_op_t;

/** Local completion counters per context (dion_put_counted, dion_counter_wait): counter indices run from 0 to
 * DION_NUM_COUNTERS - 1. */
#define DION_NUM_COUNTERS 8

/** Transport that serves one peer. */
typedef enum {
    DION_TRANSPORT_NONE = 0,
    DION_TRANSPORT_SELF,
    DION_TRANSPORT_P2P,
    DION_TRANSPORT_PROXY, /**< commands into the context's ring, executed by a proxy thread (device/proxy.cuh)
                           */
    DION_TRANSPORT_GDAKI  /**< mlx5 work requests that device code posts to the NIC itself (device/gdaki.cuh)
                           */
} dion_transport_t;

/** Memory scope a peer needs for ordering: GPU when both ends are threads of one device, SYS otherwise. */
typedef enum { DION_SCOPE_GPU = 0, DION_SCOPE_SYS = 1 } dion_scope_t;

/* One peer's part of a window as the device sees it. */
struct dion_win_peer {
    char *base;    /* mapped address of the peer's window; NULL when not load/store reachable */
    uint64_t size; /* bytes that peer registered (may differ per rank, may be 0) */
};

#define DION_WIN_MAGIC   0x4e495744u /* "DWIN" */
#define DION_WIN_DEAD    0x44414544u /* "DEAD": the window was destroyed; its descriptor is kept, marked */
#define DION_WIN_HOST    0x1u        /* window lives in host memory (CPU mode, or pinned host) */
#define DION_WIN_ALIGN16 0x2u        /* every rank's base (as mapped here) is 16-byte aligned */

/* Device-side window descriptor; dion_win_device() returns a pointer the device (or CPU mode) can read. */
struct dion_win_dev {
    uint32_t magic;
    uint32_t flags;
    int32_t nranks;
    uint32_t id;
    struct dion_win_peer peer[1]; /* nranks entries */
};
/** A window as device code names it (dion_win_device). */
typedef struct dion_win_dev *dion_dwin_t;

/* Per-peer entry of the device handle. */
struct dion_dev_peer {
    union {
        uint64_t *signals; /* the peer's signal table, mapped; NULL when not reachable */
        uint64_t signals_u;
    };
    uint32_t transport; /* dion_transport_t */
    uint32_t scope;     /* dion_scope_t */
};

/** One error that device code recorded; dion_dev_check and the watchdog report it. */
typedef struct {
    uint64_t seq;    /**< 1 + the record's number, written last; 0 while the slot is free or being written */
    uint32_t status; /**< dion_status_t */
    uint32_t op;     /**< dion_op_t */
    int32_t rank;    /**< the recording rank */
    int32_t peer;    /**< the target rank, or -1 */
    uint32_t ctx;    /**< context index */
    uint32_t block;  /**< linear block index */
    uint32_t thread; /**< linear thread index */
    uint32_t sig;    /**< signal index */
    uint32_t cmp;    /**< dion_cmp_t of a wait, or DION_WCHK_* of a window check */
    uint32_t detail; /**< DION_ERR_DETAIL_*: which check failed, where status and op do not tell */
    uint64_t expected; /**< what the call waited for or what the check allowed */
    uint64_t observed; /**< what it saw */
    uint64_t offset;   /**< window offset */
    uint64_t bytes;    /**< size */
    uint64_t limit;    /**< the limit that was broken */
    uint64_t time_ns;  /**< device clock when recorded */
} dion_err_record_t;

#define DION_ERR_RING 64

/** \name DION_WCHK_*: why DION_CHECK rejected a window argument of a put, put_signal, get or atomic: the
 * record's cmp field.
 * \{ */
#define DION_WCHK_RANGE     1 /**< offset + bytes lies outside the rank's part (limit: its size) */
#define DION_WCHK_ALIGN     2 /**< an atomic's address (the rank's base + offset) is not 8-byte aligned */
#define DION_WCHK_NOT_WIN   3 /**< NULL, or not a window descriptor of this process */
#define DION_WCHK_DESTROYED 4 /**< the window was destroyed (expected: its id) */
#define DION_WCHK_OTHER     5 /**< a window of a communicator with another number of ranks */
#define DION_WCHK_NOT_HOST  6 /**< CPU mode and the window (or its descriptor) is GPU memory */
#define DION_WCHK_UNMAPPED  7 /**< the rank's part is not mapped here */
/** \} */

/* The record's detail field. */
#define DION_ERR_DETAIL_NONE    0 /**< status and op tell it all */
#define DION_ERR_DETAIL_CTX     1 /**< the context index (observed) is not below num_contexts (expected) */
#define DION_ERR_DETAIL_PROXY   2 /**< the context's proxy ring timed out (limit: the timeout) or failed */
#define DION_ERR_DETAIL_COUNTER 3 /**< the local counter index (sig) is not below DION_NUM_COUNTERS */
/** gdaki: a QP failed or a wait on it timed out; expected: the QP number, offset: the error completion's
 * syndrome [7:0], vendor syndrome [15:8], WQE opcode [23:16] and WQE index [47:32]; cmp: DION_GDAKI_REC_* */
#define DION_ERR_DETAIL_GDAKI  4
#define DION_GDAKI_REC_TIMEOUT 0 /**< a wait for completions timed out (limit: the timeout) */
#define DION_GDAKI_REC_CQE     1 /**< the NIC reported an error completion (offset: its syndrome) */
#define DION_GDAKI_REC_STALL                                                                                 \
    2                        /**< the QP was failed: a thread could not get ring slots or its turn in time */
#define DION_GDAKI_REC_KEY 3 /**< a window the NIC has no registration for (observed: its id) */

/* Written by device code, read by the host: lives in host-mapped memory. Each slot has a claim word in the
 * signal table (device memory), so no atomics touch host memory: a writer takes a free slot, the host frees
 * it after reading the record; records that find their slot taken are dropped and counted. */
struct dion_dev_errors {
    dion_err_record_t rec[DION_ERR_RING];
};

/** One device operation recorded under DION_TRACE (docs/tracing.md). Times are the device clock: the GPU's
 * globaltimer, or CLOCK_MONOTONIC in CPU mode. 64 bytes. */
typedef struct {
    uint64_t start_ns; /**< device clock at the start */
    uint64_t end_ns;   /**< signals are instants: end_ns == start_ns */
    uint64_t bytes;    /**< size */
    uint64_t value;    /**< signal value, wait operand, atomic operand */
    uint64_t observed; /**< wait: the value seen; atomics: the old value */
    uint16_t op;       /**< dion_op_t */
    uint16_t cmp;      /**< wait: dion_cmp_t; signal and put_signal: dion_sig_op_t */
    int32_t peer;      /**< target rank, or -1 */
    uint32_t sig;      /**< signal index */
    uint32_t status;   /**< dion_status_t the call returned */
    uint32_t block;    /**< linear block index */
    uint32_t thread;   /**< linear thread index */
} dion_trace_event_t;

/* Per-context bounded event arrays (device memory, or host memory in CPU mode). Events past the capacity are
 * counted in heads but not kept. */
struct dion_dev_trace {
    uint64_t *heads;            /* [num_contexts] events claimed so far, dropped ones included */
    dion_trace_event_t *events; /* [num_contexts][capacity] */
    uint64_t capacity;          /* events kept per context */
};

/* Handle flags. */
#define DION_DEVF_CHECK   0x1u  /* DION_CHECK=1: check every argument, record instead of touching memory */
#define DION_DEVF_STATS   0x2u  /* DION_STATS=1: count ops per context */
#define DION_DEVF_CPU     0x4u  /* CPU mode: device calls run on CPU threads over host windows */
#define DION_DEVF_SYS     0x8u  /* fences need system scope: a peer on another GPU, or host windows */
#define DION_DEVF_TRACE   0x10u /* DION_TRACE is set: device calls record events (device/trace.cuh) */
#define DION_DEVF_PROXY   0x20u /* some peer is served by the proxy: proxy_rings is set */
#define DION_DEVF_GDAKI   0x40u /* some peer is served by gdaki: gdaki is set */
#define DION_DEVF_SIGHOST 0x80u /* this rank's signal table is host memory (CPU mode, or pinned: proxy) */

/* Words at the tail of every signal table, after the user's signals. */
#define DION_CTL_ABORT       0 /* nonzero: the comm was aborted; holds a dion_status_t */
#define DION_CTL_ABORT_RANK  1 /* the rank that failed or aborted */
#define DION_CTL_ERR_HEAD    2 /* error records numbered so far */
#define DION_CTL_ERR_DROPPED 3 /* error records dropped because their ring slot was taken */
#define DION_CTL_ERR_CLAIM                                                                                   \
    8 /* DION_ERR_RING claim words: 0 free, else 1 + the number of the slot's record                         \
       */
#define DION_CTL_WORDS (DION_CTL_ERR_CLAIM + DION_ERR_RING) /* then one barrier counter per context */

/* The first peers' entries are also kept inside the handle: kernels receive it by value, so these are read
 * from the parameter (constant) bank, which the L1 invalidation of an acquire does not touch. */
#define DION_DEV_INLINE_PEERS 8

/* Windows that existed when the handle was made (the first DION_DEV_WIN_SLOTS) are described inside it too,
 * so that kernels find their bases without a table load; later windows work through their table. */
#define DION_DEV_WIN_SLOTS 4
struct dion_dev_win_slot {
    dion_dwin_t win; /* NULL: slot unused */
    uint32_t flags;
    uint32_t id; /* the window's id, which the proxy's commands and gdaki's keys name it by */
    union {
        char *base[DION_DEV_INLINE_PEERS];
        uint64_t base_u[DION_DEV_INLINE_PEERS];
    };
    /* this rank's own part (base[rank] at any rank): a source or local destination without an 8-way pick */
    union {
        char *self;
        uint64_t self_u;
    };
};

/** The device handle (dion_dev_create): a plain struct passed to kernels by value; its fields are internal
 * except rank and nranks. */
typedef struct dion_dev {
    int32_t rank;
    int32_t nranks;
    uint32_t num_signals;
    uint32_t num_contexts;
    uint64_t wait_timeout_ns; /* 0: wait forever */
    uint32_t flags;
    uint32_t generation;
    uint64_t *signals; /* this rank's signal table (user signals, control words, barrier counters) */
    struct dion_dev_peer *peers;    /* [nranks] */
    struct dion_dev_errors *errors; /* host-mapped error ring */
    uint64_t *ctx_state;            /* [num_contexts] barrier epochs */
    dion_ctx_stats_t *stats;        /* [num_contexts], NULL unless DION_STATS=1 */
    struct dion_dev_trace trace;    /* used only when flags has DION_DEVF_TRACE */
    void *host;                     /* host-side bookkeeping; opaque to device code */
    struct dion_dev_peer peer_inline[DION_DEV_INLINE_PEERS]; /* copies of peers[0..7] */
    struct dion_dev_win_slot win_slot[DION_DEV_WIN_SLOTS];
    struct dion_proxy_ring_dev *proxy_rings; /* [num_contexts] when flags has DION_DEVF_PROXY, else NULL */
    /* [num_contexts][DION_NUM_COUNTERS] local completion counts of the p2p paths (device/counter.cuh); a
     * counter's value adds the context's proxy ring's count where it has one */
    uint64_t *lcount;
    struct dion_gdaki_dev *gdaki; /* when flags has DION_DEVF_GDAKI, else NULL */
} dion_dev_t;

/** A context: an ordered lane of operations, obtained with dion_ctx(dev, index). */
typedef struct {
    dion_dev_t dev; /**< the handle */
    uint32_t index; /**< the context index */
} dion_ctx_t;

#ifdef __cplusplus
}
#endif
#endif /* DION_TYPES_H */
