/* Windows: memory every rank registers collectively, addressed as (window, rank, offset). Each rank maps the
 * parts of its node's ranks (p2p) and publishes a device-side table of their bases and sizes. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "cuda.h"
#include "dion/device/common.cuh"
#include "transports/p2p/p2p.h" /* dion__host_alloc for dion_win_alloc */
#include "transports/transport.h"

/* Largest window part: far above any memory a machine has, and small enough that no base + offset + bytes
 * computed from it can wrap around. */
#define DION__WIN_MAX_BYTES ((size_t)1 << 56)

struct dion_win {
    struct dion_win *next; /* the comm's list, registration order */
    dion_comm_t comm;
    uint32_t id;
    int owns;    /* allocated by dion_win_alloc */
    int on_host; /* this rank's part is host memory */
    void *base;
    size_t bytes;
    uint64_t *sizes;                    /* [nranks] */
    dion__tl_region_t *region;          /* every rank's part, as each one's backend reaches it */
    struct dion_win_dev *table;         /* what dion_win_device returns */
    int table_kind;                     /* 0 malloc, 1 cudaMalloc, 2 cudaHostAlloc */
    uint32_t flags;                     /* the table's flags */
    char *bases[DION_DEV_INLINE_PEERS]; /* the first ranks' mapped bases, for device handles' slots */
    char *self_base;                    /* this rank's part as the table names it, for the slots too */
};

/* Every window this process made, live or destroyed. Host handles are looked up here before they are read,
 * so that a destroyed one is reported, not used; CPU-mode checks ask here about a descriptor before they read
 * it (a GPU window's descriptor is device memory). A destroyed window keeps its handle and its descriptor
 * (marked DION_WIN_DEAD) until its comm is destroyed: were either freed, a later window could receive the
 * same address and a stale handle would silently name it. */
typedef struct {
    struct dion_win *win;
    dion_comm_t comm;
    const void *table;
    int table_kind;
    int live;
    uint32_t id;
} dion__win_entry_t;

static dion__win_entry_t *dion__wins;
static size_t dion__nwins, dion__wins_cap;
/* Open-addressing indexes into dion__wins, by handle and by descriptor, so that lookups stay O(1) however
 * many destroyed windows a long job accumulates. A slot holds an entry's index + 1; 0 is empty. */
static uint32_t *dion__by_win, *dion__by_table;
static size_t dion__hcap; /* a power of two, twice dion__wins_cap */
static pthread_rwlock_t dion__wins_lock = PTHREAD_RWLOCK_INITIALIZER;

static size_t dion__hslot(const void *key)
{
    uint64_t h = (uint64_t)(uintptr_t)key;
    h = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (dion__hcap - 1);
}

static void dion__hput(uint32_t *ix, const void *key, size_t i)
{
    size_t s = dion__hslot(key);
    while (ix[s]) s = (s + 1) & (dion__hcap - 1);
    ix[s] = (uint32_t)i + 1;
}

static dion__win_entry_t *dion__hget(const uint32_t *ix, const void *key, int by_table)
{
    if (!dion__hcap || !key) return NULL;
    for (size_t s = dion__hslot(key); ix[s]; s = (s + 1) & (dion__hcap - 1)) {
        dion__win_entry_t *e = &dion__wins[ix[s] - 1];
        if ((by_table ? e->table : (const void *)e->win) == key) return e;
    }
    return NULL;
}

static void dion__wins_reindex(void)
{
    memset(dion__by_win, 0, sizeof *dion__by_win * dion__hcap);
    memset(dion__by_table, 0, sizeof *dion__by_table * dion__hcap);
    for (size_t i = 0; i < dion__nwins; i++) {
        dion__hput(dion__by_win, dion__wins[i].win, i);
        dion__hput(dion__by_table, dion__wins[i].table, i);
    }
}

