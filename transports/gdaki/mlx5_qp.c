/* gdaki/mlx5: queue memory as a DEVX umem, CREATE_CQ and CREATE_QP through DEVX, RST->INIT->RTR->RTS, and
 * memory registration of windows. Every mailbox is built from the named fields of devx_layout.c. See mlx5.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devx_layout.h"
#include "mlx5.h"

#define HOST_PAGE 4096u
#define GPU_PAGE  65536u

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static uint32_t log2u(uint32_t v)
{
    uint32_t l = 0;
    while ((1u << (l + 1)) <= v && l < 31) l++;
    return l;
}

/* Sets a field whose name and width devx_layout.c owns; a failure here is a bug in this file (a name that is
 * not in the table or a value too wide), reported with the table's sentence. */
#define SET(buf, cmd, name, v)                                                                               \
    do {                                                                                                     \
        if ((s = dion__devx_set(buf, sizeof buf, cmd, name, (uint64_t)(v)))) goto out;                       \
    } while (0)

/* ---- queue memory ---- */

static dion_status_t umem_register(dion__mlx5_qp_t *q)
{
    dion__mlx5_t *m = q->m;
    if (q->a.cpu) {
        errno = 0;
        q->umem = m->sym.umem_reg(m->ctx, q->mem, q->mem_bytes, IBV_ACCESS_LOCAL_WRITE);
        if (q->umem) {
            q->umem_path = "host memory";
            return DION_SUCCESS;
        }
        return dion__error_set(
            DION_ERR_NETWORK,
            "gdaki/mlx5: %s: registering %zu bytes of host memory for the queues of "
            "context %u, peer %d as a DEVX umem failed: %s%s",
            m->devname, q->mem_bytes, q->a.ctx, q->a.peer, strerror(errno ? errno : EIO),
            errno == ENOMEM || errno == EPERM ? " (raise the locked-memory limit: ulimit -l)" : "");
    }
    char what[96];
    snprintf(what, sizeof what, "the queues of context %u, peer %d", q->a.ctx, q->a.peer);
    return dion__mlx5_umem_gpu(m, q->mem, q->mem_bytes, what, &q->umem, &q->umem_path);
}

