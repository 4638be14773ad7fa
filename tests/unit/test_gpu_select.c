/* GPU choice without dionrun and the warning for ranks sharing a GPU without MPS, with fake device lists,
 * local ranks and rank descriptions (no GPU needed). Every check prints what failed; the exit status counts
 * failures. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/gpu_select.h"

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static void test_choose(void)
{
    struct {
        int local_rank, count, app_chose;
        long long dion_device;
        int want;
    } cases[] = {
        /* mpirun -np 2 on two GPUs: one each (the defect of issue 12 put both on GPU 0) */
        {0, 2, 0, -1, 0},
        {1, 2, 0, -1, 1},
        /* more ranks than GPUs: round-robin */
        {2, 2, 0, -1, 0},
        {5, 4, 0, -1, 1},
        {7, 8, 0, -1, 7},
        /* srun --gpus-per-task: each task sees one GPU */
        {3, 1, 0, -1, 0},
        /* DION_DEVICE wins over everything */
        {1, 4, 0, 3, 3},
        {1, 4, 1, 2, 2},
        /* the application chose: keep its device */
        {1, 2, 1, -1, -1},
        /* cannot tell: keep the current device */
        {1, 2, -1, -1, -1},
        /* no launcher variable */
        {-1, 2, 0, -1, -1},
        /* no GPU */
        {0, 0, 0, -1, -1},
        {0, 0, 0, 1, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dion__gpu_choice_t c =
            dion__gpu_choose(cases[i].local_rank, cases[i].count, cases[i].app_chose, cases[i].dion_device);
        CHECK(c.device == cases[i].want,
              "case %zu (local rank %d, %d GPUs, app chose %d, DION_DEVICE %lld): got %d (%s), want %d", i,
              cases[i].local_rank, cases[i].count, cases[i].app_chose, cases[i].dion_device, c.device, c.why,
              cases[i].want);
        CHECK(c.why && c.why[0], "case %zu has no reason", i);
    }
    /* every local rank of a node with n GPUs: each GPU gets ranks/n or ranks/n+1 of them */
    for (int n = 1; n <= 8; n++)
        for (int ranks = 1; ranks <= 16; ranks++) {
            int per[8] = {0};
            for (int lr = 0; lr < ranks; lr++) {
                int d = dion__gpu_choose(lr, n, 0, -1).device;
                CHECK(d >= 0 && d < n, "local rank %d of %d with %d GPUs got %d", lr, ranks, n, d);
                if (d >= 0 && d < n) per[d]++;
            }
            for (int d = 0; d < n; d++)
                CHECK(per[d] == ranks / n || per[d] == ranks / n + 1, "%d ranks on %d GPUs: GPU %d has %d",
                      ranks, n, d, per[d]);
        }
}

