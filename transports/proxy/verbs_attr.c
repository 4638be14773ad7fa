/* proxy/verbs: the pieces that need no device (blobs, QP attributes, GID choice, work requests, completion
 * sentences, registration order, settings). Unit-tested in tests/unit/test_verbs.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_verbs.h"
#include "wire_le.h"

/* ---- blobs ---- */

#define DION__VERBS_ADDR_MAGIC 0x31425644u /* "DVB1" */
#define DION__VERBS_RKEY_MAGIC 0x314b5244u /* "DRK1" */

void dion__verbs_addr_pack(const dion__verbs_addr_t *a, uint8_t out[DION__VERBS_ADDR_BYTES])
{
    memset(out, 0, DION__VERBS_ADDR_BYTES);
    dion__verbs_put_le(out + 0, DION__VERBS_ADDR_MAGIC, 4);
    dion__verbs_put_le(out + 4, a->qpn & 0xffffff, 4);
    dion__verbs_put_le(out + 8, a->psn & 0xffffff, 4);
    dion__verbs_put_le(out + 12, a->lid, 2);
    out[14] = a->link;
    out[15] = a->mtu;
    out[16] = a->global;
    out[17] = a->rd_atom;
    memcpy(out + 20, a->gid, 16);
}

dion_status_t dion__verbs_addr_unpack(const uint8_t *in, size_t len, dion__verbs_addr_t *a)
{
    if (len != DION__VERBS_ADDR_BYTES || dion__verbs_get_le(in, 4) != DION__VERBS_ADDR_MAGIC)
        return dion__error_set(
            DION_ERR_INTERNAL,
            "proxy/verbs: a peer's QP address is malformed (%zu bytes, expected %d starting "
            "with the proxy/verbs tag); are all ranks running the same DION build?",
            len, DION__VERBS_ADDR_BYTES);
    memset(a, 0, sizeof *a);
    a->qpn = (uint32_t)dion__verbs_get_le(in + 4, 4);
    a->psn = (uint32_t)dion__verbs_get_le(in + 8, 4);
    a->lid = (uint16_t)dion__verbs_get_le(in + 12, 2);
    a->link = in[14];
    a->mtu = in[15];
    a->global = in[16];
    a->rd_atom = in[17];
    memcpy(a->gid, in + 20, 16);
    if (a->qpn > 0xffffff || a->psn > 0xffffff || a->mtu < IBV_MTU_256 || a->mtu > IBV_MTU_4096)
        return dion__error_set(
            DION_ERR_INTERNAL,
            "proxy/verbs: a peer's QP address holds impossible values (QPN 0x%x, PSN 0x%x, "
            "MTU code %u)",
            a->qpn, a->psn, a->mtu);
    return DION_SUCCESS;
}

void dion__verbs_rkey_pack(const dion__verbs_mr_t *mr, uint8_t out[DION__VERBS_RKEY_BYTES])
{
    dion__verbs_put_le(out + 0, mr->addr, 8);
    dion__verbs_put_le(out + 8, mr->len, 8);
    dion__verbs_put_le(out + 16, mr->rkey, 4);
    dion__verbs_put_le(out + 20, DION__VERBS_RKEY_MAGIC, 4);
}

dion_status_t dion__verbs_rkey_unpack(const uint8_t *in, size_t len, dion__verbs_rkey_t *rk)
{
    if (len != DION__VERBS_RKEY_BYTES || dion__verbs_get_le(in + 20, 4) != DION__VERBS_RKEY_MAGIC)
        return dion__error_set(DION_ERR_INTERNAL,
                               "proxy/verbs: a peer's memory key is malformed (%zu bytes, expected %d)", len,
                               DION__VERBS_RKEY_BYTES);
    rk->addr = dion__verbs_get_le(in, 8);
    rk->len = dion__verbs_get_le(in + 8, 8);
    rk->rkey = (uint32_t)dion__verbs_get_le(in + 16, 4);
    return DION_SUCCESS;
}

/* ---- QP transitions (masks: the attributes ibv_modify_qp requires for an RC QP at each step) ---- */