dion_status_t dion__mlx5_umem_gpu(dion__mlx5_t *m, void *mem, size_t bytes, const char *what,
                                  struct mlx5dv_devx_umem **out, const char **path)
{
    *out = NULL;
    char why_dmabuf[384] = "", why[256] = "";
    /* 1: dmabuf, the route that needs no extra kernel module. */
    if (!m->sym.umem_reg_ex) {
        snprintf(why_dmabuf, sizeof why_dmabuf,
                 "libmlx5 lacks mlx5dv_devx_umem_reg_ex (rdma-core older than 38)");
    } else {
        int fd = -1;
        uint64_t off = 0;
        if (m->gpu->dmabuf_fd(m->gpu->arg, (uintptr_t)mem, bytes, &fd, &off, why, sizeof why)) {
            snprintf(why_dmabuf, sizeof why_dmabuf, "no dmabuf fd for the range: %s", why);
        } else {
            struct mlx5dv_devx_umem_in in = {.addr = (void *)(uintptr_t)off, /* offset in the dmabuf */
                                             .size = bytes,
                                             .access = IBV_ACCESS_LOCAL_WRITE,
                                             .pgsz_bitmap = ~(uint64_t)(HOST_PAGE - 1),
                                             .comp_mask = MLX5DV_UMEM_MASK_DMABUF,
                                             .dmabuf_fd = fd};
            errno = 0;
            *out = m->sym.umem_reg_ex(m->ctx, &in);
            int e = errno;
            m->gpu->close_fd(m->gpu->arg, fd); /* the umem keeps its own reference */
            if (*out) {
                *path = "dmabuf";
                return DION_SUCCESS;
            }
            snprintf(why_dmabuf, sizeof why_dmabuf, "mlx5dv_devx_umem_reg_ex(dmabuf) failed: %s",
                     strerror(e ? e : EIO));
        }
    }
    /* 2: the GPU address itself; the kernel resolves it through nvidia-peermem. */
    errno = 0;
    *out = m->sym.umem_reg(m->ctx, mem, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (*out) {
        *path = "nvidia-peermem";
        DION_LOG(DION_LOG_INFO, "gdaki/mlx5: %s registered through nvidia-peermem (%s)", what, why_dmabuf);
        return DION_SUCCESS;
    }
    int e = errno;
    return dion__error_set(
        DION_ERR_UNSUPPORTED,
        "gdaki/mlx5: %s: the NIC cannot register the GPU memory of %s (%zu bytes) as a DEVX umem: dmabuf "
        "route: %s; nvidia-peermem route (mlx5dv_devx_umem_reg): %s%s. gdaki needs GPUDirect RDMA: load "
        "nvidia_peermem (modprobe nvidia_peermem), or use the open NVIDIA kernel module with a kernel and "
        "rdma-core that support dmabuf; or use DION_TRANSPORT=proxy",
        m->devname, what, bytes, why_dmabuf, strerror(e ? e : EIO),
        e == EFAULT || e == EINVAL ? " (is nvidia_peermem loaded?)" : "");
}

dion_status_t dion__mlx5_gpudirect_check(dion__mlx5_t *m)
{
    char why[256] = "";
    void *mem = NULL;
    if (m->gpu->alloc(m->gpu->arg, GPU_PAGE, &mem, why, sizeof why))
        return dion__error_set(DION_ERR_CUDA,
                               "gdaki/mlx5: allocating 64 KiB of GPU memory to try GPUDirect RDMA "
                               "failed: %s",
                               why);
    struct mlx5dv_devx_umem *u = NULL;
    const char *path = NULL;
    dion_status_t s = dion__mlx5_umem_gpu(m, mem, GPU_PAGE, "a 64 KiB trial block", &u, &path);
    if (u) m->sym.umem_dereg(u);
    m->gpu->free(m->gpu->arg, mem);
    return s;
}

static dion_status_t mem_alloc(dion__mlx5_qp_t *q)
{
    dion__mlx5_t *m = q->m;
    char why[256] = "";
    if (q->a.cpu) {
        if (posix_memalign(&q->mem_raw, HOST_PAGE, q->mem_bytes))
            return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no host memory for %zu bytes of queues",
                                   q->mem_bytes);
        q->mem = q->mem_raw;
        memset(q->mem, 0, q->mem_bytes);
        memset(q->mem + q->cq_off, 0xff, (size_t)q->a.ncqe * 64);
        return DION_SUCCESS;
    }
    if (m->gpu->alloc(m->gpu->arg, q->mem_bytes, &q->mem_raw, why, sizeof why))
        return dion__error_set(DION_ERR_CUDA,
                               "gdaki/mlx5: allocating %zu bytes of GPU memory for the SQ, CQ and doorbell "
                               "records of context %u, peer %d failed: %s",
                               q->mem_bytes, q->a.ctx, q->a.peer, why);
    q->mem = q->mem_raw;
    /* SQ and doorbell records zero; CQEs all ones (opcode INVALID, owner 1) until the NIC writes one. */
    if (m->gpu->fill(m->gpu->arg, q->mem, 0, q->mem_bytes, why, sizeof why) ||
        m->gpu->fill(m->gpu->arg, q->mem + q->cq_off, 0xff, (size_t)q->a.ncqe * 64, why, sizeof why))
        return dion__error_set(DION_ERR_CUDA, "gdaki/mlx5: initializing the queue memory failed: %s", why);
    return DION_SUCCESS;
}

/* ---- DEVX objects ---- */

