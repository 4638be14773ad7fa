/* Monotonic seconds for the CPU tests' deadlines and bounds (never for a timing claim: tests time nothing). */
#ifndef DION_TESTS_TEST_TIME_H
#define DION_TESTS_TEST_TIME_H

#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
