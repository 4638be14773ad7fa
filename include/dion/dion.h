/* DION host API: communicators, windows, device handles.
 * Every call returns a dion_status_t; on failure dion_last_error() holds a sentence that says
 * what failed, why, and what to do about it. */
#ifndef DION_H
#define DION_H

#include "dion_types.h"

#ifdef __cplusplus
extern "C" {
#endif

DION_API const char *dion_status_string(dion_status_t s);
/* Thread-local: the last failure of this thread, as a sentence. Empty when none. */
DION_API const char *dion_last_error(void);
/* "0.1.0" */
DION_API const char *dion_version_string(void);

/* ---- communicators ---- */
typedef struct dion_comm *dion_comm_t;
typedef struct {
    unsigned char bytes[128];
} dion_unique_id_t;

/* Called by one process (rank 0, say): starts the bootstrap root in this process and describes it.
 * Share the id with every rank in any way; each then calls dion_comm_init_rank. */
DION_API dion_status_t dion_get_unique_id(dion_unique_id_t *id);
DION_API dion_status_t dion_comm_init_rank(dion_comm_t *comm, int nranks, const dion_unique_id_t *id,
                                           int rank);
/* DION_RANK/DION_NRANKS/DION_ROOT (or DION_UNIQUE_ID), else Open MPI, Slurm or torchrun variables. */
DION_API dion_status_t dion_comm_init_env(dion_comm_t *comm);
/* dion_mpi.h (header-only; libdion never links MPI): dion_comm_init_mpi(dion_comm_t *comm, MPI_Comm mc) */
DION_API int dion_comm_rank(dion_comm_t comm);
DION_API int dion_comm_size(dion_comm_t comm);
DION_API dion_status_t dion_comm_barrier(dion_comm_t comm);
/* Host-side collectives over the bootstrap network: small data (keys, ids), not a data path. */
DION_API dion_status_t dion_comm_allgather(dion_comm_t comm, const void *mine, size_t bytes, void *all);
DION_API dion_status_t dion_comm_bcast(dion_comm_t comm, void *buf, size_t bytes, int root);
DION_API dion_status_t dion_comm_destroy(dion_comm_t comm);
/* Every device wait / quiet / barrier of this comm returns DION_ERR_ABORTED, on every rank it reaches. */
DION_API dion_status_t dion_comm_abort(dion_comm_t comm);

/* ---- windows ---- */
typedef struct dion_win *dion_win_t;
/* Collective. base: cudaMalloc'd or cuMem (VMM) GPU memory, or host memory from dion_win_alloc(on_host=1).
 * Sizes may differ per rank; 0 bytes (base NULL) is allowed. */
DION_API dion_status_t dion_win_register(dion_comm_t comm, void *base, size_t bytes, dion_win_t *win);
/* Collective. Allocates GPU memory (on_host=0) or shareable host memory (on_host=1) and registers it; on_host
 * must be the same on every rank that asks for more than 0 bytes. */
DION_API dion_status_t dion_win_alloc(dion_comm_t comm, size_t bytes, int on_host, void **base,
                                      dion_win_t *win);
/* Collective; frees what dion_win_alloc allocated. The handle is invalid afterwards: calls given it again
 * fail with DION_ERR_INVALID_ARG, and DION_CHECK=1 records device calls given its dion_dwin_t. */
DION_API dion_status_t dion_win_destroy(dion_win_t win);
DION_API size_t dion_win_size(dion_win_t win, int rank);
DION_API dion_dwin_t dion_win_device(dion_win_t win);

/* ---- device handle ---- */
#define DION_DEV_FLAG_CPU 0x1u /* run the device API on CPU threads (CPU mode) even when a GPU is present */
typedef struct {
    uint32_t num_signals;     /* user signals per rank; 0 means 1024 */
    uint32_t num_contexts;    /* 0 means 1 */
    uint64_t wait_timeout_ns; /* 0 means DION_WAIT_TIMEOUT (default 10 s); UINT64_MAX waits forever */
    uint32_t flags;           /* DION_DEV_FLAG_* */
} dion_dev_attr_t;

/* Collective. num_signals, num_contexts, CPU mode and DION_CHECK must be the same on every rank (else
 * DION_ERR_INVALID_ARG on every rank, naming the ranks and values); wait_timeout_ns and DION_STATS may
 * differ. */
DION_API dion_status_t dion_dev_create(dion_comm_t comm, const dion_dev_attr_t *attr, dion_dev_t *dev);
DION_API dion_status_t dion_dev_destroy(dion_comm_t comm, dion_dev_t *dev); /* collective */
/* The first device-side error since the last check; dion_last_error() describes it. */
DION_API dion_status_t dion_dev_check(dion_comm_t comm, const dion_dev_t *dev);
DION_API dion_status_t dion_dev_stats(dion_comm_t comm, const dion_dev_t *dev, uint32_t ctx,
                                      dion_ctx_stats_t *out);

/* ---- CPU mode ---- */
/* Runs fn(arg) on grid*block CPU threads, each with its own block and thread index, so that the
 * device API (warp and block variants included) runs as it would in a kernel. Returns when all finished. */
DION_API dion_status_t dion_cpu_launch(unsigned grid, unsigned block, void (*fn)(void *), void *arg);

#ifdef __cplusplus
}
#endif
#endif /* DION_H */
