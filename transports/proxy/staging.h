/* Staging of local GPU memory through pinned host bounce buffers, for engines that cannot register GPU memory
 * (dion__engine_caps_t.cuda_mem == 0). A put from a GPU window copies the bytes into a slot and puts from the
 * slot; a get into a GPU window gets into a slot and copies out once it completed. Each staged operation pays
 * a device-host copy (PCIe) and waits for it (or for a batch of them). The proxy backend stages whole windows
 * through shadows (px_stage.c) and uses the pool for its copy stream.
 *
 * Threading: like the engine, one thread at a time per pool. */
#ifndef DION_STAGING_H
#define DION_STAGING_H

#include "engine.h"

typedef struct dion__stage dion__stage_t;

/* nslots buffers of slot_bytes each, pinned (cudaHostAlloc) where a GPU exists, else page-aligned host memory
 * (CPU mode), registered with the engine. Blocks (allocation, pinning, registration). */
dion_status_t dion__stage_create(const dion__engine_ops_t *ops, dion__engine_t *e, size_t slot_bytes,
                                 uint32_t nslots, dion__stage_t **out);
/* Takes a free slot: its index, its buffer and registration; -1 when all are in use (poll, release, retry).
 * Does not block. */
int dion__stage_acquire(dion__stage_t *s, void **buf, dion__engine_mr_t **mr);
void dion__stage_release(dion__stage_t *s, int slot);
size_t dion__stage_slot_bytes(const dion__stage_t *s);
/* Copies between GPU (or, without a GPU, host) memory and a slot; blocks until the copy is done. */
dion_status_t dion__stage_in(dion__stage_t *s, int slot, const void *src, size_t bytes);
dion_status_t dion__stage_out(dion__stage_t *s, int slot, void *dst, size_t bytes);
/* Copies bytes (GPU or host memory on either side) on the pool's stream and waits for it (and for every copy
 * enqueued before it); memcpy without a GPU. */
dion_status_t dion__stage_copy(dion__stage_t *s, void *dst, const void *src, size_t bytes, const char *what);
/* The same without the wait: enqueues the copy on the pool's stream (copies run in the order enqueued);
 * memcpy at once without a GPU. dion__stage_wait waits for every copy enqueued so far: a batch of copies
 * pays one synchronization (docs/backends/proxy.md, "Cost"). */
dion_status_t dion__stage_copy_async(dion__stage_t *s, void *dst, const void *src, size_t bytes,
                                     const char *what);
dion_status_t dion__stage_wait(dion__stage_t *s, const char *what);
/* Host memory for a window's shadow: pinned (cudaHostAlloc, portable) where a GPU exists, else page-aligned.
 * Not registered here. */
dion_status_t dion__stage_shadow_alloc(dion__stage_t *s, size_t bytes, void **mem);
void dion__stage_shadow_free(dion__stage_t *s, void *mem);
/* Releases the registration and memory; every slot must be free. */
void dion__stage_destroy(dion__stage_t *s);

#endif
