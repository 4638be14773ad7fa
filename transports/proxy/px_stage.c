/* Windows staged through pinned host shadows, for providers that cannot register GPU memory (no FI_HMEM), and
 * for every window under DION_PROXY_STAGING=always (the CPU-mode tests).
 *
 * A staged window has a shadow: host memory of the same size, registered with the engine; peers' data
 * transfers reach the shadow, never the window. The window's owner keeps the two in step with notices:
 * - put / put_signal into a staged window: the initiator's proxy writes the data into the shadow and queues a
 *   LAND notice for the range (with the signal). The progress pass puts the queued notices into the owner's
 *   inbox (one put per run of slots) and adds their number to the inbox's tail with an ORDERED atomic (after
 *   the data and the notices). The owner's proxy sees the tail move and applies every notice that arrived,
 *   as one batch: the copies shadow -> window are enqueued on its own non-blocking stream, one wait covers
 *   them all, then the batch's signals are applied in notice order, then one acknowledgement (an ORDERED add
 *   of the count) goes back per peer. So a signal never overtakes its data, and a put completes for the
 *   initiator (quiet) only once its data is in the window.
 * - notices merge while they are queued and not yet put: a put whose range touches a queued LAND for the same
 *   window widens it (data may land earlier, never later); a signal, or a put_signal whose range touches it,
 *   joins the last queued notice when that one has no signal yet (so every notice before it stays before).
 *   Ranges merge only where they touch: a gap's shadow bytes could be older than the window's.
 * - a signal (SET / ADD) or a put_signal into an unstaged window, while notices to that peer are still
 *   unacknowledged, goes as a notice too: it is applied after them (release order).
 * - get from a staged window: a notice; the owner copies the range from the window into its shadow and puts
 *   it into the initiator's window (or the initiator's shadow, copied out locally on completion).
 * - fetch-add / compare-swap on a staged window: a notice; the owner applies it with a host atomic when the
 *   window is host memory (after the batch's earlier copies and signals). GPU memory cannot be updated
 *   atomically from the host: refused with a sentence.
 * - a local staged window as the source of a put is copied first, for a batch of commands at once, with one
 *   wait (dion__pxs_stage_sources): into the source arena, ranges closer than DION__PXS_GAP as one copy, held
 *   until the batch's positions completed; where the arena has no room, into its own shadow (one copy per run
 *   of touching ranges). As the destination of a get, the data lands in the shadow and is copied into the
 *   window before the get completes.
 *
 * The inbox (one registered host block per rank), N = ranks, K = pc->notes:
 *   tail[N]      notices rank s wrote here (s adds their count once they are in)
 *   ack[N]       notices of this rank that rank p applied (p adds their count)
 *   res[N][K][2] {value, status} that rank p wrote for this rank's notice n (slot n % K)
 *   rout[N][K][2] {value, status} this rank sends back for rank s's notice n (kept until s saw the ack)
 *   in[N][K]     notices from rank s (slot n % K)
 *   out[N][K]    notices to rank p (the puts' source)
 * A notice slot is rewritten only after its acknowledgement: at most K notices per pair are in flight. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cuda.h"
#include "transports/proxy/px.h"
#include "transports/transport.h"

#define DION__PXS_HELD 1024u /* notices applied before their batch's copies are waited for */
/* Queued notices a put looks back through for one to merge into. Blocks that share a ring interleave their
 * commands (msgrate from all SMs: 16 blocks per ring), so a put's neighbour is often dozens of notices back;
 * a compare each is cheap next to a notice slot, which is held for a round trip. */
#define DION__PXS_MERGE 64u
/* Bytes of the source arena: staged put sources of the batches in flight. */
#define DION__PXS_ARENA (4ull << 20)
#define DION__PXS_GAP   4096u /* source ranges this close are copied as one (the gap's bytes too) */

typedef struct {
    size_t tail, ack, res, rout, in, out, total;
} dion__px_box_t;

static dion__px_box_t dion__px_box(int n, uint32_t k)
{
    dion__px_box_t b;
    size_t N = (size_t)n, K = k;
    b.tail = 0;
    b.ack = 8 * N;
    b.res = 16 * N;
    b.rout = b.res + 16 * N * K;
    b.in = (b.rout + 16 * N * K + 63) & ~(size_t)63;
    b.out = b.in + sizeof(dion__px_note_t) * N * K;
    b.total = b.out + sizeof(dion__px_note_t) * N * K;
    return b;
}

/* K for n ranks: the budget shared out, a power of two within [MIN, MAX] (the same on every rank). */
static uint32_t dion__px_notes(int n)
{
    uint32_t k = DION__PX_NOTES_MAX;
    while (k > DION__PX_NOTES_MIN && (uint64_t)k * (uint64_t)n > DION__PX_NOTES_BUDGET) k /= 2;
    return k;
}

static uint64_t *dion__px_word(dion__pxc_t *pc, size_t off)
{
    return (uint64_t *)(pc->box + off);
}

