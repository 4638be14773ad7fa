/* A token goes around the ring of ranks with put_signal, in CPU mode: no GPU needed. Start it with
 *   dionrun -n 4 ./cpu_ring
 * Each rank runs a "kernel" of one block on CPU threads (dion_cpu_launch); the device API is the same one
 * kernels use on a GPU. */
#include <stdio.h>
#include <string.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define ROUNDS 1000

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int ok;
} ring_args_t;

/* Rank 0 starts; every rank waits for round k from its predecessor, adds its rank and passes it on. */
static void ring(void *p)
{
    ring_args_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int me = a->dev.rank, n = a->dev.nranks, next = (me + 1) % n;
    uint64_t *slot = (uint64_t *)dion__win_base(&a->dev, a->win, me); /* word 0 receives, word 1 sends */
    for (uint64_t k = 1; k <= ROUNDS; k++) {
        uint64_t token = 0;
        if (me != 0 || k > 1) {
            if (dion_wait(c, 0, DION_CMP_GE, me == 0 ? k - 1 : k, NULL) != DION_SUCCESS) return;
            token = slot[0];
        }
        slot[1] = token + (uint64_t)me;
        if (me == 0 && k > 1 && token != (k - 1) * (uint64_t)n * (n - 1) / 2)
            return; /* the sum of all ranks */
        if (me != 0 || k <= ROUNDS) dion_put_signal(c, a->win, next, 0, a->win, 8, 8, 0, DION_SIG_SET, k);
    }
    if (me == 0 && dion_wait(c, 0, DION_CMP_GE, ROUNDS, NULL) != DION_SUCCESS) return;
    a->ok = 1;
}

int main(void)
{
    dion_comm_t comm;
    if (dion_comm_init_env(&comm) != DION_SUCCESS) {
        fprintf(stderr, "cpu_ring: %s\n", dion_last_error());
        return 1;
    }
    void *base;
    dion_win_t win;
    dion_dev_t dev;
    dion_dev_attr_t attr = {16, 1, 0, DION_DEV_FLAG_CPU};
    if (dion_win_alloc(comm, 64, 1, &base, &win) != DION_SUCCESS ||
        dion_dev_create(comm, &attr, &dev) != DION_SUCCESS) {
        fprintf(stderr, "cpu_ring: %s\n", dion_last_error());
        return 1;
    }
    ring_args_t a = {dev, dion_win_device(win), 0};
    dion_cpu_launch(1, 1, ring, &a);
    int rank = dion_comm_rank(comm), n = dion_comm_size(comm);
    if (!a.ok || dion_dev_check(comm, &dev) != DION_SUCCESS)
        fprintf(stderr, "cpu_ring: rank %d failed: %s\n", rank, dion_last_error());
    else if (rank == 0)
        printf("cpu_ring: %d ranks passed the token %d times around the ring; every sum checked\n", n,
               ROUNDS);
    int ok = a.ok;
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    return ok ? 0 : 1;
}
