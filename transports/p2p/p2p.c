/* The p2p backend's host half; see p2p.h. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "p2p.h"
#include "src/cuda.h"

/* ---- shareable host memory ---- */

typedef struct dion__host_region {
    struct dion__host_region *next;
    char *base;
    size_t size;
    int fd;
    int cuda_registered;
} dion__host_region_t;

static dion__host_region_t *dion__host_regions;
static pthread_mutex_t dion__host_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t dion__page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* GPU kernels reach host windows through the CUDA mapping of the same pages (UVA: same address). */
static int dion__host_cuda_register(void *p, size_t n)
{
    if (dion__cuda_device_count() == 0) return 0;
    cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        DION_LOG(DION_LOG_INFO, "host window at %p not registered with CUDA (%s): CPU threads only", p,
                 cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

dion_status_t dion__host_alloc(size_t bytes, void **base)
{
    size_t size = dion__page_round(bytes);
    if (size < bytes || size > (size_t)INT64_MAX)
        return dion__error(DION_ERR_NO_MEMORY, "cannot allocate %zu bytes of shared memory: too large",
                           bytes);
    int fd = memfd_create("dion-window", MFD_CLOEXEC);
    if (fd < 0) return dion__error(DION_ERR_NO_MEMORY, "memfd_create failed: %s", strerror(errno));
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        return dion__error(DION_ERR_NO_MEMORY, "cannot size shared memory to %zu bytes: %s", size,
                           strerror(e));
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return dion__error(DION_ERR_NO_MEMORY, "cannot map %zu bytes of shared memory: %s", size,
                           strerror(e));
    }
    dion__host_region_t *r = calloc(1, sizeof *r);
    if (!r) {
        munmap(p, size);
        close(fd);
        return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    }
    r->base = p;
    r->size = size;
    r->fd = fd;
    r->cuda_registered = dion__host_cuda_register(p, size);
    pthread_mutex_lock(&dion__host_lock);
    r->next = dion__host_regions;
    dion__host_regions = r;
    pthread_mutex_unlock(&dion__host_lock);
    *base = p;
    return DION_SUCCESS;
}

void dion__host_free(void *base)
{
    pthread_mutex_lock(&dion__host_lock);
    dion__host_region_t **pp = &dion__host_regions, *r = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->base == base) {
            r = *pp;
            *pp = r->next;
            break;
        }
    pthread_mutex_unlock(&dion__host_lock);
    if (!r) return;
    if (r->cuda_registered) cudaHostUnregister(r->base);
    munmap(r->base, r->size);
    close(r->fd);
    free(r);
}

static dion__host_region_t *dion__host_find(const void *p, size_t bytes)
{
    pthread_mutex_lock(&dion__host_lock);
    dion__host_region_t *r = dion__host_regions;
    for (; r; r = r->next)
        if ((uintptr_t)p >= (uintptr_t)r->base && bytes <= r->size &&
            (uintptr_t)p - (uintptr_t)r->base <= r->size - bytes) /* no sum that could wrap */
            break;
    pthread_mutex_unlock(&dion__host_lock);
    return r;
}

/* ---- GPU identity ---- */

/* The ordinal of the GPU with this UUID among those this process sees, or -1. */
static int dion__gpu_by_uuid(const uint8_t uuid[16])
{
    int n = dion__cuda_device_count();
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) == cudaSuccess && memcmp(p.uuid.bytes, uuid, 16) == 0) return i;
    }
    cudaGetLastError();
    return -1;
}

int dion__p2p_reachable(dion_comm_t c, int peer, uint32_t kind, const char **why)
{
    *why = NULL;
    if (peer == c->rank || kind == DION__MEM_NONE) return 1;
    if (!dion__comm_is_local(c, peer)) {
        *why = "it is on another host (p2p reaches ranks of this node only)";
        return 0;
    }
    if (kind == DION__MEM_HOST_FD) return 1;
    if (c->cuda_device < 0) {
        *why = "its memory is on a GPU and this rank has no GPU to map it";
        return 0;
    }
    int dev = dion__gpu_by_uuid(c->info[peer].gpu_uuid);
    if (dev < 0 || dev == c->cuda_device) return 1; /* not visible here: let the IPC import decide */
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, c->cuda_device, dev) != cudaSuccess) cudaGetLastError();
    if (!can) *why = "there is no peer-to-peer path between the two GPUs (cudaDeviceCanAccessPeer says no)";
    return can;
}

