/* Fuzzes environment parsing. An input is lines NAME=VALUE naming variables of the configuration table
 * (env.dict lists them). Each value goes through its row's typed parser (integer, boolean, duration, enum,
 * string), through the duration parser and the host:port parser, and then the whole environment through
 * dion__env_resolve, the interpretation of DION_* and launcher variables (Open MPI, Slurm, torchrun).
 * DION_BOOTSTRAP_TIMEOUT (1 ms) and DION_TMPDIR (a private folder) are fixed before that, so that a rank-0
 * root thread or a rendezvous wait ends at once; host names are not resolved (see getaddrinfo below). */
#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <netdb.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "fuzz_common.h"

/* Numeric hosts only: a fuzzed host name must not wait on DNS. Wraps the C library's getaddrinfo, which
 * dion__addr_parse calls. */
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
    static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "getaddrinfo");
    if (!real) return EAI_FAIL;
    struct addrinfo h;
    memset(&h, 0, sizeof h);
    if (hints) h = *hints;
    h.ai_flags |= AI_NUMERICHOST;
    return real(node, service, &h, res);
}

static char tmpdir[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_log_everything();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dion-fuzz-env-XXXXXX");
    if (!mkdtemp(tmpdir)) abort();
    return 0;
}

/* Variables the harness owns; everything else in the table is fuzzed. */
static int fixed(const char *name)
{
    return !strcmp(name, "DION_TMPDIR") || !strcmp(name, "PATH");
}

static void check_typed(const dion__cfg_entry_t *e, const char *value)
{
    switch (e->type) {
    case DION_CFG_INT: {
        long long v = 0;
        if (dion__cfg_int(e->name, -5, 5, &v) == DION_SUCCESS) FUZZ_CHECK(v >= -5 && v <= 5, "%lld", v);
        if (dion__cfg_int(e->name, LLONG_MIN, LLONG_MAX, &v) == DION_SUCCESS) {
            char *end;
            FUZZ_CHECK(strtoll(value, &end, 10) == v && end != value, "'%s' read as %lld", value, v);
        }
        break;
    }
    case DION_CFG_BOOL: {
        int v = -1;
        if (dion__cfg_bool(e->name, &v) == DION_SUCCESS) FUZZ_CHECK(v == 0 || v == 1, "bool %d", v);
        break;
    }
    case DION_CFG_DURATION: {
        uint64_t ns = 0, ns2 = 0;
        dion_status_t st = dion__cfg_duration_ns(e->name, &ns);
        FUZZ_CHECK(st == (dion__parse_duration_ns(value, &ns2)) && (st != DION_SUCCESS || ns == ns2),
                   "'%s': the table reader and the parser disagree", value);
        break;
    }
    case DION_CFG_ENUM: {
        int idx = -1, count = 1;
        for (const char *p = e->choices; *p; p++) count += *p == '|';
        if (dion__cfg_enum(e->name, &idx) == DION_SUCCESS)
            FUZZ_CHECK(idx >= 0 && idx < count, "%s: index %d of %d choices", e->name, idx, count);
        break;
    }
    case DION_CFG_STRING:
        FUZZ_CHECK(!strcmp(dion__cfg_str(e->name), value), "string read back differs");
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return -1;
    for (int i = 0; i < dion__cfg_count; i++)
        if (!fixed(dion__cfg_table[i].name)) unsetenv(dion__cfg_table[i].name);
    setenv("DION_TMPDIR", tmpdir, 1);

    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    int have_uid = 0;
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        const char *value = eq + 1;
        const dion__cfg_entry_t *e = dion__cfg_find(line);
        if (!e || fixed(line) || !*value) continue;
        setenv(line, value, 1);
        have_uid |= !strcmp(line, "DION_UNIQUE_ID");
        check_typed(e, value);
        uint64_t ns;
        if (dion__parse_duration_ns(value, &ns) == DION_SUCCESS)
            FUZZ_CHECK(ns <= 18000000000000000000ull, "ns");
        dion__addr_t a;
        if (dion__addr_parse(value, &a) == DION_SUCCESS) {
            FUZZ_CHECK(a.family == 4 || a.family == 6, "family %u", a.family);
            char buf[DION__ADDR_STRLEN];
            dion__addr_str(&a, buf);
        }
    }
    free(text);

    setenv("DION_BOOTSTRAP_TIMEOUT", "1ms", 1);
    dion__env_job_t job;
    dion_status_t st = dion__env_resolve(&job);
    if (st == DION_SUCCESS) {
        FUZZ_CHECK(job.nranks >= 1 && job.nranks <= DION__MAX_RANKS && job.rank >= 0 && job.rank < job.nranks,
                   "rank %d of %d", job.rank, job.nranks);
        FUZZ_CHECK(job.source != NULL, "no source");
        dion__uid_t u;
        if (!have_uid)
            FUZZ_CHECK(dion__uid_decode(&job.id, &u) == DION_SUCCESS, "the id built does not decode");
        if (job.rendezvous_path[0]) unlink(job.rendezvous_path);
    } else {
        FUZZ_CHECK(dion_last_error()[0] != 0, "failure without a sentence");
    }
    return 0;
}
