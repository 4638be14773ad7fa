/* Communicators: creation through the bootstrap, rank facts exchanged once, host-side collectives. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "cuda.h"
#include "gpu_select.h"
#include "transports/transport.h"

dion_status_t dion__comm_check(dion_comm_t comm, const char *fn)
{
    if (!comm)
        return dion__error(DION_ERR_INVALID_ARG, "%s: comm is NULL; create it with dion_comm_init_*", fn);
    return DION_SUCCESS;
}

dion_status_t dion__comm_agree(dion_comm_t c, dion_status_t mine, const char *what)
{
    int32_t *all = malloc(sizeof(int32_t) * (size_t)c->nranks), me = (int32_t)mine;
    if (!all) return dion__error(DION_ERR_NO_MEMORY, "out of memory");
    char saved[512];
    snprintf(saved, sizeof saved, "%s", dion_last_error());
    dion_status_t st = dion__boot_allgather(c->boot, &me, sizeof me, all);
    if (st == DION_SUCCESS && mine != DION_SUCCESS) {
        st = mine; /* this rank's own sentence says more than another rank's name */
        dion__error_set(st, "%s", saved);
    }
    for (int r = 0; st == DION_SUCCESS && r < c->nranks; r++)
        if (all[r] != DION_SUCCESS) {
            st = (dion_status_t)all[r];
            dion__error(st, "%s failed on rank %d (%s); see that rank's log", what, r,
                        dion_status_string(st));
        }
    free(all);
    return st;
}

static uint64_t dion__host_key(const char *host)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
        fclose(f);
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = host; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    h = (h ^ '|') * 0x100000001b3ull;
    for (const char *p = boot; *p && *p != '\n'; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return h;
}

/* Selects this rank's GPU and describes it. DION_DEVICE (set by dionrun) decides; else, when the application
 * has not chosen a device itself, local rank modulo the visible GPUs, the local rank coming from the launcher
 * (mpirun, srun, torchrun): what NCCL and NVSHMEM users are told to do by hand. */
static dion_status_t dion__comm_gpu(dion_comm_t c, dion__rank_info_t *me)
{
    me->cuda_device = -1;
    c->cuda_device = -1;
    int count = dion__cuda_device_count();
    long long want = -1;
    if (dion__cfg_env("DION_DEVICE")) {
        dion_status_t st = dion__cfg_int("DION_DEVICE", -1, 1 << 20, &want);
        if (st != DION_SUCCESS) return st;
    }
    if (count == 0) return DION_SUCCESS;
    if (want >= count)
        return dion__error(DION_ERR_INVALID_ARG, "DION_DEVICE=%lld but this process sees %d GPU(s) (0..%d)",
                           want, count, count - 1);
    const char *var = NULL;
    int local_rank = dion__gpu_local_rank(&var);
    int app_chose = want >= 0 ? 0 : dion__cuda_app_chose_device();
    dion__gpu_choice_t pick = dion__gpu_choose(local_rank, count, app_chose, want);
    if (pick.device >= 0) DION_CUDA_TRY(cudaSetDevice(pick.device));
    DION_LOG(DION_LOG_DEBUG, "GPU choice: %s (local rank %d from %s, %d visible)", pick.why, local_rank,
             var ? var : "no variable", count);
    int dev = 0;
    DION_CUDA_TRY(cudaGetDevice(&dev));
    struct cudaDeviceProp prop;
    DION_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
    me->cuda_device = dev;
    memcpy(me->gpu_uuid, prop.uuid.bytes, 16);
    me->gpu_pci =
        (uint32_t)prop.pciDomainID << 16 | (uint32_t)prop.pciBusID << 8 | (uint32_t)prop.pciDeviceID;
    c->cuda_device = dev;
    return DION_SUCCESS;
}

dion_status_t dion_comm_init_rank(dion_comm_t *comm, int nranks, const dion_unique_id_t *id, int rank)
{
    dion__log_init();
    if (!comm) return dion__error(DION_ERR_INVALID_ARG, "dion_comm_init_rank: comm is NULL");
    *comm = NULL;
    if (nranks < 1 || nranks > DION__MAX_RANKS)
        return dion__error(DION_ERR_INVALID_ARG, "dion_comm_init_rank: nranks=%d; it must lie in [1, %d]",
                           nranks, DION__MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return dion__error(DION_ERR_INVALID_ARG,
                           "dion_comm_init_rank: rank=%d; it must lie in [0, nranks-1=%d]", rank, nranks - 1);
    if (!id) return dion__error(DION_ERR_INVALID_ARG, "dion_comm_init_rank: id is NULL");
    dion__uid_t u;
    dion_status_t st = dion__uid_decode(id, &u);
    if (st != DION_SUCCESS) return st;

    struct dion_comm *c = calloc(1, sizeof *c);
    if (!c) return dion__error(DION_ERR_NO_MEMORY, "out of memory creating a communicator");
    c->rank = rank;
    c->nranks = nranks;
    c->job = u.job;
    c->ux_fd = -1;
    c->failed_rank_seen = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->devs_lock, NULL);
    dion__log_set_rank(rank);

    dion__rank_info_t me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0) strcpy(me.host, "?");
    me.host_key = dion__host_key(me.host);
    me.pid = (int32_t)getpid();
    if ((st = dion__random_bytes(&me.nonce, sizeof me.nonce)) != DION_SUCCESS) goto fail;
    if ((st = dion__comm_gpu(c, &me)) != DION_SUCCESS) goto fail;

    if ((st = dion__boot_init(&u, rank, nranks, &c->boot)) != DION_SUCCESS) goto fail;
    c->info = calloc((size_t)nranks, sizeof *c->info);
    if (!c->info) {
        st = dion__error(DION_ERR_NO_MEMORY, "out of memory for %d rank descriptions", nranks);
        goto fail;
    }
    if ((st = dion__boot_allgather(c->boot, &me, sizeof me, c->info)) != DION_SUCCESS) {
        dion__error_wrap(st, "rank %d: exchanging rank descriptions", rank);
        goto fail;
    }
    c->nonce = c->info[0].nonce;
    for (int r = 0; r < nranks; r++) {
        if (!dion__comm_is_local(c, r)) continue;
        if (r < rank) c->local_rank++;
        c->local_size++;
    }
    if (c->cuda_device >= 0)
        dion__gpu_warn_sharing(c->info, nranks, rank, dion__gpu_mps_active(c->cuda_device));
    if ((st = dion__watchdog_start(c)) != DION_SUCCESS) goto fail;
    DION_LOG(DION_LOG_INFO, "comm ready: rank %d of %d, %d on this node, GPU %d", rank, nranks, c->local_size,
             c->cuda_device);
    *comm = c;
    return DION_SUCCESS;
