/* Pinned bounce buffers for GPU memory an engine cannot register; see staging.h. */
#include <stdlib.h>
#include <string.h>

#include "src/cuda.h"
#include "staging.h"

struct dion__stage {
    const dion__engine_ops_t *ops;
    dion__engine_t *e;
    char *mem;
    size_t slot_bytes;
    uint32_t nslots;
    uint32_t *free_list; /* stack of free slot indices */
    uint32_t nfree;
    dion__engine_mr_t *mr; /* one registration for the whole pool */
    int gpu;               /* memory from cudaHostAlloc and copies through a private stream */
    int device;            /* the GPU the stream belongs to (made current in the copying thread) */
    cudaStream_t stream;
    uint32_t queued; /* copies enqueued since the last wait */
};

dion_status_t dion__stage_create(const dion__engine_ops_t *ops, dion__engine_t *e, size_t slot_bytes,
                                 uint32_t nslots, dion__stage_t **out)
{
    *out = NULL;
    if (!slot_bytes || !nslots || slot_bytes > ((size_t)1 << 40) / nslots)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "staging pool: %u slots of %zu bytes is not a usable size", nslots,
                               slot_bytes);
    dion__stage_t *s = calloc(1, sizeof *s);
    if (!s) return dion__error_set(DION_ERR_NO_MEMORY, "staging pool: out of memory");
    s->ops = ops;
    s->e = e;
    s->slot_bytes = (slot_bytes + 63) & ~(size_t)63; /* slots on cache-line boundaries */
    s->nslots = nslots;
    size_t total = s->slot_bytes * nslots;
    dion_status_t st = DION_SUCCESS;
    s->gpu = dion__cuda_device_count() > 0;
    if (s->gpu) {
        cudaError_t ce = cudaGetDevice(&s->device);
        if (ce == cudaSuccess) ce = cudaHostAlloc((void **)&s->mem, total, cudaHostAllocPortable);
        if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
        if (ce != cudaSuccess) {
            st = dion__cuda_check(ce, "allocating the pinned staging pool");
            goto fail;
        }
    } else if (posix_memalign((void **)&s->mem, 4096, total)) {
        s->mem = NULL;
        st = dion__error_set(DION_ERR_NO_MEMORY, "staging pool: cannot allocate %zu bytes", total);
        goto fail;
    }
    s->free_list = malloc(sizeof *s->free_list * nslots);
    if (!s->free_list) {
        st = dion__error_set(DION_ERR_NO_MEMORY, "staging pool: out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < nslots; i++) s->free_list[i] = nslots - 1 - i;
    s->nfree = nslots;
    dion__engine_rkey_t unused;
    st = ops->mem_reg(e, s->mem, total, DION__ENGINE_MEM_HOST, &s->mr, &unused);
    if (st != DION_SUCCESS) goto fail;
    *out = s;
    return DION_SUCCESS;
fail:
    s->nfree = s->nslots; /* nothing in use */
    dion__stage_destroy(s);
    return st;
}

int dion__stage_acquire(dion__stage_t *s, void **buf, dion__engine_mr_t **mr)
{
    if (!s->nfree) return -1;
    uint32_t i = s->free_list[--s->nfree];
    *buf = s->mem + (size_t)i * s->slot_bytes;
    *mr = s->mr;
    return (int)i;
}

void dion__stage_release(dion__stage_t *s, int slot)
{
    if (slot >= 0 && (uint32_t)slot < s->nslots && s->nfree < s->nslots)
        s->free_list[s->nfree++] = (uint32_t)slot;
}

size_t dion__stage_slot_bytes(const dion__stage_t *s)
{
    return s->slot_bytes;
}

/* cudaMemcpyDefault: the direction comes from the pointers (unified addressing), so host memory given by a
 * caller in CPU mode on a GPU machine is copied correctly too. The stream is non-blocking: the copy does not
 * wait for kernels on the legacy default stream (which may be spinning on this very data), and the proxy
 * thread waits for its own copies alone. The proxy thread is not the thread that made the stream: the device
 * is made current first (cheap when it is already). */
dion_status_t dion__stage_copy_async(dion__stage_t *s, void *dst, const void *src, size_t bytes,
                                     const char *what)
{
    if (!bytes) return DION_SUCCESS;
    if (!s->gpu) {
        memcpy(dst, src, bytes);
        return DION_SUCCESS;
    }
    cudaError_t ce = cudaSetDevice(s->device);
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream);
    if (ce == cudaSuccess) s->queued++;
    return ce == cudaSuccess ? DION_SUCCESS : dion__cuda_check(ce, what);
}

