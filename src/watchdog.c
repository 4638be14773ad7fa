/* The watchdog: a thread per communicator that reports device-side error records through the logger and
 * notices when a bootstrap neighbour disappears, so that device waits end with DION_ERR_PEER_FAILED naming
 * the rank instead of running into their timeout. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "comm.h"

/* An orderly exit: dion_comm_destroy sends both neighbours an ABORT frame whose status is DION_SUCCESS
 * ("goodbye") before it closes the links. The ring's collectives read it as the end of that rank (a
 * collective with a rank that left must fail), and the watchdog, finding it as the last bytes before the end
 * of the stream, knows the rank left instead of failing. */
static void dion__goodbye_frame(uint8_t out[DION__FRAME_HDR + DION__ABORT_LEN], int rank)
{
    dion__frame_hdr_encode(out, DION__FRAME_ABORT, DION__ABORT_LEN);
    dion__put_u32(out + DION__FRAME_HDR, (uint32_t)rank);
    dion__put_u32(out + DION__FRAME_HDR + 4, (uint32_t)DION_SUCCESS);
    dion__put_u32(out + DION__FRAME_HDR + 8, (uint32_t)rank);
}

void dion__watchdog_goodbye(dion_comm_t c)
{
    if (c->nranks < 2 || !c->boot) return;
    uint8_t frame[DION__FRAME_HDR + DION__ABORT_LEN];
    dion__goodbye_frame(frame, c->rank);
    int fds[2];
    dion__boot_fds(c->boot, &fds[0], &fds[1]);
    /* One non-blocking send each: the links carry nothing else now, so the 24 bytes fit; a rank that is
     * gone already does not matter. */
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0 &&
            send(fds[i], frame, sizeof frame, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof frame)
            DION_LOG(DION_LOG_DEBUG, "could not say goodbye to rank %d",
                     i == 0 ? dion__boot_prev(c->boot) : dion__boot_next(c->boot));
}

/* What the last bytes on a link whose far end closed say, when they are an ABORT frame left unread: its
 * failed rank and status. A goodbye is who's own frame with DION_SUCCESS; a failure that who had seen and
 * passed on before it ended names another rank. */
typedef enum { DION__TAIL_NONE, DION__TAIL_GOODBYE, DION__TAIL_FAILED, DION__TAIL_PENDING } dion__tail_t;

/* Whether f is an ABORT frame reporting the failure of a rank other than who (who's own goodbye says
 * success). */
static int dion__abort_names(const uint8_t *f, int who, int nranks, int *failed)
{
    uint32_t type = 0, len = 0;
    if (dion__frame_hdr_decode(f, &type, &len) != 0 || type != DION__FRAME_ABORT || len != DION__ABORT_LEN)
        return 0;
    int rank = (int)dion__get_u32(f + DION__FRAME_HDR);
    if (dion__get_u32(f + DION__FRAME_HDR + 4) == DION_SUCCESS || rank < 0 || rank >= nranks || rank == who)
        return 0;
    *failed = rank;
    return 1;
}

static dion__tail_t dion__link_tail(int fd, int who, int nranks, int *failed)
{
    int pending = 0;
    const size_t flen = DION__FRAME_HDR + DION__ABORT_LEN;
    if (ioctl(fd, FIONREAD, &pending) != 0 || pending < (int)flen) return DION__TAIL_NONE;
    uint8_t *got = malloc((size_t)pending);
    if (!got) return DION__TAIL_PENDING;
    ssize_t n = recv(fd, got, (size_t)pending, MSG_PEEK | MSG_DONTWAIT);
    dion__tail_t t = DION__TAIL_NONE;
    if (n >= (ssize_t)flen) {
        const uint8_t *f = got + n - flen;
        uint8_t goodbye[DION__FRAME_HDR + DION__ABORT_LEN];
        dion__goodbye_frame(goodbye, who);
        if (memcmp(f, goodbye, flen) == 0) {
            /* a failure passed on before the goodbye still names the failed rank; other data before it
             * waits for a collective to read it: look again later */
            if (n == (ssize_t)flen)
                t = DION__TAIL_GOODBYE;
            else if (n >= (ssize_t)(2 * flen) && dion__abort_names(f - flen, who, nranks, failed))
                t = DION__TAIL_FAILED;
            else
                t = DION__TAIL_PENDING;
        } else if (dion__abort_names(f, who, nranks, failed)) {
            t = DION__TAIL_FAILED;
        }
    }
    free(got);
    return t;
}

