/* proxy/verbs on-demand connection (DION_IB_CONNECT=ondemand, or auto above DION_IB_EAGER_MAX_RANKS): the RC
 * QP towards a peer is made when the proxy first posts to that peer, and its 40-byte blob (engine_verbs.h) is
 * exchanged point to point over TCP instead of through the bootstrap. Each rank listens on one TCP port whose
 * address (and a random key) travels once, at comm creation, through the engine's address/connect.
 *
 * Handshake, 64-byte messages: the requester sends HELLO with its blob; the target makes its QP for the
 * requester if it has none, moves it to RTR/RTS with that blob and answers REPLY with its own blob; the
 * requester connects its QP and answers ACK. Each side may post once it knows the other's QP is in RTR: the
 * requester at REPLY, the target at ACK. Crossing requests need no tie-break: a rank has one QP per peer
 * whoever asks, so both exchanges carry the same two blobs; each side connects at the first blob it sees and
 * checks any second one against it.
 *
 * Threads: everything runs in the thread that drives the engine (the proxy thread, under the comm's mutex):
 * ready() from posts, progress() from poll. Nothing blocks: sockets are non-blocking and progress is one
 * poll(2) with timeout 0 over the listener and the open handshakes. A target answers within one pass of its
 * proxy thread, also while that thread is busy with its own rings (it polls between batches). */
#ifndef DION_VERBS_CM_H
#define DION_VERBS_CM_H

#include <stdint.h>

#include "engine_verbs.h"

typedef struct dion__vcm dion__vcm_t;

#define DION__VCM_ADDR_BYTES 28 /* family, port, IP (16), key (8) */
#define DION__VCM_MSG_BYTES  64

/* Opens the listener on the bootstrap's interface (DION_BOOTSTRAP_IFNAME rules) and writes this rank's
 * address. timeout_ns: how long a first command waits for its peer's handshake before failing. */
dion_status_t dion__vcm_open(dion__verbs_t *v, int rank, int nranks, uint64_t timeout_ns, dion__vcm_t **out,
                             uint8_t addr[DION__VCM_ADDR_BYTES]);
/* Every rank's address (all[r * DION__VCM_ADDR_BYTES]), own included. */
dion_status_t dion__vcm_peers(dion__vcm_t *m, const uint8_t *all, int nranks);
/* DION_SUCCESS: the QP to peer is connected and the peer's is in RTR (posts may go). DION__ENGINE_BUSY: the
 * handshake is under way (started by this call when it was not); post again after polling. Else the error,
 * with a sentence naming the peer (the handshake did not complete within the timeout, or went wrong). */
dion_status_t dion__vcm_ready(dion__vcm_t *m, int peer);
/* Accepts, reads and writes what can be without blocking; fails handshakes past their deadline. */
void dion__vcm_progress(dion__vcm_t *m);
void dion__vcm_close(dion__vcm_t *m);

/* Pure, for the unit tests: the handshake message on the wire (little endian). */
enum { DION__VCM_HELLO = 1, DION__VCM_REPLY = 2, DION__VCM_ACK = 3 };
typedef struct {
    uint32_t kind, from, to;
    uint64_t key; /* the receiver's key, from its address: only comm members know it */
    uint8_t blob[DION__VERBS_ADDR_BYTES];
} dion__vcm_msg_t;
void dion__vcm_msg_pack(const dion__vcm_msg_t *m, uint8_t out[DION__VCM_MSG_BYTES]);
/* 0, or -1 for a wrong magic or kind. */
int dion__vcm_msg_unpack(const uint8_t in[DION__VCM_MSG_BYTES], dion__vcm_msg_t *m);

#endif
