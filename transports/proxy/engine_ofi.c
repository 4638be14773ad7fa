/* The ofi engine: RDM endpoints of libfabric (efa, cxi, verbs;ofi_rxm, tcp, shm...) behind engine.h.
 *
 * One engine = fabric, domain, address vector (table), completion queue (context format) and one endpoint.
 * Every operation takes a slot of a fixed table; the slot holds the libfabric context, the atomic operands
 * and the fetched result (registered once, so the caller registers nothing for atomics), and what a
 * completion or an error sentence needs.
 *
 * Ordering (DION__ENGINE_F_ORDERED) comes in three ways, chosen at open (caps.order, DION_OFI_ORDER):
 *  - msg_order: the provider processes RMA and atomic headers from one endpoint to one peer in submission
 * order (tx msg_order FI_ORDER_WAW, RAW, ...). libfabric promises header order, and data order only for
 *    overlapping locations, so auto uses this only for providers whose data placement is known to follow
 *    header order (tcp: one byte stream per peer, a write's payload is in memory before the next header is
 *    read; shm in its ordered mode, see choose()). Where a needed bit is missing the operation is held as in
 *    wait. shm also drops FI_DELIVERY_COMPLETE on writes and confirms them by a later fetch (flush mode,
 *    ofi.h, docs/backends/proxy.md).
 *  - fence: the provider has FI_FENCE; the ordered operation carries it when earlier ones are in flight. Only
 *    when DION_OFI_ORDER=fence: the one provider here with FI_FENCE (sockets) stalled with it.
 *  - wait: the ordered operation is held in a per-peer queue until every earlier operation to that peer has
 *    completed (delivery complete where the provider has it), then posted from poll. Costs a round trip. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "src/internal.h"

volatile int dion__ofi_test_refuse_peer = -1;

#if DION_HAVE_FABRIC

#include "ofi.h"

static const char *const order_names[] = {"msg_order", "fence", "wait"};

/* Flush mode: the end of the address blob carries the flush word (magic, address, key). */
#define FLUSH_TRAILER 24
#define FLUSH_MAGIC   0x48534c46504f4944ull /* "DIOPFLSH" */

/* ---- small helpers ---- */

static dion_status_t fi_fail(dion__engine_t *e, const char *what, int rc)
{
    return dion__error_set(DION_ERR_NETWORK, "libfabric %s failed: %s (%d)", what,
                           e->fi->strerror(rc < 0 ? -rc : rc), rc);
}

/* Lower is better; the order of issue 8: hardware NICs first, then tcp, then shared memory. */
static int prov_rank(const char *p)
{
    static const char *const pref[] = {"efa", "cxi", "verbs;ofi_rxm", "psm3",
                                       "opx", "tcp", "tcp;ofi_rxm",   "shm"};
    for (size_t i = 0; i < sizeof pref / sizeof pref[0]; i++)
        if (!strcmp(p, pref[i])) return (int)i;
    return 100;
}

static int mr_register(dion__engine_t *e, void *base, size_t len, int mem, struct dion__engine_mr *out)
{
    struct iovec iov = {.iov_base = base, .iov_len = len};
    struct fi_mr_attr attr = {.mr_iov = &iov,
                              .iov_count = 1,
                              .access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                              .requested_key = e->next_key++};
    if (mem == DION__ENGINE_MEM_CUDA) {
        attr.iface = FI_HMEM_CUDA;
        attr.device.cuda = e->cuda_device;
    }
    int rc = fi_mr_regattr(e->domain, &attr, 0, &out->mr);
    if (rc) return rc;
    if (e->mr_mode & FI_MR_ENDPOINT) {
        rc = fi_mr_bind(out->mr, &e->ep->fid, 0);
        if (!rc) rc = fi_mr_enable(out->mr);
        if (rc) {
            fi_close(&out->mr->fid);
            return rc;
        }
    }
    out->desc = fi_mr_desc(out->mr);
    out->base = base;
    out->len = len;
    out->mem = mem;
    return 0;
}

/* ---- choosing a provider ---- */

typedef struct {
    int hmem, fence, delivery, msg;
    uint64_t order;
} want_t;

