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

/* For a link whose far end closed: 1 when who said goodbye and nothing else is left unread, 0 when it did
 * not (it failed), -1 when the goodbye is there but earlier data still waits for a collective to read it. */
static int dion__link_said_goodbye(int fd, int who)
{
    int pending = 0;
    if (ioctl(fd, FIONREAD, &pending) != 0 || pending < (int)(DION__FRAME_HDR + DION__ABORT_LEN)) return 0;
    uint8_t want[DION__FRAME_HDR + DION__ABORT_LEN], *got = malloc((size_t)pending);
    if (!got) return -1;
    dion__goodbye_frame(want, who);
    ssize_t n = recv(fd, got, (size_t)pending, MSG_PEEK | MSG_DONTWAIT);
    int tail = n >= (ssize_t)sizeof want && memcmp(got + n - sizeof want, want, sizeof want) == 0;
    free(got);
    if (!tail) return 0;
    return n == (ssize_t)sizeof want ? 1 : -1;
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
        int who = i == 0 ? dion__boot_prev(c->boot) : dion__boot_next(c->boot);
        int bye = dion__link_said_goodbye(fds[i], who);
        if (bye < 0) continue; /* look again once the collective in progress has read its data */
        if (bye) {
            c->link_left[i] = 1;
            DION_LOG(DION_LOG_INFO, "watchdog: rank %d left the communicator (dion_comm_destroy)", who);
            continue;
        }
        c->failed_rank_seen = who;
        DION_LOG(DION_LOG_WARN,
                 "watchdog: the bootstrap link to rank %d closed; treating rank %d as failed and ending "
                 "device waits "
                 "with DION_ERR_PEER_FAILED",
                 who, who);
        dion__dev_abort_all(c, DION_ERR_PEER_FAILED, who);
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
