/* Arguments that ranks must agree on, stale windows, alignment and sizes, and windows a CPU-mode handle
 * cannot read (issue 7, defects 1, 2, 3 and 5), written once for CPU mode and GPUs. A runner
 * (tests/cpu/win_safety_cpu.c, tests/gpu/win_safety_gpu.cu) includes this file after defining what
 * tests/common/conformance.h describes (DT_KERNEL, DT_LAUNCH, dt_alloc, dt_free, dt_get, dt_put, DT_ON_HOST)
 * and WS_RUN_EXTRA(mode), which runs runner-only modes and evaluates to 1 when it knew the mode.
 * Modes: args, stale, align, badwin (DION_CHECK=1 for all but args). Every check fails loudly. */
#ifndef DION_TEST_WIN_SAFETY_H
#define DION_TEST_WIN_SAFETY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

static int ws_rank, ws_n, ws_failures;
static dion_comm_t ws_comm;

#define WS_FAIL(...)                                                                                         \
    do {                                                                                                     \
        fprintf(stderr, "FAIL rank %d %s:%d: ", ws_rank, __FILE__, __LINE__);                                \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        ws_failures++;                                                                                       \
    } while (0)
#define WS_OK(call)                                                                                          \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) {                                                                            \
            fprintf(stderr, "FAIL rank %d %s:%d: %s -> %s: %s\n", ws_rank, __FILE__, __LINE__, #call,        \
                    dion_status_string(s_), dion_last_error());                                              \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* A call that must fail with status want and a sentence containing every given fragment. */
static void ws_expect(dion_status_t got, dion_status_t want, const char *call, const char *frag1,
                      const char *frag2)
{
    const char *msg = dion_last_error();
    if (got != want)
        WS_FAIL("%s returned %s, expected %s (%s)", call, dion_status_string(got), dion_status_string(want),
                got ? msg : "no error");
    else if ((frag1 && !strstr(msg, frag1)) || (frag2 && !strstr(msg, frag2)))
        WS_FAIL("%s: the sentence lacks \"%s\"%s%s%s: %s", call, frag1 ? frag1 : "", frag2 ? " or \"" : "",
                frag2 ? frag2 : "", frag2 ? "\"" : "", msg);
    else if (ws_rank == 0)
        printf("  %s: %s\n", call, msg);
}

/* Empties the handle's error ring. */
static void ws_drain(const dion_dev_t *dev)
{
    for (int i = 0; i < 1000 && dion_dev_check(ws_comm, dev) != DION_SUCCESS; i++) {
    }
}

/* ================================================================================================ */
/* Defect 1: collective arguments of dion_dev_create must agree.                                     */

typedef struct {
    dion_dev_t dev;
    uint32_t sig;
    uint64_t *result;
} ws_sig_args_t;

DT_KERNEL(ws_sig_kernel, ws_sig_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, a->dev.num_contexts - 1);
    int me = a->dev.rank, n = a->dev.nranks;
    dion_signal(c, (me + 1) % n, a->sig, DION_SIG_ADD, (uint64_t)me + 1);
    uint64_t seen = 0;
    if (dion_wait(c, a->sig, DION_CMP_EQ, (uint64_t)((me + n - 1) % n) + 1, &seen) != DION_SUCCESS)
        a->result[0]++;
    a->result[1] = seen;
    if (dion_barrier(c) != DION_SUCCESS) a->result[0]++;
}

/* dion_dev_create with attr on this rank must fail on every rank with a sentence containing want. */
static void ws_create_rejected(const dion_dev_attr_t *attr, const char *want)
{
    dion_dev_t dev;
    dion_status_t st = dion_dev_create(ws_comm, attr, &dev);
    ws_expect(st, DION_ERR_INVALID_ARG, "dion_dev_create with disagreeing arguments", want, NULL);
    if (st == DION_SUCCESS) dion_dev_destroy(ws_comm, &dev);
}

