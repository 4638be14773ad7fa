/* gdaki/mlx5: the nic.h table over mlx5.h (a real ConnectX NIC through DEVX). Compiled and tested over a fake
 * rdma-core only; it has not run on a NIC. */
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"
#include "mlx5_nic.h"

struct dion__gdaki_qp {
    dion__mlx5_qp_t *q;
    struct dion__gdaki_qp *next;
};

struct dion__gdaki_mr {
    dion__mlx5_mr_t *r;
    struct dion__gdaki_mr *next;
};

struct dion__gdaki_nic {
    dion__mlx5_t *m;
    struct dion__gdaki_qp *qps; /* what close destroys if the backend left it */
    struct dion__gdaki_mr *mrs;
};

/* Tests point these at the fake rdma-core and host-memory GPU operations (mlx5_nic.h). */
static dion__mlx5_open_args_t test_args;
static int test_args_set;

void dion__gdaki_mlx5_test_args(const dion__mlx5_open_args_t *a)
{
    test_args_set = a != NULL;
    if (a) test_args = *a;
}

/* The same open a comm makes (device with DEVX and an ACTIVE port, PD, caps, GID, UAR) and, where there is a
 * GPU, a trial umem of GPU memory; then closed. A device that refuses DEVX, or a GPU the NIC cannot reach, is
 * not offered to the backend, so that it picks another one (proxy) instead of failing later. */
static int mlx5_usable(char *why, size_t cap)
{
    dion__mlx5_open_args_t a = {0};
    if (test_args_set) a = test_args;
    dion__mlx5_t *m = NULL;
    if (dion__mlx5_open(&a, &m)) {
        snprintf(why, cap, "%s", dion_last_error());
        return 0;
    }
    /* With a GPU, the queues will be GPU memory: without GPUDirect RDMA every GPU handle would fail later. */
    int ok = !m->gpu->present(m->gpu->arg) || dion__mlx5_gpudirect_check(m) == DION_SUCCESS;
    if (!ok) snprintf(why, cap, "%s", dion_last_error());
    dion__mlx5_close(m);
    return ok;
}

static dion_status_t mlx5_open(dion_comm_t comm, dion__gdaki_nic_t **out)
{
    *out = NULL;
    dion__mlx5_open_args_t a = {0};
    if (test_args_set) a = test_args;
    int db = 0;
    dion_status_t s = dion__cfg_enum("DION_GDAKI_DOORBELL", &db);
    if (s) return s;
    if (!test_args_set || a.doorbell == DION__MLX5_DB_AUTO)
        a.doorbell = db == 1 ? DION__MLX5_DB_GPU : db == 2 ? DION__MLX5_DB_CPU : DION__MLX5_DB_AUTO;
    a.rank = comm ? dion_comm_rank(comm) : 0;
    dion__gdaki_nic_t *n = calloc(1, sizeof *n);
    if (!n) return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for the NIC");
    if ((s = dion__mlx5_open(&a, &n->m))) {
        free(n);
        return s;
    }
    *out = n;
    return DION_SUCCESS;
}

static void mlx5_close(dion__gdaki_nic_t *n)
{
    if (!n) return;
    while (n->qps) {
        struct dion__gdaki_qp *q = n->qps;
        n->qps = q->next;
        dion__mlx5_qp_destroy(q->q);
        free(q);
    }
    while (n->mrs) {
        struct dion__gdaki_mr *r = n->mrs;
        n->mrs = r->next;
        dion__mlx5_mr_dereg(n->m, r->r);
        free(r);
    }
    dion__mlx5_close(n->m);
    free(n);
}

static dion_status_t mlx5_mr_reg(dion__gdaki_nic_t *n, void *base, size_t bytes, int on_host,
                                 dion__gdaki_mr_t **mr, uint32_t *lkey, uint64_t *laddr,
                                 dion__gdaki_rdesc_t *desc)
{
    *mr = NULL;
    struct dion__gdaki_mr *w = calloc(1, sizeof *w);
    if (!w) return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for a registration");
    dion_status_t s = dion__mlx5_mr_reg(n->m, base, bytes, on_host, &w->r);
    if (s) {
        free(w);
        return s;
    }
    *lkey = w->r->mr->lkey;
    *laddr = (uintptr_t)base; /* registered with iova = the virtual address on every route */
    memset(desc, 0, sizeof *desc);
    desc->addr = (uintptr_t)base;
    desc->rkey = w->r->mr->rkey;
    desc->flags = on_host ? DION__GDAKI_MR_HOST : 0;
    desc->bytes = bytes;
    w->next = n->mrs;
    n->mrs = w;
    *mr = w;
    return DION_SUCCESS;
}