/* fi_getinfo with DION's hints; returns the best entry (a copy) or NULL. */
static struct fi_info *try_getinfo(dion__engine_t *e, const want_t *w, const char *prov, const char *dom)
{
    struct fi_info *hints = e->fi->dupinfo(NULL), *list = NULL, *best = NULL;
    if (!hints) return NULL;
    hints->caps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (w->hmem) hints->caps |= FI_HMEM;
    if (w->fence) hints->caps |= FI_FENCE;
    if (w->msg) hints->caps |= FI_MSG | FI_SEND | FI_RECV; /* DION_OFI_SIGNAL=msg (ofi_msg.c) */
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT | (w->hmem ? FI_MR_HMEM : 0);
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->tx_attr->op_flags = w->delivery ? FI_DELIVERY_COMPLETE : 0;
    hints->tx_attr->msg_order = w->order;
    if (prov) hints->fabric_attr->prov_name = strdup(prov);
    if (dom) hints->domain_attr->name = strdup(dom);
    if (e->fi->getinfo(e->api, NULL, NULL, 0, hints, &list) == 0) {
        struct fi_info *pick = NULL;
        for (struct fi_info *i = list; i; i = i->next) {
            /* deprecated providers whose atomics fail here (sockets) are used only when named */
            if (!prov && prov_rank(dion__ofi_prov_name(i)) >= 100) continue;
            if (!pick || prov_rank(dion__ofi_prov_name(i)) < prov_rank(dion__ofi_prov_name(pick))) pick = i;
        }
        if (pick) best = e->fi->dupinfo(pick);
    }
    if (list) e->fi->freeinfo(list);
    e->fi->freeinfo(hints);
    return best;
}

static dion_status_t choose(dion__engine_t *e, int want_cuda, int order_env, char *why, size_t cap)
{
    const char *prov = dion__cfg_env("DION_OFI_PROVIDER"), *dom = dion__cfg_env("DION_OFI_DOMAIN");
    /* Discovery: the loosest hints, to learn which provider and domain to refine on. */
    want_t w = {.hmem = want_cuda, .msg = e->msg};
    struct fi_info *found = try_getinfo(e, &w, prov, dom);
    if (!found && want_cuda) {
        w.hmem = 0;
        found = try_getinfo(e, &w, prov, dom);
    }
    if (!found) {
        snprintf(why, cap,
                 "libfabric offers no %s%s%s with reliable datagram endpoints, RMA and 64-bit atomics "
                 "(fi_info -t FI_EP_RDM -c FI_ATOMIC lists what there is); %s",
                 prov ? "provider '" : "provider", prov ? prov : "", prov ? "'" : "",
                 prov ? "check DION_OFI_PROVIDER (e.g. tcp, shm, efa, verbs;ofi_rxm)" : "install one");
        return DION_ERR_UNSUPPORTED;
    }
    char pname[64], dname[64];
    snprintf(pname, sizeof pname, "%s", dion__ofi_prov_name(found));
    snprintf(dname, sizeof dname, "%s",
             found->domain_attr && found->domain_attr->name ? found->domain_attr->name : "");
    int tcp = !strncmp(pname, "tcp", 3);
    int fence_first = order_env == ORDER_FENCE; /* FI_FENCE is used only when asked for: see auto below */
    /* Refine on that provider: ask for what helps, drop it again when refused. */
    static const uint64_t orders[] = {FI_ORDER_WAW | FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_RAR,
                                      FI_ORDER_WAW | FI_ORDER_RAW, FI_ORDER_WAW, 0};
    struct fi_info *best = NULL;
    for (int fence = fence_first; fence >= 0 && !best; fence--)
        for (int dc = 1; dc >= 0 && !best; dc--)
            for (size_t o = 0; o < sizeof orders / sizeof orders[0] && !best; o++) {
                want_t r = {.hmem = w.hmem, .fence = fence, .delivery = dc, .order = orders[o], .msg = w.msg};
                best = try_getinfo(e, &r, pname, dname[0] ? dname : NULL);
                if (best) e->delivery = dc;
            }
    if (!best) {
        best = found;
        found = NULL;
        e->delivery = 0;
    }
    if (found) e->fi->freeinfo(found);
    e->info = best;
    e->cuda_mem = (best->caps & FI_HMEM) != 0;
    e->mr_mode = best->domain_attr->mr_mode;
    e->msg_order = best->tx_attr->msg_order;
    int fence_ok = (best->caps & FI_FENCE) != 0;
    int shm = strcmp(pname, "shm") == 0;
    if (order_env >= 0)
        e->order = order_env == ORDER_FENCE && !fence_ok ? ORDER_WAIT : order_env;
    else /* fence: not yet seen working on any provider (docs) */
        e->order = tcp || (shm && (e->msg_order & FI_ORDER_WAW)) ? ORDER_MSG : ORDER_WAIT;
    /* shm grants FI_ORDER_WAW/RAW only in its mode where every operation goes through the peer's command
     * queue, and it places a write's data while processing its header (inline and inject data, CMA and mmap
     * copies; a segmented (SAR) transfer holds back every later operation to that peer until it is done). So
     * a fetching operation that the peer processed confirms every earlier write: writes can go without
     * FI_DELIVERY_COMPLETE (which turns every small shm write into a SAR transfer, one per peer at a time)
     * and be confirmed by the next fetch, the engine's own when no other comes (flush mode). */
    e->flush = shm && e->order == ORDER_MSG &&
               (e->msg_order & (FI_ORDER_WAW | FI_ORDER_RAW)) == (FI_ORDER_WAW | FI_ORDER_RAW);
    /* libfabric 1.17's shm crashes in its progress engine when fi_atomicmsg carries FI_DELIVERY_COMPLETE
     * (seen here), and without it an add or set completes before the target applied it. Fetching atomics
     * complete only once applied (fi_atomic(3)), so there add and set go as fetching atomics. Also where
     * the provider grants no delivery completion at all. */
    e->fetch_updates = !e->delivery || shm;
    /* message mode needs a message to stay behind earlier writes to its peer: shm's ordered mode (one command
     * queue per peer, FI_ORDER_SAW) and tcp (one byte stream per peer) */
    if (e->msg && !(e->order == ORDER_MSG && (tcp || (e->msg_order & FI_ORDER_SAW)))) {
        DION_LOG(DION_LOG_WARN,
                 "ofi: DION_OFI_SIGNAL=msg needs message order behind writes (shm's ordered mode or tcp); "
                 "provider %s with order %s keeps signals as atomics",
                 pname, order_names[e->order]);
        e->msg = 0;
    }
    if (order_env == ORDER_FENCE && !fence_ok)
        DION_LOG(DION_LOG_WARN, "ofi: DION_OFI_ORDER=fence but provider %s has no FI_FENCE; using wait",
                 pname);
    return DION_SUCCESS;
}

