/* proxy/verbs engine without an RDMA device: QP attributes per transition, GID choice, address and key blobs,
 * work-request builders and fences, completion sentences for every ibv_wc_status, the registration fallback
 * order, settings, the dlopen failure sentence, and (through a fake libibverbs built beside this test) the
 * engine end to end: device and port choice, QP connection, puts, put_signal, gets, atomics and error
 * completions. Every check prints what failed; the exit status counts failures. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_ibverbs.h"
#include "src/cuda.h"
#include "transports/proxy/engine_verbs.h"
#include "transports/proxy/verbs_cm.h"

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---- QP attributes ---- */

static dion__verbs_qp_params_t params(int gid_index)
{
    dion__verbs_qp_params_t p = {.port = 2,
                                 .pkey_index = 0,
                                 .timeout = 20,
                                 .retry_cnt = 7,
                                 .rnr_retry = 7,
                                 .min_rnr_timer = 12,
                                 .sl = 3,
                                 .traffic_class = 106,
                                 .hop_limit = 64,
                                 .gid_index = gid_index,
                                 .rd_atom_init = 16,
                                 .mtu = IBV_MTU_4096};
    return p;
}

static void test_attrs(void)
{
    struct ibv_qp_attr a;
    dion__verbs_qp_params_t p = params(-1);
    memset(&a, 0xa5, sizeof a); /* every field the builder leaves must come back zero, not stale */
    int m = dion__verbs_attr_init(&p, &a);
    /* ibv_modify_qp(3), RC RESET->INIT: exactly these are required; nothing optional is set. */
    CHECK(m == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT mask 0x%x", m);
    CHECK(a.qp_state == IBV_QPS_INIT && a.port_num == 2 && a.pkey_index == 0, "INIT fields");
    CHECK(a.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC),
          "INIT access 0x%x", a.qp_access_flags);
    CHECK(a.path_mtu == 0 && a.dest_qp_num == 0 && a.timeout == 0, "INIT left other fields nonzero");

    dion__verbs_addr_t local = {.qpn = 0x1234,
                                .psn = 0xabcde,
                                .lid = 7,
                                .link = IBV_LINK_LAYER_INFINIBAND,
                                .mtu = IBV_MTU_4096,
                                .rd_atom = 16};
    dion__verbs_addr_t remote = {.qpn = 0x5678,
                                 .psn = 0x12345,
                                 .lid = 9,
                                 .link = IBV_LINK_LAYER_INFINIBAND,
                                 .mtu = IBV_MTU_2048,
                                 .rd_atom = 4};
    for (int i = 0; i < 16; i++) remote.gid[i] = (uint8_t)(0xf0 + i);
    memset(&a, 0xa5, sizeof a);
    m = dion__verbs_attr_rtr(&p, &local, &remote, &a);
    CHECK(m == (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
          "RTR mask 0x%x", m);
    CHECK(a.qp_state == IBV_QPS_RTR && a.dest_qp_num == 0x5678 && a.rq_psn == 0x12345, "RTR qpn/psn");
    CHECK(a.path_mtu == IBV_MTU_2048, "RTR path MTU is the smaller of both ports: %d", a.path_mtu);
    CHECK(a.max_dest_rd_atomic == 16 && a.min_rnr_timer == 12, "RTR responder resources %d",
          a.max_dest_rd_atomic);
    CHECK(a.ah_attr.dlid == 9 && a.ah_attr.port_num == 2 && a.ah_attr.sl == 3 && a.ah_attr.is_global == 0 &&
              a.ah_attr.src_path_bits == 0,
          "RTR IB address vector (LID, no GRH)");
    /* The other direction of the MTU minimum. */
    p.mtu = IBV_MTU_1024;
    dion__verbs_attr_rtr(&p, &local, &remote, &a);
    CHECK(a.path_mtu == IBV_MTU_1024, "RTR path MTU local smaller: %d", a.path_mtu);

    /* RoCE: GRH with the peer's GID and our GID index. */
    p = params(3);
    local.link = remote.link = IBV_LINK_LAYER_ETHERNET;
    remote.lid = 0;
    memset(&a, 0xa5, sizeof a);
    m = dion__verbs_attr_rtr(&p, &local, &remote, &a);
    CHECK(m & IBV_QP_AV, "RoCE RTR has AV");
    CHECK(a.ah_attr.is_global == 1 && a.ah_attr.grh.sgid_index == 3 && a.ah_attr.grh.hop_limit == 64 &&
              a.ah_attr.grh.traffic_class == 106 && a.ah_attr.grh.flow_label == 0,
          "RoCE GRH fields");
    CHECK(memcmp(a.ah_attr.grh.dgid.raw, remote.gid, 16) == 0, "RoCE dgid is the peer's GID");
    CHECK(a.ah_attr.dlid == 0, "RoCE dlid");

    memset(&a, 0xa5, sizeof a);
    m = dion__verbs_attr_rts(&p, &local, &remote, &a);
    CHECK(m == (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                IBV_QP_MAX_QP_RD_ATOMIC),
          "RTS mask 0x%x", m);
    CHECK(a.qp_state == IBV_QPS_RTS && a.timeout == 20 && a.retry_cnt == 7 && a.rnr_retry == 7, "RTS timers");
    CHECK(a.sq_psn == 0xabcde, "RTS sq_psn is our PSN: 0x%x", a.sq_psn);
    CHECK(a.max_rd_atomic == 4, "RTS initiator depth capped by the peer's responder resources: %d",
          a.max_rd_atomic);
    remote.rd_atom = 64;
    dion__verbs_attr_rts(&p, &local, &remote, &a);
    CHECK(a.max_rd_atomic == 16, "RTS initiator depth capped by ours: %d", a.max_rd_atomic);
}

/* ---- GID choice ---- */

static dion__verbs_gid_t gid_v4(int type, int a, int b, int c, int d)
{
    dion__verbs_gid_t g = {{0}, type};
    g.raw[10] = g.raw[11] = 0xff;
    g.raw[12] = (uint8_t)a, g.raw[13] = (uint8_t)b, g.raw[14] = (uint8_t)c, g.raw[15] = (uint8_t)d;
    return g;
}

static dion__verbs_gid_t gid_v6(int type, int linklocal, int tail)
{
    dion__verbs_gid_t g = {{0}, type};
    g.raw[0] = linklocal ? 0xfe : 0x20;
    g.raw[1] = linklocal ? 0x80 : 0x01;
    g.raw[15] = (uint8_t)tail;
    return g;
}

static void test_gid(void)
{
    char why[512];
    const int V1 = IBV_GID_TYPE_ROCE_V1, V2 = IBV_GID_TYPE_ROCE_V2;
    dion__verbs_gid_t zero = {{0}, V2};
    /* The order of preference, best first; shuffled tables must always yield the best present entry. */
    dion__verbs_gid_t ranked[] = {gid_v4(V2, 10, 0, 0, 1), gid_v6(V2, 0, 1), gid_v6(V2, 1, 1),
                                  gid_v4(V1, 10, 0, 0, 2), gid_v6(V1, 0, 2), gid_v6(V1, 1, 2),
                                  gid_v4(-1, 10, 0, 0, 3)};
    int nr = (int)(sizeof ranked / sizeof ranked[0]);
    for (int trial = 0; trial < 400; trial++) {
        dion__verbs_gid_t t[16];
        int n = 0, best = nr;
        for (int k = 0; k < nr; k++)
            if (rnd() % 2) {
                t[n++] = ranked[k];
                if (k < best) best = k;
            }
        int zeros = (int)(rnd() % 4);
        for (int z = 0; z < zeros; z++) t[n++] = zero;
        for (int i = n - 1; i > 0; i--) { /* shuffle */
            int j = (int)(rnd() % (uint64_t)(i + 1));
            dion__verbs_gid_t x = t[i];
            t[i] = t[j], t[j] = x;
        }
        int idx = dion__verbs_gid_choose(t, n, IBV_LINK_LAYER_ETHERNET, -1, why, sizeof why);
        if (best == nr) {
            CHECK(idx == -2 && strstr(why, "no usable GID"), "trial %d: only empty entries gave %d (%s)",
                  trial, idx, why);
            continue;
        }
        CHECK(idx >= 0 && idx < n && memcmp(t[idx].raw, ranked[best].raw, 16) == 0 &&
                  t[idx].type == ranked[best].type,
              "trial %d: chose %d (%s), want preference rank %d", trial, idx, why, best);
        CHECK(strstr(why, "GID ") != NULL, "trial %d: no description (%s)", trial, why);
    }
    dion__verbs_gid_t t[4] = {gid_v6(V1, 1, 1), zero, gid_v4(V2, 192, 168, 1, 2), gid_v6(V2, 1, 2)};
    int idx = dion__verbs_gid_choose(t, 4, IBV_LINK_LAYER_ETHERNET, -1, why, sizeof why);
    CHECK(idx == 2 && strstr(why, "RoCE v2") && strstr(why, "192.168.1.2"), "v4-mapped v2: %d (%s)", idx,
          why);
    /* InfiniBand: LID, unless an index is forced. */
    idx = dion__verbs_gid_choose(t, 4, IBV_LINK_LAYER_INFINIBAND, -1, why, sizeof why);
    CHECK(idx == -1 && strstr(why, "LID"), "IB: %d (%s)", idx, why);
    idx = dion__verbs_gid_choose(t, 4, IBV_LINK_LAYER_INFINIBAND, 3, why, sizeof why);
    CHECK(idx == 3 && strstr(why, "DION_IB_GID_INDEX"), "IB forced: %d (%s)", idx, why);
    /* Forced index: honoured even when worse; rejected when empty or out of range. */
    idx = dion__verbs_gid_choose(t, 4, IBV_LINK_LAYER_ETHERNET, 0, why, sizeof why);
    CHECK(idx == 0, "forced 0: %d (%s)", idx, why);
    idx = dion__verbs_gid_choose(t, 4, IBV_LINK_LAYER_ETHERNET, 1, why, sizeof why);
    CHECK(idx == -2 && strstr(why, "DION_IB_GID_INDEX=1") && strstr(why, "empty"), "forced empty: %d (%s)",
          idx, why);
    idx = dion__verbs_gid_choose(t, 4, IBV_LINK_LAYER_ETHERNET, 4, why, sizeof why);
    CHECK(idx == -2 && strstr(why, "4 entries"), "forced out of range: %d (%s)", idx, why);
    idx = dion__verbs_gid_choose(t, 0, IBV_LINK_LAYER_ETHERNET, -1, why, sizeof why);
    CHECK(idx == -2, "empty table: %d", idx);
    CHECK(dion__verbs_gid_type_parse("RoCE v2\n") == V2, "sysfs RoCE v2");
    CHECK(dion__verbs_gid_type_parse("IB/RoCE v1\n") == V1, "sysfs IB/RoCE v1");
    CHECK(dion__verbs_gid_type_parse("") == -1 && dion__verbs_gid_type_parse(NULL) == -1, "sysfs unknown");
}

/* The shared table reader (proxy/verbs and gdaki/mlx5 both call it): entries and types from query_gid_ex,
 * or from query_gid with the RoCE version read from sysfs under a test sysroot; empty entries skipped. */
static dion__verbs_gid_t gr_table[4];
static int gr_calls;
static int gr_query(struct ibv_context *c, uint8_t port, int i, union ibv_gid *g)
{
    (void)c;
    gr_calls++;
    if (port != 2 || i < 0 || i >= 4) return EINVAL;
    memcpy(g->raw, gr_table[i].raw, 16);
    return 0;
}
static int gr_query_ex(struct ibv_context *c, uint32_t port, uint32_t i, struct ibv_gid_entry *e, uint32_t fl,
                       size_t sz)
{
    (void)c, (void)fl, (void)sz;
    gr_calls++;
    if (port != 2 || i >= 4) return EINVAL;
    int empty = 1;
    for (int k = 0; k < 16; k++) empty &= gr_table[i].raw[k] == 0;
    if (empty) return ENODATA;
    memset(e, 0, sizeof *e);
    memcpy(e->gid.raw, gr_table[i].raw, 16);
    e->gid_type = (uint32_t)gr_table[i].type;
    e->gid_index = i;
    return 0;
}

static void test_gid_read(void)
{
    const int V1 = IBV_GID_TYPE_ROCE_V1, V2 = IBV_GID_TYPE_ROCE_V2;
    char why[512];
    dion__verbs_gid_pick_t pk;
    /* query_gid_ex: link-local v1, empty, global v6 v2, v4-mapped v1 -> the v2 entry (v2 outranks v4-mapping)
     */
    gr_table[0] = gid_v6(V1, 1, 1), memset(&gr_table[1], 0, sizeof gr_table[1]);
    gr_table[2] = gid_v6(V2, 0, 7), gr_table[3] = gid_v4(V1, 10, 1, 2, 3);
    dion__verbs_gid_src_t src = {NULL, "fake_0", 2, 4, gr_query, gr_query_ex, NULL};
    gr_calls = 0;
    dion_status_t s = dion__verbs_gid_read(&src, IBV_LINK_LAYER_ETHERNET, -1, &pk, why, sizeof why);
    CHECK(s == DION_SUCCESS && pk.index == 2 && pk.type == V2 && !memcmp(pk.raw, gr_table[2].raw, 16) &&
              gr_calls == 4,
          "query_gid_ex: status %d index %d type %d calls %d (%s)", s, pk.index, pk.type, gr_calls, why);
    /* query_gid + sysfs types: a test sysroot says entry 3 (v4-mapped) is RoCE v2 */
    char root[] = "/tmp/dion_gidXXXXXX";
    CHECK(mkdtemp(root) != NULL, "mkdtemp: %s", strerror(errno));
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "d=%s/sys/class/infiniband/fake_0/ports/2/gid_attrs/types && mkdir -p $d && "
             "echo 'IB/RoCE v1' > $d/0 && echo 'RoCE v2' > $d/2 && echo 'RoCE v2' > $d/3",
             root);
    CHECK(system(cmd) == 0, "making %s", root);
    src.query_gid_ex = NULL;
    src.sysroot = root;
    gr_calls = 0;
    s = dion__verbs_gid_read(&src, IBV_LINK_LAYER_ETHERNET, -1, &pk, why, sizeof why);
    CHECK(s == DION_SUCCESS && pk.index == 3 && pk.type == V2 && !memcmp(pk.raw, gr_table[3].raw, 16) &&
              strstr(why, "10.1.2.3") && gr_calls == 4,
          "sysfs: status %d index %d type %d calls %d (%s)", s, pk.index, pk.type, gr_calls, why);
    /* forced index honoured; forced empty entry refused with the variable named */
    s = dion__verbs_gid_read(&src, IBV_LINK_LAYER_ETHERNET, 0, &pk, why, sizeof why);
    CHECK(s == DION_SUCCESS && pk.index == 0 && pk.type == V1, "forced 0: %d %d %d", s, pk.index, pk.type);
    s = dion__verbs_gid_read(&src, IBV_LINK_LAYER_ETHERNET, 1, &pk, why, sizeof why);
    CHECK(s == DION_ERR_UNSUPPORTED && strstr(why, "DION_IB_GID_INDEX=1"), "forced empty: %d (%s)", s, why);
    /* no sysfs: types unknown, the v4-mapped entry still wins among them */
    src.sysroot = "/nonexistent";
    s = dion__verbs_gid_read(&src, IBV_LINK_LAYER_ETHERNET, -1, &pk, why, sizeof why);
    CHECK(s == DION_SUCCESS && pk.index == 3 && pk.type == -1, "no sysfs: %d %d %d", s, pk.index, pk.type);
    /* InfiniBand: by LID, entry 0 carried along with type IB */
    s = dion__verbs_gid_read(&src, IBV_LINK_LAYER_INFINIBAND, -1, &pk, why, sizeof why);
    CHECK(s == DION_SUCCESS && pk.index == -1 && pk.type == IBV_GID_TYPE_IB &&
              !memcmp(pk.raw, gr_table[0].raw, 16),
          "IB: %d %d %d", s, pk.index, pk.type);
    /* an empty table: RoCE refuses, nothing read */
    src.tbl_len = 0;
    s = dion__verbs_gid_read(&src, IBV_LINK_LAYER_ETHERNET, -1, &pk, why, sizeof why);
    CHECK(s == DION_ERR_UNSUPPORTED && pk.type == -1, "empty: %d (%s)", s, why);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0, "removing %s", root);
}

