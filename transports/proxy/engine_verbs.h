/* proxy/verbs engine: RC queue pairs over rdma-core for the CPU proxy. One protection domain and device per
 * engine, one completion queue per context, one RC QP per (context, peer). engine_verbs_ops.c puts it behind
 * engine.h (one context; QPs per peer).
 *
 * Threads: open, close, addr_get, connect, mem_reg and mem_dereg are setup calls (one thread at a time).
 * Posting to and polling a context must come from one thread at a time per context (the proxy thread that
 * owns it); different contexts may be driven by different threads at once.
 *
 * Ordering (IBA vol. 1, the RC work-request ordering rules, and the fence indicator of ibv_post_send(3)): on
 * one RC QP a later request of any kind does not pass an earlier RDMA WRITE or SEND; a later WRITE, SEND or
 * ATOMIC may pass an earlier RDMA READ or ATOMIC unless it carries the fence indicator, which holds it until
 * every earlier READ and ATOMIC of the QP completed. So put_signal = WRITE(data) then ATOMIC or 8-byte
 * WRITE(signal) on the same QP needs no fence for its data; IBV_SEND_FENCE goes only on a WRITE or ATOMIC
 * that must be ordered (signals, DION__VERBS_ORDERED) while a READ or ATOMIC posted earlier on that QP has
 * not completed. Memory is never registered with relaxed ordering. */
#ifndef DION_ENGINE_VERBS_H
#define DION_ENGINE_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "verbs_sym.h"

typedef struct dion__verbs dion__verbs_t;

/* ---- opening ---- */
typedef struct {
    int nctx;            /* contexts (one CQ each); 0: probe only (device, port, GID; no CQ or QP) */
    int npeers;          /* ranks of the comm; QPs are made on demand by addr_get */
    int my_rank;         /* for messages */
    const char *libname; /* NULL: libibverbs.so.1 (tests pass a bogus name) */
} dion__verbs_open_args_t;

dion_status_t dion__verbs_open(const dion__verbs_open_args_t *args, dion__verbs_t **out);
void dion__verbs_close(dion__verbs_t *v);
/* "mlx5_0 port 1, RoCE v2 GID 3 (::ffff:10.0.0.2), MTU 4096" and the like, for logs and dion-info. */
const char *dion__verbs_describe(const dion__verbs_t *v);

/* ---- connection ---- */
/* The blob each side sends the other through the bootstrap, per (context, peer) QP. Little endian on the
 * wire. */
#define DION__VERBS_ADDR_BYTES 40
typedef struct {
    uint32_t qpn;    /* 24 bits */
    uint32_t psn;    /* 24 bits */
    uint16_t lid;    /* IB: the port's LID; RoCE: 0 */
    uint8_t link;    /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
    uint8_t mtu;     /* enum ibv_mtu, the port's active MTU */
    uint8_t global;  /* 1: address with the GID (RoCE always; IB when DION_IB_GID_INDEX is set) */
    uint8_t rd_atom; /* RDMA READ / ATOMIC requests this QP accepts at once as responder */
    uint8_t gid[16];
} dion__verbs_addr_t;
void dion__verbs_addr_pack(const dion__verbs_addr_t *a, uint8_t out[DION__VERBS_ADDR_BYTES]);
dion_status_t dion__verbs_addr_unpack(const uint8_t *in, size_t len, dion__verbs_addr_t *a);

/* Creates the QP of (ctx, peer) in INIT when needed and gives its blob. */
dion_status_t dion__verbs_addr_get(dion__verbs_t *v, int ctx, int peer, uint8_t out[DION__VERBS_ADDR_BYTES]);
/* Moves the QP of (ctx, peer) to RTR then RTS towards the peer's blob. */
dion_status_t dion__verbs_connect(dion__verbs_t *v, int ctx, int peer, const uint8_t *blob, size_t len);