/* ---- the completion queue and its wait object ---- */

/* Providers whose CQ wait object a peer's incoming operation reaches: tcp (and rxm over it) add every
 * connection's socket to the CQ's wait set (1.17: tcpx_ep, rxm_ep_msg_cq_open), so the descriptor turns
 * readable when a peer's write or atomic arrives, though it gives this rank no completion. shm's peers write
 * into shared memory and signal nothing (1.17), so there the wait would only sleep: it keeps FI_WAIT_NONE
 * and its remote-operation counter (served). */
static int wait_reaches_peers(const char *prov)
{
    return !strncmp(prov, "tcp", 3);
}

/* Opens e->cq; with a wait object (FI_WAIT_FD, whose descriptor poll(2) can watch) where peers' operations
 * reach it, falling back to none when the provider refuses. Sets e->wait_fd (-1: none). */
static int cq_open(dion__engine_t *e, uint32_t nops)
{
    struct fi_cq_attr attr = {.size = nops, .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE};
    e->wait_fd = -1;
    const char *prov = dion__ofi_prov_name(e->info);
    if (wait_reaches_peers(prov) && e->info->domain_attr->data_progress != FI_PROGRESS_AUTO) {
        attr.wait_obj = FI_WAIT_FD;
        int rc = fi_cq_open(e->domain, &attr, &e->cq, NULL), fd = -1;
        if (rc == 0 && (rc = fi_control(&e->cq->fid, FI_GETWAIT, &fd)) == 0 && fd >= 0) {
            e->wait_fd = fd;
            return 0;
        }
        DION_LOG(DION_LOG_INFO,
                 "ofi: provider %s gives no completion queue wait descriptor (%s); idle "
                 "threads nap instead",
                 prov, e->fi->strerror(rc < 0 ? -rc : rc));
        if (e->cq) fi_close(&e->cq->fid);
        e->cq = NULL;
        attr.wait_obj = FI_WAIT_NONE;
    }
    return fi_cq_open(e->domain, &attr, &e->cq, NULL);
}

/* wait_arm (engine.h): fi_trywait says whether blocking is safe: -FI_EAGAIN when something is ready now. */
static int ofi_wait_arm(dion__engine_t *e, int *fd)
{
    if (e->wait_fd < 0 || e->broken) return -1;
    struct fid *fids[1] = {&e->cq->fid};
    int rc = fi_trywait(e->fabric, fids, 1);
    if (rc == -FI_EAGAIN) return 1;
    if (rc) {
        DION_LOG(DION_LOG_INFO, "ofi: fi_trywait failed (%s); idle threads nap instead from now on",
                 e->fi->strerror(-rc));
        e->wait_fd = -1;
        return -1;
    }
    e->n_waits++;
    *fd = e->wait_fd;
    return 0;
}

/* ---- open / close ---- */

static void ofi_close(dion__engine_t *e);

