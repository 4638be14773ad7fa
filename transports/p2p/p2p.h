/* The p2p backend's host half: making a rank's memory (windows, signal tables) loadable and storable by the
 * other ranks of its node. GPU memory travels as CUDA IPC handles (cudaMalloc) or as file descriptors of
 * cuMem VMM allocations; host memory as memfd file descriptors. */
#ifndef DION_TRANSPORT_P2P_H
#define DION_TRANSPORT_P2P_H

#include <stddef.h>
#include <stdint.h>

#include "src/comm.h"

typedef enum {
    DION__MEM_NONE = 0, /* nothing registered (0 bytes) */
    DION__MEM_CUDA_IPC, /* cudaMalloc memory: a cudaIpcMemHandle_t */
    DION__MEM_VMM,      /* cuMem VMM: one POSIX fd per physical allocation in the range */
    DION__MEM_HOST_FD   /* host memory from dion's memfd allocator */
} dion__mem_kind_t;

#define DION__VMM_MAX_CHUNKS 64

/* What a rank tells the others about one region. Fixed size: it travels through allgather. */
typedef struct {
    uint32_t kind;
    uint32_t nchunks;  /* VMM: allocations that make up the mapped range */
    uint64_t size;     /* registered bytes */
    uint64_t offset;   /* registered base minus the start of what is mapped */
    uint64_t map_size; /* bytes the importer maps */
    uint8_t ipc[64];   /* cudaIpcMemHandle_t */
    uint8_t gpu_uuid[16];
    uint64_t chunk_size[DION__VMM_MAX_CHUNKS];
} dion__mem_desc_t;

/* Local side of an exported region: what must be kept to hand out file descriptors. */
typedef struct {
    int fds[DION__VMM_MAX_CHUNKS]; /* VMM exports or the memfd; -1 when none */
    int nfds;
} dion__mem_export_t;

/* A peer's region as mapped here. */
typedef struct {
    uint32_t kind;
    void *map; /* what was mapped (IPC base, reserved VA, mmap) */
    uint64_t map_size;
    char *base; /* map + offset: the peer's registered base in this address space */
    int host_registered;
    uint64_t
        vmm_mapped; /* VMM: bytes mapped from the start of the reservation (a failed import maps a prefix) */
} dion__mem_import_t;

/* Describes base..base+bytes of this rank's memory; on_gpu says whether it is device memory. */
dion_status_t dion__p2p_export(dion_comm_t comm, void *base, size_t bytes, dion__mem_desc_t *desc,
                               dion__mem_export_t *exp);
void dion__p2p_export_close(dion__mem_export_t *exp);
/* Hands each local peer the file descriptors of this rank's export and receives theirs: fds[r][chunk]. */
dion_status_t dion__p2p_share_fds(dion_comm_t comm, const dion__mem_desc_t *descs,
                                  const dion__mem_export_t *mine, int (*fds)[DION__VMM_MAX_CHUNKS]);
/* Maps peer's region. fds are the descriptors received from that peer (consumed). */
dion_status_t dion__p2p_import(dion_comm_t comm, int peer, const dion__mem_desc_t *desc, int *fds,
                               dion__mem_import_t *imp);
void dion__p2p_unmap(dion__mem_import_t *imp);

/* Whether this rank can map memory of kind from peer (same node, and for GPU memory a GPU that can reach it).
 */
int dion__p2p_reachable(dion_comm_t comm, int peer, uint32_t kind, const char **why);
/* Scope a peer needs: GPU when its GPU is this rank's GPU, else SYS. */
uint32_t dion__p2p_peer_scope(dion_comm_t comm, int peer, int cpu_mode);

/* Shareable host memory (memfd), for host windows and CPU-mode signal tables. */
dion_status_t dion__host_alloc(size_t bytes, void **base);
void dion__host_free(void *base);

#endif