/* ---- memory ---- */
enum { DION__VERBS_MEM_HOST = 0, DION__VERBS_MEM_GPU = 1 };
enum { DION__VERBS_REG_HOST = 1, DION__VERBS_REG_DMABUF = 2, DION__VERBS_REG_PEERMEM = 3 };
typedef struct {
    struct ibv_mr *mr;
    uint64_t addr;
    uint64_t len;
    uint32_t lkey, rkey;
    int path; /* DION__VERBS_REG_* */
} dion__verbs_mr_t;
#define DION__VERBS_RKEY_BYTES 24 /* base address, length, rkey: what a peer needs to target the memory */
typedef struct {
    uint64_t addr, len;
    uint32_t rkey;
} dion__verbs_rkey_t;
dion_status_t dion__verbs_mem_reg(dion__verbs_t *v, void *addr, size_t len, int kind, dion__verbs_mr_t **out);
void dion__verbs_mem_dereg(dion__verbs_t *v, dion__verbs_mr_t *mr);
void dion__verbs_rkey_pack(const dion__verbs_mr_t *mr, uint8_t out[DION__VERBS_RKEY_BYTES]);
dion_status_t dion__verbs_rkey_unpack(const uint8_t *in, size_t len, dion__verbs_rkey_t *rk);

/* Registration with every call behind a pointer, so that the fallback order is testable without a NIC.
 * Order for GPU memory: dmabuf (fd from cuMemGetHandleForAddressRange, ibv_reg_dmabuf_mr), then ibv_reg_mr on
 * the GPU address (works when nvidia-peermem is loaded), then a sentence naming both failures. Host memory:
 * ibv_reg_mr. Each failing call leaves errno set. */
typedef struct {
    void *arg;
    /* A dmabuf fd covering [addr, addr+len) and the offset of addr inside it; 0, or -1 with why filled. */
    int (*dmabuf_fd)(void *arg, uint64_t addr, size_t len, int *fd, uint64_t *offset, char *why, size_t cap);
    void (*close_fd)(void *arg, int fd);
    /* NULL when libibverbs lacks ibv_reg_dmabuf_mr. */
    struct ibv_mr *(*reg_dmabuf)(void *arg, struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                 int fd, int access);
    struct ibv_mr *(*reg_mr)(void *arg, struct ibv_pd *pd, void *addr, size_t len, int access);
} dion__verbs_reg_ops_t;
/* The real dmabuf_fd: cuMemGetHandleForAddressRange over [addr, addr+len) widened to host pages. */
int dion__verbs_dmabuf_fd(void *arg, uint64_t addr, size_t len, int *fd, uint64_t *offset, char *why,
                          size_t cap);
dion_status_t dion__verbs_reg_with(const dion__verbs_reg_ops_t *ops, struct ibv_pd *pd, void *addr,
                                   size_t len, int kind, struct ibv_mr **mr, int *path);
#define DION__VERBS_MR_ACCESS                                                                                \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ---- operations ---- */
enum { DION__VERBS_ORDERED = 1 }; /* flags: must not pass any earlier op of this (context, peer) */
enum { DION__VERBS_FADD, DION__VERBS_CSWAP };
enum { DION__VERBS_SIG_SET, DION__VERBS_SIG_ADD };
typedef struct {
    uint64_t addr;
    uint32_t lkey;
} dion__verbs_local_t;

/* Whether the QP of (ctx, peer) exists and is connected (posts to it are accepted). */
int dion__verbs_connected(const dion__verbs_t *v, int ctx, int peer);
/* Work requests the next post needs (a put_signal takes 2); post only when room says so, after polling. */
int dion__verbs_room(const dion__verbs_t *v, int ctx, int peer);
dion_status_t dion__verbs_post_put(dion__verbs_t *v, int ctx, int peer, dion__verbs_local_t src,
                                   uint32_t bytes, uint64_t raddr, uint32_t rkey, unsigned flags,
                                   uint64_t cookie);
/* WRITE of the data, then the signal: ADD as an 8-byte ATOMIC fetch-add (result into engine scratch), SET as
 * an 8-byte inline RDMA WRITE. bytes 0: the signal alone (ordered after earlier WRITEs of the QP). */
