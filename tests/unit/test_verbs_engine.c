/* The proxy/verbs engine end to end over the fake libibverbs (fake_ibverbs.c): device and port choice, GID,
 * QP transitions, puts with random sizes and offsets, put_signal (ADD and SET), gets, atomics, fences, queue
 * room, error completions and their sentences, and teardown. The fake executes each WR when it is posted, so
 * this checks what the engine asks of the NIC, not the NIC's ordering. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_ibverbs.h"
#include "transports/proxy/engine_verbs.h"

static int *fails;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            (*fails)++;                                                                                      \
        }                                                                                                    \
    } while (0)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Polls ctx until n completions arrived (bounded: the fake completes at post time). */
static int drain(dion__verbs_t *v, int ctx, dion__verbs_cqe_t *out, int n)
{
    int got = 0;
    for (int tries = 0; tries < 1000 && got < n; tries++) {
        int k = dion__verbs_poll(v, ctx, out + got, n - got);
        if (k < 0) return got;
        got += k;
    }
    dion__verbs_cqe_t extra;
    CHECK(dion__verbs_poll(v, ctx, &extra, 1) == 0, "more completions than the %d expected", n);
    return got;
}

static dion__verbs_t *open_connected(const char *lib, int nctx)
{
    dion__verbs_t *v = NULL;
    dion__verbs_open_args_t a = {.nctx = nctx, .npeers = 2, .my_rank = 0, .libname = lib};
    if (dion__verbs_open(&a, &v) != DION_SUCCESS) {
        CHECK(0, "open: %s", dion_last_error());
        return NULL;
    }
    /* Loopback: (ctx, peer 0) and (ctx, peer 1) are each other's remote end. */
    for (int c = 0; c < nctx; c++) {
        uint8_t b0[DION__VERBS_ADDR_BYTES], b1[DION__VERBS_ADDR_BYTES];
        CHECK(dion__verbs_addr_get(v, c, 0, b0) == DION_SUCCESS &&
                  dion__verbs_addr_get(v, c, 1, b1) == DION_SUCCESS,
              "addr_get: %s", dion_last_error());
        CHECK(dion__verbs_connect(v, c, 0, b1, sizeof b1) == DION_SUCCESS &&
                  dion__verbs_connect(v, c, 1, b0, sizeof b0) == DION_SUCCESS,
              "connect: %s", dion_last_error());
    }
    return v;
}

