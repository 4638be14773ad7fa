/* Torn error records in CPU mode: 256 threads write 4 records each at once, ten launches; every record left
 * in the ring must be whole, the rest counted as dropped, and dion_dev_check must report the earliest.
 * On a CPU a record takes tens of nanoseconds, so two writers almost never overlap by chance (a GPU has such
 * overlaps by the thousand). This runner makes them overlap: it interposes the library's dion__cpu_ids, which
 * dion__record calls half-way through a record, and stalls each thread there for 2 ms in its first and last
 * records, while the other threads write theirs into the same slots. */
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static _Thread_local int er_stall_next;
#define ER_BEFORE_RECORD(a, i)                                                                               \
    do {                                                                                                     \
        if ((i) == 0 || (i) + 1 == (a)->per_thread) er_stall_next = 1;                                       \
    } while (0)

#include "../common/errring.h"

const dion_cpu_ids_t *dion__cpu_ids(void)
{
    static const dion_cpu_ids_t *(*real)(void);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "dion__cpu_ids");
    if (er_stall_next) {
        er_stall_next = 0;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return real();
}

static void er_cpu(void *p)
{
    er_body((const er_args_t *)p);
}
static int er_launch(unsigned grid, unsigned block, er_args_t *a)
{
    return dion_cpu_launch(grid, block, er_cpu, a) != DION_SUCCESS;
}
static void er_copy_ring(const dion_dev_t *dev, struct dion_dev_errors *out)
{
    for (int s = 0; s < DION_ERR_RING; s++) {
        const dion_err_record_t *r = &dev->errors->rec[s];
        out->rec[s] = *r;
        out->rec[s].seq = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
    }
}
static uint64_t er_dropped(const dion_dev_t *dev)
{
#ifdef DION_CTL_ERR_DROPPED
    return __atomic_load_n(&dev->signals[dev->num_signals + DION_CTL_ERR_DROPPED], __ATOMIC_RELAXED);
#else
    (void)dev;
    return 0;
#endif
}

int main(void)
{
    setenv("DION_WATCHDOG_INTERVAL", "0", 1); /* nothing reads the ring while the threads write */
    dion_unique_id_t id;
    dion_comm_t comm;
    dion_dev_t dev;
    dion_dev_attr_t attr = {16, 1, 0, DION_DEV_FLAG_CPU};
    if (dion_get_unique_id(&id) != DION_SUCCESS || dion_comm_init_rank(&comm, 1, &id, 0) != DION_SUCCESS ||
        dion_dev_create(comm, &attr, &dev) != DION_SUCCESS) {
        fprintf(stderr, "FAIL: setup: %s\n", dion_last_error());
        return 1;
    }
    int failures = er_run(comm, dev, 4, 64, 4, 10);
    if (dion_dev_destroy(comm, &dev) != DION_SUCCESS) failures++;
    dion_comm_destroy(comm);
    printf("%s: torn error records\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