dion_status_t dion__verbs_post_put_signal(dion__verbs_t *v, int ctx, int peer, dion__verbs_local_t src,
                                          uint32_t bytes, uint64_t raddr, uint32_t rkey, uint64_t sig_raddr,
                                          uint32_t sig_rkey, int sig_op, uint64_t value, unsigned flags,
                                          uint64_t cookie);
dion_status_t dion__verbs_post_get(dion__verbs_t *v, int ctx, int peer, dion__verbs_local_t dst,
                                   uint32_t bytes, uint64_t raddr, uint32_t rkey, unsigned flags,
                                   uint64_t cookie);
/* 8-byte fetch-add or compare-swap; the old value lands in result (8 bytes, registered, 8-byte aligned). */
dion_status_t dion__verbs_post_atomic(dion__verbs_t *v, int ctx, int peer, int op, dion__verbs_local_t result,
                                      uint64_t raddr, uint32_t rkey, uint64_t operand, uint64_t compare,
                                      unsigned flags, uint64_t cookie);

typedef struct {
    uint64_t cookie;
    dion_status_t status; /* not DION_SUCCESS: the sentence is in why (and dion_last_error()) */
    int peer;
    char why[512]; /* the decoded completion status, naming the operation, peer and QPs; "" on success */
} dion__verbs_cqe_t;
/* Up to max completions of context ctx; returns how many, or -1 when polling itself failed. */
int dion__verbs_poll(dion__verbs_t *v, int ctx, dion__verbs_cqe_t *out, int max);
/* Reads the device's pending asynchronous events without blocking (the proxy calls it now and then, e.g. when
 * idle): a fatal QP, CQ, port or device event is logged, recorded as the engine's error if it is the first,
 * and its QP marked failed. Returns how many such error events were read (0 when none or when the device's
 * event fd cannot be made non-blocking). */
int dion__verbs_async_poll(dion__verbs_t *v);
/* The first error sentence the engine recorded (any thread may read it after poll reported an error). */
const char *dion__verbs_error(const dion__verbs_t *v);

/* ---- probe (dion-info prints what the engine itself checks) ---- */
typedef struct {
    int lib_ok; /* libibverbs loaded with every required entry */
    char lib_path[256];
    int has_dmabuf_mr;   /* ibv_reg_dmabuf_mr exported */
    int has_cuda_dmabuf; /* the CUDA driver gives dmabuf fds (cuMemGetHandleForAddressRange) */
    int dev_ok;          /* a device and port were chosen as open would */
    char dev[768];       /* dion__verbs_describe() */
    char why[1024];      /* the sentence when !lib_ok or !dev_ok */
} dion__verbs_probe_t;
void dion__verbs_probe(const char *libname, dion__verbs_probe_t *p);

/* ---- pure pieces, exposed for the unit tests ---- */
typedef struct {
    uint8_t port;
    uint16_t pkey_index;
    uint8_t timeout;   /* 4.096 us * 2^timeout per transport retry */
    uint8_t retry_cnt; /* 0..7 */
    uint8_t rnr_retry; /* 0..7 (7: forever; DION sends no SENDs, so RNR never happens) */
    uint8_t min_rnr_timer;
    uint8_t sl;
    uint8_t traffic_class;
    uint8_t hop_limit;
    int gid_index;        /* -1: no GRH (IB by LID) */
    uint8_t rd_atom_init; /* READ/ATOMIC outstanding as requester (device max_qp_init_rd_atom, capped) */
    enum ibv_mtu mtu;     /* the local port's active MTU */
} dion__verbs_qp_params_t;

/* Each fills the attribute struct for one transition and returns the mask ibv_modify_qp needs for it. */
int dion__verbs_attr_init(const dion__verbs_qp_params_t *p, struct ibv_qp_attr *a);
int dion__verbs_attr_rtr(const dion__verbs_qp_params_t *p, const dion__verbs_addr_t *local,
                         const dion__verbs_addr_t *remote, struct ibv_qp_attr *a);
int dion__verbs_attr_rts(const dion__verbs_qp_params_t *p, const dion__verbs_addr_t *local,
                         const dion__verbs_addr_t *remote, struct ibv_qp_attr *a);

