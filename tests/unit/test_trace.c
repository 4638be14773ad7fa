/* DION_TRACE pieces without ranks: file names, the device hook on CPU threads (kept, dropped, off), the host-
 * thread hook from several threads at once, and the JSON file. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dion/dion_device.cuh"
#include "src/trace.h"

_Static_assert(sizeof(dion_trace_event_t) == 64, "trace events are 64 bytes (docs/tracing.md)");

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                             \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static void test_paths(void)
{
    struct {
        const char *pattern;
        int rank;
        unsigned n;
        const char *want;
    } cases[] = {
        {"/tmp/t.json", 3, 0, "/tmp/t.rank3.json"},
        {"trace", 0, 0, "trace.rank0.json"},
        {"out/%r/t_%r.json", 12, 0, "out/12/t_12.json"},
        {"/tmp/t.json", 1, 2, "/tmp/t.rank1.dev2.json"},
        {"t%r", 5, 1, "t5.dev1"},
        {"a.json.json", 7, 0, "a.json.rank7.json"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int ok = dion__trace_path(cases[i].pattern, cases[i].rank, cases[i].n, out, sizeof out);
        CHECK(ok && !strcmp(out, cases[i].want), "path '%s' rank %d n %u: got '%s' (%d), want '%s'",
              cases[i].pattern, cases[i].rank, cases[i].n, ok ? out : "", ok, cases[i].want);
    }
    char tiny[12];
    CHECK(!dion__trace_path("/tmp/t.json", 3, 0, tiny, sizeof tiny), "a name longer than the buffer fit");
}

typedef struct {
    struct dion__trace *t;
    uint32_t thread;
    uint32_t count;
} host_args_t;

static void *host_thread(void *p)
{
    host_args_t *a = p;
    for (uint32_t i = 0; i < a->count; i++) {
        uint64_t now = dion__now_ns();
        dion__trace_host_event(a->t, a->thread, DION_OP_PUT, 1, 0, 100 + i, now, now + 10, DION_SUCCESS);
    }
    return NULL;
}

/* Occurrences of s in text. */
static int count(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = strstr(text, s); p; p = strstr(p + 1, s)) n++;
    return n;
}

/* Brackets and braces balance outside strings, and nothing follows the top-level object. */
static int json_balanced(const char *text)
{
    int depth = 0, in_str = 0, closed = 0;
    for (const char *p = text; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                in_str = 0;
            continue;
        }
        if (*p == '"') in_str = 1;
        if (closed && *p != '\n' && *p != ' ') return 0;
        if (*p == '{' || *p == '[') depth++;
        if (*p == '}' || *p == ']') {
            if (--depth < 0) return 0;
            if (depth == 0) closed = 1;
        }
    }
    return depth == 0 && !in_str && closed;
}

