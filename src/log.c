/* The logger: DION_LOG=error|warn|info|debug|trace, lines on stderr prefixed with host and rank. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int dion__log_level = DION_LOG_WARN;
static int dion__log_rank = -1;
static char dion__log_host[64];
static pthread_once_t dion__log_once = PTHREAD_ONCE_INIT;
static const char *const dion__level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

static void dion__log_setup(void)
{
    int level = DION_LOG_WARN;
    if (gethostname(dion__log_host, sizeof dion__log_host - 1) != 0) strcpy(dion__log_host, "?");
    char *dot = strchr(dion__log_host, '.');
    if (dot) *dot = 0;
    /* An invalid DION_LOG cannot be reported through the logger it configures: keep the default. */
    if (dion__cfg_enum("DION_LOG", &level) != DION_SUCCESS) level = DION_LOG_WARN;
    dion__log_level = level;
}

void dion__log_init(void)
{
    pthread_once(&dion__log_once, dion__log_setup);
}

void dion__log_set_rank(int rank)
{
    dion__log_rank = rank;
}

void dion__log_write(int level, const char *fmt, ...)
{
    char line[2048];
    int n;
    if (level < 0) level = 0;
    if (level > DION_LOG_TRACE) level = DION_LOG_TRACE;
    if (dion__log_rank >= 0)
        n = snprintf(line, sizeof line, "dion[%s:%d] %s ", dion__log_host, dion__log_rank,
                     dion__level_names[level]);
    else
        n = snprintf(line, sizeof line, "dion[%s:pid%d] %s ", dion__log_host, (int)getpid(),
                     dion__level_names[level]);
    if (n < 0) return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    /* One write per line keeps lines of concurrent ranks and threads whole. */
    ssize_t w = write(2, line, len);
    (void)w;
}

uint64_t dion__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
