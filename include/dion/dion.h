/** \file dion.h
 * DION host API: communicators, windows, device handles.
 * Every call returns a dion_status_t; on failure dion_last_error() holds a sentence that says
 * what failed, why, and what to do about it. "Collective" calls must be made by every rank of the comm,
 * in the same order; they block until all ranks arrived (or the bootstrap times out). */
#ifndef DION_H
#define DION_H

#include "dion_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The name of a status code.
 * \param s any dion_status_t value (others give "DION_ERR_(unknown)").
 * \return a static string such as "DION_ERR_TIMEOUT"; never NULL. */
DION_API const char *dion_status_string(dion_status_t s);
/** Thread-local: the last failure of this thread, as a sentence (what failed, why, what to do).
 * \return the sentence, or an empty string when none; valid until this thread's next failing call. */
DION_API const char *dion_last_error(void);
/** The library's version.
 * \return a static string "MAJOR.MINOR.PATCH", e.g. "0.1.0" (see DION_VERSION_MAJOR). */
DION_API const char *dion_version_string(void);

/* ---- communicators ---- */
/** A communicator: the ranks of one job, joined over the bootstrap network. */
typedef struct dion_comm *dion_comm_t;
/** An opaque bootstrap address (root host, port, secret) that every rank passes to dion_comm_init_rank. */
typedef struct {
    unsigned char bytes[128]; /**< opaque */
} dion_unique_id_t;

/** Called by one process (rank 0, say): starts the bootstrap root in this process and describes it.
 * Share the id with every rank in any way; each then calls dion_comm_init_rank. Not collective.
 * \param id receives the id.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG (NULL), DION_ERR_BOOTSTRAP (no listening socket). */
DION_API dion_status_t dion_get_unique_id(dion_unique_id_t *id);
/** Collective: joins rank `rank` of `nranks` to the comm whose root `id` describes; blocks until all joined.
 * \param comm receives the communicator.
 * \param nranks number of ranks, the same on every rank.
 * \param id the id from dion_get_unique_id, the same on every rank.
 * \param rank this process's rank, 0 <= rank < nranks, each once.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG, DION_ERR_BOOTSTRAP or DION_ERR_TIMEOUT (root unreachable). */
DION_API dion_status_t dion_comm_init_rank(dion_comm_t *comm, int nranks, const dion_unique_id_t *id,
                                           int rank);
/** Collective: like dion_comm_init_rank with rank, size and root read from the environment: DION_RANK /
 * DION_NRANKS / DION_ROOT (or DION_UNIQUE_ID) as dionrun sets them, else Open MPI, Slurm or torchrun
 * variables (docs/multihost.md). For MPI programs see dion_comm_init_mpi in dion_mpi.h. \param comm receives
 * the communicator. \return DION_SUCCESS, DION_ERR_BOOTSTRAP (no usable variables; the sentence lists what
 * was looked for), DION_ERR_TIMEOUT. */
DION_API dion_status_t dion_comm_init_env(dion_comm_t *comm);
/** \param comm a communicator. \return this process's rank in comm (-1 for NULL). */
DION_API int dion_comm_rank(dion_comm_t comm);
/** \param comm a communicator. \return the number of ranks in comm (-1 for NULL). */
DION_API int dion_comm_size(dion_comm_t comm);
/** Collective, blocking: returns when every rank called it. Host-side only; orders no device operations.
 * \param comm the communicator.
 * \return DION_SUCCESS, DION_ERR_PEER_FAILED (a rank exited), DION_ERR_TIMEOUT, DION_ERR_BOOTSTRAP. */
DION_API dion_status_t dion_comm_barrier(dion_comm_t comm);
/** Collective host allgather over the bootstrap network: small data (keys, ids), not a data path.
 * \param comm the communicator.
 * \param mine this rank's `bytes` bytes.
 * \param bytes the size of each rank's part, the same on every rank.
 * \param all receives nranks * bytes bytes, rank r's part at offset r * bytes.
 * \return as dion_comm_barrier, or DION_ERR_INVALID_ARG. */
DION_API dion_status_t dion_comm_allgather(dion_comm_t comm, const void *mine, size_t bytes, void *all);
/** Collective host broadcast of small data from root over the bootstrap network.
 * \param comm the communicator.
 * \param buf the data at root; receives it elsewhere.
 * \param bytes its size, the same on every rank.
 * \param root the sending rank.
 * \return as dion_comm_allgather. */
DION_API dion_status_t dion_comm_bcast(dion_comm_t comm, void *buf, size_t bytes, int root);
/** Leaves the bootstrap and frees the comm. Destroy its windows and handles first (else their memory stays
 * mapped until the process exits).
 * \param comm the communicator (NULL is a no-op); invalid afterwards.
 * \return DION_SUCCESS. */
DION_API dion_status_t dion_comm_destroy(dion_comm_t comm);
/** Not collective: every device wait / quiet / barrier of this comm returns DION_ERR_ABORTED, on every rank
 * it reaches (docs/semantics.md, "Timeouts, abort and failed peers").
 * \param comm the communicator.
 * \return DION_SUCCESS or DION_ERR_INVALID_ARG. */
DION_API dion_status_t dion_comm_abort(dion_comm_t comm);

