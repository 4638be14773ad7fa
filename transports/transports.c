/* The list of backends, the per-peer choice among them, and collective region registration over them. The
 * only file of the library that names backends. */
#include <stdlib.h>
#include <string.h>

#include "transports/transport.h"

const dion__tl_ops_t *const dion__tl_all[] = {&dion__tl_p2p, &dion__tl_gdaki, &dion__tl_proxy, NULL};

/* Per-comm choice: the backend index of each peer, and which backends any rank uses. */
struct dion__tl_comm {
    uint8_t *peer_tl;          /* [nranks] index into dion__tl_all */
    uint32_t used_mask;        /* backends some rank uses with some peer: each runs its side exchange */
    uint32_t mine_mask;        /* backends this rank uses with some peer (p2p always: itself) */
    uint32_t init_mask;        /* backends whose comm_init succeeded */
    void *state[DION__TL_MAX]; /* each backend's comm_init state */
};

static int dion__tl_count(void)
{
    int n = 0;
    while (dion__tl_all[n]) n++;
    return n;
}

/* Backend i's name as the logs show it (the proxy adds its engine: "proxy/verbs"). */
static const char *dion__tl_label(const struct dion__tl_comm *t, int i)
{
    const dion__tl_ops_t *o = dion__tl_all[i];
    const char *l = o->label && (t->init_mask & (1u << i)) ? o->label(t->state[i]) : NULL;
    return l ? l : o->name;
}

/* The backend DION_TRANSPORT forces, or -1 for auto. */
static dion_status_t dion__tl_forced(int *out)
{
    *out = -1;
    const char *v = dion__cfg_str("DION_TRANSPORT");
    if (!v || !strcmp(v, "auto")) return DION_SUCCESS;
    /* "proxy/verbs": the backend proxy, which reads the part after the slash itself (its engine) */
    for (int i = 0; dion__tl_all[i]; i++)
        if (!strcmp(v, dion__tl_all[i]->name) ||
            (!strncmp(v, dion__tl_all[i]->name, strlen(dion__tl_all[i]->name)) &&
             v[strlen(dion__tl_all[i]->name)] == '/')) {
            *out = i;
            return DION_SUCCESS;
        }
    return dion__error(DION_ERR_UNSUPPORTED,
                       "DION_TRANSPORT=%s names no backend of this build; dion-info lists those built", v);
}

/* This rank's preferred backend for every peer, or a sentence saying why a peer is out of reach. */
static dion_status_t dion__tl_choose_row(dion_comm_t c, int forced, uint8_t *row)
{
    int n = dion__tl_count();
    char why[DION__TL_MAX][DION__TL_WHY];
    int usable[DION__TL_MAX];
    for (int i = 0; i < n; i++) {
        why[i][0] = 0;
        usable[i] = -1; /* asked when first needed: probing a backend may load libraries */
    }
    for (int p = 0; p < c->nranks; p++) {
        row[p] = 0xff;
        if (p == c->rank) { /* a rank reaches itself through the first backend, p2p */
            row[p] = 0;
            continue;
        }
        char reasons[DION__TL_MAX * (DION__TL_WHY + 16)] = "";
        size_t len = 0;
        for (int i = 0; i < n && row[p] == 0xff; i++) {
            if (forced >= 0 && i != forced) continue;
            char pwhy[DION__TL_WHY] = "";
            if (usable[i] < 0) usable[i] = dion__tl_all[i]->usable(c, why[i], sizeof why[i]);
            if (usable[i] && dion__tl_all[i]->reachable(c, p, pwhy, sizeof pwhy)) {
                row[p] = (uint8_t)i;
                break;
            }
            int k = snprintf(reasons + len, sizeof reasons - len, "%s%s: %s", len ? "; " : "",
                             dion__tl_all[i]->name, usable[i] ? pwhy : why[i]);
            if (k > 0 && (size_t)k < sizeof reasons - len) len += (size_t)k;
        }
        if (row[p] == 0xff)
            return dion__error(
                DION_ERR_UNSUPPORTED,
                "rank %d cannot reach rank %d (host %s) with %s: %s. dion-info lists what each "
                "backend needs",
                c->rank, p, c->info[p].host,
                forced >= 0 ? "the backend DION_TRANSPORT forces" : "any backend of this build", reasons);
    }
    return DION_SUCCESS;
}

