/* The verbs engine behind engine.h (engine_verbs_ops.c), as the proxy backend calls it, over the fake
 * libibverbs in loopback: two engine instances (ranks 0 and 1 of one process) connected through peer_address
 * / peer_connect. Every post is checked work request by work request in the fake's log (opcode, send flags,
 * SGE address, length and lkey, remote address and rkey, atomic operands), and so are the effects at the
 * target, completions (cookie, peer, fetched value, order), pending counts, BUSY on a full send queue,
 * refusals with nothing posted, and an error completion turned into a sentence and a failed QP. put_signal,
 * signal, fence and quiet are the proxy's compositions of these posts (proxy_ops.c): put then an ORDERED
 * atomic; FENCE and QUIET post nothing. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_ibverbs.h"
#include "transports/proxy/engine.h"
#include "transports/proxy/engine_verbs.h"
#include "transports/proxy/verbs_cm.h"

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

static const dion__engine_ops_t *E = &dion__engine_verbs;

/* Polls e until n completions came (the fake completes at post time, so one pass suffices; bounded). */
static int drain(dion__engine_t *e, dion__engine_cqe_t *out, int n)
{
    int got = 0;
    for (int i = 0; i < 100 && got < n; i++) {
        int k = E->poll(e, out + got, n - got);
        if (k < 0) break;
        got += k;
    }
    dion__engine_cqe_t extra;
    CHECK(E->poll(e, &extra, 1) == 0, "a completion beyond the %d expected", n);
    return got;
}

/* The WR logged at index i. */
#define WR(i) (ctl->wr[(i)])

static uint32_t lkey_of(dion__engine_mr_t *mr)
{
    return ((dion__verbs_mr_t *)(void *)mr)->lkey;
}

/* The fake libibverbs' control block, reset to a RoCE port 2 that is ACTIVE and no injected failure; NULL
 * (and a failure counted) when lib does not export it. *handle: lib's handle for dlclose (or NULL). */
static fake_ibv_ctl_t *fake_ctl_open(const char *lib, void **handle)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    *handle = h;
    fake_ibv_control_fn f = NULL;
    if (h) *(void **)&f = dlsym(h, "fake_ibv_control");
    if (!f) {
        CHECK(0, "cannot reach the fake's control block in %s", lib);
        return NULL;
    }
    fake_ibv_ctl_t *ctl = f();
    ctl->link_layer = IBV_LINK_LAYER_ETHERNET;
    ctl->port2_state = IBV_PORT_ACTIVE;
    ctl->fail_at = -1;
    return ctl;
}