static void test_roce(const char *lib, fake_ibv_ctl_t *ctl)
{
    ctl->nmodify = 0;
    dion__verbs_t *v = open_connected(lib, 2);
    if (!v) return;
    const char *d = dion__verbs_describe(v);
    char ip[32]; /* the fake's IPv4-mapped GIDs carry the process id */
    unsigned pid = (unsigned)getpid() & 0xffffffu;
    snprintf(ip, sizeof ip, "10.%u.%u.%u", pid >> 16, (pid >> 8) & 255u, pid & 255u);
    CHECK(strstr(d, "fake_0 port 2") && strstr(d, "RoCE") && strstr(d, "GID 3") && strstr(d, ip),
          "the RoCE v2 IPv4-mapped GID of the only ACTIVE port (%s): %s", ip, d);
    CHECK(ctl->nmodify == 12, "4 QPs x 3 transitions, got %d modify calls", ctl->nmodify);
    /* Each QP goes INIT, RTR, RTS, in that order. */
    for (int i = 0; i < ctl->nmodify; i++) {
        struct ibv_qp_attr *a = &ctl->modify[i].attr;
        int before = 0;
        for (int k = 0; k < i; k++) before += ctl->modify[k].qpn == ctl->modify[i].qpn;
        CHECK(a->qp_state == (enum ibv_qp_state)(IBV_QPS_INIT + before), "QP 0x%x transition %d to state %d",
              ctl->modify[i].qpn, before, a->qp_state);
        if (a->qp_state == IBV_QPS_RTR)
            CHECK(a->ah_attr.is_global && a->ah_attr.grh.sgid_index == 3 &&
                      a->ah_attr.grh.dgid.raw[10] == 0xff && a->ah_attr.grh.dgid.raw[12] == 10 &&
                      a->path_mtu == IBV_MTU_4096,
                  "RTR %d: GRH towards the peer's RoCE v2 GID", i);
        if (a->qp_state == IBV_QPS_RTS)
            CHECK(a->max_rd_atomic == 8, "RTS initiator depth %d", a->max_rd_atomic);
    }

    enum { N = 1 << 16 };
    uint8_t *src = aligned_alloc(64, N), *dst = aligned_alloc(64, N);
    uint64_t *sig = aligned_alloc(64, 64), *res = aligned_alloc(64, 64);
    for (int i = 0; i < N; i++) src[i] = (uint8_t)rnd(), dst[i] = 0;
    memset(sig, 0, 64);
    memset(res, 0, 64);
    dion__verbs_mr_t *msrc, *mdst, *msig, *mres;
    CHECK(dion__verbs_mem_reg(v, src, N, DION__VERBS_MEM_HOST, &msrc) == DION_SUCCESS &&
              msrc->path == DION__VERBS_REG_HOST,
          "host registration: %s", dion_last_error());
    /* "GPU" memory here is host memory: no CUDA dmabuf, the fake's ibv_reg_mr stands for nvidia-peermem. */
    CHECK(dion__verbs_mem_reg(v, dst, N, DION__VERBS_MEM_GPU, &mdst) == DION_SUCCESS &&
              mdst->path == DION__VERBS_REG_PEERMEM,
          "GPU registration falls back to peermem: %s", dion_last_error());
    CHECK(dion__verbs_mem_reg(v, sig, 64, DION__VERBS_MEM_HOST, &msig) == DION_SUCCESS &&
              dion__verbs_mem_reg(v, res, 64, DION__VERBS_MEM_HOST, &mres) == DION_SUCCESS,
          "registration: %s", dion_last_error());
    uint8_t kb[DION__VERBS_RKEY_BYTES];
    dion__verbs_rkey_t kdst, ksig;
    dion__verbs_rkey_pack(mdst, kb);
    dion__verbs_rkey_unpack(kb, sizeof kb, &kdst);
    dion__verbs_rkey_pack(msig, kb);
    dion__verbs_rkey_unpack(kb, sizeof kb, &ksig);
    CHECK(kdst.addr == (uintptr_t)dst && kdst.rkey == mdst->rkey && kdst.len == N, "rkey blob of the window");

    /* Puts of random sizes and offsets; each cookie once, in order. */
    dion__verbs_cqe_t cq[64];
    for (int round = 0; round < 20; round++) {
        int n = 1 + (int)(rnd() % 8);
        uint32_t so[8], doff[8], len[8];
        for (int k = 0; k < n; k++) {
            len[k] = 1 + (uint32_t)(rnd() % 4096);
            so[k] = (uint32_t)(rnd() % (N - len[k]));
            doff[k] = (uint32_t)(rnd() % (N - len[k]));
            dion__verbs_local_t l = {(uintptr_t)src + so[k], msrc->lkey};
            CHECK(dion__verbs_post_put(v, 0, 1, l, len[k], kdst.addr + doff[k], kdst.rkey, 0,
                                       (uint64_t)round * 100 + (uint64_t)k) == DION_SUCCESS,
                  "put: %s", dion_last_error());
        }
        int got = drain(v, 0, cq, n);
        CHECK(got == n, "round %d: %d of %d completions", round, got, n);
        for (int k = 0; k < got; k++)
            CHECK(cq[k].cookie == (uint64_t)round * 100 + (uint64_t)k && cq[k].status == DION_SUCCESS &&
                      cq[k].peer == 1,
                  "round %d completion %d: cookie %llu status %d", round, k, (unsigned long long)cq[k].cookie,
                  cq[k].status);
        for (int k = 0; k < n; k++) /* later puts may overlap earlier ones: check the last only in full */
            if (k == n - 1)
                CHECK(!memcmp(dst + doff[k], src + so[k], len[k]), "round %d put %d data", round, k);
    }

    /* put_signal ADD: WRITE then fetch-add, one completion; the signal WR carries no fence. */
    long w0 = ctl->wr_count;
    dion__verbs_local_t l = {(uintptr_t)src, msrc->lkey};
    CHECK(dion__verbs_post_put_signal(v, 0, 1, l, 512, kdst.addr + 1024, kdst.rkey, ksig.addr, ksig.rkey,
                                      DION__VERBS_SIG_ADD, 5, 0, 900) == DION_SUCCESS,
          "put_signal ADD: %s", dion_last_error());
    CHECK(ctl->wr_count == w0 + 2 && ctl->wr[w0].opcode == IBV_WR_RDMA_WRITE &&
              ctl->wr[w0 + 1].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD &&
              !(ctl->wr[w0 + 1].flags & IBV_SEND_FENCE) && ctl->wr[w0].qpn == ctl->wr[w0 + 1].qpn,
          "put_signal ADD posts WRITE then ATOMIC on one QP");
    CHECK(drain(v, 0, cq, 1) == 1 && cq[0].cookie == 900 && cq[0].status == DION_SUCCESS,
          "put_signal: one completion");
    CHECK(sig[0] == 5 && !memcmp(dst + 1024, src, 512), "put_signal ADD: signal %llu, data",
          (unsigned long long)sig[0]);
    /* put_signal SET: an inline 8-byte WRITE. */
    w0 = ctl->wr_count;
    CHECK(dion__verbs_post_put_signal(v, 0, 1, l, 64, kdst.addr, kdst.rkey, ksig.addr + 8, ksig.rkey,
                                      DION__VERBS_SIG_SET, 0xfeedfacecafebeefull, 0, 901) == DION_SUCCESS,
          "put_signal SET: %s", dion_last_error());
    CHECK(ctl->wr[w0 + 1].opcode == IBV_WR_RDMA_WRITE && (ctl->wr[w0 + 1].flags & IBV_SEND_INLINE) &&
              !(ctl->wr[w0 + 1].flags & IBV_SEND_FENCE),
          "SET signal flags 0x%x", ctl->wr[w0 + 1].flags);
    CHECK(drain(v, 0, cq, 1) == 1 && cq[0].cookie == 901 && sig[1] == 0xfeedfacecafebeefull, "SET value");

    /* A READ outstanding: the next ordered WRITE carries a fence, an unordered one does not; none after it
     * completed. */
    dion__verbs_local_t lres = {(uintptr_t)res, mres->lkey};
    w0 = ctl->wr_count;
    CHECK(dion__verbs_post_get(v, 0, 1, (dion__verbs_local_t){(uintptr_t)src + 8192, msrc->lkey}, 256,
                               kdst.addr + 1024, kdst.rkey, 0, 1000) == DION_SUCCESS,
          "get: %s", dion_last_error());
    dion__verbs_post_put(v, 0, 1, l, 8, kdst.addr, kdst.rkey, 0, 1001);
    dion__verbs_post_put(v, 0, 1, l, 8, kdst.addr, kdst.rkey, DION__VERBS_ORDERED, 1002);
    dion__verbs_post_put_signal(v, 0, 1, l, 0, 0, 0, ksig.addr + 16, ksig.rkey, DION__VERBS_SIG_SET, 3, 0,
                                1003);
    dion__verbs_post_put_signal(v, 0, 1, l, 0, 0, 0, ksig.addr + 32, ksig.rkey, DION__VERBS_SIG_ADD, 4, 0,
                                1004);
    CHECK(!(ctl->wr[w0 + 1].flags & IBV_SEND_FENCE) && (ctl->wr[w0 + 2].flags & IBV_SEND_FENCE) &&
              (ctl->wr[w0 + 3].flags & IBV_SEND_FENCE),
          "fences behind a READ: 0x%x 0x%x 0x%x", ctl->wr[w0 + 1].flags, ctl->wr[w0 + 2].flags,
          ctl->wr[w0 + 3].flags);
    CHECK(ctl->wr[w0 + 4].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && (ctl->wr[w0 + 4].flags & IBV_SEND_FENCE),
          "a lone ADD signal behind a READ is fenced: 0x%x", ctl->wr[w0 + 4].flags);
    CHECK(drain(v, 0, cq, 5) == 5 && cq[0].cookie == 1000 && cq[3].cookie == 1003 && cq[4].cookie == 1004,
          "get, puts and signals complete in order");
    CHECK(!memcmp(src + 8192, dst + 1024, 256) && sig[2] == 3 && sig[4] == 4, "get data and lone signals");
    w0 = ctl->wr_count;
    dion__verbs_post_put(v, 0, 1, l, 8, kdst.addr, kdst.rkey, DION__VERBS_ORDERED, 1005);
    dion__verbs_post_put_signal(v, 0, 1, l, 0, 0, 0, ksig.addr + 32, ksig.rkey, DION__VERBS_SIG_ADD, 1, 0,
                                1006);
    CHECK(!(ctl->wr[w0].flags & IBV_SEND_FENCE) && !(ctl->wr[w0 + 1].flags & IBV_SEND_FENCE),
          "no fence once the READ completed");
    drain(v, 0, cq, 2);

    /* Atomics with their old values. */
    sig[3] = 40;
    CHECK(dion__verbs_post_atomic(v, 1, 1, DION__VERBS_FADD, lres, ksig.addr + 24, ksig.rkey, 2, 0, 0,
                                  2000) == DION_SUCCESS,
          "fetch-add: %s", dion_last_error());
    CHECK(drain(v, 1, cq, 1) == 1 && res[0] == 40 && sig[3] == 42, "fetch-add old %llu new %llu",
          (unsigned long long)res[0], (unsigned long long)sig[3]);
    dion__verbs_post_atomic(v, 1, 1, DION__VERBS_CSWAP, lres, ksig.addr + 24, ksig.rkey, 7, 41, 0, 2001);
    CHECK(drain(v, 1, cq, 1) == 1 && res[0] == 42 && sig[3] == 42, "failed compare-swap");
    dion__verbs_post_atomic(v, 1, 1, DION__VERBS_CSWAP, lres, ksig.addr + 24, ksig.rkey, 7, 42, 0, 2002);
    CHECK(drain(v, 1, cq, 1) == 1 && res[0] == 42 && sig[3] == 7, "compare-swap");
    CHECK(dion__verbs_post_atomic(v, 1, 1, DION__VERBS_FADD, lres, ksig.addr + 4, ksig.rkey, 1, 0, 0, 2003) ==
              DION_ERR_INVALID_ARG,
          "unaligned atomic refused before posting");

    /* Room: DION_IB_QP_DEPTH=16 (set by main) bounds the WRs in flight per QP. */
    CHECK(dion__verbs_room(v, 1, 0) == 16, "room %d", dion__verbs_room(v, 1, 0));
    for (int k = 0; k < 16; k++)
        dion__verbs_post_put(v, 1, 0, l, 8, kdst.addr, kdst.rkey, 0, 3000 + (uint64_t)k);
    CHECK(dion__verbs_room(v, 1, 0) == 0, "room after 16 posts: %d", dion__verbs_room(v, 1, 0));
    CHECK(dion__verbs_post_put(v, 1, 0, l, 8, kdst.addr, kdst.rkey, 0, 3999) == DION_ERR_INTERNAL &&
              strstr(dion_last_error(), "no room"),
          "post without room: %s", dion_last_error());
    CHECK(drain(v, 1, cq, 16) == 16 && dion__verbs_room(v, 1, 0) == 16, "room back after polling");

    /* A bad rkey: remote access error naming the peer and both QP numbers; later posts refuse. */
    dion__verbs_post_put(v, 1, 0, l, 8, kdst.addr, 0xdead, 0, 4000);
    CHECK(drain(v, 1, cq, 1) == 1 && cq[0].cookie == 4000 && cq[0].status == DION_ERR_REMOTE_ACCESS,
          "bad rkey: status %d", cq[0].status);
    char qpn[32];
    snprintf(qpn, sizeof qpn, "QP 0x%x", ctl->wr[ctl->wr_count - 1].qpn);
    const char *e = dion__verbs_error(v);
    CHECK(strstr(e, "remote access error") && strstr(e, "rank 0") && strstr(e, qpn) &&
              strstr(e, "peer QP 0x") && strstr(e, "context 1"),
          "remote access sentence: %s", e);
    CHECK(dion__verbs_post_put(v, 1, 0, l, 8, kdst.addr, kdst.rkey, 0, 4001) == DION_ERR_NETWORK &&
              strstr(dion_last_error(), "failed earlier"),
          "post after failure: %s", dion_last_error());
    /* Asynchronous events: another port's error and benign events are not errors; a fatal QP event names the
     * QP and its peer and fails the QP; a port error of our port is an error. */
    uint8_t blob[DION__VERBS_ADDR_BYTES];
    dion__verbs_addr_t a11;
    dion__verbs_addr_get(v, 1, 1, blob);
    dion__verbs_addr_unpack(blob, sizeof blob, &a11);
    CHECK(dion__verbs_async_poll(v) == 0, "no events pending");
    ctl->async[0].type = IBV_EVENT_PORT_ERR, ctl->async[0].port = 1, ctl->async[0].qpn = 0;
    ctl->async[1].type = IBV_EVENT_LID_CHANGE, ctl->async[1].port = 2, ctl->async[1].qpn = 0;
    ctl->async_n = 2;
    CHECK(dion__verbs_async_poll(v) == 0 && ctl->async_acked == 2, "benign events: %d acked",
          ctl->async_acked);
    ctl->async[0].type = IBV_EVENT_QP_FATAL, ctl->async[0].port = 0, ctl->async[0].qpn = a11.qpn;
    ctl->async_n = 1;
    char qs[40];
    snprintf(qs, sizeof qs, "QP 0x%x to rank 1", a11.qpn);
    CHECK(dion__verbs_async_poll(v) == 1 && strstr(dion_last_error(), "QP fatal") &&
              strstr(dion_last_error(), qs),
          "QP fatal event: %s", dion_last_error());
    CHECK(dion__verbs_post_put(v, 1, 1, l, 8, kdst.addr, kdst.rkey, 0, 4500) == DION_ERR_NETWORK,
          "post on a QP an async event failed: %s", dion_last_error());
    ctl->async[0].type = IBV_EVENT_PORT_ERR, ctl->async[0].port = 2, ctl->async[0].qpn = 0;
    ctl->async_n = 1;
    CHECK(dion__verbs_async_poll(v) == 1 && ctl->async_acked == 4 &&
              strstr(dion_last_error(), "port 2: port went down"),
          "port error of our port: %s", dion_last_error());
    /* An injected retry-exceeded on the data half of a put_signal: one error completion for the cookie. */
    ctl->fail_at = ctl->wr_count;
    ctl->fail_status = IBV_WC_RETRY_EXC_ERR;
    dion__verbs_post_put_signal(v, 0, 1, l, 64, kdst.addr, kdst.rkey, ksig.addr, ksig.rkey,
                                DION__VERBS_SIG_ADD, 1, 0, 5000);
    CHECK(drain(v, 0, cq, 1) == 1 && cq[0].cookie == 5000 && cq[0].status == DION_ERR_PEER_FAILED,
          "retry exceeded: status %d", cq[0].status);
    CHECK(strstr(dion_last_error(), "retry counter exceeded") && strstr(dion_last_error(), "rank 1"),
          "retry sentence: %s", dion_last_error());
    ctl->fail_at = -1;

    dion__verbs_mem_dereg(v, msrc);
    dion__verbs_mem_dereg(v, mdst);
    dion__verbs_mem_dereg(v, msig);
    dion__verbs_mem_dereg(v, mres);
    dion__verbs_close(v);
    CHECK(ctl->live_qps == 0 && ctl->live_mrs == 0 && ctl->live_cqs == 0 && ctl->live_pds == 0 &&
              ctl->live_ctxs == 0,
          "teardown leaves qps %d mrs %d cqs %d pds %d contexts %d", ctl->live_qps, ctl->live_mrs,
          ctl->live_cqs, ctl->live_pds, ctl->live_ctxs);
    free(src), free(dst), free(sig), free(res);
}