/* The news goes on round the ring at once (as a failing collective would send it), so that the next rank
 * names the rank that failed even if this one ends before that rank's link does. Only when no host collective
 * holds the ring: one that does fails on the same link and passes the news on itself. */
static void dion__watchdog_forward(dion_comm_t c, int failed)
{
    if (pthread_mutex_trylock(&c->lock) != 0) return;
    dion__boot_abort(c->boot, failed, DION_ERR_PEER_FAILED);
    pthread_mutex_unlock(&c->lock);
}

static void dion__watchdog_links(dion_comm_t c)
{
    if (c->failed_rank_seen >= 0 || c->nranks < 2) return;
    int fds[2];
    dion__boot_fds(c->boot, &fds[0], &fds[1]);
    struct pollfd pf[2] = {{c->link_left[0] ? -1 : fds[0], POLLRDHUP, 0},
                           {c->link_left[1] ? -1 : fds[1], POLLRDHUP, 0}};
    if (poll(pf, 2, 0) <= 0) return;
    for (int i = 0; i < 2; i++) {
        if (!(pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
        int who = i == 0 ? dion__boot_prev(c->boot) : dion__boot_next(c->boot), failed = who;
        dion__tail_t tail = dion__link_tail(fds[i], who, c->nranks, &failed);
        if (tail == DION__TAIL_PENDING) continue; /* look again once the collective in progress has read */
        if (tail == DION__TAIL_GOODBYE) {
            c->link_left[i] = 1;
            DION_LOG(DION_LOG_INFO, "watchdog: rank %d left the communicator (dion_comm_destroy)", who);
            continue;
        }
        c->failed_rank_seen = failed;
        /* the news first (a rank that ends as soon as its waits fail would otherwise take it along), then
         * this rank's device waits, then the log */
        dion__watchdog_forward(c, failed);
        dion__dev_abort_all(c, DION_ERR_PEER_FAILED, failed);
        if (tail == DION__TAIL_FAILED)
            DION_LOG(
                DION_LOG_WARN,
                "watchdog: rank %d reported that rank %d failed, then its bootstrap link closed; treating "
                "rank %d as failed and ending device waits with DION_ERR_PEER_FAILED",
                who, failed, failed);
        else
            DION_LOG(DION_LOG_WARN,
                     "watchdog: the bootstrap link to rank %d closed; treating rank %d as failed and ending "
                     "device waits "
                     "with DION_ERR_PEER_FAILED",
                     who, who);
        return;
    }
}

static void *dion__watchdog_main(void *arg)
{
    dion_comm_t c = arg;
    while (!c->watchdog_stop) {
        uint64_t left = c->watchdog_interval_ns;
        while (left && !c->watchdog_stop) {
            uint64_t step = left < 20000000ull ? left : 20000000ull;
            struct timespec ts = {(time_t)(step / 1000000000ull), (long)(step % 1000000000ull)};
            nanosleep(&ts, NULL);
            left -= step;
        }
        if (c->watchdog_stop) break;
        dion__dev_report_errors(c);
        dion__watchdog_links(c);
    }
    return NULL;
}

dion_status_t dion__watchdog_start(dion_comm_t c)
{
    dion_status_t st = dion__cfg_duration_ns("DION_WATCHDOG_INTERVAL", &c->watchdog_interval_ns);
    if (st != DION_SUCCESS) return st;
    if (c->watchdog_interval_ns == 0) return DION_SUCCESS;
    if (pthread_create(&c->watchdog, NULL, dion__watchdog_main, c) != 0)
        return dion__error(DION_ERR_INTERNAL,
                           "cannot start the watchdog thread; set DION_WATCHDOG_INTERVAL=0 to run "
                           "without it");
    c->watchdog_running = 1;
    return DION_SUCCESS;
}

void dion__watchdog_stop(dion_comm_t c)
{
    if (!c->watchdog_running) return;
    c->watchdog_stop = 1;
    pthread_join(c->watchdog, NULL);
    c->watchdog_running = 0;
}