static dion_status_t create_cq(dion__mlx5_qp_t *q)
{
    dion__mlx5_t *m = q->m;
    uint8_t in[272], out[16];
    dion_status_t s;
    const dion__devx_cmd_t C = DION__DEVX_CREATE_CQ;
    if ((s = dion__devx_init(in, sizeof in, C))) goto out;
    SET(in, C, "cqc.cqe_sz", DION__DEVX_CQE_SZ_64);
    SET(in, C, "cqc.cc", 1); /* collapsed: every CQE in entry 0, its wqe_counter the completion watermark */
    SET(in, C, "cqc.oi", 1); /* overrun ignore: nobody ever consumes CQEs to the NIC */
    SET(in, C, "cqc.log_cq_size", log2u(q->a.ncqe));
    SET(in, C, "cqc.uar_page", m->uar->page_id);
    SET(in, C, "cqc.c_eqn", m->eqn);
    SET(in, C, "cqc.log_page_size", 0); /* the firmware takes the page size from the umem */
    SET(in, C, "cqc.dbr_umem_valid", 1);
    SET(in, C, "cqc.dbr_umem_id", q->umem->umem_id);
    SET(in, C, "cqc.dbr_addr", q->cq_dbr_off);
    SET(in, C, "cq_umem_id", q->umem->umem_id);
    SET(in, C, "cq_umem_offset", q->cq_off);
    SET(in, C, "cq_umem_valid", 1);
    memset(out, 0, sizeof out);
    errno = 0;
    q->cq = m->sym.obj_create(m->ctx, in, sizeof in, out, sizeof out);
    if (!q->cq) {
        char step[96];
        snprintf(step, sizeof step, "CREATE_CQ for context %u, peer %d", q->a.ctx, q->a.peer);
        return dion__mlx5_devx_fail(m, step, out, sizeof out, errno);
    }
    uint64_t cqn = 0;
    dion__devx_get(out, sizeof out, DION__DEVX_CREATE_CQ_OUT, "cqn", &cqn);
    q->cqn = (uint32_t)cqn;
out:
    return s;
}

static dion_status_t create_qp(dion__mlx5_qp_t *q)
{
    dion__mlx5_t *m = q->m;
    uint8_t in[272], out[16];
    dion_status_t s;
    const dion__devx_cmd_t C = DION__DEVX_CREATE_QP;
    if ((s = dion__devx_init(in, sizeof in, C))) goto out;
    SET(in, C, "qpc.st", DION__DEVX_QP_ST_RC);
    SET(in, C, "qpc.pm_state", DION__DEVX_QP_PM_MIGRATED);
    SET(in, C, "qpc.pd", m->pdn);
    SET(in, C, "qpc.uar_page", m->uar->page_id);
    SET(in, C, "qpc.user_index", q->uidx);
    SET(in, C, "qpc.log_sq_size", log2u(q->a.nwqebb));
    SET(in, C, "qpc.rq_type", DION__DEVX_QP_RQ_ZERO_LEN); /* one-sided only: no receive queue */
    SET(in, C, "qpc.cqn_snd", q->cqn);
    SET(in, C, "qpc.cqn_rcv", q->cqn);
    SET(in, C, "qpc.log_page_size", 0);
    /* The timestamp format the device accepts by default (the kernel driver's choice for its own QPs). */
    SET(in, C, "qpc.ts_format", m->caps.sq_ts_format == 1 ? DION__DEVX_TS_REAL_TIME : DION__DEVX_TS_DEFAULT);
    SET(in, C, "qpc.dbr_umem_valid", 1);
    SET(in, C, "qpc.dbr_umem_id", q->umem->umem_id);
    SET(in, C, "qpc.dbr_addr", q->qp_dbr_off);
    SET(in, C, "wq_umem_id", q->umem->umem_id);
    SET(in, C, "wq_umem_offset", 0);
    SET(in, C, "wq_umem_valid", 1);
    memset(out, 0, sizeof out);
    errno = 0;
    q->qp = m->sym.obj_create(m->ctx, in, sizeof in, out, sizeof out);
    if (!q->qp) {
        char step[96];
        snprintf(step, sizeof step, "CREATE_QP for context %u, peer %d", q->a.ctx, q->a.peer);
        return dion__mlx5_devx_fail(m, step, out, sizeof out, errno);
    }
    uint64_t qpn = 0;
    dion__devx_get(out, sizeof out, DION__DEVX_CREATE_QP_OUT, "qpn", &qpn);
    q->qpn = (uint32_t)qpn;
out:
    return s;
}