/* The on-demand handshake's message (verbs_cm.h): fields survive the wire; a wrong magic or kind is refused.
 */
static void test_vcm_msg(void)
{
    for (int trial = 0; trial < 200; trial++) {
        dion__vcm_msg_t a = {(uint32_t)(1 + rnd() % 3), (uint32_t)rnd(), (uint32_t)rnd(), rnd(), {0}}, b;
        for (int i = 0; i < DION__VERBS_ADDR_BYTES; i++) a.blob[i] = (uint8_t)rnd();
        uint8_t w[DION__VCM_MSG_BYTES];
        memset(w, 0xee, sizeof w);
        dion__vcm_msg_pack(&a, w);
        memset(&b, 0, sizeof b);
        CHECK(dion__vcm_msg_unpack(w, &b) == 0 && b.kind == a.kind && b.from == a.from && b.to == a.to &&
                  b.key == a.key && !memcmp(b.blob, a.blob, sizeof a.blob),
              "trial %d: message round trip", trial);
        CHECK(w[0] == 'D' && w[1] == 'V' && w[2] == 'C' && w[3] == '1', "trial %d: magic DVC1", trial);
        uint8_t bad[DION__VCM_MSG_BYTES];
        memcpy(bad, w, sizeof bad);
        bad[(size_t)(rnd() % 4)] ^= (uint8_t)(1 + rnd() % 255);
        CHECK(dion__vcm_msg_unpack(bad, &b) == -1, "trial %d: a wrong magic is accepted", trial);
        memcpy(bad, w, sizeof bad);
        bad[4] = (uint8_t)(rnd() % 2 ? 0 : 4 + rnd() % 200);
        CHECK(dion__vcm_msg_unpack(bad, &b) == -1, "trial %d: kind %u is accepted", trial, bad[4]);
    }
}

