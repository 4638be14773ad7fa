/* The proxy backend's private state, shared by proxy_ops.c (the seam, execute and progress) and px_stage.c
 * (windows staged through pinned host shadows, and the notices that land them). Nothing outside
 * transports/proxy/ includes it. */
#ifndef DION_PX_H
#define DION_PX_H

#include <pthread.h>
#include <stdint.h>

#include "transports/proxy/engine.h"
#include "transports/proxy/proxy.h"
#include "transports/proxy/staging.h"

#define DION__PX_GLUES      4096u /* rings (contexts of all handles) one comm serves at once */
#define DION__PX_RMAP       8192u /* ring map slots (twice DION__PX_GLUES: short probes) */
#define DION__PX_CQ         64u   /* completions per engine poll */
#define DION__PX_CQ_ROUNDS  8     /* engine polls per progress call while they come back full */
#define DION__PX_POS_BITS   48    /* ring position bits in an engine cookie; the rest name the ring */
#define DION__PX_POS_MASK   ((1ull << DION__PX_POS_BITS) - 1)
#define DION__PX_META_FETCH 0x8000u /* the position is a fetching atomic: its result goes into the slot */
#define DION__PX_META_COPY  0x4000u /* staged get: copy the shadow into the window before completing */
#define DION__PX_META_SRC   0x2000u /* the engine no longer reads the command's source */
#define DION__PX_META_CNT   0x00ffu /* local counter + 1 of a counted command, until it was counted */
/* Cookie bit of the engine put that reads a counted command's source: its completion is the moment the source
 * may be reused (the gid and position bits stay below bit 60). */
#define DION__PX_CK_SRC (1ull << 63)
/* Notices in flight per (rank, peer) pair: as many as an inbox of DION__PX_NOTES_BUDGET notices per rank
 * holds (N ranks x K slots), between MIN and MAX; so 256 up to 256 ranks and 16 from 4096 ranks (px_stage.c).
 */
#define DION__PX_NOTES_MIN    16u
#define DION__PX_NOTES_MAX    256u
#define DION__PX_NOTES_BUDGET 65536u
#define DION__PX_INTERNAL     0ull /* cookie of engine operations no ring position waits for (gid 0) */

/* What a peer gets for a region: the engine key of the memory itself and, for a staged region, of the pinned
 * host shadow that stands in for it in every data transfer (docs/backends/proxy.md, "GPU windows"). */
typedef struct {
    dion__engine_rkey_t mem;    /* len 0 where the memory itself is not registered (staged GPU memory) */
    dion__engine_rkey_t shadow; /* staged regions: the shadow */
    uint32_t staged;            /* 1: data goes to the shadow, and a notice tells the owner to land it */
    uint32_t gpu;               /* the memory is GPU memory */
} dion__px_desc_t;

/* A registered region (window or signal table) as the proxy thread resolves it. */
typedef struct dion__pxr {
    struct dion__pxr *next;
    uint32_t id;
    int named;
    char *base;
    uint64_t bytes;
    dion__engine_mr_t *mr;  /* the memory's registration (NULL for staged GPU memory) */
    uint64_t key;           /* this rank's key of the memory (signal tables are found by it) */
    char *shadow;           /* staged: pinned host memory of the same size */
    dion__engine_mr_t *smr; /* the shadow's registration */
    int staged, gpu;
    dion__px_desc_t *rkeys; /* [nranks]: the peers' parts (len 0 where the peer is not served here) */
} dion__pxr_t;

/* The engine glue's view of one ring: engine operations in flight per position, completion in order. */
typedef struct {
    dion__proxy_ring_t *r;
    struct dion__pxd *d;
    struct dion__pxc *pc;
    uint32_t gid;
    uint8_t *cnt;               /* [nslots] engine operations (and notices) in flight for the position */
    uint16_t *meta;             /* [nslots] DION__PX_META_* | (local counter + 1) */
    struct dion__px_copy *copy; /* [nslots] what a DION__PX_META_COPY position copies out */
    uint64_t exec;              /* positions taken */
    uint64_t done;              /* positions complete */
    uint64_t counted;           /* positions below it were counted, or had nothing to count */
    uint64_t inflight;
    uint64_t partial;     /* pos + 1 of a command of which some operations are posted and some not yet */
    uint64_t staged_to;   /* positions below it had their staged sources copied into the shadow (a batch) */
    uint64_t staged_pend; /* prestage: positions below it have their copies enqueued, not yet waited for */
    uint32_t pstep;       /* for that command: DION__PXS_* steps done */
    char why[512];        /* the sentence that failed the ring (dion_dev_check reports it) */
} dion__pxg_t;

typedef struct dion__px_copy {
    dion__pxr_t *r;
    uint64_t off, bytes;
} dion__px_copy_t;