static dion_status_t mlx5_mr_dereg(dion__gdaki_nic_t *n, dion__gdaki_mr_t *mr)
{
    for (struct dion__gdaki_mr **p = &n->mrs; *p; p = &(*p)->next)
        if (*p == mr) {
            *p = mr->next;
            dion__mlx5_mr_dereg(n->m, mr->r);
            free(mr);
            return DION_SUCCESS;
        }
    return dion__error_set(DION_ERR_INVALID_ARG,
                           "gdaki/mlx5: deregistering a registration this NIC never made");
}

static dion_status_t mlx5_qp_create(dion__gdaki_nic_t *n, const dion__gdaki_qp_args_t *args,
                                    dion__gdaki_qp_t **qp, dion_gdaki_qp_dev_t *dev,
                                    uint8_t blob[DION__GDAKI_QP_BLOB])
{
    *qp = NULL;
    struct dion__gdaki_qp *w = calloc(1, sizeof *w);
    if (!w) return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for a QP");
    dion__mlx5_qp_args_t a = {
        .ctx = args->ctx, .peer = args->peer, .nwqebb = args->nwqebb, .ncqe = args->ncqe, .cpu = args->cpu};
    dion_status_t s = dion__mlx5_qp_create(n->m, &a, &w->q);
    if (s) {
        free(w);
        return s;
    }
    const dion__mlx5_qp_view_t *v = &w->q->view;
    dev->sq = v->sq;
    dev->dbrec = v->dbrec;
    dev->db = v->db;
    dev->cq = v->cq;
    dev->qpn = v->qpn;
    dev->wq_mask = v->wq_mask;
    dev->log_ncqe = v->log_ncqe;
    dev->flags = (dev->flags & ~(DION_GDAKI_QP_COLLAPSED | DION_GDAKI_QP_HOSTMEM)) | DION_GDAKI_QP_COLLAPSED |
                 (v->hostmem ? DION_GDAKI_QP_HOSTMEM : 0);
    dev->max_inline = v->max_inline;
    memset(blob, 0, DION__GDAKI_QP_BLOB);
    dion__mlx5_qp_blob(w->q, blob);
    w->next = n->qps;
    n->qps = w;
    *qp = w;
    return DION_SUCCESS;
}

static dion_status_t mlx5_qp_connect(dion__gdaki_nic_t *n, dion__gdaki_qp_t *qp,
                                     const uint8_t blob[DION__GDAKI_QP_BLOB])
{
    return dion__mlx5_qp_connect(qp->q, blob, DION__VERBS_ADDR_BYTES);
}

static void mlx5_qp_destroy(dion__gdaki_nic_t *n, dion__gdaki_qp_t *qp)
{
    for (struct dion__gdaki_qp **p = &n->qps; *p; p = &(*p)->next)
        if (*p == qp) {
            *p = qp->next;
            dion__mlx5_qp_destroy(qp->q);
            free(qp);
            return;
        }
}

static int mlx5_qp_why(dion__gdaki_qp_t *qp, char *out, size_t cap)
{
    if (!qp || !qp->q->why[0]) return 0;
    snprintf(out, cap, "%s", qp->q->why);
    return 1;
}

const dion__gdaki_nic_ops_t dion__gdaki_mlx5 = {.version = DION__GDAKI_NIC_VERSION,
                                                .name = "mlx5",
                                                .usable = mlx5_usable,
                                                .open = mlx5_open,
                                                .close = mlx5_close,
                                                .mr_reg = mlx5_mr_reg,
                                                .mr_dereg = mlx5_mr_dereg,
                                                .mr_import = NULL,
                                                .mr_forget = NULL,
                                                .qp_create = mlx5_qp_create,
                                                .qp_connect = mlx5_qp_connect,
                                                .qp_destroy = mlx5_qp_destroy,
                                                .qp_why = mlx5_qp_why};

dion__mlx5_t *dion__gdaki_mlx5_dev(dion__gdaki_nic_t *n)
{
    return n ? n->m : NULL;
}

dion__mlx5_qp_t *dion__gdaki_mlx5_qp(dion__gdaki_qp_t *qp)
{
    return qp ? qp->q : NULL;
}