static void ws_test_args(void)
{
    char want[160];
    /* num_signals differs on rank 1 only: the others' signals would land on rank 1's control words */
    dion_dev_attr_t a1 = {ws_rank == 1 ? 128u : 64u, 2, 0, 0};
    snprintf(want, sizeof want, "num_signals differs across ranks: rank 0 asked 64, rank 1 asked 128");
    ws_create_rejected(&a1, want);
    /* num_contexts differs on every rank but 0 */
    dion_dev_attr_t a2 = {64, ws_rank == 0 ? 2u : 3u + (uint32_t)ws_rank, 0, 0};
    snprintf(want, sizeof want, "num_contexts differs across ranks: rank 0 asked 2, rank 1 asked 4%s",
             ws_n > 2 ? " (and" : "");
    ws_create_rejected(&a2, want);
    /* DION_CHECK on rank 1 only */
    const char *old = getenv("DION_CHECK");
    setenv("DION_CHECK", ws_rank == 1 ? "1" : "0", 1);
    dion_dev_attr_t a3 = {64, 2, 0, 0};
    ws_create_rejected(&a3, "DION_CHECK differs across ranks: rank 0 has it off, rank 1 on");
    if (old)
        setenv("DION_CHECK", old, 1);
    else
        unsetenv("DION_CHECK");

    /* Agreeing arguments work: defaults spelled two ways, timeouts and DION_STATS that differ (each governs
     * only its own rank). Signals then land on the right word of every peer. */
    setenv("DION_STATS", ws_rank == 1 ? "1" : "0", 1);
    dion_dev_attr_t ok = {ws_rank == 0 ? 0u : 1024u, 2, 2000000000ull + 1000000ull * (uint64_t)ws_rank, 0};
    dion_dev_t dev;
    WS_OK(dion_dev_create(ws_comm, &ok, &dev));
    unsetenv("DION_STATS");
    if (dev.num_signals != 1024) WS_FAIL("num_signals 0 did not mean 1024 (%u)", dev.num_signals);
    uint64_t *result = (uint64_t *)dt_alloc(64);
    ws_sig_args_t k = {dev, 1023, result};
    if (DT_LAUNCH(ws_sig_kernel, 1, 1, &k)) WS_FAIL("launch failed");
    uint64_t r[2];
    dt_get(r, result, sizeof r);
    if (r[0] || r[1] != (uint64_t)((ws_rank + ws_n - 1) % ws_n) + 1)
        WS_FAIL("signal 1023: %llu failures, value %llu", (unsigned long long)r[0], (unsigned long long)r[1]);
    if (dion_dev_check(ws_comm, &dev) != DION_SUCCESS) WS_FAIL("device errors: %s", dion_last_error());
    dt_free(result);
    WS_OK(dion_dev_destroy(ws_comm, &dev));
}

/* ================================================================================================ */
/* Defect 2: a destroyed window is recognized on the host and, with DION_CHECK=1, on the device.     */

#define WS_BYTES 8192

typedef struct {
    dion_dev_t dev;
    dion_dwin_t stale, live;
    uint64_t *result;
} ws_stale_args_t;

#define WS_STALE_OPS 5

DT_KERNEL(ws_stale_kernel, ws_stale_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int next = (a->dev.rank + 1) % a->dev.nranks;
    dion_put(c, a->stale, next, 128, a->live, 0, 64);                          /* stale destination */
    dion_put(c, a->live, next, 128, a->stale, 0, 64);                          /* stale source */
    dion_put_signal(c, a->stale, next, 0, a->live, 0, 64, 0, DION_SIG_ADD, 1); /* stale destination */
    dion_get(c, a->live, 256, a->stale, next, 0, 64);                          /* stale source */
    a->result[1] = dion_atomic_fetch_add(c, a->stale, next, 0, 1);
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
}

static void ws_fill(void *base, uint8_t seed)
{
    uint8_t *host = (uint8_t *)malloc(WS_BYTES);
    for (size_t i = 0; i < WS_BYTES; i++) host[i] = (uint8_t)(seed + 7 * i);
    dt_put(base, host, WS_BYTES);
    free(host);
}

