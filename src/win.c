/* Windows: memory every rank registers collectively, addressed as (window, rank, offset). Each rank maps the
 * parts of its node's ranks (p2p) and publishes a device-side table of their bases and sizes. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "cuda.h"
#include "transports/p2p/p2p.h"

struct dion_win {
    struct dion_win *next; /* the comm's list, registration order */
    dion_comm_t comm;
    uint32_t id;
    int owns;    /* allocated by dion_win_alloc */
    int on_host; /* this rank's part is host memory */
    void *base;
    size_t bytes;
    uint64_t *sizes;                    /* [nranks] */
    dion__mem_import_t *imports;        /* [nranks] */
    struct dion_win_dev *table;         /* what dion_win_device returns */
    int table_kind;                     /* 0 malloc, 1 cudaMalloc, 2 cudaHostAlloc */
    uint32_t flags;                     /* the table's flags */
    char *bases[DION_DEV_INLINE_PEERS]; /* the first ranks' mapped bases, for device handles' slots */
};

void dion__win_fill_slots(dion_comm_t c, struct dion_dev_win_slot *slots, int max)
{
    int k = 0;
    for (struct dion_win *w = c->wins; w && k < max; w = w->next, k++) {
        slots[k].win = w->table;
        slots[k].flags = w->flags;
        for (int r = 0; r < DION_DEV_INLINE_PEERS; r++) slots[k].base[r] = w->bases[r];
    }
}

static void dion__table_free(void *t, int kind)
{
    if (kind == 1)
        cudaFree(t);
    else if (kind == 2)
        cudaFreeHost(t);
    else
        free(t);
}

void dion__win_free_zombies(dion_comm_t c)
{
    /* stored as (table, kind) pairs */
    for (int i = 0; i < c->nzombies; i += 2)
        dion__table_free(c->zombie_tables[i], (int)(intptr_t)c->zombie_tables[i + 1]);
    free(c->zombie_tables);
    c->zombie_tables = NULL;
    c->nzombies = 0;
}

static size_t dion__win_table_bytes(int nranks)
{
    return offsetof(struct dion_win_dev, peer) + sizeof(struct dion_win_peer) * (size_t)nranks;
}

/* Publishes the table where its readers are: device memory for GPU windows, host memory readable by both
 * CPU and GPU (mapped, same address) for host windows, plain memory without CUDA. */
static dion_status_t dion__win_publish(struct dion_win *w, const struct dion_win_dev *host_copy, int any_host)
{
    size_t n = dion__win_table_bytes(w->comm->nranks);
    if (w->comm->cuda_device >= 0 && !any_host) {
        void *p = NULL;
        DION_CUDA_TRY(cudaMalloc(&p, n));
        cudaError_t e = cudaMemcpy(p, host_copy, n, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            cudaFree(p);
            return dion__cuda_check(e, "copying the window table to the GPU");
        }
        w->table = p;
        w->table_kind = 1;
    } else if (w->comm->cuda_device >= 0) {
        void *p = NULL;
        DION_CUDA_TRY(cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable));
        memcpy(p, host_copy, n);
        w->table = p;
        w->table_kind = 2;
    } else {
        w->table = malloc(n);
        if (!w->table) return dion__error(DION_ERR_NO_MEMORY, "out of memory for the window table");
        memcpy(w->table, host_copy, n);
        w->table_kind = 0;
    }
    return DION_SUCCESS;
}

static void dion__win_free(struct dion_win *w)
{
    if (!w) return;
    if (w->imports)
        for (int r = 0; r < w->comm->nranks; r++) dion__p2p_unmap(&w->imports[r]);
    if (w->table) {
        /* A device handle may name this table in a slot: freeing it could let a later window reuse the
         * address and be mistaken for this one. Such tables live on until the comm is destroyed. */
        void **z = dion__dev_slot_uses(w->comm, w->table)
                       ? realloc(w->comm->zombie_tables, sizeof(void *) * (size_t)(w->comm->nzombies + 2))
                       : NULL;
        if (z) {
            w->comm->zombie_tables = z;
            z[w->comm->nzombies++] = w->table;
            z[w->comm->nzombies++] = (void *)(intptr_t)w->table_kind;
        } else {
            dion__table_free(w->table, w->table_kind);
        }
    }
    free(w->imports);
    free(w->sizes);
    free(w);
}