uint32_t dion__p2p_peer_scope(dion_comm_t c, int peer, int cpu_mode)
{
    if (cpu_mode) return DION_SCOPE_SYS;
    if (c->info[peer].cuda_device < 0 || c->cuda_device < 0) return DION_SCOPE_SYS;
    return memcmp(c->info[peer].gpu_uuid, c->info[c->rank].gpu_uuid, 16) == 0 ? DION_SCOPE_GPU
                                                                              : DION_SCOPE_SYS;
}

/* ---- export ---- */

/* The mapping (one physical allocation) that contains p. */
static dion_status_t dion__vmm_mapping(const dion__cu_t *cu, CUdeviceptr p, CUdeviceptr *start, size_t *size)
{
    CUresult r = cu->PointerGetAttribute(start, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p);
    if (r == CUDA_SUCCESS) r = cu->PointerGetAttribute(size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p);
    return r == CUDA_SUCCESS
               ? DION_SUCCESS
               : dion__cu_check(r, "reading the VMM mapping of a window (is the whole range mapped?)");
}

static dion_status_t dion__export_vmm(const dion__cu_t *cu, void *base, size_t bytes, dion__mem_desc_t *d,
                                      dion__mem_export_t *exp)
{
    CUdeviceptr start = 0, p;
    size_t s = 0;
    dion_status_t st = dion__vmm_mapping(cu, (CUdeviceptr)(uintptr_t)base, &start, &s);
    if (st != DION_SUCCESS) return st;
    d->kind = DION__MEM_VMM;
    d->offset = (uintptr_t)base - start;
    p = start;
    while (p < (CUdeviceptr)(uintptr_t)base + bytes) {
        if (d->nchunks == DION__VMM_MAX_CHUNKS)
            return dion__error(DION_ERR_UNSUPPORTED,
                               "the VMM window is made of more than %d allocations; map fewer, larger ones",
                               DION__VMM_MAX_CHUNKS);
        CUmemGenericAllocationHandle h;
        CUdeviceptr cb;
        size_t cs;
        if ((st = dion__vmm_mapping(cu, p, &cb, &cs)) != DION_SUCCESS) return st;
        CUresult r = cu->MemRetainAllocationHandle(&h, (void *)(uintptr_t)p);
        if (r != CUDA_SUCCESS) return dion__cu_check(r, "cuMemRetainAllocationHandle");
        int fd = -1;
        r = cu->MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        cu->MemRelease(h);
        if (r != CUDA_SUCCESS)
            return dion__error(
                DION_ERR_UNSUPPORTED,
                "cannot export the VMM allocation at %p as a file descriptor (CUresult %d): create it "
                "with CUmemAllocationProp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                (void *)(uintptr_t)p, (int)r);
        exp->fds[exp->nfds++] = fd;
        d->chunk_size[d->nchunks++] = cs;
        d->map_size += cs;
        p = cb + cs;
    }
    return DION_SUCCESS;
}

dion_status_t dion__p2p_export(dion_comm_t c, void *base, size_t bytes, dion__mem_desc_t *d,
                               dion__mem_export_t *exp)
{
    memset(d, 0, sizeof *d);
    exp->nfds = 0;
    for (int i = 0; i < DION__VMM_MAX_CHUNKS; i++) exp->fds[i] = -1;
    d->size = bytes;
    if (bytes == 0) return DION_SUCCESS;
    dion__host_region_t *hr = dion__host_find(base, bytes);
    if (hr) {
        d->kind = DION__MEM_HOST_FD;
        d->offset = (uint64_t)((char *)base - hr->base);
        d->map_size = hr->size;
        exp->fds[0] = dup(hr->fd);
        exp->nfds = 1;
        return exp->fds[0] >= 0 ? DION_SUCCESS
                                : dion__error(DION_ERR_INTERNAL, "dup failed: %s", strerror(errno));
    }
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (dion__cuda_device_count() == 0 || cudaPointerGetAttributes(&a, base) != cudaSuccess ||
        a.type != cudaMemoryTypeDevice) {
        cudaGetLastError();
        return dion__error(DION_ERR_INVALID_ARG,
                           "base %p is neither GPU memory (cudaMalloc or cuMem) nor host memory from "
                           "dion_win_alloc(on_host=1); only those can be shared with other ranks",
                           base);
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, a.device) == cudaSuccess) memcpy(d->gpu_uuid, prop.uuid.bytes, 16);
    const dion__cu_t *cu = dion__cu();
    if (!cu) return dion__error(DION_ERR_CUDA, "%s", dion_last_error());
    /* cudaMalloc memory travels as a legacy IPC handle; cuMem (VMM) memory is not IPC-capable that way.
     * Asking the attribute avoids probing calls that fail (and that compute-sanitizer reports). */
    int legacy_ipc = 0;
    CUresult ar = cu->PointerGetAttribute(&legacy_ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                          (CUdeviceptr)(uintptr_t)base);
    if (ar != CUDA_SUCCESS) return dion__cu_check(ar, "cuPointerGetAttribute on the window base");
    if (!legacy_ipc) {
        dion_status_t st = dion__export_vmm(cu, base, bytes, d, exp);
        if (st != DION_SUCCESS) dion__p2p_export_close(exp);
        return st;
    }
    CUdeviceptr start;
    size_t size;
    CUresult r = cu->MemGetAddressRange(&start, &size, (CUdeviceptr)(uintptr_t)base);
    if (r != CUDA_SUCCESS) return dion__cu_check(r, "cuMemGetAddressRange");
    if ((uintptr_t)base < start || bytes > size || (uintptr_t)base - start > size - bytes)
        return dion__error(
            DION_ERR_INVALID_ARG,
            "the window [%p, +%zu) runs past the end of its cudaMalloc allocation (%zu bytes from %p)", base,
            bytes, size, (void *)(uintptr_t)start);
    cudaIpcMemHandle_t ipc;
    cudaError_t e = cudaIpcGetMemHandle(&ipc, base);
    if (e != cudaSuccess) return dion__cuda_check(e, "cudaIpcGetMemHandle");
    d->kind = DION__MEM_CUDA_IPC;
    memcpy(d->ipc, &ipc, sizeof ipc < sizeof d->ipc ? sizeof ipc : sizeof d->ipc);
    d->offset = (uintptr_t)base - start;
    d->map_size = size;
    return DION_SUCCESS;
}

