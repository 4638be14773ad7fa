/* The conformance suite in CPU mode: ranks are processes, "kernels" run on CPU threads over host windows. */
#include <stdlib.h>
#include <string.h>

#include "dion/dion.h"

#define DT_KERNEL(name, type)                                                                                \
    static void name##_body(type *a);                                                                        \
    static void name##_cpu(void *p)                                                                          \
    {                                                                                                        \
        name##_body((type *)p);                                                                              \
    }                                                                                                        \
    static void name##_body(type *a)
#define DT_LAUNCH(name, grid, block, ptr)                                                                    \
    (dion_cpu_launch((grid), (block), name##_cpu, (ptr)) != DION_SUCCESS)
#define DT_ON_HOST    1
#define DT_BLOCK      40 /* a full warp and a partial one */
#define DT_PUT_ROUNDS 24
/* DT_ATOMIC_THREADS (environment): threads of the atomics kernel, default 4 (the GPU suite runs 128) */
#define DT_ATOMIC_THREADS (getenv("DT_ATOMIC_THREADS") ? (uint32_t)atoi(getenv("DT_ATOMIC_THREADS")) : 4u)
#define DT_RUN_EXTRA()                                                                                       \
    do {                                                                                                     \
    } while (0)

static void *dt_alloc(size_t n)
{
    return calloc(1, n);
}
static void dt_free(void *p)
{
    free(p);
}
static void dt_get(void *host, const void *mem, size_t n)
{
    memcpy(host, mem, n);
}
static void dt_put(void *mem, const void *host, size_t n)
{
    memcpy(mem, host, n);
}

#include "../common/conformance.h"

static int dt_runner_init(void)
{
    return 0;
}
static int dt_one_rank_per_gpu(int nranks)
{
    return nranks < 0;
}

int main(int argc, char **argv)
{
    return dt_main(argc, argv);
}