static dion_status_t ofi_open(const dion__engine_open_args_t *a, dion__engine_t **out, char *why, size_t cap)
{
    char scratch[8];
    if (!why || !cap) {
        why = scratch;
        cap = sizeof scratch;
    }
    why[0] = 0;
    *out = NULL;
    if (!a || a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks) {
        snprintf(why, cap, "ofi engine: rank/nranks out of range");
        return DION_ERR_INVALID_ARG;
    }
    const dion__fi_t *fi = dion__fi(why, cap);
    if (!fi) return DION_ERR_UNSUPPORTED;
    int order_env = -1;
    const char *ov = dion__cfg_env("DION_OFI_ORDER");
    if (ov && strcmp(ov, "auto")) {
        for (int i = 0; i < 3; i++)
            if (!strcmp(ov, order_names[i])) order_env = i;
        if (order_env < 0) {
            snprintf(why, cap, "DION_OFI_ORDER='%s' is not one of auto, msg_order, fence, wait", ov);
            return DION_ERR_INVALID_ARG;
        }
    }
    const char *sv = dion__cfg_env("DION_OFI_SIGNAL");
    int plain_env = sv && !strcmp(sv, "plain"), msg_env = sv && !strcmp(sv, "msg");
    if (sv && !plain_env && !msg_env && strcmp(sv, "auto") && strcmp(sv, "fetch")) {
        snprintf(why, cap, "DION_OFI_SIGNAL='%s' is not one of auto, fetch, plain, msg", sv);
        return DION_ERR_INVALID_ARG;
    }
    uint64_t op_timeout = 0;
    if (dion__cfg_duration_ns("DION_OFI_OP_TIMEOUT", &op_timeout) != DION_SUCCESS) {
        snprintf(why, cap, "%s", dion_last_error());
        return DION_ERR_INVALID_ARG;
    }
    long long peer_ops = 0;
    if (dion__cfg_int("DION_OFI_PEER_OPS", -1, 1 << 24, &peer_ops) != DION_SUCCESS) {
        snprintf(why, cap, "%s", dion_last_error());
        return DION_ERR_INVALID_ARG;
    }
    dion__engine_t *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(why, cap, "ofi engine: out of memory");
        return DION_ERR_NO_MEMORY;
    }
    e->op_timeout_ns = op_timeout;
    e->wait_fd = -1;
    e->fi = fi;
    e->rank = a->rank;
    e->nranks = a->nranks;
    e->cuda_device = a->cuda_device;
    e->next_key = 1;
    e->msg = msg_env;
    uint32_t lib = fi->version(), hdr = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
    e->api = FI_VERSION_LT(lib, hdr) ? lib : hdr;
    dion_status_t s = DION_ERR_NETWORK;
    if (FI_VERSION_LT(e->api, FI_VERSION(1, 10))) {
        snprintf(why, cap, "%s is libfabric %u.%u; the ofi engine needs 1.10 or newer", fi->path,
                 FI_MAJOR(lib), FI_MINOR(lib));
        s = DION_ERR_UNSUPPORTED;
        goto fail;
    }
    s = choose(e, a->want_cuda && a->cuda_device >= 0, order_env, why, cap);
    if (s != DION_SUCCESS) goto fail;

    struct fi_info *i = e->info;
    int rc;
    const char *step = "fi_fabric";
    if ((rc = fi->fabric(i->fabric_attr, &e->fabric, NULL))) goto fi_err;
    step = "fi_domain";
    if ((rc = fi_domain(e->fabric, i, &e->domain, NULL))) goto fi_err;
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)a->nranks};
    step = "fi_av_open";
    if ((rc = fi_av_open(e->domain, &av_attr, &e->av, NULL))) goto fi_err;
    uint32_t nops = a->max_ops ? a->max_ops : 1024;
    if (i->tx_attr->size && nops > i->tx_attr->size) nops = (uint32_t)i->tx_attr->size;
    if (nops < 8) nops = 8;
    /* The per-peer bound: shm's target takes every peer's commands into one queue (rx size entries, an RMA
     * takes two) and refuses a post once it is nearly full; a refused post is retried on every pass, each
     * retry taking the target's queue lock. Holding operations here instead costs nothing. */
    if (peer_ops < 0 && !strcmp(dion__ofi_prov_name(i), "shm")) {
        size_t q = i->rx_attr && i->rx_attr->size ? i->rx_attr->size : 1024;
        size_t senders = a->nranks > 1 ? (size_t)a->nranks - 1 : 1;
        peer_ops = (long long)(q / 4 / senders);
        if (peer_ops < 16) peer_ops = 16;
    }
    e->peer_cap = peer_ops > 0 ? (uint32_t)peer_ops : 0;
    step = "fi_cq_open";
    if ((rc = cq_open(e, nops + (e->msg ? 256u : 0u)))) goto fi_err; /* and message receives */
    step = "fi_endpoint";
    if ((rc = fi_endpoint(e->domain, i, &e->ep, NULL))) goto fi_err;
    step = "fi_ep_bind(av)";
    if ((rc = fi_ep_bind(e->ep, &e->av->fid, 0))) goto fi_err;
    step = "fi_ep_bind(cq)";
    if ((rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV))) goto fi_err;
    /* Peers' operations served here give no completion: a counter of them (FI_RMA_EVENT: shm has it, 1.17's
     * tcp;ofi_rxm not) tells the proxy thread that this rank is a target of traffic, so that it does not nap
     * then (served). Optional. */
    struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
    if ((i->caps & FI_RMA_EVENT) && fi_cntr_open(e->domain, &cntr_attr, &e->rx_cntr, NULL) == 0 &&
        fi_ep_bind(e->ep, &e->rx_cntr->fid, FI_REMOTE_WRITE | FI_REMOTE_READ) != 0) {
        fi_close(&e->rx_cntr->fid);
        e->rx_cntr = NULL;
    }
    e->peer_notice = i->domain_attr->data_progress == FI_PROGRESS_AUTO ? DION__ENGINE_NOTICE_NEEDLESS
                     : e->wait_fd >= 0                                 ? DION__ENGINE_NOTICE_WAIT
                     : e->rx_cntr                                      ? DION__ENGINE_NOTICE_COUNTER
                                                                       : DION__ENGINE_NOTICE_NONE;
    if (e->peer_notice == DION__ENGINE_NOTICE_NONE)
        DION_LOG(DION_LOG_INFO,
                 "ofi: provider %s neither counts remote operations (FI_RMA_EVENT) nor gives a wait object "
                 "that they reach: a rank that only receives serves them between short naps",
                 dion__ofi_prov_name(i));
    /* shm names its region in /dev/shm after the process id and an endpoint count, and refuses (-FI_EBUSY) a
     * name whose file exists and whose recorded pid is alive: a file left by a killed process (or one of
     * another PID namespace sharing /dev/shm) whose pid this process now has. A name that also carries the
     * clock in nanoseconds does not meet such a file. */
    if (!strcmp(dion__ofi_prov_name(i), "shm")) {
        static atomic_uint shm_eps;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        char name[64];
        snprintf(name, sizeof name, "dion-%ld-%llx-%u", (long)getpid(),
                 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec,
                 atomic_fetch_add(&shm_eps, 1u));
        step = "fi_setname";
        if ((rc = fi_setname(&e->ep->fid, name, strlen(name) + 1))) goto fi_err;
    }
    step = "fi_enable";
    if ((rc = fi_enable(e->ep))) goto fi_err;

    /* The atomics DION's signals and fetch operations need, on 64-bit words. */
    size_t cnt = 0;
    const char *missing = NULL;
    if (fi_atomicvalid(e->ep, FI_UINT64, FI_SUM, &cnt) || !cnt)
        missing = "atomic add";
    else if (fi_atomicvalid(e->ep, FI_UINT64, FI_ATOMIC_WRITE, &cnt) || !cnt)
        missing = "atomic write";
    else if (fi_fetch_atomicvalid(e->ep, FI_UINT64, FI_SUM, &cnt) || !cnt)
        missing = "fetching atomic add";
    else if (fi_compare_atomicvalid(e->ep, FI_UINT64, FI_CSWAP, &cnt) || !cnt)
        missing = "compare-and-swap";
    else if (e->fetch_updates && (fi_fetch_atomicvalid(e->ep, FI_UINT64, FI_ATOMIC_WRITE, &cnt) || !cnt))
        e->fetch_updates = 0;                       /* keep plain add and set */
    if (missing || !e->fetch_updates) e->flush = 0; /* flushes are fetch-adds; shm's signals must fetch */
    /* Signals (add, set) as plain atomics, confirmed like writes by a later fetch: shm applies a plain one
     * from its command (no inject buffer to read first, no answer to write back) and completes it at once;
     * the engine holds that completion until the flush (docs/backends/proxy.md). */
    e->plain_sig = e->flush && plain_env;
    /* Whether every completion (atomics included) means the result is in the target's memory. */
    e->delivered = e->fetch_updates || (e->delivery && strcmp(dion__ofi_prov_name(i), "shm") != 0);
    if (missing) {
        snprintf(why, cap,
                 "libfabric provider %s lacks %s on 64-bit integers; choose another with "
                 "DION_OFI_PROVIDER",
                 dion__ofi_prov_name(i), missing);
        s = DION_ERR_UNSUPPORTED;
        goto fail;
    }

    /* The operation table: registered when the provider wants local buffers registered (operands). */
    e->nops = nops;
    size_t bytes = ((sizeof(op_t) * nops) + 4095) & ~(size_t)4095;
    if (posix_memalign((void **)&e->ops, 4096, bytes)) {
        snprintf(why, cap, "ofi engine: cannot allocate %zu bytes for %u operation slots", bytes, nops);
        s = DION_ERR_NO_MEMORY;
        goto fail;
    }
    memset(e->ops, 0, bytes);
    for (uint32_t k = 0; k < nops; k++) e->ops[k].next = k + 1 < nops ? k + 1 : OFI_NONE;
    e->free_head = 0;
    if (e->mr_mode & FI_MR_LOCAL) {
        step = "fi_mr_reg(operation table)";
        if ((rc = mr_register(e, e->ops, bytes, DION__ENGINE_MEM_HOST, &e->ops_mr))) goto fi_err;
    }
    e->ready = calloc(nops + 1u, sizeof *e->ready);
    e->want = calloc((size_t)a->nranks, sizeof *e->want);
    if (!e->ready || !e->want) {
        snprintf(why, cap, "ofi engine: out of memory for %u operation slots", nops);
        s = DION_ERR_NO_MEMORY;
        goto fail;
    }
    if (e->msg && (s = dion__ofi_msg_open(e, why, cap)) != DION_SUCCESS) goto fail;
    if (e->flush) { /* the word peers fetch-add 0 on to confirm their writes */
        if (posix_memalign((void **)&e->fword, 64, 64)) {
            snprintf(why, cap, "ofi engine: out of memory");
            s = DION_ERR_NO_MEMORY;
            goto fail;
        }
        memset(e->fword, 0, 64);
        step = "fi_mr_reg(flush word)";
        if ((rc = mr_register(e, e->fword, 64, DION__ENGINE_MEM_HOST, &e->fword_mr))) goto fi_err;
    }
    DION_LOG(
        DION_LOG_INFO,
        "ofi: provider %s, domain %s, libfabric %u.%u (%s), order %s (msg_order %#llx), %s completion%s, "
        "mr_mode %#llx, "
        "GPU memory %s, %u slots",
        dion__ofi_prov_name(i), i->domain_attr->name ? i->domain_attr->name : "?", FI_MAJOR(lib),
        FI_MINOR(lib), fi->path, order_names[e->order], (unsigned long long)e->msg_order,
        e->delivered ? "delivery" : "transmit",
        e->msg         ? " (small put_signals and signals as messages, acknowledged)"
        : e->plain_sig ? " (writes and plain signals confirmed by a later fetch)"
        : e->flush     ? " (writes confirmed by a later fetch)"
                       : "",
        (unsigned long long)e->mr_mode, e->cuda_mem ? "registered (FI_HMEM)" : "staged", nops);
    *out = e;
    return DION_SUCCESS;

