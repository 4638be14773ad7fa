/* The seam every backend plugs into (host side). src/ walks the table of backends in transports.c and names
 * none of them; a backend sees only this interface and the comm's public helpers (src/comm.h).
 *
 * A backend makes memory of this rank reachable by peers and reaches theirs: it describes a local region in a
 * fixed-size descriptor that travels to every rank by allgather, may run a collective side exchange (file
 * descriptors, connection setup), then imports each peer's region it serves. Device handles get, per peer,
 * the backend's kind (what device code dispatches on) and the memory scope its operations need. */
#ifndef DION_TRANSPORT_H
#define DION_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "src/comm.h"

#define DION__TL_WHY 512 /* bytes of a "why not" sentence */

/* What device code may load and store directly for one peer's region, and what it must ask the backend for.
 */
typedef struct {
    char *base;    /* load/store address of the peer's region in this process; NULL when not mapped */
    uint64_t size; /* bytes the peer registered */
    int on_host;   /* the peer's memory is host memory (system-scope ordering) */
} dion__tl_view_t;

typedef struct dion__tl_ops {
    const char *name;  /* as DION_TRANSPORT and dion-info spell it */
    uint32_t kind;     /* dion_transport_t written into the handle's peer entries */
    size_t desc_size;  /* bytes of one rank's region descriptor */
    size_t exp_size;   /* bytes of the local export state */
    size_t imp_size;   /* bytes of the state kept per imported peer region */
    size_t share_size; /* bytes per peer that the side exchange hands to mem_import (0: no exchange) */

    /* Whether this process can use the backend at all (libraries, devices, build). Does not block. comm may
     * be NULL: dion-info asks before any communicator exists. */
    int (*usable)(dion_comm_t comm, char *why, size_t cap);
    /* Whether this rank can reach peer through the backend. Does not block; why explains a no. */
    int (*reachable)(dion_comm_t comm, int peer, char *why, size_t cap);
    /* Scope that ordering towards peer needs (dion_scope_t); cpu: the handle runs in CPU mode. */
    uint32_t (*peer_scope)(dion_comm_t comm, int peer, int cpu);

    /* Describes [base, base+bytes) of this rank in desc and keeps what the export needs in exp. */
    dion_status_t (*mem_export)(dion_comm_t comm, void *base, size_t bytes, void *desc, void *exp);
    /* Collective, run by every rank of the comm whether or not it uses the backend: the side exchange.
     * descs: every rank's descriptor; shared: [nranks][share_size] filled for the peers served. May block. */
    dion_status_t (*mem_share)(dion_comm_t comm, const void *descs, const void *exp, void *shared);
    /* Imports peer's region (desc, and its part of the side exchange) into imp; fills view. May block. */
    dion_status_t (*mem_import)(dion_comm_t comm, int peer, const void *desc, void *shared, void *imp,
                                dion__tl_view_t *view);
    /* Releases what the side exchange left in one peer's entry and mem_import did not consume. */
    void (*share_release)(void *shared);
    void (*mem_release)(void *imp);  /* undoes mem_import; safe on a zeroed or failed imp */
    void (*mem_unexport)(void *exp); /* undoes mem_export; safe on a zeroed exp */
    /* Whether the memory desc describes is host memory (its users then order at system scope). */
    int (*desc_on_host)(const void *desc);

    /* The slots below may be NULL. */
    /* Collective over the ranks of the comm, run by every rank once the comm's choice shows that some rank
     * uses the backend (e.g. open an engine and exchange addresses through the bootstrap); *state is the
     * backend's per-comm state. comm_fini undoes it at comm destroy. */
    dion_status_t (*comm_init)(dion_comm_t comm, void **state);
    void (*comm_fini)(dion_comm_t comm, void *state);
    /* A region this rank exported through the backend was created: exp is this rank's export state (the
     * backend may take what it keeps from it; mem_unexport follows), imps[p] the import state of every peer
     * it serves (NULL for the others). *out is kept with the region until region_forget. */
    dion_status_t (*region_done)(dion_comm_t comm, void *state, void *exp, void *const *imps, void **out);
    /* The region is known by id (window id) from now on. */
    void (*region_named)(void *state, void *region, uint32_t id);
    void (*region_forget)(void *state, void *region);
    /* Device handles: dev_init fills the backend's part of the handle (dev->proxy_rings...) and starts what
     * serves it; signals is the handle's signal-table region (its region_done object, or NULL). dev_fini
     * undoes it before the handle's memory is freed. */
    dion_status_t (*dev_init)(dion_comm_t comm, void *state, void *signals, dion_dev_t *dev, int cpu,
                              void **dev_state);
    void (*dev_fini)(dion_comm_t comm, void *state, void *dev_state);
    /* Why the handle's part for context ctx failed (a sentence naming the peer); 0 when it did not. */
    int (*dev_why)(void *dev_state, uint32_t ctx, char *out, size_t cap);
    /* Whether the signal table must be pinned host memory mapped into the GPU (the engine writes it and
     * cannot register GPU memory), for a GPU-mode handle. */
    int (*signals_on_host)(dion_comm_t comm, void *state);
    /* The name the logs show for the peers this backend serves, once comm_init ran (the
     * proxy: "proxy/verbs" or "proxy/ofi"); NULL: name. DION_TRANSPORT=name/xxx forces this backend, which
     * reads the xxx itself. */
    const char *(*label)(void *state);
    /* 1: dev_init (and dev_fini) run on every rank once some rank uses the backend, also on ranks that use
     * it with no peer: dev_init is collective (it exchanges connection data through the bootstrap). */
    int dev_collective;
} dion__tl_ops_t;

