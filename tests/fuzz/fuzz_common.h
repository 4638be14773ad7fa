/* Shared helpers of the libFuzzer targets: a loud failure that libFuzzer records as a crash, every log line
 * formatted (run.sh discards them with -close_fd_mask), and open-descriptor counting for leak checks. */
#ifndef DION_FUZZ_COMMON_H
#define DION_FUZZ_COMMON_H

#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/internal.h"

/* An invariant broke: report it where the sanitizers report (libFuzzer keeps that open under -close_fd_mask)
 * and abort, so the input is saved as a crash. */
#define FUZZ_CHECK(cond, ...)                                                                                \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            char fuzz_msg_[512];                                                                             \
            int fuzz_n_ = snprintf(fuzz_msg_, sizeof fuzz_msg_,                                              \
                                   "fuzz invariant failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
            if (fuzz_n_ > 0 && (size_t)fuzz_n_ < sizeof fuzz_msg_)                                           \
                snprintf(fuzz_msg_ + fuzz_n_, sizeof fuzz_msg_ - (size_t)fuzz_n_, __VA_ARGS__);              \
            __sanitizer_report_error_summary(fuzz_msg_);                                                     \
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