static dion_status_t modify(dion__mlx5_qp_t *q, const uint8_t *in, size_t inlen, const char *name, int to)
{
    uint8_t out[16];
    memset(out, 0, sizeof out);
    errno = 0;
    if (q->m->sym.obj_modify(q->qp, in, inlen, out, sizeof out)) {
        int e = errno;
        char step[128];
        snprintf(step, sizeof step, "%s of QP 0x%x (context %u, peer %d)", name, q->qpn, q->a.ctx, q->a.peer);
        q->state = IBV_QPS_ERR;
        dion_status_t s = dion__mlx5_devx_fail(q->m, step, out, sizeof out, e);
        snprintf(q->why, sizeof q->why, "%s", dion_last_error());
        return s;
    }
    q->state = to;
    return DION_SUCCESS;
}

static dion_status_t rst2init(dion__mlx5_qp_t *q)
{
    dion__mlx5_t *m = q->m;
    uint8_t in[272];
    dion_status_t s;
    const dion__devx_cmd_t C = DION__DEVX_RST2INIT_QP;
    if ((s = dion__devx_init(in, sizeof in, C))) goto out;
    SET(in, C, "qpn", q->qpn);
    SET(in, C, "qpc.pm_state", DION__DEVX_QP_PM_MIGRATED);
    SET(in, C, "qpc.primary_address_path.pkey_index", m->cfg.qp.pkey_index);
    SET(in, C, "qpc.primary_address_path.vhca_port_num", m->port);
    /* Peers write, read and run atomics on memory through this QP; the MRs still decide per region. */
    SET(in, C, "qpc.rwe", 1);
    SET(in, C, "qpc.rre", 1);
    SET(in, C, "qpc.rae", 1);
    SET(in, C, "qpc.atomic_mode", DION__DEVX_QP_ATOMIC_UP_TO_8);
    s = modify(q, in, sizeof in, "RST2INIT", IBV_QPS_INIT);
out:
    return s;
}

/* READ/ATOMIC requests this QP accepts at once as responder, a power of two (log_rra_max). */
static uint32_t resp_depth(const dion__mlx5_t *m)
{
    uint32_t d = m->dattr.max_qp_rd_atom > 0 ? (uint32_t)m->dattr.max_qp_rd_atom : 1;
    if (d > 16) d = 16;
    return 1u << log2u(d);
}

