/* The watchdog: a thread per communicator that reports device-side error records through the logger and
 * notices when a bootstrap neighbour disappears, so that device waits end with DION_ERR_PEER_FAILED naming
 * the rank instead of running into their timeout. */
#include <poll.h>
#include <time.h>

#include "comm.h"

static void dion__watchdog_links(dion_comm_t c)
{
    if (c->failed_rank_seen >= 0 || c->nranks < 2) return;
    int fds[2];
    dion__boot_fds(c->boot, &fds[0], &fds[1]);
    struct pollfd pf[2] = {{fds[0], POLLRDHUP, 0}, {fds[1], POLLRDHUP, 0}};
    if (poll(pf, 2, 0) <= 0) return;
    for (int i = 0; i < 2; i++) {
        if (!(pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
        int who = i == 0 ? dion__boot_prev(c->boot) : dion__boot_next(c->boot);
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