dion_status_t dion__pxs_comm_init(dion__pxc_t *pc)
{
    dion_comm_t c = pc->comm;
    int mode = 0, n = c->nranks;
    dion_status_t st = dion__cfg_enum("DION_PROXY_STAGING", &mode);
    pc->stage_always = st == DION_SUCCESS && mode == 1;
    int gpu = c->cuda_device >= 0 && dion__cuda_device_count() > 0;
    int need = st == DION_SUCCESS && (pc->stage_always || (gpu && !pc->caps.cuda_mem));
    int *all = calloc((size_t)n, sizeof *all);
    dion_status_t ag = dion__comm_agree(c, all ? st : dion__error(DION_ERR_NO_MEMORY, "out of memory"),
                                        "reading DION_PROXY_STAGING");
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, &need, sizeof need, all);
    int any = 0;
    for (int r = 0; ag == DION_SUCCESS && r < n; r++) any |= all[r];
    free(all);
    if (ag != DION_SUCCESS || !any) return ag;

    pc->stage_on = 1;
    pc->notes = dion__px_notes(n);
    dion__px_box_t b = dion__px_box(n, pc->notes);
    dion__engine_rkey_t rk;
    memset(&rk, 0, sizeof rk);
    st = dion__stage_create(pc->E, pc->e, 64, 1, &pc->stage);
    if (st == DION_SUCCESS && posix_memalign((void **)&pc->box, 4096, b.total)) {
        pc->box = NULL;
        st = dion__error(DION_ERR_NO_MEMORY, "proxy staging: no memory for the %zu-byte inbox", b.total);
    }
    if (st == DION_SUCCESS) {
        memset(pc->box, 0, b.total);
        st = pc->E->mem_reg(pc->e, pc->box, b.total, DION__ENGINE_MEM_HOST, &pc->box_mr, &rk);
    }
    /* the source arena is optional: without it sources are copied into the shadows, touching runs joined */
    if (st == DION_SUCCESS &&
        dion__stage_shadow_alloc(pc->stage, DION__PXS_ARENA, (void **)&pc->sarena) == DION_SUCCESS) {
        dion__engine_rkey_t ark;
        if (pc->E->mem_reg(pc->e, pc->sarena, DION__PXS_ARENA, DION__ENGINE_MEM_HOST, &pc->sarena_mr, &ark) !=
            DION_SUCCESS) {
            DION_LOG(DION_LOG_INFO, "proxy staging: no source arena (%s)", dion_last_error());
            dion__error_clear();
            dion__stage_shadow_free(pc->stage, pc->sarena);
            pc->sarena = NULL;
        }
    } else if (st == DION_SUCCESS) {
        DION_LOG(DION_LOG_INFO, "proxy staging: no source arena (%s)", dion_last_error());
        dion__error_clear();
        pc->sarena = NULL;
    }
    pc->box_rk = calloc((size_t)n, sizeof *pc->box_rk);
    uint64_t **ctr[] = {&pc->sent, &pc->wput, &pc->pub, &pc->acked, &pc->head, &pc->replied, &pc->ackd};
    int oom = 0;
    for (size_t i = 0; i < sizeof ctr / sizeof ctr[0]; i++) oom |= !(*ctr[i] = calloc((size_t)n, 8));
    pc->waitq = calloc((size_t)n, sizeof *pc->waitq);
    pc->held = calloc(DION__PXS_HELD, sizeof *pc->held);
    /* every land is held, and a full held list flushes them: at most HELD + 1 at once */
    pc->lands = calloc(DION__PXS_HELD + 1, sizeof *pc->lands);
    if (st == DION_SUCCESS && (oom || !pc->box_rk || !pc->waitq || !pc->held || !pc->lands))
        st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
    ag = dion__comm_agree(c, st, "opening the proxy's staging inbox");
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, &rk, sizeof rk, pc->box_rk);
    if (ag == DION_SUCCESS)
        DION_LOG(DION_LOG_INFO,
                 "proxy backend: staging %s through pinned host shadows (%s); inbox %zu bytes per rank, %u "
                 "notices in flight per peer",
                 pc->stage_always ? "every window" : "GPU windows",
                 pc->stage_always ? "DION_PROXY_STAGING=always" : "the provider cannot register GPU memory",
                 b.total, pc->notes);
    return ag;
}

void dion__pxs_comm_fini(dion__pxc_t *pc)
{
    if (pc->stage_on)
        DION_LOG(DION_LOG_INFO,
                 "proxy staging: %llu notices sent (%llu more puts merged into them), %llu applied here with "
                 "%llu copies; %llu puts from staged windows took %llu source copies; the proxy waited for "
                 "copies %llu times for sources (%.1f ms) and %llu times for landed data (%.1f ms)",
                 (unsigned long long)pc->n_notes, (unsigned long long)pc->n_merged,
                 (unsigned long long)pc->n_applied, (unsigned long long)pc->n_copies,
                 (unsigned long long)pc->n_src_puts, (unsigned long long)pc->n_src_copies,
                 (unsigned long long)pc->n_src_waits, (double)pc->ns_src_wait / 1e6,
                 (unsigned long long)pc->n_land_waits, (double)pc->ns_land_wait / 1e6);
    if (pc->box_mr) pc->E->mem_dereg(pc->e, pc->box_mr);
    free(pc->box);
    if (pc->sarena_mr) pc->E->mem_dereg(pc->e, pc->sarena_mr);
    if (pc->sarena) dion__stage_shadow_free(pc->stage, pc->sarena);
    for (uint32_t i = 0; i < DION__PX_GLUES; i++) free(pc->srcmap[i]);
    if (pc->stage) dion__stage_destroy(pc->stage);
    free(pc->box_rk);
    uint64_t *ctr[] = {pc->sent, pc->wput, pc->pub, pc->acked, pc->head, pc->replied, pc->ackd};
    for (size_t i = 0; i < sizeof ctr / sizeof ctr[0]; i++) free(ctr[i]);
    for (int r = 0; pc->waitq && r < pc->comm->nranks; r++) free(pc->waitq[r].w);
    free(pc->waitq);
    free(pc->held);
    free(pc->lands);
}

