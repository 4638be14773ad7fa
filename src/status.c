/* Status codes and the thread-local last-error sentence. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define DION__ERRLEN 1024
static _Thread_local char dion__last[DION__ERRLEN];

const char *dion_status_string(dion_status_t s)
{
    switch (s) {
    case DION_SUCCESS:
        return "DION_SUCCESS";
    case DION_ERR_INVALID_ARG:
        return "DION_ERR_INVALID_ARG";
    case DION_ERR_NO_MEMORY:
        return "DION_ERR_NO_MEMORY";
    case DION_ERR_UNSUPPORTED:
        return "DION_ERR_UNSUPPORTED";
    case DION_ERR_CUDA:
        return "DION_ERR_CUDA";
    case DION_ERR_NETWORK:
        return "DION_ERR_NETWORK";
    case DION_ERR_BOOTSTRAP:
        return "DION_ERR_BOOTSTRAP";
    case DION_ERR_TIMEOUT:
        return "DION_ERR_TIMEOUT";
    case DION_ERR_PEER_FAILED:
        return "DION_ERR_PEER_FAILED";
    case DION_ERR_REMOTE_ACCESS:
        return "DION_ERR_REMOTE_ACCESS";
    case DION_ERR_ABORTED:
        return "DION_ERR_ABORTED";
    case DION_ERR_INTERNAL:
        return "DION_ERR_INTERNAL";
    }
    return "DION_ERR_(unknown)";
}

const char *dion_last_error(void)
{
    return dion__last;
}

const char *dion_version_string(void)
{
    return DION_VERSION_STRING;
}

void dion__error_clear(void)
{
    dion__last[0] = 0;
}

/* Arguments may point into dion__last itself (wrapping an earlier sentence), so format aside, then copy. */
static void dion__error_format(const char *fmt, va_list ap)
{
    char tmp[DION__ERRLEN];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(dion__last, tmp, sizeof tmp);
}

dion_status_t dion__error(dion_status_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dion__error_format(fmt, ap);
    va_end(ap);
    DION_LOG(DION_LOG_WARN, "%s: %s", dion_status_string(s), dion__last);
    return s;
}

dion_status_t dion__error_set(dion_status_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dion__error_format(fmt, ap);
    va_end(ap);
    return s;
}

dion_status_t dion__error_wrap(dion_status_t s, const char *fmt, ...)
{
    char prefix[256], old[DION__ERRLEN - 258];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    snprintf(old, sizeof old, "%.*s", (int)sizeof old - 1, dion__last);
    snprintf(dion__last, sizeof dion__last, "%s: %s", prefix, old[0] ? old : dion_status_string(s));
    DION_LOG(DION_LOG_WARN, "%s: %s", dion_status_string(s), dion__last);
    return s;
}
