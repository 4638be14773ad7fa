/* GPU choice without dionrun, on a real GPU: the launcher's local rank picks the device unless the
 * application chose one first, and ranks sharing a GPU without MPS get one WARN line. Exits 77 without a GPU.
 *   gpu_select_gpu local    (OMPI_COMM_WORLD_LOCAL_RANK set by the test) device == local rank % GPUs
 *   gpu_select_gpu app      the application's cudaSetDevice is kept
 *   gpu_select_gpu share    two forked ranks: both on GPU 0 without MPS warn once; on two GPUs with local
 *                           ranks 0 and 1 (mpirun -np 2) they take different GPUs and do not warn */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion.h"

static int fail(const char *what)
{
    fprintf(stderr, "FAIL: %s\n", what);
    return 1;
}

/* A communicator of one rank, made in this process, with the library's debug log captured: 0 when the log
 * gives the reason `why` for the GPU choice (so a single GPU also shows which rule decided). */
static int init_one(dion_comm_t *comm, const char *why)
{
    char path[] = "/tmp/dion-gpu-select-log-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return fail("mkstemp");
    setenv("DION_LOG", "debug", 1);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    dion_unique_id_t id;
    dion_status_t st = dion_get_unique_id(&id);
    if (st == DION_SUCCESS) st = dion_comm_init_rank(comm, 1, &id, 0);
    dup2(saved, 2);
    close(saved);
    char text[16384];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    fputs(text, stderr);
    if (st != DION_SUCCESS) {
        fprintf(stderr, "FAIL: comm init: %s\n", dion_last_error());
        return 1;
    }
    char want[256];
    snprintf(want, sizeof want, "GPU choice: %s", why);
    if (!strstr(text, want)) {
        fprintf(stderr, "FAIL: the log lacks '%s'\n", want);
        return 1;
    }
    return 0;
}

static int mode_local(int count)
{
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!v) return fail("the test must set OMPI_COMM_WORLD_LOCAL_RANK");
    int lr = atoi(v), dev = -1;
    dion_comm_t comm;
    if (init_one(&comm, "local rank modulo visible GPUs")) return 1;
    if (cudaGetDevice(&dev) != cudaSuccess) return fail("cudaGetDevice");
    printf("gpu_select: local rank %d with %d GPU(s) -> GPU %d (want %d)\n", lr, count, dev, lr % count);
    dion_comm_destroy(comm);
    return dev == lr % count ? 0 : fail("the local rank did not pick the GPU");
}

static int mode_app(int count)
{
    int want = count - 1, dev = -1;
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1); /* would pick GPU 0 */
    if (cudaSetDevice(want) != cudaSuccess) return fail("cudaSetDevice");
    dion_comm_t comm;
    if (init_one(&comm, "the application chose its device before DION")) return 1;
    if (cudaGetDevice(&dev) != cudaSuccess) return fail("cudaGetDevice");
    printf("gpu_select: application chose GPU %d, after init GPU %d\n", want, dev);
    dion_comm_destroy(comm);
    return dev == want ? 0 : fail("DION overrode the application's device");
}

/* Forks two ranks with the given local ranks and no MPS; returns 0 when each ran, with its device and the
 * number of sharing warnings in its stderr. */