fail:
    dion__boot_destroy(c->boot);
    free(c->info);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->devs_lock);
    free(c);
    return st;
}

dion_status_t dion_comm_init_env(dion_comm_t *comm)
{
    dion__log_init();
    if (!comm) return dion__error(DION_ERR_INVALID_ARG, "dion_comm_init_env: comm is NULL");
    *comm = NULL;
    dion__env_job_t job;
    dion_status_t st = dion__env_resolve(&job);
    if (st != DION_SUCCESS) return st;
    st = dion_comm_init_rank(comm, job.nranks, &job.id, job.rank);
    /* Every rank has joined once init returns: the rendezvous file is no longer needed. */
    if (job.rendezvous_path[0]) unlink(job.rendezvous_path);
    return st;
}

int dion_comm_rank(dion_comm_t comm)
{
    return comm ? comm->rank : -1;
}
int dion_comm_size(dion_comm_t comm)
{
    return comm ? comm->nranks : -1;
}

dion_status_t dion_comm_barrier(dion_comm_t comm)
{
    dion_status_t st = dion__comm_check(comm, "dion_comm_barrier");
    if (st != DION_SUCCESS) return st;
    pthread_mutex_lock(&comm->lock);
    st = dion__boot_barrier(comm->boot);
    pthread_mutex_unlock(&comm->lock);
    return st;
}

dion_status_t dion_comm_allgather(dion_comm_t comm, const void *mine, size_t bytes, void *all)
{
    dion_status_t st = dion__comm_check(comm, "dion_comm_allgather");
    if (st != DION_SUCCESS) return st;
    if (bytes && (!mine || !all))
        return dion__error(DION_ERR_INVALID_ARG, "dion_comm_allgather: %s is NULL with bytes=%zu",
                           mine ? "all" : "mine", bytes);
    pthread_mutex_lock(&comm->lock);
    st = dion__boot_allgather(comm->boot, mine, bytes, all);
    pthread_mutex_unlock(&comm->lock);
    return st;
}

dion_status_t dion_comm_bcast(dion_comm_t comm, void *buf, size_t bytes, int root)
{
    dion_status_t st = dion__comm_check(comm, "dion_comm_bcast");
    if (st != DION_SUCCESS) return st;
    if (root < 0 || root >= comm->nranks)
        return dion__error(DION_ERR_INVALID_ARG, "dion_comm_bcast: root=%d; it must lie in [0, %d]", root,
                           comm->nranks - 1);
    if (bytes && !buf)
        return dion__error(DION_ERR_INVALID_ARG, "dion_comm_bcast: buf is NULL with bytes=%zu", bytes);
    pthread_mutex_lock(&comm->lock);
    st = dion__boot_bcast(comm->boot, buf, bytes, root);
    pthread_mutex_unlock(&comm->lock);
    return st;
}

dion_status_t dion_comm_abort(dion_comm_t comm)
{
    dion_status_t st = dion__comm_check(comm, "dion_comm_abort");
    if (st != DION_SUCCESS) return st;
    DION_LOG(DION_LOG_WARN, "rank %d aborts the communicator", comm->rank);
    /* Device waits stop through the control words; host collectives through the ring. */
    dion__dev_abort_all(comm, DION_ERR_ABORTED, comm->rank);
    /* A host collective of another thread may hold the lock for as long as the bootstrap timeout: then ask it
     * to fail, and it passes the news on. */
    if (pthread_mutex_trylock(&comm->lock) == 0) {
        dion__boot_abort(comm->boot, comm->rank, DION_ERR_ABORTED);
        pthread_mutex_unlock(&comm->lock);
    } else {
        dion__boot_request_abort(comm->boot, comm->rank, DION_ERR_ABORTED);
    }
    return DION_SUCCESS;
}

dion_status_t dion_comm_destroy(dion_comm_t comm)
{
    if (!comm) return DION_SUCCESS;
    dion__watchdog_stop(comm);
    if (comm->live_windows || comm->devs)
        DION_LOG(
            DION_LOG_WARN,
            "dion_comm_destroy: %d window(s) and %s device handle(s) still exist; destroy them first (their "
            "memory stays mapped until the process exits)",
            comm->live_windows, comm->devs ? "some" : "no");
    dion__win_free_zombies(comm);
    dion__tl_fini(comm);
    dion__watchdog_goodbye(comm);
    dion__boot_destroy(comm->boot);
    dion__fd_close(comm);
    free(comm->info);
    pthread_mutex_destroy(&comm->lock);
    pthread_mutex_destroy(&comm->devs_lock);
    free(comm);
    return DION_SUCCESS;
}
