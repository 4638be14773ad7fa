/* CUDA runtime and driver access; see cuda.h. */
#include <pthread.h>
#include <string.h>

#include "cuda.h"

static pthread_once_t dion__cuda_once = PTHREAD_ONCE_INIT;
static int dion__cuda_count;
static char dion__cuda_reason[256];
static dion__cu_t dion__cu_table;
static int dion__cu_ok;
/* For telling whether the application chose a device (dion__cuda_app_chose_device). */
static CUresult (*dion__cu_ctx_get_current)(CUcontext *);
static CUresult (*dion__cu_device_get)(CUdevice *, int);
static CUresult (*dion__cu_primary_state)(CUdevice, unsigned int *, int *);

static void *dion__cu_sym(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return fn;
}

static void dion__cuda_setup(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(dion__cuda_reason, sizeof dion__cuda_reason, "%s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        cudaGetLastError();
        n = 0;
    } else if (n == 0) {
        snprintf(dion__cuda_reason, sizeof dion__cuda_reason, "the driver reports no CUDA device");
    }
    dion__cuda_count = n;
    if (n == 0) return;
#define DION__SYM(f) dion__cu_table.f = dion__cu_sym("cu" #f)
    DION__SYM(GetErrorString);
    DION__SYM(MemRetainAllocationHandle);
    DION__SYM(MemRelease);
    DION__SYM(MemGetAddressRange);
    DION__SYM(MemExportToShareableHandle);
    DION__SYM(MemImportFromShareableHandle);
    DION__SYM(MemAddressReserve);
    DION__SYM(MemAddressFree);
    DION__SYM(MemMap);
    DION__SYM(MemUnmap);
    DION__SYM(MemSetAccess);
    DION__SYM(MemCreate);
    DION__SYM(MemGetAllocationGranularity);
    DION__SYM(MemGetAllocationPropertiesFromHandle);
    DION__SYM(PointerGetAttribute);
    DION__SYM(MemGetHandleForAddressRange);
#undef DION__SYM
    dion__cu_ctx_get_current = dion__cu_sym("cuCtxGetCurrent");
    dion__cu_device_get = dion__cu_sym("cuDeviceGet");
    dion__cu_primary_state = dion__cu_sym("cuDevicePrimaryCtxGetState");
    dion__cu_ok = dion__cu_table.MemRetainAllocationHandle && dion__cu_table.MemGetAddressRange &&
                  dion__cu_table.MemExportToShareableHandle && dion__cu_table.MemImportFromShareableHandle &&
                  dion__cu_table.MemAddressReserve && dion__cu_table.MemMap && dion__cu_table.MemSetAccess &&
                  dion__cu_table.MemCreate && dion__cu_table.PointerGetAttribute &&
                  dion__cu_table.MemRelease && dion__cu_table.MemUnmap && dion__cu_table.MemAddressFree &&
                  dion__cu_table.MemGetAllocationGranularity &&
                  dion__cu_table.MemGetAllocationPropertiesFromHandle;
}

int dion__cuda_device_count(void)
{
    pthread_once(&dion__cuda_once, dion__cuda_setup);
    return dion__cuda_count;
}

const char *dion__cuda_unavailable_reason(void)
{
    pthread_once(&dion__cuda_once, dion__cuda_setup);
    return dion__cuda_reason;
}

const dion__cu_t *dion__cu(void)
{
    pthread_once(&dion__cuda_once, dion__cuda_setup);
    if (!dion__cu_ok) {
        dion__error_set(DION_ERR_CUDA, "the CUDA driver API (cuMem*) is not reachable: %s",
                        dion__cuda_count ? "driver too old for CUDA 12 entry points" : dion__cuda_reason);
        return NULL;
    }
    return &dion__cu_table;
}

int dion__cuda_app_chose_device(void)
{
    if (dion__cuda_device_count() == 0) return 0;
    if (!dion__cu_ctx_get_current || !dion__cu_device_get || !dion__cu_primary_state) return -1;
    /* A context current on this thread (cudaSetDevice since CUDA 12, cuCtxSetCurrent, any runtime call
     * that did work on a device) is the application's choice. */
    CUcontext ctx = NULL;
    if (dion__cu_ctx_get_current(&ctx) != CUDA_SUCCESS) return -1;
    if (ctx) return 1;
    /* Else the current device's primary context: active once anything (another thread, a library) used it. */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    CUdevice d;
    unsigned int flags = 0;
    int active = 0;
    if (dion__cu_device_get(&d, dev) != CUDA_SUCCESS ||
        dion__cu_primary_state(d, &flags, &active) != CUDA_SUCCESS)
        return -1;
    return active != 0;
}

dion_status_t dion__cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return DION_SUCCESS;
    cudaGetLastError(); /* clear the sticky-free error so later calls are not blamed */
    return dion__error(DION_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

dion_status_t dion__cu_check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return DION_SUCCESS;
    const char *s = "unknown error";
    if (dion__cu_table.GetErrorString) dion__cu_table.GetErrorString(r, &s);
    return dion__error(DION_ERR_CUDA, "%s failed: %s (CUresult %d)", what, s, (int)r);
}

dion_status_t dion__cuda_zero(void *p, size_t n)
{
    cudaStream_t s;
    DION_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaError_t e = cudaMemsetAsync(p, 0, n, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    return dion__cuda_check(e, "zeroing device memory");
}
