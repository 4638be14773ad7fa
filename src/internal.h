/* Internal declarations shared by the host-side files of libdion. */
#ifndef DION_INTERNAL_H
#define DION_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "dion/dion.h"

#if defined(__GNUC__)
#define DION__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DION__PRINTF(a, b)
#endif

/* ---- logging (log.c) ---- */
enum { DION_LOG_ERROR = 0, DION_LOG_WARN, DION_LOG_INFO, DION_LOG_DEBUG, DION_LOG_TRACE };
extern int dion__log_level;
void dion__log_init(void);
void dion__log_set_rank(int rank);
void dion__log_write(int level, const char *fmt, ...) DION__PRINTF(2, 3);
#define DION_LOG(level, ...)                                                                                 \
    do {                                                                                                     \
        if ((level) <= dion__log_level) dion__log_write((level), __VA_ARGS__);                               \
    } while (0)

/* ---- errors (status.c) ---- */
/* Sets this thread's dion_last_error() sentence, logs it, and returns s. */
dion_status_t dion__error(dion_status_t s, const char *fmt, ...) DION__PRINTF(2, 3);
/* Sets the sentence without logging: for low-level helpers whose callers add context. */
dion_status_t dion__error_set(dion_status_t s, const char *fmt, ...) DION__PRINTF(2, 3);
/* Keeps the sentence already set, prepends context ("ctx: <old sentence>") and logs the result. */
dion_status_t dion__error_wrap(dion_status_t s, const char *fmt, ...) DION__PRINTF(2, 3);
void dion__error_clear(void);

/* ---- configuration (config.c): every environment variable the library reads is in one table ---- */
typedef enum {
    DION_CFG_INT,
    DION_CFG_BOOL,
    DION_CFG_DURATION,
    DION_CFG_STRING,
    DION_CFG_ENUM
} dion__cfg_type_t;
typedef struct {
    const char *name;
    dion__cfg_type_t type;
    const char *def;     /* default as text; NULL: unset */
    const char *choices; /* DION_CFG_ENUM: "a|b|c" */
    const char *help;
    const char
        *reader; /* who reads it: NULL for libdion, else "dionrun", "launcher" (set by MPI/Slurm/torchrun) */
} dion__cfg_entry_t;
extern const dion__cfg_entry_t dion__cfg_table[];
extern const int dion__cfg_count;
const dion__cfg_entry_t *dion__cfg_find(const char *name);
/* The raw value (environment, else NULL); name must be in the table. */
const char *dion__cfg_env(const char *name);
/* String value: the environment, else the default (may be NULL). */
const char *dion__cfg_str(const char *name);
dion_status_t dion__cfg_int(const char *name, long long min, long long max, long long *out);
dion_status_t dion__cfg_bool(const char *name, int *out);
dion_status_t dion__cfg_duration_ns(const char *name, uint64_t *out);
dion_status_t dion__cfg_enum(const char *name, int *out); /* index into choices */
dion_status_t dion__parse_duration_ns(const char *text, uint64_t *out);
void dion__cfg_markdown(FILE *out);

/* ---- CPU mode (cpu_launch.c) ---- */
/* Waits until no dion_cpu_launch of this process is running, other than the caller's own when it is a
 * launched thread; DION_ERR_TIMEOUT after timeout_ns (0: no limit). */
dion_status_t dion__cpu_launches_wait(uint64_t timeout_ns);

/* ---- time ---- */
uint64_t dion__now_ns(void); /* CLOCK_MONOTONIC */

#endif /* DION_INTERNAL_H */
