/* A fake libibverbs + libmlx5 (one module exporting both sets of names) for the gdaki mlx5 host half
 * (tests/unit/test_gdaki_mlx5.c). It keeps every DEVX mailbox it is sent, answers QUERY_HCA_CAP with caps the
 * test sets (written at mlx5_ifc.h's bit offsets, stated here independently of devx_layout.c), fails the
 * step the test names with a status and syndrome, and logs every object it creates and destroys in order so
 * that the test can check teardown runs in reverse. The test steers it through fake_mlx5_control(). */
#ifndef DION_FAKE_MLX5_H
#define DION_FAKE_MLX5_H

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdint.h>

#define FM_CMDS   128
#define FM_EVENTS 512

typedef struct {
    /* ---- knobs ---- */
    int link_layer;       /* IBV_LINK_LAYER_ETHERNET (default) or _INFINIBAND */
    int open_errno;       /* mlx5dv_open_device fails with it (0: succeeds) */
    int fail_pd;          /* ibv_alloc_pd fails */
    uint16_t fail_opcode; /* the DEVX command (0x100 query, 0x400 CQ, 0x500 QP, 0x502..0x504) to fail */
    int fail_nth;         /* ... at its nth occurrence (0: the first) */
    uint8_t fail_status;  /* written into the output mailbox */
    uint32_t fail_syndrome;
    unsigned fail_uar; /* bit 0: NC_DEDICATED fails, 1: NC, 2: BF */
    int fail_eqn, fail_ah;
    int umem_dmabuf_ok; /* mlx5dv_devx_umem_reg_ex with a dmabuf fd succeeds */
    int umem_plain_ok;  /* mlx5dv_devx_umem_reg succeeds (peermem / host memory) */
    int mr_dmabuf_ok, mr_plain_ok;
    /* caps QUERY_HCA_CAP answers */
    uint32_t cap_log_max_qp_sz, cap_log_max_cq_sz, cap_log_max_msg, cap_cqe_version, cap_port_type,
        cap_atomic, cap_max_wqe_sz_sq, cap_sq_ts_format, cap_atomic_endian;
    uint32_t pdn, eqn;

    /* ---- observations ---- */
    int ncmd;
    struct {
        uint16_t opcode;
        int create;   /* obj_create (else modify or general) */
        uint32_t obj; /* the QPN a modify names */
        size_t inlen;
        uint8_t in[272];
    } cmd[FM_CMDS];
    int nev;
    struct {
        char kind[16]; /* "ctx" "pd" "uar" "umem" "cq" "qp" "mr" "ah", or the test's own ("gpumem", ...) */
        uintptr_t id;
        int open; /* 1 created, 0 destroyed */
    } ev[FM_EVENTS];
    int live;            /* objects created and not destroyed */
    uint32_t open_flags; /* mlx5dv_context_attr.flags of the last open */
    int nuars;
    struct mlx5dv_devx_uar uar[8];
    unsigned uar_types_asked; /* bit per kind tried: 0 NC_DEDICATED, 1 NC, 2 BF */
    int numem;
    struct {
        void *addr;
        size_t size;
        uint32_t access, umem_id;
        int dmabuf; /* registered through umem_reg_ex with a dmabuf fd (fd checked open at the call) */
        uint64_t pgsz_bitmap;
    } umem[64];
    int nmr;
    struct {
        void *addr;
        size_t len;
        uint64_t iova, offset;
        int dmabuf, access;
    } mr[64];
    uint8_t ah_dgid[16];
    int ah_sgid_index, ah_hop_limit;
} fake_mlx5_ctl_t;

typedef fake_mlx5_ctl_t *(*fake_mlx5_control_fn)(void);
/* Resets every knob and observation to the defaults (the state before the first call). */
typedef void (*fake_mlx5_reset_fn)(void);
/* Appends an event of the test's own (its GPU operations) to the same log. */
typedef void (*fake_mlx5_event_fn)(const char *kind, uintptr_t id, int open);

/* The fake's GIDs (RoCE): [0] fe80::1 v1, [1] fe80::1 v2, [2] ::ffff:10.0.0.1 v1, [3] ::ffff:10.0.0.1 v2;
 * InfiniBand: [0] fe80::2a, LID 0x2a. The AH's MAC for a GID g: 02:00:g[12]:g[13]:g[14]:g[15]. */
#define FM_LID       0x2a
#define FM_UAR_PAGE0 0x1230u
#define FM_CQN0      0x400u
#define FM_QPN0      0x1a0u
#define FM_UMEM0     0x70u

#endif
