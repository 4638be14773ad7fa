/* A rank program for the dionrun tests. Modes:
 *   env                 check the DION_* variables dionrun sets, form the comm, compare ids, barrier
 *   fail R CODE         after a barrier rank R exits with CODE; the others sleep until stopped
 *   stubborn R CODE     as fail, but the others ignore SIGTERM and SIGINT (dionrun must SIGKILL them)
 *   signal R SIG        after a barrier rank R raises SIG; the others sleep until stopped
 *   sleep               after a barrier every rank sleeps until stopped
 *   mps                 no comm: record CUDA_MPS_* and DION_DEVICE in $DIONRUN_PROBE_DIR/rank<R>.mps
 * With DIONRUN_PROBE_DIR set, each rank writes rank<R>.pid at start and rank<R>.ready after its barrier, so
 * that a test can wait for the job and then check that no rank outlived dionrun. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dion/dion.h>

static int g_rank = -1;

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dionrun_probe rank %d: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static long env_int(const char *name)
{
    const char *v = getenv(name);
    if (!v) die("%s is not set", name);
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end) die("%s=%s is not an integer", name, v);
    return x;
}

static void write_file(const char *suffix, const char *text)
{
    const char *dir = getenv("DIONRUN_PROBE_DIR");
    if (!dir) return;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/rank%d.%s", dir, g_rank, suffix);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) die("cannot write %s", path);
}

/* Long enough to outlast any test's timeout: only dionrun ends these ranks. */
__attribute__((noreturn)) static void sleep_long(void)
{
    for (int i = 0; i < 300; i++) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
    exit(0);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1; /* dionrun writes lowercase only */
}

static void check_env(int *nranks, dion_unique_id_t *id)
{
    *nranks = (int)env_int("DION_NRANKS");
    if (*nranks < 1) die("DION_NRANKS=%d is below 1", *nranks);
    if (g_rank < 0 || g_rank >= *nranks) die("DION_RANK is outside [0, %d)", *nranks);
    if (env_int("DION_LOCAL_RANK") != g_rank) die("DION_LOCAL_RANK differs from DION_RANK");
    const char *hex = getenv("DION_UNIQUE_ID");
    if (!hex) die("DION_UNIQUE_ID is not set");
    if (strlen(hex) != 2 * sizeof id->bytes)
        die("DION_UNIQUE_ID has %zu characters, not %zu", strlen(hex), 2 * sizeof id->bytes);
    for (size_t i = 0; i < sizeof id->bytes; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) die("DION_UNIQUE_ID is not lowercase hex at position %zu", 2 * i);
        id->bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    if (getenv("DION_DEVICE") && env_int("DION_DEVICE") < 0) die("DION_DEVICE is negative");
}

static dion_comm_t join(int nranks)
{
    dion_comm_t comm;
    dion_status_t st = dion_comm_init_env(&comm);
    if (st != DION_SUCCESS) die("dion_comm_init_env failed: %s", dion_last_error());
    if (dion_comm_rank(comm) != g_rank)
        die("dion_comm_rank is %d, DION_RANK %d", dion_comm_rank(comm), g_rank);
    if (dion_comm_size(comm) != nranks)
        die("dion_comm_size is %d, DION_NRANKS %d", dion_comm_size(comm), nranks);
    if ((st = dion_comm_barrier(comm)) != DION_SUCCESS)
        die("dion_comm_barrier failed: %s", dion_last_error());
    write_file("ready", "ready\n");
    return comm;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: dionrun_probe env|fail R CODE|stubborn R CODE|signal R SIG|sleep|mps\n");
        return 2;
    }
    const char *mode = argv[1];
    g_rank = (int)env_int("DION_RANK");
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    write_file("pid", pid);

    int nranks;
    dion_unique_id_t id;
    check_env(&nranks, &id);

    if (strcmp(mode, "mps") == 0) {
        const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY"), *log = getenv("CUDA_MPS_LOG_DIRECTORY");
        const char *dev = getenv("DION_DEVICE");
        char text[8400];
        snprintf(text, sizeof text, "pipe=%s log=%s dev=%s\n", pipe ? pipe : "-", log ? log : "-",
                 dev ? dev : "-");
        write_file("mps", text);
        return 0;
    }

    if (strcmp(mode, "env") == 0) {
        dion_comm_t comm = join(nranks);
        /* Every rank must have been handed the same id. */
        dion_unique_id_t *all = malloc(sizeof id * (size_t)nranks);
        if (!all) die("out of memory");
        if (dion_comm_allgather(comm, &id, sizeof id, all) != DION_SUCCESS)
            die("dion_comm_allgather failed: %s", dion_last_error());
        for (int r = 0; r < nranks; r++)
            if (memcmp(&all[r], &id, sizeof id) != 0) die("rank %d was given a different DION_UNIQUE_ID", r);
        free(all);
        if (dion_comm_barrier(comm) != DION_SUCCESS) die("dion_comm_barrier failed: %s", dion_last_error());
        if (dion_comm_destroy(comm) != DION_SUCCESS) die("dion_comm_destroy failed: %s", dion_last_error());
        return 0;
    }

    if (strcmp(mode, "sleep") == 0) {
        join(nranks);
        sleep_long();
    }

    int stubborn = strcmp(mode, "stubborn") == 0;
    if ((stubborn || strcmp(mode, "fail") == 0 || strcmp(mode, "signal") == 0) && argc == 4) {
        int who = atoi(argv[2]), what = atoi(argv[3]);
        if (stubborn && g_rank != who) {
            signal(SIGTERM, SIG_IGN);
            signal(SIGINT, SIG_IGN);
        }
        join(nranks); /* the comm stays up: the failing rank leaves without destroying it */
        if (g_rank != who) sleep_long();
        if (strcmp(mode, "signal") == 0) {
            raise(what);
            die("raise(%d) returned", what);
        }
        exit(what);
    }
    fprintf(stderr, "dionrun_probe: unknown mode or arguments '%s'\n", mode);
    return 2;
}
