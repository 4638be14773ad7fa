/* CUDA access for the host side. The runtime is linked statically; the driver API is reached through the
 * runtime's entry-point query, so that libdion loads and runs (CPU mode) where no GPU driver is installed. */
#ifndef DION_CUDA_H
#define DION_CUDA_H

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "internal.h"

/* Number of usable GPUs, 0 when none; the reason is kept for dion-info and errors. */
int dion__cuda_device_count(void);
const char *dion__cuda_unavailable_reason(void);

/* Driver functions looked up at first use; NULL when the driver lacks them. */
typedef struct {
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*MemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*MemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                           unsigned long long);
    CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *,
                                             CUmemAllocationHandleType);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                          unsigned long long);
    CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
                                            CUmemAllocationGranularity_flags);
    CUresult (*MemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
    /* Optional (NULL on drivers without it; dion__cu() does not require it): a dmabuf fd for a GPU range,
     * which proxy/verbs registers with ibv_reg_dmabuf_mr. */
    CUresult (*MemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, CUmemRangeHandleType,
                                            unsigned long long);
} dion__cu_t;
/* The driver table, or NULL (with a sentence set) when the driver API cannot be reached. */
const dion__cu_t *dion__cu(void);

/* 1 when the application has made a device current before DION looked (a CUDA context current on this
 * thread, or the current device's primary context active), 0 when not, -1 when the driver cannot tell.
 * Creates no context. */
int dion__cuda_app_chose_device(void);

/* Zeroes device memory and waits for it, on a stream of its own: the memory is in use by peers the moment the
 * call returns, and the legacy stream would also wait for the user's kernels. */
dion_status_t dion__cuda_zero(void *p, size_t n);

/* Turns a runtime error into DION_ERR_CUDA with a sentence naming the call. */
dion_status_t dion__cuda_check(cudaError_t e, const char *what);
dion_status_t dion__cu_check(CUresult r, const char *what);
#define DION_CUDA_TRY(call)                                                                                  \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) return dion__cuda_check(e_, #call);                                           \
    } while (0)

#endif
