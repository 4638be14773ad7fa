/* dion-perf's kernels with the gdaki device half (DION_DEVICE_BACKENDS=5, as conformance_gpu_gdaki): launched
 * when some peer of the run is served by gdaki (or with --kernels gdaki). GPU threads write the mlx5 work
 * requests and ring the doorbell; the NIC is a ConnectX or, with DION_GDAKI_NIC=softnic, the model's CPU
 * thread (docs/gdaki.md). Launch bounds as the proxy's set (dion_perf_proxy.cu): the block rows keep p2p's
 * 1024 threads so both rows do the same work (the out-of-line gdaki paths may spill there; they cost
 * microseconds anyway), put_bw and msgrate run 32 and 64 threads per block (a thread's work request is the
 * unit of work), each block on its own context's QP. */
#define DION_DEVICE_BACKENDS 5
#define PERF_NS              perf_gdaki
#define PERF_BLOCK_MAX       1024
#define PERF_RATE_MAX        64
#define PERF_MSGRATE_THREADS 64
#include "dion_perf_kernels.cuh"