static void test_events(void)
{
    enum { CAP = 8, HOST_CAP = 3000, THREADS = 4, PER_THREAD = 1000 };
    struct dion__trace *t = NULL;
    if (dion__trace_new(1, 2, CAP, HOST_CAP, &t) != DION_SUCCESS) {
        CHECK(0, "dion__trace_new: %s", dion_last_error());
        return;
    }
    dion_ctx_t c;
    memset(&c, 0, sizeof c);
    c.dev.num_contexts = 2;
    c.dev.flags = DION_DEVF_CPU; /* tracing off: nothing may be recorded */
    c.dev.trace = dion__trace_device(t);
    for (int i = 0; i < 5; i++)
        DION__TRACE(&c, dion__trace_start(&c), DION_OP_PUT, 1, 0, 8, 0, 0, 0, DION_SUCCESS);
    uint64_t kept = 99, dropped = 99;
    dion__trace_counts(t, 0, &kept, &dropped);
    CHECK(kept == 0 && dropped == 0, "tracing off recorded %llu events", (unsigned long long)kept);

    c.dev.flags |= DION_DEVF_TRACE;
    /* context 1 first: an array that overflowed would then overwrite these */
    c.index = 1;
    for (int i = 0; i < 3; i++)
        DION__TRACE(&c, 0, DION_OP_SIGNAL, 0, 7, 0, 42, 0, DION_SIG_SET, DION_SUCCESS);
    c.index = 0;
    for (uint64_t i = 0; i < 20; i++) {
        uint64_t t0 = dion__trace_start(&c);
        CHECK(t0 != 0, "dion__trace_start read no clock with tracing on");
        DION__TRACE(&c, t0, DION_OP_PUT_SIGNAL, 1, 5, 100 + i, i, 0, DION_SIG_ADD, DION_SUCCESS);
    }
    c.index = 2; /* out of range (DION_CHECK keeps such an index): skipped, nothing written out of bounds */
    DION__TRACE(&c, 0, DION_OP_SIGNAL, 0, 7, 0, 42, 0, DION_SIG_SET, DION_SUCCESS);

    dion__trace_counts(t, 0, &kept, &dropped);
    CHECK(kept == CAP && dropped == 20 - CAP, "ctx 0: kept %llu dropped %llu, want %d and %d",
          (unsigned long long)kept, (unsigned long long)dropped, CAP, 20 - CAP);
    dion__trace_counts(t, 1, &kept, &dropped);
    CHECK(kept == 3 && dropped == 0, "ctx 1: kept %llu dropped %llu", (unsigned long long)kept,
          (unsigned long long)dropped);
    CHECK(dion__trace_counts(t, 2, &kept, &dropped) == DION_ERR_INVALID_ARG, "ctx 2 of 2 accepted");
    /* the first CAP events are kept, in order, each complete; the slot after them is untouched */
    struct dion_dev_trace d = dion__trace_device(t);
    for (uint64_t i = 0; i < CAP; i++) {
        const dion_trace_event_t *e = &d.events[i];
        CHECK(e->op == DION_OP_PUT_SIGNAL && e->value == i && e->bytes == 100 + i && e->sig == 5 &&
                  e->peer == 1 && e->cmp == DION_SIG_ADD && e->end_ns >= e->start_ns,
              "ctx 0 event %llu: op %u value %llu bytes %llu", (unsigned long long)i, e->op,
              (unsigned long long)e->value, (unsigned long long)e->bytes);
    }
    for (int i = 0; i < 3; i++)
        CHECK(d.events[CAP + i].op == DION_OP_SIGNAL &&
                  d.events[CAP + i].start_ns == d.events[CAP + i].end_ns,
              "ctx 1 event %d is not a signal instant", i);

    /* host threads at once: exactly HOST_CAP kept, the rest counted */
    pthread_t th[THREADS];
    host_args_t ha[THREADS];
    for (uint32_t i = 0; i < THREADS; i++) {
        ha[i] = (host_args_t){t, i, PER_THREAD};
        pthread_create(&th[i], NULL, host_thread, &ha[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    dion__trace_counts(t, UINT32_MAX, &kept, &dropped);
    CHECK(kept == HOST_CAP && dropped == THREADS * PER_THREAD - HOST_CAP, "host: kept %llu dropped %llu",
          (unsigned long long)kept, (unsigned long long)dropped);
    dion__trace_host_event(NULL, 0, DION_OP_PUT, 0, 0, 0, 1, 2, DION_SUCCESS); /* no trace: ignored */

    char path[] = "/tmp/dion_test_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    CHECK(dion__trace_write(t, path, 3, "host\"x") == DION_SUCCESS, "write: %s", dion_last_error());
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 1 << 22);
    size_t n = f && text ? fread(text, 1, (1 << 22) - 1, f) : 0;
    if (f) fclose(f);
    CHECK(n > 0 && json_balanced(text), "the trace file is not one balanced JSON object");
    CHECK(count(text, "\"name\":\"put_signal\",\"cat\":\"device\",\"ph\":\"X\"") == CAP,
          "put_signal X events");
    CHECK(count(text, "\"name\":\"signal\",\"cat\":\"device\",\"ph\":\"i\"") == 3, "signal instants");
    CHECK(count(text, "\"name\":\"put\",\"cat\":\"host\",\"ph\":\"X\"") == HOST_CAP, "host X events");
    CHECK(count(text, "\"pid\":3,") == count(text, "\"pid\":"), "every event has pid 3");
    /* one track name per host thread that kept events (a late thread may have had all of its dropped) */
    CHECK(count(text, "\"name\":\"proxy ") >= 1 && count(text, "\"name\":\"proxy ") <= THREADS,
          "host track names");
    for (int i = 0; i < THREADS; i++) {
        char name[64];
        snprintf(name, sizeof name, "\"tid\":%d,\"args\":{\"name\":\"proxy %d\"}", 1000 + i, i);
        CHECK(count(text, name) <= 1, "host thread %d named twice", i);
    }
    CHECK(strstr(text, "\"dropped\":12,\"host_dropped\":1000,\"dropped_per_context\":[12,0]") != NULL,
          "dropped counts missing");
    CHECK(strstr(text, "\"host\":\"host\\\"x\"") != NULL, "host name not escaped");
    CHECK(strstr(text, "\"clock\":\"monotonic\"") != NULL, "CPU-mode clock not named");
    /* a second write gives the same file (host events are shifted only while writing) */
    char *again = calloc(1, 1 << 22);
    CHECK(dion__trace_write(t, path, 3, "host\"x") == DION_SUCCESS, "second write");
    f = fopen(path, "r");
    size_t n2 = f && again ? fread(again, 1, (1 << 22) - 1, f) : 0;
    if (f) fclose(f);
    /* only the clock offset line (sampled per write) may differ */
    char *a = strstr(text, "\"traceEvents\""), *b = again ? strstr(again, "\"traceEvents\"") : NULL;
    CHECK(n2 > 0 && a && b && !strcmp(a, b), "a second write differs");
    CHECK(dion__trace_write(t, "/nonexistent-dir/x.json", 0, "h") == DION_ERR_INVALID_ARG &&
              strstr(dion_last_error(), "/nonexistent-dir/x.json"),
          "an unwritable path was not reported: %s", dion_last_error());
    unlink(path);
    free(text);
    free(again);
    dion__trace_free(t);
}

int main(void)
{
    test_paths();
    test_events();
    printf("%s: trace unit tests, %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
