/* The first kernel in CPU mode: the same device calls on CPU threads over host windows; no GPU needed.
 * Run: dionrun -n 2 ./first_kernel_cpu (docs/getting_started.md). */
#include <stdio.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define BYTES (1 << 20)

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    dion_status_t status;
} args_t;

static void exchange(void *p) /* the "kernel": runs on the threads dion_cpu_launch starts */
{
    args_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int next = (a->dev.rank + 1) % a->dev.nranks;
    dion_put_signal(c, a->win, next, BYTES, a->win, 0, BYTES, 0, DION_SIG_SET, 1);
    a->status = dion_wait(c, 0, DION_CMP_EQ, 1, NULL);
}

int main(void)
{
    dion_comm_t comm;
    dion_win_t win;
    dion_dev_t dev;
    void *base;
    dion_dev_attr_t attr = {0, 0, 0, DION_DEV_FLAG_CPU}; /* CPU mode even where a GPU exists */
    if (dion_comm_init_env(&comm) != DION_SUCCESS ||
        dion_win_alloc(comm, 2 * BYTES, 1, &base, &win) != DION_SUCCESS || /* on_host = 1 */
        dion_dev_create(comm, &attr, &dev) != DION_SUCCESS) {
        fprintf(stderr, "first_kernel_cpu: %s\n", dion_last_error());
        return 1;
    }
    int rank = dion_comm_rank(comm), n = dion_comm_size(comm), prev = (rank + n - 1) % n, bad = 0;
    unsigned char *mem = base;
    for (int i = 0; i < BYTES; i++) mem[i] = (unsigned char)(rank + i);
    args_t a = {dev, dion_win_device(win), DION_ERR_INTERNAL};
    if (dion_cpu_launch(1, 1, exchange, &a) != DION_SUCCESS || a.status != DION_SUCCESS ||
        dion_dev_check(comm, &dev) != DION_SUCCESS)
        bad = 1;
    for (int i = 0; i < BYTES && !bad; i++) bad = mem[BYTES + i] != (unsigned char)(prev + i);
    printf("first_kernel_cpu: rank %d of %d: %s\n", rank, n,
           bad ? "FAILED" : "1 MiB from the previous rank verified");
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    return bad;
}
