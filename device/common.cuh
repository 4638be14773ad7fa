/* Pieces every backend's device half shares: control words, error records, argument checks, statistics,
 * the cooperative copy and the signal wait loop. */
#ifndef DION_DEVICE_COMMON_CUH
#define DION_DEVICE_COMMON_CUH

#include "dion/device/arch.cuh"

/* A rank's entry in a window table. The table's array is declared with one element and allocated with
 * nranks: index through the pointer so that compilers do not bound it by the declaration. */
DION_HD struct dion_win_peer *dion__win_peer(dion_dwin_t w, int rank)
{
    return (struct dion_win_peer *)((char *)w + offsetof(struct dion_win_dev, peer)) + rank;
}

/* Entries of the handle's inline arrays, chosen with masks rather than a switch or ternaries: every candidate
 * is a parameter-bank load, so eight loads and masks cost a few independent instructions where a chain of
 * dependent branches costs about 0.3 us per put for one thread (measured on an H200). */
#define DION__PICK8(arr, i, field)                                                                           \
    (((uint64_t)(arr)[0] field & (0 - (uint64_t)((i) == 0))) |                                               \
     ((uint64_t)(arr)[1] field & (0 - (uint64_t)((i) == 1))) |                                               \
     ((uint64_t)(arr)[2] field & (0 - (uint64_t)((i) == 2))) |                                               \
     ((uint64_t)(arr)[3] field & (0 - (uint64_t)((i) == 3))) |                                               \
     ((uint64_t)(arr)[4] field & (0 - (uint64_t)((i) == 4))) |                                               \
     ((uint64_t)(arr)[5] field & (0 - (uint64_t)((i) == 5))) |                                               \
     ((uint64_t)(arr)[6] field & (0 - (uint64_t)((i) == 6))) |                                               \
     ((uint64_t)(arr)[7] field & (0 - (uint64_t)((i) == 7))))

/* Diagnostic only (perf/CMakeLists.txt, p2p_bench_slot0): with DION__DIAG_SLOT0=1 GPU code takes every peer
 * from the handle's inline entries and every window from slot 0, with no fallback to the tables: what the
 * fallbacks (predicated table loads beside each selection) cost the fast paths. Correct only for at most 8
 * ranks and a kernel that uses the comm's first window alone, as p2p_bench does (it checks what lands). */
#ifndef DION__DIAG_SLOT0
#define DION__DIAG_SLOT0 0
#endif
#if DION__GPU && DION__DIAG_SLOT0
#define DION__INLINE_PEER(peer) 1
#else
#define DION__INLINE_PEER(peer) ((unsigned)(peer) < DION_DEV_INLINE_PEERS)
#endif

/* Candidate (perf/CMakeLists.txt, p2p_bench_ool): with DION__LOOKUP_OOL=1 GPU code reaches the tables behind
 * the inline entries and window slots through calls that are never inlined, so the fast path carries a branch
 * and no predicated table load beside each selection (the load keeps the compiler from hoisting the
 * selections out of loops; docs/results/2026-11-30-s3-h200, variant "all"). Same results as the default. */
#ifndef DION__LOOKUP_OOL
#define DION__LOOKUP_OOL 0
#endif
#if DION__GPU && DION__LOOKUP_OOL
static __device__ __noinline__ const struct dion_dev_peer *dion__peer_far(const dion_dev_t *d, int peer)
{
    return &d->peers[peer];
}
static __device__ __noinline__ char *dion__win_base_far(dion_dwin_t w, int rank)
{
    return dion__win_peer(w, rank)->base;
}
static __device__ __noinline__ uint32_t dion__win_flags_far(dion_dwin_t w)
{
    return w->flags;
}
#define DION__PEER_FAR(d, peer)     dion__peer_far(d, peer)
#define DION__WIN_BASE_FAR(w, rank) dion__win_base_far(w, rank)
#define DION__WIN_FLAGS_FAR(w)      dion__win_flags_far(w)
#else
#define DION__PEER_FAR(d, peer)     (&(d)->peers[peer])
#define DION__WIN_BASE_FAR(w, rank) (dion__win_peer(w, rank)->base)
#define DION__WIN_FLAGS_FAR(w)      ((w)->flags)
#endif

/* The peer's signal table and scope: from the handle itself for the first peers (parameter bank on the GPU).
 */
DION_HD uint64_t *dion__peer_signals(const dion_dev_t *d, int peer)
{
#if DION__GPU
    if (DION__INLINE_PEER(peer)) return (uint64_t *)(uintptr_t)DION__PICK8(d->peer_inline, peer, .signals_u);
#endif
    return DION__PEER_FAR(d, peer)->signals;
}

DION_HD uint32_t dion__peer_scope(const dion_dev_t *d, int peer)
{
#if DION__GPU
    if (DION__INLINE_PEER(peer)) return (uint32_t)DION__PICK8(d->peer_inline, peer, .scope);
#endif
    return DION__PEER_FAR(d, peer)->scope;
}

DION_HD uint32_t dion__peer_transport(const dion_dev_t *d, int peer)
{
#if DION__GPU
    if (DION__INLINE_PEER(peer)) return (uint32_t)DION__PICK8(d->peer_inline, peer, .transport);
#endif
    return DION__PEER_FAR(d, peer)->transport;
}

/* rank's base of window w: from the handle's window slots when w has one (no memory load on the GPU),
 * else from w's table. */
DION_HD char *dion__win_base(const dion_dev_t *d, dion_dwin_t w, int rank)
{
#if DION__GPU && DION__DIAG_SLOT0
    (void)w;
    return (char *)(uintptr_t)DION__PICK8(d->win_slot[0].base_u, rank, );
#elif DION__GPU
    if ((unsigned)rank < DION_DEV_INLINE_PEERS) {
        if (w == d->win_slot[0].win) return (char *)(uintptr_t)DION__PICK8(d->win_slot[0].base_u, rank, );
        if (w == d->win_slot[1].win) return (char *)(uintptr_t)DION__PICK8(d->win_slot[1].base_u, rank, );
        if (w == d->win_slot[2].win) return (char *)(uintptr_t)DION__PICK8(d->win_slot[2].base_u, rank, );
        if (w == d->win_slot[3].win) return (char *)(uintptr_t)DION__PICK8(d->win_slot[3].base_u, rank, );
    }
#else
    (void)d;
#endif
    return DION__WIN_BASE_FAR(w, rank);
}