dion_status_t dion__pxs_export(dion__pxc_t *pc, void *base, size_t bytes, dion__px_desc_t *desc,
                               dion__px_exp_t *x)
{
    int mem = DION__ENGINE_MEM_HOST;
    if (pc->comm->cuda_device >= 0 && dion__cuda_device_count() > 0) {
        struct cudaPointerAttributes a;
        memset(&a, 0, sizeof a);
        if (cudaPointerGetAttributes(&a, base) == cudaSuccess && a.type == cudaMemoryTypeDevice)
            mem = DION__ENGINE_MEM_CUDA;
        cudaGetLastError();
    }
    int gpu = mem == DION__ENGINE_MEM_CUDA;
    int staged = bytes && pc->stage_on && (pc->stage_always || (gpu && !pc->caps.cuda_mem));
    if (gpu && !pc->caps.cuda_mem && !staged && bytes)
        return dion__error(DION_ERR_UNSUPPORTED,
                           "proxy backend: provider %s cannot register GPU memory and staging is off; "
                           "use a host window (dion_win_alloc on_host=1) or unset DION_PROXY_STAGING",
                           pc->caps.provider);
    dion_status_t st = DION_SUCCESS;
    desc->mem.flags = (uint32_t)mem;
    pthread_mutex_lock(&pc->mu);
    if (!gpu || pc->caps.cuda_mem || !bytes) st = pc->E->mem_reg(pc->e, base, bytes, mem, &x->mr, &desc->mem);
    if (st == DION_SUCCESS && staged) {
        st = dion__stage_shadow_alloc(pc->stage, bytes, (void **)&x->shadow);
        if (st == DION_SUCCESS)
            st = pc->E->mem_reg(pc->e, x->shadow, bytes, DION__ENGINE_MEM_HOST, &x->smr, &desc->shadow);
    }
    pthread_mutex_unlock(&pc->mu);
    x->pc = pc;
    x->base = base;
    x->bytes = bytes;
    x->key = desc->mem.key;
    x->staged = staged;
    x->gpu = gpu;
    desc->staged = (uint32_t)staged;
    desc->gpu = (uint32_t)gpu;
    if (st != DION_SUCCESS) dion__pxs_unexport(pc, x);
    return st;
}

void dion__pxs_unexport(dion__pxc_t *pc, dion__px_exp_t *x)
{
    pthread_mutex_lock(&pc->mu);
    if (x->mr) pc->E->mem_dereg(pc->e, x->mr);
    if (x->smr) pc->E->mem_dereg(pc->e, x->smr);
    pthread_mutex_unlock(&pc->mu);
    if (x->shadow) dion__stage_shadow_free(pc->stage, x->shadow);
    x->mr = x->smr = NULL;
    x->shadow = NULL;
}

/* The caller holds the mutex. */
void dion__pxs_region_free(dion__pxc_t *pc, dion__pxr_t *r)
{
    if (r->mr) pc->E->mem_dereg(pc->e, r->mr);
    if (r->smr) pc->E->mem_dereg(pc->e, r->smr);
    if (r->shadow) dion__stage_shadow_free(pc->stage, r->shadow);
    r->mr = r->smr = NULL;
    r->shadow = NULL;
}

dion_status_t dion__pxs_sync(dion__pxc_t *pc, const dion__pxr_t *r, uint64_t off, uint64_t bytes,
                             int to_shadow)
{
    if (!bytes) return DION_SUCCESS;
    if (off > r->bytes || bytes > r->bytes - off)
        return dion__error(DION_ERR_REMOTE_ACCESS,
                           "proxy staging: %llu bytes at offset %llu of window %u on rank %d, which has %llu",
                           (unsigned long long)bytes, (unsigned long long)off, r->id, pc->comm->rank,
                           (unsigned long long)r->bytes);
    if (to_shadow)
        return dion__stage_copy(pc->stage, r->shadow + off, r->base + off, bytes,
                                "copying a staged window into its host shadow");
    return dion__stage_copy(pc->stage, r->base + off, r->shadow + off, bytes,
                            "copying a host shadow into its staged window");
}

int dion__pxs_pending(const dion__pxc_t *pc, int peer)
{
    return pc->stage_on && pc->sent[peer] != pc->acked[peer];
}

/* ---- the initiator's side: staged sources, queued notices, acknowledgements ---- */

