/* Environment initialization: rank and size from DION_* or the launcher's variables (Open MPI, Slurm,
 * torchrun); the root from DION_UNIQUE_ID, DION_ROOT, MASTER_ADDR/MASTER_PORT, or a rendezvous file that rank
 * 0 writes for single-node jobs. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "../src/internal.h"

typedef struct {
    const char *rank_var, *size_var, *name;
} dion__launcher_t;

static const dion__launcher_t dion__launchers[] = {
    {"DION_RANK", "DION_NRANKS", "DION_RANK/DION_NRANKS"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
    {"SLURM_PROCID", "SLURM_NTASKS", "Slurm"},
    {"RANK", "WORLD_SIZE", "torchrun"},
};

/* 128 bits from a string: SipHash-2-4 under two fixed keys. A derivation, not a secret of its own: the result
 * is as secret as the string (a DION_SECRET, or a launcher's job id, which other users may be able to read).
 */
static void dion__hash128(const char *text, uint8_t out[16])
{
    static const uint8_t k1[16] = "dion-derive-key1", k2[16] = "dion-derive-key2";
    size_t n = strlen(text);
    dion__put_u64(out, dion__siphash24(k1, text, n));
    dion__put_u64(out + 8, dion__siphash24(k2, text, n));
}

static dion_status_t dion__env_rank(dion__env_job_t *job)
{
    for (size_t i = 0; i < sizeof dion__launchers / sizeof dion__launchers[0]; i++) {
        const dion__launcher_t *l = &dion__launchers[i];
        const char *r = dion__cfg_env(l->rank_var), *s = dion__cfg_env(l->size_var);
        if (!r && !s) continue;
        if (!r || !s)
            return dion__error(DION_ERR_INVALID_ARG, "%s is set but %s is not; set both (or neither)",
                               r ? l->rank_var : l->size_var, r ? l->size_var : l->rank_var);
        long long size, rank;
        dion_status_t st = dion__cfg_int(l->size_var, 1, DION__MAX_RANKS, &size);
        if (st != DION_SUCCESS) return st;
        if ((st = dion__cfg_int(l->rank_var, 0, size - 1, &rank)) != DION_SUCCESS) return st;
        job->rank = (int)rank;
        job->nranks = (int)size;
        job->source = l->name;
        return DION_SUCCESS;
    }
    return dion__error(
        DION_ERR_BOOTSTRAP,
        "dion_comm_init_env found no rank and size: set DION_RANK and DION_NRANKS, or start the "
        "program with dionrun, mpirun (OMPI_COMM_WORLD_RANK/SIZE), srun (SLURM_PROCID/NTASKS) or "
        "torchrun (RANK/WORLD_SIZE)");
}

/* A key naming this job, for the rendezvous file and the default secret; NULL if the launcher gives none. */
static const char *dion__env_job_key(char *buf, size_t cap)
{
    const char *v;
    if ((v = dion__cfg_env("PMIX_NAMESPACE")))
        snprintf(buf, cap, "ompi:%s", v);
    else if ((v = dion__cfg_env("OMPI_MCA_ess_base_jobid")))
        snprintf(buf, cap, "ompi:%s", v);
    else if ((v = dion__cfg_env("OMPI_MCA_orte_hnp_uri")))
        snprintf(buf, cap, "orte:%s", v);
    else if ((v = dion__cfg_env("SLURM_JOB_ID"))) {
        const char *step = dion__cfg_env("SLURM_STEP_ID");
        snprintf(buf, cap, "slurm:%s.%s", v, step ? step : "0");
    } else if ((v = dion__cfg_env("TORCHELASTIC_RUN_ID")))
        snprintf(buf, cap, "torch:%s", v);
    else
        return NULL;
    return buf;
}

/* Whether all ranks of the job are on this node, as far as the launcher tells. */
static int dion__env_single_node(const dion__env_job_t *job)
{
    long long v;
    if (dion__cfg_env("OMPI_COMM_WORLD_LOCAL_SIZE") &&
        dion__cfg_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, DION__MAX_RANKS, &v) == DION_SUCCESS)
        return v == job->nranks;
    if (dion__cfg_env("SLURM_NNODES") &&
        dion__cfg_int("SLURM_NNODES", 1, DION__MAX_RANKS, &v) == DION_SUCCESS)
        return v == 1;
    return 0;
}