/* ---- blobs ---- */

static void test_blobs(void)
{
    for (int trial = 0; trial < 200; trial++) {
        dion__verbs_addr_t a = {.qpn = (uint32_t)rnd() & 0xffffff,
                                .psn = (uint32_t)rnd() & 0xffffff,
                                .lid = (uint16_t)rnd(),
                                .link = (uint8_t)(1 + rnd() % 2),
                                .mtu = (uint8_t)(1 + rnd() % 5),
                                .global = (uint8_t)(rnd() % 2),
                                .rd_atom = (uint8_t)rnd()};
        for (int i = 0; i < 16; i++) a.gid[i] = (uint8_t)rnd();
        uint8_t buf[DION__VERBS_ADDR_BYTES];
        dion__verbs_addr_pack(&a, buf);
        dion__verbs_addr_t b;
        CHECK(dion__verbs_addr_unpack(buf, sizeof buf, &b) == DION_SUCCESS, "unpack: %s", dion_last_error());
        CHECK(memcmp(&a, &b, sizeof a) == 0, "address blob round trip %d", trial);
        buf[0] ^= 1;
        CHECK(dion__verbs_addr_unpack(buf, sizeof buf, &b) != DION_SUCCESS, "bad tag accepted");
        buf[0] ^= 1;
        CHECK(dion__verbs_addr_unpack(buf, sizeof buf - 1, &b) != DION_SUCCESS, "short blob accepted");
        dion__verbs_mr_t m = {.addr = rnd(), .len = rnd(), .rkey = (uint32_t)rnd()};
        uint8_t kb[DION__VERBS_RKEY_BYTES];
        dion__verbs_rkey_pack(&m, kb);
        dion__verbs_rkey_t k;
        CHECK(dion__verbs_rkey_unpack(kb, sizeof kb, &k) == DION_SUCCESS && k.addr == m.addr &&
                  k.len == m.len && k.rkey == m.rkey,
              "rkey blob round trip %d", trial);
        kb[23] ^= 0x40;
        CHECK(dion__verbs_rkey_unpack(kb, sizeof kb, &k) != DION_SUCCESS, "bad rkey tag accepted");
    }
    /* Fixed byte layout: little endian, as the peers on other hosts read it. */
    dion__verbs_addr_t a = {.qpn = 0x123456, .psn = 0xabcdef, .lid = 0x0102, .link = 2, .mtu = 5};
    uint8_t buf[DION__VERBS_ADDR_BYTES];
    dion__verbs_addr_pack(&a, buf);
    CHECK(buf[4] == 0x56 && buf[5] == 0x34 && buf[6] == 0x12 && buf[8] == 0xef && buf[12] == 0x02 &&
              buf[13] == 0x01 && buf[14] == 2 && buf[15] == 5,
          "address blob layout");
}