int dion__verbs_attr_init(const dion__verbs_qp_params_t *p, struct ibv_qp_attr *a)
{
    memset(a, 0, sizeof *a);
    a->qp_state = IBV_QPS_INIT;
    a->pkey_index = p->pkey_index;
    a->port_num = p->port;
    /* What peers may do to memory through this QP; the MR's own flags still decide per region. */
    a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
}

int dion__verbs_attr_rtr(const dion__verbs_qp_params_t *p, const dion__verbs_addr_t *local,
                         const dion__verbs_addr_t *remote, struct ibv_qp_attr *a)
{
    memset(a, 0, sizeof *a);
    a->qp_state = IBV_QPS_RTR;
    a->path_mtu = remote->mtu < p->mtu ? (enum ibv_mtu)remote->mtu : p->mtu;
    a->dest_qp_num = remote->qpn;
    a->rq_psn = remote->psn;
    a->max_dest_rd_atomic = local->rd_atom; /* what our blob promised the peer */
    a->min_rnr_timer = p->min_rnr_timer;
    a->ah_attr.dlid = remote->lid;
    a->ah_attr.sl = p->sl;
    a->ah_attr.src_path_bits = 0;
    a->ah_attr.port_num = p->port;
    if (p->gid_index >= 0) {
        a->ah_attr.is_global = 1;
        memcpy(a->ah_attr.grh.dgid.raw, remote->gid, 16);
        a->ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
        a->ah_attr.grh.hop_limit = p->hop_limit;
        a->ah_attr.grh.traffic_class = p->traffic_class;
        a->ah_attr.grh.flow_label = 0;
    }
    return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

int dion__verbs_attr_rts(const dion__verbs_qp_params_t *p, const dion__verbs_addr_t *local,
                         const dion__verbs_addr_t *remote, struct ibv_qp_attr *a)
{
    memset(a, 0, sizeof *a);
    a->qp_state = IBV_QPS_RTS;
    a->timeout = p->timeout;
    a->retry_cnt = p->retry_cnt;
    a->rnr_retry = p->rnr_retry;
    a->sq_psn = local->psn;
    /* Never more READs/ATOMICs in flight than the peer accepts as responder. */
    a->max_rd_atomic = p->rd_atom_init < remote->rd_atom ? p->rd_atom_init : remote->rd_atom;
    return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
           IBV_QP_MAX_QP_RD_ATOMIC;
}

/* ---- GID choice ---- */

static int gid_zero(const uint8_t *g)
{
    for (int i = 0; i < 16; i++)
        if (g[i]) return 0;
    return 1;
}

static int gid_v4mapped(const uint8_t *g)
{
    for (int i = 0; i < 10; i++)
        if (g[i]) return 0;
    return g[10] == 0xff && g[11] == 0xff;
}

static int gid_linklocal(const uint8_t *g)
{
    return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

void dion__verbs_gid_text(const uint8_t raw[16], char *buf, size_t cap)
{
    char t[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, raw, t, sizeof t)) snprintf(t, sizeof t, "?");
    snprintf(buf, cap, "%s", t);
}

int dion__verbs_gid_type_parse(const char *text)
{
    if (!text) return -1;
    if (strstr(text, "RoCE v2")) return IBV_GID_TYPE_ROCE_V2;
    if (strstr(text, "RoCE v1") || strstr(text, "IB/RoCE")) return IBV_GID_TYPE_ROCE_V1;
    return -1;
}

static const char *gid_type_name(int type)
{
    return type == IBV_GID_TYPE_ROCE_V2   ? "RoCE v2"
           : type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
           : type == IBV_GID_TYPE_IB      ? "IB"
                                          : "type unknown";
}

/* Lower is better: RoCE v2 before v1 (v2 is routable over IP), IPv4-mapped before global IPv6 before
 * link-local (the address the netdev's IPv4 config made is the one peers can route to); unknown type last. */
static int gid_rank(const dion__verbs_gid_t *e)
{
    int kind = gid_v4mapped(e->raw) ? 0 : gid_linklocal(e->raw) ? 2 : 1;
    int ver = e->type == IBV_GID_TYPE_ROCE_V2 ? 0 : e->type < 0 ? 2 : 1;
    return ver * 3 + kind;
}

int dion__verbs_gid_choose(const dion__verbs_gid_t *table, int n, int link_layer, int forced, char *why,
                           size_t cap)
{
    char t[64];
    if (forced >= 0) {
        if (forced >= n) {
            snprintf(
                why, cap,
                "DION_IB_GID_INDEX=%d is outside the port's GID table (%d entries); unset it for automatic "
                "choice or pick an index that show_gids lists",
                forced, n);
            return -2;
        }
        if (gid_zero(table[forced].raw)) {
            snprintf(
                why, cap,
                "DION_IB_GID_INDEX=%d names an empty GID entry; unset it for automatic choice or pick an "
                "index that show_gids lists with an address",
                forced);
            return -2;
        }
        dion__verbs_gid_text(table[forced].raw, t, sizeof t);
        snprintf(why, cap, "GID %d (%s, %s; DION_IB_GID_INDEX)", forced, gid_type_name(table[forced].type),
                 t);
        return forced;
    }
    if (link_layer != IBV_LINK_LAYER_ETHERNET) {
        snprintf(why, cap, "addressed by LID (InfiniBand, no GRH)");
        return -1;
    }
    int best = -1, best_rank = 1 << 30;
    for (int i = 0; i < n; i++) {
        if (gid_zero(table[i].raw)) continue;
        int r = gid_rank(&table[i]);
        if (r < best_rank) best = i, best_rank = r;
    }
    if (best < 0) {
        snprintf(why, cap,
                 "the RoCE port has no usable GID (%d entries, all empty): give its network interface an IP "
                 "address (ip addr add ...) and bring it up, or set DION_IB_GID_INDEX",
                 n);
        return -2;
    }
    dion__verbs_gid_text(table[best].raw, t, sizeof t);
    snprintf(why, cap, "GID %d (%s, %s)", best, gid_type_name(table[best].type), t);
    return best;
}

dion_status_t dion__verbs_gid_read(const dion__verbs_gid_src_t *src, int link_layer, int forced,
                                   dion__verbs_gid_pick_t *out, char *why, size_t cap)
{
    int n = src->tbl_len > 0 ? src->tbl_len : 0;
    memset(out, 0, sizeof *out);
    out->type = -1;
    dion__verbs_gid_t *t = calloc(n ? (size_t)n : 1, sizeof *t);
    if (!t) {
        snprintf(why, cap, "no memory for a GID table of %d entries", n);
        return DION_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n; i++) {
        t[i].type = -1;
        struct ibv_gid_entry e;
        if (src->query_gid_ex) {
            if (src->query_gid_ex(src->ctx, src->port, (uint32_t)i, &e, 0, sizeof e) == 0) {
                memcpy(t[i].raw, e.gid.raw, 16);
                t[i].type = (int)e.gid_type;
            }
            continue; /* an empty entry answers ENODATA: left zero */
        }
        union ibv_gid g;
        if (src->query_gid && src->query_gid(src->ctx, src->port, i, &g) == 0) memcpy(t[i].raw, g.raw, 16);
        if (link_layer != IBV_LINK_LAYER_ETHERNET) {
            t[i].type = IBV_GID_TYPE_IB;
            continue;
        }
        /* without query_gid_ex (rdma-core before 36) the entry's RoCE version is only in sysfs */
        char path[512], text[64] = "";
        snprintf(path, sizeof path, "%s/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
                 src->sysroot ? src->sysroot : "", src->devname, src->port, i);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(text, sizeof text, f)) text[0] = 0;
            fclose(f);
        }
        t[i].type = dion__verbs_gid_type_parse(text);
    }
    int idx = dion__verbs_gid_choose(t, n, link_layer, forced, why, cap);
    if (idx == -2) {
        free(t);
        return DION_ERR_UNSUPPORTED;
    }
    out->index = idx;
    if (n) { /* the blob always carries a GID (IB by LID: entry 0) so that a peer routing with a GRH has one
              */
        memcpy(out->raw, t[idx >= 0 ? idx : 0].raw, 16);
        out->type = t[idx >= 0 ? idx : 0].type;
    }
    free(t);
    return DION_SUCCESS;
}