static int dion__pxs_range_cmp(const void *a, const void *b)
{
    const dion__px_range_t *x = a, *y = b;
    if (x->r != y->r) return (uintptr_t)x->r < (uintptr_t)y->r ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

uint32_t dion__px_coalesce(dion__px_range_t *rg, uint32_t n)
{
    if (n < 2) return n;
    qsort(rg, n, sizeof rg[0], dion__pxs_range_cmp);
    uint32_t k = 0;
    for (uint32_t i = 1; i < n; i++) {
        if (rg[i].r == rg[k].r && rg[i].off <= rg[k].end) { /* touching or overlapping: one run */
            if (rg[i].end > rg[k].end) rg[k].end = rg[i].end;
        } else {
            rg[++k] = rg[i];
        }
    }
    return k + 1;
}

/* Frees the arena space of batches whose positions all completed (in batch order; a batch of a ring that is
 * gone frees at once: its handle was destroyed after a quiet). */
static void dion__pxs_arena_release(dion__pxc_t *pc)
{
    while (pc->srel_n) {
        const dion__px_srel_t *e = &pc->srel[pc->srel_first];
        const dion__pxg_t *g = e->gid < DION__PX_GLUES ? pc->gtab[e->gid] : NULL;
        if (g && g->done < e->pos_end) break;
        pc->sa_tail = e->head_end;
        pc->srel_first = (pc->srel_first + 1) % DION__PXS_SREL;
        pc->srel_n--;
    }
}

/* Reserves bytes of the source arena (contiguous); its offset, or -1 when it has no room now. */
static int64_t dion__pxs_arena_take(dion__pxc_t *pc, uint64_t bytes)
{
    if (!pc->sarena || !bytes || bytes > DION__PXS_ARENA / 4 || pc->srel_n == DION__PXS_SREL) return -1;
    uint64_t at = pc->sa_head % DION__PXS_ARENA,
             skip = at + bytes > DION__PXS_ARENA ? DION__PXS_ARENA - at : 0;
    if (pc->sa_head + skip + bytes - pc->sa_tail > DION__PXS_ARENA) return -1;
    pc->sa_head += skip;
    int64_t off = (int64_t)(pc->sa_head % DION__PXS_ARENA);
    pc->sa_head += bytes;
    return off;
}

typedef struct {
    dion__pxr_t *r;
    uint64_t off, end, pos;
} dion__pxs_src_t;

static int dion__pxs_src_cmp(const void *a, const void *b)
{
    const dion__pxs_src_t *x = a, *y = b;
    if (x->r != y->r) return (uintptr_t)x->r < (uintptr_t)y->r ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The batch's sources through the arena: runs of ranges closer than DION__PXS_GAP are copied whole (gap bytes
 * too: nobody else reads or writes the arena) into one reserved span, and each position reads its bytes there
 * (srcmap). 0 when the arena has no room (the caller copies into the shadows instead). */
static int dion__pxs_arena_sources(dion__pxc_t *pc, dion__pxg_t *g, dion__pxs_src_t *it, uint32_t k,
                                   uint64_t to, dion_status_t *st)
{
    uint32_t nslots = g->r->nslots;
    if (!pc->sarena || g->gid >= DION__PX_GLUES) return 0;
    if (!pc->srcmap[g->gid] || pc->srcmap_n[g->gid] != nslots) {
        free(pc->srcmap[g->gid]);
        pc->srcmap[g->gid] = calloc(nslots, sizeof(uint64_t));
        pc->srcmap_n[g->gid] = pc->srcmap[g->gid] ? nslots : 0;
        if (!pc->srcmap[g->gid]) return 0;
    }
    qsort(it, k, sizeof it[0], dion__pxs_src_cmp);
    uint64_t need = 0, runs = 0;
    for (uint32_t i = 0; i < k; i++) {
        int joins = i && it[i].r == it[i - 1].r && it[i].off <= it[i - 1].end + DION__PXS_GAP;
        uint64_t lo = joins ? it[i - 1].end : it[i].off;
        if (it[i].end > lo) need += it[i].end - lo;
        if (joins && it[i].end < it[i - 1].end) it[i].end = it[i - 1].end; /* the run's end so far */
        runs += !joins;
    }
    dion__pxs_arena_release(pc);
    int64_t at = dion__pxs_arena_take(pc, need);
    if (at < 0) return 0;
    uint64_t *map = pc->srcmap[g->gid], mask = g->r->dev.mask;
    for (uint64_t p = g->staged_to > g->exec ? g->staged_to : g->exec; p < to; p++) map[p & mask] = 0;
    uint64_t run_off = 0, run_at = (uint64_t)at;
    for (uint32_t i = 0, j; i < k && *st == DION_SUCCESS; i = j) {
        uint64_t end = it[i].end;
        for (j = i + 1; j < k && it[j].r == it[i].r && it[j].off <= end + DION__PXS_GAP; j++)
            if (it[j].end > end) end = it[j].end;
        run_off = it[i].off;
        *st = dion__stage_copy_async(pc->stage, pc->sarena + run_at, it[i].r->base + run_off, end - run_off,
                                     "copying staged windows' put sources into the source arena");
        for (uint32_t m = i; m < j; m++) map[it[m].pos & mask] = run_at + (it[m].off - run_off) + 1;
        run_at += end - run_off;
    }
    pc->n_src_copies += runs;
    pc->srel[(pc->srel_first + pc->srel_n) % DION__PXS_SREL] = (dion__px_srel_t){g->gid, to, pc->sa_head};
    pc->srel_n++;
    return 1;
}

/* The one wait for the source copies that prestage enqueued this pass; their positions count as staged once
 * it returned (on failure they do not: each put then copies its own and reports it). */
static void dion__pxs_pend_wait(dion__pxc_t *pc)
{
    if (!pc->npend) return;
    uint64_t t0 = dion__now_ns();
    dion_status_t st = dion__stage_wait(pc->stage, "copying staged windows into their host shadows");
    pc->ns_src_wait += dion__now_ns() - t0;
    pc->n_src_waits++;
    for (uint32_t i = 0; i < pc->npend; i++) {
        dion__pxg_t *g = pc->gtab[pc->pend_gid[i]];
        if (g && st == DION_SUCCESS && g->staged_pend > g->staged_to) g->staged_to = g->staged_pend;
        if (g) g->staged_pend = 0;
    }
    pc->npend = 0;
}

void dion__pxs_stage_sources(dion__pxc_t *pc, dion__pxg_t *g, const dion_proxy_cmd_t *cmds, uint32_t n)
{
    dion__pxs_stage_sources_run(pc, g, cmds, n, 1);
}

void dion__pxs_stage_sources_run(dion__pxc_t *pc, dion__pxg_t *g, const dion_proxy_cmd_t *cmds, uint32_t n,
                                 int wait)
{
    if (!pc->stage_on) return;
    if (wait) dion__pxs_pend_wait(pc);
    /* prestage: once per ring per pass, and only where the wait can be shared */
    if (!wait && (g->staged_pend || pc->npend == 64 || g->gid >= DION__PX_GLUES)) return;
    dion__pxs_src_t it[64];
    uint32_t k = 0;
    uint64_t pos = g->exec, to = g->staged_to > pos ? g->staged_to : pos;
    for (uint32_t i = 0; i < n && k < 64; i++) {
        const dion_proxy_cmd_t *c = &cmds[i];
        /* a source may be written by what comes before a fence (a get into it): later sources wait; a fence
         * first in the batch with nothing in flight is taken at once */
        if ((c->op == DION_PROXY_OP_FENCE && (i || g->inflight)) || c->op == DION_PROXY_OP_GET) break;
        if (pos + i < to) continue;
        if ((c->op == DION_PROXY_OP_PUT || c->op == DION_PROXY_OP_PUT_SIGNAL) && c->u.rma.bytes &&
            c->peer != pc->comm->rank) {
            dion__pxr_t *r = dion__px_find(pc, c->u.rma.src_win);
            uint64_t off = c->u.rma.src_off, bytes = c->u.rma.bytes;
            if (!r || off > r->bytes || bytes > r->bytes - off) break; /* the post reports it */
            if (r->staged) it[k++] = (dion__pxs_src_t){r, off, off + bytes, pos + i};
        }
        to = pos + i + 1;
    }
    if (to <= g->staged_to) return;
    pc->n_src_puts += k;
    dion_status_t st = DION_SUCCESS;
    if (!k || !dion__pxs_arena_sources(pc, g, it, k, to, &st)) {
        /* into the shadows: one copy per run of touching ranges (never across a gap, whose shadow bytes may
         * hold a peer's landed data) */
        dion__px_range_t rg[64];
        for (uint32_t i = 0; i < k; i++) rg[i] = (dion__px_range_t){it[i].r, it[i].off, it[i].end};
        k = dion__px_coalesce(rg, k);
        pc->n_src_copies += k;
        uint64_t *map = g->gid < DION__PX_GLUES ? pc->srcmap[g->gid] : NULL;
        for (uint64_t p = g->staged_to > pos ? g->staged_to : pos; map && p < to; p++)
            map[p & g->r->dev.mask] = 0;
        for (uint32_t i = 0; i < k && st == DION_SUCCESS; i++)
            st =
                dion__stage_copy_async(pc->stage, rg[i].r->shadow + rg[i].off, rg[i].r->base + rg[i].off,
                                       rg[i].end - rg[i].off, "copying a staged window into its host shadow");
    }
    if (st == DION_SUCCESS && !wait) { /* the pass's first execute waits for it with the others */
        g->staged_pend = to;
        pc->pend_gid[pc->npend++] = g->gid;
        return;
    }
    if (st == DION_SUCCESS) {
        uint64_t t0 = dion__now_ns();
        st = dion__stage_wait(pc->stage, "copying staged windows into their host shadows");
        pc->ns_src_wait += dion__now_ns() - t0;
        pc->n_src_waits++;
    }
    if (st == DION_SUCCESS) g->staged_to = to; /* else each put copies its own and reports the failure */
}

void dion__pxs_source(dion__pxc_t *pc, const dion__pxg_t *g, uint64_t pos, const char **from,
                      dion__engine_mr_t **mr)
{
    if (pos >= g->staged_to || g->gid >= DION__PX_GLUES || !pc->srcmap[g->gid]) return;
    uint64_t v = pc->srcmap[g->gid][pos & g->r->dev.mask];
    if (!v) return;
    *from = pc->sarena + v - 1;
    *mr = pc->sarena_mr;
}

static dion_status_t dion__pxs_wait_push(dion__pxc_t *pc, int peer, const dion__pxg_t *g, uint64_t pos,
                                         int amo, uint64_t nth)
{
    dion__px_waitq_t *q = &pc->waitq[peer];
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? 2 * q->cap : 64;
        dion__px_pend_t *w = malloc(sizeof *w * cap);
        if (!w) return dion__error(DION_ERR_NO_MEMORY, "proxy staging: out of memory for %u waiters", cap);
        for (uint32_t i = 0; i < q->n; i++) w[i] = q->w[(q->first + i) % q->cap];
        free(q->w);
        q->w = w;
        q->cap = cap;
        q->first = 0;
    }
    q->w[(q->first + q->n++) % q->cap] = (dion__px_pend_t){g->gid, (uint32_t)amo, pos, nth};
    return DION_SUCCESS;
}

