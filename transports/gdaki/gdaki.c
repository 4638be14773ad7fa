/* The gdaki backend behind the transport seam: device code posts mlx5 work requests to one RC QP per
 * (context, peer) and polls its collapsed CQ (device/gdaki.cuh); this host half picks the NIC (nic.h: a
 * ConnectX through DEVX, or the softnic model when DION_GDAKI_NIC=softnic), registers every region through
 * it, keeps the key table that device code reads (window id -> each rank's address and key), creates and
 * connects the QPs of each device handle through the bootstrap, and fills dev->gdaki. docs/gdaki.md. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "src/cuda.h"
#include "transports/gdaki/nic.h"
#include "transports/gdaki/qp_mem.h"
#if defined(DION_HAVE_GDAKI_MLX5)
#include "transports/gdaki/mlx5_nic.h"
#endif
#include "transports/transport.h"

/* SQ of each QP (DION_GDAKI_QP_DEPTH): a warp's group (32 lanes of at most 4 WQEBBs) must fit in 3/4 of it
 * on the GPU, or its leader would wait for slots its own group holds */
#define DION__GD_WQEBBS     1024u
#define DION__GD_WQEBBS_GPU 256u

/* NICs built in, in the order auto tries them (auto never picks the model). */
static const dion__gdaki_nic_ops_t *const dion__gdaki_nics[] = {&dion__gdaki_softnic,
#if defined(DION_HAVE_GDAKI_MLX5)
                                                                &dion__gdaki_mlx5,
#endif
                                                                NULL};

typedef struct dion__gdr {
    struct dion__gdr *next;
    dion__gdaki_mr_t *mr;
    uint32_t lkey;
    uint64_t laddr;
    uint32_t id;
    int named;
    dion__gdaki_rdesc_t *peers; /* [nranks]; bytes 0 where the peer is not served by gdaki */
} dion__gdr_t;

typedef struct {
    dion_comm_t comm;
    const dion__gdaki_nic_ops_t *N;
    dion__gdaki_nic_t *nic;
    pthread_mutex_t mu; /* regions and the key table */
    dion__gdr_t *regions;
    dion_gdaki_key_t *keys; /* [DION_GDAKI_KEY_ROWS][nranks], host view */
    dion_gdaki_key_t *keys_dev;
    int keys_pinned;
} dion__gdc_t;

typedef struct {
    dion__gdc_t *gc;
    dion__gdaki_mr_t *mr;
    uint32_t lkey;
    uint64_t laddr;
} dion__gd_exp_t;

/* One device handle's part. */
typedef struct {
    dion__gdc_t *gc;
    uint32_t nctx;
    int cpu;
    dion__gdaki_qp_t **qps; /* [nctx][nranks] */
    char *states;   /* [nctx][nranks] dion_gdaki_qp_state_t, then [nctx][nranks][depth] marks, then as many
                       pend words: device memory, host in CPU mode */
    uint32_t depth; /* WQEBBs per QP */
    char *scratch_host, *scratch_dev;
    dion__gdaki_mr_t *scratch_mr;
    dion_gdaki_qp_dev_t *qdev; /* host copy of the QP table */
    dion_gdaki_key_t *sig;     /* host copy of the signal-table keys */
    dion_gdaki_dev_t gdev;     /* host copy */
    void *d_qdev, *d_sig, *d_gdev;
} dion__gdd_t;

/* ---- choosing the NIC ---- */

static const dion__gdaki_nic_ops_t *dion__gd_find(const char *name)
{
    for (int i = 0; dion__gdaki_nics[i]; i++)
        if (!strcmp(dion__gdaki_nics[i]->name, name)) return dion__gdaki_nics[i];
    return NULL;
}

static pthread_once_t dion__gd_once = PTHREAD_ONCE_INIT;
static const dion__gdaki_nic_ops_t *dion__gd_nic;
static char dion__gd_why[DION__TL_WHY];