void test_engine_ops(const char *lib, int *failures)
{
    fails = failures;
    void *h = NULL;
    fake_ibv_ctl_t *ctl = fake_ctl_open(lib, &h);
    if (!ctl) return;
    int qps0 = ctl->live_qps, mrs0 = ctl->live_mrs;
    setenv("DION_IB_LIBRARY", lib, 1);
    setenv("DION_IB_QP_DEPTH", "16", 1); /* the smallest send queue: BUSY after 16 posts */

    dion__engine_t *e0 = NULL, *e1 = NULL;
    char why[512] = "";
    dion__engine_open_args_t a0 = {.rank = 0, .nranks = 2, .cuda_device = -1}, a1 = a0;
    a1.rank = 1;
    CHECK(E->open(&a0, &e0, why, sizeof why) == DION_SUCCESS, "open rank 0: %s", why);
    CHECK(E->open(&a1, &e1, why, sizeof why) == DION_SUCCESS, "open rank 1: %s", why);
    if (!e0 || !e1) goto out;
    CHECK(E->peer_addr_bytes == DION__VERBS_ADDR_BYTES && E->address && E->connect,
          "verbs connects per peer, eagerly or on demand (peer_addr_bytes %u)", E->peer_addr_bytes);
    dion__engine_caps_t caps;
    E->query(e0, &caps);
    CHECK(!strcmp(caps.provider, "fake_0 port 2") && !strcmp(caps.order, "rc_order") &&
              caps.delivery_complete && !caps.manual_progress && !caps.cuda_mem && caps.max_ops >= 16,
          "caps: provider '%s' order '%s' delivery %d manual %d cuda %d max_ops %u", caps.provider,
          caps.order, caps.delivery_complete, caps.manual_progress, caps.cuda_mem, caps.max_ops);
    CHECK(!caps.connect_ondemand, "2 ranks with DION_IB_CONNECT=auto connect eagerly");

    /* connection: each side's blob for the other */
    uint8_t b01[DION__VERBS_ADDR_BYTES], b10[DION__VERBS_ADDR_BYTES];
    CHECK(E->peer_address(e0, 1, b01) == DION_SUCCESS && E->peer_address(e1, 0, b10) == DION_SUCCESS,
          "peer_address: %s", dion_last_error());
    CHECK(E->peer_connect(e0, 1, b10) == DION_SUCCESS && E->peer_connect(e1, 0, b01) == DION_SUCCESS,
          "peer_connect: %s", dion_last_error());
    dion__verbs_addr_t x01, x10;
    dion__verbs_addr_unpack(b01, sizeof b01, &x01);
    dion__verbs_addr_unpack(b10, sizeof b10, &x10);
    CHECK(x01.qpn != x10.qpn && x01.global && x01.link == IBV_LINK_LAYER_ETHERNET, "blobs: QP 0x%x and 0x%x",
          x01.qpn, x10.qpn);

    /* memory: rank 0's source, rank 1's window and signal table */
    static uint8_t src[4096], dst[4096];
    static uint64_t sig[64] __attribute__((aligned(64)));
    for (int i = 0; i < 4096; i++) src[i] = (uint8_t)(i * 7 + 1);
    dion__engine_mr_t *msrc = NULL, *mdst = NULL, *msig = NULL;
    dion__engine_rkey_t ksrc, kdst, ksig;
    CHECK(E->mem_reg(e0, src, sizeof src, DION__ENGINE_MEM_HOST, &msrc, &ksrc) == DION_SUCCESS &&
              E->mem_reg(e1, dst, sizeof dst, DION__ENGINE_MEM_HOST, &mdst, &kdst) == DION_SUCCESS &&
              E->mem_reg(e1, sig, sizeof sig, DION__ENGINE_MEM_HOST, &msig, &ksig) == DION_SUCCESS,
          "mem_reg: %s", dion_last_error());
    if (!msrc || !mdst || !msig) goto out;
    CHECK(kdst.addr == (uintptr_t)dst && kdst.len == sizeof dst && kdst.flags == DION__ENGINE_MEM_HOST &&
              kdst.engine_version == DION__ENGINE_VERSION,
          "rkey of the window: addr %#llx len %llu", (unsigned long long)kdst.addr,
          (unsigned long long)kdst.len);
    dion__engine_cqe_t cq[32];
    long w;

    /* put: one signaled RDMA WRITE from the source to the window + offset, no fence, not inline */
    w = ctl->wr_count;
    CHECK(E->put(e0, 1, msrc, src + 100, &kdst, 200, 333, 0, 0x11) == DION_SUCCESS, "put: %s",
          dion_last_error());
    CHECK(ctl->wr_count == w + 1 && WR(w).opcode == IBV_WR_RDMA_WRITE && WR(w).flags == IBV_SEND_SIGNALED &&
              WR(w).qpn == x01.qpn && WR(w).num_sge == 1 && WR(w).laddr == (uintptr_t)(src + 100) &&
              WR(w).len == 333 && WR(w).lkey == lkey_of(msrc) && WR(w).raddr == (uintptr_t)(dst + 200) &&
              WR(w).rkey == (uint32_t)kdst.key,
          "put WR: opcode %d flags %#x sge %#llx+%llu lkey %#x -> %#llx rkey %#x", WR(w).opcode, WR(w).flags,
          (unsigned long long)WR(w).laddr, (unsigned long long)WR(w).len, WR(w).lkey,
          (unsigned long long)WR(w).raddr, WR(w).rkey);
    CHECK(E->pending(e0, 1) == 1 && E->pending(e0, -1) == 1 && E->pending(e0, 0) == 0, "pending after a put");
    CHECK(drain(e0, cq, 1) == 1 && cq[0].cookie == 0x11 && cq[0].status == DION_SUCCESS && cq[0].peer == 1 &&
              cq[0].value == 0,
          "put completion: cookie %#llx status %d peer %d", (unsigned long long)cq[0].cookie, cq[0].status,
          cq[0].peer);
    CHECK(E->pending(e0, -1) == 0, "pending after its completion");
    CHECK(!memcmp(dst + 200, src + 100, 333) && dst[199] == 0 && dst[533] == 0,
          "the put's bytes at the target");

    /* put_signal as the proxy posts it: the put, then an ORDERED ADD (ATOMIC fetch-add) on the signal word,
     * with no fence (nothing but a WRITE is outstanding); then an ORDERED SET (inline 8-byte WRITE), fenced
     * because that ADD, an ATOMIC, is still outstanding */
    w = ctl->wr_count;
    CHECK(E->put(e0, 1, msrc, src, &kdst, 1000, 64, 0, 0x21) == DION_SUCCESS &&
              E->atomic(e0, 1, DION__ENGINE_AMO_ADD, &ksig, 3 * 8, 5, 0, DION__ENGINE_F_ORDERED, 0x22) ==
                  DION_SUCCESS &&
              E->atomic(e0, 1, DION__ENGINE_AMO_SET, &ksig, 4 * 8, 0xabcdef0123ull, 0, DION__ENGINE_F_ORDERED,
                        0x23) == DION_SUCCESS,
          "put_signal posts: %s", dion_last_error());
    CHECK(ctl->wr_count == w + 3, "3 WRs, got %ld", ctl->wr_count - w);
    CHECK(WR(w + 1).opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && WR(w + 1).flags == IBV_SEND_SIGNALED &&
              WR(w + 1).raddr == (uintptr_t)&sig[3] && WR(w + 1).rkey == (uint32_t)ksig.key &&
              WR(w + 1).compare_add == 5 && WR(w + 1).len == 8 && !(WR(w + 1).laddr & 7),
          "ADD signal WR: opcode %d flags %#x raddr %#llx add %llu", WR(w + 1).opcode, WR(w + 1).flags,
          (unsigned long long)WR(w + 1).raddr, (unsigned long long)WR(w + 1).compare_add);
    CHECK(WR(w + 2).opcode == IBV_WR_RDMA_WRITE &&
              WR(w + 2).flags == (IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_FENCE) &&
              WR(w + 2).raddr == (uintptr_t)&sig[4] && WR(w + 2).rkey == (uint32_t)ksig.key &&
              WR(w + 2).len == 8,
          "SET signal WR: opcode %d flags %#x len %llu", WR(w + 2).opcode, WR(w + 2).flags,
          (unsigned long long)WR(w + 2).len);
    CHECK(drain(e0, cq, 3) == 3 && cq[0].cookie == 0x21 && cq[1].cookie == 0x22 && cq[2].cookie == 0x23,
          "completions in posting order");
    CHECK(sig[3] == 5 && sig[4] == 0xabcdef0123ull && !memcmp(dst + 1000, src, 64), "signals %llu %#llx",
          (unsigned long long)sig[3], (unsigned long long)sig[4]);

    /* get: one RDMA READ into the local registration; an ORDERED signal posted while it is outstanding is
     * fenced, an ordered put too, an unordered put is not; once the READ completed, no fence */
    memset(src + 2048, 0, 100);
    w = ctl->wr_count;
    CHECK(E->get(e0, 1, msrc, src + 2048, &kdst, 200, 100, 0, 0x31) == DION_SUCCESS &&
              E->atomic(e0, 1, DION__ENGINE_AMO_SET, &ksig, 5 * 8, 9, 0, DION__ENGINE_F_ORDERED, 0x32) ==
                  DION_SUCCESS &&
              E->put(e0, 1, msrc, src, &kdst, 0, 8, DION__ENGINE_F_ORDERED, 0x33) == DION_SUCCESS &&
              E->put(e0, 1, msrc, src, &kdst, 8, 8, 0, 0x34) == DION_SUCCESS,
          "get, then ordered posts: %s", dion_last_error());
    CHECK(WR(w).opcode == IBV_WR_RDMA_READ && WR(w).flags == IBV_SEND_SIGNALED &&
              WR(w).laddr == (uintptr_t)(src + 2048) && WR(w).len == 100 && WR(w).lkey == lkey_of(msrc) &&
              WR(w).raddr == (uintptr_t)(dst + 200) && WR(w).rkey == (uint32_t)kdst.key,
          "READ WR: opcode %d flags %#x", WR(w).opcode, WR(w).flags);
    CHECK((WR(w + 1).flags & IBV_SEND_FENCE) && (WR(w + 2).flags & IBV_SEND_FENCE) &&
              !(WR(w + 3).flags & IBV_SEND_FENCE),
          "fences behind an outstanding READ: signal %#x, ordered put %#x, plain put %#x", WR(w + 1).flags,
          WR(w + 2).flags, WR(w + 3).flags);
    CHECK(drain(e0, cq, 4) == 4 && cq[0].cookie == 0x31 && cq[3].cookie == 0x34, "4 completions");
    CHECK(!memcmp(src + 2048, dst + 200, 100), "the get's bytes");
    w = ctl->wr_count;
    CHECK(E->atomic(e0, 1, DION__ENGINE_AMO_SET, &ksig, 5 * 8, 10, 0, DION__ENGINE_F_ORDERED, 0x35) ==
                  DION_SUCCESS &&
              !(WR(w).flags & IBV_SEND_FENCE),
          "no fence once the READ completed (%#x)", WR(w).flags);
    drain(e0, cq, 1);

    /* fetch-add and compare-swap: ATOMIC WRs whose old value comes back in the completion */
    sig[6] = 40;
    w = ctl->wr_count;
    CHECK(E->atomic(e0, 1, DION__ENGINE_AMO_FETCH_ADD, &ksig, 6 * 8, 5, 0, 0, 0x41) == DION_SUCCESS,
          "fetch-add: %s", dion_last_error());
    CHECK(WR(w).opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && WR(w).flags == IBV_SEND_SIGNALED &&
              WR(w).compare_add == 5 && WR(w).raddr == (uintptr_t)&sig[6] && WR(w).len == 8 &&
              !(WR(w).laddr & 7),
          "fetch-add WR");
    CHECK(drain(e0, cq, 1) == 1 && cq[0].value == 40 && sig[6] == 45, "fetch-add: old %llu, now %llu",
          (unsigned long long)cq[0].value, (unsigned long long)sig[6]);
    w = ctl->wr_count;
    CHECK(E->atomic(e0, 1, DION__ENGINE_AMO_CSWAP, &ksig, 6 * 8, 7, 45, 0, 0x42) == DION_SUCCESS &&
              E->atomic(e0, 1, DION__ENGINE_AMO_CSWAP, &ksig, 6 * 8, 99, 1, 0, 0x43) == DION_SUCCESS,
          "compare-swap: %s", dion_last_error());
    CHECK(WR(w).opcode == IBV_WR_ATOMIC_CMP_AND_SWP && WR(w).compare_add == 45 && WR(w).swap == 7 &&
              WR(w).laddr != WR(w + 1).laddr,
          "compare-swap WR: compare %llu swap %llu (each in flight has its own result word)",
          (unsigned long long)WR(w).compare_add, (unsigned long long)WR(w).swap);
    CHECK(drain(e0, cq, 2) == 2 && cq[0].value == 45 && cq[1].value == 7 && sig[6] == 7,
          "compare-swap: old %llu then %llu, now %llu", (unsigned long long)cq[0].value,
          (unsigned long long)cq[1].value, (unsigned long long)sig[6]);
    /* an ordered put behind an outstanding atomic is fenced */
    w = ctl->wr_count;
    E->atomic(e0, 1, DION__ENGINE_AMO_FETCH_ADD, &ksig, 7 * 8, 1, 0, 0, 0x44);
    E->put(e0, 1, msrc, src, &kdst, 16, 8, DION__ENGINE_F_ORDERED, 0x45);
    CHECK(ctl->wr_count == w + 2 && (WR(w + 1).flags & IBV_SEND_FENCE), "ordered put after an atomic: %#x",
          WR(w + 1).flags);
    drain(e0, cq, 2);

    /* refusals post nothing: out of bounds, to itself, misaligned atomic */
    w = ctl->wr_count;
    CHECK(E->put(e0, 1, msrc, src, &kdst, 4000, 200, 0, 1) == DION_ERR_INVALID_ARG &&
              strstr(dion_last_error(), "out of bounds") && strstr(dion_last_error(), "rank 1"),
          "out-of-bounds put: %s", dion_last_error());
    CHECK(E->put(e0, 0, msrc, src, &kdst, 0, 8, 0, 1) == DION_ERR_INVALID_ARG, "a put to itself");
    CHECK(E->atomic(e0, 1, DION__ENGINE_AMO_ADD, &ksig, 4, 1, 0, 0, 1) == DION_ERR_INVALID_ARG,
          "a misaligned signal");
    CHECK(ctl->wr_count == w && E->pending(e0, -1) == 0, "refusals posted %ld WRs", ctl->wr_count - w);

    /* a full send queue: BUSY, nothing posted; after polling, posting resumes */
    w = ctl->wr_count;
    int posted = 0;
    dion_status_t st = DION_SUCCESS;
    while (posted < 64 &&
           (st = E->put(e0, 1, msrc, src, &kdst, 0, 8, 0, 0x100 + (uint64_t)posted)) == DION_SUCCESS)
        posted++;
    CHECK(st == DION__ENGINE_BUSY && posted == 16 && ctl->wr_count == w + 16,
          "BUSY after the queue's 16 WRs: status %d after %d posts", st, posted);
    int got = drain(e0, cq, 16);
    int inorder = got == 16;
    for (int i = 0; i < got; i++) inorder &= cq[i].cookie == 0x100 + (uint64_t)i;
    CHECK(inorder, "16 completions in order (%d)", got);
    CHECK(E->put(e0, 1, msrc, src, &kdst, 0, 8, 0, 0x200) == DION_SUCCESS && drain(e0, cq, 1) == 1,
          "posting after the queue drained");

    /* a responder that reorders as RC allows (the fake's reorder mode): an unfenced WRITE passes an earlier
     * READ of the same bytes, so the READ returns the new data; the engine's ORDERED put carries a fence and
     * the READ returns the old data. Shows that the fake would expose a missing fence, and that the engine
     * sets it. */
    ctl->reorder = 1;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t old_v = 0x1111111111111111ull * (uint64_t)(pass + 1), new_v = ~old_v, got_v = 0;
        memcpy(dst + 3000, &old_v, 8);
        memcpy(src + 3100, &new_v, 8);
        memset(src + 3200, 0, 8);
        CHECK(E->get(e0, 1, msrc, src + 3200, &kdst, 3000, 8, 0, 0x400) == DION_SUCCESS &&
                  E->put(e0, 1, msrc, src + 3100, &kdst, 3000, 8, pass ? DION__ENGINE_F_ORDERED : 0, 0x401) ==
                      DION_SUCCESS,
              "get then put: %s", dion_last_error());
        CHECK(drain(e0, cq, 2) == 2 && cq[0].cookie == 0x400 && cq[1].cookie == 0x401,
              "completions in posting order under reordering");
        memcpy(&got_v, src + 3200, 8);
        CHECK(got_v == (pass ? old_v : new_v), "%s put: the READ returned %#llx (old %#llx, new %#llx)",
              pass ? "an ordered (fenced)" : "an unfenced", (unsigned long long)got_v,
              (unsigned long long)old_v, (unsigned long long)new_v);
    }
    ctl->reorder = 0;

    /* an error completion: its sentence names the peer and the status; the QP is failed afterwards */
    ctl->fail_at = ctl->wr_count;
    ctl->fail_status = IBV_WC_REM_ACCESS_ERR;
    CHECK(E->put(e0, 1, msrc, src, &kdst, 0, 8, 0, 0x300) == DION_SUCCESS, "post of the failing put");
    CHECK(drain(e0, cq, 1) == 1 && cq[0].cookie == 0x300 && cq[0].status == DION_ERR_REMOTE_ACCESS &&
              cq[0].peer == 1 && strstr(cq[0].why, "rank 1") && strstr(cq[0].why, "remote access error") &&
              strstr(cq[0].why, "IBV_WC_REM_ACCESS_ERR"),
          "error completion: status %d: %s", cq[0].status, cq[0].why);
    ctl->fail_at = -1;
    CHECK(E->put(e0, 1, msrc, src, &kdst, 0, 8, 0, 0x301) == DION_ERR_NETWORK &&
              strstr(dion_last_error(), "failed earlier") && E->pending(e0, -1) == 0,
          "a post to the failed QP: %s", dion_last_error());

    E->mem_dereg(e0, msrc);
    E->mem_dereg(e1, mdst);
    E->mem_dereg(e1, msig);