static dion_status_t dion__env_write_rendezvous(const char *path, const dion_unique_id_t *id)
{
    char tmp[600], hex[2 * sizeof id->bytes + 1];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    unlink(tmp); /* a leftover of a crashed earlier writer with this pid */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return dion__error(DION_ERR_BOOTSTRAP,
                           "cannot write the rendezvous file %s: %s; set DION_TMPDIR to a "
                           "writable folder or DION_ROOT=host:port",
                           tmp, strerror(errno));
    dion__uid_to_hex(id, hex);
    char line[400];
    int n = snprintf(line, sizeof line, "dion-rendezvous 1 %d %s\n", (int)getpid(), hex);
    ssize_t w = write(fd, line, (size_t)n);
    close(fd);
    if (w != n || rename(tmp, path) != 0) {
        unlink(tmp);
        return dion__error(DION_ERR_BOOTSTRAP, "cannot write the rendezvous file %s", path);
    }
    return DION_SUCCESS;
}

/* The folder for rendezvous files, DION_TMPDIR/dion-UID: created 0700 and believed only while it is a real
 * folder of this user that nobody else can write. In a shared DION_TMPDIR another user could otherwise
 * pre-create the file names (stopping jobs from starting) or plant a root address. */
static dion_status_t dion__env_private_dir(char *out, size_t cap)
{
    const char *tmp = dion__cfg_str("DION_TMPDIR");
    unsigned uid = (unsigned)getuid();
    if ((size_t)snprintf(out, cap, "%s/dion-%u", tmp, uid) >= cap)
        return dion__error(DION_ERR_INVALID_ARG, "DION_TMPDIR=%s is too long a path (at most %zu characters)",
                           tmp, cap - 20);
    if (mkdir(out, 0700) != 0 && errno != EEXIST)
        return dion__error(DION_ERR_BOOTSTRAP,
                           "cannot create the folder %s for the rendezvous file: %s; set DION_TMPDIR to a "
                           "writable folder or DION_ROOT=host:port",
                           out, strerror(errno));
    struct stat sb;
    if (lstat(out, &sb) != 0)
        return dion__error(DION_ERR_BOOTSTRAP, "cannot inspect the rendezvous folder %s: %s", out,
                           strerror(errno));
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != uid || (sb.st_mode & 077))
        return dion__error(
            DION_ERR_BOOTSTRAP,
            "%s is not a private folder of this user: it is %s owned by uid %u with mode %04o, and DION "
            "needs a folder owned by uid %u with mode 0700 (another user may have created it to stop DION "
            "jobs from starting). Remove it, set DION_TMPDIR to a folder only you can write, or set "
            "DION_ROOT=host:port",
            out,
            S_ISDIR(sb.st_mode)   ? "a folder"
            : S_ISLNK(sb.st_mode) ? "a symbolic link"
                                  : "a file",
            (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777), uid);
    return DION_SUCCESS;
}

/* Waits for rank 0's rendezvous file, skipping files whose writer is no longer alive. */
static dion_status_t dion__env_read_rendezvous(const char *path, dion_unique_id_t *id)
{
    uint64_t timeout;
    dion_status_t st = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &timeout);
    if (st != DION_SUCCESS) return st;
    uint64_t deadline = dion__deadline_after(timeout);
    for (;;) {
        /* Only a file of this user that nobody else can write is believed: the folder may be shared. */
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat sb;
        FILE *f = NULL;
        if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == getuid() &&
            !(sb.st_mode & 022))
            f = fdopen(fd, "r");
        else if (fd >= 0)
            close(fd);
        if (f) {
            char hex[400] = {0};
            int ver = 0, pid = 0;
            int ok = fscanf(f, "dion-rendezvous %d %d %300s", &ver, &pid, hex) == 3 && ver == 1;
            fclose(f);
            if (ok && (kill(pid, 0) == 0 || errno == EPERM)) return dion__uid_from_hex(hex, id);
        }
        if (dion__now_ns() >= deadline)
            return dion__error(
                DION_ERR_BOOTSTRAP,
                "rank 0 did not write the rendezvous file %s within DION_BOOTSTRAP_TIMEOUT; check that "
                "rank 0 started and that all ranks share DION_TMPDIR, or set DION_ROOT=host:port",
                path);
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

/* The how-many-th env initialization of this process: the ranks of a job make the same sequence of calls, so
 * each generation meets in its own rendezvous file and a fast rank never reads the previous one's. */
static unsigned dion__env_generation;