void dion__p2p_export_close(dion__mem_export_t *exp)
{
    for (int i = 0; i < exp->nfds; i++)
        if (exp->fds[i] >= 0) close(exp->fds[i]);
    exp->nfds = 0;
}

static int dion__desc_nfds(const dion__mem_desc_t *d)
{
    return d->kind == DION__MEM_HOST_FD ? 1 : d->kind == DION__MEM_VMM ? (int)d->nchunks : 0;
}

dion_status_t dion__p2p_share_fds(dion_comm_t c, const dion__mem_desc_t *descs,
                                  const dion__mem_export_t *mine, int (*fds)[DION__VMM_MAX_CHUNKS])
{
    int rounds = 0;
    for (int r = 0; r < c->nranks; r++) {
        for (int k = 0; k < DION__VMM_MAX_CHUNKS; k++) fds[r][k] = -1;
        /* over all ranks, not only local ones: every rank must run the same number of exchanges */
        if (dion__desc_nfds(&descs[r]) > rounds) rounds = dion__desc_nfds(&descs[r]);
    }
    int *got = malloc(sizeof(int) * (size_t)c->nranks);
    if (!got) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    dion_status_t st = DION_SUCCESS;
    for (int k = 0; k < rounds && st == DION_SUCCESS; k++) {
        st = dion__fd_exchange(c, (uint32_t)k, k < mine->nfds ? mine->fds[k] : -1, got);
        for (int r = 0; r < c->nranks && st == DION_SUCCESS; r++) fds[r][k] = got[r];
    }
    free(got);
    return st;
}

/* ---- import ---- */