dion_status_t dion__tl_select(dion_comm_t c)
{
    if (c->tl) return DION_SUCCESS;
    int n = c->nranks, forced = -1;
    struct dion__tl_comm *t = calloc(1, sizeof *t);
    uint8_t *rows = malloc((size_t)n * (size_t)n);
    dion_status_t st = t && rows ? DION_SUCCESS : dion__error(DION_ERR_NO_MEMORY, "out of memory");
    if (t) t->peer_tl = calloc((size_t)n, 1);
    if (st == DION_SUCCESS && !t->peer_tl) st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
    if (st == DION_SUCCESS) st = dion__tl_forced(&forced);
    if (st == DION_SUCCESS) st = dion__tl_choose_row(c, forced, t->peer_tl);
    dion_status_t ag = dion__comm_agree(c, st, "choosing a backend for every peer");
    /* Both ends of a pair must use one backend: where their choices differ, both take the later one in the
     * priority list (the one the side that chose it could not do better than). A rank that cannot run that
     * backend fails when it starts (comm_init below), on every rank and naming that rank. The rows cost
     * nranks^2 bytes once per comm (16 MiB at 4096 ranks). */
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, t->peer_tl, (size_t)n, rows);
    if (ag == DION_SUCCESS) {
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                uint8_t x = rows[(size_t)a * n + b], y = rows[(size_t)b * n + a];
                uint8_t use = x > y ? x : y;
                t->used_mask |= 1u << use;
                if (a == c->rank) t->peer_tl[b] = use;
            }
        t->mine_mask = 1u;
        for (int p = 0; p < n; p++) t->mine_mask |= 1u << t->peer_tl[p];
    }
    free(rows);
    /* Backends with per-comm state start on every rank as soon as some rank uses them (used_mask is the
     * same everywhere, so the collective steps inside match). They may ask dion__tl_of which peers they
     * serve. */
    if (ag == DION_SUCCESS) c->tl = t;
    for (int i = 0; ag == DION_SUCCESS && dion__tl_all[i]; i++) {
        const dion__tl_ops_t *o = dion__tl_all[i];
        if (!(t->used_mask & (1u << i)) || !o->comm_init) continue;
        ag = o->comm_init(c, &t->state[i]);
        if (ag == DION_SUCCESS) t->init_mask |= 1u << i;
    }
    if (ag == DION_SUCCESS) {
        /* one line per peer at info for small jobs; beyond that a count per backend, the lines at debug.
         * After comm_init: a backend's label may name what it chose there (the proxy's engine). */
        int per_peer = n <= 64 ? DION_LOG_INFO : DION_LOG_DEBUG;
        int count[DION__TL_MAX] = {0};
        for (int p = 0; p < n; p++) {
            if (p == c->rank) continue;
            count[t->peer_tl[p]]++;
            DION_LOG(per_peer, "rank %d reaches rank %d (host %s) through %s", c->rank, p, c->info[p].host,
                     dion__tl_label(t, t->peer_tl[p]));
        }
        for (int i = 0; per_peer != DION_LOG_INFO && dion__tl_all[i]; i++)
            if (count[i])
                DION_LOG(DION_LOG_INFO, "rank %d reaches %d ranks through %s", c->rank, count[i],
                         dion__tl_label(t, i));
    }
    if (ag != DION_SUCCESS) {
        c->tl = NULL;
        for (int i = 0; t && dion__tl_all[i]; i++)
            if (t->init_mask & (1u << i)) dion__tl_all[i]->comm_fini(c, t->state[i]);
        if (t) free(t->peer_tl);
        free(t);
        return ag;
    }
    c->tl = t;
    return DION_SUCCESS;
}