fi_err:
    snprintf(why, cap, "libfabric %s failed for provider %s: %s (%d)", step, dion__ofi_prov_name(e->info),
             fi->strerror(rc < 0 ? -rc : rc), rc);
    s = rc == -FI_ENODATA || rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP ? DION_ERR_UNSUPPORTED
                                                                      : DION_ERR_NETWORK;
fail:
    ofi_close(e);
    return s;
}

static void ofi_close(dion__engine_t *e)
{
    if (!e) return;
    if (e->live_mrs)
        DION_LOG(DION_LOG_WARN, "ofi: engine closed with %d registrations still live", e->live_mrs);
    if (e->ep)
        DION_LOG(DION_LOG_INFO,
                 "ofi: closing; %llu posts (%llu held for order, %llu waited for provider resources, "
                 "%llu flushes, %llu key checks), %llu CQ reads (%llu empty) returned %llu completions; "
                 "%llu blocking waits armed",
                 (unsigned long long)e->n_posts, (unsigned long long)e->n_held,
                 (unsigned long long)e->busy_posts, (unsigned long long)e->n_flushes,
                 (unsigned long long)e->n_keychecks, (unsigned long long)e->n_cq_reads,
                 (unsigned long long)e->n_cq_empty, (unsigned long long)e->n_cqes,
                 (unsigned long long)e->n_waits);
    if (e->ep && e->msg)
        DION_LOG(
            DION_LOG_INFO,
            "ofi: messages; %llu sent, %llu acknowledgements received (posted to acknowledged p50 %.1f us "
            "p90 %.1f us); %llu applied for peers, %llu acknowledgements sent",
            (unsigned long long)e->n_msgs, (unsigned long long)e->n_acks_rx, ofi_hist_q(&e->h_msg, 0.5),
            ofi_hist_q(&e->h_msg, 0.9), (unsigned long long)e->n_msgs_rx, (unsigned long long)e->n_acks);
    if (e->ep && e->h_gap.count)
        DION_LOG(DION_LOG_INFO,
                 "ofi: times; gap between polls p50 %.1f us p90 %.1f us (%llu); fetching operations posted "
                 "to completed (to the peer's progress and back) p50 %.1f us p90 %.1f us (%llu)",
                 ofi_hist_q(&e->h_gap, 0.5), ofi_hist_q(&e->h_gap, 0.9), (unsigned long long)e->h_gap.count,
                 ofi_hist_q(&e->h_fetch, 0.5), ofi_hist_q(&e->h_fetch, 0.9),
                 (unsigned long long)e->h_fetch.count);
    /* bound objects before what they are bound to: MRs (FI_MR_ENDPOINT) before the endpoint, the endpoint
     * before its queues and address vector */
    if (e->ops_mr.mr) fi_close(&e->ops_mr.mr->fid);
    dion__ofi_msg_close(e); /* its receive registration before the endpoint */
    if (e->fword_mr.mr) fi_close(&e->fword_mr.mr->fid);
    if (e->ep) fi_close(&e->ep->fid);
    if (e->rx_cntr) fi_close(&e->rx_cntr->fid);
    if (e->cq) fi_close(&e->cq->fid);
    if (e->av) fi_close(&e->av->fid);
    if (e->domain) fi_close(&e->domain->fid);
    if (e->fabric) fi_close(&e->fabric->fid);
    if (e->info) e->fi->freeinfo(e->info);
    free(e->ops);
    free(e->peers);
    free(e->ready);
    free(e->want);
    free(e->vks);
    free(e->vhash);
    free(e->fword);
    free(e);
}

