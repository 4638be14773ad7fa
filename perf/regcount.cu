/* Register probe: one small kernel per device call, compiled by perf/regcount.sh with `ptxas -v` to keep the
 * tables of docs/gpu_kernels.md true to the code. Nothing here runs. */
#include "dion/dion_device.cuh"

/* REGCOUNT_BOUND=N compiles every kernel with __launch_bounds__(N, 1). */
#ifdef REGCOUNT_BOUND
#define RC_BOUNDS __launch_bounds__(REGCOUNT_BOUND, 1)
#else
#define RC_BOUNDS
#endif

#define K(name, body)                                                                                        \
    extern "C" __global__ void RC_BOUNDS name(dion_dev_t dev, dion_dwin_t w, size_t n, uint64_t *out)        \
    {                                                                                                        \
        dion_ctx_t c = dion_ctx(dev, blockIdx.x);                                                            \
        body;                                                                                                \
    }

K(k_put, dion_put(c, w, 1, n, w, 0, n))
K(k_put_warp, dion_put_warp(c, w, 1, n, w, 0, n))
K(k_put_block, dion_put_block(c, w, 1, n, w, 0, n))
K(k_put_signal, dion_put_signal(c, w, 1, n, w, 0, n, 0, DION_SIG_SET, 1))
K(k_put_signal_warp, dion_put_signal_warp(c, w, 1, n, w, 0, n, 0, DION_SIG_SET, 1))
K(k_put_signal_block, dion_put_signal_block(c, w, 1, n, w, 0, n, 0, DION_SIG_SET, 1))
K(k_get, dion_get(c, w, 0, w, 1, n, n))
K(k_get_block, dion_get_block(c, w, 0, w, 1, n, n))
K(k_signal, dion_signal(c, 1, 0, DION_SIG_ADD, 1))
K(k_wait, out[0] = (uint64_t)dion_wait(c, 0, DION_CMP_GE, n, NULL))
K(k_quiet, out[0] = (uint64_t)dion_quiet(c))
K(k_barrier, out[0] = (uint64_t)dion_barrier(c))
K(k_fetch_add, out[0] = dion_atomic_fetch_add(c, w, 1, n, 1))
K(k_compare_swap, out[0] = dion_atomic_compare_swap(c, w, 1, n, 0, 1))
K(k_put_packet, dion_put_packet(c, w, 1, n, out, 8, (uint32_t)n))
K(k_wait_packet, out[1] = (uint64_t)dion_wait_packet(c, w, n, out, 8, (uint32_t)n))

/* A ping-pong loop of each width: wait for signal 0, then put_signal to the peer. */
#define LOOP(name, call)                                                                                     \
    extern "C" __global__ void RC_BOUNDS name(dion_dev_t dev, dion_dwin_t w, size_t n, uint64_t *out)        \
    {                                                                                                        \
        dion_ctx_t c = dion_ctx(dev, 0);                                                                     \
        for (uint64_t i = 1; i <= n; i++) {                                                                  \
            if (dion_wait(c, 0, DION_CMP_GE, i, NULL) != DION_SUCCESS) out[0] = i;                           \
            call;                                                                                            \
        }                                                                                                    \
    }
LOOP(loop_thread, if (threadIdx.x == 0) dion_put_signal(c, w, 1, 0, w, 0, n, 0, DION_SIG_SET, i))
LOOP(loop_warp, if (threadIdx.x < 32) dion_put_signal_warp(c, w, 1, 0, w, 0, n, 0, DION_SIG_SET, i))
LOOP(loop_block, dion_put_signal_block(c, w, 1, 0, w, 0, n, 0, DION_SIG_SET, i))
