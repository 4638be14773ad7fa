/* gdaki/mlx5: the CPU doorbell, for when the GPU cannot map the NIC's UAR page (the nvidia module without
 * PeerMappingOverride=1). Device code is unchanged: it writes the doorbell record (GPU memory, read by the
 * NIC) and then, with a system-scope release, the 8-byte doorbell value - into a mailbox in host memory
 * instead of the UAR. One thread per device sees a mailbox change and writes the value to the UAR register.
 * The value names its QP and its producer index, and every newer value covers the older ones, so the thread
 * writes only the latest it sees. See mlx5.h. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlx5.h"

int dion__mlx5_db_sweep(dion__mlx5_t *m)
{
    dion__mlx5_db_t *d = &m->db;
    int rung = 0;
    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < d->nqps; i++) {
        dion__mlx5_qp_t *q = d->qps[i];
        uint64_t v = atomic_load_explicit((_Atomic uint64_t *)q->mbox_host, memory_order_acquire);
        if (v == q->mbox_last) continue;
        q->mbox_last = v;
        /* The GPU's doorbell-record store is visible before its mailbox store (system-scope release); the
         * fence keeps the UAR store after the load above, as rdma-core's mmio barrier does. */
        atomic_thread_fence(memory_order_seq_cst);
        *d->reg = v;
        atomic_thread_fence(memory_order_seq_cst);
        rung++;
    }
    pthread_mutex_unlock(&d->lock);
    if (rung) atomic_fetch_add_explicit((_Atomic uint64_t *)&d->rings, (uint64_t)rung, memory_order_relaxed);
    return rung;
}

/* Spins while doorbells come, then backs off to short sleeps (at most 20 us) so an idle comm costs little. */
static void *db_thread(void *arg)
{
    dion__mlx5_t *m = arg;
    unsigned idle = 0;
    while (!atomic_load_explicit((_Atomic int *)&m->db.stop, memory_order_acquire)) {
        if (dion__mlx5_db_sweep(m)) {
            idle = 0;
            continue;
        }
        if (++idle < 1024) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, idle < 4096 ? 1000 : 20000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

dion_status_t dion__mlx5_db_start(dion__mlx5_t *m)
{
    dion__mlx5_db_t *d = &m->db;
    if (d->running) return DION_SUCCESS;
    d->reg = (volatile uint64_t *)m->uar->reg_addr;
    atomic_store((_Atomic int *)&d->stop, 0);
    if (pthread_mutex_init(&d->lock, NULL))
        return dion__error_set(DION_ERR_INTERNAL, "gdaki/mlx5: no mutex for the CPU doorbell thread");
    int e = pthread_create(&d->thread, NULL, db_thread, m);
    if (e) {
        pthread_mutex_destroy(&d->lock);
        return dion__error_set(DION_ERR_INTERNAL, "gdaki/mlx5: starting the CPU doorbell thread failed: %s",
                               strerror(e));
    }
    d->running = 1;
    return DION_SUCCESS;
}

void dion__mlx5_db_stop(dion__mlx5_t *m)
{
    dion__mlx5_db_t *d = &m->db;
    if (!d->running) return;
    atomic_store_explicit((_Atomic int *)&d->stop, 1, memory_order_release);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->lock);
    d->running = 0;
}

dion_status_t dion__mlx5_db_add(dion__mlx5_t *m, dion__mlx5_qp_t *q)
{
    dion__mlx5_db_t *d = &m->db;
    pthread_mutex_lock(&d->lock);
    if (d->nqps == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        dion__mlx5_qp_t **n = realloc(d->qps, (size_t)cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&d->lock);
            return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for the CPU doorbell's list");
        }
        d->qps = n;
        d->cap = cap;
    }
    q->mbox_last = 0;
    d->qps[d->nqps++] = q;
    pthread_mutex_unlock(&d->lock);
    return DION_SUCCESS;
}

void dion__mlx5_db_remove(dion__mlx5_t *m, dion__mlx5_qp_t *q)
{
    dion__mlx5_db_t *d = &m->db;
    if (!d->running) return;
    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < d->nqps; i++)
        if (d->qps[i] == q) {
            d->qps[i] = d->qps[--d->nqps];
            break;
        }
    pthread_mutex_unlock(&d->lock);
}