static void ofi_query(dion__engine_t *e, dion__engine_caps_t *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->provider, sizeof c->provider, "%s", dion__ofi_prov_name(e->info));
    snprintf(c->domain, sizeof c->domain, "%s", e->info->domain_attr->name ? e->info->domain_attr->name : "");
    snprintf(c->order, sizeof c->order, "%s%s", order_names[e->order], e->flush ? "+flush" : "");
    c->cuda_mem = e->cuda_mem;
    c->delivery_complete = e->delivered;
    c->manual_progress = e->info->domain_attr->data_progress != FI_PROGRESS_AUTO;
    c->peer_notice = e->peer_notice;
    c->max_ops = e->nops - OFI_RESERVE; /* the rest are the engine's own */
    c->max_msg = e->info->ep_attr->max_msg_size;
    if (!strcmp(dion__ofi_prov_name(e->info), "shm")) c->max_eager = e->info->tx_attr->inject_size;
    c->api_version = e->fi->version();
}

/* ---- addresses ---- */

static dion_status_t ofi_address(dion__engine_t *e, dion__engine_addr_t *out)
{
    memset(out, 0, sizeof *out);
    size_t len = sizeof out->bytes;
    int rc = fi_getname(&e->ep->fid, out->bytes, &len);
    if (rc == -FI_ETOOSMALL)
        return dion__error_set(DION_ERR_UNSUPPORTED,
                               "provider %s has %zu-byte addresses; the engine carries at most %d",
                               dion__ofi_prov_name(e->info), len, DION__ENGINE_ADDR_MAX);
    if (rc) return fi_fail(e, "fi_getname", rc);
    out->len = (uint32_t)len;
    out->engine_version = DION__ENGINE_VERSION;
    /* flush mode: the flush word's address and key at the end of the blob (peers without it, or with a name
     * too long to leave room, get writes with FI_DELIVERY_COMPLETE instead) */
    if (e->flush && len <= DION__ENGINE_ADDR_MAX - FLUSH_TRAILER) {
        uint64_t t[3] = {FLUSH_MAGIC, (e->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)e->fword : 0,
                         fi_mr_key(e->fword_mr.mr)};
        memcpy(out->bytes + DION__ENGINE_ADDR_MAX - FLUSH_TRAILER, t, sizeof t);
    }
    return DION_SUCCESS;
}