static int dion__pxs_touch(const dion__px_note_t *a, const dion__px_note_t *b)
{
    return a->win == b->win && b->off <= a->off + a->bytes && a->off <= b->off + b->bytes;
}

/* The queued notice note merges into (its index), or -1. Only notices not yet put may change. */
static int64_t dion__pxs_merge_into(dion__pxc_t *pc, int peer, const dion__px_note_t *note)
{
    uint64_t sent = pc->sent[peer], lo = pc->wput[peer];
    if (sent == lo || note->op == DION__PXN_GET || note->op == DION__PXN_AMO) return -1;
    const dion__px_note_t *out =
        (const dion__px_note_t *)(pc->box + dion__px_box(pc->comm->nranks, pc->notes).out) +
        (size_t)peer * pc->notes;
    const dion__px_note_t *last = &out[(sent - 1) % pc->notes];
    int last_open = last->op == DION__PXN_LAND && !last->has_sig;
    if (note->op == DION__PXN_SIG) return last_open ? (int64_t)(sent - 1) : -1;
    if (note->has_sig) /* a signal stays behind every earlier notice: the last one only */
        return last_open && dion__pxs_touch(last, note) ? (int64_t)(sent - 1) : -1;
    for (uint64_t i = sent; i > lo && sent - i < DION__PXS_MERGE; i--) {
        const dion__px_note_t *c = &out[(i - 1) % pc->notes];
        if (c->op == DION__PXN_LAND && dion__pxs_touch(c, note)) return (int64_t)(i - 1);
    }
    return -1;
}

