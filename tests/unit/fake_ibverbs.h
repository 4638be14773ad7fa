/* A fake libibverbs for test_verbs: one process, QPs connected in loopback, operations executed at post time
 * on this process's memory with the rkey/lkey checks a NIC makes. The test steers it through this control
 * block (dlsym "fake_ibv_control" on the same library the engine dlopen'ed). */
#ifndef DION_FAKE_IBVERBS_H
#define DION_FAKE_IBVERBS_H

#include <infiniband/verbs.h>

#define FAKE_LOG 4096
typedef struct {
    int link_layer;  /* of fake_0's ports: IBV_LINK_LAYER_ETHERNET (default) or _INFINIBAND */
    int port2_state; /* fake_0 port 2 (port 1 is always DOWN); default ACTIVE */
    long fail_at;    /* index (in wr_count) of the WR to fail with fail_status; -1: none */
    enum ibv_wc_status fail_status;
    long wr_count; /* WRs seen by post_send */
    struct {
        uint32_t qpn;
        int opcode;
        unsigned flags;
        int num_sge;
        uint64_t laddr, len, raddr, compare_add, swap;
        uint32_t lkey, rkey;
    } wr[FAKE_LOG];
    int nmodify;
    struct {
        uint32_t qpn;
        int mask;
        struct ibv_qp_attr attr;
    } modify[256];
    int live_qps, live_mrs, live_cqs, live_pds, live_ctxs;
    /* ibv_reg_dmabuf_mr: fails with EOPNOTSUPP unless dmabuf_ok; then it checks the fd is a dmabuf and
     * registers [iova, iova+len). */
    int dmabuf_ok, dmabuf_calls, dmabuf_fd_was_dmabuf;
    int no_atomics; /* fake_0 reports IBV_ATOMIC_NONE */
    int fail_rtr;   /* every INIT->RTR fails with EINVAL */
    int reorder;    /* READs/ATOMICs run late, unfenced WRITEs pass them (fake_ibverbs.c, post_reordered) */
    /* ibv_get_async_event hands these out, then EAGAIN; a QP event names the QP by number. */
    int async_n, async_acked;
    struct {
        enum ibv_event_type type;
        uint32_t qpn;
        int port;
    } async[8];
    uint64_t dmabuf_off, dmabuf_iova, dmabuf_len;
    int qps_created; /* ibv_create_qp calls that succeeded (also exported as fake_ibv_qps_created) */
} fake_ibv_ctl_t;

typedef fake_ibv_ctl_t *(*fake_ibv_control_fn)(void);

/* test_verbs_engine.c */
void test_engine(const char *fake_lib, int *failures);
/* test_verbs_ops.c: the engine behind engine.h */
void test_engine_ops(const char *fake_lib, int *failures);
/* test_verbs_ops.c: DION_IB_CONNECT=ondemand, three engines in this process */
void test_engine_ondemand(const char *fake_lib, int *failures);

#endif