static void clear_launcher_env(void)
{
    const char *vars[] = {"DION_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK",
                          "MPI_LOCALRANKID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static void test_local_rank(void)
{
    const char *var = "x";
    clear_launcher_env();
    CHECK(dion__gpu_local_rank(&var) == -1 && var == NULL, "no variable: %s", var ? var : "NULL");
    struct {
        const char *name, *value;
    } each[] = {{"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                {"SLURM_LOCALID", "5"},
                {"LOCAL_RANK", "6"},
                {"MPI_LOCALRANKID", "7"},
                {"DION_LOCAL_RANK", "2"}};
    for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
        clear_launcher_env();
        setenv(each[i].name, each[i].value, 1);
        int lr = dion__gpu_local_rank(&var);
        CHECK(lr == atoi(each[i].value) && var && !strcmp(var, each[i].name), "%s=%s: got %d from %s",
              each[i].name, each[i].value, lr, var ? var : "NULL");
    }
    /* dionrun's variable first, then Open MPI's, ... */
    clear_launcher_env();
    setenv("LOCAL_RANK", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    CHECK(dion__gpu_local_rank(&var) == 1 && !strcmp(var, "OMPI_COMM_WORLD_LOCAL_RANK"), "precedence: %s",
          var);
    setenv("DION_LOCAL_RANK", "0", 1);
    CHECK(dion__gpu_local_rank(&var) == 0 && !strcmp(var, "DION_LOCAL_RANK"), "precedence: %s", var);
    /* garbage is skipped (with a warning), the next variable used */
    clear_launcher_env();
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "one", 1);
    setenv("SLURM_LOCALID", "2", 1);
    CHECK(dion__gpu_local_rank(&var) == 2 && !strcmp(var, "SLURM_LOCALID"), "garbage skipped: %s",
          var ? var : "NULL");
    setenv("SLURM_LOCALID", "-1", 1);
    CHECK(dion__gpu_local_rank(&var) == -1, "negative local rank accepted");
    clear_launcher_env();
}

/* A node description: rank r on host hosts[r] with GPU dev[r] (-1: none); GPU uuids follow (host, device). */
static void fake_info(dion__rank_info_t *info, int n, const int *hosts, const int *dev)
{
    memset(info, 0, sizeof *info * (size_t)n);
    for (int r = 0; r < n; r++) {
        snprintf(info[r].host, sizeof info[r].host, "node%d", hosts[r]);
        info[r].host_key = 1000u + (unsigned)hosts[r];
        info[r].cuda_device = dev[r];
        if (dev[r] >= 0) {
            info[r].gpu_uuid[0] = (uint8_t)(0xa0 + dev[r]);
            info[r].gpu_uuid[1] = (uint8_t)hosts[r];
            info[r].gpu_pci = (uint32_t)(0x19 + dev[r]) << 8;
        }
    }
}

static void test_sharing_note(void)
{
    char msg[1024];
    dion__rank_info_t info[8];
    /* mpirun -np 2 with both ranks on GPU 0 (what issue 12 saw): rank 0 warns, naming both and the fixes */
    int h2[] = {0, 0}, d00[] = {0, 0};
    fake_info(info, 2, h2, d00);
    CHECK(dion__gpu_sharing_note(info, 2, 0, 0, msg, sizeof msg) == 1, "two ranks on GPU 0, no MPS: no note");
    CHECK(strstr(msg, "ranks 0,1 ") && strstr(msg, "GPU 0") && strstr(msg, "dionrun --mps") &&
              strstr(msg, "own GPU") && strstr(msg, "node0"),
          "note lacks ranks, GPU, host or fix: %s", msg);
    CHECK(dion__gpu_sharing_note(info, 2, 1, 0, msg, sizeof msg) == 0,
          "rank 1 must leave the note to rank 0");
    CHECK(dion__gpu_sharing_note(info, 2, 0, 1, msg, sizeof msg) == 0, "under MPS sharing is fine");
    /* one GPU per rank: nothing */
    int d01[] = {0, 1};
    fake_info(info, 2, h2, d01);
    for (int r = 0; r < 2; r++)
        CHECK(dion__gpu_sharing_note(info, 2, r, 0, msg, sizeof msg) == 0, "rank %d", r);
    /* 4 ranks on 2 GPUs: ranks 0,2 share GPU 0 (rank 0 warns), 1,3 share GPU 1 (rank 1 warns) */
    int h4[] = {0, 0, 0, 0}, d0101[] = {0, 1, 0, 1};
    fake_info(info, 4, h4, d0101);
    CHECK(dion__gpu_sharing_note(info, 4, 0, 0, msg, sizeof msg) == 1 && strstr(msg, "ranks 0,2 "), "%s",
          msg);
    CHECK(dion__gpu_sharing_note(info, 4, 1, 0, msg, sizeof msg) == 1 && strstr(msg, "ranks 1,3 ") &&
              strstr(msg, "GPU 1"),
          "%s", msg);
    CHECK(dion__gpu_sharing_note(info, 4, 2, 0, msg, sizeof msg) == 0, "rank 2 is not the lowest sharer");
    CHECK(dion__gpu_sharing_note(info, 4, 3, 0, msg, sizeof msg) == 0, "rank 3 is not the lowest sharer");
    /* same ordinal on two nodes is two GPUs */
    int h01[] = {0, 1, 0, 1}, d0000[] = {0, 0, 1, 1};
    fake_info(info, 4, h01, d0000);
    for (int r = 0; r < 4; r++)
        CHECK(dion__gpu_sharing_note(info, 4, r, 0, msg, sizeof msg) == 0, "rank %d", r);
    /* CPU mode ranks (no GPU) never share */
    int dnone[] = {-1, -1};
    fake_info(info, 2, h2, dnone);
    CHECK(dion__gpu_sharing_note(info, 2, 0, 0, msg, sizeof msg) == 0, "no GPU");
}

/* The warning goes through the logger at WARN level, once per process. */
static void test_warning_logged(void)
{
    dion__rank_info_t info[3];
    int h[] = {0, 0, 0}, d[] = {0, 0, 0};
    fake_info(info, 3, h, d);
    char path[] = "/tmp/dion-gpu-select-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    int first = dion__gpu_warn_sharing(info, 3, 1, 0);  /* rank 1 is not the lowest: nothing */
    int second = dion__gpu_warn_sharing(info, 3, 0, 1); /* MPS on: nothing */
    int third = dion__gpu_warn_sharing(info, 3, 0, 0);  /* logs */
    int fourth = dion__gpu_warn_sharing(info, 3, 0, 0); /* once only */
    dup2(saved, 2);
    close(saved);
    char text[4096] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    CHECK(!first && !second && third == 1 && !fourth, "logged: %d %d %d %d", first, second, third, fourth);
    CHECK(strstr(text, " WARN ranks 0,1,2 (3 of them) share GPU 0") && strstr(text, "dionrun --mps"),
          "log lacks the warning: '%s'", text);
    const char *again = strstr(text, "share GPU");
    CHECK(again && !strstr(again + 1, "share GPU"), "warned more than once: '%s'", text);
}

int main(void)
{
    dion__log_init();
    test_choose();
    test_local_rank();
    test_sharing_note();
    test_warning_logged();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("gpu_select: all checks passed\n");
    return failures ? 1 : 0;
}