int dion__tl_uses(dion_comm_t c, const dion__tl_ops_t *o, int used_by_any)
{
    if (!c->tl) return 0;
    for (int i = 0; dion__tl_all[i]; i++)
        if (dion__tl_all[i] == o) return ((used_by_any ? c->tl->used_mask : c->tl->mine_mask) >> i) & 1u;
    return 0;
}

void *dion__tl_state(dion_comm_t c, const dion__tl_ops_t *o)
{
    for (int i = 0; c->tl && dion__tl_all[i]; i++)
        if (dion__tl_all[i] == o) return c->tl->state[i];
    return NULL;
}

int dion__tl_signals_on_host(dion_comm_t c)
{
    for (int i = 0; c->tl && dion__tl_all[i]; i++) {
        const dion__tl_ops_t *o = dion__tl_all[i];
        if ((c->tl->mine_mask & (1u << i)) && o->signals_on_host && o->signals_on_host(c, c->tl->state[i]))
            return 1;
    }
    return 0;
}

const dion__tl_ops_t *dion__tl_of(dion_comm_t c, int peer)
{
    return dion__tl_all[c->tl->peer_tl[peer]];
}

void dion__tl_fini(dion_comm_t c)
{
    if (!c->tl) return;
    for (int i = 0; dion__tl_all[i]; i++)
        if (c->tl->init_mask & (1u << i)) dion__tl_all[i]->comm_fini(c, c->tl->state[i]);
    free(c->tl->peer_tl);
    free(c->tl);
    c->tl = NULL;
}

/* ---- regions ---- */

/* What every rank says about its region, ahead of the backends' descriptors. */
typedef struct {
    uint64_t size;
    uint32_t on_host;
    uint32_t pad;
} dion__tl_head_t;

struct dion__tl_region {
    dion_comm_t comm;
    dion__tl_view_t *views; /* [nranks] */
    void **imps;            /* [nranks] the serving backend's import state, NULL when none */
    void *tl[DION__TL_MAX]; /* each backend's region_done object */
};

/* Layout of one rank's record in the allgather: head, then each used backend's descriptor. */
static size_t dion__tl_record_size(uint32_t used, size_t *offsets)
{
    size_t off = sizeof(dion__tl_head_t);
    for (int i = 0; dion__tl_all[i]; i++) {
        offsets[i] = off;
        if (used & (1u << i)) off += (dion__tl_all[i]->desc_size + 7) & ~(size_t)7;
    }
    return off;
}