/* ---- work requests ---- */

static void wr_common(dion__verbs_wr_t *w, uint64_t wr_id, enum ibv_wr_opcode op, uint64_t laddr,
                      uint32_t lkey, uint32_t bytes, unsigned send_flags)
{
    memset(w, 0, sizeof *w);
    w->wr.wr_id = wr_id;
    w->wr.opcode = op;
    w->wr.send_flags = send_flags;
    w->wr.sg_list = &w->sge;
    w->wr.num_sge = bytes ? 1 : 0; /* a zero-byte WRITE carries no SGE */
    w->sge.addr = laddr;
    w->sge.length = bytes;
    w->sge.lkey = lkey;
}

void dion__verbs_wr_write(dion__verbs_wr_t *w, uint64_t wr_id, uint64_t laddr, uint32_t lkey, uint32_t bytes,
                          uint64_t raddr, uint32_t rkey, unsigned send_flags)
{
    wr_common(w, wr_id, IBV_WR_RDMA_WRITE, laddr, lkey, bytes, send_flags);
    w->wr.wr.rdma.remote_addr = raddr;
    w->wr.wr.rdma.rkey = rkey;
}

void dion__verbs_wr_read(dion__verbs_wr_t *w, uint64_t wr_id, uint64_t laddr, uint32_t lkey, uint32_t bytes,
                         uint64_t raddr, uint32_t rkey, unsigned send_flags)
{
    wr_common(w, wr_id, IBV_WR_RDMA_READ, laddr, lkey, bytes, send_flags);
    w->wr.wr.rdma.remote_addr = raddr;
    w->wr.wr.rdma.rkey = rkey;
}