/* The same selection with branches on the (warp-uniform) slot match and rank bits: the instructions of one
 * slot and about 4 of its 8 loads run, against all 32 candidates of dion__win_base. Longer dependent chain,
 * far fewer instructions: for the block variants, where 32 warps share 4 schedulers. */
#define DION__TREE8(a, i)                                                                                    \
    (((i)&4) ? (((i)&2) ? (((i)&1) ? (a)[7] : (a)[6]) : (((i)&1) ? (a)[5] : (a)[4]))                         \
             : (((i)&2) ? (((i)&1) ? (a)[3] : (a)[2]) : (((i)&1) ? (a)[1] : (a)[0])))

DION_HD char *dion__win_base_branchy(const dion_dev_t *d, dion_dwin_t w, int rank)
{
#if DION__GPU
    if ((unsigned)rank < DION_DEV_INLINE_PEERS) {
        if (w == d->win_slot[0].win) return (char *)(uintptr_t)DION__TREE8(d->win_slot[0].base_u, rank);
        if (w == d->win_slot[1].win) return (char *)(uintptr_t)DION__TREE8(d->win_slot[1].base_u, rank);
        if (w == d->win_slot[2].win) return (char *)(uintptr_t)DION__TREE8(d->win_slot[2].base_u, rank);
        if (w == d->win_slot[3].win) return (char *)(uintptr_t)DION__TREE8(d->win_slot[3].base_u, rank);
    }
#else
    (void)d;
#endif
    return DION__WIN_BASE_FAR(w, rank);
}

DION_HD uint32_t dion__win_flags(const dion_dev_t *d, dion_dwin_t w)
{
#if DION__GPU && DION__DIAG_SLOT0
    (void)w;
    return d->win_slot[0].flags;
#elif DION__GPU
    if (w == d->win_slot[0].win) return d->win_slot[0].flags;
    if (w == d->win_slot[1].win) return d->win_slot[1].flags;
    if (w == d->win_slot[2].win) return d->win_slot[2].flags;
    if (w == d->win_slot[3].win) return d->win_slot[3].flags;
#else
    (void)d;
#endif
    return DION__WIN_FLAGS_FAR(w);
}

/* w's id: from the handle's window slots when w has one, else from w's table. A host window's table is
 * pinned host memory, so that the id from the table costs the calling GPU thread a PCIe round trip: before
 * the slots carried it, a put_signal over the proxy with host windows took 1.1 us longer than a signal (H200,
 * 2026-12-01 19:37: 6.35 against 5.23 us one-way; in CPU mode 2.07 against 2.01). */
DION_HD uint32_t dion__win_id(const dion_dev_t *d, dion_dwin_t w)
{
#if DION__GPU
    if (w == d->win_slot[0].win) return d->win_slot[0].id;
    if (w == d->win_slot[1].win) return d->win_slot[1].id;
    if (w == d->win_slot[2].win) return d->win_slot[2].id;
    if (w == d->win_slot[3].win) return d->win_slot[3].id;
#else
    (void)d;
#endif
    return w->id;
}

/* ---- the fast paths' lookups ----
 * A predicated table load beside each selection (the fallbacks above) is an ordinary load, which the compiler
 * may not move across the waits' asm: the selections, and every alignment test and scope choice that depends
 * on them, then stay inside the caller's loop (docs/results/perf10-notes.md, variants "slot0" and "all").
 * So put, put_signal and signal first test, in one branch, whether the call's peer, this rank and its windows
 * all have inline entries in the handle and DION_CHECK is off, and then run a copy of the operation whose
 * every selection reads the parameter bank alone: nothing there reads memory, so the compiler hoists it out
 * of loops whose arguments do not change. Any other call takes the general code, which is unchanged. A build
 * may set DION__FAST_PATHS=0 to compile the general code alone (perf/CMakeLists.txt, p2p_bench_prev). */
#ifndef DION__FAST_PATHS
#define DION__FAST_PATHS 1
#endif

/* Whether w is one of the handle's window slots (GPU code; the fast paths' condition). */
DION_HD int dion__win_in_slot(const dion_dev_t *d, dion_dwin_t w)
{
    return (w == d->win_slot[0].win) | (w == d->win_slot[1].win) | (w == d->win_slot[2].win) |
           (w == d->win_slot[3].win);
}

/* rank's base of w, w in a slot and rank below DION_DEV_INLINE_PEERS: the parameter bank alone. */
DION_HD char *dion__win_base_inl(const dion_dev_t *d, dion_dwin_t w, int rank)
{
    uint64_t b = DION__PICK8(d->win_slot[0].base_u, rank, );
    if (w == d->win_slot[1].win) b = DION__PICK8(d->win_slot[1].base_u, rank, );
    if (w == d->win_slot[2].win) b = DION__PICK8(d->win_slot[2].base_u, rank, );
    if (w == d->win_slot[3].win) b = DION__PICK8(d->win_slot[3].base_u, rank, );
    return (char *)(uintptr_t)b;
}

/* This rank's own base of w, w in a slot: the slot's self entry, with no pick over the ranks (the sources of
 * puts, the destinations of packets: fewer constants to select, and fewer registers held across a caller's
 * loop when the compiler hoists the selection out of it). */
DION_HD char *dion__win_self_inl(const dion_dev_t *d, dion_dwin_t w)
{
    uint64_t b = d->win_slot[0].self_u;
    if (w == d->win_slot[1].win) b = d->win_slot[1].self_u;
    if (w == d->win_slot[2].win) b = d->win_slot[2].self_u;
    if (w == d->win_slot[3].win) b = d->win_slot[3].self_u;
    return (char *)(uintptr_t)b;
}