static void dion__gd_probe(void)
{
    int which = 0; /* auto, mlx5, softnic */
    if (dion__cfg_enum("DION_GDAKI_NIC", &which) != DION_SUCCESS) {
        snprintf(dion__gd_why, sizeof dion__gd_why, "%s", dion_last_error());
        dion__error_clear();
        return;
    }
    const dion__gdaki_nic_ops_t *n = dion__gd_find(which == 2 ? "softnic" : "mlx5");
    char why[DION__TL_WHY] = "";
    if (!n)
        snprintf(
            dion__gd_why, sizeof dion__gd_why,
            "this build has no ConnectX (mlx5 DEVX) NIC half (rdma-core's infiniband/mlx5dv.h and verbs.h "
            "were absent at build time); DION_GDAKI_NIC=softnic runs gdaki over the NIC model (tests only)");
    else if (!n->usable(why, sizeof why))
        snprintf(dion__gd_why, sizeof dion__gd_why, "NIC %s: %s", n->name, why);
    else
        dion__gd_nic = n;
    dion__error_clear();
}

static int dion__gd_usable(dion_comm_t c, char *why, size_t cap)
{
    (void)c;
    pthread_once(&dion__gd_once, dion__gd_probe);
    if (!dion__gd_nic) snprintf(why, cap, "%s", dion__gd_why);
    return dion__gd_nic != NULL;
}

static int dion__gd_reach(dion_comm_t c, int peer, char *why, size_t cap)
{
    (void)c, (void)peer, (void)why, (void)cap;
    return 1; /* an RC QP reaches any rank whose connection data the bootstrap brings */
}

static uint32_t dion__gd_scope(dion_comm_t c, int peer, int cpu)
{
    (void)c, (void)peer, (void)cpu;
    return DION_SCOPE_SYS; /* the NIC writes from outside the GPU */
}

/* ---- per comm ---- */

static void dion__gd_comm_fini(dion_comm_t c, void *state)
{
    (void)c;
    dion__gdc_t *gc = state;
    if (!gc) return;
    while (gc->regions) { /* windows the user left: their registrations go before the NIC */
        dion__gdr_t *r = gc->regions;
        gc->regions = r->next;
        if (r->mr) gc->N->mr_dereg(gc->nic, r->mr);
        free(r->peers);
        free(r);
    }
    if (gc->nic) gc->N->close(gc->nic);
    if (gc->keys_pinned)
        cudaFreeHost(gc->keys);
    else
        free(gc->keys);
    pthread_mutex_destroy(&gc->mu);
    free(gc);
}

static dion_status_t dion__gd_comm_init(dion_comm_t c, void **state)
{
    *state = NULL;
    dion__gdc_t *gc = calloc(1, sizeof *gc);
    if (!gc) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&gc->mu, NULL);
    gc->comm = c;
    char why[DION__TL_WHY] = "";
    dion_status_t st = DION_SUCCESS;
    if (!dion__gd_usable(c, why, sizeof why))
        st = dion__error(DION_ERR_UNSUPPORTED, "gdaki cannot run on rank %d: %s", c->rank, why);
    gc->N = dion__gd_nic;
    /* the key table: device code reads it, CPU threads in CPU mode and GPU threads over PCIe otherwise */
    size_t kb = sizeof(dion_gdaki_key_t) * DION_GDAKI_KEY_ROWS * (size_t)c->nranks;
    if (st == DION_SUCCESS && c->cuda_device >= 0 && dion__cuda_device_count() > 0) {
        st = dion__cuda_check(
            cudaHostAlloc((void **)&gc->keys, kb, cudaHostAllocMapped | cudaHostAllocPortable),
            "cudaHostAlloc for gdaki's key table");
        if (st == DION_SUCCESS) {
            gc->keys_pinned = 1;
            memset(gc->keys, 0, kb);
            st = dion__cuda_check(cudaHostGetDevicePointer((void **)&gc->keys_dev, gc->keys, 0),
                                  "cudaHostGetDevicePointer for gdaki's key table");
        }
    } else if (st == DION_SUCCESS) {
        gc->keys = calloc(1, kb);
        gc->keys_dev = gc->keys;
        if (!gc->keys) st = dion__error(DION_ERR_NO_MEMORY, "out of memory for gdaki's key table");
    }
    dion_status_t ag = dion__comm_agree(c, st, "starting the gdaki backend");
    if (ag == DION_SUCCESS) ag = gc->N->open(c, &gc->nic);
    if (ag != DION_SUCCESS) {
        gc->nic = NULL;
        dion__gd_comm_fini(c, gc);
        return ag;
    }
    DION_LOG(DION_LOG_INFO, "gdaki backend on rank %d: NIC %s", c->rank, gc->N->name);
    *state = gc;
    return DION_SUCCESS;
}

/* ---- regions ---- */