void dion__verbs_wr_atomic(dion__verbs_wr_t *w, uint64_t wr_id, int op, uint64_t laddr, uint32_t lkey,
                           uint64_t raddr, uint32_t rkey, uint64_t operand, uint64_t compare,
                           unsigned send_flags)
{
    int cs = op == DION__VERBS_CSWAP;
    wr_common(w, wr_id, cs ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD, laddr, lkey, 8,
              send_flags);
    w->wr.wr.atomic.remote_addr = raddr;
    w->wr.wr.atomic.rkey = rkey;
    /* fetch-add: compare_add is the addend; compare-swap: compare_add is compared, swap is written. */
    w->wr.wr.atomic.compare_add = cs ? compare : operand;
    w->wr.wr.atomic.swap = cs ? operand : 0;
}

void dion__verbs_wr_set(dion__verbs_wr_t *w, uint64_t wr_id, uint64_t value, uint64_t raddr, uint32_t rkey,
                        unsigned send_flags)
{
    wr_common(w, wr_id, IBV_WR_RDMA_WRITE, 0, 0, 8, send_flags | IBV_SEND_INLINE);
    w->inline_value = value;
    w->sge.addr = (uintptr_t)&w->inline_value; /* inline: copied at post time, no lkey needed */
    w->wr.wr.rdma.remote_addr = raddr;
    w->wr.wr.rdma.rkey = rkey;
}

unsigned dion__verbs_fence_flag(enum ibv_wr_opcode op, unsigned flags, unsigned rd_atomic_outstanding)
{
    if (!(flags & DION__VERBS_ORDERED) || rd_atomic_outstanding == 0) return 0;
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        return IBV_SEND_FENCE; /* may pass an earlier READ/ATOMIC without it */
    default:
        return 0; /* a READ is not reordered with earlier requests that matter to it */
    }
}

/* ---- completions ---- */

typedef struct {
    enum ibv_wc_status status;
    const char *name;
    dion_status_t code;
    const char *text; /* what it means and what to do */
} wc_info_t;

