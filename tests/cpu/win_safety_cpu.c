/* Window safety and argument agreement (tests/common/win_safety.h) in CPU mode: ranks are processes, kernels
 * run on CPU threads over host windows. */
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
#define DT_ON_HOST         1
#define WS_RUN_EXTRA(mode) 0
#define WS_EXTRA_MODES     ""

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
static int ws_runner_init(void)
{
    return 0;
}

#include "../common/win_safety.h"

int main(int argc, char **argv)
{
    return ws_main(argc, argv);
}
