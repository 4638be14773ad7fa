/* Windows staged through pinned host shadows, for providers that cannot register GPU memory (no FI_HMEM), and
 * for every window under DION_PROXY_STAGING=always (the CPU-mode tests).
 *
 * A staged window has a shadow: host memory of the same size, registered with the engine; peers' data
 * transfers reach the shadow, never the window. The window's owner keeps the two in step with notices:
 * - put / put_signal into a staged window: the initiator's proxy writes the data into the shadow, then a
 *   notice into the owner's inbox, then adds 1 to the inbox's tail with an ORDERED atomic (after the data and
 *   the notice). The owner's proxy sees the tail move, copies the range from the shadow into the window
 *   (cudaMemcpyAsync on its own non-blocking stream, then waits for that copy), applies the signal, and
 *   acknowledges. So the signal never overtakes its data, and the put completes for the initiator (quiet)
 *   only once the data is in the window.
 * - a signal (SET / ADD) or a put_signal into an unstaged window, while notices to that peer are still
 *   unacknowledged, goes as a notice too: it is applied after them (release order).
 * - get from a staged window: a notice; the owner copies the range from the window into its shadow and puts
 *   it into the initiator's window (or the initiator's shadow, copied out locally on completion).
 * - fetch-add / compare-swap on a staged window: a notice; the owner applies it with a host atomic when the
 *   window is host memory. GPU memory cannot be updated atomically from the host: refused with a sentence.
 * - a local staged window as the source of a put is copied into its own shadow first; as the destination of a
 *   get, the data lands in the shadow and is copied into the window before the get completes.
 *
 * The inbox (one registered host block per rank), N = ranks, K = DION__PX_NOTES:
 *   tail[N]      notices rank s wrote here (s adds 1 per notice)
 *   ack[N]       notices of this rank that rank p applied (p adds 1 per notice)
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

#define K DION__PX_NOTES

typedef struct {
    size_t tail, ack, res, rout, in, out, total;
} dion__px_box_t;

static dion__px_box_t dion__px_box(int n)
{
    dion__px_box_t b;
    size_t N = (size_t)n;
    b.tail = 0;
    b.ack = 8 * N;
    b.res = 16 * N;
    b.rout = b.res + 16 * N * K;
    b.in = (b.rout + 16 * N * K + 63) & ~(size_t)63;
    b.out = b.in + sizeof(dion__px_note_t) * N * K;
    b.total = b.out + sizeof(dion__px_note_t) * N * K;
    return b;
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
    dion__px_box_t b = dion__px_box(n);
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
    pc->box_rk = calloc((size_t)n, sizeof *pc->box_rk);
    pc->sent = calloc((size_t)n, sizeof *pc->sent);
    pc->acked = calloc((size_t)n, sizeof *pc->acked);
    pc->head = calloc((size_t)n, sizeof *pc->head);
    pc->tstep = calloc((size_t)n, 1);
    pc->pend = calloc((size_t)n * K, sizeof *pc->pend);
    if (st == DION_SUCCESS &&
        (!pc->box_rk || !pc->sent || !pc->acked || !pc->head || !pc->tstep || !pc->pend))
        st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
    ag = dion__comm_agree(c, st, "opening the proxy's staging inbox");
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, &rk, sizeof rk, pc->box_rk);
    if (ag == DION_SUCCESS)
        DION_LOG(DION_LOG_INFO,
                 "proxy backend: staging %s through pinned host shadows (%s); inbox %zu bytes per rank",
                 pc->stage_always ? "every window" : "GPU windows",
                 pc->stage_always ? "DION_PROXY_STAGING=always" : "the provider cannot register GPU memory",
                 b.total);
    return ag;
}

void dion__pxs_comm_fini(dion__pxc_t *pc)
{
    if (pc->box_mr) pc->E->mem_dereg(pc->e, pc->box_mr);
    free(pc->box);
    if (pc->stage) dion__stage_destroy(pc->stage);
    free(pc->box_rk);
    free(pc->sent);
    free(pc->acked);
    free(pc->head);
    free(pc->tstep);
    free(pc->pend);
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

dion_status_t dion__pxs_send(dion__pxc_t *pc, dion__pxg_t *g, uint64_t pos, int peer,
                             const dion__px_note_t *note, int amo)
{
    dion__px_box_t b = dion__px_box(pc->comm->nranks);
    uint64_t nth = pc->sent[peer];
    int me = pc->comm->rank;
    uint32_t slot = (uint32_t)(nth % K);
    int resumed = g->partial == pos + 1 && (g->pstep & DION__PXS_NOTE);
    if (!resumed) {
        if (nth - pc->acked[peer] >= K) return DION__ENGINE_BUSY; /* its slot is still the peer's to read */
        dion__px_note_t *out = (dion__px_note_t *)(pc->box + b.out) + (size_t)peer * K + slot;
        *out = *note;
        uint64_t *res = dion__px_word(pc, b.res) + ((size_t)peer * K + slot) * 2;
        res[0] = res[1] = 0; /* the peer writes here only for results and failures */
        dion_status_t st =
            pc->E->put(pc->e, peer, pc->box_mr, out, &pc->box_rk[peer],
                       b.in + ((size_t)me * K + slot) * sizeof *out, sizeof *out, 0, DION__PX_INTERNAL);
        if (st != DION_SUCCESS) return st;
        g->partial = pos + 1;
        g->pstep |= DION__PXS_NOTE;
    }
    /* the tail moves only after the data and the notice are in the peer's memory */
    dion_status_t st =
        pc->E->atomic(pc->e, peer, DION__ENGINE_AMO_ADD, &pc->box_rk[peer], b.tail + (size_t)me * 8, 1, 0,
                      DION__ENGINE_F_ORDERED, DION__PX_INTERNAL);
    if (st != DION_SUCCESS) return st;
    dion__px_pend_t *p = &pc->pend[(size_t)peer * K + slot];
    p->gid = g->gid;
    p->pos = pos;
    p->amo = (uint32_t)amo;
    pc->sent[peer] = nth + 1;
    g->pstep &= ~(uint32_t)DION__PXS_NOTE;
    return DION_SUCCESS;
}