dion_status_t dion__mlx5_qp_create(dion__mlx5_t *m, const dion__mlx5_qp_args_t *args, dion__mlx5_qp_t **out)
{
    *out = NULL;
    uint32_t maxw =
        m->caps.log_max_qp_sz ? 1u << (m->caps.log_max_qp_sz > 15 ? 15 : m->caps.log_max_qp_sz) : 32768;
    if (args->nwqebb < 64 || args->nwqebb > maxw || (args->nwqebb & (args->nwqebb - 1)) || !args->ncqe ||
        (args->ncqe & (args->ncqe - 1)) ||
        (m->caps.log_max_cq_sz && log2u(args->ncqe) > m->caps.log_max_cq_sz) || log2u(args->ncqe) > 31)
        return dion__error_set(
            DION_ERR_INVALID_ARG,
            "gdaki/mlx5: %s: a QP of %u WQEBBs with %u CQEs: WQEBBs must be a power of two "
            "in [64, %u] (log_max_qp_sz %u), CQEs a power of two up to 2^%u",
            m->devname, args->nwqebb, args->ncqe, maxw, m->caps.log_max_qp_sz, m->caps.log_max_cq_sz);
    if (!args->cpu) {
        dion_status_t s = dion__mlx5_gpu_doorbell(m);
        if (s) return s;
    }
    dion__mlx5_qp_t *q = calloc(1, sizeof *q);
    if (!q) return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for a QP");
    q->m = m;
    q->a = *args;
    q->uidx = m->next_uidx++ & 0xffffff;
    q->state = IBV_QPS_RESET;
    /* SQ at 0, CQ on its own page, then the two doorbell records on their own 64-byte lines. */
    q->cq_off = align_up((size_t)args->nwqebb * 64, HOST_PAGE);
    q->qp_dbr_off = align_up(q->cq_off + (size_t)args->ncqe * 64, 64);
    q->cq_dbr_off = q->qp_dbr_off + 64;
    q->mem_bytes = align_up(q->cq_dbr_off + 64, args->cpu ? HOST_PAGE : GPU_PAGE);
    dion_status_t s;
    if ((s = mem_alloc(q)) || (s = umem_register(q)) || (s = create_cq(q)) || (s = create_qp(q)) ||
        (s = rst2init(q)))
        goto fail;
    q->psn = (q->qpn * 2654435761u + (uint32_t)m->rank) & 0xffffff;
    dion__mlx5_qp_view_t *v = &q->view;
    v->sq = q->mem;
    v->dbrec = (uint32_t *)(q->mem + q->qp_dbr_off) + 1; /* [0] receive counter, [1] send counter */
    v->cq = q->mem + q->cq_off;
    v->qpn = q->qpn;
    v->wq_mask = args->nwqebb - 1;
    v->log_ncqe = log2u(args->ncqe);
    v->hostmem = args->cpu;
    /* An inline WRITE's WQE (ctrl, raddr, 4-byte header, payload) stays within 4 WQEBBs and the device's
     * largest send WQE. */
    uint32_t wqe_max = m->caps.max_wqe_sz_sq ? m->caps.max_wqe_sz_sq : 256;
    v->max_inline = (wqe_max < 256 ? wqe_max : 256) - 36;
    if (args->cpu) {
        v->db = (uint64_t *)m->uar->reg_addr;
    } else if (m->db_mode == DION__MLX5_DB_GPU) {
        v->db = m->db_gpu;
    } else {
        char why[256] = "";
        if (m->gpu->alloc_mapped(m->gpu->arg, 64, (void **)&q->mbox_host, (void **)&q->mbox_dev, why,
                                 sizeof why)) {
            s = dion__error_set(DION_ERR_CUDA,
                                "gdaki/mlx5: no GPU-visible host memory for the CPU doorbell's mailbox of "
                                "context %u, peer %d: %s",
                                args->ctx, args->peer, why);
            goto fail;
        }
        memset(q->mbox_host, 0, 64);
        v->db = q->mbox_dev;
        if ((s = dion__mlx5_db_add(m, q))) goto fail;
    }
    *out = q;
    return DION_SUCCESS;
fail:
    dion__mlx5_qp_destroy(q);
    return s;
}

void dion__mlx5_qp_blob(const dion__mlx5_qp_t *q, uint8_t out[DION__VERBS_ADDR_BYTES])
{
    const dion__mlx5_t *m = q->m;
    dion__verbs_addr_t a = {.qpn = q->qpn,
                            .psn = q->psn,
                            .lid = m->pattr.lid,
                            .link = m->pattr.link_layer,
                            .mtu = (uint8_t)m->pattr.active_mtu,
                            .global = m->gid_index >= 0,
                            .rd_atom = (uint8_t)resp_depth(m)};
    memcpy(a.gid, m->gid, 16);
    dion__verbs_addr_pack(&a, out);
}

/* RoCE: the destination MAC for the peer's GID, resolved by the kernel through an address handle (it knows
 * the neighbour table and the route), as mlx5's own QP setup does. */
