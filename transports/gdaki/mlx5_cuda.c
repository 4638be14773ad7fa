/* gdaki/mlx5: GPU memory and mappings over CUDA (dion__mlx5_cuda_ops). The driver entry points that
 * src/cuda.c does not look up (cuMemHostRegister and friends, cuPointerSetAttribute) are looked up here the
 * same way, through the runtime's entry-point query, so libdion still loads without a driver. Not run on a
 * NIC yet. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlx5.h"
#include "src/cuda.h"

static struct {
    CUresult (*HostRegister)(void *, size_t, unsigned int);
    CUresult (*HostUnregister)(void *);
    CUresult (*HostGetDevicePointer)(CUdeviceptr *, void *, unsigned int);
    CUresult (*PointerSetAttribute)(const void *, CUpointer_attribute, CUdeviceptr);
} cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void *sym(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return fn;
}

static void cu_setup(void)
{
    if (!dion__cuda_device_count()) return;
    void *p;
    p = sym("cuMemHostRegister");
    memcpy(&cu.HostRegister, &p, sizeof p);
    p = sym("cuMemHostUnregister");
    memcpy(&cu.HostUnregister, &p, sizeof p);
    p = sym("cuMemHostGetDevicePointer");
    memcpy(&cu.HostGetDevicePointer, &p, sizeof p);
    p = sym("cuPointerSetAttribute");
    memcpy(&cu.PointerSetAttribute, &p, sizeof p);
}

static void cu_text(CUresult r, const char *call, char *why, size_t cap)
{
    const dion__cu_t *t = dion__cu();
    const char *s = "unknown error";
    if (t && t->GetErrorString) t->GetErrorString(r, &s);
    snprintf(why, cap, "%s failed: %s (CUresult %d)", call, s, (int)r);
}

/* cudaMalloc gives 256-byte alignment; peer-memory registration pins whole 64 KiB GPU pages and dmabuf wants
 * host-page bounds, so blocks are over-allocated and aligned here, and the raw pointers kept in a list. */
typedef struct blk {
    void *aligned, *raw;
    struct blk *next;
} blk_t;
static blk_t *blocks;
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;

static int gpu_alloc(void *arg, size_t bytes, void **ptr, char *why, size_t cap)
{
    blk_t *b = malloc(sizeof *b);
    if (!b) {
        snprintf(why, cap, "no host memory");
        return -1;
    }
    cudaError_t e = cudaMalloc(&b->raw, bytes + 65536);
    if (e != cudaSuccess) {
        cudaGetLastError();
        free(b);
        snprintf(why, cap, "cudaMalloc(%zu): %s", bytes + 65536, cudaGetErrorString(e));
        return -1;
    }
    b->aligned = (void *)(((uintptr_t)b->raw + 65535) & ~(uintptr_t)65535);
    pthread_mutex_lock(&blocks_lock);
    b->next = blocks;
    blocks = b;
    pthread_mutex_unlock(&blocks_lock);
    /* NIC-written memory: every CUDA memory operation on it synchronous, as GPUDirect RDMA asks. */
    pthread_once(&cu_once, cu_setup);
    if (cu.PointerSetAttribute) {
        unsigned one = 1;
        cu.PointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)b->aligned);
    }
    *ptr = b->aligned;
    return 0;
}

static void gpu_free(void *arg, void *ptr)
{
    pthread_mutex_lock(&blocks_lock);
    for (blk_t **p = &blocks; *p; p = &(*p)->next)
        if ((*p)->aligned == ptr) {
            blk_t *b = *p;
            *p = b->next;
            pthread_mutex_unlock(&blocks_lock);
            cudaFree(b->raw);
            free(b);
            return;
        }
    pthread_mutex_unlock(&blocks_lock);
}

static int gpu_fill(void *arg, void *ptr, int byte, size_t bytes, char *why, size_t cap)
{
    /* On a stream of its own: the legacy stream would also wait for the application's kernels. */
    cudaStream_t st;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        e = cudaMemsetAsync(ptr, byte, bytes, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        cudaStreamDestroy(st);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, cap, "cudaMemset: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

static void close_fd(void *arg, int fd)
{
    close(fd);
}

static int map_io(void *arg, void *host, size_t len, void **dev, char *why, size_t cap)
{
    pthread_once(&cu_once, cu_setup);
    if (!cu.HostRegister || !cu.HostGetDevicePointer) {
        snprintf(why, cap, "the CUDA driver's cuMemHostRegister is not reachable (%s)",
                 dion__cuda_device_count() ? "driver too old" : dion__cuda_unavailable_reason());
        return -1;
    }
    CUresult r = cu.HostRegister(
        host, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY);
    if (r != CUDA_SUCCESS) {
        cu_text(r, "cuMemHostRegister(IOMEMORY) of the UAR page", why, cap);
        return (int)r;
    }
    CUdeviceptr d = 0;
    r = cu.HostGetDevicePointer(&d, host, 0);
    if (r != CUDA_SUCCESS) {
        cu_text(r, "cuMemHostGetDevicePointer of the UAR page", why, cap);
        cu.HostUnregister(host);
        return (int)r;
    }
    *dev = (void *)d;
    return 0;
}

static void unmap_io(void *arg, void *host)
{
    if (cu.HostUnregister) cu.HostUnregister(host);
}

static int alloc_mapped(void *arg, size_t bytes, void **host, void **dev, char *why, size_t cap)
{
    cudaError_t e = cudaHostAlloc(host, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(dev, *host, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, cap, "cudaHostAlloc(mapped): %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

static void free_mapped(void *arg, void *host)
{
    cudaFreeHost(host);
}

static int present(void *arg)
{
    return dion__cuda_device_count() > 0;
}

const dion__mlx5_gpu_ops_t dion__mlx5_cuda_ops = {.arg = NULL,
                                                  .present = present,
                                                  .alloc = gpu_alloc,
                                                  .free = gpu_free,
                                                  .fill = gpu_fill,
                                                  .dmabuf_fd = dion__verbs_dmabuf_fd,
                                                  .close_fd = close_fd,
                                                  .map_io = map_io,
                                                  .unmap_io = unmap_io,
                                                  .alloc_mapped = alloc_mapped,
                                                  .free_mapped = free_mapped};