DION_HD uint32_t dion__win_flags_inl(const dion_dev_t *d, dion_dwin_t w)
{
    uint32_t f = d->win_slot[0].flags;
    if (w == d->win_slot[1].win) f = d->win_slot[1].flags;
    if (w == d->win_slot[2].win) f = d->win_slot[2].flags;
    if (w == d->win_slot[3].win) f = d->win_slot[3].flags;
    return f;
}

/* The lookups with the path's choice of source, a constant at every call: DION__LK_ANY, the inline entries
 * when they have it and the tables otherwise (what the calls without a fast path use); DION__LK_INLINE, the
 * inline entries alone (the fast paths, whose condition made sure they have it); DION__LK_TABLE, the tables
 * alone (the general copy of an operation that has a fast path: it runs only under DION_CHECK, whose checks
 * read the same descriptors, or for peers and windows without inline entries, so it carries no selection
 * whose registers would compete with the fast copy's). CPU mode always reads the tables. */
#define DION__LK_ANY    0
#define DION__LK_INLINE 1
#define DION__LK_TABLE  2

DION_HD char *dion__win_base_at(const dion_dev_t *d, dion_dwin_t w, int rank, int mode)
{
#if DION__GPU
    if (mode == DION__LK_INLINE) return dion__win_base_inl(d, w, rank);
    if (mode == DION__LK_TABLE) return DION__WIN_BASE_FAR(w, rank);
#endif
    (void)mode;
    return dion__win_base(d, w, rank);
}

/* This rank's base of w with the lookups of mode. */
DION_HD char *dion__win_self_at(const dion_dev_t *d, dion_dwin_t w, int mode)
{
#if DION__GPU
    if (mode == DION__LK_INLINE) return dion__win_self_inl(d, w);
#endif
    return dion__win_base_at(d, w, d->rank, mode);
}

DION_HD uint32_t dion__win_flags_at(const dion_dev_t *d, dion_dwin_t w, int mode)
{
#if DION__GPU
    if (mode == DION__LK_INLINE) return dion__win_flags_inl(d, w);
    if (mode == DION__LK_TABLE) return DION__WIN_FLAGS_FAR(w);
#endif
    (void)mode;
    return dion__win_flags(d, w);
}

DION_HD uint64_t *dion__peer_signals_at(const dion_dev_t *d, int peer, int mode)
{
#if DION__GPU
    if (mode == DION__LK_INLINE) return (uint64_t *)(uintptr_t)DION__PICK8(d->peer_inline, peer, .signals_u);
    if (mode == DION__LK_TABLE) return DION__PEER_FAR(d, peer)->signals;
#endif
    (void)mode;
    return dion__peer_signals(d, peer);
}

DION_HD uint32_t dion__peer_scope_at(const dion_dev_t *d, int peer, int mode)
{
#if DION__GPU
    if (mode == DION__LK_INLINE) return (uint32_t)DION__PICK8(d->peer_inline, peer, .scope);
    if (mode == DION__LK_TABLE) return DION__PEER_FAR(d, peer)->scope;
#endif
    (void)mode;
    return dion__peer_scope(d, peer);
}

/* The mode of the general copy of an operation that has a fast path. */
#if DION__FAST_PATHS
#define DION__LK_SLOW DION__LK_TABLE
#else
#define DION__LK_SLOW DION__LK_ANY
#endif

/* ---- control words at the tail of a signal table ---- */

DION_HD uint64_t *dion__ctl_word(const dion_dev_t *d, uint64_t *table, uint32_t word)
{
    return table + d->num_signals + word;
}

DION_HD uint32_t dion__barrier_word(const dion_dev_t *d, uint32_t ctx)
{
    return DION_CTL_WORDS + ctx;
}

/* Scope for fences and for reading this rank's signals. */
DION_HD uint32_t dion__dev_scope(const dion_dev_t *d)
{
    return (d->flags & DION_DEVF_SYS) ? DION_SCOPE_SYS : DION_SCOPE_GPU;
}

/* ---- statistics (DION_STATS=1) ---- */

/* A context index kept out of range by DION_CHECK (so that its calls are skipped) is never counted. */
#define DION__STAT(c, field, n)                                                                              \
    do {                                                                                                     \
        if (((c)->dev.flags & DION_DEVF_STATS) && (c)->index < (c)->dev.num_contexts)                        \
            dion__counter_add(&(c)->dev.stats[(c)->index].field, (uint64_t)(n));                             \
    } while (0)

/* ---- error records ---- */

typedef struct {
    dion_status_t status;
    dion_op_t op;
    int32_t peer;
    uint32_t sig, cmp, detail;
    uint64_t expected, observed, offset, bytes, limit;
} dion__err_t;

/* Writes a record into the error ring so that the host sees it whole or not at all. Record n goes to slot
 * n % DION_ERR_RING, which its claim word (device memory: no atomics touch host memory) hands to one writer
 * at a time: a compare-and-swap from 0 (free) to n + 1, and the word stays taken until the host has read the
 * record and freed the slot. A writer that finds the slot taken (being written, or holding a record the host
 * has not read yet) drops its record and counts it, so the earliest records, the first error among them,
 * are never overwritten. The host reads a slot once seq is nonzero, which the writer stores last. */
DION_HD void dion__record(const dion_ctx_t *c, dion__err_t e)
{
    const dion_dev_t *d = &c->dev;
    DION__STAT(c, errors, 1);
    if (!d->errors) return;
    uint64_t n = dion__counter_add(dion__ctl_word(d, d->signals, DION_CTL_ERR_HEAD), 1);
    uint32_t slot = (uint32_t)(n % DION_ERR_RING);
    uint64_t *claim = dion__ctl_word(d, d->signals, DION_CTL_ERR_CLAIM + slot);
    if (dion__atom_cas(claim, 0, n + 1, DION_SCOPE_GPU) != 0) {
        dion__counter_add(dion__ctl_word(d, d->signals, DION_CTL_ERR_DROPPED), 1);
        return;
    }
    /* The claim is ordered before the stores below for the host too: it frees the slot only after it has
     * read the record, so no earlier record's reader can see these fields. */
    dion__fence(DION_SCOPE_SYS);
    dion_err_record_t *r = &d->errors->rec[slot];
    r->status = (uint32_t)e.status;
    r->op = (uint32_t)e.op;
    r->rank = d->rank;
    r->peer = e.peer;
    r->ctx = c->index;
    r->block = dion__block_index();
    r->thread = dion__block_thread();
    r->sig = e.sig;
    r->cmp = e.cmp;
    r->detail = e.detail;
    r->expected = e.expected;
    r->observed = e.observed;
    r->offset = e.offset;
    r->bytes = e.bytes;
    r->limit = e.limit;
    r->time_ns = dion__time_ns();
    dion__st_release(&r->seq, n + 1, DION_SCOPE_SYS);
}