static dion_status_t roce_rmac(dion__mlx5_qp_t *q, uint8_t rmac[6])
{
    dion__mlx5_t *m = q->m;
    struct ibv_ah_attr aa = {.is_global = 1, .port_num = m->port, .sl = m->cfg.qp.sl};
    memcpy(aa.grh.dgid.raw, q->remote.gid, 16);
    aa.grh.sgid_index = (uint8_t)m->gid_index;
    aa.grh.hop_limit = m->cfg.qp.hop_limit;
    aa.grh.traffic_class = m->cfg.qp.traffic_class;
    errno = 0;
    struct ibv_ah *ah = m->sym.create_ah(m->pd, &aa);
    char g[64];
    dion__verbs_gid_text(q->remote.gid, g, sizeof g);
    if (!ah)
        return dion__error_set(DION_ERR_NETWORK,
                               "gdaki/mlx5: %s: no route to rank %d's GID %s from GID index %d "
                               "(ibv_create_ah: %s); check the IP configuration of the port's network "
                               "interface, or DION_IB_GID_INDEX",
                               m->devname, q->a.peer, g, m->gid_index, strerror(errno ? errno : EIO));
    struct mlx5dv_ah dvah = {0};
    struct mlx5dv_obj obj = {.ah = {.in = ah, .out = &dvah}};
    int r = m->sym.init_obj(&obj, MLX5DV_OBJ_AH);
    if (!r && dvah.av) memcpy(rmac, dvah.av->rmac, 6);
    m->sym.destroy_ah(ah);
    if (r || !dvah.av)
        return dion__error_set(DION_ERR_NETWORK, "gdaki/mlx5: %s: mlx5dv_init_obj(AH) gave no MAC for GID %s",
                               m->devname, g);
    return DION_SUCCESS;
}

static dion_status_t init2rtr(dion__mlx5_qp_t *q)
{
    dion__mlx5_t *m = q->m;
    const dion__verbs_addr_t *r = &q->remote;
    uint8_t in[272];
    dion_status_t s;
    const dion__devx_cmd_t C = DION__DEVX_INIT2RTR_QP;
    int roce = m->pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
    uint8_t rmac[6] = {0};
    if (roce && (s = roce_rmac(q, rmac))) return s;
    if ((s = dion__devx_init(in, sizeof in, C))) goto out;
    SET(in, C, "qpn", q->qpn);
    SET(in, C, "qpc.mtu", r->mtu < m->pattr.active_mtu ? r->mtu : m->pattr.active_mtu);
    SET(in, C, "qpc.log_msg_max", m->caps.log_max_msg && m->caps.log_max_msg < 30 ? m->caps.log_max_msg : 30);
    SET(in, C, "qpc.remote_qpn", r->qpn);
    SET(in, C, "qpc.next_rcv_psn", r->psn);
    SET(in, C, "qpc.min_rnr_nak", m->cfg.qp.min_rnr_timer);
    SET(in, C, "qpc.log_rra_max", log2u(resp_depth(m)));
    SET(in, C, "qpc.primary_address_path.pkey_index", m->cfg.qp.pkey_index);
    SET(in, C, "qpc.primary_address_path.vhca_port_num", m->port);
    if (roce) {
        /* RoCE: Ethernet and IP headers; no LID, no GRH bit (the kernel's mlx5_set_path does the same). */
        SET(in, C, "qpc.primary_address_path.rmac_47_32", (uint32_t)rmac[0] << 8 | rmac[1]);
        SET(in, C, "qpc.primary_address_path.rmac_31_0",
            (uint32_t)rmac[2] << 24 | (uint32_t)rmac[3] << 16 | (uint32_t)rmac[4] << 8 | rmac[5]);
        SET(in, C, "qpc.primary_address_path.eth_prio", m->cfg.qp.sl & 7);
        if (m->gid_type == IBV_GID_TYPE_ROCE_V2) /* spread QPs over ECMP paths by UDP source port */
            SET(in, C, "qpc.primary_address_path.udp_sport", 0xc000u | ((q->qpn ^ r->qpn) & 0x3fffu));
    } else {
        SET(in, C, "qpc.primary_address_path.rlid", r->lid);
        SET(in, C, "qpc.primary_address_path.sl", m->cfg.qp.sl & 0xf);
        if (m->gid_index >= 0) SET(in, C, "qpc.primary_address_path.grh", 1);
    }
    if (roce || m->gid_index >= 0) {
        SET(in, C, "qpc.primary_address_path.src_addr_index", m->gid_index);
        SET(in, C, "qpc.primary_address_path.hop_limit", m->cfg.qp.hop_limit);
        SET(in, C, "qpc.primary_address_path.tclass", m->cfg.qp.traffic_class);
        if ((s = dion__devx_set_bytes(in, sizeof in, C, "qpc.primary_address_path.rgid_rip", r->gid, 16)))
            goto out;
    }
    s = modify(q, in, sizeof in, "INIT2RTR", IBV_QPS_RTR);
out:
    return s;
}