/* GID choice from a port's table. type: enum ibv_gid_type, or -1 when unknown. */
typedef struct {
    uint8_t raw[16];
    int type;
} dion__verbs_gid_t;
/* Returns the index to use, -1 for "address by LID" (IB without forced index), or -2 with why filled (RoCE
 * without a usable entry, or a forced index that is out of range or zero). forced: DION_IB_GID_INDEX or -1.
 */
int dion__verbs_gid_choose(const dion__verbs_gid_t *table, int n, int link_layer, int forced, char *why,
                           size_t cap);
/* One reader of a port's GID table for both verbs users (proxy/verbs and gdaki/mlx5): each entry from
 * query_gid_ex (rdma-core 36+, with its type) when given, else from query_gid with the RoCE version read from
 * <sysroot>/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<i> (IB: IBV_GID_TYPE_IB); then
 * dion__verbs_gid_choose. DION_ERR_UNSUPPORTED (no usable entry) or DION_ERR_NO_MEMORY with why filled and no
 * sentence set: the caller names itself in its own. */
typedef struct {
    struct ibv_context *ctx;
    const char *devname;
    uint8_t port;
    int tbl_len; /* the port's gid_tbl_len */
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
    int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t, size_t);
    const char *sysroot; /* NULL or "": the real /sys (tests pass a directory) */
} dion__verbs_gid_src_t;
typedef struct {
    int index;       /* dion__verbs_gid_choose's answer: >= 0, or -1 for "address by LID" */
    uint8_t raw[16]; /* the chosen entry (entry 0 when by LID; zero when the table is empty) */
    int type;        /* its enum ibv_gid_type, -1 when unknown or none */
} dion__verbs_gid_pick_t;
dion_status_t dion__verbs_gid_read(const dion__verbs_gid_src_t *src, int link_layer, int forced,
                                   dion__verbs_gid_pick_t *out, char *why, size_t cap);
/* One device and port choice for both verbs users (proxy/verbs, gdaki/mlx5; verbs_dev.c): the devices that
 * ibv_get_device_list lists (DION_IB_HCA's alone when hca is set), each opened by the caller's open; the
 * first ACTIVE port (port's alone when set) wins. The caller words the sentences from the result: each
 * device's and port's reason in seen ("...; " pieces), the devices listed in names, errno in err. */