dion_status_t dion__env_resolve(dion__env_job_t *job)
{
    memset(job, 0, sizeof *job);
    dion_status_t st = dion__env_rank(job);
    if (st != DION_SUCCESS) return st;

    const char *uid_hex = dion__cfg_env("DION_UNIQUE_ID");
    if (uid_hex) return dion__uid_from_hex(uid_hex, &job->id);

    char keybuf[300], rootbuf[300];
    const char *key = dion__env_job_key(keybuf, sizeof keybuf);
    const char *root_text = dion__cfg_env("DION_ROOT");
    long long offset = 1;
    if (!root_text && dion__cfg_env("MASTER_ADDR")) {
        long long port;
        if (!dion__cfg_env("MASTER_PORT"))
            return dion__error(DION_ERR_INVALID_ARG,
                               "MASTER_ADDR is set but MASTER_PORT is not; set both or DION_ROOT");
        if ((st = dion__cfg_int("MASTER_PORT", 1, 65535, &port)) != DION_SUCCESS) return st;
        if ((st = dion__cfg_int("DION_ROOT_PORT_OFFSET", -65535, 65535, &offset)) != DION_SUCCESS) return st;
        if (port + offset < 1 || port + offset > 65535)
            return dion__error(DION_ERR_INVALID_ARG,
                               "MASTER_PORT+DION_ROOT_PORT_OFFSET = %lld is not a valid port", port + offset);
        const char *host = dion__cfg_env("MASTER_ADDR");
        snprintf(rootbuf, sizeof rootbuf, strchr(host, ':') ? "[%s]:%lld" : "%s:%lld", host, port + offset);
        root_text = rootbuf;
    }

    dion__uid_t u;
    memset(&u, 0, sizeof u);
    if (root_text) {
        if ((st = dion__addr_parse(root_text, &u.root)) != DION_SUCCESS)
            return dion__error(st, "DION_ROOT: %s", dion_last_error());
        if (u.root.port == 0)
            return dion__error(DION_ERR_INVALID_ARG, "the root address %s needs a nonzero port", root_text);
        /* The secret must come from something other jobs do not share: a root address is public. */
        const char *secret = dion__cfg_env("DION_SECRET");
        if (!secret && !key)
            return dion__error(
                DION_ERR_BOOTSTRAP,
                "dion_comm_init_env with the root address %s has no secret to tell this job's ranks from "
                "another job's: set DION_SECRET to the same random string on every rank (e.g. the output "
                "of 'od -An -tx1 -N16 /dev/urandom'), or start the job with dionrun, mpirun, srun or "
                "torchrun (their job id then separates jobs), or pass DION_UNIQUE_ID",
                root_text);
        char seed[700];
        snprintf(seed, sizeof seed, "%s|%s|%s", secret ? "secret" : "job", secret ? secret : key, root_text);
        dion__hash128(seed, u.secret);
        dion__put_u64((uint8_t *)&u.job, dion__get_u64(u.secret) ^ 0x9e3779b97f4a7c15ull);
        if (!secret)
            DION_LOG(DION_LOG_INFO,
                     "no DION_SECRET: the bootstrap secret is derived from the launcher's job id (%s), which "
                     "keeps jobs apart but other users may be able to read it; set DION_SECRET against them",
                     key);
        if (job->rank == 0) {
            /* Rank 0 hosts the root on every interface at the given port. */
            dion__addr_t bind = u.root;
            memset(bind.addr, 0, sizeof bind.addr);
            if ((st = dion__root_start(&bind, u.secret)) != DION_SUCCESS)
                return dion__error_wrap(
                    st, "rank 0 could not host the bootstrap root at %s (is the port in use?)", root_text);
        }
        dion__uid_encode(&u, &job->id);
        return DION_SUCCESS;
    }

    /* No address given: single-node jobs meet through a file that rank 0 writes. */
    if (!key || !dion__env_single_node(job))
        return dion__error(
            DION_ERR_BOOTSTRAP,
            "dion_comm_init_env (ranks from %s) needs the root's address: set DION_ROOT=host:port "
            "(a port rank 0 can listen on, reachable from every rank), or MASTER_ADDR and "
            "MASTER_PORT; without them only single-node jobs under mpirun or srun can meet through a "
            "rendezvous file",
            job->source);
    uint8_t h[16];
    char dir[400];
    dion__hash128(key, h);
    if ((st = dion__env_private_dir(dir, sizeof dir)) != DION_SUCCESS) return st;
    unsigned gen = __atomic_fetch_add(&dion__env_generation, 1, __ATOMIC_RELAXED);
    snprintf(job->rendezvous_path, sizeof job->rendezvous_path, "%s/%016llx-%u.root", dir,
             (unsigned long long)dion__get_u64(h), gen);
    if (job->rank == 0) {
        if ((st = dion__random_bytes(u.secret, sizeof u.secret)) != DION_SUCCESS) return st;
        if ((st = dion__random_bytes(&u.job, sizeof u.job)) != DION_SUCCESS) return st;
        u.root.family = 4;
        u.root.addr[0] = 127;
        u.root.addr[3] = 1;
        if ((st = dion__root_start(&u.root, u.secret)) != DION_SUCCESS) return st;
        dion__uid_encode(&u, &job->id);
        return dion__env_write_rendezvous(job->rendezvous_path, &job->id);
    }
    st = dion__env_read_rendezvous(job->rendezvous_path, &job->id);
    job->rendezvous_path[0] = 0; /* only rank 0 removes it */
    return st;
}