static void ws_verify(const void *base, uint8_t seed, const char *what)
{
    uint8_t *host = (uint8_t *)malloc(WS_BYTES);
    dt_get(host, base, WS_BYTES);
    for (size_t i = 0; i < WS_BYTES; i++)
        if (host[i] != (uint8_t)(seed + 7 * i)) {
            WS_FAIL("%s: byte %zu changed (0x%02x): a call through a destroyed window wrote into it", what, i,
                    host[i]);
            break;
        }
    free(host);
}

/* Uses stale (destroyed, its memory replaced by a window of the same size) through every window operation:
 * each must be an error record naming the destroyed window, and no live window may change. */
static void ws_stale_round(const dion_dev_t *dev, dion_dwin_t stale, dion_win_t live, void *live_base,
                           const char *which)
{
    void *nbase = NULL;
    dion_win_t fresh;
    WS_OK(dion_win_alloc(ws_comm, WS_BYTES, DT_ON_HOST, &nbase, &fresh)); /* may reuse the freed memory */
    ws_fill(nbase, 0x31);
    ws_fill(live_base, 0x77);
    uint64_t sig0 = 0, sig1 = 0;
    dt_get(&sig0, dev->signals, 8);
    ws_drain(dev);
    WS_OK(dion_comm_barrier(ws_comm));
    uint64_t *result = (uint64_t *)dt_alloc(64);
    ws_stale_args_t k = {*dev, stale, dion_win_device(live), result};
    if (DT_LAUNCH(ws_stale_kernel, 1, 1, &k)) WS_FAIL("%s: launch failed", which);
    WS_OK(dion_comm_barrier(ws_comm));
    ws_verify(nbase, 0x31, "the window made after the destroy");
    ws_verify(live_base, 0x77, "a live window");
    dt_get(&sig1, dev->signals, 8);
    if (sig1 != sig0) WS_FAIL("%s: a rejected put_signal signalled", which);
    char want[64];
    snprintf(want, sizeof want, "and %d more", WS_STALE_OPS - 1);
    ws_expect(dion_dev_check(ws_comm, dev), DION_ERR_INVALID_ARG, which, "was destroyed", want);
    dt_free(result);
    WS_OK(dion_comm_barrier(ws_comm));
    WS_OK(dion_win_destroy(fresh));
}

static void ws_test_stale(void)
{
    void *b1 = NULL, *b2 = NULL, *lb = NULL;
    dion_win_t w1, w2, live;
    WS_OK(dion_win_alloc(ws_comm, WS_BYTES, DT_ON_HOST, &b1, &w1)); /* in the handle's window slots */
    WS_OK(dion_win_alloc(ws_comm, WS_BYTES, DT_ON_HOST, &lb, &live));
    dion_dev_attr_t attr = {64, 1, 0, 0};
    dion_dev_t dev;
    WS_OK(dion_dev_create(ws_comm, &attr, &dev));
    if (!(dev.flags & DION_DEVF_CHECK)) WS_FAIL("run with DION_CHECK=1");
    WS_OK(dion_win_alloc(ws_comm, WS_BYTES, DT_ON_HOST, &b2, &w2)); /* read through its descriptor */

    dion_dwin_t d1 = dion_win_device(w1), d2 = dion_win_device(w2);
    WS_OK(dion_win_destroy(w1));
    ws_stale_round(&dev, d1, live, lb, "a destroyed window named in the handle's slots");
    WS_OK(dion_win_destroy(w2));
    ws_stale_round(&dev, d2, live, lb, "a destroyed window made after the handle");

    /* The host handle of a destroyed window: recognized, never used. */
    if (dion_win_device(w1) != NULL) WS_FAIL("dion_win_device of a destroyed window is not NULL");
    if (dion_win_size(w2, 0) != 0) WS_FAIL("dion_win_size of a destroyed window is not 0");
    ws_expect(dion_win_destroy(w1), DION_ERR_INVALID_ARG, "a second dion_win_destroy", "not a live window",
              NULL);
    ws_expect(dion_win_destroy(w2), DION_ERR_INVALID_ARG, "a second dion_win_destroy", "not a live window",
              NULL);
    /* Many windows, half of them destroyed early: every handle keeps its state while the registry grows. */
    enum { MANY = 40 }; /* with the windows above: the registry grows twice */
    dion_win_t many[MANY];
    void *mb;
    for (int i = 0; i < MANY; i++)
        WS_OK(dion_win_alloc(ws_comm, 64 + 8 * (size_t)i, DT_ON_HOST, &mb, &many[i]));
    for (int i = 0; i < MANY; i += 2) WS_OK(dion_win_destroy(many[i]));
    for (int i = 0; i < MANY; i++) {
        int live = i & 1;
        if ((dion_win_device(many[i]) != NULL) != live ||
            dion_win_size(many[i], ws_rank) != (live ? 64 + 8 * (size_t)i : 0)) {
            WS_FAIL("window %d of %d: %s handle misreported", i, MANY, live ? "a live" : "a destroyed");
            break;
        }
    }
    for (int i = 1; i < MANY; i += 2) WS_OK(dion_win_destroy(many[i]));
    if (dion_win_destroy(many[MANY - 1]) != DION_ERR_INVALID_ARG) WS_FAIL("the last window destroyed twice");
    /* The comm still works after the rejected calls. */
    WS_OK(dion_comm_barrier(ws_comm));
    WS_OK(dion_dev_destroy(ws_comm, &dev));
    WS_OK(dion_win_destroy(live));
}