static dion_status_t ofi_connect(dion__engine_t *e, const dion__engine_addr_t *all, int nranks)
{
    if (nranks != e->nranks)
        return dion__error_set(DION_ERR_INVALID_ARG, "ofi connect: %d addresses for %d ranks", nranks,
                               e->nranks);
    if (e->peers) return dion__error_set(DION_ERR_INVALID_ARG, "ofi connect: already connected");
    peer_t *p = calloc((size_t)nranks, sizeof *p);
    if (!p) return dion__error_set(DION_ERR_NO_MEMORY, "ofi connect: out of memory for %d peers", nranks);
    for (int r = 0; r < nranks; r++) {
        if (all[r].engine_version != DION__ENGINE_VERSION || !all[r].len ||
            all[r].len > DION__ENGINE_ADDR_MAX) {
            free(p);
            return dion__error_set(DION_ERR_INVALID_ARG,
                                   "ofi connect: rank %d's address is malformed (version %u, %u bytes)", r,
                                   all[r].engine_version, all[r].len);
        }
        int rc = fi_av_insert(e->av, all[r].bytes, 1, &p[r].addr, 0, NULL);
        if (rc != 1) {
            free(p);
            return dion__error_set(DION_ERR_NETWORK,
                                   "ofi connect: fi_av_insert of rank %d's address failed: %s", r,
                                   rc < 0 ? e->fi->strerror(-rc) : "address rejected");
        }
        p[r].qhead = p[r].qtail = p[r].shead = p[r].fpend = p[r].mhead = p[r].mtail = OFI_NONE;
        uint64_t t[3];
        memcpy(t, all[r].bytes + DION__ENGINE_ADDR_MAX - FLUSH_TRAILER, sizeof t);
        if (e->flush && all[r].len <= DION__ENGINE_ADDR_MAX - FLUSH_TRAILER && t[0] == FLUSH_MAGIC) {
            p[r].fvalid = 1;
            p[r].faddr = t[1];
            p[r].fkey = t[2];
        }
    }
    e->peers = p;
    return DION_SUCCESS;
}