/* ---- work requests ---- */

static void test_wrs(void)
{
    dion__verbs_wr_t w;
    dion__verbs_wr_write(&w, 42, 0x1000, 0x11, 4096, 0x2000, 0x22, IBV_SEND_SIGNALED);
    CHECK(w.wr.opcode == IBV_WR_RDMA_WRITE && w.wr.wr_id == 42 && w.wr.send_flags == IBV_SEND_SIGNALED,
          "write");
    CHECK(w.wr.wr.rdma.remote_addr == 0x2000 && w.wr.wr.rdma.rkey == 0x22, "write remote");
    CHECK(w.wr.num_sge == 1 && w.wr.sg_list == &w.sge && w.sge.addr == 0x1000 && w.sge.length == 4096 &&
              w.sge.lkey == 0x11 && w.wr.next == NULL,
          "write sge");
    dion__verbs_wr_write(&w, 1, 0x1000, 0x11, 0, 0x2000, 0x22, 0);
    CHECK(w.wr.num_sge == 0, "zero-byte write carries no sge");
    dion__verbs_wr_read(&w, 7, 0x3000, 0x33, 100, 0x4000, 0x44, 0);
    CHECK(w.wr.opcode == IBV_WR_RDMA_READ && w.wr.wr.rdma.remote_addr == 0x4000 &&
              w.wr.wr.rdma.rkey == 0x44 && w.sge.addr == 0x3000 && w.sge.length == 100 &&
              w.sge.lkey == 0x33 && w.wr.send_flags == 0,
          "read");
    dion__verbs_wr_atomic(&w, 8, DION__VERBS_FADD, 0x5000, 0x55, 0x6000, 0x66, 5, 99, IBV_SEND_SIGNALED);
    CHECK(w.wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && w.wr.wr.atomic.remote_addr == 0x6000 &&
              w.wr.wr.atomic.rkey == 0x66 && w.wr.wr.atomic.compare_add == 5 && w.wr.wr.atomic.swap == 0,
          "fetch-add");
    CHECK(w.sge.length == 8 && w.sge.addr == 0x5000 && w.sge.lkey == 0x55 && w.wr.num_sge == 1, "atomic sge");
    dion__verbs_wr_atomic(&w, 9, DION__VERBS_CSWAP, 0x5000, 0x55, 0x6000, 0x66, 5, 99, 0);
    CHECK(w.wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP && w.wr.wr.atomic.compare_add == 99 &&
              w.wr.wr.atomic.swap == 5,
          "compare-swap: compare_add %llu swap %llu", (unsigned long long)w.wr.wr.atomic.compare_add,
          (unsigned long long)w.wr.wr.atomic.swap);
    dion__verbs_wr_set(&w, 10, 0x0123456789abcdefull, 0x7000, 0x77, IBV_SEND_FENCE);
    CHECK(w.wr.opcode == IBV_WR_RDMA_WRITE && w.wr.send_flags == (IBV_SEND_FENCE | IBV_SEND_INLINE) &&
              w.sge.length == 8 && w.sge.addr == (uintptr_t)&w.inline_value &&
              w.inline_value == 0x0123456789abcdefull && w.wr.wr.rdma.remote_addr == 0x7000 &&
              w.wr.wr.rdma.rkey == 0x77,
          "SET signal is an inline 8-byte WRITE");
    /* Fences: only an ordered WRITE, SEND or ATOMIC behind an outstanding READ/ATOMIC gets one. */
    enum ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD,
                                IBV_WR_ATOMIC_CMP_AND_SWP};
    for (int o = 0; o < 5; o++)
        for (unsigned ord = 0; ord < 2; ord++)
            for (unsigned out = 0; out < 3; out++) {
                unsigned want = ord && out && ops[o] != IBV_WR_RDMA_READ ? IBV_SEND_FENCE : 0;
                unsigned got = dion__verbs_fence_flag(ops[o], ord ? DION__VERBS_ORDERED : 0, out);
                CHECK(got == want, "fence for opcode %d ordered %u outstanding %u: got 0x%x", ops[o], ord,
                      out, got);
            }
}