/* ================================================================================================ */
/* Defect 3: atomics checked on the address, registration and allocation sizes checked.              */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win; /* every rank's part starts 4 bytes past an 8-byte aligned address */
    uint64_t huge;   /* UINT64_MAX, out of the compiler's sight */
    uint64_t *result;
} ws_align_args_t;

#define WS_ALIGN_BAD 5    /* calls the check must reject */
#define WS_PART      4096 /* bytes of each rank's part */

DT_KERNEL(ws_align_kernel, ws_align_args_t)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int next = (a->dev.rank + 1) % a->dev.nranks;
    a->result[1] = dion_atomic_fetch_add(c, a->win, next, 0, 1);           /* offset 8-aligned, address not */
    a->result[2] = dion_atomic_compare_swap(c, a->win, next, 16, 0, 99);   /* the same */
    a->result[3] = dion_atomic_fetch_add(c, a->win, next, 4, 5);           /* address 8-aligned: allowed */
    a->result[4] = dion_atomic_compare_swap(c, a->win, next, 12, 0, 0x77); /* allowed */
    dion_put(c, a->win, next, a->huge - 3, a->win, 0, 8);                  /* offset + bytes wraps */
    dion_put(c, a->win, next, 8, a->win, 0, a->huge - 7);                  /* bytes wrap the offset */
    dion_get(c, a->win, a->huge, a->win, next, 0, 1);                      /* past the end */
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
}