static dion_status_t rtr2rts(dion__mlx5_qp_t *q)
{
    dion__mlx5_t *m = q->m;
    uint8_t in[272];
    dion_status_t s;
    const dion__devx_cmd_t C = DION__DEVX_RTR2RTS_QP;
    /* Never more READs/ATOMICs in flight than the peer accepts as responder, nor than this device issues. */
    uint32_t init = m->dattr.max_qp_init_rd_atom > 0 ? (uint32_t)m->dattr.max_qp_init_rd_atom : 1;
    uint32_t sra = init < q->remote.rd_atom ? init : q->remote.rd_atom;
    if ((s = dion__devx_init(in, sizeof in, C))) goto out;
    SET(in, C, "qpn", q->qpn);
    SET(in, C, "qpc.primary_address_path.ack_timeout", m->cfg.qp.timeout);
    SET(in, C, "qpc.log_ack_req_freq", 0);
    SET(in, C, "qpc.log_sra_max", log2u(sra ? sra : 1));
    SET(in, C, "qpc.retry_count", m->cfg.qp.retry_cnt);
    SET(in, C, "qpc.rnr_retry", m->cfg.qp.rnr_retry);
    SET(in, C, "qpc.next_send_psn", q->psn);
    s = modify(q, in, sizeof in, "RTR2RTS", IBV_QPS_RTS);
out:
    return s;
}