static void test_choice(const char *lib, fake_ibv_ctl_t *ctl)
{
    dion__verbs_t *v = NULL;
    dion__verbs_open_args_t a = {.nctx = 1, .npeers = 2, .libname = lib};
    /* InfiniBand: by LID, no GRH. */
    ctl->link_layer = IBV_LINK_LAYER_INFINIBAND;
    ctl->nmodify = 0;
    v = open_connected(lib, 1);
    if (v) {
        CHECK(strstr(dion__verbs_describe(v), "InfiniBand") && strstr(dion__verbs_describe(v), "LID 0x2a"),
              "IB: %s", dion__verbs_describe(v));
        int rtr = 0;
        for (int i = 0; i < ctl->nmodify; i++)
            if (ctl->modify[i].attr.qp_state == IBV_QPS_RTR) {
                rtr++;
                CHECK(!ctl->modify[i].attr.ah_attr.is_global && ctl->modify[i].attr.ah_attr.dlid == 0x2a,
                      "IB RTR by LID");
            }
        CHECK(rtr == 2, "IB: %d RTR transitions", rtr);
        dion__verbs_close(v);
    }
    ctl->link_layer = IBV_LINK_LAYER_ETHERNET;
    /* No ACTIVE port anywhere: the sentence lists every port seen. */
    ctl->port2_state = IBV_PORT_DOWN;
    CHECK(dion__verbs_open(&a, &v) == DION_ERR_UNSUPPORTED &&
              strstr(dion_last_error(), "no ACTIVE RDMA port") &&
              strstr(dion_last_error(), "fake_0 port 2 DOWN") &&
              strstr(dion_last_error(), "fake_down port 1 DOWN"),
          "no active port: %s", dion_last_error());
    ctl->port2_state = IBV_PORT_ACTIVE;
    ctl->no_atomics = 1;
    CHECK(dion__verbs_open(&a, &v) == DION_ERR_UNSUPPORTED && strstr(dion_last_error(), "no RDMA atomics"),
          "device without atomics: %s", dion_last_error());
    ctl->no_atomics = 0;
    setenv("DION_IB_HCA", "nosuch", 1);
    CHECK(dion__verbs_open(&a, &v) == DION_ERR_INVALID_ARG &&
              strstr(dion_last_error(), "DION_IB_HCA=nosuch") &&
              strstr(dion_last_error(), "here are: fake_down fake_0"),
          "unknown HCA: %s", dion_last_error());
    setenv("DION_IB_HCA", "fake_down", 1);
    CHECK(dion__verbs_open(&a, &v) == DION_ERR_UNSUPPORTED &&
              strstr(dion_last_error(), "fake_down port 1 DOWN"),
          "HCA without active port: %s", dion_last_error());
    setenv("DION_IB_HCA", "fake_0:2", 1);
    setenv("DION_IB_GID_INDEX", "2", 1);
    CHECK(dion__verbs_open(&a, &v) == DION_SUCCESS && strstr(dion__verbs_describe(v), "GID 2 (RoCE v1"),
          "forced HCA, port and GID: %s", v ? dion__verbs_describe(v) : dion_last_error());
    dion__verbs_close(v);
    unsetenv("DION_IB_HCA");
    unsetenv("DION_IB_GID_INDEX");
    dion__verbs_probe_t p;
    dion__verbs_probe(lib, &p);
    CHECK(p.lib_ok && p.dev_ok && strstr(p.dev, "fake_0 port 2") && p.has_dmabuf_mr, "probe: %s %s", p.dev,
          p.why);
    CHECK(ctl->live_ctxs == 0 && ctl->live_pds == 0, "probe and failed opens leak: contexts %d pds %d",
          ctl->live_ctxs, ctl->live_pds);
}

void test_engine(const char *lib, int *failures)
{
    fails = failures;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    fake_ibv_control_fn f = NULL;
    if (h) *(void **)&f = dlsym(h, "fake_ibv_control");
    if (!f) {
        CHECK(0, "cannot load the fake libibverbs %s: %s", lib, dlerror());
        return;
    }
    setenv("DION_IB_QP_DEPTH", "16", 1);
    test_roce(lib, f());
    test_choice(lib, f());
    unsetenv("DION_IB_QP_DEPTH");
    dlclose(h);
}