struct dion__tl_region;

/* ---- per-comm backend table (transports.c) ---- */

/* Collective. Decides the backend of every peer once per comm (first window or handle): p2p, then gdaki,
 * then proxy/verbs, then proxy/ofi, or the one DION_TRANSPORT names; all ranks agree. A peer nobody can
 * reach fails the call on every rank with a sentence naming both ranks and each backend's reason. */
dion_status_t dion__tl_select(dion_comm_t comm);
/* The backend that serves peer (after dion__tl_select); this rank's own entry is the backend that exports
 * its memory to itself (p2p). */
const dion__tl_ops_t *dion__tl_of(dion_comm_t comm, int peer);
/* Releases what dion__tl_select built. */
void dion__tl_fini(dion_comm_t comm);
/* Whether this rank uses backend o with some peer (or some rank does: used_by_any), and its per-comm state.
 */
int dion__tl_uses(dion_comm_t comm, const dion__tl_ops_t *o, int used_by_any);
void *dion__tl_state(dion_comm_t comm, const dion__tl_ops_t *o);
/* Whether a GPU-mode signal table must be pinned host memory mapped into the GPU (some backend says so). */
int dion__tl_signals_on_host(dion_comm_t comm);
/* Device handles: every backend this rank uses fills its part of dev (dev_init), in order; fini undoes. */
dion_status_t dion__tl_dev_init(dion_comm_t comm, const struct dion__tl_region *signals, dion_dev_t *dev,
                                int cpu, void **states);
void dion__tl_dev_fini(dion_comm_t comm, void **states);
/* The first backend's sentence for a failure of context ctx of the handle; 0 when none has one. */
int dion__tl_dev_why(dion_comm_t comm, void **states, uint32_t ctx, char *out, size_t cap);
#define DION__TL_MAX 8

/* Every backend compiled in, in priority order; NULL-terminated. */
extern const dion__tl_ops_t *const dion__tl_all[];

/* ---- regions: one collective registration over every backend the comm uses ---- */

typedef struct dion__tl_region dion__tl_region_t;
/* Checks every rank's part (size, on_host; base not yet set) before anything is mapped. It runs on every rank
 * over the same data, so all ranks reach the same verdict without another exchange. */
typedef dion_status_t (*dion__tl_check_fn)(dion_comm_t comm, const dion__tl_view_t *parts, void *arg);
/* Collective: exports [base, base+bytes) of this rank through the backends in use and imports every peer's
 * part through the peer's backend. what names the step in error sentences ("the window", "the signal
 * table"); check may be NULL. */
dion_status_t dion__tl_region_create(dion_comm_t comm, void *base, size_t bytes, const char *what,
                                     dion__tl_check_fn check, void *check_arg, dion__tl_region_t **out);
const dion__tl_view_t *dion__tl_region_view(const dion__tl_region_t *r, int peer);
/* Names the region (its window id) for backends that look regions up by id. */
void dion__tl_region_name(dion__tl_region_t *r, uint32_t id);
void dion__tl_region_destroy(dion__tl_region_t *r);

/* ---- backends ---- */
extern const dion__tl_ops_t dion__tl_p2p;
extern const dion__tl_ops_t dion__tl_proxy;
extern const dion__tl_ops_t dion__tl_gdaki;

#endif /* DION_TRANSPORT_H */
