/* The communicator's host-side state, shared by windows, device handles and the watchdog. */
#ifndef DION_COMM_H
#define DION_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "internal.h"
#include "../bootstrap/bootstrap.h"

/* What every rank tells the others at init. Fixed size: it travels through allgather. */
typedef struct {
    char host[64];
    uint64_t host_key; /* same value on ranks of one node (hostname and boot id) */
    int32_t pid;
    int32_t cuda_device; /* ordinal in its own process, -1 without a GPU */
    uint8_t gpu_uuid[16];
    uint32_t gpu_pci; /* domain<<16 | bus<<8 | device */
    uint32_t pad;
    uint64_t nonce; /* random; rank 0's names this communicator's local sockets */
} dion__rank_info_t;

struct dion__devh;    /* dev.c */
struct dion__tl_comm; /* transports/transports.c */
struct dion_win;      /* win.c */

struct dion_comm {
    int rank, nranks;
    uint64_t job; /* from the unique id: names this job's local sockets */
    dion__boot_t *boot;
    pthread_mutex_t lock;    /* serializes host calls that use the bootstrap */
    dion__rank_info_t *info; /* [nranks] */
    int local_rank, local_size;
    int cuda_device; /* -1: none */
    uint64_t nonce;  /* rank 0's random draw: tells apart communicators of one job */
    int ux_fd;       /* Unix datagram socket for passing file descriptors to local ranks; -1 until needed */
    struct dion__fdpass *fdp; /* fdpass.c's state (round, message keys); NULL until the first exchange */
    uint32_t next_win_id;
    int live_windows;
    struct dion_win *wins;     /* live windows in registration order */
    int host_windows;          /* windows whose memory on this rank is host memory */
    struct dion__devh *devs;   /* device handles of this comm */
    pthread_mutex_t devs_lock; /* guards devs against the watchdog */
    pthread_t watchdog;
    int watchdog_running;
    volatile int watchdog_stop;
    uint64_t watchdog_interval_ns;
    int failed_rank_seen;     /* a neighbour's bootstrap link broke; -1 while none */
    struct dion__tl_comm *tl; /* the backend of every peer, chosen at the first window or handle */
    int link_left[2];         /* the neighbour on the prev / next link left through dion_comm_destroy */
};

/* Same node as this rank? */
static inline int dion__comm_is_local(const struct dion_comm *c, int r)
{
    return c->info[r].host_key == c->info[c->rank].host_key;
}

dion_status_t dion__comm_check(dion_comm_t comm, const char *fn);
/* Collective: every rank learns whether every rank's step succeeded. On failure it returns the first failed
 * rank's status; the sentence is this rank's own when it failed, else names that rank and the step. */
dion_status_t dion__comm_agree(dion_comm_t comm, dion_status_t mine, const char *what);

/* Passing file descriptors to local ranks (fdpass.c): every local rank sends its fd to every other local rank
 * and receives theirs. fds_out[r] is -1 for non-local ranks and this rank. tag distinguishes concurrent uses.
 */
dion_status_t dion__fd_exchange(dion_comm_t comm, uint32_t tag, int my_fd, int *fds_out);
/* Closes the socket and frees the state (comm destroy). */
void dion__fd_close(dion_comm_t comm);

/* One fd-passing message, 40 bytes little endian: magic "DFD1", from, to, tag (u32 each), round (u64), nfds
 * (u32), reserved 0 (u32), then SipHash-2-4 under the sender's key over the first 32 bytes. */
#define DION__FDMSG_LEN 40u
typedef struct {
    uint32_t from, to, tag, nfds;
    uint64_t round;
    uint8_t mac[8];
} dion__fdmsg_t;
/* Pure: bytes in, fields out (the tag is checked by the caller, who knows the sender's key). */
dion_status_t dion__fdmsg_parse(const void *buf, size_t len, dion__fdmsg_t *out);
void dion__fdmsg_encode(const dion__fdmsg_t *m, const uint8_t key[DION__SECRET_LEN],
                        uint8_t out[DION__FDMSG_LEN]);

/* Windows (win.c): fills the handle's window slots from the live windows, oldest first. */
void dion__win_fill_slots(dion_comm_t comm, struct dion_dev_win_slot *slots, int max);
/* Forgets the comm's windows and frees what destroyed ones kept (their handles and descriptors). */
void dion__win_free_zombies(dion_comm_t comm);
/* Whether some live device handle names this window table in a slot (dev.c). */
int dion__dev_slot_uses(dion_comm_t comm, const void *table);

/* Watchdog (watchdog.c). */
dion_status_t dion__watchdog_start(dion_comm_t comm);
void dion__watchdog_stop(dion_comm_t comm);
/* Tells both bootstrap neighbours that this rank leaves in order (dion_comm_destroy), so that their watchdogs
 * do not report it as failed. */
void dion__watchdog_goodbye(dion_comm_t comm);

/* Device handles (dev.c): called by abort and the watchdog. */
void dion__dev_abort_all(dion_comm_t comm, dion_status_t why, int failed_rank);
void dion__dev_report_errors(dion_comm_t comm);

#endif