static void ws_test_align(void)
{
    const size_t part = WS_PART;
    void *raw = NULL;
    dion_win_t win;
#if DT_ON_HOST
    dion_win_t host_win;
    WS_OK(dion_win_alloc(ws_comm, part + 64, 1, &raw, &host_win));
#else
    raw = dt_alloc(part + 64);
#endif
    uint64_t zero[(WS_PART + 64) / 8];
    memset(zero, 0, sizeof zero);
    dt_put(raw, zero, sizeof zero);
    WS_OK(dion_win_register(ws_comm, (char *)raw + 4, part, &win));
    dion_dev_attr_t attr = {64, 1, 0, 0};
    dion_dev_t dev;
    WS_OK(dion_dev_create(ws_comm, &attr, &dev));
    if (!(dev.flags & DION_DEVF_CHECK)) WS_FAIL("run with DION_CHECK=1");
    WS_OK(dion_comm_barrier(ws_comm));
    uint64_t *result = (uint64_t *)dt_alloc(64);
    ws_align_args_t k = {dev, dion_win_device(win), UINT64_MAX, result};
    if (DT_LAUNCH(ws_align_kernel, 1, 1, &k)) WS_FAIL("launch failed (a misaligned atomic ran?)");
    WS_OK(dion_comm_barrier(ws_comm));
    /* raw+8 = part offset 4 got 5 from the predecessor; raw+16 = offset 12 got 0x77; nothing else changed */
    uint64_t got[(WS_PART + 64) / 8];
    dt_get(got, raw, sizeof got);
    for (size_t i = 0; i < (part + 64) / 8; i++) {
        uint64_t want = i == 1 ? 5 : i == 2 ? 0x77 : 0;
        if (got[i] != want) {
            WS_FAIL("word %zu of the memory under the window is 0x%llx, expected 0x%llx", i,
                    (unsigned long long)got[i], (unsigned long long)want);
            break;
        }
    }
    uint64_t r[5];
    dt_get(r, result, sizeof r);
    if (r[0] || r[1] || r[2] || r[3] || r[4])
        WS_FAIL("kernel results %llu %llu %llu %llu %llu, expected all 0", (unsigned long long)r[0],
                (unsigned long long)r[1], (unsigned long long)r[2], (unsigned long long)r[3],
                (unsigned long long)r[4]);
    char want[32];
    snprintf(want, sizeof want, "and %d more", WS_ALIGN_BAD - 1);
    ws_expect(dion_dev_check(ws_comm, &dev), DION_ERR_REMOTE_ACCESS, "an atomic at an unaligned address",
              "not at an 8-byte aligned address", want);
    dt_free(result);
    WS_OK(dion_dev_destroy(ws_comm, &dev));
    WS_OK(dion_win_destroy(win));

    /* Sizes whose range arithmetic wraps: refused on every rank, with the size the caller gave. */
    dion_win_t bad = NULL;
    ws_expect(dion_win_register(ws_comm, raw, SIZE_MAX, &bad), DION_ERR_INVALID_ARG,
              "dion_win_register(base, SIZE_MAX)", "18446744073709551615", "address space");
    if (bad) WS_FAIL("a refused registration returned a window");
    ws_expect(dion_win_register(ws_comm, raw, SIZE_MAX - (uintptr_t)raw + 17, &bad), DION_ERR_INVALID_ARG,
              "dion_win_register with base + bytes wrapping to 16", "address space", NULL);
    void *p = (void *)1;
    ws_expect(dion_win_alloc(ws_comm, SIZE_MAX, DT_ON_HOST, &p, &bad), DION_ERR_INVALID_ARG,
              "dion_win_alloc(SIZE_MAX)", "bytes=18446744073709551615", NULL);
    ws_expect(dion_win_alloc(ws_comm, (size_t)1 << 60, DT_ON_HOST, &p, &bad), DION_ERR_INVALID_ARG,
              "dion_win_alloc(2^60)", "bytes=1152921504606846976", NULL);
    if (p || bad) WS_FAIL("a refused allocation returned memory or a window");
    /* The comm still works: a good registration of the same memory. */
    WS_OK(dion_win_register(ws_comm, raw, part, &win));
    if (dion_win_size(win, (ws_rank + 1) % ws_n) != part) WS_FAIL("dion_win_size is wrong");
    WS_OK(dion_win_destroy(win));
#if DT_ON_HOST
    WS_OK(dion_win_destroy(host_win));
#else
    dt_free(raw);
#endif
}

/* ================================================================================================ */
/* Defect 5 (CPU side): a descriptor CPU threads cannot read is reported, not read. A GPU window's
 * descriptor is device memory; a page without access rights stands for it where there is no GPU. */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t bad, good;
    uint64_t *result;
} ws_badwin_args_t;

#define WS_BADWIN_OPS 4

/* Not a DT_KERNEL: CPU threads run it in every runner, the handle being a CPU-mode one. */
DION_HD void ws_badwin_kernel(ws_badwin_args_t *a)
{
    if (dion__block_thread() != 0) return;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    int next = (a->dev.rank + 1) % a->dev.nranks;
    dion_put(c, a->bad, next, 0, a->good, 0, 8);
    dion_put(c, a->good, next, 0, a->bad, 0, 8);
    dion_get(c, a->good, 0, a->bad, next, 0, 8);
    a->result[1] = dion_atomic_fetch_add(c, a->bad, next, 0, 1);
    if (dion_quiet(c) != DION_SUCCESS) a->result[0]++;
}