static int dion__gd_is_host(dion_comm_t c, void *base)
{
    if (c->cuda_device < 0 || dion__cuda_device_count() <= 0) return 1;
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    int host = !(cudaPointerGetAttributes(&a, base) == cudaSuccess && a.type == cudaMemoryTypeDevice);
    cudaGetLastError();
    return host;
}

static dion_status_t dion__gd_export(dion_comm_t c, void *base, size_t bytes, void *desc, void *exp)
{
    dion__gdc_t *gc = dion__tl_state(c, &dion__tl_gdaki);
    dion__gd_exp_t *x = exp;
    memset(desc, 0, sizeof(dion__gdaki_rdesc_t));
    if (!gc) return dion__error(DION_ERR_INTERNAL, "gdaki backend: no NIC for this comm");
    dion_status_t st = gc->N->mr_reg(gc->nic, base, bytes, dion__gd_is_host(c, base), &x->mr, &x->lkey,
                                     &x->laddr, (dion__gdaki_rdesc_t *)desc);
    if (st == DION_SUCCESS) x->gc = gc;
    return st;
}

static dion_status_t dion__gd_import(dion_comm_t c, int peer, const void *desc, void *shared, void *imp,
                                     dion__tl_view_t *view)
{
    (void)c, (void)peer, (void)shared;
    memcpy(imp, desc, sizeof(dion__gdaki_rdesc_t));
    view->base = NULL; /* reached by work requests, never by loads and stores */
    return DION_SUCCESS;
}

static void dion__gd_release(void *imp)
{
    (void)imp;
}

static void dion__gd_unexport(void *exp)
{
    dion__gd_exp_t *x = exp;
    if (x->mr) x->gc->N->mr_dereg(x->gc->nic, x->mr);
    x->mr = NULL;
}

static int dion__gd_on_host(const void *desc)
{
    return (((const dion__gdaki_rdesc_t *)desc)->flags & DION__GDAKI_MR_HOST) != 0;
}

static dion_status_t dion__gd_region_done(dion_comm_t c, void *state, void *exp, void *const *imps,
                                          void **out)
{
    dion__gdc_t *gc = state;
    dion__gd_exp_t *x = exp;
    dion__gdr_t *r = calloc(1, sizeof *r);
    if (r) r->peers = calloc((size_t)c->nranks, sizeof *r->peers);
    if (!r || !r->peers) {
        if (r) free(r);
        return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    }
    r->mr = x->mr;
    r->lkey = x->lkey;
    r->laddr = x->laddr;
    x->mr = NULL;
    dion_status_t st = DION_SUCCESS;
    for (int p = 0; p < c->nranks && st == DION_SUCCESS; p++) {
        if (!imps[p]) continue;
        memcpy(&r->peers[p], imps[p], sizeof r->peers[p]);
        if (gc->N->mr_import) st = gc->N->mr_import(gc->nic, p, &r->peers[p]);
        if (st != DION_SUCCESS) r->peers[p].bytes = 0;
    }
    pthread_mutex_lock(&gc->mu);
    r->next = gc->regions;
    gc->regions = r;
    pthread_mutex_unlock(&gc->mu);
    *out = r;
    return st;
}

