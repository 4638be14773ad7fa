/* dion-perf's kernels with the proxy's device half (DION_DEVICE_BACKENDS=3): launched when some peer of the
 * run is served by the proxy (or with --kernels proxy). The p2p-only set in dion_perf.cu stays as it was.
 * Launch bounds: the block rows keep p2p's 1024 threads, so that both transports' rows do the same work (on
 * an H200 these kernels then have 64 registers and spill a few hundred bytes around the out-of-line proxy
 * calls, which cost microseconds anyway); put_bw and msgrate run 32 and 64 threads per block through the
 * proxy (a thread's command is the unit of work, not its copy), so they are bounded at 64 and do not spill.
 */
#define DION_DEVICE_BACKENDS 3
#define PERF_NS              perf_proxy
#define PERF_BLOCK_MAX       1024
#define PERF_RATE_MAX        64
#define PERF_MSGRATE_THREADS 64
#include "dion_perf_kernels.cuh"
