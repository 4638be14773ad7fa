/* DION_TRACE, host half: the per-context event arrays device calls fill (device/trace.cuh), events that host
 * threads (a proxy backend's) add, and the Chrome-trace JSON file each rank writes at dion_dev_destroy. */
#ifndef DION_TRACE_H
#define DION_TRACE_H

#include "dion/dion.h"
#include "internal.h"

struct dion__trace;

/* A trace with num_contexts arrays of capacity events (host memory when cpu, else device memory) and room for
 * host_capacity host-thread events. */
dion_status_t dion__trace_new(int cpu, uint32_t num_contexts, uint64_t capacity, uint64_t host_capacity,
                              struct dion__trace **out);
void dion__trace_free(struct dion__trace *t);
/* What the device handle carries (dion_dev_t.trace). */
struct dion_dev_trace dion__trace_device(const struct dion__trace *t);

/* An event of a host thread (a proxy thread executing a context's commands, say): thread names the Perfetto
 * track ("proxy <thread>"); times are CLOCK_MONOTONIC (dion__now_ns); start_ns == end_ns is an instant.
 * Thread-safe and lock-free; events past the capacity are counted as dropped. */
void dion__trace_host_event(struct dion__trace *t, uint32_t thread, dion_op_t op, int peer, uint32_t sig,
                            uint64_t bytes, uint64_t start_ns, uint64_t end_ns, dion_status_t status);

/* Events kept and dropped so far for one context, or for the host events when ctx == UINT32_MAX. Device
 * arrays are read from the device. */
dion_status_t dion__trace_counts(struct dion__trace *t, uint32_t ctx, uint64_t *kept, uint64_t *dropped);

/* Writes the trace as Chrome-trace JSON (pid = rank, tid = context). */
dion_status_t dion__trace_write(struct dion__trace *t, const char *path, int rank, const char *host);

/* The file a rank writes for DION_TRACE=pattern: %r becomes the rank; without %r, ".rank<N>" goes before a
 * trailing ".json" (or ".rank<N>.json" is appended). The process's traced handle number n (counted from 0
 * in creation order) adds ".dev<n>" the same way when n > 0. Returns 0 when the name does not fit. */
int dion__trace_path(const char *pattern, int rank, unsigned n, char *out, size_t cap);

/* dev.c's hooks. create: *out is NULL unless DION_TRACE is set. attach: points the handle at the arrays and
 * sets DION_DEVF_TRACE (nothing when t is NULL). finish: writes the rank's file (a failure is logged, never
 * returned: tracing must not fail a teardown), frees the trace and clears *t. */
dion_status_t dion__trace_create(dion_comm_t comm, int cpu, uint32_t num_contexts, struct dion__trace **out);
void dion__trace_attach(struct dion__trace *t, dion_dev_t *dev);
void dion__trace_finish(dion_comm_t comm, struct dion__trace **t);

#endif /* DION_TRACE_H */