static const wc_info_t wc_table[] = {
    {IBV_WC_SUCCESS, "IBV_WC_SUCCESS", DION_SUCCESS, "success"},
    {IBV_WC_LOC_LEN_ERR, "IBV_WC_LOC_LEN_ERR", DION_ERR_INTERNAL,
     "local length error: the message is longer than the port or QP allows (a DION bug: report it)"},
    {IBV_WC_LOC_QP_OP_ERR, "IBV_WC_LOC_QP_OP_ERR", DION_ERR_INTERNAL,
     "local QP operation error: the work request does not fit this QP (too much inline data or too many "
     "SGEs; a DION bug: report it)"},
    {IBV_WC_LOC_EEC_OP_ERR, "IBV_WC_LOC_EEC_OP_ERR", DION_ERR_INTERNAL,
     "local EE context operation error (reliable datagram only; DION uses RC, so the provider misbehaves)"},
    {IBV_WC_LOC_PROT_ERR, "IBV_WC_LOC_PROT_ERR", DION_ERR_INVALID_ARG,
     "local protection error: the local buffer is not inside a memory region of this protection domain (a "
     "source or result buffer outside every registered window, or a window destroyed while in use)"},
    {IBV_WC_WR_FLUSH_ERR, "IBV_WC_WR_FLUSH_ERR", DION_ERR_NETWORK,
     "flushed without executing: the QP had already failed on an earlier operation (see the first error "
     "reported for this peer)"},
    {IBV_WC_MW_BIND_ERR, "IBV_WC_MW_BIND_ERR", DION_ERR_INTERNAL,
     "memory window bind error (DION binds no memory windows; the provider misbehaves)"},
    {IBV_WC_BAD_RESP_ERR, "IBV_WC_BAD_RESP_ERR", DION_ERR_NETWORK,
     "bad response: the responder answered with an unexpected transport opcode; check that both NICs' "
     "firmware and drivers are sane"},
    {IBV_WC_LOC_ACCESS_ERR, "IBV_WC_LOC_ACCESS_ERR", DION_ERR_INTERNAL,
     "local access error: the READ or atomic result could not be written into the local buffer (its region "
     "lacks local write access)"},
    {IBV_WC_REM_INV_REQ_ERR, "IBV_WC_REM_INV_REQ_ERR", DION_ERR_REMOTE_ACCESS,
     "remote invalid request: the peer rejected the request (atomics not enabled on its QP, an atomic "
     "address "
     "not 8-byte aligned, or a message longer than its port allows)"},
    {IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_ACCESS_ERR", DION_ERR_REMOTE_ACCESS,
     "remote access error: the peer refused the address or key (outside its registered window, a stale key "
     "of a destroyed window, or missing remote access rights); run with DION_CHECK=1 to catch bad offsets "
     "before they are sent"},
    {IBV_WC_REM_OP_ERR, "IBV_WC_REM_OP_ERR", DION_ERR_NETWORK,
     "remote operation error: the peer's NIC could not complete the request (its QP or memory failed, e.g. "
     "GPU memory it could not reach)"},
    {IBV_WC_RETRY_EXC_ERR, "IBV_WC_RETRY_EXC_ERR", DION_ERR_PEER_FAILED,
     "transport retry counter exceeded: the peer did not acknowledge within DION_IB_RETRY_CNT retries of "
     "DION_IB_TIMEOUT each; the peer process may have died, the link or switch is down, or (RoCE) the GID, "
     "VLAN or route does not reach the peer (check DION_IB_GID_INDEX)"},
    {IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR", DION_ERR_NETWORK,
     "receiver-not-ready retry counter exceeded: the peer had no receive posted; DION posts no SENDs, so the "
     "QP is connected to the wrong peer QP (ranks running different builds?)"},
    {IBV_WC_LOC_RDD_VIOL_ERR, "IBV_WC_LOC_RDD_VIOL_ERR", DION_ERR_INTERNAL,
     "local RDD violation (reliable datagram only; DION uses RC, so the provider misbehaves)"},
    {IBV_WC_REM_INV_RD_REQ_ERR, "IBV_WC_REM_INV_RD_REQ_ERR", DION_ERR_NETWORK,
     "remote invalid RD request (reliable datagram only; the peer's QP is not what DION connected)"},
    {IBV_WC_REM_ABORT_ERR, "IBV_WC_REM_ABORT_ERR", DION_ERR_PEER_FAILED,
     "remote aborted: the peer stopped the operation (its process or QP went away)"},
    {IBV_WC_INV_EECN_ERR, "IBV_WC_INV_EECN_ERR", DION_ERR_INTERNAL,
     "invalid EE context number (reliable datagram only; the provider misbehaves)"},
    {IBV_WC_INV_EEC_STATE_ERR, "IBV_WC_INV_EEC_STATE_ERR", DION_ERR_INTERNAL,
     "invalid EE context state (reliable datagram only; the provider misbehaves)"},
    {IBV_WC_FATAL_ERR, "IBV_WC_FATAL_ERR", DION_ERR_NETWORK,
     "fatal error: the NIC reported a catastrophic error; check dmesg and the NIC's health"},
    {IBV_WC_RESP_TIMEOUT_ERR, "IBV_WC_RESP_TIMEOUT_ERR", DION_ERR_PEER_FAILED,
     "response timeout: the peer did not answer a READ or atomic in time; the peer process may have died or "
     "the link is down"},
    {IBV_WC_GENERAL_ERR, "IBV_WC_GENERAL_ERR", DION_ERR_NETWORK,
     "general error reported by the provider; the vendor error code says more (check dmesg)"},
    {IBV_WC_TM_ERR, "IBV_WC_TM_ERR", DION_ERR_INTERNAL,
     "tag matching error (DION uses no tag matching; the provider misbehaves)"},
    {IBV_WC_TM_RNDV_INCOMPLETE, "IBV_WC_TM_RNDV_INCOMPLETE", DION_ERR_INTERNAL,
     "tag matching rendezvous incomplete (DION uses no tag matching; the provider misbehaves)"},
};