DION_HD dion__err_t dion__err(dion_status_t st, dion_op_t op, int peer)
{
    dion__err_t e;
    memset(&e, 0, sizeof e);
    e.status = st;
    e.op = op;
    e.peer = peer;
    return e;
}

/* ---- argument checks (DION_CHECK=1). Each returns 1 when the arguments are good; otherwise the group's
 * leader records why and every caller skips the operation. ---- */

/* Whether GPU code carries the DION_CHECK paths. 1, the default: every call tests the handle's flag and
 * holds the checking and recording code beside its fast path. A build may set 0 to measure what that costs
 * the fast paths (perf/CMakeLists.txt, p2p_bench_nochk): the checks are then left out of GPU code and
 * DION_CHECK=1 checks nothing in its kernels (never use such a build with DION_CHECK=1: a context index kept
 * out of range would then be used). CPU mode always has them. */
#ifndef DION__CHECK_COMPILED
#define DION__CHECK_COMPILED 1
#endif

DION_HD int dion__check_enabled(const dion_ctx_t *c)
{
#if DION__GPU && !DION__CHECK_COMPILED
    (void)c;
    return 0;
#else
    return (c->dev.flags & DION_DEVF_CHECK) != 0;
#endif
}

/* A context whose index is out of range (DION_CHECK keeps it so): every call on it records, whichever thread
 * made the context; the ring keeps the first records and counts the rest as dropped. */
DION_HD int dion__check_ctx(const dion_ctx_t *c, dion_op_t op, int leader)
{
    if (c->index < c->dev.num_contexts) return 1;
    if (leader) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, op, -1);
        e.detail = DION_ERR_DETAIL_CTX;
        e.expected = c->dev.num_contexts;
        e.observed = c->index;
        dion__record(c, e);
    }
    return 0;
}

DION_HD int dion__check_peer(const dion_ctx_t *c, int peer, dion_op_t op, int leader)
{
    if (peer >= 0 && peer < c->dev.nranks && dion__peer_transport(&c->dev, peer) != DION_TRANSPORT_NONE)
        return 1;
    if (leader) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, op, peer);
        e.limit = (uint64_t)c->dev.nranks;
        dion__record(c, e);
    }
    return 0;
}

DION_HD int dion__check_sig(const dion_ctx_t *c, int peer, uint32_t sig, dion_op_t op, int leader)
{
    if (sig < c->dev.num_signals) return 1;
    if (leader) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, op, peer);
        e.sig = sig;
        e.limit = c->dev.num_signals;
        dion__record(c, e);
    }
    return 0;
}

#if !DION__GPU
#ifdef __cplusplus
extern "C" {
#endif
/* CPU mode: what the process knows about descriptor w without reading it (a GPU window's descriptor is device
 * memory, which CPU threads cannot read): 0 when w is a live window descriptor CPU threads can read, else a
 * DION_WCHK_* reason; *id receives the window's id when w is one. */
DION_API uint32_t dion__cpu_win_state(dion_dwin_t w, uint32_t *id);
#ifdef __cplusplus
}
#endif
#endif

/* [off, off+bytes) must lie inside rank's part of the window w; align: required alignment (1 or 8) of the
 * address rank's base + off, which is what the hardware sees (a part registered at base+4 has 8-aligned
 * offsets at unaligned addresses). Every comparison is free of overflow. */
DION_HD int dion__check_range(const dion_ctx_t *c, dion_dwin_t w, int rank, uint64_t off, uint64_t bytes,
                              uint64_t align, dion_op_t op, int peer, int leader)
{
    uint32_t why = 0, id = 0;
    uint64_t size = 0;
#if DION__GPU
    if (!w) why = DION_WCHK_NOT_WIN;
#else
    why = dion__cpu_win_state(w, &id); /* before any read of w */
#endif
    if (!why) {
        if (w->magic == DION_WIN_DEAD) {
            why = DION_WCHK_DESTROYED;
            id = w->id;
        } else if (w->magic != DION_WIN_MAGIC) {
            why = DION_WCHK_NOT_WIN;
        } else if (w->nranks != c->dev.nranks || rank < 0 || rank >= c->dev.nranks) {
            why = DION_WCHK_OTHER;
        } else if ((c->dev.flags & DION_DEVF_CPU) && !(w->flags & DION_WIN_HOST)) {
            why = DION_WCHK_NOT_HOST; /* CPU mode can only touch host windows */
        } else {
            const struct dion_win_peer *p = dion__win_peer(w, rank);
            size = p->size;
            if (bytes > size || off > size - bytes)
                why = DION_WCHK_RANGE;
            else if (bytes && !p->base && dion__peer_transport(&c->dev, rank) != DION_TRANSPORT_PROXY &&
                     dion__peer_transport(&c->dev, rank) != DION_TRANSPORT_GDAKI)
                why = DION_WCHK_UNMAPPED; /* proxy and gdaki peers are reached by the network, never mapped */
            else if ((((uint64_t)(uintptr_t)p->base + off) & (align - 1)) != 0)
                why = DION_WCHK_ALIGN;
        }
    }
    if (!why) return 1;
    if (leader) {
        int access = why == DION_WCHK_RANGE || why == DION_WCHK_ALIGN || why == DION_WCHK_UNMAPPED;
        dion__err_t e = dion__err(access ? DION_ERR_REMOTE_ACCESS : DION_ERR_INVALID_ARG, op, peer);
        e.cmp = why;
        e.offset = off;
        e.bytes = bytes;
        e.limit = size;
        e.expected = why == DION_WCHK_DESTROYED ? id : align;
        e.observed = (uint64_t)rank;
        dion__record(c, e);
    }
    return 0;
}