static dion_status_t dion__wins_add(struct dion_win *w)
{
    dion_status_t st = DION_SUCCESS;
    pthread_rwlock_wrlock(&dion__wins_lock);
    if (dion__nwins == dion__wins_cap) {
        size_t cap = dion__wins_cap ? 2 * dion__wins_cap : 16;
        dion__win_entry_t *p = realloc(dion__wins, sizeof *p * cap);
        uint32_t *a = calloc(2 * cap, sizeof *a), *b = calloc(2 * cap, sizeof *b);
        if (p) dion__wins = p;
        if (p && a && b) {
            free(dion__by_win);
            free(dion__by_table);
            dion__by_win = a;
            dion__by_table = b;
            dion__wins_cap = cap;
            dion__hcap = 2 * cap;
            dion__wins_reindex();
        } else {
            free(a);
            free(b);
        }
    }
    if (dion__nwins < dion__wins_cap) {
        dion__wins[dion__nwins] = (dion__win_entry_t){w, w->comm, w->table, w->table_kind, 1, w->id};
        dion__hput(dion__by_win, w, dion__nwins);
        dion__hput(dion__by_table, w->table, dion__nwins);
        dion__nwins++;
    } else {
        st = dion__error(DION_ERR_NO_MEMORY, "out of memory registering a window");
    }
    pthread_rwlock_unlock(&dion__wins_lock);
    return st;
}

/* Marks w destroyed if it is a live window; returns whether it was. Only one caller can win. */
static int dion__wins_kill(struct dion_win *w)
{
    pthread_rwlock_wrlock(&dion__wins_lock);
    dion__win_entry_t *e = dion__hget(dion__by_win, w, 0);
    int found = e && e->live;
    if (found) e->live = 0;
    pthread_rwlock_unlock(&dion__wins_lock);
    return found;
}

static int dion__wins_live(const struct dion_win *w)
{
    pthread_rwlock_rdlock(&dion__wins_lock);
    dion__win_entry_t *e = dion__hget(dion__by_win, w, 0);
    int found = e && e->live;
    pthread_rwlock_unlock(&dion__wins_lock);
    return found;
}

uint32_t dion__cpu_win_state(dion_dwin_t w, uint32_t *id)
{
    uint32_t why = DION_WCHK_NOT_WIN;
    pthread_rwlock_rdlock(&dion__wins_lock);
    dion__win_entry_t *e = dion__hget(dion__by_table, w, 1);
    if (e) {
        *id = e->id;
        why = !e->live ? DION_WCHK_DESTROYED : e->table_kind == 1 ? DION_WCHK_NOT_HOST : 0;
    }
    pthread_rwlock_unlock(&dion__wins_lock);
    return why;
}