dion_status_t dion__tl_region_create(dion_comm_t c, void *base, size_t bytes, const char *what,
                                     dion__tl_check_fn check, void *check_arg, dion__tl_region_t **out)
{
    *out = NULL;
    dion_status_t st = dion__tl_select(c);
    if (st != DION_SUCCESS) return st;
    int n = c->nranks, nb = dion__tl_count();
    uint32_t used = c->tl->used_mask;
    size_t offsets[DION__TL_MAX];
    size_t rec = dion__tl_record_size(used, offsets);
    /* which backends this rank exports through: those that serve it towards some peer */
    uint32_t mine = 1u; /* p2p describes the region to this rank itself (host or GPU memory) */
    for (int p = 0; p < n; p++) mine |= 1u << c->tl->peer_tl[p];

    dion__tl_region_t *r = calloc(1, sizeof *r);
    char *recs = calloc((size_t)n, rec);
    char *me = calloc(1, rec);
    void *exps[DION__TL_MAX] = {0};
    void *shared[DION__TL_MAX] = {0};
    if (r) {
        r->comm = c;
        r->views = calloc((size_t)n, sizeof *r->views);
        r->imps = calloc((size_t)n, sizeof *r->imps);
    }
    st = r && recs && me && r->views && r->imps
             ? DION_SUCCESS
             : dion__error(DION_ERR_NO_MEMORY, "out of memory registering %s", what);
    for (int i = 0; i < nb && st == DION_SUCCESS; i++) {
        if (!(used & (1u << i))) continue;
        const dion__tl_ops_t *o = dion__tl_all[i];
        exps[i] = calloc(1, o->exp_size ? o->exp_size : 1);
        shared[i] = o->share_size ? calloc((size_t)n, o->share_size) : NULL;
        if (!exps[i] || (o->share_size && !shared[i]))
            st = dion__error(DION_ERR_NO_MEMORY, "out of memory registering %s", what);
    }

    /* 1. describe this rank's part through each backend it uses; 2. learn everybody's; 3. side exchanges;
     * 4. import. Each step ends in an agreement, so a failure on one rank fails the call on all, naming it.
     */
    dion__tl_head_t *head = (dion__tl_head_t *)me;
    if (st == DION_SUCCESS) head->size = bytes;
    for (int i = 0; i < nb && st == DION_SUCCESS; i++)
        if ((used & mine & (1u << i)) && bytes)
            st = dion__tl_all[i]->mem_export(c, base, bytes, me + offsets[i], exps[i]);
    if (st == DION_SUCCESS && bytes) head->on_host = (uint32_t)dion__tl_all[0]->desc_on_host(me + offsets[0]);
    char step[128];
    snprintf(step, sizeof step, "describing %s", what);
    dion_status_t ag = dion__comm_agree(c, st, step);
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, me, rec, recs);
    for (int p = 0; ag == DION_SUCCESS && p < n; p++) {
        const dion__tl_head_t *h = (const dion__tl_head_t *)(recs + (size_t)p * rec);
        r->views[p].size = h->size;
        r->views[p].on_host = (int)h->on_host;
    }
    if (ag == DION_SUCCESS && check) ag = check(c, r->views, check_arg);
    for (int i = 0; i < nb && ag == DION_SUCCESS; i++) {
        if (!(used & (1u << i)) || !dion__tl_all[i]->mem_share) continue;
        /* the backend reads descriptors as an array: gather its column */
        const dion__tl_ops_t *o = dion__tl_all[i];
        char *col = calloc((size_t)n, o->desc_size ? o->desc_size : 1);
        if (!col) {
            ag = dion__error(DION_ERR_NO_MEMORY, "out of memory");
            break;
        }
        for (int p = 0; p < n; p++)
            memcpy(col + (size_t)p * o->desc_size, recs + (size_t)p * rec + offsets[i], o->desc_size);
        ag = o->mem_share(c, col, exps[i], shared[i]);
        free(col);
    }
    if (ag == DION_SUCCESS) {
        st = DION_SUCCESS;
        for (int p = 0; p < n; p++) {
            const dion__tl_head_t *h = (const dion__tl_head_t *)(recs + (size_t)p * rec);
            r->views[p].size = h->size;
            r->views[p].on_host = (int)h->on_host;
            if (p == c->rank) {
                r->views[p].base = base;
                continue;
            }
            if (st != DION_SUCCESS || !h->size) continue;
            int i = c->tl->peer_tl[p];
            const dion__tl_ops_t *o = dion__tl_all[i];
            r->imps[p] = calloc(1, o->imp_size ? o->imp_size : 1);
            if (!r->imps[p]) {
                st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
                continue;
            }
            st = o->mem_import(c, p, recs + (size_t)p * rec + offsets[i],
                               o->share_size ? (char *)shared[i] + (size_t)p * o->share_size : NULL,
                               r->imps[p], &r->views[p]);
            r->views[p].size = h->size;
            r->views[p].on_host = (int)h->on_host;
        }
        /* backends that keep their own view of the region (the proxy resolves window ids) */
        for (int i = 0; i < nb && st == DION_SUCCESS; i++) {
            const dion__tl_ops_t *o = dion__tl_all[i];
            if (!(mine & (1u << i)) || !o->region_done || !(c->tl->init_mask & (1u << i))) continue;
            void **imps = calloc((size_t)n, sizeof *imps);
            if (!imps) {
                st = dion__error(DION_ERR_NO_MEMORY, "out of memory");
                break;
            }
            for (int p = 0; p < n; p++)
                if (p != c->rank && c->tl->peer_tl[p] == i) imps[p] = r->imps[p];
            st = o->region_done(c, c->tl->state[i], exps[i], imps, &r->tl[i]);
            free(imps);
        }
        snprintf(step, sizeof step, "mapping %s", what);
        ag = dion__comm_agree(c, st, step);
    }
    /* the exports' handles (file descriptors) are only needed until the peers have imported */
    for (int i = 0; i < nb; i++) {
        const dion__tl_ops_t *o = dion__tl_all[i];
        for (int p = 0; shared[i] && o->share_release && p < n; p++)
            o->share_release((char *)shared[i] + (size_t)p * o->share_size);
        if (exps[i]) o->mem_unexport(exps[i]);
        free(exps[i]);
        free(shared[i]);
    }
    free(recs);
    free(me);
    if (ag != DION_SUCCESS) {
        dion__tl_region_destroy(r);
        return ag;
    }
    *out = r;
    return DION_SUCCESS;
}

