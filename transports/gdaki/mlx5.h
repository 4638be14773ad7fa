/* gdaki on a real mlx5 NIC (ConnectX) through DEVX: the host half. One opened device per comm (DEVX context,
 * PD, HCA caps, port and GID, one UAR whose doorbell register GPU threads write), and per (context, peer) one
 * RC QP with its collapsed CQ, the SQ ring, CQ and doorbell records in one block of GPU memory registered as
 * a DEVX umem (host memory for a CPU-mode handle). mlx5_nic.c plugs this into nic.h.
 *
 *   mlx5_sym.c   rdma-core through dlopen          mlx5_dev.c   device, caps, port, GID, UAR, doorbell choice
 *   mlx5_qp.c    umem, CREATE_CQ/QP, RST..RTS, MRs  mlx5_db.c    the CPU doorbell thread (fallback)
 *   mlx5_cuda.c  GPU memory and mappings (CUDA)     mlx5_nic.c   the nic.h table
 *
 * Every CUDA call is behind dion__mlx5_gpu_ops_t and every rdma-core call behind the dlopen table, so the
 * whole host half runs in tests over a fake libibverbs/libmlx5 and host memory
 * (tests/unit/test_gdaki_mlx5.c). Nothing here has run on a NIC. */
#ifndef DION_GDAKI_MLX5_H
#define DION_GDAKI_MLX5_H

#include <pthread.h>
#include <stdint.h>

#include "mlx5_sym.h"
#include "transports/proxy/engine_verbs.h"

/* GPU memory and mappings. Each returns 0, or nonzero with why (cap bytes) filled; map_io returns the
 * CUresult so that the caller can tell "not permitted" (the peer-mapping setting) from other failures. */
typedef struct {
    void *arg;
    /* Whether there is a GPU at all (a CPU-only machine still runs CPU-mode handles over the NIC). */
    int (*present)(void *arg);
    /* bytes of device memory, aligned to 64 KiB (the GPU page, what peer-memory registration pins) */
    int (*alloc)(void *arg, size_t bytes, void **ptr, char *why, size_t cap);
    void (*free)(void *arg, void *ptr);
    int (*fill)(void *arg, void *ptr, int byte, size_t bytes, char *why, size_t cap);
    /* A dmabuf fd covering [addr, addr+len) and addr's offset inside it. */
    int (*dmabuf_fd)(void *arg, uint64_t addr, size_t len, int *fd, uint64_t *offset, char *why, size_t cap);
    void (*close_fd)(void *arg, int fd);
    /* Maps IO memory (the UAR page) into the GPU's address space: cuMemHostRegister(IOMEMORY). */
    int (*map_io)(void *arg, void *host, size_t len, void **dev, char *why, size_t cap);
    void (*unmap_io)(void *arg, void *host);
    /* Host memory the GPU writes and the CPU reads (the CPU doorbell's mailboxes), with its device address.
     */
    int (*alloc_mapped)(void *arg, size_t bytes, void **host, void **dev, char *why, size_t cap);
    void (*free_mapped)(void *arg, void *host);
} dion__mlx5_gpu_ops_t;

/* The real ones, over the CUDA driver (mlx5_cuda.c). */
extern const dion__mlx5_gpu_ops_t dion__mlx5_cuda_ops;
#define DION__MLX5_CU_NOT_PERMITTED                                                                          \
    800 /* CUDA_ERROR_NOT_PERMITTED: what map_io gives without the setting                                   \
         */

/* Who writes the UAR doorbell for GPU threads (DION_GDAKI_DOORBELL). */
enum { DION__MLX5_DB_AUTO = 0, DION__MLX5_DB_GPU, DION__MLX5_DB_CPU };

typedef struct {
    const char *ibv_lib, *dv_lib;    /* NULL: the installed rdma-core */
    const dion__mlx5_gpu_ops_t *gpu; /* NULL: dion__mlx5_cuda_ops */
    int doorbell;                    /* DION__MLX5_DB_* */
    int rank;                        /* for sentences and the PSNs */
} dion__mlx5_open_args_t;

/* What the HCA caps and the port say (mlx5_dev.c). */
typedef struct {
    uint32_t log_max_qp_sz, log_max_cq_sz, log_max_msg, cqe_version, port_type, roce, atomic;
    uint32_t log_bf_reg_size, max_wqe_sz_sq, sq_ts_format;
    uint32_t atomic_endianness_mode, atomic_operations, atomic_size_qp; /* atomic caps */
} dion__mlx5_caps_t;