dion_status_t dion__p2p_import(dion_comm_t c, int peer, const dion__mem_desc_t *d, int *fds,
                               dion__mem_import_t *imp)
{
    memset(imp, 0, sizeof *imp);
    imp->kind = d->kind;
    int nfds = dion__desc_nfds(d);
    dion_status_t st = DION_SUCCESS;
    switch (d->kind) {
    case DION__MEM_NONE:
        break;
    case DION__MEM_HOST_FD: {
        if (fds[0] < 0)
            return dion__error(DION_ERR_INTERNAL, "no file descriptor arrived from rank %d", peer);
        void *p = mmap(NULL, d->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
        if (p == MAP_FAILED) {
            st = dion__error(DION_ERR_NO_MEMORY, "cannot map rank %d's host window: %s", peer,
                             strerror(errno));
            break;
        }
        imp->map = p;
        imp->map_size = d->map_size;
        imp->host_registered = dion__host_cuda_register(p, d->map_size);
        imp->base = (char *)p + d->offset;
        break;
    }
    case DION__MEM_CUDA_IPC: {
        cudaIpcMemHandle_t h;
        memcpy(&h, d->ipc, sizeof h);
        void *p = NULL;
        cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            st = dion__cuda_check(e, "cudaIpcOpenMemHandle");
            dion__error_wrap(
                st, "mapping rank %d's GPU memory (several ranks on one GPU need MPS: dionrun --mps)", peer);
            break;
        }
        imp->map = p;
        imp->map_size = d->map_size;
        imp->base = (char *)p + d->offset;
        break;
    }
    case DION__MEM_VMM: {
        const dion__cu_t *cu = dion__cu();
        if (!cu) {
            st = DION_ERR_CUDA;
            break;
        }
        CUdeviceptr va = 0;
        CUresult r = cu->MemAddressReserve(&va, d->map_size, 0, 0, 0);
        if (r != CUDA_SUCCESS) {
            st = dion__cu_check(r, "cuMemAddressReserve");
            break;
        }
        imp->map = (void *)(uintptr_t)va;
        imp->map_size = d->map_size;
        uint64_t off = 0;
        for (uint32_t k = 0; k < d->nchunks && st == DION_SUCCESS; k++) {
            CUmemGenericAllocationHandle h;
            r = cu->MemImportFromShareableHandle(&h, (void *)(uintptr_t)fds[k],
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            if (r != CUDA_SUCCESS) {
                st = dion__cu_check(r, "cuMemImportFromShareableHandle");
                break;
            }
            r = cu->MemMap(va + off, d->chunk_size[k], 0, h, 0);
            cu->MemRelease(h); /* the mapping keeps the allocation alive */
            if (r != CUDA_SUCCESS) {
                st = dion__cu_check(r, "cuMemMap");
                break;
            }
            off += d->chunk_size[k];
            imp->vmm_mapped = off;
        }
        if (st == DION_SUCCESS) {
            CUmemAccessDesc acc;
            memset(&acc, 0, sizeof acc);
            acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            acc.location.id = c->cuda_device;
            acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            r = cu->MemSetAccess(va, d->map_size, &acc, 1);
            if (r != CUDA_SUCCESS) st = dion__cu_check(r, "cuMemSetAccess");
        }
        imp->base = (char *)(uintptr_t)va + d->offset;
        if (st != DION_SUCCESS) dion__error_wrap(st, "mapping rank %d's VMM window", peer);
        break;
    }
    default:
        st = dion__error(DION_ERR_INTERNAL, "rank %d described memory of unknown kind %u", peer, d->kind);
    }
    for (int k = 0; k < nfds; k++)
        if (fds[k] >= 0) {
            close(fds[k]);
            fds[k] = -1;
        }
    if (st != DION_SUCCESS) dion__p2p_unmap(imp);
    return st;
}

void dion__p2p_unmap(dion__mem_import_t *imp)
{
    if (!imp->map) return;
    switch (imp->kind) {
    case DION__MEM_HOST_FD:
        if (imp->host_registered) cudaHostUnregister(imp->map);
        munmap(imp->map, imp->map_size);
        break;
    case DION__MEM_CUDA_IPC:
        cudaIpcCloseMemHandle(imp->map);
        break;
    case DION__MEM_VMM: {
        const dion__cu_t *cu = dion__cu();
        if (cu) {
            if (imp->vmm_mapped) cu->MemUnmap((CUdeviceptr)(uintptr_t)imp->map, imp->vmm_mapped);
            cu->MemAddressFree((CUdeviceptr)(uintptr_t)imp->map, imp->map_size);
        }
        break;
    }
    }
    imp->map = NULL;
    imp->base = NULL;
}