/* ---- the owner's side: applying a notice ---- */

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

/* Step 1 of a notice from rank s: its effect on this rank's memory. rout gets {value, status}; *reply: the
 * notice needs a put back (GET data, AMO result, or a failure). */
static void dion__pxs_apply(dion__pxc_t *pc, int s, const dion__px_note_t *n, uint64_t *rout, int *reply)
{
    dion__pxr_t *r = NULL;
    dion_status_t st = DION_SUCCESS;
    rout[0] = rout[1] = 0;
    *reply = 0;
    switch (n->op) {
    case DION__PXN_LAND:
        st = dion__pxs_region(pc, s, n->win, 1, &r);
        if (st == DION_SUCCESS) st = dion__pxs_sync(pc, r, n->off, n->bytes, 0);
        if (st == DION_SUCCESS && n->has_sig) st = dion__pxs_signal(pc, s, n); /* now that the data is in */
        break;
    case DION__PXN_SIG:
        st = dion__pxs_signal(pc, s, n);
        break;
    case DION__PXN_GET:
        st = dion__pxs_region(pc, s, n->win, 1, &r);
        if (st == DION_SUCCESS) st = dion__pxs_sync(pc, r, n->off, n->bytes, 1);
        if (st == DION_SUCCESS && n->bytes) *reply = 1;
        break;
    case DION__PXN_AMO:
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
        *reply = 1;
        break;
    default:
        st = dion__error(DION_ERR_INTERNAL, "proxy staging: unknown notice op %u from rank %d", n->op, s);
    }
    if (st != DION_SUCCESS) {
        DION_LOG(DION_LOG_WARN, "%s", dion_last_error());
        rout[1] = (uint64_t)st;
        *reply = 1;
    }
}

/* Works through the notices from rank s; returns 1 when it applied any. A step that meets BUSY is resumed at
 * the next call (tstep), so nothing is applied twice. */