/* ---- cooperative copy ----
 * The group's threads split the bytes. The widest access both pointers allow (16, 8, 4, 2 or 1 bytes) is used
 * for the body; the unaligned head and tail are copied by the leader in the widest steps the address allows.
 * Each thread issues all its loads of an unrolled step before its stores, so several are in flight. */

#ifndef DION__COPY_UNROLL
#define DION__COPY_UNROLL 4 /* loads in flight per thread per step; a build may override it */
#endif

DION_HD void dion__copy_edge(char *dst, const char *src, size_t n)
{
    /* dst and src are congruent modulo every step used here, so each typed access is aligned */
    while (n) {
        uintptr_t a = (uintptr_t)dst;
        if (n >= 8 && (a & 7) == 0) {
            *(uint64_t *)dst = *(const uint64_t *)src;
            dst += 8, src += 8, n -= 8;
        } else if (n >= 4 && (a & 3) == 0) {
            *(uint32_t *)dst = *(const uint32_t *)src;
            dst += 4, src += 4, n -= 4;
        } else if (n >= 2 && (a & 1) == 0) {
            *(uint16_t *)dst = *(const uint16_t *)src;
            dst += 2, src += 2, n -= 2;
        } else {
            *dst = *src;
            dst += 1, src += 1, n -= 1;
        }
    }
}

#if DION__GPU
typedef ulonglong2 dion__v16_t;
#else
typedef struct {
    uint64_t x, y;
} dion__v16_t;
#endif

/* How the 16-byte body of the cooperative copy stores (a build may override it to compare the large-put path,
 * perf/CMakeLists.txt p2p_bench_stcs / _u8cs, against perf/ab_bench's bandwidth sweep): 0 plain stores, the
 * default; 1 streaming stores (st.global.cs, evict first); 2 stores that do not allocate in L1
 * (st.global.L1::no_allocate). GPU code only: the other widths and CPU mode always store plainly. */
#ifndef DION__COPY_ST
#define DION__COPY_ST 0
#endif
#if DION__GPU && (DION__COPY_ST == 1 || DION__COPY_ST == 2)
DION_HD void dion__copy_st16(dion__v16_t *p, dion__v16_t v)
{
    size_t g = __cvta_generic_to_global(p);
#if DION__COPY_ST == 1
    asm volatile("st.global.cs.v2.u64 [%0], {%1, %2};" ::"l"(g), "l"(v.x), "l"(v.y) : "memory");
#else
    asm volatile("st.global.L1::no_allocate.v2.u64 [%0], {%1, %2};" ::"l"(g), "l"(v.x), "l"(v.y) : "memory");
#endif
}
#define DION__COPY_STORE_16(p, v) dion__copy_st16((p), (v))
#else
#define DION__COPY_STORE_16(p, v) (*(p) = (v))
#endif
#define DION__COPY_STORE_8(p, v) (*(p) = (v))
#define DION__COPY_STORE_4(p, v) (*(p) = (v))
#define DION__COPY_STORE_2(p, v) (*(p) = (v))
#define DION__COPY_STORE_1(p, v) (*(p) = (v))

#define DION__COPY_BODY(T, W)                                                                                \
    DION_HD void dion__copy_body_##W(T *dst, const T *src, size_t n, uint32_t r, uint32_t g)                 \
    {                                                                                                        \
        size_t i = r;                                                                                        \
        for (; i + (size_t)(DION__COPY_UNROLL - 1) * g < n; i += (size_t)DION__COPY_UNROLL * g) {            \
            T t[DION__COPY_UNROLL];                                                                          \
            for (int u = 0; u < DION__COPY_UNROLL; u++) t[u] = src[i + (size_t)u * g];                       \
            for (int u = 0; u < DION__COPY_UNROLL; u++) DION__COPY_STORE_##W(&dst[i + (size_t)u * g], t[u]); \
        }                                                                                                    \
        /* fewer than DION__COPY_UNROLL elements left per thread: all their loads before their stores too */ \
        if (i < n) {                                                                                         \
            T t[DION__COPY_UNROLL];                                                                          \
            for (int u = 0; u < DION__COPY_UNROLL - 1; u++)                                                  \
                if (i + (size_t)u * g < n) t[u] = src[i + (size_t)u * g];                                    \
            for (int u = 0; u < DION__COPY_UNROLL - 1; u++)                                                  \
                if (i + (size_t)u * g < n) DION__COPY_STORE_##W(&dst[i + (size_t)u * g], t[u]);              \
        }                                                                                                    \
    }
DION__COPY_BODY(dion__v16_t, 16)
DION__COPY_BODY(uint64_t, 8)
DION__COPY_BODY(uint32_t, 4)
DION__COPY_BODY(uint16_t, 2)
DION__COPY_BODY(uint8_t, 1)
#undef DION__COPY_BODY

/* Where the 16-byte body's elements go (a build may override it, perf/CMakeLists.txt p2p_bench_cwarp*, to
 * compare with perf/ab_bench's bandwidth sweep, family "put ldst warp"): 0 element i to thread i mod g, so
 * that the group's warps store neighbouring 512-byte pieces; 1 for groups of whole warps and copies of at
 * least a run per warp, each warp copies runs of DION__COPY_UNROLL * 512 contiguous bytes (whole 128-byte
 * lines, a run per step), the runs handed out to the warps in turn (smaller copies keep layout 0, so that
 * every warp still takes part). */
