/* What libfabric's shm provider costs for the operations the proxy's ofi engine posts, without DION: an
 * 8-byte signal as a fetching atomic (what the engine posts) or a plain one, after an 8-byte write or
 * alone, over shm's ordered variant (the engine's: FI_ORDER_* asked, mr_mode 0) and over its unordered
 * "fast RMA" variant (FI_MR_VIRT_ADDR, no order: writes are the sender's own CMA copy).
 *   ofi_shm_probe [iters]
 * one: one thread drives both endpoints: the initiator's post call, the target's progress until the word
 *      changed, the initiator's progress until its completion (CPU cost with warm caches; medians, ns).
 * pingpong: two processes, each spinning on its completion queue; the one-way time of a signal from one
 *      process's CPU to the other's (the proxy-to-proxy hop of a DION signal, without the GPU legs).
 * Every signal is checked to arrive with its value, and its write's data before it. libfabric is loaded at
 * run time (libfabric.so.1), as the engine does. docs/backends/proxy.md uses the numbers. */
#include <sys/mman.h>
#include <sys/wait.h>

#include "ofi_probe.h"

static const op_t OPS[] = {
    {"fetch-atomic SET", 0, 1, 0},         {"atomic SET (no fetch)", 0, 0, 0},
    {"atomic SET + fetch-add 0", 0, 0, 1}, {"write 8B + fetch-atomic SET", 1, 1, 0},
    {"write 8B + atomic SET", 1, 0, 0},    {"write 8B + atomic SET + fetch-add 0", 1, 0, 1}};

static void check_arrival(const side_t *s, const op_t *op, uint64_t v)
{
    if (op->write && __atomic_load_n(&s->mem[1], __ATOMIC_RELAXED) != v) {
        fprintf(stderr, "FAIL %s: the signal %llu arrived before its data (%llu)\n", op->name,
                (unsigned long long)v, (unsigned long long)s->mem[1]);
        exit(1);
    }
}

static void run_one(int ordered, int iters)
{
    struct fi_info *i = info_for(ordered);
    side_t a, b;
    card_t ca, cb;
    memset(&ca, 0, sizeof ca);
    memset(&cb, 0, sizeof cb);
    side_open(&a, i, 1);
    side_open(&b, i, 2);
    card_fill(&ca, &a);
    card_fill(&cb, &b);
    fi_addr_t to = side_connect(&a, &cb);
    (void)side_connect(&b, &ca);
    uint64_t *tp = malloc(sizeof *tp * iters), *tt = malloc(sizeof *tt * iters),
             *tc = malloc(sizeof *tc * iters);
    uint64_t src = 0, res = 0;
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        const op_t *op = &OPS[k];
        for (int it = 0; it < iters; it++) {
            uint64_t v = ((uint64_t)(k + 1) << 40) + (uint64_t)it + 1;
            uint64_t t0 = now_ns();
            post(&a, &b, to, &cb, op, &src, &res, v);
            uint64_t t1 = now_ns();
            while (__atomic_load_n(&b.mem[0], __ATOMIC_ACQUIRE) != v) progress(&b, NULL);
            uint64_t t2 = now_ns();
            check_arrival(&b, op, v);
            int got = 0;
            while (got < 1 + op->write + op->flush) progress(&a, &got);
            tp[it] = t1 - t0;
            tt[it] = t2 - t1;
            tc[it] = now_ns() - t2;
        }
        qsort(tp, iters, 8, cmp_u64);
        qsort(tt, iters, 8, cmp_u64);
        qsort(tc, iters, 8, cmp_u64);
        printf("one      %-8s %-36s post %5llu  target %5llu  completion %5llu ns (medians)\n",
               ordered ? "ordered" : "fastrma", op->name, (unsigned long long)tp[iters / 2],
               (unsigned long long)tt[iters / 2], (unsigned long long)tc[iters / 2]);
    }
    free(tp);
    free(tt);
    free(tc);
}

/* Two processes: the parent times round trips (its signal, the child's answer) and reports half. */
static void run_pingpong(int ordered, int iters)
{
    card_t *cards = mmap(NULL, 2 * sizeof(card_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(cards, 0, 2 * sizeof(card_t));
    fflush(stdout);
    pid_t pid = fork();
    int me = pid == 0;
    struct fi_info *i = info_for(ordered);
    side_t s;
    side_open(&s, i, 10 + (uint64_t)me);
    card_fill(&cards[me], &s);
    fi_addr_t to = side_connect(&s, &cards[1 - me]);
    uint64_t *rt = malloc(sizeof *rt * iters), src = 0, res = 0;
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        const op_t *op = &OPS[k];
        int pending = 0;
        for (int it = 0; it < iters + 100; it++) {
            uint64_t v = ((uint64_t)(k + 1) << 40) + (uint64_t)it + 1, t0 = now_ns();
            if (!me) post(&s, NULL, to, &cards[1], op, &src, &res, v);
            while (__atomic_load_n(&s.mem[0], __ATOMIC_ACQUIRE) != v) progress(&s, &pending);
            check_arrival(&s, op, v);
            if (me) post(&s, NULL, to, &cards[0], op, &src, &res, v);
            if (!me && it >= 100) rt[it - 100] = now_ns() - t0;
            progress(&s, &pending); /* own completions, not waited for: as the engine, in the next pass */
        }
        if (!me) {
            qsort(rt, iters, 8, cmp_u64);
            printf("pingpong %-8s %-36s one-way %5llu ns (median; p10 %llu, p90 %llu)\n",
                   ordered ? "ordered" : "fastrma", op->name, (unsigned long long)rt[iters / 2] / 2,
                   (unsigned long long)rt[iters / 10] / 2, (unsigned long long)rt[iters * 9 / 10] / 2);
        }
        /* both sides drain their completions before the next op kind */
        uint64_t until = now_ns() + 20000000ull;
        while (now_ns() < until) progress(&s, &pending);
    }
    fflush(stdout);
    if (me) _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "FAIL the ping-pong child exited with %d\n", status);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    int rc = ofi_probe_load("ofi_shm_probe");
    if (rc) return rc;
    if (iters < 100) iters = 100;
    for (int ordered = 1; ordered >= 0; ordered--) run_one(ordered, iters);
    for (int ordered = 1; ordered >= 0; ordered--) run_pingpong(ordered, iters);
    return 0;
}