/* ---- registration ---- */

static dion_status_t ofi_mem_reg(dion__engine_t *e, void *base, size_t bytes, int mem, dion__engine_mr_t **mr,
                                 dion__engine_rkey_t *rkey)
{
    if (!base || !bytes || !mr || !rkey)
        return dion__error_set(DION_ERR_INVALID_ARG, "ofi mem_reg: base, bytes, mr and rkey are required");
    if (mem == DION__ENGINE_MEM_CUDA && !e->cuda_mem)
        return dion__error_set(DION_ERR_UNSUPPORTED,
                               "ofi provider %s cannot register GPU memory (no FI_HMEM CUDA support); the "
                               "window needs staging through pinned host memory",
                               dion__ofi_prov_name(e->info));
    struct dion__engine_mr *m = calloc(1, sizeof *m);
    if (!m) return dion__error_set(DION_ERR_NO_MEMORY, "ofi mem_reg: out of memory");
    int rc = mr_register(e, base, bytes, mem, m);
    if (rc) {
        free(m);
        return dion__error_set(rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP ? DION_ERR_UNSUPPORTED
                                                                        : DION_ERR_NETWORK,
                               "ofi: registering %zu bytes of %s memory at %p failed: %s (%d)", bytes,
                               mem == DION__ENGINE_MEM_CUDA ? "GPU" : "host", base, e->fi->strerror(-rc), rc);
    }
    uint64_t key = fi_mr_key(m->mr);
    if (key == FI_KEY_NOTAVAIL) {
        fi_close(&m->mr->fid);
        free(m);
        return dion__error_set(DION_ERR_UNSUPPORTED,
                               "ofi provider %s uses raw memory keys, not supported yet",
                               dion__ofi_prov_name(e->info));
    }
    memset(rkey, 0, sizeof *rkey);
    rkey->addr = (e->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)base : 0;
    rkey->key = key;
    rkey->len = bytes;
    rkey->flags = (uint32_t)mem;
    rkey->engine_version = DION__ENGINE_VERSION;
    if (e->msg && dion__ofi_msg_lkey_add(e, m, key) != DION_SUCCESS) {
        fi_close(&m->mr->fid);
        free(m);
        return DION_ERR_NO_MEMORY;
    }
    e->live_mrs++;
    *mr = m;
    return DION_SUCCESS;
}

static dion_status_t ofi_mem_dereg(dion__engine_t *e, dion__engine_mr_t *m)
{
    if (!m) return DION_SUCCESS;
    if (e->msg) dion__ofi_msg_lkey_del(e, m);
    int rc = fi_close(&m->mr->fid);
    free(m);
    e->live_mrs--;
    return rc ? fi_fail(e, "fi_close(mr)", rc) : DION_SUCCESS;
}

const dion__engine_ops_t dion__engine_ofi = {
    .version = DION__ENGINE_VERSION,
    .name = "ofi",
    .open = ofi_open,
    .query = ofi_query,
    .address = ofi_address,
    .connect = ofi_connect,
    .mem_reg = ofi_mem_reg,
    .mem_dereg = ofi_mem_dereg,
    .put = dion__ofi_put,
    .get = dion__ofi_get,
    .atomic = dion__ofi_atomic,
    .poll = dion__ofi_poll,
    .pending = dion__ofi_pending,
    .close = ofi_close,
    .served = dion__ofi_served,
    .wait_arm = ofi_wait_arm,
    .counts = dion__ofi_counts,
    .put_signal = dion__ofi_put_signal,
};

#else /* built without <rdma/fabric.h>: the engine exists and says why it cannot open */

static dion_status_t ofi_open(const dion__engine_open_args_t *a, dion__engine_t **out, char *why, size_t cap)
{
    *out = NULL;
    if (why && cap)
        snprintf(why, cap,
                 "libdion was built without <rdma/fabric.h>; install libfabric-dev (or pass "
                 "-DDION_FABRIC_INCLUDE_HINT=<dir>) and rebuild to use the ofi engine");
    return DION_ERR_UNSUPPORTED;
}

const dion__engine_ops_t dion__engine_ofi = {
    .version = DION__ENGINE_VERSION, .name = "ofi", .open = ofi_open};

#endif