dion_status_t dion__pxs_send(dion__pxc_t *pc, dion__pxg_t *g, uint64_t pos, int peer,
                             const dion__px_note_t *note, int amo)
{
    dion__px_box_t b = dion__px_box(pc->comm->nranks, pc->notes);
    dion__px_note_t *out = (dion__px_note_t *)(pc->box + b.out) + (size_t)peer * pc->notes;
    int64_t into = dion__pxs_merge_into(pc, peer, note);
    if (into >= 0) {
        dion_status_t st = dion__pxs_wait_push(pc, peer, g, pos, amo, (uint64_t)into);
        if (st != DION_SUCCESS) return st;
        dion__px_note_t *m = &out[(uint64_t)into % pc->notes];
        pc->n_merged++;
        if (note->op == DION__PXN_LAND) {
            uint64_t lo = note->off < m->off ? note->off : m->off;
            uint64_t hi =
                note->off + note->bytes > m->off + m->bytes ? note->off + note->bytes : m->off + m->bytes;
            m->off = lo;
            m->bytes = hi - lo;
        }
        if (note->has_sig) {
            m->has_sig = 1;
            m->sig_op = note->sig_op;
            m->sig = note->sig;
            m->value = note->value;
            m->sigkey = note->sigkey;
        }
        return DION_SUCCESS;
    }
    uint64_t nth = pc->sent[peer];
    if (nth - pc->acked[peer] >= pc->notes) return DION__ENGINE_BUSY; /* its slot is still the peer's */
    dion_status_t st = dion__pxs_wait_push(pc, peer, g, pos, amo, nth);
    if (st != DION_SUCCESS) return st;
    uint32_t slot = (uint32_t)(nth % pc->notes);
    out[slot] = *note;
    uint64_t *res = dion__px_word(pc, b.res) + ((size_t)peer * pc->notes + slot) * 2;
    res[0] = res[1] = 0; /* the peer writes here only for results and failures */
    pc->sent[peer] = nth + 1;
    pc->n_notes++;
    return DION_SUCCESS;
}

/* Raises peer's counter at off (its tail or ack word for this rank) from *done to upto with one ORDERED add,
 * after everything posted to peer before it; 1 when it went out (BUSY: the next pass tries again). */
static int dion__pxs_count(dion__pxc_t *pc, int peer, size_t off, uint64_t *done, uint64_t upto)
{
    if (*done >= upto ||
        pc->E->atomic(pc->e, peer, DION__ENGINE_AMO_ADD, &pc->box_rk[peer], off, upto - *done, 0,
                      DION__ENGINE_F_ORDERED, DION__PX_INTERNAL) != DION_SUCCESS)
        return 0;
    *done = upto;
    return 1;
}

/* Puts the queued notices to peer into its inbox (a run of slots per put), then publishes them on its tail
 * with one ORDERED add, after their data. BUSY leaves the rest for the next pass. */
static int dion__pxs_flush(dion__pxc_t *pc, int peer, const dion__px_box_t *b)
{
    int me = pc->comm->rank, did = 0;
    uint32_t K = pc->notes;
    while (pc->wput[peer] < pc->sent[peer]) {
        uint64_t first = pc->wput[peer];
        uint32_t slot = (uint32_t)(first % K);
        uint64_t cnt = pc->sent[peer] - first;
        if (cnt > K - slot) cnt = K - slot;
        /* no bigger than the provider sends in one piece (shm: a larger put is a segmented transfer, and the
         * peer refuses every other post until it is done) */
        uint64_t eager = pc->caps.max_eager / sizeof(dion__px_note_t);
        if (eager && cnt > eager) cnt = eager;
        const dion__px_note_t *out = (const dion__px_note_t *)(pc->box + b->out) + (size_t)peer * K + slot;
        if (pc->E->put(pc->e, peer, pc->box_mr, out, &pc->box_rk[peer],
                       b->in + ((size_t)me * K + slot) * sizeof *out, cnt * sizeof *out, 0,
                       DION__PX_INTERNAL) != DION_SUCCESS)
            return did; /* BUSY (or broken: the poll reports it) */
        pc->wput[peer] = first + cnt;
        did = 1;
    }
    return did | dion__pxs_count(pc, peer, b->tail + (size_t)me * 8, &pc->pub[peer], pc->wput[peer]);
}

/* Acknowledgements from peer p complete the positions that waited for them. */
static int dion__pxs_acks(dion__pxc_t *pc, int p, const dion__px_box_t *b)
{
    if (pc->acked[p] == pc->pub[p]) return 0;
    uint64_t a = __atomic_load_n(dion__px_word(pc, b->ack) + p, __ATOMIC_ACQUIRE);
    if (a > pc->pub[p]) a = pc->pub[p];
    if (a <= pc->acked[p]) return 0;
    dion__px_waitq_t *q = &pc->waitq[p];
    while (q->n && q->w[q->first].nth < a) {
        dion__px_pend_t e = q->w[q->first];
        q->first = (q->first + 1) % q->cap;
        q->n--;
        const uint64_t *res = dion__px_word(pc, b->res) + ((size_t)p * pc->notes + e.nth % pc->notes) * 2;
        dion__pxg_t *g = e.gid < DION__PX_GLUES ? pc->gtab[e.gid] : NULL;
        if (!g) continue; /* its handle is gone */
        uint64_t mask = g->r->dev.mask;
        if (res[1] && !g->r->failed) {
            snprintf(g->why, sizeof g->why,
                     "proxy staging: rank %d could not apply an operation of rank %d (%s); its log says why",
                     p, pc->comm->rank, dion_status_string((dion_status_t)res[1]));
            dion__proxy_ring_fail(g->r, (dion_status_t)res[1], g->why);
        }
        if (e.amo) dion__proxy_cmd_result(&g->r->slots[e.pos & mask], res[0]);
        if (g->cnt[e.pos & mask]) g->cnt[e.pos & mask]--;
        if (g->inflight) g->inflight--;
        dion__px_advance(g);
    }
    pc->acked[p] = a;
    return 1;
}

/* ---- the owner's side: applying notices, a batch at a time ---- */

static dion__pxr_t *dion__pxs_by_key(dion__pxc_t *pc, uint64_t key)
{
    for (dion__pxr_t *x = pc->regions; x; x = x->next)
        if (x->mr && x->key == key) return x;
    return NULL;
}