const dion__tl_view_t *dion__tl_region_view(const dion__tl_region_t *r, int peer)
{
    return &r->views[peer];
}

void dion__tl_region_name(dion__tl_region_t *r, uint32_t id)
{
    for (int i = 0; r && dion__tl_all[i]; i++)
        if (r->tl[i] && dion__tl_all[i]->region_named)
            dion__tl_all[i]->region_named(r->comm->tl->state[i], r->tl[i], id);
}

dion_status_t dion__tl_dev_init(dion_comm_t c, const dion__tl_region_t *signals, dion_dev_t *dev, int cpu,
                                void **states)
{
    dion_status_t st = DION_SUCCESS;
    for (int i = 0; dion__tl_all[i] && st == DION_SUCCESS; i++) {
        const dion__tl_ops_t *o = dion__tl_all[i];
        states[i] = NULL;
        uint32_t runs = c->tl->mine_mask | (o->dev_collective ? c->tl->used_mask : 0u);
        if (!(runs & (1u << i)) || !o->dev_init || !(c->tl->init_mask & (1u << i))) continue;
        st = o->dev_init(c, c->tl->state[i], signals ? signals->tl[i] : NULL, dev, cpu, &states[i]);
        if (st != DION_SUCCESS) {
            states[i] = NULL;
            dion__tl_dev_fini(c, states);
        }
    }
    return st;
}

int dion__tl_dev_why(dion_comm_t c, void **states, uint32_t ctx, char *out, size_t cap)
{
    for (int i = 0; c->tl && dion__tl_all[i]; i++)
        if (states[i] && dion__tl_all[i]->dev_why && dion__tl_all[i]->dev_why(states[i], ctx, out, cap))
            return 1;
    return 0;
}

void dion__tl_dev_fini(dion_comm_t c, void **states)
{
    for (int i = 0; c->tl && dion__tl_all[i]; i++)
        if (states[i]) {
            dion__tl_all[i]->dev_fini(c, c->tl->state[i], states[i]);
            states[i] = NULL;
        }
}

void dion__tl_region_destroy(dion__tl_region_t *r)
{
    if (!r) return;
    for (int i = 0; dion__tl_all[i]; i++)
        if (r->tl[i]) dion__tl_all[i]->region_forget(r->comm->tl->state[i], r->tl[i]);
    for (int p = 0; r->imps && p < r->comm->nranks; p++)
        if (r->imps[p]) {
            dion__tl_of(r->comm, p)->mem_release(r->imps[p]);
            free(r->imps[p]);
        }
    free(r->imps);
    free(r->views);
    free(r);
}