dion_status_t dion__stage_wait(dion__stage_t *s, const char *what)
{
    if (!s->gpu || !s->queued) return DION_SUCCESS;
    s->queued = 0;
    cudaError_t ce = cudaSetDevice(s->device);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(s->stream);
    return ce == cudaSuccess ? DION_SUCCESS : dion__cuda_check(ce, what);
}

static dion_status_t copy(dion__stage_t *s, void *dst, const void *src, size_t bytes, const char *what)
{
    dion_status_t st = dion__stage_copy_async(s, dst, src, bytes, what);
    if (st == DION_SUCCESS) st = dion__stage_wait(s, what);
    return st;
}

dion_status_t dion__stage_copy(dion__stage_t *s, void *dst, const void *src, size_t bytes, const char *what)
{
    return copy(s, dst, src, bytes, what);
}

dion_status_t dion__stage_shadow_alloc(dion__stage_t *s, size_t bytes, void **mem)
{
    *mem = NULL;
    if (s->gpu) {
        cudaError_t ce = cudaHostAlloc(mem, bytes ? bytes : 1, cudaHostAllocPortable);
        if (ce != cudaSuccess) {
            *mem = NULL;
            return dion__cuda_check(ce, "allocating a pinned host shadow for a staged window");
        }
        return DION_SUCCESS;
    }
    if (posix_memalign(mem, 4096, bytes ? bytes : 1)) {
        *mem = NULL;
        return dion__error_set(DION_ERR_NO_MEMORY, "staging: cannot allocate a host shadow of %zu bytes",
                               bytes);
    }
    return DION_SUCCESS;
}

void dion__stage_shadow_free(dion__stage_t *s, void *mem)
{
    if (!mem) return;
    if (s->gpu)
        cudaFreeHost(mem);
    else
        free(mem);
}

static dion_status_t check_slot(const dion__stage_t *s, int slot, size_t bytes)
{
    if (slot < 0 || (uint32_t)slot >= s->nslots || bytes > s->slot_bytes)
        return dion__error_set(DION_ERR_INVALID_ARG,
                               "staging: slot %d / %zu bytes outside the pool (%u x %zu)", slot, bytes,
                               s->nslots, s->slot_bytes);
    return DION_SUCCESS;
}

dion_status_t dion__stage_in(dion__stage_t *s, int slot, const void *src, size_t bytes)
{
    dion_status_t st = check_slot(s, slot, bytes);
    if (st != DION_SUCCESS) return st;
    return copy(s, s->mem + (size_t)slot * s->slot_bytes, src, bytes,
                "staging GPU memory into a bounce buffer");
}

dion_status_t dion__stage_out(dion__stage_t *s, int slot, void *dst, size_t bytes)
{
    dion_status_t st = check_slot(s, slot, bytes);
    if (st != DION_SUCCESS) return st;
    return copy(s, dst, s->mem + (size_t)slot * s->slot_bytes, bytes,
                "copying a bounce buffer into GPU memory");
}

void dion__stage_destroy(dion__stage_t *s)
{
    if (!s) return;
    if (s->nfree != s->nslots)
        DION_LOG(DION_LOG_WARN, "staging pool destroyed with %u of %u slots in use", s->nslots - s->nfree,
                 s->nslots);
    if (s->mr) s->ops->mem_dereg(s->e, s->mr);
    if (s->gpu) {
        if (s->stream) cudaStreamDestroy(s->stream);
        if (s->mem) cudaFreeHost(s->mem);
    } else {
        free(s->mem);
    }
    free(s->free_list);
    free(s);
}