static dion_status_t dion__pxs_region(dion__pxc_t *pc, int from, uint32_t id, int staged, dion__pxr_t **out)
{
    *out = dion__px_find(pc, id);
    if (*out && (!staged || (*out)->staged)) return DION_SUCCESS;
    return dion__error(
        DION_ERR_REMOTE_ACCESS,
        "proxy staging: rank %d sent a notice for window %u, which is no live %swindow of rank %d; "
        "destroy windows only after dion_quiet",
        from, id, staged ? "staged " : "", pc->comm->rank);
}

/* Applies a notice's signal to this rank's signal table (host memory, found by its engine key). */
static dion_status_t dion__pxs_signal(dion__pxc_t *pc, int s, const dion__px_note_t *n)
{
    dion__pxr_t *t = dion__pxs_by_key(pc, n->sigkey);
    if (!t || ((uint64_t)n->sig + 1) * 8 > t->bytes)
        return dion__error(DION_ERR_REMOTE_ACCESS,
                           "proxy staging: rank %d signals word %u of a signal table rank %d does not have",
                           s, n->sig, pc->comm->rank);
    uint64_t *w = (uint64_t *)t->base + n->sig;
    if (n->sig_op & 1u)
        __atomic_fetch_add(w, n->value, __ATOMIC_SEQ_CST);
    else
        __atomic_store_n(w, n->value, __ATOMIC_SEQ_CST);
    return DION_SUCCESS;
}

static const dion__px_note_t *dion__pxs_in(dion__pxc_t *pc, const dion__px_box_t *b, int s, uint32_t slot)
{
    return (const dion__px_note_t *)(pc->box + b->in) + (size_t)s * pc->notes + slot;
}

static uint64_t *dion__pxs_rout(dion__pxc_t *pc, const dion__px_box_t *b, int s, uint32_t slot)
{
    return dion__px_word(pc, b->rout) + ((size_t)s * pc->notes + slot) * 2;
}

static void dion__pxs_failed(uint64_t *rout, dion_status_t st)
{
    DION_LOG(DION_LOG_WARN, "%s", dion_last_error());
    if (!rout[1]) rout[1] = (uint64_t)st;
}

/* Waits for the batch's copies, then applies the held notices' signals in the order they came (a notice whose
 * copy failed gets the failure instead of its signal). */
/* Enqueues the batch's shadow -> window copies so far, one per run of touching ranges (notices that
 * merging at the sender could not join: puts of many blocks interleaved in one ring). They all read the
 * shadow after every notice of the batch arrived, so a run may carry bytes of a later notice early, never a
 * gap's. */
static void dion__pxs_lands(dion__pxc_t *pc)
{
    uint32_t k = dion__px_coalesce(pc->lands, pc->nlands);
    for (uint32_t i = 0; i < k && pc->land_st == DION_SUCCESS; i++) {
        const dion__px_range_t *x = &pc->lands[i];
        pc->land_st = dion__stage_copy_async(pc->stage, x->r->base + x->off, x->r->shadow + x->off,
                                             x->end - x->off, "copying a host shadow into its staged window");
        pc->copies = 1;
        pc->n_copies++;
    }
    pc->nlands = 0;
}

static void dion__pxs_barrier(dion__pxc_t *pc, const dion__px_box_t *b)
{
    dion__pxs_lands(pc);
    dion_status_t cs = pc->land_st;
    if (pc->copies) {
        uint64_t t0 = dion__now_ns();
        dion_status_t ws = dion__stage_wait(pc->stage, "copying host shadows into their staged windows");
        pc->ns_land_wait += dion__now_ns() - t0;
        pc->n_land_waits++;
        if (cs == DION_SUCCESS) cs = ws;
    }
    pc->copies = 0;
    pc->land_st = DION_SUCCESS;
    for (uint32_t i = 0; i < pc->nheld; i++) {
        const dion__px_held_t *h = &pc->held[i];
        const dion__px_note_t *n = dion__pxs_in(pc, b, h->from, h->slot);
        uint64_t *rout = dion__pxs_rout(pc, b, h->from, h->slot);
        if (rout[1]) continue;
        dion_status_t st = n->op == DION__PXN_SIG ? DION_SUCCESS : cs;
        if (st == DION_SUCCESS && n->has_sig) st = dion__pxs_signal(pc, h->from, n); /* the data is in */
        if (st != DION_SUCCESS) dion__pxs_failed(rout, st);
    }
    pc->nheld = 0;
}

/* A notice from rank s: its effect on this rank's memory. Copies are enqueued and signals held for the
 * batch's barrier; an atomic waits for the barrier first. rout gets {value, status}. */