static dion_status_t dion__win_create(dion_comm_t c, void *base, size_t bytes, int owns, dion_win_t *out)
{
    int n = c->nranks;
    dion_status_t st = DION_SUCCESS;
    struct dion_win *w = calloc(1, sizeof *w);
    dion__mem_desc_t *descs = calloc((size_t)n, sizeof *descs);
    int(*fds)[DION__VMM_MAX_CHUNKS] = calloc((size_t)n, sizeof *fds);
    struct dion_win_dev *tab = calloc(1, dion__win_table_bytes(n));
    dion__mem_export_t exp = {.nfds = 0};
    if (!w || !descs || !fds || !tab) {
        free(descs), free(fds), free(tab), free(w);
        return dion__error(DION_ERR_NO_MEMORY, "out of memory registering a window");
    }
    for (int r = 0; r < n; r++)
        for (int k = 0; k < DION__VMM_MAX_CHUNKS; k++) fds[r][k] = -1;
    w->comm = c;
    w->base = base;
    w->bytes = bytes;
    w->owns = owns;
    w->sizes = calloc((size_t)n, sizeof *w->sizes);
    w->imports = calloc((size_t)n, sizeof *w->imports);
    if (!w->sizes || !w->imports) st = dion__error(DION_ERR_NO_MEMORY, "out of memory registering a window");

    /* 1. describe this rank's part; 2. learn everybody's; 3. hand out file descriptors; 4. map. Each step
     * ends with an agreement so that a failure on one rank fails the call on all, naming that rank. */
    if (st == DION_SUCCESS) st = dion__p2p_export(c, base, bytes, &descs[c->rank], &exp);
    dion_status_t ag = dion__comm_agree(c, st, "describing the window memory");
    if (ag == DION_SUCCESS) {
        dion__mem_desc_t mine = descs[c->rank];
        ag = dion__boot_allgather(c->boot, &mine, sizeof mine, descs);
    }
    if (ag == DION_SUCCESS) ag = dion__p2p_share_fds(c, descs, &exp, fds);
    if (ag == DION_SUCCESS) {
        int any_host = 0;
        st = DION_SUCCESS;
        for (int r = 0; r < n; r++) {
            w->sizes[r] = descs[r].size;
            tab->peer[r].size = descs[r].size;
            if (descs[r].kind == DION__MEM_HOST_FD) any_host = 1;
            if (r == c->rank) {
                tab->peer[r].base = base;
                continue;
            }
            const char *why;
            if (st != DION_SUCCESS || !dion__p2p_reachable(c, r, descs[r].kind, &why)) continue;
            st = dion__p2p_import(c, r, &descs[r], fds[r], &w->imports[r]);
            tab->peer[r].base = w->imports[r].base;
        }
        w->on_host = descs[c->rank].kind == DION__MEM_HOST_FD;
        tab->magic = DION_WIN_MAGIC;
        tab->flags = any_host ? DION_WIN_HOST : 0;
        int align16 = 1;
        for (int r = 0; r < n; r++)
            if ((uintptr_t)tab->peer[r].base & 15) align16 = 0;
        if (align16) tab->flags |= DION_WIN_ALIGN16;
        tab->nranks = n;
        tab->id = w->id = c->next_win_id;
        if (st == DION_SUCCESS) st = dion__win_publish(w, tab, any_host);
        w->flags = tab->flags;
        for (int r = 0; r < n && r < DION_DEV_INLINE_PEERS; r++) w->bases[r] = tab->peer[r].base;
        ag = dion__comm_agree(c, st, "mapping the window");
    }
    for (int r = 0; r < n; r++)
        for (int k = 0; k < DION__VMM_MAX_CHUNKS; k++)
            if (fds[r][k] >= 0) close(fds[r][k]);
    dion__p2p_export_close(&exp);
    free(descs);
    free(fds);
    free(tab);
    if (ag != DION_SUCCESS) {
        dion__win_free(w);
        return ag;
    }
    c->next_win_id++;
    c->live_windows++;
    struct dion_win **tail = &c->wins;
    while (*tail) tail = &(*tail)->next;
    *tail = w;
    if (w->on_host) c->host_windows++;
    *out = w;
    return DION_SUCCESS;
}

