/* DION_TRACE test (included by conformance.h, mode "trace"): ranks 0 and 1 play a put_signal ping-pong of
 * DT_TRACE_ROUNDS rounds on context 0, check every round's bytes, then quiet context 0 and signal once on
 * context 1, then meet in a device barrier on context 2. tests/common/trace_check.py then checks each rank's
 * trace file: one put_signal and one wait per round with the round's size and value, one quiet, one signal
 * instant on track 1, a quiet and a barrier on track 2, and what was dropped. */
#ifndef DION_TEST_TRACE_H
#define DION_TEST_TRACE_H

#define DT_TRACE_ROUNDS                                                                                      \
    200 /* tests/cpu/trace.cmake and tests/gpu/CMakeLists.txt pass the same to the checker */
#define DT_TRACE_DST 4096

/* Bytes of round k (1-based): 1 to 249, so that sizes vary; trace_check.py computes the same. */
DION_HD uint64_t dt_trace_bytes(uint64_t k)
{
    return 1 + (k * 37) % 249;
}

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    uint32_t rounds;
    uint64_t *result; /* [0] data or call failures, [1] rounds completed */
} dt_trace_args_t;

DT_KERNEL(dt_trace_kernel, dt_trace_args_t)
{
    if (dion__block_thread() != 0) return;
    int me = a->dev.rank, peer = 1 - me;
    if (me > 1) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    char *mine = dion__win_peer(a->win, me)->base;
    for (uint64_t k = 1; k <= a->rounds; k++) {
        uint64_t n = dt_trace_bytes(k), seen = 0;
        if (me == 1) { /* rank 1 answers: wait for round k, check it, send round k back */
            if (dion_wait(c, 0, DION_CMP_GE, k, &seen) != DION_SUCCESS || seen != k) a->result[0]++;
            for (uint64_t i = 0; i < n; i++)
                if ((uint8_t)mine[DT_TRACE_DST + i] != dt_byte(peer, k, i)) a->result[0]++;
        }
        for (uint64_t i = 0; i < n; i++) mine[i] = (char)dt_byte(me, k, i);
        dion_put_signal(c, a->win, peer, DT_TRACE_DST, a->win, 0, n, 0, DION_SIG_SET, k);
        if (me == 0) {
            if (dion_wait(c, 0, DION_CMP_GE, k, &seen) != DION_SUCCESS || seen != k) a->result[0]++;
            for (uint64_t i = 0; i < n; i++)
                if ((uint8_t)mine[DT_TRACE_DST + i] != dt_byte(peer, k, i)) a->result[0]++;
        }
        a->result[1] = k;
    }
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
    dion_signal(dion_ctx(a->dev, 1), peer, 1, DION_SIG_ADD, 1);
    if (a->dev.nranks == 2 && dion_barrier(dion_ctx(a->dev, 2)) != DION_SUCCESS) a->result[0]++;
}

static void dt_test_trace(dion_win_t win)
{
    if (dt_n < 2) {
        DT_FAIL("the trace test needs 2 ranks");
        return;
    }
    uint64_t *result = (uint64_t *)dt_alloc(sizeof(uint64_t) * DT_RESULTS);
    dt_trace_args_t a = {dt_dev, dion_win_device(win), DT_TRACE_ROUNDS, result};
    DT_OK(dion_comm_barrier(dt_comm));
    if (DT_LAUNCH(dt_trace_kernel, 1, 1, &a)) DT_FAIL("launch failed");
    uint64_t r[2];
    dt_get(r, result, sizeof r);
    if (dt_rank < 2 && (r[0] || r[1] != DT_TRACE_ROUNDS))
        DT_FAIL("ping-pong: %llu failed checks, %llu of %d rounds", (unsigned long long)r[0],
                (unsigned long long)r[1], DT_TRACE_ROUNDS);
    DT_OK(dion_comm_barrier(dt_comm));
    dt_free(result);
}

#endif /* DION_TEST_TRACE_H */
