/* The unique id and the bootstrap root service.
 * The root challenges every connection with a fresh nonce, accepts one HELLO per rank whose tag proves the
 * secret over that nonce, and tells each rank the address of its
 * successor so that the ranks form a ring; it never relays data. It keeps O(nranks) addresses and closes each
 * rank's connection as soon as that rank has its answer. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "../src/internal.h"

#define DION__UID_MAGIC        "DION"
#define DION__UID_VERSION      1
#define DION__ROOT_MAX_PENDING 256           /* connections that have not yet sent a full HELLO */
#define DION__ROOT_HELLO_NS    5000000000ull /* a connection must send its HELLO within this */
#define DION__ROOT_WARN_LIMIT  8             /* dropped connections logged at WARN; the rest at DEBUG */

void dion__uid_encode(const dion__uid_t *u, dion_unique_id_t *id)
{
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, DION__UID_MAGIC, 4);
    id->bytes[4] = DION__UID_VERSION;
    dion__addr_encode(id->bytes + 8, &u->root);
    memcpy(id->bytes + 28, u->secret, DION__SECRET_LEN);
    dion__put_u64(id->bytes + 44, u->job);
}

dion_status_t dion__uid_decode(const dion_unique_id_t *id, dion__uid_t *u)
{
    if (memcmp(id->bytes, DION__UID_MAGIC, 4) != 0 || id->bytes[4] != DION__UID_VERSION)
        return dion__error(DION_ERR_INVALID_ARG,
                           "id is not a DION unique id (bad magic or version); pass the bytes that "
                           "dion_get_unique_id wrote, unchanged");
    if (dion__addr_decode(id->bytes + 8, &u->root) != 0)
        return dion__error(DION_ERR_INVALID_ARG, "id holds no valid root address; it was damaged in transit");
    memcpy(u->secret, id->bytes + 28, DION__SECRET_LEN);
    u->job = dion__get_u64(id->bytes + 44);
    return DION_SUCCESS;
}

void dion__uid_to_hex(const dion_unique_id_t *id, char hex[2 * sizeof(dion_unique_id_t) + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof id->bytes; i++) {
        hex[2 * i] = digits[id->bytes[i] >> 4];
        hex[2 * i + 1] = digits[id->bytes[i] & 15];
    }
    hex[2 * sizeof id->bytes] = 0;
}

static int dion__hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

