/* The proxy backend's command format: what a GPU thread (or a CPU thread in CPU mode) writes into a context's
 * ring and what a proxy thread reads. Shared by device/proxy.cuh (producers) and transports/proxy/
 * (consumer), so it holds only layouts and constants. docs/backends/proxy.md describes the protocol. */
#ifndef DION_DEVICE_PROXY_PROTO_CUH
#define DION_DEVICE_PROXY_PROTO_CUH

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DION__STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define DION__STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Bumped whenever the layout or the meaning of a field changes: device code compiled against one version and
 * a library of another must not exchange commands (the consumer fails the ring with a sentence instead). */
#define DION_PROXY_PROTO_VERSION 1u

typedef enum {
    DION_PROXY_OP_NOP = 0,      /* a skipped slot (its producer gave up): complete it in order, do nothing */
    DION_PROXY_OP_PUT,          /* rma: local src_win/src_off -> peer's dst_win/dst_off, bytes */
    DION_PROXY_OP_PUT_SIGNAL,   /* rma: the put, then the signal; the signal never overtakes the data */
    DION_PROXY_OP_SIGNAL,       /* rma: sig/sig_op/value on the peer, ordered after earlier puts to it */
    DION_PROXY_OP_GET,          /* rma: peer's src_win/src_off -> local dst_win/dst_off, bytes */
    DION_PROXY_OP_FETCH_ADD,    /* amo: old value into result, then result_tag */
    DION_PROXY_OP_COMPARE_SWAP, /* amo: old value into result, then result_tag */
    DION_PROXY_OP_FENCE,        /* earlier commands reach each peer before later ones */
    DION_PROXY_OP_QUIET,        /* completes only when every earlier command of the ring is complete */
    DION_PROXY_OP_COUNT
} dion_proxy_op_t;

/* flags */
#define DION_PROXY_F_LOCAL_COUNT 0x1u /* add 1 to local counter `counter` once the source may be reused */

/* Local completion counters per ring (the `counter` field indexes them). */
#define DION_PROXY_LCOUNTERS 8u

/* Written into seq by a fetching producer once it has read its result: the slot may then be reused. */
#define DION_PROXY_SEQ_RELEASED (1ull << 63)

/* One command: 64 bytes, one slot of a ring, one cache line.
 *
 * Publication: the producer that holds ticket t writes every field but seq, then stores seq = t + 1 with
 * release semantics (system scope). The consumer at position t acquires seq and takes the command only when
 * it equals t + 1: a value from an earlier lap (t + 1 - slots) or 0 means "not yet", so slots are never
 * cleared and a command is never read half-written. */
typedef struct dion_proxy_cmd {
    uint64_t seq;    /* ticket + 1; bit 63 set by a fetching producer when it has read the result */
    uint8_t version; /* DION_PROXY_PROTO_VERSION */
    uint8_t op;      /* dion_proxy_op_t */
    uint16_t flags;  /* DION_PROXY_F_* */
    int32_t peer;    /* target rank (-1 for FENCE / QUIET / NOP) */
    union {
        struct {                       /* PUT, PUT_SIGNAL, SIGNAL, GET */
            uint32_t dst_win, src_win; /* window ids (dion_win_dev.id) */
            uint64_t dst_off, src_off;
            uint64_t bytes;
            uint32_t sig;   /* signal index at the peer (PUT_SIGNAL, SIGNAL) */
            uint8_t sig_op; /* dion_sig_op_t */
            uint8_t reserved;
            uint16_t counter; /* local counter index, with DION_PROXY_F_LOCAL_COUNT */
            uint64_t value;   /* signal operand */
        } rma;
        struct { /* FETCH_ADD, COMPARE_SWAP */
            uint32_t win, reserved;
            uint64_t off;
            uint64_t operand;    /* FETCH_ADD: the addend; COMPARE_SWAP: the expected value */
            uint64_t desired;    /* COMPARE_SWAP */
            uint64_t result;     /* written by the proxy */
            uint64_t result_tag; /* written by the proxy after result: seq of this command (ticket + 1) */
        } amo;
    } u;
} dion_proxy_cmd_t;

DION__STATIC_ASSERT(sizeof(dion_proxy_cmd_t) == 64,
                    "a command is one 64-byte slot: producers and the consumer index the ring by it, and one "
                    "cache line keeps a command's fields together over PCIe");