dion_status_t dion__mlx5_qp_connect(dion__mlx5_qp_t *q, const uint8_t *blob, size_t len)
{
    dion__mlx5_t *m = q->m;
    dion_status_t s = dion__verbs_addr_unpack(blob, len, &q->remote);
    if (s) return dion__error_wrap(s, "gdaki/mlx5: connecting to rank %d", q->a.peer);
    if (q->state != IBV_QPS_INIT)
        return dion__error_set(DION_ERR_INTERNAL, "gdaki/mlx5: QP 0x%x to rank %d is in state %d, not INIT",
                               q->qpn, q->a.peer, q->state);
    if (q->remote.link != m->pattr.link_layer)
        return dion__error_set(
            DION_ERR_NETWORK,
            "gdaki/mlx5: rank %d's port is %s and this rank's (%s) is %s: an RC QP cannot "
            "join them; use ports of one kind (DION_IB_HCA) or DION_TRANSPORT=proxy with ofi",
            q->a.peer, q->remote.link == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", m->devname,
            m->pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
    if ((s = init2rtr(q)) || (s = rtr2rts(q))) {
        snprintf(q->why, sizeof q->why, "%s", dion_last_error());
        return s;
    }
    return DION_SUCCESS;
}

/* Reverse order of dion__mlx5_qp_create; safe on a partly created QP. */
void dion__mlx5_qp_destroy(dion__mlx5_qp_t *q)
{
    if (!q) return;
    dion__mlx5_t *m = q->m;
    if (q->mbox_host) {
        dion__mlx5_db_remove(m, q);
        m->gpu->free_mapped(m->gpu->arg, q->mbox_host);
    }
    if (q->qp && m->sym.obj_destroy(q->qp))
        DION_LOG(DION_LOG_WARN, "gdaki/mlx5: %s: destroying QP 0x%x failed: %s", m->devname, q->qpn,
                 strerror(errno));
    if (q->cq && m->sym.obj_destroy(q->cq))
        DION_LOG(DION_LOG_WARN, "gdaki/mlx5: %s: destroying CQ 0x%x failed: %s", m->devname, q->cqn,
                 strerror(errno));
    if (q->umem && m->sym.umem_dereg(q->umem))
        DION_LOG(DION_LOG_WARN, "gdaki/mlx5: %s: deregistering a queue umem failed: %s", m->devname,
                 strerror(errno));
    if (q->mem_raw) {
        if (q->a.cpu)
            free(q->mem_raw);
        else
            m->gpu->free(m->gpu->arg, q->mem_raw);
    }
    free(q);
}

/* ---- memory registration ---- */

#define MR_ACCESS                                                                                            \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

dion_status_t dion__mlx5_mr_reg(dion__mlx5_t *m, void *base, size_t bytes, int on_host, dion__mlx5_mr_t **out)
{
    *out = NULL;
    dion__mlx5_mr_t *r = calloc(1, sizeof *r);
    if (!r) return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for a registration");
    char why_dmabuf[384] = "", why[256] = "";
    if (on_host) {
        errno = 0;
        r->mr = m->sym.reg_mr(m->pd, base, bytes, MR_ACCESS);
        r->path = DION__VERBS_REG_HOST;
        if (r->mr) goto done;
        int e = errno;
        free(r);
        return dion__error_set(
            DION_ERR_NETWORK, "gdaki/mlx5: %s: ibv_reg_mr of %zu bytes of host memory at %p failed: %s%s",
            m->devname, bytes, base, strerror(e ? e : EIO),
            e == ENOMEM || e == EPERM ? "; raise the locked-memory limit (ulimit -l)" : "");
    }
    if (!m->sym.reg_dmabuf_mr) {
        snprintf(why_dmabuf, sizeof why_dmabuf,
                 "libibverbs lacks ibv_reg_dmabuf_mr (rdma-core older than 34)");
    } else {
        int fd = -1;
        uint64_t off = 0;
        if (m->gpu->dmabuf_fd(m->gpu->arg, (uintptr_t)base, bytes, &fd, &off, why, sizeof why)) {
            snprintf(why_dmabuf, sizeof why_dmabuf, "no dmabuf fd for the range: %s", why);
        } else {
            errno = 0;
            /* iova = the virtual address, so WQEs give the same addresses on both routes */
            r->mr = m->sym.reg_dmabuf_mr(m->pd, off, bytes, (uintptr_t)base, fd, MR_ACCESS);
            int e = errno;
            m->gpu->close_fd(m->gpu->arg, fd);
            r->path = DION__VERBS_REG_DMABUF;
            if (r->mr) goto done;
            snprintf(why_dmabuf, sizeof why_dmabuf, "ibv_reg_dmabuf_mr failed: %s", strerror(e ? e : EIO));
        }
    }
    errno = 0;
    r->mr = m->sym.reg_mr(m->pd, base, bytes, MR_ACCESS);
    r->path = DION__VERBS_REG_PEERMEM;
    if (r->mr) goto done;
    int e = errno;
    free(r);
    return dion__error_set(
        DION_ERR_UNSUPPORTED,
        "gdaki/mlx5: %s cannot register %zu bytes of GPU memory at %p: dmabuf route: %s; "
        "nvidia-peermem route (ibv_reg_mr): %s%s. Load nvidia_peermem (modprobe "
        "nvidia_peermem), or use the open NVIDIA kernel module with a kernel and rdma-core "
        "that support dmabuf, or put the window in host memory",
        m->devname, bytes, base, why_dmabuf, strerror(e ? e : EIO),
        e == EFAULT || e == EINVAL ? " (is nvidia_peermem loaded?)" : "");
done:
    *out = r;
    return DION_SUCCESS;
}

void dion__mlx5_mr_dereg(dion__mlx5_t *m, dion__mlx5_mr_t *r)
{
    if (!r) return;
    if (r->mr && m->sym.dereg_mr(r->mr))
        DION_LOG(DION_LOG_WARN, "gdaki/mlx5: %s: ibv_dereg_mr failed: %s", m->devname, strerror(errno));
    free(r);
}