/* Fills (or clears) the key table row of region r. */
static void dion__gd_row(dion__gdc_t *gc, dion__gdr_t *r, int set)
{
    int n = gc->comm->nranks, me = gc->comm->rank;
    dion_gdaki_key_t *row = gc->keys + (size_t)(r->id & (DION_GDAKI_KEY_ROWS - 1u)) * (size_t)n;
    if (!set) {
        if (row[me].tag == r->id + 1u) memset(row, 0, sizeof *row * (size_t)n);
        return;
    }
    if (row[me].tag && row[me].tag != r->id + 1u)
        DION_LOG(DION_LOG_WARN,
                 "gdaki: window %u takes the key-table row of window %u, which is still alive: more than %u "
                 "windows at once; work requests on window %u now fail with an error record",
                 r->id, row[me].tag - 1u, DION_GDAKI_KEY_ROWS, row[me].tag - 1u);
    for (int p = 0; p < n; p++) {
        dion_gdaki_key_t k = {0, 0, 0};
        if (p == me) {
            k.addr = r->laddr, k.key = r->lkey, k.tag = r->id + 1u;
        } else if (r->peers[p].bytes) {
            k.addr = r->peers[p].addr, k.key = r->peers[p].rkey, k.tag = r->id + 1u;
        }
        row[p] = k;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void dion__gd_region_named(void *state, void *region, uint32_t id)
{
    dion__gdc_t *gc = state;
    dion__gdr_t *r = region;
    pthread_mutex_lock(&gc->mu);
    r->id = id;
    r->named = 1;
    dion__gd_row(gc, r, 1);
    pthread_mutex_unlock(&gc->mu);
}

static void dion__gd_region_forget(void *state, void *region)
{
    dion__gdc_t *gc = state;
    dion__gdr_t *r = region;
    pthread_mutex_lock(&gc->mu);
    if (r->named) dion__gd_row(gc, r, 0);
    dion__gdr_t **pp = &gc->regions;
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    pthread_mutex_unlock(&gc->mu);
    for (int p = 0; p < gc->comm->nranks; p++)
        if (r->peers[p].bytes && gc->N->mr_forget) gc->N->mr_forget(gc->nic, p, &r->peers[p]);
    if (r->mr) gc->N->mr_dereg(gc->nic, r->mr);
    free(r->peers);
    free(r);
}

/* ---- device handles ---- */

static void dion__gd_dev_free(dion__gdd_t *d)
{
    dion__gdc_t *gc = d->gc;
    int n = gc->comm->nranks;
    for (size_t i = 0; d->qps && i < (size_t)d->nctx * (size_t)n; i++)
        if (d->qps[i]) gc->N->qp_destroy(gc->nic, d->qps[i]);
    if (d->scratch_mr) gc->N->mr_dereg(gc->nic, d->scratch_mr);
    if (d->cpu) {
        free(d->states);
        free(d->scratch_host);
    } else {
        if (d->states) cudaFree(d->states);
        if (d->scratch_host) cudaFreeHost(d->scratch_host);
        if (d->d_qdev) cudaFree(d->d_qdev);
        if (d->d_sig) cudaFree(d->d_sig);
        if (d->d_gdev) cudaFree(d->d_gdev);
    }
    free(d->qps);
    free(d->qdev);
    free(d->sig);
    free(d);
}

static dion_status_t dion__gd_dev_copy(void **dst, const void *src, size_t bytes)
{
    dion_status_t st = dion__cuda_check(cudaMalloc(dst, bytes), "cudaMalloc for gdaki's device tables");
    if (st == DION_SUCCESS)
        st = dion__cuda_check(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice),
                              "copying gdaki's device tables");
    return st;
}

/* Collective over every rank of a comm in which some rank uses gdaki (dev_collective): QPs for the peers this
 * rank serves through gdaki, their connection data exchanged by allgather, then connected. */
static dion_status_t dion__gd_dev_init(dion_comm_t c, void *state, void *signals, dion_dev_t *dev, int cpu,
                                       void **out)
{
    dion__gdc_t *gc = state;
    dion__gdr_t *sigr = signals;
    int n = c->nranks, me = c->rank;
    uint32_t nctx = dev->num_contexts;
    size_t nq = (size_t)nctx * (size_t)n;
    dion__gdd_t *d = calloc(1, sizeof *d);
    uint8_t *mine = calloc(nq, DION__GDAKI_QP_BLOB), *all = calloc(nq * (size_t)n, DION__GDAKI_QP_BLOB);
    if (d) {
        d->gc = gc;
        d->nctx = nctx;
        d->cpu = cpu;
        d->qps = calloc(nq, sizeof *d->qps);
        d->qdev = calloc(nq, sizeof *d->qdev);
        d->sig = calloc((size_t)n, sizeof *d->sig);
    }
    dion_status_t st = d && mine && all && d->qps && d->qdev && d->sig
                           ? DION_SUCCESS
                           : dion__error(DION_ERR_NO_MEMORY, "out of memory for gdaki's QPs");
    int used = 0;
    for (int p = 0; p < n; p++) used |= p != me && dion__tl_of(c, p) == &dion__tl_gdaki;
    long long depth = DION__GD_WQEBBS;
    if (st == DION_SUCCESS) st = dion__cfg_int("DION_GDAKI_QP_DEPTH", 64, 32768, &depth);
    if (st == DION_SUCCESS && (depth & (depth - 1)))
        st = dion__error(DION_ERR_INVALID_ARG, "DION_GDAKI_QP_DEPTH=%lld is not a power of two (64 to 32768)",
                         depth);
    if (st == DION_SUCCESS && !cpu && depth < DION__GD_WQEBBS_GPU)
        st = dion__error(DION_ERR_INVALID_ARG,
                         "DION_GDAKI_QP_DEPTH=%lld is below %u, the least a GPU handle takes (a warp's work "
                         "requests must fit in three quarters of the ring)",
                         depth, DION__GD_WQEBBS_GPU);
    if (d) d->depth = (uint32_t)depth;
    /* counters and marks (the posting threads' atomics stay there) and the scratch words atomics return
     * into */
    size_t sb = dion__gdaki_states_bytes(nq, (uint32_t)depth),
           xb = dion__gdaki_scratch_bytes(nq, (uint32_t)depth);
    if (st == DION_SUCCESS && used) {
        if (cpu) {
            d->states = aligned_alloc(64, sb);
            d->scratch_host = aligned_alloc(64, xb);
            d->scratch_dev = d->scratch_host;
            if (!d->states || !d->scratch_host)
                st = dion__error(DION_ERR_NO_MEMORY, "out of memory for gdaki's QPs");
            else
                memset(d->states, 0, sb), memset(d->scratch_host, 0, xb);
        } else {
            st = dion__cuda_check(cudaMalloc((void **)&d->states, sb), "cudaMalloc for gdaki's QP counters");
            if (st == DION_SUCCESS) st = dion__cuda_zero(d->states, sb);
            if (st == DION_SUCCESS)
                st = dion__cuda_check(
                    cudaHostAlloc((void **)&d->scratch_host, xb, cudaHostAllocMapped | cudaHostAllocPortable),
                    "cudaHostAlloc for gdaki's atomic results");
            if (st == DION_SUCCESS)
                st = dion__cuda_check(cudaHostGetDevicePointer((void **)&d->scratch_dev, d->scratch_host, 0),
                                      "cudaHostGetDevicePointer for gdaki's atomic results");
        }
    }
    uint32_t slkey = 0;
    uint64_t sladdr = 0;
    if (st == DION_SUCCESS && used) {
        dion__gdaki_rdesc_t unused;
        st = gc->N->mr_reg(gc->nic, d->scratch_host, xb, 1, &d->scratch_mr, &slkey, &sladdr, &unused);
    }
    /* the QP (context, this rank) is a loopback: this rank's atomics on its own windows go through the NIC
     * too, so that they are atomic with respect to the peers' (device/gdaki.cuh, dion__gdaki_amo_route) */
    for (uint32_t x = 0; x < nctx && st == DION_SUCCESS && used; x++)
        for (int p = 0; p < n && st == DION_SUCCESS; p++) {
            if (p != me && dion__tl_of(c, p) != &dion__tl_gdaki) continue;
            size_t i = (size_t)x * n + (size_t)p;
            dion__gdaki_qp_args_t a = {x, p, (uint32_t)depth, 1, cpu};
            st = gc->N->qp_create(gc->nic, &a, &d->qps[i], &d->qdev[i], mine + i * DION__GDAKI_QP_BLOB);
            if (st != DION_SUCCESS) break;
            dion_gdaki_qp_dev_t *q = &d->qdev[i];
            if (!(q->flags & DION_GDAKI_QP_COLLAPSED) || q->wq_mask + 1u != (uint32_t)depth)
                st = dion__error(
                    DION_ERR_UNSUPPORTED,
                    "gdaki: NIC %s gave a QP with %u WQEBBs and %s CQ; device code needs a collapsed "
                    "CQ and the %lld WQEBBs asked for",
                    gc->N->name, q->wq_mask + 1u,
                    (q->flags & DION_GDAKI_QP_COLLAPSED) ? "a collapsed" : "a normal", depth);
            dion__gdaki_qp_bind(q, d->states, d->scratch_dev, sladdr, slkey, nq, i, (uint32_t)depth);
            q->peer = p;
        }
    dion_status_t ag = dion__comm_agree(c, st, "creating gdaki's QPs");
    if (ag == DION_SUCCESS) ag = dion__boot_allgather(c->boot, mine, nq * DION__GDAKI_QP_BLOB, all);
    for (uint32_t x = 0; x < nctx && ag == DION_SUCCESS && st == DION_SUCCESS; x++)
        for (int p = 0; p < n && st == DION_SUCCESS; p++) {
            size_t i = (size_t)x * n + (size_t)p;
            if (!d->qps[i]) continue;
            /* rank p's QP for (context x, this rank) */
            const uint8_t *b = all + ((size_t)p * nq + (size_t)x * n + (size_t)me) * DION__GDAKI_QP_BLOB;
            st = gc->N->qp_connect(gc->nic, d->qps[i], b);
            if (st == DION_SUCCESS) d->qdev[i].flags |= DION_GDAKI_QP_UP;
        }
    if (ag == DION_SUCCESS) ag = dion__comm_agree(c, st, "connecting gdaki's QPs");
    if (ag == DION_SUCCESS && used) {
        for (int p = 0; p < n; p++) {
            if (!sigr) break;
            if (p == me)
                d->sig[p] = (dion_gdaki_key_t){sigr->laddr, sigr->lkey, 1};
            else if (sigr->peers[p].bytes)
                d->sig[p] = (dion_gdaki_key_t){sigr->peers[p].addr, sigr->peers[p].rkey, 1};
        }
        d->gdev.nranks = (uint32_t)n;
        d->gdev.version = DION_GDAKI_PROTO_VERSION;
        d->gdev.keys = gc->keys_dev;
        if (cpu) {
            d->gdev.qps = d->qdev;
            d->gdev.sig_keys = d->sig;
        } else {
            st = dion__gd_dev_copy(&d->d_qdev, d->qdev, nq * sizeof *d->qdev);
            if (st == DION_SUCCESS) st = dion__gd_dev_copy(&d->d_sig, d->sig, (size_t)n * sizeof *d->sig);
            d->gdev.qps = d->d_qdev;
            d->gdev.sig_keys = d->d_sig;
            if (st == DION_SUCCESS) st = dion__gd_dev_copy(&d->d_gdev, &d->gdev, sizeof d->gdev);
        }
        if (st == DION_SUCCESS) dev->gdaki = cpu ? &d->gdev : (dion_gdaki_dev_t *)d->d_gdev;
        ag = st;
    }
    free(mine);
    free(all);
    if (ag != DION_SUCCESS) {
        if (d) dion__gd_dev_free(d);
        return ag;
    }
    *out = d;
    return DION_SUCCESS;
}

static void dion__gd_dev_fini(dion_comm_t c, void *state, void *dev_state)
{
    (void)c, (void)state;
    if (dev_state) dion__gd_dev_free(dev_state);
}

static int dion__gd_dev_why(void *dev_state, uint32_t ctx, char *out, size_t cap)
{
    dion__gdd_t *d = dev_state;
    int n = d->gc->comm->nranks;
    if (ctx >= d->nctx || !d->gc->N->qp_why) return 0;
    for (int p = 0; p < n; p++) {
        dion__gdaki_qp_t *q = d->qps[(size_t)ctx * n + (size_t)p];
        if (q && d->gc->N->qp_why(q, out, cap)) return 1;
    }
    return 0;
}

static int dion__gd_signals_on_host(dion_comm_t c, void *state)
{
    (void)c;
    dion__gdc_t *gc = state;
    return gc && gc->N == &dion__gdaki_softnic; /* the model serves host memory only */
}

const dion__tl_ops_t dion__tl_gdaki = {
    .name = "gdaki",
    .kind = DION_TRANSPORT_GDAKI,
    .desc_size = sizeof(dion__gdaki_rdesc_t),
    .exp_size = sizeof(dion__gd_exp_t),
    .imp_size = sizeof(dion__gdaki_rdesc_t),
    .share_size = 0,
    .usable = dion__gd_usable,
    .reachable = dion__gd_reach,
    .peer_scope = dion__gd_scope,
    .mem_export = dion__gd_export,
    .mem_share = NULL,
    .mem_import = dion__gd_import,
    .share_release = NULL,
    .mem_release = dion__gd_release,
    .mem_unexport = dion__gd_unexport,
    .desc_on_host = dion__gd_on_host,
    .comm_init = dion__gd_comm_init,
    .comm_fini = dion__gd_comm_fini,
    .region_done = dion__gd_region_done,
    .region_named = dion__gd_region_named,
    .region_forget = dion__gd_region_forget,
    .dev_init = dion__gd_dev_init,
    .dev_fini = dion__gd_dev_fini,
    .dev_why = dion__gd_dev_why,
    .signals_on_host = dion__gd_signals_on_host,
    .dev_collective = 1,
};