DION__STATIC_ASSERT(offsetof(dion_proxy_cmd_t, seq) == 0,
                    "seq is the first 8-byte word so that an aligned 64-bit release store publishes it");
DION__STATIC_ASSERT(offsetof(dion_proxy_cmd_t, u) == 16,
                    "the operation body starts at byte 16 in every version 1");
DION__STATIC_ASSERT(offsetof(dion_proxy_cmd_t, u.amo.result) % 8 == 0 &&
                        offsetof(dion_proxy_cmd_t, u.amo.result_tag) % 8 == 0,
                    "the proxy writes result and result_tag as whole aligned 64-bit words");
DION__STATIC_ASSERT(DION_PROXY_OP_COUNT <= 256, "op is one byte");

/* Counters the consumer writes and producers read: host memory mapped into the GPU, each on its own line so
 * that a producer polling one does not contend with writes to another. */
typedef struct dion_proxy_ctl {
    uint64_t consumed; /* positions freed for reuse: a producer with ticket t may write once t < consumed +
                          slots */
    uint64_t pad0[7];
    uint64_t completed; /* positions complete, in ring order: every command with seq <= completed is done;
                           | DION_PROXY_COMPLETED_FAILED once the ring failed */
    uint64_t pad1[7];
    uint64_t status;    /* 0, or the dion_status_t that failed the ring (producers and quiet return it) */
    uint64_t abandoned; /* 1 once a producer gave up on a ticket: the consumer then looks in abandon[] */
    uint64_t pad2[6];
    uint64_t lcount[DION_PROXY_LCOUNTERS]; /* local completion counters (DION_PROXY_F_LOCAL_COUNT) */
} dion_proxy_ctl_t;

DION__STATIC_ASSERT(sizeof(dion_proxy_ctl_t) % 64 == 0 && offsetof(dion_proxy_ctl_t, completed) == 64 &&
                        offsetof(dion_proxy_ctl_t, status) == 128,
                    "consumed, completed and status sit on separate 64-byte lines");

/* Set in ctl->completed once the ring failed (status says why): a completion wait learns of the failure from
 * the word it polls and reads status only then, instead of one more read of host memory per wait. Kernels
 * that read status after every wait stay correct (the value with this bit passes every target). */
#define DION_PROXY_COMPLETED_FAILED (1ull << 63)

/* Tickets that producers abandoned after the wait timeout (ticket + 1 each), claimed in order with a counter
 * in producer-side memory and never reused: the consumer turns each into a NOP when it reaches it. */
#define DION_PROXY_ABANDON_MAX 64u

/* Producer-side words: GPU memory on a GPU (atomics stay on the device), host memory in CPU mode. */
typedef struct dion_proxy_prod {
    uint64_t head;         /* next ticket */
    uint64_t tail_cache;   /* a recent value of ctl->consumed, so that posts need not read host memory */
    uint64_t abandon_head; /* abandon[] entries claimed */
    uint64_t done_cache;   /* a recent value of ctl->completed (its failure bit included) */
    uint64_t poller;       /* 1 while one waiting thread reads the ring's host words for all of them */
    uint64_t fail_cache;   /* what that thread read from ctl->status or the abort word, once nonzero */
    uint64_t pad[2];
} dion_proxy_prod_t;

/* What device code needs to post into one ring; the host fills it (dion__proxy_ring_t.dev). */
typedef struct dion_proxy_ring_dev {
    dion_proxy_cmd_t *slots; /* nslots commands, host memory mapped into the GPU */
    dion_proxy_ctl_t *ctl;   /* host memory mapped into the GPU */
    uint64_t *abandon;       /* DION_PROXY_ABANDON_MAX entries, host memory mapped into the GPU */
    dion_proxy_prod_t *prod; /* GPU memory (host memory in CPU mode) */
    const uint64_t *abort;   /* nonzero: the comm was aborted (its dion_status_t); may be NULL */
    uint32_t mask;           /* nslots - 1; nslots is a power of two */
    uint32_t scope;          /* dion_scope_t of prod: GPU when producers are GPU threads */
} dion_proxy_ring_dev_t;

#endif /* DION_DEVICE_PROXY_PROTO_CUH */