#ifndef DION__COPY_LAYOUT
#define DION__COPY_LAYOUT 0
#endif
#if DION__COPY_LAYOUT == 1
DION_HD void dion__copy_body_16w(dion__v16_t *dst, const dion__v16_t *src, size_t n, uint32_t r, uint32_t g)
{
    if ((g & 31) || n < (size_t)g * DION__COPY_UNROLL) { /* not whole warps, or less than a run per warp */
        dion__copy_body_16(dst, src, n, r, g);
        return;
    }
    const size_t run = (size_t)DION__COPY_UNROLL * 32, warps = g >> 5;
    size_t k = r >> 5;
    const dion__v16_t *s = src + k * run + (r & 31);
    dion__v16_t *d = dst + k * run + (r & 31);
    for (; (k + 1) * run <= n; k += warps, s += warps * run, d += warps * run) {
        dion__v16_t t[DION__COPY_UNROLL];
        for (int u = 0; u < DION__COPY_UNROLL; u++) t[u] = s[u * 32];
        for (int u = 0; u < DION__COPY_UNROLL; u++) DION__COPY_STORE_16(&d[u * 32], t[u]);
    }
    /* the last, partial run belongs to one warp: its loads before its stores too */
    if (k * run < n) {
        dion__v16_t t[DION__COPY_UNROLL];
        size_t first = (size_t)(s - src), left = first < n ? n - first : 0; /* from this thread's first on */
        for (int u = 0; u < DION__COPY_UNROLL; u++)
            if ((size_t)u * 32 < left) t[u] = s[u * 32];
        for (int u = 0; u < DION__COPY_UNROLL; u++)
            if ((size_t)u * 32 < left) DION__COPY_STORE_16(&d[u * 32], t[u]);
    }
}
#define DION__COPY_BODY_16 dion__copy_body_16w
#else
#define DION__COPY_BODY_16 dion__copy_body_16
#endif

/* The GPU's cooperative copy: thread r of a group of g copies its share of n bytes. Compiled for the CPU too,
 * so that unit tests check it on every size and alignment (tests/unit/test_core.c). */
DION_HD void dion__copy_vec(char *dst, const char *src, size_t n, uint32_t r, uint32_t g)
{
    uintptr_t diff = (uintptr_t)dst ^ (uintptr_t)src, all = (uintptr_t)dst | (uintptr_t)src | (uintptr_t)n;
    /* Both ends 16-byte aligned and whole 16-byte elements, the usual case: straight into the body, with no
     * head, tail or width selection. In a block every instruction before the first load is paid by all 32
     * warps on the same 4 schedulers, and a warp's copy waits for the whole prologue. */
    if ((all & 15) == 0) {
        DION__COPY_BODY_16((dion__v16_t *)dst, (const dion__v16_t *)src, n >> 4, r, g);
        return;
    }
    if (n <= 16) { /* a few bytes: the leader alone, a store or two, no loop set-up or cross-warp hand-off */
        if (r == 0) {
            if ((all & 7) == 0) { /* 8 (or 16) bytes, both ends 8-aligned: the loads before the stores */
                uint64_t a = *(const uint64_t *)src, b = n == 16 ? ((const uint64_t *)src)[1] : 0;
                *(uint64_t *)dst = a;
                if (n == 16) ((uint64_t *)dst)[1] = b;
            } else if ((diff & 7) == 0) {
                dion__copy_edge(dst, src, n);
            } else {
                for (size_t i = 0; i < n; i++) dst[i] = src[i];
            }
        }
        return;
    }
    /* widest access width both pointers allow, as a shift: a 64-bit division would cost more than the copy */
    unsigned shift = (diff & 15) == 0  ? 4
                     : (diff & 7) == 0 ? 3
                     : (diff & 3) == 0 ? 2
                     : (diff & 1) == 0 ? 1
                                       : 0;
    size_t w = (size_t)1 << shift;
    size_t head = (w - ((uintptr_t)dst & (w - 1))) & (w - 1);
    if (head > n) head = n;
    size_t body = (n - head) >> shift, tail = n - head - (body << shift);
    /* head and tail by the leader: they never overlap the body */
    if (r == 0 && head) dion__copy_edge(dst, src, head);
    if (r == 0 && tail) dion__copy_edge(dst + n - tail, src + n - tail, tail);
    char *d = dst + head;
    const char *s = src + head;
    switch (shift) {
    case 4:
        DION__COPY_BODY_16((dion__v16_t *)d, (const dion__v16_t *)s, body, r, g);
        break;
    case 3:
        dion__copy_body_8((uint64_t *)d, (const uint64_t *)s, body, r, g);
        break;
    case 2:
        dion__copy_body_4((uint32_t *)d, (const uint32_t *)s, body, r, g);
        break;
    case 1:
        dion__copy_body_2((uint16_t *)d, (const uint16_t *)s, body, r, g);
        break;
    default:
        dion__copy_body_1((uint8_t *)d, (const uint8_t *)s, body, r, g);
        break;
    }
}

/* Copies n bytes; thread r of a group of g. The caller synchronizes the group afterwards if it needs to. */
DION_HD void dion__copy(char *dst, const char *src, size_t n, uint32_t r, uint32_t g)
{
    if (n == 0) return;
#if DION__GPU
    dion__copy_vec(dst, src, n, r, g);
#else
    /* CPU mode: contiguous slices, one memcpy each (the threads of a group run one after another on few
     * cores, so interleaved elements would only add work). */
    size_t part = (n + g - 1) / g, lo = (size_t)r * part;
    if (lo < n) memcpy(dst + lo, src + lo, n - lo < part ? n - lo : part);
#endif
}

/* ---- waiting on a signal word ---- */

DION_HD int dion__cmp_holds(uint64_t v, uint32_t cmp, uint64_t x)
{
    switch (cmp) {
    case DION_CMP_EQ:
        return v == x;
    case DION_CMP_NE:
        return v != x;
    case DION_CMP_GT:
        return v > x;
    case DION_CMP_GE:
        return v >= x;
    case DION_CMP_LT:
        return v < x;
    case DION_CMP_LE:
        return v <= x;
    }
    return 0;
}