dion_status_t dion__uid_from_hex(const char *hex, dion_unique_id_t *id)
{
    size_t n = strlen(hex);
    if (n != 2 * sizeof id->bytes)
        return dion__error(DION_ERR_INVALID_ARG,
                           "DION_UNIQUE_ID has %zu characters; a unique id is %zu hex digits", n,
                           2 * sizeof id->bytes);
    for (size_t i = 0; i < sizeof id->bytes; i++) {
        int hi = dion__hexval(hex[2 * i]), lo = dion__hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return dion__error(DION_ERR_INVALID_ARG, "DION_UNIQUE_ID has a non-hex character at position %zu",
                               2 * i);
        id->bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    return DION_SUCCESS;
}

/* ---- the root service ---- */

typedef struct {
    int fd;
    uint32_t have;
    uint64_t deadline;
    dion__addr_t from;
    uint8_t nonce[DION__NONCE_LEN]; /* the challenge this connection must answer */
    uint8_t buf[DION__FRAME_HDR + DION__HELLO_LEN];
} dion__root_conn_t;

typedef struct {
    int fd; /* waiting for its answer; -1 once answered */
    uint8_t known, answered;
    dion__addr_t addr;
    uint8_t nonce[DION__NONCE_LEN]; /* the rank's own: the RING's tag covers it */
} dion__root_rank_t;

typedef struct {
    int lfd;
    uint8_t secret[DION__SECRET_LEN];
    uint64_t timeout_ns;
    dion__addr_t bind;
    int nranks;
    int answered;
    dion__root_rank_t *ranks;
    dion__root_conn_t conns[DION__ROOT_MAX_PENDING];
    int nconns;
    unsigned long dropped;
} dion__root_t;

dion_status_t dion__hello_parse(const uint8_t *p, uint32_t len, dion__hello_t *h)
{
    if (len != DION__HELLO_LEN)
        return dion__error_set(DION_ERR_BOOTSTRAP, "HELLO of %u bytes; expected %u", len, DION__HELLO_LEN);
    memcpy(h->nonce, p, DION__NONCE_LEN);
    h->rank = dion__get_u32(p + 16);
    h->nranks = dion__get_u32(p + 20);
    memcpy(h->tag, p + 44, 8);
    if (h->nranks == 0 || h->nranks > DION__MAX_RANKS)
        return dion__error_set(DION_ERR_BOOTSTRAP, "HELLO: invalid number of ranks %u", h->nranks);
    if (h->rank >= h->nranks)
        return dion__error_set(DION_ERR_BOOTSTRAP, "HELLO: rank %u out of range", h->rank);
    if (dion__addr_decode(p + 24, &h->addr) != 0)
        return dion__error_set(DION_ERR_BOOTSTRAP, "HELLO: invalid ring address");
    return DION_SUCCESS;
}

/* Drops connection i; refuse != 0 first tells the other side why (best effort, never waits). */
static void dion__root_drop(dion__root_t *r, int i, const char *why, uint32_t refuse)
{
    char a[DION__ADDR_STRLEN], b[DION__ADDR_STRLEN];
    if (refuse) {
        uint8_t p[DION__REFUSE_LEN];
        dion__put_u32(p, refuse);
        (void)dion__send_frame(r->conns[i].fd, DION__FRAME_REFUSE, p, sizeof p, dion__now_ns());
    }
    r->dropped++;
    if (r->dropped <= DION__ROOT_WARN_LIMIT)
        DION_LOG(DION_LOG_WARN, "bootstrap root %s: dropped a connection from %s: %s%s",
                 dion__addr_str(&r->bind, a), dion__addr_str(&r->conns[i].from, b), why,
                 r->dropped == DION__ROOT_WARN_LIMIT ? " (further drops are logged at debug level)" : "");
    else
        DION_LOG(DION_LOG_DEBUG, "bootstrap root: dropped a connection: %s", why);
    close(r->conns[i].fd);
    r->conns[i] = r->conns[--r->nconns];
}

static void dion__root_answer(dion__root_t *r, int i)
{
    int n = r->nranks, next = (i + 1) % n;
    dion__root_rank_t *me = &r->ranks[i];
    if (!me->known || me->answered || !r->ranks[next].known) return;
    uint8_t p[DION__RING_LEN] = {0}, f[DION__NONCE_LEN + 28];
    dion__addr_encode(p, &r->ranks[next].addr);
    dion__put_u32(p + 20, (uint32_t)next);
    dion__put_u32(p + 24, (uint32_t)n);
    /* The root's proof: the rank's own nonce and the answer, under the secret. */
    memcpy(f, me->nonce, DION__NONCE_LEN);
    memcpy(f + DION__NONCE_LEN, p, 28);
    dion__put_u64(p + 28, dion__auth_tag(r->secret, "dion ring", f, sizeof f));
    dion_status_t st =
        dion__send_frame(me->fd, DION__FRAME_RING, p, sizeof p, dion__now_ns() + 1000000000ull);
    if (st != DION_SUCCESS)
        DION_LOG(DION_LOG_WARN, "bootstrap root: could not answer rank %d (%s); it will time out", i,
                 dion_last_error());
    close(me->fd);
    me->fd = -1;
    me->answered = 1;
    r->answered++;
}

/* Validates a complete HELLO; returns NULL when accepted, else why not (and *refuse, what to tell). */
static const char *dion__root_hello(dion__root_t *r, int ci, uint32_t *refuse)
{
    dion__root_conn_t *c = &r->conns[ci];
    uint32_t type, len;
    *refuse = DION__REFUSE_MALFORMED;
    if (dion__frame_hdr_decode(c->buf, &type, &len) != 0) return "malformed frame header";
    if (type != DION__FRAME_HELLO || len != DION__HELLO_LEN) return "first frame is not a HELLO";
    const uint8_t *p = c->buf + DION__FRAME_HDR;
    dion__hello_t h;
    if (dion__hello_parse(p, len, &h) != DION_SUCCESS) return "malformed HELLO";
    uint8_t f[DION__NONCE_LEN + 44];
    memcpy(f, c->nonce, DION__NONCE_LEN);
    memcpy(f + DION__NONCE_LEN, p, 44);
    if (!dion__auth_check(r->secret, "dion hello", f, sizeof f, h.tag)) {
        *refuse = DION__REFUSE_PROOF;
        return "wrong proof of the secret (a different job or a stray client)";
    }
    uint32_t rank = h.rank, nranks = h.nranks;
    dion__addr_t addr = h.addr;
    if (r->nranks == 0) {
        r->ranks = calloc(nranks, sizeof *r->ranks);
        if (!r->ranks) return "out of memory";
        r->nranks = (int)nranks;
    } else if ((int)nranks != r->nranks) {
        *refuse = DION__REFUSE_NRANKS;
        return "number of ranks differs from the first rank's";
    }
    dion__root_rank_t *rk = &r->ranks[rank];
    if (rk->known) {
        *refuse = DION__REFUSE_DUPLICATE;
        return "duplicate rank (two processes claim the same rank)";
    }
    /* A ring address on the wildcard means "where you saw me": use the source address. */
    if (dion__addr_is_any(&addr)) {
        uint16_t port = addr.port;
        addr = c->from;
        addr.port = port;
    }
    rk->known = 1;
    rk->fd = c->fd;
    memcpy(rk->nonce, h.nonce, DION__NONCE_LEN);
    rk->addr = addr;
    DION_LOG(DION_LOG_DEBUG, "bootstrap root: rank %u of %u arrived", rank, nranks);
    r->conns[ci] = r->conns[--r->nconns]; /* the fd now belongs to the rank */
    dion__root_answer(r, (int)rank);
    dion__root_answer(r, ((int)rank + r->nranks - 1) % r->nranks);
    return NULL;
}

static void dion__root_accept(dion__root_t *r, uint64_t now)
{
    /* Accept only while there is room: the rest wait in the kernel's backlog until pending connections have
     * been read or timed out, so a flood never pushes out a rank whose HELLO is already on its way. */
    while (r->nconns < DION__ROOT_MAX_PENDING) {
        int fd;
        dion__addr_t from;
        if (dion__accept(r->lfd, now, &fd, &from) != DION_SUCCESS) return; /* deadline 'now': no waiting */
        dion__root_conn_t *c = &r->conns[r->nconns];
        memset(c, 0, sizeof *c);
        uint8_t ch[DION__CHALLENGE_LEN];
        if (dion__random_bytes(c->nonce, DION__NONCE_LEN) != DION_SUCCESS) {
            close(fd);
            return;
        }
        memcpy(ch, c->nonce, sizeof ch);
        /* A fresh socket's send buffer is empty: this never waits. */
        if (dion__send_frame(fd, DION__FRAME_CHALLENGE, ch, sizeof ch, now + 100000000ull) != DION_SUCCESS) {
            close(fd);
            continue;
        }
        r->nconns++;
        c->fd = fd;
        c->from = from;
        c->deadline = now + DION__ROOT_HELLO_NS;
    }
}

static void *dion__root_main(void *arg)
{
    dion__root_t *r = arg;
    char a[DION__ADDR_STRLEN];
    uint64_t deadline = dion__deadline_after(r->timeout_ns);
    struct pollfd *pfd = malloc(sizeof *pfd * (DION__ROOT_MAX_PENDING + 1));
    if (!pfd) goto out;
    while (r->nranks == 0 || r->answered < r->nranks) {
        uint64_t now = dion__now_ns();
        if (now >= deadline) {
            int known = 0;
            for (int i = 0; i < r->nranks; i++) known += r->ranks[i].known;
            DION_LOG(
                DION_LOG_ERROR,
                "bootstrap root %s: timed out: %d of %d ranks arrived within DION_BOOTSTRAP_TIMEOUT; the "
                "others never connected",
                dion__addr_str(&r->bind, a), known, r->nranks);
            break;
        }
        pfd[0].fd = r->nconns < DION__ROOT_MAX_PENDING ? r->lfd : -1; /* full: let the backlog wait */
        pfd[0].events = POLLIN;
        pfd[0].revents = 0;
        for (int i = 0; i < r->nconns; i++) {
            pfd[i + 1].fd = r->conns[i].fd;
            pfd[i + 1].events = POLLIN;
            pfd[i + 1].revents = 0;
        }
        int nfds = r->nconns + 1;
        uint64_t wait = (deadline - now) / 1000000 + 1;
        if (wait > 100) wait = 100;
        if (poll(pfd, (nfds_t)nfds, (int)wait) < 0 && errno != EINTR) break;
        now = dion__now_ns();
        /* Service connections from the highest index down: dropping swaps in the last one. */
        for (int i = nfds - 2; i >= 0; i--) {
            if (i >= r->nconns) continue;
            dion__root_conn_t *c = &r->conns[i];
            if (pfd[i + 1].revents) {
                ssize_t got = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, MSG_DONTWAIT);
                if (got == 0) {
                    dion__root_drop(r, i, "closed before sending a full HELLO", 0);
                    continue;
                }
                if (got < 0) {
                    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                        dion__root_drop(r, i, "connection error", 0);
                    continue;
                }
                c->have += (uint32_t)got;
                uint32_t type, len;
                if (c->have >= DION__FRAME_HDR && dion__frame_hdr_decode(c->buf, &type, &len) != 0) {
                    dion__root_drop(r, i, "malformed frame header (bad magic, type or length)", 0);
                    continue;
                }
                if (c->have >= DION__FRAME_HDR && (type != DION__FRAME_HELLO || len != DION__HELLO_LEN)) {
                    dion__root_drop(r, i, "first frame is not a HELLO of the expected length", 0);
                    continue;
                }
                if (c->have == sizeof c->buf) {
                    uint32_t refuse = 0;
                    const char *why = dion__root_hello(r, i, &refuse);
                    if (why) dion__root_drop(r, i, why, refuse);
                }
            } else if (now > c->deadline) {
                dion__root_drop(r, i, "sent no complete HELLO in time", 0);
            }
        }
        if (pfd[0].revents & POLLIN) dion__root_accept(r, now);
    }
    if (r->nranks && r->answered == r->nranks)
        DION_LOG(DION_LOG_INFO, "bootstrap root %s: all %d ranks connected (%lu stray connections dropped)",
                 dion__addr_str(&r->bind, a), r->nranks, r->dropped);
out:
    free(pfd);
    for (int i = 0; i < r->nconns; i++) close(r->conns[i].fd);
    for (int i = 0; i < r->nranks; i++)
        if (r->ranks[i].known && !r->ranks[i].answered) close(r->ranks[i].fd);
    close(r->lfd);
    free(r->ranks);
    free(r);
    return NULL;
}