/* ---- completion sentences ---- */

static void test_wc(void)
{
    char buf[1024], prev[64][400];
    int n = 0;
    for (int s = IBV_WC_SUCCESS; s <= IBV_WC_TM_RNDV_INCOMPLETE + 1; s++) {
        dion_status_t st = dion__verbs_wc_describe((enum ibv_wc_status)s, 0x51, "RDMA WRITE (put)", 5, 2,
                                                   0x1a2b3, 0xc0ffe, buf, sizeof buf);
        CHECK(strstr(buf, "rank 5") && strstr(buf, "QP 0x1a2b3") && strstr(buf, "peer QP 0xc0ffe") &&
                  strstr(buf, "context 2") && strstr(buf, "RDMA WRITE (put)"),
              "status %d: sentence lacks op, peer or QP numbers: %s", s, buf);
        if (s == IBV_WC_SUCCESS) {
            CHECK(st == DION_SUCCESS, "success status");
            continue;
        }
        CHECK(st != DION_SUCCESS, "status %d maps to success", s);
        CHECK(strstr(buf, "failed") != NULL, "status %d: %s", s, buf);
        if (s <= IBV_WC_TM_RNDV_INCOMPLETE) {
            const char *name = dion__verbs_wc_status_name((enum ibv_wc_status)s);
            CHECK(strncmp(name, "IBV_WC_", 7) == 0 && strstr(buf, name), "status %d: name %s missing: %s", s,
                  name, buf);
            CHECK(strstr(buf, "vendor error 0x51"), "status %d: no vendor error: %s", s, buf);
            /* Each status has its own meaning, not a shared catch-all. */
            const char *colon = strstr(buf, "failed: ");
            snprintf(prev[n], sizeof prev[n], "%.60s", colon ? colon : buf);
            for (int k = 0; k < n; k++)
                CHECK(strcmp(prev[k], prev[n]), "statuses share a sentence: %s", prev[n]);
            n++;
        } else {
            CHECK(strstr(buf, "does not know"), "unknown status: %s", buf);
        }
    }
    struct {
        enum ibv_wc_status s;
        dion_status_t want;
        const char *words;
    } m[] = {
        {IBV_WC_REM_ACCESS_ERR, DION_ERR_REMOTE_ACCESS, "remote access error"},
        {IBV_WC_RETRY_EXC_ERR, DION_ERR_PEER_FAILED, "DION_IB_RETRY_CNT"},
        {IBV_WC_RNR_RETRY_EXC_ERR, DION_ERR_NETWORK, "receiver-not-ready"},
        {IBV_WC_LOC_PROT_ERR, DION_ERR_INVALID_ARG, "local protection"},
        {IBV_WC_WR_FLUSH_ERR, DION_ERR_NETWORK, "earlier operation"},
        {IBV_WC_REM_INV_REQ_ERR, DION_ERR_REMOTE_ACCESS, "aligned"},
        {IBV_WC_RESP_TIMEOUT_ERR, DION_ERR_PEER_FAILED, "response timeout"},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        dion_status_t st = dion__verbs_wc_describe(m[i].s, 0, "op", 1, 0, 1, 2, buf, sizeof buf);
        CHECK(st == m[i].want && strstr(buf, m[i].words), "%s -> %s: %s", dion__verbs_wc_status_name(m[i].s),
              dion_status_string(st), buf);
    }
}

/* ---- asynchronous events ---- */