/* How a wait polls (a build may override it to compare, perf/CMakeLists.txt):
 *  0: every poll an acquire load (a strong load and an L1 invalidation, CCTL.IVALL, on sm_90);
 *  1: relaxed polls; once one sees the comparison hold, one acquire load of the word that must see it hold
 * too (it returns that value), so the invalidation is paid once instead of on every poll (and an L2 round
 * trip more); 2: relaxed polls, then fence.acq_rel at the handle's scope (MEMBAR + CCTL.IVALL); 3, the
 * default where the toolkit and the architecture have it (sm_90, PTX ISA 8.6 / CUDA 12.8; else 0): relaxed
 * polls, then fence.acquire at the handle's scope, which is the CCTL.IVALL alone: the poll loop is the
 * hand-written relaxed flag loop, and the invalidation is paid once per wait instead of on every poll, with
 * no MEMBAR and no second load. A strong (relaxed) read followed by an acquire fence is an acquire pattern in
 * the PTX memory model, so the wait still acquires (docs/semantics.md). The first load of a wait is an
 * acquire in modes 0-2 (a wait whose condition already holds costs one load) and, in 3, a relaxed load that
 * is followed by the fence when it returns. */
#ifndef DION__WAIT_POLL
#define DION__WAIT_POLL 3
#endif
#if DION__WAIT_POLL == 3 && DION__GPU &&                                                                     \
    (__CUDA_ARCH__ < 900 || __CUDACC_VER_MAJOR__ < 12 ||                                                     \
     (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ < 8))
#define DION__POLL_MODE 0 /* no fence.acquire here (sm_80, or a toolkit before 12.8): acquire polls */
#else
#define DION__POLL_MODE DION__WAIT_POLL
#endif

/* The acquire half of mode 3: after a relaxed load that saw the value, later loads see what was released
 * before it. CPU mode: an acquire fence after a relaxed atomic load, the same pattern in C11. */