/* Steps of one command, for a command that comes again after DION__ENGINE_BUSY. */
enum { DION__PXS_DATA = 1u, DION__PXS_SIGNAL = 2u, DION__PXS_STAGED_IN = 8u };

/* One device handle's part. */
typedef struct dion__pxd {
    struct dion__pxd *next;
    uint32_t nrings;
    dion__proxy_ring_t **rings;
    dion__pxg_t *glue;
    dion__pxr_t *sig;                /* the handle's signal tables */
    dion_proxy_ring_dev_t *devrings; /* what dev->proxy_rings points to */
    int cpu;
} dion__pxd_t;

/* A notice to a peer's proxy (64 bytes): land staged data, apply a signal, serve a get or an atomic on a
 * staged window. Written into the peer's inbox with a put, published by an ORDERED add to its tail. */
typedef struct {
    uint8_t op;      /* DION__PXN_* */
    uint8_t sig_op;  /* dion_sig_op_t, with has_sig */
    uint8_t has_sig; /* LAND: apply the signal after the data */
    uint8_t amo;     /* AMO: dion__engine_amo_t (FETCH_ADD or CSWAP) */
    uint32_t win;    /* the target's window id (LAND, GET source, AMO) */
    uint64_t off, bytes;
    uint64_t sigkey; /* the target's signal table, by its engine key */
    uint32_t sig;
    uint32_t dst_win; /* GET: the initiator's window */
    uint64_t value;   /* signal operand; AMO operand (addend or desired) */
    uint64_t aux;     /* GET: offset in the initiator's window; AMO: the compare value */
    uint64_t pad;
} dion__px_note_t;

enum { DION__PXN_LAND = 1, DION__PXN_SIG, DION__PXN_GET, DION__PXN_AMO };

/* A ring position waiting for the acknowledgement of notice nth to a peer (several may share a notice). */
typedef struct {
    uint32_t gid;
    uint32_t amo;
    uint64_t pos;
    uint64_t nth;
} dion__px_pend_t;

/* Per peer: the positions waiting for its acknowledgements, in notice order (a FIFO that grows). */
typedef struct {
    dion__px_pend_t *w;
    uint32_t cap, first, n;
} dion__px_waitq_t;

/* A notice applied here whose signal (or failure) waits for the batch's copies (px_stage.c). */
typedef struct {
    int from;
    uint32_t slot;
} dion__px_held_t;

/* A byte range of a staged region (px_stage.c): copies to coalesce. */
typedef struct {
    dion__pxr_t *r;
    uint64_t off, end;
} dion__px_range_t;

/* Sorts rg[0..n) by region and offset and joins the ranges of one region that touch or overlap (never across
 * a gap: a gap's bytes may differ between window and shadow); returns the number of runs left in rg. */
uint32_t dion__px_coalesce(dion__px_range_t *rg, uint32_t n);

/* A batch's span of the source arena, freed once ring gid's positions below pos_end completed. */
#define DION__PXS_SREL 256u
typedef struct {
    uint32_t gid;
    uint64_t pos_end, head_end;
} dion__px_srel_t;

typedef struct dion__pxc {
    dion_comm_t comm;
    const dion__engine_ops_t *E;
    char label[24]; /* "proxy/verbs": what the per-peer log lines show */
    dion__engine_t *e;
    dion__engine_caps_t caps;
    pthread_mutex_t mu; /* every engine call and every list below */
    dion__pxr_t *regions;
    dion__pxd_t *devs;
    dion__pxg_t *gtab[DION__PX_GLUES];
    uint16_t rmap[DION__PX_RMAP]; /* ring -> gid (dion__px_glue) */
    dion__proxy_threads_t *threads;
    int broken;
    /* staging (px_stage.c); stage_on is the same on every rank */
    int stage_always; /* DION_PROXY_STAGING=always: host windows are staged too */
    int stage_on;     /* some rank stages: every rank has an inbox */
    dion__stage_t *stage;
    char *box; /* the inbox (layout in px_stage.c), registered */
    dion__engine_mr_t *box_mr;
    dion__engine_rkey_t *box_rk; /* [nranks] */
    uint32_t notes;              /* K: notice slots per (rank, peer) pair */
    /* the initiator's side, per peer: notices written into out[] (the last one still merges while it is not
     * put), put into the peer's inbox, published on its tail, acknowledged by it */
    uint64_t *sent, *wput, *pub, *acked;
    dion__px_waitq_t *waitq; /* [nranks] */
    /* the owner's side, per peer: notices applied here, replied to (GET data, AMO results, failures),
     * acknowledged */
    uint64_t *head, *replied, *ackd;
    dion__px_held_t *held; /* notices of the current batch whose signals wait for its copies */
    uint32_t nheld;
    int copies;              /* copies enqueued by this batch and not waited for */
    dion__px_range_t *lands; /* the batch's shadow -> window copies, coalesced before they are enqueued */
    uint32_t nlands;
    dion_status_t land_st; /* a failed enqueue of the batch's coalesced copies: its notices fail */
    /* for the closing log line: notices written, puts merged into queued notices, notices applied here and
     * the copies they took */
    uint64_t n_notes, n_merged, n_applied, n_copies;
    uint64_t n_src_puts, n_src_copies; /* puts from staged windows, and the copies into shadows they took */
    /* the proxy thread's waits for copies (cudaStreamSynchronize): staged sources before their batch is
     * posted, and the owner's lands before their signals and acknowledgements; count and total time */
    uint64_t n_src_waits, n_land_waits, ns_src_wait, ns_land_wait;
    uint32_t pend_gid[64], npend; /* prestage: glues whose enqueued source copies wait for the pass's wait */
    /* the source arena (px_stage.c): staged put sources of a batch, copied with their gaps into one span,
     * freed in batch order once the batch's positions completed */
    char *sarena;
    dion__engine_mr_t *sarena_mr;
    uint64_t sa_head, sa_tail;
    dion__px_srel_t srel[DION__PXS_SREL];
    uint32_t srel_first, srel_n;
    uint64_t *srcmap[DION__PX_GLUES]; /* per ring, per position: arena offset + 1 of its source, 0: shadow */
    uint32_t srcmap_n[DION__PX_GLUES];
} dion__pxc_t;