static void test_async(void)
{
    char buf[512];
    for (int t = IBV_EVENT_CQ_ERR; t <= IBV_EVENT_WQ_FATAL; t++) {
        int fatal = t == IBV_EVENT_CQ_ERR || t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
                    t == IBV_EVENT_QP_ACCESS_ERR || t == IBV_EVENT_PATH_MIG_ERR ||
                    t == IBV_EVENT_DEVICE_FATAL || t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_SRQ_ERR ||
                    t == IBV_EVENT_WQ_FATAL;
        int qp = t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR ||
                 t == IBV_EVENT_PATH_MIG_ERR;
        dion_status_t s = dion__verbs_async_describe((enum ibv_event_type)t, "mlx5_1", 2, qp ? 6 : -1,
                                                     qp ? 0xabc : 0, buf, sizeof buf);
        CHECK((s != DION_SUCCESS) == fatal, "event %d: status %s (%s)", t, dion_status_string(s), buf);
        CHECK(strstr(buf, "mlx5_1") != NULL, "event %d: no device: %s", t, buf);
        if (fatal && qp) CHECK(strstr(buf, "QP 0xabc to rank 6"), "event %d: no QP/peer: %s", t, buf);
        if (fatal && !qp) CHECK(strstr(buf, "port 2"), "event %d: no port: %s", t, buf);
    }
    dion__verbs_async_describe(IBV_EVENT_PORT_ERR, "mlx5_1", 1, -1, 0, buf, sizeof buf);
    CHECK(strstr(buf, "port went down") && strstr(buf, "ibstat"), "port error: %s", buf);
}

/* ---- registration order ---- */

typedef struct {
    int fd_ok, dmabuf_ok, peermem_ok, have_dmabuf;
    int calls_fd, calls_dmabuf, calls_reg, closed;
    uint64_t dmabuf_off, dmabuf_iova;
    void *reg_addr;
    struct ibv_mr mr;
} fake_reg_t;

static int f_fd(void *arg, uint64_t addr, size_t len, int *fd, uint64_t *off, char *why, size_t cap)
{
    fake_reg_t *f = arg;
    f->calls_fd++;
    if (!f->fd_ok) {
        snprintf(why, cap, "cuMemGetHandleForAddressRange failed: fake says no");
        return -1;
    }
    *fd = 77;
    *off = addr & 4095;
    return 0;
}
static void f_close(void *arg, int fd)
{
    fake_reg_t *f = arg;
    if (fd == 77) f->closed++;
}
static struct ibv_mr *f_dmabuf(void *arg, struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova, int fd,
                               int access)
{
    fake_reg_t *f = arg;
    f->calls_dmabuf++;
    f->dmabuf_off = off, f->dmabuf_iova = iova;
    if (!f->dmabuf_ok || fd != 77 || access != DION__VERBS_MR_ACCESS) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return &f->mr;
}
static struct ibv_mr *f_reg(void *arg, struct ibv_pd *pd, void *addr, size_t len, int access)
{
    fake_reg_t *f = arg;
    f->calls_reg++;
    f->reg_addr = addr;
    if (!f->peermem_ok || access != DION__VERBS_MR_ACCESS) {
        errno = EFAULT;
        return NULL;
    }
    return &f->mr;
}

static void test_reg(void)
{
    void *addr = (void *)(uintptr_t)0x7f0000001234ull;
    for (int c = 0; c < 16; c++) {
        fake_reg_t f = {.fd_ok = c & 1,
                        .dmabuf_ok = (c >> 1) & 1,
                        .peermem_ok = (c >> 2) & 1,
                        .have_dmabuf = (c >> 3) & 1};
        dion__verbs_reg_ops_t ops = {&f, f_fd, f_close, f.have_dmabuf ? f_dmabuf : NULL, f_reg};
        struct ibv_mr *mr = NULL;
        int path = 0;
        dion_status_t s = dion__verbs_reg_with(&ops, NULL, addr, 1000, DION__VERBS_MEM_GPU, &mr, &path);
        int dmabuf_works = f.have_dmabuf && f.fd_ok && f.dmabuf_ok;
        if (dmabuf_works) {
            CHECK(s == DION_SUCCESS && path == DION__VERBS_REG_DMABUF && mr == &f.mr && f.calls_reg == 0,
                  "case %d: dmabuf route not taken first", c);
            CHECK(f.dmabuf_off == 0x234 && f.dmabuf_iova == (uintptr_t)addr, "case %d: dmabuf offset/iova",
                  c);
        } else if (f.peermem_ok) {
            CHECK(s == DION_SUCCESS && path == DION__VERBS_REG_PEERMEM && mr == &f.mr && f.calls_reg == 1 &&
                      f.reg_addr == addr,
                  "case %d: peermem fallback not taken", c);
        } else {
            const char *e = dion_last_error();
            CHECK(s == DION_ERR_UNSUPPORTED && mr == NULL, "case %d: both failing gave %s", c,
                  dion_status_string(s));
            CHECK(strstr(e, "dmabuf route") && strstr(e, "nvidia-peermem route") &&
                      strstr(e, "nvidia_peermem") && strstr(e, "on_host=1") && strstr(e, strerror(EFAULT)),
                  "case %d: sentence does not name both routes: %s", c, e);
            if (!f.have_dmabuf) CHECK(strstr(e, "ibv_reg_dmabuf_mr"), "case %d: %s", c, e);
            if (f.have_dmabuf && !f.fd_ok) CHECK(strstr(e, "fake says no"), "case %d: %s", c, e);
            if (f.have_dmabuf && f.fd_ok) CHECK(strstr(e, strerror(EOPNOTSUPP)), "case %d: %s", c, e);
        }
        CHECK(f.calls_fd == (f.have_dmabuf ? 1 : 0), "case %d: dmabuf fd asked %d times", c, f.calls_fd);
        CHECK(f.closed == (f.have_dmabuf && f.fd_ok ? 1 : 0), "case %d: dmabuf fd closed %d times", c,
              f.closed);
    }
    /* Host memory: ibv_reg_mr only; a failure names the locked-memory limit. */
    fake_reg_t f = {.peermem_ok = 1, .have_dmabuf = 1, .fd_ok = 1, .dmabuf_ok = 1};
    dion__verbs_reg_ops_t ops = {&f, f_fd, f_close, f_dmabuf, f_reg};
    struct ibv_mr *mr;
    int path;
    CHECK(dion__verbs_reg_with(&ops, NULL, addr, 64, DION__VERBS_MEM_HOST, &mr, &path) == DION_SUCCESS &&
              path == DION__VERBS_REG_HOST && f.calls_fd == 0 && f.calls_dmabuf == 0,
          "host registration");
    f.peermem_ok = 0;
    CHECK(dion__verbs_reg_with(&ops, NULL, addr, 64, DION__VERBS_MEM_HOST, &mr, &path) == DION_ERR_NETWORK,
          "host failure");
}