out:
    if (e0) E->close(e0);
    if (e1) E->close(e1);
    CHECK(ctl->live_qps == qps0 && ctl->live_mrs == mrs0, "teardown left %d QPs and %d MRs",
          ctl->live_qps - qps0, ctl->live_mrs - mrs0);
    unsetenv("DION_IB_LIBRARY");
    unsetenv("DION_IB_QP_DEPTH");
    if (h) dlclose(h);
}

/* Posts until the engine stops answering BUSY (polling both engines between tries, as the proxies of two
 * ranks would), bounded: returns the last status. */
static dion_status_t post_until(dion__engine_t *e, dion__engine_t *other, int peer, dion__engine_mr_t *mr,
                                const void *src, const dion__engine_rkey_t *rk, size_t bytes, uint64_t ck)
{
    dion__engine_cqe_t cq[4];
    dion_status_t s = DION__ENGINE_BUSY;
    for (int i = 0; i < 200000 && s == DION__ENGINE_BUSY; i++) {
        s = E->put(e, peer, mr, src, rk, 0, bytes, 0, ck);
        if (s != DION__ENGINE_BUSY) break;
        CHECK(E->poll(e, cq, 4) == 0, "a completion before anything was posted");
        if (other) CHECK(E->poll(other, cq, 4) == 0, "a completion on the other engine");
        usleep(50);
    }
    return s;
}