typedef struct {
    const char *hca;   /* DION_IB_HCA, or "" / NULL: any device */
    int port;          /* DION_IB_PORT, 0: the first ACTIVE */
    int state_numbers; /* a port not ACTIVE reads "port P not ACTIVE (state S)", else "port P DOWN" (by name)
                        */
    size_t seen_cap;   /* how much of seen the caller's sentence takes (0: all of it) */
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
    int (*close_device)(struct ibv_context *);
    /* opens dev, or returns NULL with the reason appended to seen (within cap) */
    struct ibv_context *(*open)(void *arg, struct ibv_device *dev, const char *name, char *seen, size_t cap);
    int (*query_port)(void *arg, struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
    void *arg;
} dion__verbs_dev_src_t;
typedef enum {
    DION__VERBS_DEV_OK = 0,      /* ctx, dattr, pattr, port and name are set; the caller closes ctx */
    DION__VERBS_DEV_LIST_FAILED, /* ibv_get_device_list failed: err */
    DION__VERBS_DEV_NONE,        /* no device listed */
    DION__VERBS_DEV_NO_HCA,      /* hca names no device listed: names */
    DION__VERBS_DEV_NO_PORT,     /* no device with a usable ACTIVE port: seen */
} dion__verbs_dev_result_t;
typedef struct {
    struct ibv_context *ctx;
    struct ibv_device_attr dattr;
    struct ibv_port_attr pattr;
    uint8_t port;
    char name[64];
    int err;
    char seen[1024];
    char names[256];
} dion__verbs_dev_pick_t;
dion__verbs_dev_result_t dion__verbs_dev_choose(const dion__verbs_dev_src_t *src,
                                                dion__verbs_dev_pick_t *out);
/* ibv_query_port as verbs.h's inline wrapper does it: the provider's extended op when it has one, else the
 * exported compat entry on a zeroed struct. */
int dion__verbs_port_query(int (*compat)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *),
                           struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
/* "DOWN", "INIT (no subnet manager?)", "ACTIVE", ... */
const char *dion__verbs_port_state_name(enum ibv_port_state s);
/* Appends to the string in buf (cap bytes) what fits. */
void dion__verbs_appendf(char *buf, size_t cap, const char *fmt, ...) DION__PRINTF(3, 4);
/* "RoCE v2\n" -> IBV_GID_TYPE_ROCE_V2; "IB/RoCE v1" -> IBV_GID_TYPE_ROCE_V1; else -1 (sysfs gid_attrs/types).
 */
int dion__verbs_gid_type_parse(const char *text);
/* "::ffff:10.0.0.2", "fe80::...", for messages. */
void dion__verbs_gid_text(const uint8_t raw[16], char *buf, size_t cap);

/* Work requests: each builder fills wr and its one sge (wr->sg_list points at sge). */
typedef struct {
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    uint64_t inline_value; /* SET's 8-byte payload, copied by the provider at post time */
} dion__verbs_wr_t;
void dion__verbs_wr_write(dion__verbs_wr_t *w, uint64_t wr_id, uint64_t laddr, uint32_t lkey, uint32_t bytes,
                          uint64_t raddr, uint32_t rkey, unsigned send_flags);
void dion__verbs_wr_read(dion__verbs_wr_t *w, uint64_t wr_id, uint64_t laddr, uint32_t lkey, uint32_t bytes,
                         uint64_t raddr, uint32_t rkey, unsigned send_flags);
void dion__verbs_wr_atomic(dion__verbs_wr_t *w, uint64_t wr_id, int op, uint64_t laddr, uint32_t lkey,
                           uint64_t raddr, uint32_t rkey, uint64_t operand, uint64_t compare,
                           unsigned send_flags);
/* SET signal: an 8-byte RDMA WRITE of value, inline (IBV_SEND_INLINE is added). */
void dion__verbs_wr_set(dion__verbs_wr_t *w, uint64_t wr_id, uint64_t value, uint64_t raddr, uint32_t rkey,
                        unsigned send_flags);
/* IBV_SEND_FENCE when a WR of this opcode (WRITE, SEND or ATOMIC), asked to be ordered, could pass earlier
 * READs/ATOMICs still outstanding on its QP; 0 otherwise. */
unsigned dion__verbs_fence_flag(enum ibv_wr_opcode op, unsigned flags, unsigned rd_atomic_outstanding);

/* A completion turned into a status and a sentence naming the operation, the peer, the QP numbers in hex,
 * what the status means and what to do. Every ibv_wc_status value has its own sentence. */
dion_status_t dion__verbs_wc_describe(enum ibv_wc_status status, uint32_t vendor_err, const char *op,
                                      int peer, int ctx, uint32_t local_qpn, uint32_t remote_qpn, char *buf,
                                      size_t cap);
const char *dion__verbs_wc_status_name(enum ibv_wc_status status);
/* An asynchronous event turned into a sentence (what, which device/port or QP and peer, what to do); returns
 * DION_SUCCESS for events that need nothing (port active, LID change, ...). peer < 0: not a QP event. */
dion_status_t dion__verbs_async_describe(enum ibv_event_type type, const char *dev, int port, int peer,
                                         uint32_t qpn, char *buf, size_t cap);

/* Settings from the environment (DION_IB_*), validated; a sentence on a bad value. */
typedef struct {
    char hca[64];  /* DION_IB_HCA: device name ("" any); a ":port" suffix sets port */
    int port;      /* DION_IB_PORT, 0: first ACTIVE port */
    int gid_index; /* DION_IB_GID_INDEX, -1: automatic */
    dion__verbs_qp_params_t qp;
    int sq_depth, cq_depth;
} dion__verbs_cfg_t;
dion_status_t dion__verbs_cfg_read(dion__verbs_cfg_t *c);

#endif