/* ---- settings ---- */

static void test_cfg(void)
{
    dion__verbs_cfg_t c;
    CHECK(dion__verbs_cfg_read(&c) == DION_SUCCESS && c.port == 0 && c.gid_index == -1 &&
              c.qp.timeout == 18 && c.qp.retry_cnt == 7 && c.hca[0] == 0 && c.sq_depth == 256,
          "defaults: %s", dion_last_error());
    setenv("DION_IB_HCA", "mlx5_3:2", 1);
    setenv("DION_IB_GID_INDEX", "5", 1);
    CHECK(dion__verbs_cfg_read(&c) == DION_SUCCESS && !strcmp(c.hca, "mlx5_3") && c.port == 2 &&
              c.qp.port == 2 && c.gid_index == 5 && c.qp.gid_index == 5,
          "DION_IB_HCA with port: %s", dion_last_error());
    setenv("DION_IB_PORT", "1", 1);
    CHECK(dion__verbs_cfg_read(&c) == DION_ERR_INVALID_ARG && strstr(dion_last_error(), "DION_IB_PORT"),
          "conflicting ports: %s", dion_last_error());
    unsetenv("DION_IB_PORT");
    setenv("DION_IB_HCA", "mlx5_0:x", 1);
    CHECK(dion__verbs_cfg_read(&c) == DION_ERR_INVALID_ARG && strstr(dion_last_error(), "mlx5_0:x"),
          "bad port suffix: %s", dion_last_error());
    unsetenv("DION_IB_HCA");
    unsetenv("DION_IB_GID_INDEX");
    setenv("DION_IB_TIMEOUT", "40", 1);
    CHECK(dion__verbs_cfg_read(&c) == DION_ERR_INVALID_ARG && strstr(dion_last_error(), "DION_IB_TIMEOUT"),
          "timeout out of range: %s", dion_last_error());
    unsetenv("DION_IB_TIMEOUT");
    setenv("DION_IB_RETRY_CNT", "8", 1);
    CHECK(dion__verbs_cfg_read(&c) == DION_ERR_INVALID_ARG && strstr(dion_last_error(), "DION_IB_RETRY_CNT"),
          "retry out of range: %s", dion_last_error());
    unsetenv("DION_IB_RETRY_CNT");
}

/* ---- loading ---- */

static void test_load(void)
{
    const char *bogus = "libibverbs-dion-test-absent.so.1";
    dion__ibv_t t;
    CHECK(dion__ibv_load(bogus, &t) == DION_ERR_UNSUPPORTED && t.handle == NULL, "bogus library loaded");
    const char *e = dion_last_error();
    CHECK(strstr(e, bogus) && strstr(e, "ibverbs-providers") && strstr(e, "rdma-core") &&
              strstr(e, "libibverbs1"),
          "sentence must name the library and the packages: %s", e);
    dion__verbs_t *v = (dion__verbs_t *)1;
    dion__verbs_open_args_t a = {.nctx = 1, .npeers = 2, .libname = bogus};
    CHECK(dion__verbs_open(&a, &v) == DION_ERR_UNSUPPORTED && v == NULL && strstr(dion_last_error(), bogus),
          "open with a missing library: %s", dion_last_error());
    dion__verbs_probe_t p;
    dion__verbs_probe(bogus, &p);
    CHECK(!p.lib_ok && !p.dev_ok && strstr(p.why, bogus), "probe with a missing library: %s", p.why);
    /* No GPU here: the real dmabuf route says why it cannot give an fd (then peermem is tried). */
    int fd = -1;
    uint64_t off = 0;
    char why[256] = "";
    if (dion__cuda_device_count() == 0)
        CHECK(dion__verbs_dmabuf_fd(NULL, 0x10000, 4096, &fd, &off, why, sizeof why) == -1 && fd == -1 &&
                  strstr(why, "CUDA"),
              "dmabuf fd without a GPU: %s", why);
    /* A library that exists but is not libibverbs: names the missing entry. */
    CHECK(dion__ibv_load("libc.so.6", &t) == DION_ERR_UNSUPPORTED && strstr(dion_last_error(), "lacks ibv_"),
          "libc accepted as libibverbs: %s", dion_last_error());
}

/* ---- device and port choice (verbs_dev.c), over the fake library's devices ---- */

static struct ibv_device **(*fk_list)(int *);
static struct ibv_context *(*fk_open)(struct ibv_device *);
static int (*fk_qport)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
static const char *fk_refuse; /* open_cb refuses this device, with a note */

static struct ibv_context *open_cb(void *arg, struct ibv_device *dev, const char *name, char *seen,
                                   size_t cap)
{
    (void)arg;
    if (fk_refuse && !strcmp(name, fk_refuse)) {
        dion__verbs_appendf(seen, cap, "%s refused by the test; ", name);
        return NULL;
    }
    return fk_open(dev);
}
static int qport_cb(void *arg, struct ibv_context *c, uint8_t port, struct ibv_port_attr *pa)
{
    (void)arg;
    return dion__verbs_port_query(fk_qport, c, port, pa);
}
static struct ibv_device **list_fail(int *n)
{
    *n = 0;
    errno = ENOSYS;
    return NULL;
}
static struct ibv_device *empty_list[1];
static struct ibv_device **list_empty(int *n)
{
    *n = 0;
    return empty_list;
}