/* ---- windows ---- */
/** A window: memory every rank registered, addressed by (rank, offset) in device calls. */
typedef struct dion_win *dion_win_t;
/** Collective: registers memory as this rank's part of a new window.
 * \param comm the communicator.
 * \param base cudaMalloc'd or cuMem (VMM) GPU memory, or host memory from dion_win_alloc(on_host=1).
 * \param bytes this rank's size; sizes may differ per rank; 0 bytes (base NULL) is allowed.
 * \param win receives the window.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG (memory that cannot be registered), DION_ERR_UNSUPPORTED,
 * DION_ERR_CUDA, DION_ERR_NO_MEMORY, or a bootstrap error (DION_ERR_PEER_FAILED, DION_ERR_TIMEOUT). */
DION_API dion_status_t dion_win_register(dion_comm_t comm, void *base, size_t bytes, dion_win_t *win);
/** Collective: allocates GPU memory (on_host=0) or shareable host memory (on_host=1) and registers it.
 * \param comm the communicator.
 * \param bytes this rank's size (may differ per rank, may be 0).
 * \param on_host 1 for host memory (CPU mode); the same on every rank that asks for more than 0 bytes.
 * \param base receives this rank's address (zero-filled memory).
 * \param win receives the window.
 * \return as dion_win_register, or DION_ERR_NO_MEMORY. */
DION_API dion_status_t dion_win_alloc(dion_comm_t comm, size_t bytes, int on_host, void **base,
                                      dion_win_t *win);
/** Collective: deregisters the window and frees what dion_win_alloc allocated. No kernel may still use it.
 * \param win the window; invalid afterwards: calls given it again fail with DION_ERR_INVALID_ARG, and
 * DION_CHECK=1 records device calls given its dion_dwin_t.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG, DION_ERR_PEER_FAILED. */
DION_API dion_status_t dion_win_destroy(dion_win_t win);
/** \param win a window. \param rank a rank of its comm.
 * \return the bytes rank registered (0 for a bad argument). */
DION_API size_t dion_win_size(dion_win_t win, int rank);
/** The device-side descriptor that kernels (and CPU mode) pass to put, get and atomics.
 * \param win a window. \return its descriptor (NULL for a bad argument); valid until dion_win_destroy. */
DION_API dion_dwin_t dion_win_device(dion_win_t win);

/* ---- device handle ---- */
#define DION_DEV_FLAG_CPU 0x1u /**< device calls on CPU threads (CPU mode) even where a GPU is present */
/** Options of dion_dev_create; NULL there means all zero. */
typedef struct {
    uint32_t num_signals;     /**< user signals per rank; 0 means 1024 */
    uint32_t num_contexts;    /**< 0 means 1 */
    uint64_t wait_timeout_ns; /**< 0 means DION_WAIT_TIMEOUT (default 10 s); UINT64_MAX waits forever */
    uint32_t flags;           /**< DION_DEV_FLAG_* */
} dion_dev_attr_t;

/** Collective: builds the device handle (signal tables, contexts, error ring) over the windows registered so
 * far; kernels take it by value. Windows registered later work too, through their descriptor.
 * \param comm the communicator.
 * \param attr options, or NULL. num_signals, num_contexts, CPU mode and DION_CHECK must be the same on every
 * rank (else DION_ERR_INVALID_ARG on every rank, naming the ranks and values); wait_timeout_ns and DION_STATS
 * may differ.
 * \param dev receives the handle.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG, DION_ERR_NO_MEMORY, DION_ERR_CUDA, DION_ERR_PEER_FAILED. */
DION_API dion_status_t dion_dev_create(dion_comm_t comm, const dion_dev_attr_t *attr, dion_dev_t *dev);
/** Collective: waits for this rank's kernels (or CPU-mode launches) to end and for every rank to arrive, then
 * frees the handle. \param comm the communicator it was made on. \param dev the handle; zeroed.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG, DION_ERR_CUDA, DION_ERR_TIMEOUT, DION_ERR_PEER_FAILED. */
DION_API dion_status_t dion_dev_destroy(dion_comm_t comm, dion_dev_t *dev);
/** Not collective: reports (and frees) the first device-side error record since the last check; call it
 * after the kernel finished. \param comm the communicator. \param dev the handle.
 * \return DION_SUCCESS, or the record's status (DION_ERR_TIMEOUT, DION_ERR_INVALID_ARG from DION_CHECK,
 * DION_ERR_ABORTED, DION_ERR_PEER_FAILED); dion_last_error() describes it (op, peer, signal, values). */
DION_API dion_status_t dion_dev_check(dion_comm_t comm, const dion_dev_t *dev);
/** Reads one context's counters, kept when DION_STATS=1.
 * \param comm the communicator. \param dev the handle. \param ctx the context index.
 * \param out receives the counters.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG, DION_ERR_UNSUPPORTED (DION_STATS not set). */
DION_API dion_status_t dion_dev_stats(dion_comm_t comm, const dion_dev_t *dev, uint32_t ctx,
                                      dion_ctx_stats_t *out);

/* ---- CPU mode ---- */
/** CPU mode: runs fn(arg) on grid*block CPU threads, each with its own block and thread index, so that the
 * device API (warp and block variants included) runs as it would in a kernel. Blocks until all finished.
 * \param grid number of blocks. \param block threads per block.
 * \param fn the "kernel". \param arg its argument.
 * \return DION_SUCCESS, DION_ERR_INVALID_ARG (0 or too many threads), DION_ERR_NO_MEMORY. */
DION_API dion_status_t dion_cpu_launch(unsigned grid, unsigned block, void (*fn)(void *), void *arg);

#ifdef __cplusplus
}
#endif
#endif /* DION_H */
