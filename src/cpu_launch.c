/* CPU mode: runs "kernels" on CPU threads, each with its own block and thread index, so that the device
 * API, warp and block variants included, behaves as in a launch. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dion/device/arch.cuh"
#include "internal.h"

#define DION__CPU_MAX_THREADS 4096

typedef struct {
    pthread_barrier_t block;
    pthread_barrier_t *warps;
    uint32_t nwarps;
} dion__cpu_block_t;

/* Threads start only when the whole launch exists: a thread that ran fn early could wait forever in a block
 * barrier sized for threads that were never created. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int state; /* 0 waiting, 1 run, 2 cancelled */
} dion__cpu_gate_t;

typedef struct {
    dion_cpu_ids_t ids;
    dion__cpu_block_t *blk;
    dion__cpu_gate_t *gate;
    void (*fn)(void *);
    void *arg;
} dion__cpu_thread_t;

static _Thread_local dion__cpu_thread_t *dion__cpu_me;

/* Launches running in this process: dion_dev_destroy waits for them as the GPU path synchronizes the device.
 */
static pthread_mutex_t dion__cpu_running_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dion__cpu_running_cond = PTHREAD_COND_INITIALIZER;
static unsigned dion__cpu_running;

static void dion__cpu_running_add(int d)
{
    pthread_mutex_lock(&dion__cpu_running_lock);
    dion__cpu_running = (unsigned)((int)dion__cpu_running + d);
    pthread_cond_broadcast(&dion__cpu_running_cond);
    pthread_mutex_unlock(&dion__cpu_running_lock);
}

dion_status_t dion__cpu_launches_wait(uint64_t timeout_ns)
{
    unsigned mine = dion__cpu_me ? 1 : 0;
    uint64_t deadline = timeout_ns ? dion__now_ns() + timeout_ns : 0;
    dion_status_t st = DION_SUCCESS;
    pthread_mutex_lock(&dion__cpu_running_lock);
    while (dion__cpu_running > mine) {
        uint64_t now = dion__now_ns();
        if (deadline && now >= deadline) {
            st = DION_ERR_TIMEOUT;
            break;
        }
        /* wake up at least every 100 ms: the condition variable's clock is CLOCK_REALTIME */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&dion__cpu_running_cond, &dion__cpu_running_lock, &ts);
    }
    pthread_mutex_unlock(&dion__cpu_running_lock);
    return st;
}

const dion_cpu_ids_t *dion__cpu_ids(void)
{
    return dion__cpu_me ? &dion__cpu_me->ids : NULL;
}

void dion__cpu_sync_block(void)
{
    if (dion__cpu_me) pthread_barrier_wait(&dion__cpu_me->blk->block);
}

void dion__cpu_sync_warp(void)
{
    if (dion__cpu_me)
        pthread_barrier_wait(&dion__cpu_me->blk->warps[dion__cpu_me->ids.thread / DION__WARP_SIZE]);
}

/* Spinning ranks share few cores in CPU mode: yield early, then sleep. */
void dion__cpu_pause(uint32_t polls)
{
    if (polls < 16) return;
    if (polls < 2048) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

uint64_t dion__cpu_time_ns(void)
{
    return dion__now_ns();
}

static void *dion__cpu_thread_main(void *p)
{
    dion__cpu_thread_t *t = p;
    pthread_mutex_lock(&t->gate->lock);
    while (t->gate->state == 0) pthread_cond_wait(&t->gate->cond, &t->gate->lock);
    int run = t->gate->state == 1;
    pthread_mutex_unlock(&t->gate->lock);
    if (!run) return NULL;
    dion__cpu_me = t;
    t->fn(t->arg);
    dion__cpu_me = NULL;
    return NULL;
}

DION_API dion_status_t dion_cpu_launch(unsigned grid, unsigned block, void (*fn)(void *), void *arg)
{
    if (!fn) return dion__error(DION_ERR_INVALID_ARG, "dion_cpu_launch: fn is NULL");
    if (grid == 0 || block == 0 || (unsigned long long)grid * block > DION__CPU_MAX_THREADS)
        return dion__error(
            DION_ERR_INVALID_ARG,
            "dion_cpu_launch: grid=%u x block=%u threads; both must be >= 1 and the product at most %d", grid,
            block, DION__CPU_MAX_THREADS);
    size_t total = (size_t)grid * block;
    uint32_t nwarps = (block + DION__WARP_SIZE - 1) / DION__WARP_SIZE;
    dion__cpu_block_t *blocks = calloc(grid, sizeof *blocks);
    dion__cpu_thread_t *threads = calloc(total, sizeof *threads);
    pthread_t *tids = calloc(total, sizeof *tids);
    dion__cpu_gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    dion_status_t st = DION_SUCCESS;
    unsigned made = 0; /* blocks whose barriers exist */
    if (!blocks || !threads || !tids) st = dion__error(DION_ERR_NO_MEMORY, "dion_cpu_launch: out of memory");
    for (; st == DION_SUCCESS && made < grid; made++) {
        dion__cpu_block_t *b = &blocks[made];
        b->warps = calloc(nwarps, sizeof *b->warps);
        if (!b->warps) {
            st = dion__error(DION_ERR_NO_MEMORY, "dion_cpu_launch: out of memory");
            break;
        }
        pthread_barrier_init(&b->block, NULL, block);
        b->nwarps = nwarps;
        for (uint32_t w = 0; w < nwarps; w++) {
            uint32_t first = w * DION__WARP_SIZE,
                     n = block - first < DION__WARP_SIZE ? block - first : DION__WARP_SIZE;
            pthread_barrier_init(&b->warps[w], NULL, n);
        }
    }
    dion__cpu_running_add(1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1u << 20);
    size_t started = 0;
    for (size_t i = 0; st == DION_SUCCESS && i < total; i++) {
        dion__cpu_thread_t *t = &threads[i];
        t->ids.block = (uint32_t)(i / block);
        t->ids.thread = (uint32_t)(i % block);
        t->ids.nblocks = grid;
        t->ids.nthreads = block;
        t->blk = &blocks[i / block];
        t->gate = &gate;
        t->fn = fn;
        t->arg = arg;
        if (pthread_create(&tids[i], &attr, dion__cpu_thread_main, t) != 0) {
            st = dion__error(
                DION_ERR_NO_MEMORY,
                "dion_cpu_launch: could only start %zu of %zu threads; nothing ran (lower the grid or "
                "block size, or raise the thread and memory limits)",
                i, total);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);
    /* All or nothing: the started threads run fn only if every thread exists. */
    pthread_mutex_lock(&gate.lock);
    gate.state = st == DION_SUCCESS ? 1 : 2;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
    for (size_t i = 0; i < started; i++) pthread_join(tids[i], NULL);
    dion__cpu_running_add(-1);
    for (unsigned b = 0; b < made && blocks; b++) {
        if (!blocks[b].warps) continue;
        pthread_barrier_destroy(&blocks[b].block);
        for (uint32_t w = 0; w < nwarps; w++) pthread_barrier_destroy(&blocks[b].warps[w]);
        free(blocks[b].warps);
    }
    pthread_mutex_destroy(&gate.lock);
    pthread_cond_destroy(&gate.cond);
    free(blocks), free(threads), free(tids);
    return st;
}