typedef struct {
    dion__pxc_t *pc;
    dion__engine_mr_t *mr, *smr;
    char *base, *shadow;
    uint64_t bytes, key;
    int staged, gpu;
} dion__px_exp_t;

dion__pxr_t *dion__px_find(dion__pxc_t *pc, uint32_t id);
void dion__px_advance(dion__pxg_t *g);

/* ---- px_stage.c ---- */
/* Collective (comm_init): decides whether any rank stages, and if so opens every rank's inbox. */
dion_status_t dion__pxs_comm_init(dion__pxc_t *pc);
void dion__pxs_comm_fini(dion__pxc_t *pc);
/* mem_export for a region: registers the memory and/or a shadow; fills desc and x. */
dion_status_t dion__pxs_export(dion__pxc_t *pc, void *base, size_t bytes, dion__px_desc_t *desc,
                               dion__px_exp_t *x);
void dion__pxs_unexport(dion__pxc_t *pc, dion__px_exp_t *x);
void dion__pxs_region_free(dion__pxc_t *pc, dion__pxr_t *r);
/* Copies [off, off+bytes) of a staged region between the memory and its shadow (to_shadow: memory ->
 * shadow). */
dion_status_t dion__pxs_sync(dion__pxc_t *pc, const dion__pxr_t *r, uint64_t off, uint64_t bytes,
                             int to_shadow);
/* Whether signal-bearing commands to peer must go as notices (notices to it are still being applied). */
int dion__pxs_pending(const dion__pxc_t *pc, int peer);
/* Copies the sources of a batch of commands (ring positions g->exec ...) that are staged windows into their
 * shadows: one copy per run of touching ranges and one wait for them all; g->staged_to says how far it got.
 */
void dion__pxs_stage_sources(dion__pxc_t *pc, dion__pxg_t *g, const dion_proxy_cmd_t *cmds, uint32_t n);
/* The same; wait 0: the copies are only enqueued (g->staged_pend) and the next call with wait 1, for any
 * ring, waits once for all of them (the proxy thread's prestage: one wait per pass instead of one per ring).
 */
void dion__pxs_stage_sources_run(dion__pxc_t *pc, dion__pxg_t *g, const dion_proxy_cmd_t *cmds, uint32_t n,
                                 int wait);
/* 1: prestage staged sources of every ring of a pass under one wait (0: one wait per ring batch; A/B). */
#ifndef DION__PXS_PRESTAGE
#define DION__PXS_PRESTAGE 1
#endif
/* Where the put at ring position pos reads its staged source: the source arena where its batch put it there,
 * else *from and *mr stay (the shadow). */
void dion__pxs_source(dion__pxc_t *pc, const dion__pxg_t *g, uint64_t pos, const char **from,
                      dion__engine_mr_t **mr);
/* Queues note to peer for ring position pos of g, merged into the last unsent notice where that keeps every
 * signal behind its data: BUSY when peer's notice slots are all in flight (nothing queued), else the position
 * waits for peer's acknowledgement. The progress pass puts and publishes queued notices. */
dion_status_t dion__pxs_send(dion__pxc_t *pc, dion__pxg_t *g, uint64_t pos, int peer,
                             const dion__px_note_t *note, int amo);
/* Applies notices that reached this rank and takes peers' acknowledgements; 1 when it did anything. */
int dion__pxs_progress(dion__pxc_t *pc);

#endif