void dion__win_fill_slots(dion_comm_t c, struct dion_dev_win_slot *slots, int max)
{
    int k = 0;
    for (struct dion_win *w = c->wins; w && k < max; w = w->next, k++) {
        slots[k].win = w->table;
        slots[k].flags = w->flags;
        slots[k].id = w->id;
        for (int r = 0; r < DION_DEV_INLINE_PEERS; r++) slots[k].base[r] = w->bases[r];
        slots[k].self = w->self_base;
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

/* The comm is going away: forget its windows. Destroyed ones are freed (handle and descriptor); live ones
 * stay mapped, as dion_comm_destroy warns, but their handles are no longer accepted. */
void dion__win_free_zombies(dion_comm_t c)
{
    pthread_rwlock_wrlock(&dion__wins_lock);
    size_t k = 0;
    for (size_t i = 0; i < dion__nwins; i++) {
        dion__win_entry_t *e = &dion__wins[i];
        if (e->comm != c) {
            dion__wins[k++] = *e;
            continue;
        }
        if (!e->live) {
            dion__table_free((void *)e->table, e->table_kind);
            free(e->win);
        }
    }
    dion__nwins = k;
    if (dion__hcap) dion__wins_reindex();
    pthread_rwlock_unlock(&dion__wins_lock);
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

/* Unmaps the peers' parts and frees the bookkeeping; the descriptor and the handle are the caller's. */
static void dion__win_release(struct dion_win *w)
{
    dion__tl_region_destroy(w->region);
    w->region = NULL;
    free(w->sizes);
    w->sizes = NULL;
}

/* A window that was never handed out: nothing can name it, so everything goes. */
static void dion__win_free(struct dion_win *w)
{
    dion__win_release(w);
    if (w->table) dion__table_free(w->table, w->table_kind);
    free(w);
}

/* Marks the descriptor destroyed where device code (and CPU-mode checks) read it. */
static void dion__win_mark_dead(struct dion_win *w)
{
    uint32_t dead = DION_WIN_DEAD;
    if (w->table_kind == 1) {
        if (w->comm->cuda_device >= 0) cudaSetDevice(w->comm->cuda_device);
        cudaError_t e = cudaMemcpy(&w->table->magic, &dead, sizeof dead, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            cudaGetLastError();
            DION_LOG(DION_LOG_WARN,
                     "could not mark window %u destroyed on the GPU (%s): DION_CHECK will not "
                     "recognize stale uses of it",
                     w->id, cudaGetErrorString(e));
        }
    } else {
        __atomic_store_n(&w->table->magic, dead, __ATOMIC_RELEASE);
    }
}

/* Collective: every rank checks the same descriptions, so every rank reaches the same verdict. A window's
 * parts are all host memory or all GPU memory: its flags, and CPU mode, hold for the whole window. */
typedef struct {
    const char *fn;
    int alloc; /* dion_win_alloc: the ranks chose on_host */
} dion__win_check_arg_t;

/* Every rank's part is host memory, or every rank's is GPU memory (0-byte parts do not count): ordering
 * scopes and copy paths are chosen per window. Runs on every rank over the same data, so all agree. */
static dion_status_t dion__win_check_parts(dion_comm_t c, const dion__tl_view_t *parts, void *arg)
{
    const dion__win_check_arg_t *a = arg;
    int first = -1;
    for (int r = 0; r < c->nranks; r++) {
        if (!parts[r].size) continue;
        int host = parts[r].on_host;
        if (first < 0) {
            first = r;
        } else if (host != parts[first].on_host) {
            int fh = !host;
            if (a->alloc)
                return dion__error(DION_ERR_INVALID_ARG,
                                   "%s: on_host differs across ranks: rank %d asked %d, rank %d asked %d; "
                                   "pass the same on_host on every rank",
                                   a->fn, first, fh, r, host);
            return dion__error(DION_ERR_INVALID_ARG,
                               "%s: the memory kind differs across ranks: rank %d registered %s memory, rank "
                               "%d %s memory; a window is host memory on every rank or GPU memory on every "
                               "rank",
                               a->fn, first, fh ? "host" : "GPU", r, host ? "host" : "GPU");
        }
    }
    return DION_SUCCESS;
}

static dion_status_t dion__win_create(dion_comm_t c, void *base, size_t bytes, int owns, const char *fn,
                                      dion_win_t *out)
{
    int n = c->nranks;
    dion_status_t st = DION_SUCCESS;
    struct dion_win *w = calloc(1, sizeof *w);
    struct dion_win_dev *tab = calloc(1, dion__win_table_bytes(n));
    if (!w || !tab) {
        free(tab), free(w);
        return dion__error(DION_ERR_NO_MEMORY, "out of memory registering a window");
    }
    w->comm = c;
    w->base = base;
    w->bytes = bytes;
    w->owns = owns;
    w->sizes = calloc((size_t)n, sizeof *w->sizes);
    if (!w->sizes) st = dion__error(DION_ERR_NO_MEMORY, "out of memory registering a window");

    /* Every rank's part through its backend; the call fails on every rank when it fails on one. */
    dion__win_check_arg_t chk = {fn, owns};
    dion_status_t ag = dion__comm_agree(c, st, "registering a window");
    if (ag == DION_SUCCESS)
        ag = dion__tl_region_create(c, base, bytes, "the window", dion__win_check_parts, &chk, &w->region);
    if (ag == DION_SUCCESS) {
        int any_host = 0;
        for (int r = 0; r < n; r++) {
            const dion__tl_view_t *v = dion__tl_region_view(w->region, r);
            w->sizes[r] = v->size;
            tab->peer[r].size = v->size;
            tab->peer[r].base = v->base;
            if (v->size && v->on_host) any_host = 1;
        }
        w->on_host = bytes && dion__tl_region_view(w->region, c->rank)->on_host;
        tab->magic = DION_WIN_MAGIC;
        tab->flags = any_host ? DION_WIN_HOST : 0;
        int align16 = 1;
        for (int r = 0; r < n; r++)
            if ((uintptr_t)tab->peer[r].base & 15) align16 = 0;
        if (align16) tab->flags |= DION_WIN_ALIGN16;
        tab->nranks = n;
        tab->id = w->id = c->next_win_id;
        dion__tl_region_name(w->region, w->id);
        st = dion__win_publish(w, tab, any_host);
        w->flags = tab->flags;
        for (int r = 0; r < n && r < DION_DEV_INLINE_PEERS; r++) w->bases[r] = tab->peer[r].base;
        w->self_base = tab->peer[c->rank].base;
        ag = dion__comm_agree(c, st, "publishing the window table");
    }
    free(tab);
    if (ag == DION_SUCCESS) ag = dion__wins_add(w);
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
    /* On a bad argument the other ranks are already in the collective: take part, so that they fail at
     * once, not at the bootstrap timeout. */
    if (bytes && !base) {
        dion__error(DION_ERR_INVALID_ARG, "dion_win_register: base is NULL with bytes=%zu", bytes);
        st = dion__comm_agree(comm, DION_ERR_INVALID_ARG, "registering the window");
    } else if (bytes && (bytes > DION__WIN_MAX_BYTES || bytes - 1 > UINTPTR_MAX - (uintptr_t)base)) {
        int wraps = bytes - 1 > UINTPTR_MAX - (uintptr_t)base;
        dion__error(
            DION_ERR_INVALID_ARG,
            "dion_win_register: base %p with bytes=%zu %s; pass the size of the memory at base", base, bytes,
            wraps ? "runs past the end of the address space" : "exceeds the window limit of 2^56 bytes");
        st = dion__comm_agree(comm, DION_ERR_INVALID_ARG, "registering the window");
    } else {
        st = dion__win_create(comm, bytes ? base : NULL, bytes, 0, "dion_win_register", win);
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
    if (bytes > DION__WIN_MAX_BYTES)
        st = dion__error(DION_ERR_INVALID_ARG,
                         "dion_win_alloc: bytes=%zu exceeds the window limit of %zu "
                         "bytes (2^56)",
                         bytes, DION__WIN_MAX_BYTES);
    else if (!on_host && comm->cuda_device < 0 && bytes)
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
    if (ag == DION_SUCCESS) ag = dion__win_create(comm, p, bytes, 1, "dion_win_alloc", win);
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
    if (!dion__wins_kill(w))
        return dion__error(DION_ERR_INVALID_ARG,
                           "dion_win_destroy: win %p is not a live window: it was destroyed already (or its "
                           "comm was), or it never came from dion_win_register / dion_win_alloc",
                           (void *)w);
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
    dion__win_mark_dead(w);
    dion__win_release(w);
    if (w->owns && w->base) {
        if (w->on_host)
            dion__host_free(w->base);
        else
            cudaFree(w->base);
    }
    /* The handle and the descriptor stay (see dion__wins) until the comm is destroyed. */
    return st;
}

size_t dion_win_size(dion_win_t w, int rank)
{
    if (!w || !dion__wins_live(w) || rank < 0 || rank >= w->comm->nranks) return 0;
    return (size_t)w->sizes[rank];
}

dion_dwin_t dion_win_device(dion_win_t w)
{
    return w && dion__wins_live(w) ? w->table : NULL;
}