static void dion__pxs_apply(dion__pxc_t *pc, const dion__px_box_t *b, int s, uint32_t slot)
{
    const dion__px_note_t *n = dion__pxs_in(pc, b, s, slot);
    uint64_t *rout = dion__pxs_rout(pc, b, s, slot);
    dion__pxr_t *r = NULL;
    dion_status_t st = DION_SUCCESS;
    int copy = 0;
    rout[0] = rout[1] = 0;
    pc->n_applied++;
    switch (n->op) {
    case DION__PXN_LAND:
    case DION__PXN_GET:
        st = dion__pxs_region(pc, s, n->win, 1, &r);
        if (st == DION_SUCCESS && (n->off > r->bytes || n->bytes > r->bytes - n->off))
            st = dion__error(
                DION_ERR_REMOTE_ACCESS,
                "proxy staging: %llu bytes at offset %llu of window %u on rank %d, which has %llu",
                (unsigned long long)n->bytes, (unsigned long long)n->off, r->id, pc->comm->rank,
                (unsigned long long)r->bytes);
        if (st == DION_SUCCESS && n->bytes && n->op == DION__PXN_LAND) { /* coalesced at the barrier */
            pc->lands[pc->nlands++] = (dion__px_range_t){r, n->off, n->off + n->bytes};
            copy = 1;
        } else if (st == DION_SUCCESS && n->bytes) { /* GET: after the lands before it */
            dion__pxs_lands(pc);
            st = dion__stage_copy_async(pc->stage, r->shadow + n->off, r->base + n->off, n->bytes,
                                        "copying a staged window into its host shadow");
            copy = st == DION_SUCCESS;
            pc->copies |= copy;
            pc->n_copies += (uint64_t)copy;
        }
        break;
    case DION__PXN_SIG:
        break;
    case DION__PXN_AMO:
        dion__pxs_barrier(pc, b); /* the word may have been written by an earlier notice */
        st = dion__pxs_region(pc, s, n->win, 1, &r);
        if (st != DION_SUCCESS) break;
        if (r->gpu) {
            st = dion__error(
                DION_ERR_UNSUPPORTED,
                "proxy staging: an atomic from rank %d on window %u of rank %d, whose memory is GPU "
                "memory the provider cannot register: the host cannot update it atomically; use a "
                "host window for atomics",
                s, n->win, pc->comm->rank);
            break;
        }
        if (n->off % 8 || n->off + 8 > r->bytes) {
            st = dion__error(DION_ERR_REMOTE_ACCESS,
                             "proxy staging: an atomic from rank %d at offset %llu of window %u on rank %d",
                             s, (unsigned long long)n->off, n->win, pc->comm->rank);
            break;
        }
        uint64_t *w = (uint64_t *)(r->base + n->off);
        if (n->amo == DION__ENGINE_AMO_CSWAP) {
            uint64_t expect = n->aux;
            __atomic_compare_exchange_n(w, &expect, n->value, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            rout[0] = expect;
        } else {
            rout[0] = __atomic_fetch_add(w, n->value, __ATOMIC_SEQ_CST);
        }
        return;
    default:
        st = dion__error(DION_ERR_INTERNAL, "proxy staging: unknown notice op %u from rank %d", n->op, s);
    }
    if (st != DION_SUCCESS) {
        dion__pxs_failed(rout, st);
        return;
    }
    if (copy || n->has_sig) {
        if (pc->nheld == DION__PXS_HELD) dion__pxs_barrier(pc, b);
        pc->held[pc->nheld++] = (dion__px_held_t){s, slot};
    }
}

/* Applies every notice that came from rank s (the caller waits for the batch); 1 when it applied any. */
static int dion__pxs_take(dion__pxc_t *pc, int s, const dion__px_box_t *b)
{
    uint64_t tail = __atomic_load_n(dion__px_word(pc, b->tail) + s, __ATOMIC_ACQUIRE);
    int did = 0;
    for (; pc->head[s] < tail; pc->head[s]++, did = 1)
        dion__pxs_apply(pc, b, s, (uint32_t)(pc->head[s] % pc->notes));
    return did;
}

/* Replies to the applied notices of rank s in order (GET data, AMO results, failures), then acknowledges them
 * with one ORDERED add, after the replies. Each notice takes at most one put: BUSY resumes at it. */
static int dion__pxs_answer(dion__pxc_t *pc, int s, const dion__px_box_t *b)
{
    int me = pc->comm->rank, did = 0;
    while (pc->replied[s] < pc->head[s]) {
        uint32_t slot = (uint32_t)(pc->replied[s] % pc->notes);
        const dion__px_note_t *n = dion__pxs_in(pc, b, s, slot);
        /* the reply's source stays untouched until the put went out: s reuses the slot only after the ack,
         * which follows the reply */
        uint64_t *rout = dion__pxs_rout(pc, b, s, slot);
        dion_status_t st = DION_SUCCESS;
        if (n->op == DION__PXN_GET && n->bytes && !rout[1]) { /* the data, from this rank's shadow */
            dion__pxr_t *r = dion__px_find(pc, n->win), *d = dion__px_find(pc, n->dst_win);
            if (!d || d->rkeys[s].mem.len + d->rkeys[s].shadow.len == 0) {
                rout[1] = DION_ERR_REMOTE_ACCESS;
                DION_LOG(DION_LOG_WARN, "proxy staging: a get from rank %d names its window %u, unknown here",
                         s, n->dst_win);
            } else {
                const dion__engine_rkey_t *to = d->rkeys[s].staged ? &d->rkeys[s].shadow : &d->rkeys[s].mem;
                st = pc->E->put(pc->e, s, r->smr, r->shadow + n->off, to, n->aux, n->bytes, 0,
                                DION__PX_INTERNAL);
            }
        }
        if (st == DION_SUCCESS && (n->op == DION__PXN_AMO || rout[1]))
            st = pc->E->put(pc->e, s, pc->box_mr, rout, &pc->box_rk[s],
                            b->res + ((size_t)me * pc->notes + slot) * 16, 16, 0, DION__PX_INTERNAL);
        if (st != DION_SUCCESS) break; /* BUSY (or broken: the poll reports it) */
        pc->replied[s]++;
        did = 1;
    }
    return did | dion__pxs_count(pc, s, b->ack + (size_t)me * 8, &pc->ackd[s], pc->replied[s]);
}

int dion__pxs_progress(dion__pxc_t *pc)
{
    if (!pc->stage_on) return 0;
    dion__px_box_t b = dion__px_box(pc->comm->nranks, pc->notes);
    int did = 0, me = pc->comm->rank, n = pc->comm->nranks;
    for (int r = 0; r < n; r++)
        if (r != me) did |= dion__pxs_flush(pc, r, &b);
    for (int r = 0; r < n; r++)
        if (r != me) did |= dion__pxs_take(pc, r, &b);
    dion__pxs_barrier(pc, &b); /* one wait for every copy of the batch, then its signals */
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        did |= dion__pxs_answer(pc, r, &b);
        did |= dion__pxs_acks(pc, r, &b);
    }
    return did;
}