dion_status_t dion__root_start(dion__addr_t *bind, const uint8_t secret[DION__SECRET_LEN])
{
    dion__root_t *r = calloc(1, sizeof *r);
    if (!r) return dion__error(DION_ERR_NO_MEMORY, "out of memory starting the bootstrap root");
    dion_status_t st = dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &r->timeout_ns);
    if (st != DION_SUCCESS) {
        free(r);
        return st;
    }
    memcpy(r->secret, secret, DION__SECRET_LEN);
    st = dion__listen(bind, &r->lfd);
    if (st != DION_SUCCESS) {
        free(r);
        return dion__error_wrap(st, "starting the bootstrap root");
    }
    r->bind = *bind;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, dion__root_main, r);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(r->lfd);
        free(r);
        return dion__error(DION_ERR_INTERNAL, "cannot start the bootstrap root thread: %s", strerror(rc));
    }
    return DION_SUCCESS;
}

dion_status_t dion_get_unique_id(dion_unique_id_t *id)
{
    dion__log_init();
    if (!id) return dion__error(DION_ERR_INVALID_ARG, "dion_get_unique_id: id is NULL");
    dion__uid_t u;
    memset(&u, 0, sizeof u);
    dion_status_t st = dion__addr_local(&u.root);
    if (st != DION_SUCCESS) return st;
    if ((st = dion__random_bytes(u.secret, sizeof u.secret)) != DION_SUCCESS) return st;
    if ((st = dion__random_bytes(&u.job, sizeof u.job)) != DION_SUCCESS) return st;
    if ((st = dion__root_start(&u.root, u.secret)) != DION_SUCCESS) return st;
    dion__uid_encode(&u, id);
    char a[DION__ADDR_STRLEN];
    DION_LOG(DION_LOG_INFO, "bootstrap root listening on %s", dion__addr_str(&u.root, a));
    return DION_SUCCESS;
}