static void test_dev_choose(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlopen %s: %s", lib, dlerror());
    if (!h) return;
    fake_ibv_control_fn ctlf = (fake_ibv_control_fn)dlsym(h, "fake_ibv_control");
    fk_list = (struct ibv_device * *(*)(int *)) dlsym(h, "ibv_get_device_list");
    fk_open = (struct ibv_context * (*)(struct ibv_device *)) dlsym(h, "ibv_open_device");
    fk_qport =
        (int (*)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *))dlsym(h, "ibv_query_port");
    dion__verbs_dev_src_t src = {
        "",
        0,
        0,
        0,
        fk_list,
        (void (*)(struct ibv_device **))dlsym(h, "ibv_free_device_list"),
        (const char *(*)(struct ibv_device *))dlsym(h, "ibv_get_device_name"),
        (int (*)(struct ibv_context *, struct ibv_device_attr *))dlsym(h, "ibv_query_device"),
        (int (*)(struct ibv_context *))dlsym(h, "ibv_close_device"),
        open_cb,
        qport_cb,
        NULL};
    CHECK(ctlf && fk_list && fk_open && fk_qport && src.free_device_list && src.get_device_name &&
              src.query_device && src.close_device,
          "fake library lacks an entry");
    if (!ctlf || !fk_list || !fk_open || !fk_qport) {
        dlclose(h);
        return;
    }
    fake_ibv_ctl_t *ctl = ctlf();
    int live = ctl->live_ctxs;
    dion__verbs_dev_pick_t pk;
    /* any device: fake_down's only port is DOWN, fake_0's port 1 DOWN, port 2 ACTIVE */
    dion__verbs_dev_result_t r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_OK && pk.ctx && pk.port == 2 && !strcmp(pk.name, "fake_0") &&
              pk.pattr.state == IBV_PORT_ACTIVE && pk.dattr.phys_port_cnt == 2 &&
              !strcmp(pk.seen, "fake_down port 1 DOWN; fake_0 port 1 DOWN; ") &&
              !strcmp(pk.names, "fake_down fake_0"),
          "any: result %d port %u name %s seen '%s' names '%s'", r, pk.port, pk.name, pk.seen, pk.names);
    CHECK(ctl->live_ctxs == live + 1, "only the chosen context stays open: %d -> %d", live, ctl->live_ctxs);
    if (pk.ctx) src.close_device(pk.ctx);
    /* no ACTIVE port: each port's state by name, or (gdaki's wording) by number; nothing left open */
    ctl->port2_state = IBV_PORT_INIT;
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NO_PORT && !pk.ctx &&
              strstr(pk.seen, "fake_0 port 2 INIT (no subnet manager?); "),
          "INIT by name: %d '%s'", r, pk.seen);
    src.state_numbers = 1;
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NO_PORT && strstr(pk.seen, "fake_0 port 2 not ACTIVE (state 2); ") &&
              strstr(pk.seen, "fake_down port 1 not ACTIVE (state 1); "),
          "INIT by number: %d '%s'", r, pk.seen);
    src.seen_cap = 40; /* the caller's sentence takes this much */
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NO_PORT && strlen(pk.seen) < 40, "seen_cap 40: %zu '%s'", strlen(pk.seen),
          pk.seen);
    src.seen_cap = 0;
    src.state_numbers = 0;
    ctl->port2_state = IBV_PORT_ACTIVE;
    CHECK(ctl->live_ctxs == live, "failed choices leak contexts: %d -> %d", live, ctl->live_ctxs);
    /* DION_IB_HCA: an unknown name lists the devices; a known one is the only one tried */
    src.hca = "fake_9";
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NO_HCA && !strcmp(pk.names, "fake_down fake_0") && !pk.seen[0],
          "unknown HCA: %d names '%s' seen '%s'", r, pk.names, pk.seen);
    src.hca = "fake_0";
    src.port = 1; /* DION_IB_PORT: that port alone */
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NO_PORT && !strcmp(pk.seen, "fake_0 port 1 DOWN; "), "port 1: %d '%s'", r,
          pk.seen);
    src.port = 3;
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NO_PORT &&
              !strcmp(pk.seen, "fake_0 has 2 port(s), not port 3 (DION_IB_PORT); "),
          "port 3: %d '%s'", r, pk.seen);
    src.port = 2;
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_OK && pk.port == 2, "fake_0 port 2: %d %u", r, pk.port);
    if (pk.ctx) src.close_device(pk.ctx);
    src.hca = "";
    src.port = 0;
    /* the caller's open refuses a device: its note is kept, the next device is tried */
    fk_refuse = "fake_down";
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_OK && !strncmp(pk.seen, "fake_down refused by the test; ", 31),
          "refused open: %d '%s'", r, pk.seen);
    if (pk.ctx) src.close_device(pk.ctx);
    fk_refuse = "fake_0";
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NO_PORT && strstr(pk.seen, "fake_0 refused by the test; "),
          "both refused: %d '%s'", r, pk.seen);
    fk_refuse = NULL;
    /* the device list fails (errno kept) or is empty */
    src.get_device_list = list_fail;
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_LIST_FAILED && pk.err == ENOSYS, "list failed: %d errno %d", r, pk.err);
    src.get_device_list = list_empty;
    r = dion__verbs_dev_choose(&src, &pk);
    CHECK(r == DION__VERBS_DEV_NONE, "empty list: %d", r);
    CHECK(ctl->live_ctxs == live, "contexts leaked: %d -> %d", live, ctl->live_ctxs);
    dlclose(h);
}

int main(int argc, char **argv)
{
    test_attrs();
    test_gid();
    test_gid_read();
    test_vcm_msg();
    test_blobs();
    test_wrs();
    test_wc();
    test_async();
    test_reg();
    test_cfg();
    test_load();
    if (argc > 1) {
        test_dev_choose(argv[1]);
        test_engine(argv[1], &failures);
        test_engine_ops(argv[1], &failures);
        test_engine_ondemand(argv[1], &failures);
    } else {
        fprintf(stderr, "FAIL: the fake libibverbs path was not given\n");
        failures++;
    }
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("test_verbs: all checks passed\n");
    return failures ? 1 : 0;
}
