/* What docs/semantics.md promises and the code must keep (issue 7, defect 9), in CPU mode:
 *   ctx    with DION_CHECK=1, a context with a bad index made by a thread other than the block's first is
 *          recorded by every call on it, fence, quiet, signal_read and barrier included, and nothing is done;
 *   abort  after rank 1 aborts the comm, rank 0's dion_dev_check returns DION_ERR_ABORTED and names rank 1
 *          (the rank written next to the abort word). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

static int failures;
#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                 \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        failures++;                                                                                          \
    } while (0)
#define OK(call)                                                                                             \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, dion_status_string(s_), \
                    dion_last_error());                                                                      \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* ---- ctx ---- */

#define CTX_THREAD 5
#define CTX_OPS    11

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint64_t ret[4];
} ctx_args_t;

static void ctx_kernel(void *p)
{
    ctx_args_t *a = p;
    if (dion__block_thread() != CTX_THREAD) return;
    dion_ctx_t c = dion_ctx(a->dev, a->dev.num_contexts + 3);
    dion_put(c, a->win, 0, 64, a->win, 0, 8);
    dion_put_signal(c, a->win, 0, 64, a->win, 0, 8, 1, DION_SIG_SET, 1);
    dion_signal(c, 0, 1, DION_SIG_SET, 2);
    a->ret[0] = (uint64_t)dion_wait(c, 0, DION_CMP_EQ, 0, NULL);
    a->ret[1] = dion_signal_read(c, 0) + 100;
    dion_fence(c);
    a->ret[2] = (uint64_t)dion_quiet(c);
    a->ret[3] = (uint64_t)dion_barrier(c);
    dion_get(c, a->win, 128, a->win, 0, 0, 8);
    dion_atomic_fetch_add(c, a->win, 0, 256, 1);
    dion_atomic_compare_swap(c, a->win, 0, 256, 0, 1);
}

static void test_ctx(void)
{
    setenv("DION_CHECK", "1", 1);
    dion_unique_id_t id;
    dion_comm_t comm;
    OK(dion_get_unique_id(&id));
    OK(dion_comm_init_rank(&comm, 1, &id, 0));
    void *base;
    dion_win_t win;
    OK(dion_win_alloc(comm, 4096, 1, &base, &win));
    memset(base, 0x5a, 4096);
    dion_dev_attr_t attr = {16, 2, 0, DION_DEV_FLAG_CPU};
    dion_dev_t dev;
    OK(dion_dev_create(comm, &attr, &dev));
    ctx_args_t a;
    memset(&a, 0, sizeof a);
    a.dev = dev;
    a.win = dion_win_device(win);
    OK(dion_cpu_launch(1, 8, ctx_kernel, &a));
    static const dion_op_t want[CTX_OPS] = {DION_OP_PUT,       DION_OP_PUT_SIGNAL,  DION_OP_SIGNAL,
                                            DION_OP_WAIT,      DION_OP_SIGNAL_READ, DION_OP_FENCE,
                                            DION_OP_QUIET,     DION_OP_BARRIER,     DION_OP_GET,
                                            DION_OP_FETCH_ADD, DION_OP_COMPARE_SWAP};
    int seen[DION_OP_CTX + 1] = {0}, records = 0;
    for (int s = 0; s < DION_ERR_RING; s++) {
        const dion_err_record_t *r = &dev.errors->rec[s];
        if (!r->seq) continue;
        records++;
        if (r->thread != CTX_THREAD || r->ctx != attr.num_contexts + 3 || r->status != DION_ERR_INVALID_ARG ||
            r->op > DION_OP_CTX)
            FAIL("record of op %u by thread %u ctx %u status %u does not describe the bad context", r->op,
                 r->thread, r->ctx, r->status);
        else
            seen[r->op]++;
    }
    for (int i = 0; i < CTX_OPS; i++)
        if (seen[want[i]] != 1)
            FAIL("op %d: %d records of the bad context, expected 1", (int)want[i], seen[want[i]]);
    if (a.ret[0] != DION_ERR_INVALID_ARG || a.ret[1] != 100 || a.ret[2] != DION_ERR_INVALID_ARG ||
        a.ret[3] != DION_ERR_INVALID_ARG)
        FAIL("wait / signal_read / quiet / barrier on the bad context returned %llu %llu %llu %llu",
             (unsigned long long)a.ret[0], (unsigned long long)a.ret[1] - 100, (unsigned long long)a.ret[2],
             (unsigned long long)a.ret[3]);
    unsigned char *b = base;
    for (int i = 0; i < 4096; i++)
        if (b[i] != 0x5a) {
            FAIL("a call on the bad context wrote byte %d of the window", i);
            break;
        }
    dion_status_t st = dion_dev_check(comm, &dev);
    char more[64];
    snprintf(more, sizeof more, "and %d more device errors", CTX_OPS - 1);
    if (st != DION_ERR_INVALID_ARG ||
        !strstr(dion_last_error(), "context index 5 is not below num_contexts=2") ||
        !strstr(dion_last_error(), "thread 5") || !strstr(dion_last_error(), more))
        FAIL("dion_dev_check: %s: %s", dion_status_string(st), dion_last_error());
    else
        printf("  %s\n", dion_last_error());
    OK(dion_dev_destroy(comm, &dev));
    OK(dion_win_destroy(win));
    OK(dion_comm_destroy(comm));
    printf("%s: a bad context made by thread %d: %d records, one per call\n", failures ? "FAIL" : "PASS",
           CTX_THREAD, records);
}

/* ---- abort ---- */

static void test_abort(void)
{
    dion_unique_id_t id;
    int fds[2];
    if (pipe(fds) != 0) exit(1);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] != 0) continue;
        close(fds[1]);
        if (read(fds[0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
        dion_comm_t comm;
        OK(dion_comm_init_rank(&comm, 2, &id, r));
        dion_dev_attr_t attr = {16, 1, 0, DION_DEV_FLAG_CPU};
        dion_dev_t dev;
        OK(dion_dev_create(comm, &attr, &dev));
        OK(dion_dev_check(comm, &dev));
        OK(dion_comm_barrier(comm));
        if (r == 1) OK(dion_comm_abort(comm));
        dion_comm_barrier(comm); /* fails on both ranks once the abort went round */
        dion_status_t st = dion_dev_check(comm, &dev);
        if (st != DION_ERR_ABORTED || !strstr(dion_last_error(), "rank 1 aborted"))
            FAIL("rank %d: dion_dev_check after rank 1 aborted: %s: %s", r, dion_status_string(st),
                 dion_last_error());
        else if (r == 0)
            printf("  rank 0: %s\n", dion_last_error());
        fflush(stdout);
        dion_dev_destroy(comm, &dev);
        dion_comm_destroy(comm);
        _exit(failures ? 1 : 0);
    }
    close(fds[0]);
    OK(dion_get_unique_id(&id));
    for (int r = 0; r < 2; r++)
        if (write(fds[1], &id, sizeof id) != (ssize_t)sizeof id) exit(1);
    close(fds[1]);
    for (int r = 0; r < 2; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL("rank %d ended with status 0x%x", r, status);
    }
    printf("%s: dion_dev_check names the rank that aborted\n", failures ? "FAIL" : "PASS");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "ctx"))
        test_ctx();
    else if (!strcmp(mode, "abort"))
        test_abort();
    else {
        fprintf(stderr, "usage: %s ctx|abort\n", argv[0]);
        return 2;
    }
    return failures ? 1 : 0;
}
