/* Shared helpers of the libFuzzer targets: a loud failure that libFuzzer records as a crash, every log line
 * formatted (run.sh discards them with -close_fd_mask), and open-descriptor counting for leak checks. */
#ifndef DION_FUZZ_COMMON_H
#define DION_FUZZ_COMMON_H

#include <fcntl.h>
#include <stddef.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

/* An invariant broke: print it and abort, so the input is saved as a crash. */
#define FUZZ_CHECK(cond, ...)                                                                                \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

/* Every log call formats its arguments, so that a bad format argument shows up under the sanitizers. */
static inline void fuzz_log_everything(void)
{
    dion__log_init();
    dion__log_level = DION_LOG_TRACE;
}

/* Open descriptors below 1024: equal before and after an input, or the code under test leaked one. */
static inline int fuzz_open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) >= 0) n++;
    return n;
}

/* A little-endian reader over the fuzz input; reads past the end give zeros. */
typedef struct {
    const uint8_t *p;
    size_t n, at;
} fuzz_in_t;

static inline uint8_t fuzz_u8(fuzz_in_t *in)
{
    return in->at < in->n ? in->p[in->at++] : 0;
}
static inline uint32_t fuzz_u32(fuzz_in_t *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)fuzz_u8(in) << (8 * i);
    return v;
}
static inline size_t fuzz_left(const fuzz_in_t *in)
{
    return in->n - in->at;
}

#endif
