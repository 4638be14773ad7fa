/* The gdaki backend's device-visible descriptors: what a NIC implementation (transports/gdaki/nic.h: the
 * softnic model or mlx5 through DEVX) and the backend fill for device code, and what device/gdaki.cuh reads.
 * Layouts and constants only, like device/proxy_proto.cuh. docs/gdaki.md describes the protocol.
 *
 * One QP per (context, peer). Its SQ ring, doorbell record, doorbell register and CQ are the NIC's (real
 * memory the hardware reads, or the softnic model's host memory); its counters (dion_gdaki_qp_state_t) are
 * the backend's, in memory the posting threads' atomics stay in (GPU memory on a GPU, host memory in CPU
 * mode). Every WQE field is big-endian; keys and addresses here are host order (device code swaps them). */
#ifndef DION_DEVICE_GDAKI_PROTO_CUH
#define DION_DEVICE_GDAKI_PROTO_CUH

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DION__GDAKI_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define DION__GDAKI_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Bumped when a layout below or the meaning of a field changes. */
#define DION_GDAKI_PROTO_VERSION 3u

/* Window ids map to rows of the key table modulo this (a power of two); a row remembers whose it is. */
#define DION_GDAKI_KEY_ROWS 256u

/* dion_gdaki_qp_dev_t.flags */
#define DION_GDAKI_QP_COLLAPSED 0x1u /* the CQ is collapsed (cc=1): every CQE lands in entry 0 */
#define DION_GDAKI_QP_HOSTMEM                                                                                \
    0x2u                      /* SQ, doorbell record and CQ are host memory: order stores at system scope */
#define DION_GDAKI_QP_UP 0x4u /* the QP is connected and may be posted to */

/* Counters of one QP, 64-bit and monotonic (WQE indices are their low 16 bits). Posting threads keep
 * cons_idx <= ready_head <= resv_head; ready_head is also what the last doorbell said. A WQE that starts at
 * WQEBB s is complete once cons_idx > s (a collapsed CQ reports the start of the latest signaled WQE, and RC
 * completes in order). Each group of counters that different parties write sits on its own 64-byte line. */
typedef struct dion_gdaki_qp_state {
    uint64_t resv_head;  /* WQEBBs reserved by posting threads */
    uint64_t ready_head; /* WQEBBs written, published in reservation order and doorbelled */
    uint64_t last_wqe;   /* 1 + start of the latest WQE written (0: none yet) */
    uint64_t last_sig;   /* 1 + start of the latest WQE written that asked for a CQE (0: none yet) */
    uint64_t fence;      /* nonzero: the next WQE posted carries the NIC fence flag (dion_fence) */
    uint64_t db_lock;    /* nonzero while a thread publishes (writes the doorbell record and the doorbell) */
    uint64_t pad0[2];
    uint64_t
        cons_idx;    /* WQEBBs known complete: 1 + the WQE index of the latest CQE seen, lifted to 64 bits */
    uint64_t poller; /* nonzero while a waiter reads the CQ (the others read cons_idx instead) */
    uint64_t pad1[6];
    /* The first error completion seen: 0 while none. err = dion_status_t; err_info = syndrome [7:0],
     * vendor syndrome [15:8], opcode of the failed WQE [23:16], its WQE index [47:32]. */
    uint64_t err;
    uint64_t err_info;
    uint64_t pad2[6];
} dion_gdaki_qp_state_t;

DION__GDAKI_STATIC_ASSERT(sizeof(dion_gdaki_qp_state_t) == 192 &&
                              offsetof(dion_gdaki_qp_state_t, cons_idx) == 64 &&
                              offsetof(dion_gdaki_qp_state_t, err) == 128,
                          "producer, consumer and error words on separate 64-byte lines");

/* One QP as device code posts to it. The NIC implementation fills sq .. max_inline (nic.h, qp_create); the
 * backend fills st, marks, pend, scratch*, peer and flags' UP bit. The QP (context, this rank) is a loopback
 * QP: this rank's atomics on its own windows go through it (device/gdaki.cuh says why). */
typedef struct dion_gdaki_qp_dev {
    uint8_t *sq;     /* SQ ring: (wq_mask + 1) WQEBBs of 64 bytes, 64-byte aligned */
    uint32_t *dbrec; /* SQ word of the QP doorbell record (dbrec[MLX5_SND_DBR]): BE32 next free WQEBB */
    uint64_t *db;    /* doorbell register: the UAR's 8-byte register, or the softnic model's doorbell page */
    uint8_t *cq;     /* CQ: 2^log_ncqe entries of 64 bytes (initial op_own 0xF0/0xF1/0xFF) */
    uint64_t
        *scratch; /* [wq_mask + 1] words where atomics return the old value, slot = WQE index & wq_mask */
    dion_gdaki_qp_state_t *st;
    /* [wq_mask + 1] words beside st: a group that wrote the WQEs of [b, e) stores e at marks[b & wq_mask];
     * whoever holds db_lock publishes the marked groups that follow ready_head (a mark <= its position is
     * from an earlier lap: not written yet) */
    uint64_t *marks;
    /* [wq_mask + 1] words beside st: nonzero while the thread that posted the fetching atomic of that slot
     * has not read its old value from scratch yet (the slot is not reused before) */
    uint64_t *pend;
    uint64_t scratch_addr; /* address of scratch[0] as WQEs give it (laddr) */
    uint32_t scratch_lkey; /* lkey of scratch */
    uint32_t qpn;          /* 24 bits */
    uint32_t wq_mask;      /* WQEBBs - 1: a power of two, at most 32768 WQEBBs */
    uint32_t log_ncqe;     /* log2 of the CQ's entries */
    uint32_t flags;        /* DION_GDAKI_QP_* */
    uint32_t max_inline;   /* largest inline WRITE payload the QP accepts (0: none) */
    int32_t peer;          /* the rank at the other end */
    uint32_t pad;
} dion_gdaki_qp_dev_t;

DION__GDAKI_STATIC_ASSERT(sizeof(dion_gdaki_qp_dev_t) == 104, "QP descriptor layout of version 3");

/* How WQEs name one rank's part of a registered region (window or signal table): addr is the address a WQE
 * gives for byte 0 of the part (its virtual address, or 0 for offset-addressed registrations), key its rkey
 * (a peer's part) or lkey (this rank's own part). */
typedef struct dion_gdaki_key {
    uint64_t addr;
    uint32_t key;
    uint32_t tag; /* the window id + 1 whose row this is; 0: unused (key table) or not reachable */
} dion_gdaki_key_t;

/* A device handle's gdaki part (dion_dev_t.gdaki). */
typedef struct dion_gdaki_dev {
    dion_gdaki_qp_dev_t *qps;   /* [num_contexts][nranks]: QP (ctx, peer); flags without UP where not gdaki */
    dion_gdaki_key_t *keys;     /* [DION_GDAKI_KEY_ROWS][nranks]: row (window id % rows); own entry: lkey */
    dion_gdaki_key_t *sig_keys; /* [nranks]: the peers' signal tables; own entry: this table's lkey */
    uint32_t nranks;
    uint32_t version; /* DION_GDAKI_PROTO_VERSION */
} dion_gdaki_dev_t;

#endif /* DION_DEVICE_GDAKI_PROTO_CUH */
