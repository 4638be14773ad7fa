/* Which GPU a rank takes when dionrun did not say (DION_DEVICE), and the warning when ranks of one node end
 * up sharing a GPU without MPS. The decisions are pure functions, so that tests can feed them fake devices.
 */
#ifndef DION_GPU_SELECT_H
#define DION_GPU_SELECT_H

#include <stddef.h>

#include "comm.h"

typedef struct {
    int device;      /* ordinal to select with cudaSetDevice; -1: leave the current device alone */
    const char *why; /* static text for logs and dion-info */
} dion__gpu_choice_t;

/* local_rank: from the launcher, -1 when unknown. count: GPUs this process sees. app_chose: 1 when the
 * application made a device current before DION, 0 when not, -1 when that cannot be told. dion_device: the
 * DION_DEVICE value, -1 when unset (the caller checks it against count). */
dion__gpu_choice_t dion__gpu_choose(int local_rank, int count, int app_chose, long long dion_device);

/* The launcher's rank within the node, -1 when no launcher variable gives one; *var names the variable. */
int dion__gpu_local_rank(const char **var);

/* Whether ranks sharing GPU dev run concurrently under MPS: the driver's own answer where it has one, else
 * the MPS control pipe (CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps). */
int dion__gpu_mps_active(int dev);

/* The warning rank `rank` logs when it shares its GPU with other ranks of its node and MPS is off: returns 1
 * and fills msg only on the lowest rank of those sharing (so the job logs it once per GPU). */
int dion__gpu_sharing_note(const dion__rank_info_t *info, int nranks, int rank, int mps, char *msg,
                           size_t cap);

/* Logs that note at WARN level, at most once per process. Returns 1 when it logged. */
int dion__gpu_warn_sharing(const dion__rank_info_t *info, int nranks, int rank, int mps);

#endif
