/* The seam between the gdaki backend (transports/gdaki/gdaki.c) and a NIC implementation: the softnic model
 * (transports/gdaki/softnic/, a CPU thread that plays the NIC) or a real mlx5 NIC through DEVX. The backend
 * names no NIC: it walks dion__gdaki_nics[] (gdaki.c) and talks to the one DION_GDAKI_NIC picks through this
 * table of functions. A NIC provides, per (context, peer), one RC QP whose SQ, doorbell record, doorbell
 * register and CQ device code uses directly (device/gdaki_proto.cuh, dion_gdaki_qp_dev_t), and registrations
 * (lkey / rkey) of the regions WQEs name.
 *
 * Call order, per comm: usable (may run without a comm: dion-info), open (collective over the comm's ranks,
 * may use the bootstrap), then any number of mr_reg / mr_import / qp_create / qp_connect, then their undoing,
 * then close. Calls for one nic are serialized by the backend; the NIC's own threads (softnic) run alongside.
 * A failing call returns a status with the thread-local sentence set (dion__error), naming what is missing
 * and what to do. Stable from version 1 on: later versions only add slots at the end. */
#ifndef DION_TRANSPORTS_GDAKI_NIC_H
#define DION_TRANSPORTS_GDAKI_NIC_H

#include <stddef.h>
#include <stdint.h>

#include "dion/device/gdaki_proto.cuh"
#include "src/comm.h"

#define DION__GDAKI_NIC_VERSION 1u

/* Bytes of a QP's connection data (qpn, LID/GID, PSN... whatever the NIC needs): exchanged by the backend
 * through the bootstrap, from the QP (ctx, peer) of one rank to the QP (ctx, that rank) of peer. */
#define DION__GDAKI_QP_BLOB 64
/* Bytes of the NIC's own part of a region's descriptor (after addr and rkey). */
#define DION__GDAKI_MR_BLOB 48

typedef struct dion__gdaki_nic dion__gdaki_nic_t; /* one opened NIC per comm (device, PD, UAR, threads) */
typedef struct dion__gdaki_mr dion__gdaki_mr_t;   /* one local registration */
typedef struct dion__gdaki_qp dion__gdaki_qp_t;   /* one QP with its CQ */

/* What one rank tells every peer about a region it registered: travels by allgather, plain data. */
typedef struct {
    uint64_t addr;  /* what WQEs give as the address of the region's byte 0 (virtual address or 0) */
    uint32_t rkey;  /* remote key */
    uint32_t flags; /* DION__GDAKI_MR_* */
    uint64_t bytes; /* registered bytes */
    uint8_t blob[DION__GDAKI_MR_BLOB]; /* the NIC's own data (softnic: the engine's key for the region) */
} dion__gdaki_rdesc_t;

enum { DION__GDAKI_MR_HOST = 0x1u /* host memory (else GPU memory) */ };

typedef struct {
    uint32_t ctx;    /* context index (logs, error sentences) */
    int peer;        /* the rank at the other end */
    uint32_t nwqebb; /* SQ size in WQEBBs: a power of two in [64, 32768] */
    uint32_t ncqe;   /* CQ entries wanted: a power of two; a collapsed CQ may use 1 */
    int cpu;         /* 1: CPU threads post (CPU mode): the queues in ordinary host memory */
} dion__gdaki_qp_args_t;

typedef struct dion__gdaki_nic_ops {
    uint32_t version; /* DION__GDAKI_NIC_VERSION */
    const char *name; /* as DION_GDAKI_NIC, dion-info and the log spell it: "softnic", "mlx5" */

    /* Whether this NIC can run here (libraries, a device, rights; the softnic: its engine). Does not need a
     * comm and does not block for long; why (cap bytes) says what is missing when it returns 0. */
    int (*usable)(char *why, size_t cap);
    /* Opens the NIC for comm: collective over the comm's ranks (every rank calls it, and it may exchange
     * data with dion__boot_allgather / dion__comm_agree). */
    dion_status_t (*open)(dion_comm_t comm, dion__gdaki_nic_t **out);
    /* Destroys what is left and closes; never waits for peers beyond a bounded time. */
    void (*close)(dion__gdaki_nic_t *nic);

    /* Registers [base, base+bytes) of this rank (host memory when on_host, else GPU memory) for local use in
     * WQEs (lkey, laddr = the address WQEs give for base) and remote access by peers (*desc, sent to every
     * peer as is). */
    dion_status_t (*mr_reg)(dion__gdaki_nic_t *nic, void *base, size_t bytes, int on_host,
                            dion__gdaki_mr_t **mr, uint32_t *lkey, uint64_t *laddr,
                            dion__gdaki_rdesc_t *desc);
    dion_status_t (*mr_dereg)(dion__gdaki_nic_t *nic, dion__gdaki_mr_t *mr);
    /* The NIC learns peer's region desc (a real NIC needs nothing: the rkey is the peer NIC's; the softnic
     * maps the rkey to its engine's key). May be NULL. mr_forget undoes it (may be NULL). */
    dion_status_t (*mr_import)(dion__gdaki_nic_t *nic, int peer, const dion__gdaki_rdesc_t *desc);
    void (*mr_forget)(dion__gdaki_nic_t *nic, int peer, const dion__gdaki_rdesc_t *desc);

    /* Creates the QP and CQ for (args->ctx, args->peer) and fills the NIC's part of *dev (sq, dbrec, db, cq,
     * qpn, wq_mask, log_ncqe, flags COLLAPSED/HOSTMEM, max_inline) as device code will use it (GPU pointers
     * for a GPU handle, host pointers in CPU mode), and blob with what the peer's QP needs to connect. */
    dion_status_t (*qp_create)(dion__gdaki_nic_t *nic, const dion__gdaki_qp_args_t *args,
                               dion__gdaki_qp_t **qp, dion_gdaki_qp_dev_t *dev,
                               uint8_t blob[DION__GDAKI_QP_BLOB]);
    /* Connects qp to the peer's QP, given the blob that QP's qp_create wrote (mlx5: RST->INIT->RTR->RTS). The
     * QP may then be posted to. Every rank connects all its QPs before any posts (the backend barriers). */
    dion_status_t (*qp_connect)(dion__gdaki_nic_t *nic, dion__gdaki_qp_t *qp,
                                const uint8_t blob[DION__GDAKI_QP_BLOB]);
    /* Destroys the QP and its CQ; nothing may post to it any more. */
    void (*qp_destroy)(dion__gdaki_nic_t *nic, dion__gdaki_qp_t *qp);
    /* The sentence saying why the QP failed (error completion, broken invariant), naming the peer; 0 when it
     * did not fail or the NIC keeps no sentence (device code's error record still has the syndrome). May be
     * NULL. */
    int (*qp_why)(dion__gdaki_qp_t *qp, char *out, size_t cap);
} dion__gdaki_nic_ops_t;

/* NIC implementations built into libdion. */
extern const dion__gdaki_nic_ops_t dion__gdaki_softnic;

#endif /* DION_TRANSPORTS_GDAKI_NIC_H */