static const wc_info_t *wc_find(enum ibv_wc_status s)
{
    for (size_t i = 0; i < sizeof wc_table / sizeof wc_table[0]; i++)
        if (wc_table[i].status == s) return &wc_table[i];
    return NULL;
}

const char *dion__verbs_wc_status_name(enum ibv_wc_status status)
{
    const wc_info_t *e = wc_find(status);
    return e ? e->name : "unknown ibv_wc_status";
}

dion_status_t dion__verbs_wc_describe(enum ibv_wc_status status, uint32_t vendor_err, const char *op,
                                      int peer, int ctx, uint32_t local_qpn, uint32_t remote_qpn, char *buf,
                                      size_t cap)
{
    const wc_info_t *e = wc_find(status);
    if (e && e->code == DION_SUCCESS) {
        snprintf(buf, cap, "proxy/verbs: %s to rank %d (context %d, QP 0x%x -> peer QP 0x%x) succeeded", op,
                 peer, ctx, local_qpn, remote_qpn);
        return DION_SUCCESS;
    }
    if (!e) {
        snprintf(buf, cap,
                 "proxy/verbs: %s to rank %d (context %d, QP 0x%x -> peer QP 0x%x) failed with completion "
                 "status %d, which this DION does not know (vendor error 0x%x); a newer rdma-core added it",
                 op, peer, ctx, local_qpn, remote_qpn, (int)status, vendor_err);
        return DION_ERR_NETWORK;
    }
    snprintf(buf, cap,
             "proxy/verbs: %s to rank %d (context %d, QP 0x%x -> peer QP 0x%x) failed: %s (%s, vendor error "
             "0x%x)",
             op, peer, ctx, local_qpn, remote_qpn, e->text, e->name, vendor_err);
    return e->code;
}

/* ---- asynchronous events ---- */

