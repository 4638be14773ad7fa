/* TCP helpers for the bootstrap: addresses, non-blocking sockets with deadlines, bounded frames. */
#ifndef DION_BOOTSTRAP_NET_H
#define DION_BOOTSTRAP_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dion/dion.h"

/* An IPv4 or IPv6 address with a port, in a fixed-size form that travels inside ids and frames. */
typedef struct {
    uint16_t family; /* 4 or 6 */
    uint16_t port;   /* host byte order */
    uint8_t addr[16];
} dion__addr_t;

#define DION__ADDR_STRLEN 64
const char *dion__addr_str(const dion__addr_t *a, char buf[DION__ADDR_STRLEN]);
/* "host:port", "[v6]:port"; host may be a name. */
dion_status_t dion__addr_parse(const char *text, dion__addr_t *out);
/* The address the root listens on: DION_BOOTSTRAP_IFNAME, else the first non-loopback IPv4, else 127.0.0.1.
 */
dion_status_t dion__addr_local(dion__addr_t *out);
int dion__addr_is_any(const dion__addr_t *a);

/* Creates a non-blocking listening socket; addr->port 0 picks one, and addr is updated. */
dion_status_t dion__listen(dion__addr_t *addr, int *fd);
/* Connects, retrying refused and unreachable attempts until the deadline. */
dion_status_t dion__connect(const dion__addr_t *addr, uint64_t deadline_ns, int *fd);
/* Accepts one connection before the deadline; DION_ERR_TIMEOUT otherwise. */
dion_status_t dion__accept(int lfd, uint64_t deadline_ns, int *fd, dion__addr_t *peer);
dion_status_t dion__local_addr(int fd, dion__addr_t *out);
/* The socket form of a, for connect and bind; *len gets its size. */
void dion__to_sockaddr(const dion__addr_t *a, struct sockaddr_storage *ss, socklen_t *len);
void dion__set_nonblock(int fd);

/* Whole-buffer transfers bounded by a deadline. EOF and resets give DION_ERR_PEER_FAILED. */
dion_status_t dion__send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
dion_status_t dion__recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);

/* Frames: a 12-byte header (magic, type, reserved, payload length; little endian) and a bounded payload. */
#define DION__FRAME_MAGIC 0x464e4f44u /* "DONF" */
#define DION__FRAME_HDR   12u
#define DION__FRAME_MAX   (1u << 20) /* largest payload any frame may carry */
enum {
    DION__FRAME_HELLO = 1,     /* rank -> root */
    DION__FRAME_RING = 2,      /* root -> rank: the next rank's address */
    DION__FRAME_LINK = 3,      /* rank -> next rank: who is connecting */
    DION__FRAME_DATA = 4,      /* collective payload */
    DION__FRAME_ABORT = 5,     /* a rank failed; payload: failed rank and status */
    DION__FRAME_CHALLENGE = 6, /* root or ring listener -> connecting rank: a fresh nonce to prove against */
    DION__FRAME_REFUSE = 7,    /* root -> rank: why it was turned away (unauthenticated: a hint only) */
    DION__FRAME_LINK_OK = 8    /* ring listener -> connecting rank: the listener's proof */
};
#define DION__FRAME_TYPE_MAX DION__FRAME_LINK_OK
void dion__frame_hdr_encode(uint8_t out[DION__FRAME_HDR], uint32_t type, uint32_t len);
/* Checks magic and bound; 0 when the header is acceptable. */
int dion__frame_hdr_decode(const uint8_t in[DION__FRAME_HDR], uint32_t *type, uint32_t *len);
dion_status_t dion__send_frame(int fd, uint32_t type, const void *payload, uint32_t len,
                               uint64_t deadline_ns);
/* Receives one frame whose payload must fit cap; anything else is DION_ERR_BOOTSTRAP. */
dion_status_t dion__recv_frame(int fd, uint32_t *type, void *payload, uint32_t cap, uint32_t *len,
                               uint64_t deadline_ns);

/* Little-endian field access for frame payloads. */
static inline void dion__put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t dion__get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void dion__put_u64(uint8_t *p, uint64_t v)
{
    dion__put_u32(p, (uint32_t)v);
    dion__put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t dion__get_u64(const uint8_t *p)
{
    return dion__get_u32(p) | (uint64_t)dion__get_u32(p + 4) << 32;
}
void dion__addr_encode(uint8_t out[20], const dion__addr_t *a);
int dion__addr_decode(const uint8_t in[20], dion__addr_t *a);

/* Deadlines: now + d without wrapping, and the wait before one, cut into slices of at most 100 ms so that
 * every waiting loop checks its abort flag and its deadline again (a huge DION_BOOTSTRAP_TIMEOUT once
 * overflowed the int that poll takes and made it wait forever). */
#define DION__POLL_SLICE_MS 100
uint64_t dion__deadline_after(uint64_t d_ns);
int dion__slice_ms(uint64_t deadline_ns);

/* SipHash-2-4 (Aumasson and Bernstein): a 64-bit keyed hash under a 128-bit key (auth.c). */
uint64_t dion__siphash24(const uint8_t key[16], const void *msg, size_t len);
/* A proof of knowing key: SipHash-2-4 over a label (which keeps the proofs of different handshake steps
 * apart) and the step's fields, len <= 192. */
uint64_t dion__auth_tag(const uint8_t key[16], const char *label, const void *fields, size_t len);
int dion__auth_check(const uint8_t key[16], const char *label, const void *fields, size_t len,
                     const uint8_t tag[8]);

/* Constant-time comparison of secrets. */
int dion__secret_equal(const uint8_t *a, const uint8_t *b, size_t n);
/* Fills buf from /dev/urandom (getrandom). */
dion_status_t dion__random_bytes(void *buf, size_t n);

#endif