/* Runs the kernel with bad as the window on a CPU-mode handle; the first record must contain want. */
static void ws_badwin_run(dion_dwin_t bad, dion_win_t good, void *good_base, const char *what,
                          const char *want, void (*launch)(ws_badwin_args_t *))
{
    dion_dev_attr_t attr = {64, 1, 0, DION_DEV_FLAG_CPU};
    dion_dev_t dev;
    WS_OK(dion_dev_create(ws_comm, &attr, &dev));
    if (!(dev.flags & DION_DEVF_CHECK)) WS_FAIL("run with DION_CHECK=1");
    ws_fill(good_base, 0x5c);
    WS_OK(dion_comm_barrier(ws_comm));
    uint64_t result[4] = {0, 0, 0, 0};
    ws_badwin_args_t k = {dev, bad, dion_win_device(good), result};
    launch(&k);
    WS_OK(dion_comm_barrier(ws_comm));
    ws_verify(good_base, 0x5c, what);
    if (result[0] || result[1])
        WS_FAIL("%s: kernel results %llu %llu", what, (unsigned long long)result[0],
                (unsigned long long)result[1]);
    char more[32];
    snprintf(more, sizeof more, "and %d more", WS_BADWIN_OPS - 1);
    ws_expect(dion_dev_check(ws_comm, &dev), DION_ERR_INVALID_ARG, what, want, more);
    WS_OK(dion_dev_destroy(ws_comm, &dev));
}

static void ws_badwin_cpu(void *k)
{
    ws_badwin_kernel((ws_badwin_args_t *)k);
}
static void ws_badwin_cpu_launch(ws_badwin_args_t *k)
{
    if (dion_cpu_launch(1, 1, ws_badwin_cpu, k) != DION_SUCCESS) WS_FAIL("launch failed");
}

static void ws_test_badwin(void)
{
    void *gb = NULL;
    dion_win_t good;
    WS_OK(dion_win_alloc(ws_comm, WS_BYTES, 1, &gb, &good));
    long page = 4096;
    void *noaccess = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (noaccess == MAP_FAILED) {
        WS_FAIL("mmap failed");
        return;
    }
    ws_badwin_run((dion_dwin_t)noaccess, good, gb, "a descriptor CPU threads cannot read",
                  "not a window descriptor of this process", ws_badwin_cpu_launch);
    munmap(noaccess, (size_t)page);
    WS_OK(dion_win_destroy(good));
}

/* ================================================================================================ */

static int ws_main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int rc = ws_runner_init();
    if (rc) return rc;
    WS_OK(dion_comm_init_env(&ws_comm));
    ws_rank = dion_comm_rank(ws_comm);
    ws_n = dion_comm_size(ws_comm);
    if (ws_n < 2) {
        fprintf(stderr, "FAIL: needs at least 2 ranks\n");
        return 1;
    }
    if (!strcmp(mode, "args"))
        ws_test_args();
    else if (!strcmp(mode, "stale"))
        ws_test_stale();
    else if (!strcmp(mode, "align"))
        ws_test_align();
    else if (!strcmp(mode, "badwin"))
        ws_test_badwin();
    else if (!WS_RUN_EXTRA(mode)) {
        fprintf(stderr, "usage: %s args|stale|align|badwin%s\n", argv[0], WS_EXTRA_MODES);
        return 2;
    }
    int mine = ws_failures, *all = (int *)calloc((size_t)ws_n, sizeof(int)), total = 0;
    WS_OK(dion_comm_allgather(ws_comm, &mine, sizeof mine, all));
    for (int r = 0; r < ws_n; r++) total += all[r];
    if (ws_rank == 0 || mine)
        printf("%s: %s, %d ranks, %d failures\n", total ? "FAIL" : "PASS", mode, ws_n, total);
    free(all);
    dion_comm_destroy(ws_comm);
    return total ? 1 : 0;
}

#endif /* DION_TEST_WIN_SAFETY_H */