dion_status_t dion_win_register(dion_comm_t comm, void *base, size_t bytes, dion_win_t *win)
{
    dion_status_t st = dion__comm_check(comm, "dion_win_register");
    if (st != DION_SUCCESS) return st;
    if (!win) return dion__error(DION_ERR_INVALID_ARG, "dion_win_register: win is NULL");
    *win = NULL;
    pthread_mutex_lock(&comm->lock);
    if (bytes && !base) {
        /* The other ranks are already in the collective: take part, so that they fail at once, not at the
         * bootstrap timeout. */
        dion__error(DION_ERR_INVALID_ARG, "dion_win_register: base is NULL with bytes=%zu", bytes);
        st = dion__comm_agree(comm, DION_ERR_INVALID_ARG, "registering the window");
    } else {
        st = dion__win_create(comm, bytes ? base : NULL, bytes, 0, win);
    }
    pthread_mutex_unlock(&comm->lock);
    return st;
}

dion_status_t dion_win_alloc(dion_comm_t comm, size_t bytes, int on_host, void **base, dion_win_t *win)
{
    dion_status_t st = dion__comm_check(comm, "dion_win_alloc");
    if (st != DION_SUCCESS) return st;
    if (!win || !base)
        return dion__error(DION_ERR_INVALID_ARG, "dion_win_alloc: %s is NULL", win ? "base" : "win");
    *win = NULL;
    *base = NULL;
    if (!on_host && comm->cuda_device < 0 && bytes)
        st = dion__error(
            DION_ERR_UNSUPPORTED,
            "dion_win_alloc(on_host=0) needs a GPU and this rank has none (%s); pass on_host=1 for a "
            "host window (CPU mode)",
            dion__cuda_device_count() ? "DION_CPU_MODE" : dion__cuda_unavailable_reason());
    void *p = NULL;
    if (st == DION_SUCCESS && bytes) {
        if (on_host) {
            st = dion__host_alloc(bytes, &p);
        } else {
            cudaSetDevice(comm->cuda_device); /* the comm's GPU, whichever thread calls */
            cudaError_t e = cudaMalloc(&p, bytes);
            if (e != cudaSuccess) {
                st = dion__cuda_check(e, "cudaMalloc for a window");
                p = NULL;
            } else {
                st = dion__cuda_zero(p, bytes);
            }
        }
    }
    pthread_mutex_lock(&comm->lock);
    /* Every rank takes part in registration even after a local failure, so that nobody waits in vain. */
    dion_status_t ag = dion__comm_agree(comm, st, "allocating the window");
    if (ag == DION_SUCCESS) ag = dion__win_create(comm, p, bytes, 1, win);
    pthread_mutex_unlock(&comm->lock);
    if (ag != DION_SUCCESS) {
        if (p && on_host)
            dion__host_free(p);
        else if (p)
            cudaFree(p);
        return ag;
    }
    *base = p;
    return DION_SUCCESS;
}

dion_status_t dion_win_destroy(dion_win_t w)
{
    if (!w) return dion__error(DION_ERR_INVALID_ARG, "dion_win_destroy: win is NULL");
    dion_comm_t c = w->comm;
    pthread_mutex_lock(&c->lock);
    /* Nobody may still use this rank's memory once it is freed: wait for every rank to get here. */
    dion_status_t st = dion__boot_barrier(c->boot);
    c->live_windows--;
    if (w->on_host) c->host_windows--;
    struct dion_win **pp = &c->wins;
    while (*pp && *pp != w) pp = &(*pp)->next;
    if (*pp) *pp = w->next;
    pthread_mutex_unlock(&c->lock);
    if (w->owns && w->base) {
        if (w->on_host)
            dion__host_free(w->base);
        else
            cudaFree(w->base);
    }
    dion__win_free(w);
    return st;
}

size_t dion_win_size(dion_win_t w, int rank)
{
    if (!w || rank < 0 || rank >= w->comm->nranks) return 0;
    return (size_t)w->sizes[rank];
}

dion_dwin_t dion_win_device(dion_win_t w)
{
    return w ? w->table : NULL;
}