dion_status_t dion__verbs_async_describe(enum ibv_event_type type, const char *dev, int port, int peer,
                                         uint32_t qpn, char *buf, size_t cap)
{
    const char *what = NULL, *todo = "";
    dion_status_t s = DION_ERR_NETWORK;
    switch (type) {
    case IBV_EVENT_QP_FATAL:
        what = "QP fatal error: the NIC could not go on with this QP (catastrophic error on it)";
        todo = "; check dmesg";
        break;
    case IBV_EVENT_QP_REQ_ERR:
        what = "QP invalid request error: the peer sent a request this QP could not accept";
        todo = "; are all ranks running the same DION build?";
        break;
    case IBV_EVENT_QP_ACCESS_ERR:
        what = "QP access violation: a peer's request touched memory outside what this rank registered";
        todo = "; run with DION_CHECK=1 to catch bad offsets at their source";
        s = DION_ERR_REMOTE_ACCESS;
        break;
    case IBV_EVENT_PATH_MIG_ERR:
        what = "path migration error: the QP lost its path to the peer";
        break;
    case IBV_EVENT_CQ_ERR:
        what = "completion queue error: a CQ overran (a DION bug: report it)";
        s = DION_ERR_INTERNAL;
        break;
    case IBV_EVENT_SRQ_ERR:
        what = "shared receive queue error (DION uses none; the provider misbehaves)";
        s = DION_ERR_INTERNAL;
        break;
    case IBV_EVENT_WQ_FATAL:
        what = "work queue fatal error (DION uses no WQ objects; the provider misbehaves)";
        s = DION_ERR_INTERNAL;
        break;
    case IBV_EVENT_PORT_ERR:
        what = "port went down: operations to every peer through it will fail";
        todo = "; check the cable, the switch and (IB) the subnet manager with ibstat";
        break;
    case IBV_EVENT_DEVICE_FATAL:
        what = "device fatal error: the NIC stopped working";
        todo = "; check dmesg and the NIC's firmware; the NIC needs a reset";
        break;
    default: /* COMM_EST, SQ_DRAINED, PATH_MIG, PORT_ACTIVE, LID/PKEY/SM/GID change, SRQ limit, last WQE,
              * client reregister: nothing to do */
        s = DION_SUCCESS;
        break;
    }
    if (s == DION_SUCCESS) {
        snprintf(buf, cap, "proxy/verbs: %s port %d: asynchronous event %d (no action needed)", dev, port,
                 (int)type);
        return s;
    }
    if (peer >= 0)
        snprintf(buf, cap, "proxy/verbs: %s: %s; QP 0x%x to rank %d%s", dev, what, qpn, peer, todo);
    else
        snprintf(buf, cap, "proxy/verbs: %s port %d: %s%s", dev, port, what, todo);
    return s;
}

/* ---- registration order ---- */

dion_status_t dion__verbs_reg_with(const dion__verbs_reg_ops_t *ops, struct ibv_pd *pd, void *addr,
                                   size_t len, int kind, struct ibv_mr **mr, int *path)
{
    char why_dmabuf[384] = "", why_peermem[256];
    *mr = NULL;
    if (kind != DION__VERBS_MEM_GPU) {
        errno = 0;
        *mr = ops->reg_mr(ops->arg, pd, addr, len, DION__VERBS_MR_ACCESS);
        if (*mr) {
            *path = DION__VERBS_REG_HOST;
            return DION_SUCCESS;
        }
        int e = errno;
        return dion__error_set(
            DION_ERR_NETWORK, "proxy/verbs: ibv_reg_mr of %zu bytes of host memory at %p failed: %s%s", len,
            addr, strerror(e),
            e == ENOMEM || e == EPERM ? "; raise the locked-memory limit (ulimit -l unlimited, or memlock in "
                                        "/etc/security/limits.conf)"
                                      : "");
    }
    /* 1: dmabuf, the route that needs no extra kernel module. */
    if (!ops->reg_dmabuf) {
        snprintf(why_dmabuf, sizeof why_dmabuf,
                 "libibverbs lacks ibv_reg_dmabuf_mr (rdma-core older than 34)");
    } else {
        int fd = -1;
        uint64_t off = 0;
        char why[256] = "";
        if (ops->dmabuf_fd(ops->arg, (uintptr_t)addr, len, &fd, &off, why, sizeof why) != 0) {
            snprintf(why_dmabuf, sizeof why_dmabuf, "no dmabuf fd for the range: %s", why);
        } else {
            errno = 0;
            *mr = ops->reg_dmabuf(ops->arg, pd, off, len, (uintptr_t)addr, fd, DION__VERBS_MR_ACCESS);
            int e = errno;
            ops->close_fd(ops->arg, fd); /* the MR keeps its own reference */
            if (*mr) {
                *path = DION__VERBS_REG_DMABUF;
                return DION_SUCCESS;
            }
            snprintf(why_dmabuf, sizeof why_dmabuf, "ibv_reg_dmabuf_mr failed: %s%s", strerror(e),
                     e == EOPNOTSUPP || e == EPROTONOSUPPORT || e == EINVAL
                         ? " (the kernel or NIC driver lacks dmabuf support)"
                         : "");
        }
    }
    /* 2: plain registration of the GPU address; the NIC driver resolves it through nvidia-peermem. */
    errno = 0;
    *mr = ops->reg_mr(ops->arg, pd, addr, len, DION__VERBS_MR_ACCESS);
    if (*mr) {
        *path = DION__VERBS_REG_PEERMEM;
        DION_LOG(DION_LOG_INFO, "proxy/verbs: GPU memory at %p registered through nvidia-peermem (%s)", addr,
                 why_dmabuf);
        return DION_SUCCESS;
    }
    int e = errno;
    snprintf(why_peermem, sizeof why_peermem, "%s%s", strerror(e),
             e == EFAULT || e == EINVAL ? " (is the nvidia_peermem module loaded?)" : "");
    return dion__error_set(
        DION_ERR_UNSUPPORTED,
        "proxy/verbs: the NIC cannot register %zu bytes of GPU memory at %p: dmabuf route: "
        "%s; nvidia-peermem route (ibv_reg_mr): %s. Load nvidia_peermem (modprobe "
        "nvidia_peermem), or use the open NVIDIA kernel module with a kernel and NIC driver "
        "that support dmabuf, or put the window in host memory (dion_win_alloc with "
        "on_host=1)",
        len, addr, why_dmabuf, why_peermem);
}

