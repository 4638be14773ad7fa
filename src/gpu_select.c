/* GPU choice without dionrun, and the warning for ranks that share a GPU without MPS; see gpu_select.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cuda.h"
#include "gpu_select.h"

dion__gpu_choice_t dion__gpu_choose(int local_rank, int count, int app_chose, long long dion_device)
{
    dion__gpu_choice_t c = {-1, ""};
    if (count <= 0) {
        c.why = "no GPU visible";
    } else if (dion_device >= 0) {
        c.device = (int)dion_device;
        c.why = "DION_DEVICE";
    } else if (app_chose == 1) {
        c.why = "the application chose its device before DION";
    } else if (app_chose < 0) {
        c.why = "the driver cannot tell whether the application chose a device; the current one is kept";
    } else if (local_rank < 0) {
        c.why = "no launcher variable gives the local rank; the current device is kept";
    } else {
        c.device = local_rank % count;
        c.why = "local rank modulo visible GPUs";
    }
    return c;
}

/* In the order launchers are most specific: dionrun's own, then Open MPI, Slurm, torchrun, MPICH/Intel MPI.
 */
static const char *const dion__local_rank_vars[] = {"DION_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                                    "SLURM_LOCALID", "LOCAL_RANK", "MPI_LOCALRANKID"};

int dion__gpu_local_rank(const char **var)
{
    if (var) *var = NULL;
    for (size_t i = 0; i < sizeof dion__local_rank_vars / sizeof dion__local_rank_vars[0]; i++) {
        const char *v = dion__cfg_env(dion__local_rank_vars[i]);
        if (!v) continue;
        char *end = NULL;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < 0 || x > (1 << 20)) {
            DION_LOG(DION_LOG_WARN, "%s='%s' is not a local rank (a whole number >= 0); ignored",
                     dion__local_rank_vars[i], v);
            continue;
        }
        if (var) *var = dion__local_rank_vars[i];
        return (int)x;
    }
    return -1;
}

int dion__gpu_mps_active(int dev)
{
    int on = 0;
    /* cudaDevAttrMpsEnabled (133, CUDA 12.x drivers); an older driver rejects it and the pipe decides. */
    if (dev >= 0 && cudaDeviceGetAttribute(&on, (enum cudaDeviceAttr)133, dev) == cudaSuccess) return on != 0;
    cudaGetLastError();
    const char *dir = dion__cfg_env("CUDA_MPS_PIPE_DIRECTORY");
    char control[4096];
    snprintf(control, sizeof control, "%s/control", dir ? dir : "/tmp/nvidia-mps");
    struct stat st;
    return stat(control, &st) == 0;
}

static int dion__same_gpu(const dion__rank_info_t *a, const dion__rank_info_t *b)
{
    return a->host_key == b->host_key && a->cuda_device >= 0 && b->cuda_device >= 0 &&
           memcmp(a->gpu_uuid, b->gpu_uuid, sizeof a->gpu_uuid) == 0;
}

int dion__gpu_sharing_note(const dion__rank_info_t *info, int nranks, int rank, int mps, char *msg,
                           size_t cap)
{
    if (mps || rank < 0 || rank >= nranks || info[rank].cuda_device < 0) return 0;
    int first = -1, n = 0;
    for (int r = 0; r < nranks; r++)
        if (dion__same_gpu(&info[r], &info[rank])) {
            if (first < 0) first = r;
            n++;
        }
    if (n < 2 || first != rank) return 0;
    char ranks[256] = "";
    size_t k = 0;
    for (int r = 0; r < nranks && k < sizeof ranks - 16; r++)
        if (dion__same_gpu(&info[r], &info[rank]))
            k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%d", k ? "," : "", r);
    if (k >= sizeof ranks - 16) snprintf(ranks + k, sizeof ranks - k, ",...");
    const uint8_t *u = info[rank].gpu_uuid;
    uint32_t pci = info[rank].gpu_pci;
    snprintf(
        msg, cap,
        "ranks %s (%d of them) share GPU %d (PCI %04x:%02x:%02x, UUID GPU-%02x%02x%02x%02x-...) on %s "
        "without MPS: their kernels take turns on the GPU, so a wait for a peer on it can take "
        "milliseconds. Fix: launch with 'dionrun --mps' (or start 'nvidia-cuda-mps-control -d'), or give "
        "each rank its own GPU (as many GPUs visible as ranks per node)",
        ranks, n, info[rank].cuda_device, pci >> 16, (pci >> 8) & 0xff, pci & 0xff, u[0], u[1], u[2], u[3],
        info[rank].host);
    return 1;
}

int dion__gpu_warn_sharing(const dion__rank_info_t *info, int nranks, int rank, int mps)
{
    static int warned;
    char msg[1024];
    if (!dion__gpu_sharing_note(info, nranks, rank, mps, msg, sizeof msg)) return 0;
    if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) return 0;
    DION_LOG(DION_LOG_WARN, "%s", msg);
    return 1;
}
