/* gdaki over the softnic model in CPU mode, the failure paths: an error completion must make quiet return an
 * error (never hang) and dion_dev_check must name the QP, the peer and the syndrome; work requests before the
 * failed one must have landed and the failed one must not. Run by dionrun with 2 ranks and
 * DION_TRANSPORT=gdaki DION_GDAKI_NIC=softnic; modes:
 *   inject K   with DION_SOFTNIC_INJECT=remote_access@K: K puts, the K-th fails (syndrome 0x13)
 *   oob        a put past the end of the peer's window (no DION_CHECK): the model's key check fails it (0x13)
 *   badwqe     a WQE with a wrong index, written by hand: the model's invariant check fails it (0x02)
 *   selfamo    atomics on this rank's own window go through its loopback QP (context, this rank), as the
 *              peer's atomics on the same word go through the model: old values and totals right */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define CHUNK  4096u
#define WINDOW (1u << 20)

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            failures++;                                                                                      \
            fprintf(stderr, "FAIL rank %d: ", rank);                                                         \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
        }                                                                                                    \
    } while (0)

static int rank;

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int peer, mode, k;
    dion_status_t quiet1, quiet2, quiet3;
    uint64_t t_quiet2;
} job_t;

/* The WQE written by hand for badwqe: a NOP in its right slot whose control segment names another index,
 * published as device code publishes (record, then doorbell). */
static void post_bad_wqe(const dion_gdaki_qp_dev_t *q)
{
    dion_gdaki_qp_state_t *st = q->st;
    uint64_t pos = st->resv_head;
    dion__mlx5_sq_t sq = {q->sq, q->wq_mask, q->qpn};
    dion__mlx5_wqe_nop(&sq, (uint16_t)pos, DION__MLX5_CTRL_CQ_UPDATE);
    q->sq[(pos & q->wq_mask) * 64 + 2] ^= 1; /* opmod_idx_opcode's low index byte: the index is off by one */
    st->resv_head = pos + 1;
    st->last_wqe = st->last_sig = pos + 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(q->dbrec, dion__mlx5_dbr_sq_value((uint16_t)(pos + 1)), __ATOMIC_RELEASE);
    __atomic_store_n(q->db, dion__mlx5_db_value((uint16_t)(pos + 1), q->qpn), __ATOMIC_RELEASE);
    __atomic_store_n(&st->ready_head, pos + 1, __ATOMIC_RELEASE);
}

/* selfamo: both ranks add to both words 0 (rank 0's) and 8 (rank 1's) of each other's windows and their own,
 * K times each, and one CAS round on the own word 16; then K ADDs to signal 3 of the peer and of itself, and
 * one put_signal to itself (8 bytes to word 24, ADD 1 to signal 3). The own ones must go through the loopback
 * QP: the peer's signals reach the same word through the NIC. */
static void kernel_self(job_t *j)
{
    dion_ctx_t c = dion_ctx(j->dev, 0);
    int me = j->dev.rank;
    uint64_t prev = 0;
    for (int i = 0; i < j->k; i++) {
        uint64_t o = dion_atomic_fetch_add(c, j->win, me, 0, 1);
        if (i && o <= prev) j->quiet1 = DION_ERR_INTERNAL; /* old values of one thread's adds grow */
        prev = o;
        dion_atomic_fetch_add(c, j->win, j->peer, 0, 1);
    }
    uint64_t cur = dion_atomic_fetch_add(c, j->win, me, 16, 0);
    for (int i = 0; i < j->k; i++) {
        uint64_t old = dion_atomic_compare_swap(c, j->win, me, 16, cur, cur + 1);
        if (old != cur) j->quiet2 = DION_ERR_INTERNAL; /* nobody else swaps word 16: every CAS succeeds */
        cur = cur + 1;
    }
    for (int i = 0; i < j->k; i++) {
        dion_signal(c, me, 3, DION_SIG_ADD, 1);
        dion_signal(c, j->peer, 3, DION_SIG_ADD, 1);
    }
    dion_put_signal(c, j->win, me, 24, j->win, WINDOW / 2, 8, 3, DION_SIG_ADD, 1);
    j->quiet3 = dion_wait(c, 3, DION_CMP_EQ, (uint64_t)(2 * j->k + 1), NULL);
}