DION_HD void dion__fence_acquire(uint32_t scope)
{
#if DION__GPU && DION__POLL_MODE == 3
    if (scope == DION_SCOPE_GPU)
        asm volatile("fence.acquire.gpu;" ::: "memory");
    else
        asm volatile("fence.acquire.sys;" ::: "memory");
#elif DION__GPU
    dion__fence(scope);
#else
    (void)scope;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

DION_HD uint64_t dion__poll_load(const uint64_t *p, uint32_t scope)
{
#if DION__POLL_MODE == 0
    return dion__ld_acquire(p, scope);
#else
    return dion__ld_relaxed(p, scope);
#endif
}

/* Polls between two looks at the abort word, the clock and the back-off (a build may override it to compare,
 * perf/CMakeLists.txt, p2p_bench_prev): 1 runs that bookkeeping test after every poll; B > 1 (a power of two
 * up to 128) polls B times in a row with nothing but the load, the comparison and a branch out (unrolled), as
 * a hand-written flag loop does, and tests the poll count once per B polls. The abort word and the clock are
 * still read every 128 polls and the back-off still starts after 4096: only the place of the test changes.
 * 8, the default since the H200 runs of 2026-11-30 (variant wb8: relaxed signal 0.446 -> 0.394 us on one
 * GPU, 1.23 -> 1.12 times the raw flag over NVLink; docs/results/2026-11-30-s3-h200). GPU code only; CPU
 * mode always polls one at a time (its back-off yields per poll). */
#ifndef DION__WAIT_BATCH
#define DION__WAIT_BATCH 8
#endif
#if DION__GPU && DION__WAIT_BATCH > 1
#define DION__POLL_BATCH DION__WAIT_BATCH
#else
#define DION__POLL_BATCH 1
#endif
#if DION__POLL_BATCH > 128 || (DION__POLL_BATCH & (DION__POLL_BATCH - 1)) != 0
#error "DION__WAIT_BATCH must be a power of two up to 128"
#endif

/* One batch of polls of word: 1 with *v the value that made cmp hold, else 0 with *v the last value read. */
DION_HD int dion__poll_batch(const uint64_t *word, uint32_t scope, uint32_t cmp, uint64_t value, uint64_t *v)
{
#if DION__POLL_BATCH > 1
#pragma unroll
#endif
    for (int k = 0; k < DION__POLL_BATCH; k++) {
        *v = dion__poll_load(word, scope);
        if (dion__cmp_holds(*v, cmp, value)) return 1;
    }
    return 0;
}

/* The shape of the GPU's wait loop (a build may override it to compare, perf/CMakeLists.txt p2p_bench_wsh1,
 * wsh2): 0 (default) the batched loop below (DION__WAIT_BATCH), with its own first load. 1: a poll that finds
 * nothing costs its load, the comparison and one branch on a count-down beside it, and the poll that sees the
 * value leaves the loop straight into one acquire fence (sm_90: fence.acquire.sys, the same instruction as
 * .gpu) and the return; the rare work (abort word and clock every 128 polls, back-off from 4096) is one call
 * site after each count-down, as in the packet waits. 2: 1 with the count-down and the comparison in one
 * branch (the hit tested again after it). Modes 0, 2 and 3 of DION__WAIT_POLL; mode 1 keeps the batched
 * loop. 1 bought nothing measurable (H200, one GPU, 2026-12-01 04:45: relaxed signal / raw flag 1.244 with
 * 1, 1.226 with 0; raw store + dion_wait / raw 1.237 and 1.234): what the wait costs over the raw loop is in
 * the caller's code around it (the status test and the reconvergence after the call), not in the loop. */
#ifndef DION__WAIT_SHAPE
#define DION__WAIT_SHAPE 0
#endif
#if DION__GPU && DION__WAIT_SHAPE >= 1 && DION__POLL_MODE != 1
#define DION__WAIT_LEAN 1
#else
#define DION__WAIT_LEAN 0
#endif

/* The acquire that ends a wait whose last poll was relaxed (modes 2 and 3). On sm_90 fence.acquire at gpu and
 * sys scope are the same instruction (CCTL.IVALL): one unpredicated sys fence instead of a branch or two
 * predicated copies on the handle's scope (sys is the stronger of the two, so it is right for both). */
DION_HD void dion__wait_acquire(uint32_t scope)
{
#if DION__GPU && DION__POLL_MODE == 3 && __CUDA_ARCH__ == 900
    (void)scope;
    asm volatile("fence.acquire.sys;" ::: "memory");
#elif DION__POLL_MODE == 3
    dion__fence_acquire(scope);
#elif DION__POLL_MODE == 2
    dion__fence(scope);
#else
    (void)scope; /* mode 0: the polls themselves acquire */
#endif
}

/* A wait that ran out of time: its error record (what it waited for, what it saw) and the statistic. */
DION_HD dion_status_t dion__wait_timed_out(const dion_ctx_t *c, dion_op_t op, uint32_t sig, uint32_t cmp,
                                           uint64_t value, uint64_t seen)
{
    const dion_dev_t *d = &c->dev;
    dion__err_t e = dion__err(DION_ERR_TIMEOUT, op, d->rank);
    e.sig = sig;
    e.cmp = cmp;
    e.expected = value;
    e.observed = seen;
    e.limit = d->wait_timeout_ns;
    dion__record(c, e);
    DION__STAT(c, wait_timeouts, 1);
    return DION_ERR_TIMEOUT;
}

/* The rare part of a wait after polls polls (a multiple of 128 until 4096, then every poll): the abort word
 * and the clock every 128 polls, the timeout's record, then the back-off. DION_SUCCESS: keep polling. The
 * clock starts at the first look, so a wait that succeeds within 128 polls never reads it. */
DION_HD dion_status_t dion__wait_rare(const dion_ctx_t *c, uint32_t scope, uint32_t polls, uint64_t *start,
                                      uint64_t v, uint32_t cmp, uint64_t value, dion_op_t op, uint32_t sig)
{
    const dion_dev_t *d = &c->dev;
    if ((polls & 127) == 0) {
        uint64_t ab = dion__ld_relaxed(dion__ctl_word(d, d->signals, DION_CTL_ABORT), scope);
        if (ab) return (dion_status_t)ab;
        uint64_t now = dion__time_ns();
        if (*start == 0) *start = now;
        if (d->wait_timeout_ns && now - *start > d->wait_timeout_ns)
            return dion__wait_timed_out(c, op, sig, cmp, value, v);
    }
    dion__backoff(polls);
    return DION_SUCCESS;
}

/* Polls word (in this rank's signal table) until cmp holds, the comm is aborted, or the timeout passes.
 * The load that returns is an acquire (or is followed by a fence, DION__WAIT_POLL 2 and 3), so data released
 * before the observed value is visible after it. */
DION_HD dion_status_t dion__wait_word(const dion_ctx_t *c, const uint64_t *word, uint32_t cmp, uint64_t value,
                                      uint64_t *observed, dion_op_t op, uint32_t sig)
{
    const dion_dev_t *d = &c->dev;
    uint32_t scope = dion__dev_scope(d);
#if DION__WAIT_LEAN
    uint64_t start = 0, v;
    uint32_t polls = 0;
    /* the word's address in a register before the loop: else the compiler rebuilds it from the parameter bank
     * in every poll, a constant-bank load that the poll's load then waits for */
    asm volatile("" : "+l"(word));
    for (;;) {
        uint32_t k = polls < 4096 ? 128u : 1u; /* polls before the next look at abort word and clock */
        polls += k;
#if DION__WAIT_SHAPE == 2
        do { /* one branch a miss, on the comparison and the count together; the hit is tested again after */
            v = dion__poll_load(word, scope);
        } while (!dion__cmp_holds(v, cmp, value) && --k);
        if (dion__cmp_holds(v, cmp, value)) goto hit;
#else
        do { /* the hit leaves the loop from the poll */
            v = dion__poll_load(word, scope);
            if (dion__cmp_holds(v, cmp, value)) goto hit;
        } while (--k);
#endif
        dion_status_t st = dion__wait_rare(c, scope, polls, &start, v, cmp, value, op, sig);
        if (st != DION_SUCCESS) {
            if (observed) *observed = v;
            return st;
        }
    }
hit:
    dion__wait_acquire(scope);
    if (observed) *observed = v;
    return DION_SUCCESS;
#else
#if DION__POLL_MODE == 3
    uint64_t v = dion__ld_relaxed(word, scope);
    if (dion__cmp_holds(v, cmp, value)) {
        dion__wait_acquire(scope);
        if (observed) *observed = v;
        return DION_SUCCESS;
    }
#else
    uint64_t v = dion__ld_acquire(word, scope);
    if (dion__cmp_holds(v, cmp, value)) {
        if (observed) *observed = v;
        return DION_SUCCESS;
    }
#endif
    const uint64_t *abort_word = dion__ctl_word(d, d->signals, DION_CTL_ABORT);
    /* The clock is read only every 128 polls, the first time included: a timer read on the way into the loop
     * would sit on the latency path of every wait that does not succeed at once. */
    uint64_t start = 0;
    for (uint32_t polls = DION__POLL_BATCH;; polls += DION__POLL_BATCH) {
        if (dion__poll_batch(word, scope, cmp, value, &v)) {
#if DION__POLL_MODE == 1
            v = dion__ld_acquire(word, scope); /* later in coherence order: the same or a newer value */
            if (dion__cmp_holds(v, cmp, value)) break;
#elif DION__POLL_MODE == 2
            dion__fence(scope);
            break;
#elif DION__POLL_MODE == 3
            dion__wait_acquire(scope);
            break;
#else
            break;
#endif
        }
        if ((polls & 127) == 0) {
            uint64_t ab = dion__ld_relaxed(abort_word, scope);
            if (ab) {
                if (observed) *observed = v;
                return (dion_status_t)ab;
            }
            uint64_t now = dion__time_ns();
            if (start == 0) start = now;
            if (d->wait_timeout_ns && now - start > d->wait_timeout_ns) {
                if (observed) *observed = v;
                return dion__wait_timed_out(c, op, sig, cmp, value, v);
            }
        }
        dion__backoff(polls);
    }
    if (observed) *observed = v;
    return DION_SUCCESS;
#endif
}

#endif /* DION_DEVICE_COMMON_CUH */