/* DION_IB_CONNECT=ondemand, three engines of one process as ranks 0-2: no QP before the first post; both
 * first posts (crossing requests) answer BUSY and make exactly one QP each; polling both runs the handshake,
 * after which both puts go and land; rank 2's listener is closed (as if it died), so a post to it fails
 * within DION_WAIT_TIMEOUT with a sentence naming rank 2. */
void test_engine_ondemand(const char *lib, int *failures)
{
    fails = failures;
    void *h = NULL;
    fake_ibv_ctl_t *ctl = fake_ctl_open(lib, &h);
    if (!ctl) return;
    setenv("DION_IB_LIBRARY", lib, 1);
    setenv("DION_IB_CONNECT", "ondemand", 1);
    setenv("DION_WAIT_TIMEOUT", "500ms", 1);
    setenv("DION_BOOTSTRAP_IFNAME", "lo", 1);
    dion__engine_t *e[3] = {NULL, NULL, NULL};
    dion__engine_addr_t a[3];
    char why[512] = "";
    for (int r = 0; r < 3; r++) {
        dion__engine_open_args_t oa = {.rank = r, .nranks = 3, .cuda_device = -1};
        CHECK(E->open(&oa, &e[r], why, sizeof why) == DION_SUCCESS, "open rank %d: %s", r, why);
        if (!e[r]) goto out;
        CHECK(E->address(e[r], &a[r]) == DION_SUCCESS && a[r].len == DION__VCM_ADDR_BYTES, "address %d: %s",
              r, dion_last_error());
    }
    dion__engine_caps_t caps;
    E->query(e[0], &caps);
    CHECK(caps.connect_ondemand == 1, "DION_IB_CONNECT=ondemand: caps say %d", caps.connect_ondemand);
    E->close(e[2]); /* rank 2 dies before anyone addressed it */
    e[2] = NULL;
    int q0 = ctl->qps_created;
    CHECK(E->connect(e[0], a, 3) == DION_SUCCESS && E->connect(e[1], a, 3) == DION_SUCCESS, "connect: %s",
          dion_last_error());
    CHECK(ctl->qps_created == q0, "connect made %d QPs", ctl->qps_created - q0);

    static uint8_t s0[512], s1[512], d0[512], d1[512];
    for (int i = 0; i < 512; i++) s0[i] = (uint8_t)(i * 3 + 1), s1[i] = (uint8_t)(i * 5 + 2);
    memset(d0, 0, sizeof d0), memset(d1, 0, sizeof d1);
    dion__engine_mr_t *ms0 = NULL, *ms1 = NULL, *md0 = NULL, *md1 = NULL;
    dion__engine_rkey_t ks0, ks1, kd0, kd1;
    CHECK(E->mem_reg(e[0], s0, 512, DION__ENGINE_MEM_HOST, &ms0, &ks0) == DION_SUCCESS &&
              E->mem_reg(e[1], s1, 512, DION__ENGINE_MEM_HOST, &ms1, &ks1) == DION_SUCCESS &&
              E->mem_reg(e[0], d0, 512, DION__ENGINE_MEM_HOST, &md0, &kd0) == DION_SUCCESS &&
              E->mem_reg(e[1], d1, 512, DION__ENGINE_MEM_HOST, &md1, &kd1) == DION_SUCCESS,
          "mem_reg: %s", dion_last_error());
    if (!ms0 || !ms1 || !md0 || !md1) goto out;

    /* crossing first posts: both BUSY, one QP each */
    CHECK(E->put(e[0], 1, ms0, s0, &kd1, 0, 300, 0, 1) == DION__ENGINE_BUSY,
          "rank 0's first put is not BUSY");
    CHECK(E->put(e[1], 0, ms1, s1, &kd0, 0, 200, 0, 2) == DION__ENGINE_BUSY,
          "rank 1's first put is not BUSY");
    CHECK(ctl->qps_created == q0 + 2, "the first posts made %d QPs, expected 2", ctl->qps_created - q0);
    dion_status_t st0 = post_until(e[0], e[1], 1, ms0, s0, &kd1, 300, 1);
    dion_status_t st1 = post_until(e[1], e[0], 0, ms1, s1, &kd0, 200, 2);
    CHECK(st0 == DION_SUCCESS && st1 == DION_SUCCESS, "puts after the handshake: %d %d: %s", st0, st1,
          dion_last_error());
    CHECK(ctl->qps_created == q0 + 2, "crossing handshakes made %d QPs, expected 2", ctl->qps_created - q0);
    dion__engine_cqe_t cq[2];
    CHECK(drain(e[0], cq, 1) == 1 && cq[0].cookie == 1 && cq[0].status == DION_SUCCESS,
          "rank 0's completion");
    CHECK(drain(e[1], cq, 1) == 1 && cq[0].cookie == 2 && cq[0].status == DION_SUCCESS,
          "rank 1's completion");
    CHECK(!memcmp(d1, s0, 300) && d1[300] == 0 && !memcmp(d0, s1, 200) && d0[200] == 0, "the puts' bytes");

    /* the dead rank: BUSY while retrying, then the handshake's error naming it */
    dion_status_t sd = post_until(e[0], NULL, 2, ms0, s0, &kd1, 8, 3);
    CHECK(sd == DION_ERR_NETWORK && strstr(dion_last_error(), "rank 2") &&
              strstr(dion_last_error(), "on-demand connection"),
          "post to the dead rank: %d: %s", sd, dion_last_error());
    CHECK(E->put(e[0], 2, ms0, s0, &kd1, 0, 8, 0, 4) == DION_ERR_NETWORK, "a later post to the dead rank");
    CHECK(E->pending(e[0], -1) == 0, "nothing pending after the failed handshake");
    E->mem_dereg(e[0], ms0), E->mem_dereg(e[1], ms1), E->mem_dereg(e[0], md0), E->mem_dereg(e[1], md1);
    CHECK(ctl->qps_created == q0 + 3, "QPs made: %d, expected 3 (the dead rank's included)",
          ctl->qps_created - q0);
out:
    for (int r = 0; r < 3; r++)
        if (e[r]) E->close(e[r]);
    unsetenv("DION_IB_LIBRARY");
    unsetenv("DION_IB_CONNECT");
    unsetenv("DION_WAIT_TIMEOUT");
    unsetenv("DION_BOOTSTRAP_IFNAME");
    if (h) dlclose(h);
}
