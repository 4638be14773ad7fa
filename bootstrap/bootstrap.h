/* How ranks find each other: the unique id, the root service and the ring of bootstrap connections. */
#ifndef DION_BOOTSTRAP_H
#define DION_BOOTSTRAP_H

#include <stdint.h>

#include "net.h"

#define DION__SECRET_LEN 16
#define DION__MAX_RANKS  (1 << 22)

/* The decoded contents of a dion_unique_id_t. */
typedef struct {
    dion__addr_t root;
    uint8_t secret[DION__SECRET_LEN];
    uint64_t job; /* random per id: names per-job resources such as local sockets */
} dion__uid_t;

void dion__uid_encode(const dion__uid_t *u, dion_unique_id_t *id);
dion_status_t dion__uid_decode(const dion_unique_id_t *id, dion__uid_t *u);
void dion__uid_to_hex(const dion_unique_id_t *id, char hex[2 * sizeof(dion_unique_id_t) + 1]);
dion_status_t dion__uid_from_hex(const char *hex, dion_unique_id_t *id);

/* Starts the root service on a detached thread, listening on *bind (port 0: any; updated). It serves one
 * job of ranks: collects every rank's ring address, hands each rank its successor's, then ends, or ends at
 * the bootstrap timeout. Connections without the secret are dropped and logged. */
dion_status_t dion__root_start(dion__addr_t *bind, const uint8_t secret[DION__SECRET_LEN]);

/* The handshakes prove knowledge of the secret without sending it: whoever accepts a connection first sends
 * a CHALLENGE (a fresh 16-byte nonce); the connecting side answers with its own nonce and a tag keyed by the
 * secret over both nonces and its fields; the accepting side answers with a tag over both nonces too. Each
 * tag has its own label, so that no answer can be replayed as another step's. */
#define DION__NONCE_LEN     16u
#define DION__CHALLENGE_LEN DION__NONCE_LEN
/* HELLO payload (rank -> root): nonce, rank, nranks, the rank's ring listener address, tag. */
#define DION__HELLO_LEN 52u
/* RING payload (root -> rank): successor's address, successor's rank, nranks, tag. */
#define DION__RING_LEN 36u
/* LINK payload (rank -> its successor's listener): nonce, rank of the connecting side, tag. */
#define DION__LINK_LEN 28u
/* LINK_OK payload (listener -> connecting rank): tag. */
#define DION__LINK_OK_LEN 8u
/* REFUSE payload (root -> rank): reason. */
#define DION__REFUSE_LEN 4u
enum {
    DION__REFUSE_PROOF = 1,     /* the HELLO's tag is wrong: another job's secret */
    DION__REFUSE_DUPLICATE = 2, /* another process already claimed this rank */
    DION__REFUSE_NRANKS = 3,    /* nranks differs from the first rank's */
    DION__REFUSE_MALFORMED = 4
};
/* ABORT payload: failed rank, status, reporting rank. */
#define DION__ABORT_LEN 12u

/* A HELLO as the root reads it (pure: bytes in, fields out, for the root and for fuzzing). The tag is checked
 * separately against the secret. */
typedef struct {
    uint8_t nonce[DION__NONCE_LEN];
    uint32_t rank, nranks;
    dion__addr_t addr;
    uint8_t tag[8];
} dion__hello_t;
dion_status_t dion__hello_parse(const uint8_t *payload, uint32_t len, dion__hello_t *out);

typedef struct dion__boot dion__boot_t;
dion_status_t dion__boot_init(const dion__uid_t *uid, int rank, int nranks, dion__boot_t **out);
dion_status_t dion__boot_allgather(dion__boot_t *b, const void *mine, size_t bytes, void *all);
dion_status_t dion__boot_bcast(dion__boot_t *b, void *buf, size_t bytes, int root);
dion_status_t dion__boot_barrier(dion__boot_t *b);
/* Tells the ring that failed_rank failed (best effort, never blocks long); later collectives fail at once. */
void dion__boot_abort(dion__boot_t *b, int failed_rank, dion_status_t why);
/* From any thread, while another may be inside a collective: that collective fails within 0.1 s, and the
 * news goes around the ring from there. */
void dion__boot_request_abort(dion__boot_t *b, int failed_rank, dion_status_t why);
/* File descriptors of the ring links, for failure monitoring (-1 when absent). */
void dion__boot_fds(dion__boot_t *b, int *prev_fd, int *next_fd);
int dion__boot_prev(dion__boot_t *b);
int dion__boot_next(dion__boot_t *b);
void dion__boot_destroy(dion__boot_t *b);

/* Environment initialization (env.c): finds rank, size and root from DION_* or launcher variables. */
typedef struct {
    int rank, nranks;
    dion_unique_id_t id;
    char rendezvous_path[512]; /* rank 0 removes this file once every rank has joined */
    const char *source;        /* which variables gave rank and size */
} dion__env_job_t;
dion_status_t dion__env_resolve(dion__env_job_t *job);

#endif