static int dion__pxs_serve(dion__pxc_t *pc, int s, const dion__px_box_t *b)
{
    int me = pc->comm->rank, did = 0;
    uint64_t tail = __atomic_load_n(dion__px_word(pc, b->tail) + s, __ATOMIC_ACQUIRE);
    while (pc->head[s] < tail) {
        uint64_t nth = pc->head[s];
        uint32_t slot = (uint32_t)(nth % K);
        const dion__px_note_t *n = (const dion__px_note_t *)(pc->box + b->in) + (size_t)s * K + slot;
        /* the reply's source stays untouched until the put went out: s reuses the slot only after the ack,
         * which follows the reply */
        uint64_t *rout = dion__px_word(pc, b->rout) + ((size_t)s * K + slot) * 2;
        dion_status_t st = DION_SUCCESS;
        if (pc->tstep[s] == 0) {
            int reply = 0;
            dion__pxs_apply(pc, s, n, rout, &reply);
            pc->tstep[s] = reply ? 1 : 2;
            did = 1;
        }
        if (pc->tstep[s] == 1) {
            if (n->op == DION__PXN_GET && !rout[1]) { /* the data, from this rank's shadow */
                dion__pxr_t *r = dion__px_find(pc, n->win), *d = dion__px_find(pc, n->dst_win);
                if (!d || d->rkeys[s].mem.len + d->rkeys[s].shadow.len == 0) {
                    rout[1] = DION_ERR_REMOTE_ACCESS;
                    DION_LOG(DION_LOG_WARN,
                             "proxy staging: a get from rank %d names its window %u, unknown here", s,
                             n->dst_win);
                } else {
                    const dion__engine_rkey_t *to =
                        d->rkeys[s].staged ? &d->rkeys[s].shadow : &d->rkeys[s].mem;
                    st = pc->E->put(pc->e, s, r->smr, r->shadow + n->off, to, n->aux, n->bytes, 0,
                                    DION__PX_INTERNAL);
                }
            }
            if (st == DION_SUCCESS && (n->op != DION__PXN_GET || rout[1]))
                st = pc->E->put(pc->e, s, pc->box_mr, rout, &pc->box_rk[s],
                                b->res + ((size_t)me * K + slot) * 16, 16, 0, DION__PX_INTERNAL);
            if (st != DION_SUCCESS) break; /* BUSY (or broken: the poll reports it) */
            pc->tstep[s] = 2;
        }
        /* the acknowledgement comes after the reply in the initiator's memory */
        st = pc->E->atomic(pc->e, s, DION__ENGINE_AMO_ADD, &pc->box_rk[s], b->ack + (size_t)me * 8, 1, 0,
                           DION__ENGINE_F_ORDERED, DION__PX_INTERNAL);
        if (st != DION_SUCCESS) break;
        pc->tstep[s] = 0;
        pc->head[s] = nth + 1;
    }
    return did;
}

/* The initiator's side: acknowledgements from peer p complete what waited for them. */
static int dion__pxs_acks(dion__pxc_t *pc, int p, const dion__px_box_t *b)
{
    if (pc->acked[p] == pc->sent[p]) return 0;
    uint64_t a = __atomic_load_n(dion__px_word(pc, b->ack) + p, __ATOMIC_ACQUIRE);
    int did = 0;
    while (pc->acked[p] < a && pc->acked[p] < pc->sent[p]) {
        uint32_t slot = (uint32_t)(pc->acked[p] % K);
        dion__px_pend_t *e = &pc->pend[(size_t)p * K + slot];
        const uint64_t *res = dion__px_word(pc, b->res) + ((size_t)p * K + slot) * 2;
        dion__pxg_t *g = e->gid < DION__PX_GLUES ? pc->gtab[e->gid] : NULL;
        pc->acked[p]++;
        did = 1;
        if (!g) continue; /* its handle is gone */
        uint64_t mask = g->r->dev.mask;
        if (res[1] && !g->r->failed) {
            snprintf(g->why, sizeof g->why,
                     "proxy staging: rank %d could not apply an operation of rank %d (%s); its log says why",
                     p, pc->comm->rank, dion_status_string((dion_status_t)res[1]));
            dion__proxy_ring_fail(g->r, (dion_status_t)res[1], g->why);
        }
        if (e->amo) dion__proxy_cmd_result(&g->r->slots[e->pos & mask], res[0]);
        if (g->cnt[e->pos & mask]) g->cnt[e->pos & mask]--;
        if (g->inflight) g->inflight--;
        dion__px_advance(g);
    }
    return did;
}

int dion__pxs_progress(dion__pxc_t *pc)
{
    if (!pc->stage_on) return 0;
    dion__px_box_t b = dion__px_box(pc->comm->nranks);
    int did = 0;
    for (int r = 0; r < pc->comm->nranks; r++) {
        if (r == pc->comm->rank) continue;
        did |= dion__pxs_serve(pc, r, &b);
        did |= dion__pxs_acks(pc, r, &b);
    }
    return did;
}