static void kernel(void *p)
{
    job_t *j = p;
    dion_ctx_t c = dion_ctx(j->dev, 0);
    if (j->mode == 3) {
        kernel_self(j);
        return;
    }
    if (j->mode == 0) { /* inject: K puts of CHUNK bytes each to their own slot */
        for (int i = 0; i < j->k; i++)
            dion_put(c, j->win, j->peer, (size_t)i * CHUNK, j->win, WINDOW / 2 + (size_t)i * CHUNK, CHUNK);
    } else if (j->mode == 1) { /* oob */
        dion_put(c, j->win, j->peer, 0, j->win, WINDOW / 2, CHUNK);
        dion_put(c, j->win, j->peer, WINDOW - 8, j->win, WINDOW / 2, 64);
    } else {
        dion_put(c, j->win, j->peer, 0, j->win, WINDOW / 2, CHUNK);
        post_bad_wqe(&j->dev.gdaki->qps[(size_t)j->peer]);
    }
    j->quiet1 = dion_quiet(c);
    /* the QP is in error: later work fails at once, never waits for the timeout */
    uint64_t t0 = dion__time_ns();
    dion_put(c, j->win, j->peer, 0, j->win, WINDOW / 2, 8);
    j->quiet2 = dion_quiet(c);
    j->t_quiet2 = dion__time_ns() - t0;
}