/* ---- settings ---- */

dion_status_t dion__verbs_cfg_read(dion__verbs_cfg_t *c)
{
    long long port, gid, timeout, retry, sl, tc, sq, cq;
    memset(c, 0, sizeof *c);
    dion_status_t s;
    if ((s = dion__cfg_int("DION_IB_PORT", 0, 255, &port)) ||
        (s = dion__cfg_int("DION_IB_GID_INDEX", -1, 65535, &gid)) ||
        (s = dion__cfg_int("DION_IB_TIMEOUT", 1, 31, &timeout)) ||
        (s = dion__cfg_int("DION_IB_RETRY_CNT", 0, 7, &retry)) ||
        (s = dion__cfg_int("DION_IB_SL", 0, 15, &sl)) || (s = dion__cfg_int("DION_IB_TC", 0, 255, &tc)) ||
        (s = dion__cfg_int("DION_IB_QP_DEPTH", 16, 32768, &sq)) ||
        (s = dion__cfg_int("DION_IB_CQ_DEPTH", 64, 1 << 22, &cq)))
        return s;
    const char *hca = dion__cfg_env("DION_IB_HCA");
    if (hca) {
        if (strlen(hca) >= sizeof c->hca)
            return dion__error_set(DION_ERR_INVALID_ARG, "DION_IB_HCA='%s' is longer than %zu characters",
                                   hca, sizeof c->hca - 1);
        snprintf(c->hca, sizeof c->hca, "%s", hca);
        char *colon = strchr(c->hca, ':');
        if (colon) {
            char *end = NULL;
            long p = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || *end || p < 1 || p > 255)
                return dion__error_set(DION_ERR_INVALID_ARG,
                                       "DION_IB_HCA='%s': the part after ':' must be a port number 1..255",
                                       hca);
            *colon = 0;
            if (port && port != p)
                return dion__error_set(
                    DION_ERR_INVALID_ARG,
                    "DION_IB_HCA='%s' names port %ld but DION_IB_PORT=%lld; set one of them", hca, p, port);
            port = p;
        }
    }
    c->port = (int)port;
    c->gid_index = (int)gid;
    c->qp.port = (uint8_t)port;
    c->qp.timeout = (uint8_t)timeout;
    c->qp.retry_cnt = (uint8_t)retry;
    c->qp.rnr_retry = 7;
    c->qp.min_rnr_timer = 12;
    c->qp.sl = (uint8_t)sl;
    c->qp.traffic_class = (uint8_t)tc;
    c->qp.hop_limit = 64;
    c->qp.gid_index = (int)gid;
    c->sq_depth = (int)sq;
    c->cq_depth = (int)cq;
    return DION_SUCCESS;
}