typedef struct dion__mlx5 dion__mlx5_t;
typedef struct dion__mlx5_qp dion__mlx5_qp_t;
typedef struct dion__mlx5_mr dion__mlx5_mr_t;

/* The CPU doorbell: one thread per device copies each QP's mailbox to the UAR register (mlx5_db.c). */
typedef struct {
    pthread_t thread;
    int running;
    int stop; /* atomic */
    pthread_mutex_t lock;
    dion__mlx5_qp_t **qps; /* the QPs whose mailboxes it watches */
    int nqps, cap;
    volatile uint64_t *reg; /* the UAR's doorbell register */
    uint64_t rings;         /* doorbells written (atomic; tests and the log) */
} dion__mlx5_db_t;

struct dion__mlx5 {
    dion__mlx5_sym_t sym;
    const dion__mlx5_gpu_ops_t *gpu;
    dion__verbs_cfg_t cfg; /* DION_IB_*: device, port, GID index, timeout, retries, SL, TC */
    int rank;
    char devname[64];
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    uint32_t pdn;
    uint8_t port;
    struct ibv_port_attr pattr;
    struct ibv_device_attr dattr;
    dion__mlx5_caps_t caps;
    int gid_index; /* -1: InfiniBand addressed by LID */
    int gid_type;  /* enum ibv_gid_type, -1 unknown */
    uint8_t gid[16];
    uint32_t eqn;
    struct mlx5dv_devx_uar *uar;
    const char *uar_type; /* which allocation type gave it */
    /* The doorbell for GPU threads, decided at the first GPU QP. */
    int db_want;    /* DION__MLX5_DB_* asked for */
    int db_mode;    /* DION__MLX5_DB_GPU or _CPU once decided, 0 before */
    void *uar_page; /* the page registered with map_io (GPU mode) */
    uint64_t *db_gpu;
    char db_why[768]; /* why the CPU rings (the map_io failure and the setting that avoids it) */
    dion__mlx5_db_t db;
    char desc[1024]; /* "mlx5_0 port 1, RoCE, GID 3 (...), MTU 4096, DEVX" for the log and dion-info */
    uint32_t next_uidx;
};

/* Opens the first mlx5 device with an ACTIVE port (or DION_IB_HCA[:port]) with DEVX, allocates the PD,
 * queries the HCA caps, chooses the GID, allocates the UAR. On failure everything done is undone and the
 * sentence names the step (and the DEVX status and syndrome for a firmware command). */
dion_status_t dion__mlx5_open(const dion__mlx5_open_args_t *args, dion__mlx5_t **out);
void dion__mlx5_close(dion__mlx5_t *m);
/* Decides who rings doorbells for GPU threads (once): maps the UAR page into the GPU, or starts the CPU
 * doorbell thread when that is not possible (or DION_GDAKI_DOORBELL=cpu). */
dion_status_t dion__mlx5_gpu_doorbell(dion__mlx5_t *m);

/* A DEVX command's failure as a sentence: "<step>: DEVX status 0x3 (bad parameter), syndrome 0x..." */
dion_status_t dion__mlx5_devx_fail(const dion__mlx5_t *m, const char *step, const void *out, size_t outlen,
                                   int err);
const char *dion__mlx5_devx_status_name(uint32_t status);

/* ---- QPs (mlx5_qp.c) ---- */
typedef struct {
    uint32_t ctx;
    int peer;
    uint32_t nwqebb; /* power of two in [64, 32768] */
    uint32_t ncqe;   /* power of two; the CQ is collapsed */
    int cpu;         /* queues in host memory, doorbell written straight to the UAR by CPU threads */
} dion__mlx5_qp_args_t;

/* What device code uses (nic.h's part of dion_gdaki_qp_dev_t). */
typedef struct {
    uint8_t *sq;
    uint32_t *dbrec; /* the SQ word of the doorbell record */
    uint64_t *db;    /* UAR register (GPU-mapped or host), or the CPU doorbell's mailbox */
    uint8_t *cq;
    uint32_t qpn, wq_mask, log_ncqe, max_inline;
    int hostmem;
} dion__mlx5_qp_view_t;