static int run_pair(const char *dir, const int lr[2], int dev[2], int warns[2])
{
    dion_unique_id_t id;
    if (dion_get_unique_id(&id) != DION_SUCCESS) return fail(dion_last_error());
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char path[512], n[16];
            snprintf(path, sizeof path, "%s/rank%d.err", dir, r);
            if (!freopen(path, "w", stderr)) _exit(3);
            snprintf(n, sizeof n, "%d", lr[r]);
            setenv("OMPI_COMM_WORLD_LOCAL_RANK", n, 1);
            setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1); /* no daemon there: MPS off for these ranks */
            dion_comm_t comm;
            int d = -1;
            if (dion_comm_init_rank(&comm, 2, &id, r) != DION_SUCCESS) _exit(4);
            if (cudaGetDevice(&d) != cudaSuccess) _exit(5);
            dion_comm_barrier(comm);
            dion_comm_destroy(comm);
            _exit(10 + d);
        }
    }
    int bad = 0;
    time_t end = time(NULL) + 90;
    for (int r = 0; r < 2; r++) {
        int ws = 0;
        pid_t p;
        while ((p = waitpid(pids[r], &ws, WNOHANG)) == 0 && time(NULL) < end) usleep(10000);
        if (p != pids[r]) {
            kill(pids[0], SIGKILL);
            kill(pids[1], SIGKILL);
            return fail("a rank did not finish within 90 s");
        }
        dev[r] = WIFEXITED(ws) && WEXITSTATUS(ws) >= 10 ? WEXITSTATUS(ws) - 10 : -1;
        char path[512], line[2048];
        snprintf(path, sizeof path, "%s/rank%d.err", dir, r);
        FILE *f = fopen(path, "r");
        warns[r] = 0;
        while (f && fgets(line, sizeof line, f)) {
            fprintf(stderr, "  rank %d: %s", r, line);
            if (strstr(line, " WARN ") && strstr(line, "share GPU") && strstr(line, "dionrun --mps"))
                warns[r]++;
        }
        if (f) fclose(f);
        if (dev[r] < 0) {
            fprintf(stderr, "FAIL: rank %d exited with status %d\n", r, ws);
            bad = 1;
        }
    }
    return bad;
}

static int mode_share(int count)
{
    char dir[] = "/tmp/dion-gpu-select-XXXXXX";
    if (!mkdtemp(dir)) return fail("mkdtemp");
    int dev[2], warns[2], bad = 0;
    const int same[2] = {0, 0};
    if (run_pair(dir, same, dev, warns)) return 1;
    printf("gpu_select: local ranks 0,0 -> GPUs %d,%d, sharing warnings %d,%d\n", dev[0], dev[1], warns[0],
           warns[1]);
    if (dev[0] != 0 || dev[1] != 0) bad |= fail("local rank 0 must take GPU 0");
    if (warns[0] != 1 || warns[1] != 0) bad |= fail("want exactly one sharing warning, from rank 0");
    if (count >= 2) { /* mpirun -np 2 on a two-GPU node */
        const int spread[2] = {0, 1};
        if (run_pair(dir, spread, dev, warns)) return 1;
        printf("gpu_select: local ranks 0,1 -> GPUs %d,%d, sharing warnings %d,%d\n", dev[0], dev[1],
               warns[0], warns[1]);
        if (dev[0] != 0 || dev[1] != 1) bad |= fail("local ranks 0 and 1 must take GPUs 0 and 1");
        if (warns[0] || warns[1]) bad |= fail("no sharing, yet a warning");
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return bad;
}

int main(int argc, char **argv)
{
    /* no dionrun here: what a plain launcher gives */
    unsetenv("DION_DEVICE");
    unsetenv("DION_LOCAL_RANK");
    const char *mode = argc > 1 ? argv[1] : "";
    int count = 0;
    /* The share mode forks ranks, so its parent must not initialize CUDA: a child counts the GPUs. */
    if (!strcmp(mode, "share")) {
        pid_t p = fork();
        if (p == 0) _exit(cudaGetDeviceCount(&count) == cudaSuccess && count < 100 ? count : 0);
        int ws = 0;
        count = p > 0 && waitpid(p, &ws, 0) == p && WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
    } else if (cudaGetDeviceCount(&count) != cudaSuccess) {
        count = 0;
    }
    if (count == 0) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    if (!strcmp(mode, "local")) return mode_local(count);
    if (!strcmp(mode, "app")) return mode_app(count);
    if (!strcmp(mode, "share")) return mode_share(count);
    fprintf(stderr, "usage: gpu_select_gpu local|app|share\n");
    return 2;
}