static int has(const char *text, const char *words)
{
    if (strstr(text, words)) return 1;
    fprintf(stderr, "FAIL rank %d: the report does not say \"%s\": %s\n", rank, words, text);
    failures++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    int mode = !strcmp(argv[1], "inject")    ? 0
               : !strcmp(argv[1], "oob")     ? 1
               : !strcmp(argv[1], "badwqe")  ? 2
               : !strcmp(argv[1], "selfamo") ? 3
                                             : -1;
    int k = argc > 2 ? atoi(argv[2]) : 1;
    if (mode < 0 || k < 1 || (size_t)k * CHUNK > WINDOW / 2) return 2;
    dion_comm_t comm;
    if (dion_comm_init_env(&comm) != DION_SUCCESS) {
        fprintf(stderr, "comm: %s\n", dion_last_error());
        return 1;
    }
    rank = dion_comm_rank(comm);
    int n = dion_comm_size(comm), peer = rank ^ 1;
    if (n != 2) return 2;
    void *base = NULL;
    dion_win_t win;
    dion_dev_t dev;
    if (dion_win_alloc(comm, WINDOW, 1, &base, &win) != DION_SUCCESS ||
        dion_dev_create(comm, NULL, &dev) != DION_SUCCESS) {
        fprintf(stderr, "FAIL rank %d: setup: %s\n", rank, dion_last_error());
        return 1;
    }
    CHECK(dev.flags & DION_DEVF_GDAKI, "the handle reaches rank %d through %u, not gdaki", peer,
          dev.peers[peer].transport);
    unsigned char *mem = base;
    memset(mem, 0, WINDOW);
    for (size_t i = WINDOW / 2; i < WINDOW; i++) mem[i] = (unsigned char)(i * 7 + (size_t)rank * 13 + 1);
    dion_comm_barrier(comm);

    job_t j = {dev, dion_win_device(win), peer, mode, k, DION_SUCCESS, DION_SUCCESS, DION_SUCCESS, 0};
    if (dion_cpu_launch(1, 1, kernel, &j) != DION_SUCCESS) {
        fprintf(stderr, "FAIL rank %d: launch: %s\n", rank, dion_last_error());
        return 1;
    }
    if (mode == 3) {
        const dion_gdaki_qp_dev_t *self = &dev.gdaki->qps[rank];
        CHECK(self->flags & DION_GDAKI_QP_UP, "no loopback QP (context 0, rank %d)", rank);
        /* 2k+1 atomics, k signals and a put_signal's signal: one WQEBB each */
        CHECK((self->flags & DION_GDAKI_QP_UP) && self->st->last_wqe >= (uint64_t)(3 * k + 2),
              "own atomics and signals did not go through the loopback QP (%llu WQEBBs posted there, "
              "expected %d)",
              (self->flags & DION_GDAKI_QP_UP) ? (unsigned long long)self->st->last_wqe : 0ull, 3 * k + 2);
        CHECK(j.quiet3 == DION_SUCCESS, "signal 3 never held %d (own and the peer's ADDs): %s", 2 * k + 1,
              dion_status_string(j.quiet3));
        uint64_t w24, src;
        memcpy(&w24, mem + 24, 8);
        memcpy(&src, mem + WINDOW / 2, 8);
        CHECK(w24 == src, "the put_signal to itself did not land its 8 bytes");
        CHECK(j.quiet1 == DION_SUCCESS, "the old values of one thread's own adds did not grow");
        CHECK(j.quiet2 == DION_SUCCESS, "a CAS on the own word that nobody else touches failed");
        dion_comm_barrier(comm);
        uint64_t w0 = __atomic_load_n((uint64_t *)mem, __ATOMIC_SEQ_CST);
        uint64_t w16 = __atomic_load_n((uint64_t *)(mem + 16), __ATOMIC_SEQ_CST);
        CHECK(w0 == (uint64_t)(2 * k), "word 0 holds %llu, expected %d", (unsigned long long)w0, 2 * k);
        CHECK(w16 == (uint64_t)k, "word 16 holds %llu, expected %d", (unsigned long long)w16, k);
        CHECK(dion_dev_check(comm, &dev) == DION_SUCCESS, "dion_dev_check: %s", dion_last_error());
        dion_comm_barrier(comm);
        dion_dev_destroy(comm, &dev);
        dion_win_destroy(win);
        dion_comm_destroy(comm);
        printf("%s rank %d: selfamo\n", failures ? "FAIL" : "PASS", rank);
        return failures ? 1 : 0;
    }
    dion_status_t want = mode == 2 ? DION_ERR_INTERNAL : DION_ERR_REMOTE_ACCESS;
    CHECK(j.quiet1 == want, "quiet returned %s, expected %s", dion_status_string(j.quiet1),
          dion_status_string(want));
    CHECK(j.quiet2 == want, "quiet after the failure returned %s", dion_status_string(j.quiet2));
    CHECK(j.t_quiet2 < 1000000000ull, "a put and quiet on the failed QP took %.3f s",
          (double)j.t_quiet2 / 1e9);

    dion_status_t ck = dion_dev_check(comm, &dev);
    const char *text = dion_last_error();
    CHECK(ck == want, "dion_dev_check returned %s: %s", dion_status_string(ck), text);
    char who[64];
    snprintf(who, sizeof who, "to rank %d", peer);
    const char *syn = mode == 2 ? "syndrome 0x02" : "syndrome 0x13";
    has(text, "gdaki QP 0x");
    has(text, who);
    has(text, syn);
    has(text, mode == 2 ? "local QP operation error" : "remote access error");
    if (mode == 0) has(text, "injected by DION_SOFTNIC_INJECT");
    if (mode == 1) has(text, "names no registration");
    if (mode == 2) has(text, "broken invariant: the WQE at WQEBB");
    printf("rank %d: %s\n", rank, text);

    /* what landed: every put before the failed one, and not the failed one */
    dion_comm_barrier(comm);
    const unsigned char *src = mem; /* the peer's pattern, as it wrote it into this rank's window */
    int landed = mode == 0 ? k - 1 : 1;
    for (int i = 0; i < landed; i++)
        for (size_t b = 0; b < CHUNK; b++) {
            size_t s = WINDOW / 2 + (size_t)i * CHUNK + b;
            if (src[(size_t)i * CHUNK + b] != (unsigned char)(s * 7 + (size_t)peer * 13 + 1)) {
                CHECK(0, "put %d from rank %d did not land whole (byte %zu)", i, peer, b);
                break;
            }
        }
    if (mode == 0)
        for (size_t b = 0; b < CHUNK; b++)
            if (src[(size_t)(k - 1) * CHUNK + b]) {
                CHECK(0, "the failed put %d from rank %d wrote byte %zu", k - 1, peer, b);
                break;
            }
    dion_comm_barrier(comm);
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    printf("%s rank %d: %s\n", failures ? "FAIL" : "PASS", rank, argv[1]);
    return failures ? 1 : 0;
}