struct dion__mlx5_qp {
    dion__mlx5_t *m;
    dion__mlx5_qp_args_t a;
    uint8_t *mem; /* SQ | CQ | QP DBR | CQ DBR, one umem */
    void *mem_raw;
    size_t mem_bytes, cq_off, qp_dbr_off, cq_dbr_off;
    struct mlx5dv_devx_umem *umem;
    const char *umem_path; /* "dmabuf", "nvidia-peermem", "host memory" */
    struct mlx5dv_devx_obj *cq, *qp;
    uint32_t cqn, qpn, psn, uidx;
    int state; /* IBV_QPS_RESET .. IBV_QPS_RTS, IBV_QPS_ERR after a failed transition */
    dion__verbs_addr_t remote;
    /* CPU doorbell mailbox (GPU QPs when the CPU rings): GPU threads store the doorbell value here. */
    uint64_t *mbox_host, *mbox_dev;
    uint64_t mbox_last;
    char why[512];
    dion__mlx5_qp_view_t view;
};

/* Allocates and registers the queue memory, creates the CQ and the QP and moves it to INIT. */
dion_status_t dion__mlx5_qp_create(dion__mlx5_t *m, const dion__mlx5_qp_args_t *args, dion__mlx5_qp_t **out);
/* This QP's connection data for the peer (dion__verbs_addr_t's 40-byte wire form). */
void dion__mlx5_qp_blob(const dion__mlx5_qp_t *q, uint8_t out[DION__VERBS_ADDR_BYTES]);
/* INIT -> RTR -> RTS towards the peer's blob. */
dion_status_t dion__mlx5_qp_connect(dion__mlx5_qp_t *q, const uint8_t *blob, size_t len);
void dion__mlx5_qp_destroy(dion__mlx5_qp_t *q);

/* GPU memory as a DEVX umem: dmabuf first, then nvidia-peermem; a sentence naming both reasons when neither
 * works. what names the memory in it ("the queues of context 0, peer 1"). */
dion_status_t dion__mlx5_umem_gpu(dion__mlx5_t *m, void *mem, size_t bytes, const char *what,
                                  struct mlx5dv_devx_umem **out, const char **path);
/* Registers (then releases) 64 KiB of GPU memory as a umem: whether GPUDirect RDMA works for the queues. */
dion_status_t dion__mlx5_gpudirect_check(dion__mlx5_t *m);

/* ---- memory registration (mlx5_qp.c) ---- */
struct dion__mlx5_mr {
    struct ibv_mr *mr;
    int path; /* DION__VERBS_REG_HOST / _DMABUF / _PEERMEM */
};
dion_status_t dion__mlx5_mr_reg(dion__mlx5_t *m, void *base, size_t bytes, int on_host,
                                dion__mlx5_mr_t **out);
void dion__mlx5_mr_dereg(dion__mlx5_t *m, dion__mlx5_mr_t *mr);

/* ---- CPU doorbell (mlx5_db.c) ---- */
dion_status_t dion__mlx5_db_start(dion__mlx5_t *m);
void dion__mlx5_db_stop(dion__mlx5_t *m);
dion_status_t dion__mlx5_db_add(dion__mlx5_t *m, dion__mlx5_qp_t *q);
void dion__mlx5_db_remove(dion__mlx5_t *m, dion__mlx5_qp_t *q);
/* One pass over the mailboxes: writes the UAR for each that changed; returns how many it wrote. */
int dion__mlx5_db_sweep(dion__mlx5_t *m);

/* ---- probe for dion-info (mlx5_dev.c) ---- */
typedef struct {
    int lib_ok;      /* libibverbs and libmlx5 load with the DEVX entry points */
    int ndev, nmlx5; /* devices listed, of which mlx5dv_is_supported */
    int devx_ok;     /* one opened with DEVX and answered QUERY_HCA_CAP */
    int umem_dmabuf; /* libmlx5 has mlx5dv_devx_umem_reg_ex (dmabuf umem) */
    int mr_dmabuf;   /* libibverbs has ibv_reg_dmabuf_mr */
    int uar_map;     /* the UAR page mapped into GPU 0: 1 yes, 0 refused (uar_why), -1 not tried (no GPU) */
    int uar_map_rc;  /* map_io's CUresult when refused */
    char uar_why[384];
    char why[768];   /* what failed first */
    char desc[1024]; /* the device opened, as the log says it */
} dion__mlx5_probe_t;
void dion__mlx5_probe(const char *ibv_lib, const char *dv_lib, dion__mlx5_probe_t *p);

#endif
