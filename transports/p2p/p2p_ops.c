/* The p2p backend behind the transport seam: peers of this node whose memory this process can map. */
#include <string.h>
#include <unistd.h>

#include "transports/p2p/p2p.h"
#include "transports/transport.h"

static int dion__p2p_usable(dion_comm_t c, char *why, size_t cap)
{
    (void)c, (void)why, (void)cap;
    return 1; /* shared memory always; GPU memory where the peer check below says so */
}

static int dion__p2p_reach(dion_comm_t c, int peer, char *why, size_t cap)
{
    const char *reason = NULL;
    /* the peer's memory kind is not known yet: GPU memory is the stricter case when this rank has a GPU */
    uint32_t kind =
        c->cuda_device >= 0 && c->info[peer].cuda_device >= 0 ? DION__MEM_CUDA_IPC : DION__MEM_HOST_FD;
    if (dion__p2p_reachable(c, peer, kind, &reason)) return 1;
    snprintf(why, cap, "%s", reason ? reason : "not reachable");
    return 0;
}

static uint32_t dion__p2p_scope_of(dion_comm_t c, int peer, int cpu)
{
    return dion__p2p_peer_scope(c, peer, cpu);
}

static dion_status_t dion__p2p_ops_export(dion_comm_t c, void *base, size_t bytes, void *desc, void *exp)
{
    return dion__p2p_export(c, base, bytes, desc, exp);
}

static dion_status_t dion__p2p_ops_share(dion_comm_t c, const void *descs, const void *exp, void *shared)
{
    return dion__p2p_share_fds(c, descs, exp, shared);
}

static dion_status_t dion__p2p_ops_import(dion_comm_t c, int peer, const void *desc, void *shared, void *imp,
                                          dion__tl_view_t *view)
{
    const dion__mem_desc_t *d = desc;
    const char *why = NULL;
    if (d->kind != DION__MEM_NONE && (d->offset > d->map_size || d->size > d->map_size - d->offset))
        return dion__error(
            DION_ERR_INVALID_ARG,
            "rank %d described %llu bytes at offset %llu of a %llu-byte mapping; the part must lie "
            "inside what is mapped",
            peer, (unsigned long long)d->size, (unsigned long long)d->offset,
            (unsigned long long)d->map_size);
    if (!dion__p2p_reachable(c, peer, d->kind, &why)) {
        /* e.g. a peer's GPU memory seen by a rank without a GPU: its part stays unmapped, and device calls
         * that touch it record an error (DION_CHECK) instead of loading through NULL */
        DION_LOG(DION_LOG_DEBUG, "rank %d's part is not mapped here: %s", peer, why ? why : "not reachable");
        return DION_SUCCESS;
    }
    dion__mem_import_t *m = imp;
    dion_status_t st = dion__p2p_import(c, peer, d, shared, m);
    view->base = m->base;
    return st;
}

static void dion__p2p_ops_share_release(void *shared)
{
    int *fds = shared;
    for (int k = 0; k < DION__VMM_MAX_CHUNKS; k++)
        if (fds[k] >= 0) {
            close(fds[k]);
            fds[k] = -1;
        }
}

static void dion__p2p_ops_release(void *imp)
{
    dion__p2p_unmap(imp);
}

static void dion__p2p_ops_unexport(void *exp)
{
    dion__p2p_export_close(exp);
}

static int dion__p2p_on_host(const void *desc)
{
    return ((const dion__mem_desc_t *)desc)->kind == DION__MEM_HOST_FD;
}

const dion__tl_ops_t dion__tl_p2p = {
    .name = "p2p",
    .kind = DION_TRANSPORT_P2P,
    .desc_size = sizeof(dion__mem_desc_t),
    .exp_size = sizeof(dion__mem_export_t),
    .imp_size = sizeof(dion__mem_import_t),
    .share_size = sizeof(int) * DION__VMM_MAX_CHUNKS,
    .usable = dion__p2p_usable,
    .reachable = dion__p2p_reach,
    .peer_scope = dion__p2p_scope_of,
    .mem_export = dion__p2p_ops_export,
    .mem_share = dion__p2p_ops_share,
    .mem_import = dion__p2p_ops_import,
    .share_release = dion__p2p_ops_share_release,
    .mem_release = dion__p2p_ops_release,
    .mem_unexport = dion__p2p_ops_unexport,
    .desc_on_host = dion__p2p_on_host,
};
