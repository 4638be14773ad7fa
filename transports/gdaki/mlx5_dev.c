/* gdaki/mlx5: the device (DEVX context, PD, HCA caps, port, GID, UAR) and who rings doorbells for GPU
 * threads. See mlx5.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devx_layout.h"
#include "mlx5.h"
#include "src/cuda.h"

/* The firmware's command status codes (the Linux driver's MLX5_CMD_STAT_*, which dmesg prints by name). */
const char *dion__mlx5_devx_status_name(uint32_t status)
{
    switch (status) {
    case 0x0:
        return "ok";
    case 0x1:
        return "internal error";
    case 0x2:
        return "bad operation";
    case 0x3:
        return "bad parameter";
    case 0x4:
        return "bad system state";
    case 0x5:
        return "bad resource";
    case 0x6:
        return "resource busy";
    case 0x8:
        return "limits exceeded";
    case 0x9:
        return "bad resource state";
    case 0xa:
        return "bad index";
    case 0xf:
        return "no resources";
    case 0x10:
        return "bad input length";
    case 0x11:
        return "bad output length";
    case 0x40:
        return "bad QP state";
    case 0x50:
        return "bad packet";
    case 0x51:
        return "bad size";
    default:
        return "unknown status";
    }
}

dion_status_t dion__mlx5_devx_fail(const dion__mlx5_t *m, const char *step, const void *out, size_t outlen,
                                   int err)
{
    uint64_t status = 0, syndrome = 0;
    if (out && outlen >= 8) {
        dion__devx_get(out, outlen, DION__DEVX_CMD_OUT, "status", &status);
        dion__devx_get(out, outlen, DION__DEVX_CMD_OUT, "syndrome", &syndrome);
    }
    if (status)
        return dion__error_set(DION_ERR_NETWORK,
                               "gdaki/mlx5: %s: %s failed in the firmware: DEVX status 0x%llx (%s), syndrome "
                               "0x%08llx (%s); the kernel log (dmesg) shows the same pair, and NVIDIA's "
                               "firmware release notes or support decode the syndrome",
                               m->devname, step, (unsigned long long)status,
                               dion__mlx5_devx_status_name((uint32_t)status), (unsigned long long)syndrome,
                               strerror(err ? err : EIO));
    return dion__error_set(DION_ERR_NETWORK, "gdaki/mlx5: %s: %s failed before the firmware answered: %s%s",
                           m->devname, step, strerror(err ? err : EIO),
                           err == EPERM || err == EACCES
                               ? " (this process lacks the rights DEVX needs for it: run with CAP_NET_RAW or "
                                 "as root, or ask for the device with its DEVX rights in the container)"
                               : "");
}

/* mlx5dv_open_device with DEVX, for mlx5 devices only; a device that does not open adds its reason to the
 * list the sentence shows. */
static struct ibv_context *open_devx(void *arg, struct ibv_device *dev, const char *name, char *seen,
                                     size_t cap)
{
    dion__mlx5_t *m = arg;
    if (!m->sym.is_supported(dev)) {
        dion__verbs_appendf(seen, cap, "%s is not an mlx5 device; ", name);
        return NULL;
    }
    struct mlx5dv_context_attr attr = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
    errno = 0;
    struct ibv_context *c = m->sym.open_device(dev, &attr);
    if (!c) {
        int e = errno;
        dion__verbs_appendf(
            seen, cap, "%s cannot be opened with DEVX (mlx5dv_open_device: %s%s); ", name,
            strerror(e ? e : EIO),
            e == EOPNOTSUPP || e == EPROTONOSUPPORT
                ? ": the kernel driver or firmware offers no DEVX user context (needs mlx5_ib of Linux "
                  "5.1+ or MLNX_OFED, and a ConnectX-5 or newer)"
            : e == EPERM || e == EACCES ? ": this process is not allowed DEVX on it"
                                        : "");
    }
    return c;
}

static int query_port(void *arg, struct ibv_context *c, uint8_t port, struct ibv_port_attr *pa)
{
    return dion__mlx5_query_port(&((dion__mlx5_t *)arg)->sym, c, port, pa);
}

static dion_status_t choose_device(dion__mlx5_t *m)
{
    dion__verbs_dev_src_t src = {m->cfg.hca,
                                 m->cfg.port,
                                 1,
                                 0,
                                 m->sym.get_device_list,
                                 m->sym.free_device_list,
                                 m->sym.get_device_name,
                                 m->sym.query_device,
                                 m->sym.close_device,
                                 open_devx,
                                 query_port,
                                 m};
    dion__verbs_dev_pick_t pick, *pk = &pick;
    dion_status_t st = DION_SUCCESS;
    switch (dion__verbs_dev_choose(&src, pk)) {
    case DION__VERBS_DEV_OK:
        m->ctx = pk->ctx;
        m->dattr = pk->dattr;
        m->pattr = pk->pattr;
        m->port = pk->port;
        snprintf(m->devname, sizeof m->devname, "%.63s", pk->name);
        break;
    case DION__VERBS_DEV_LIST_FAILED:
        st = dion__error_set(
            DION_ERR_UNSUPPORTED, "gdaki/mlx5: ibv_get_device_list failed: %s%s", strerror(pk->err),
            pk->err == ENOSYS ? " (the kernel has no RDMA support: load mlx5_ib and ib_uverbs)" : "");
        break;
    case DION__VERBS_DEV_NONE:
        st = dion__error_set(DION_ERR_UNSUPPORTED,
                             "gdaki/mlx5: no RDMA device (ibv_get_device_list lists none; is mlx5_ib "
                             "loaded and rdma-core's ibverbs-providers installed?)");
        break;
    case DION__VERBS_DEV_NO_HCA:
        st = dion__error_set(DION_ERR_INVALID_ARG, "gdaki/mlx5: DION_IB_HCA=%s names no RDMA device",
                             m->cfg.hca);
        break;
    default:
        st = dion__error_set(DION_ERR_UNSUPPORTED,
                             "gdaki/mlx5: no mlx5 device with DEVX and an ACTIVE port: %s-> gdaki needs a "
                             "ConnectX NIC opened with DEVX; set DION_IB_HCA / DION_IB_PORT, or use "
                             "DION_TRANSPORT=proxy",
                             pk->seen);
    }
    return st;
}

/* QUERY_HCA_CAP (current values) of one cap type into out (16 + 4096 bytes). */
static dion_status_t query_cap(dion__mlx5_t *m, uint32_t type, uint8_t *out, size_t outlen, const char *step)
{
    uint8_t in[16];
    dion__devx_init(in, sizeof in, DION__DEVX_QUERY_HCA_CAP);
    dion__devx_set(in, sizeof in, DION__DEVX_QUERY_HCA_CAP, "op_mod", (type << 1) | 1u);
    memset(out, 0, outlen);
    errno = 0;
    if (m->sym.general_cmd(m->ctx, in, sizeof in, out, outlen))
        return dion__mlx5_devx_fail(m, step, out, outlen, errno);
    return DION_SUCCESS;
}

static uint32_t cap_get(const uint8_t *out, dion__devx_cmd_t layout, const char *name)
{
    uint64_t v = 0;
    dion__devx_get(out, 16 + 4096, layout, name, &v);
    return (uint32_t)v;
}

static dion_status_t caps_read(dion__mlx5_t *m, uint8_t *out);

static dion_status_t query_caps(dion__mlx5_t *m)
{
    uint8_t *out = malloc(16 + 4096);
    if (!out) return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for QUERY_HCA_CAP");
    dion_status_t s = query_cap(m, DION__DEVX_CAP_GENERAL, out, 16 + 4096, "QUERY_HCA_CAP (general caps)");
    if (!s) s = caps_read(m, out);
    free(out);
    return s;
}

static dion_status_t caps_read(dion__mlx5_t *m, uint8_t *out)
{
    dion_status_t s;
    dion__mlx5_caps_t *c = &m->caps;
#define G(f) c->f = cap_get(out, DION__DEVX_QUERY_HCA_CAP_OUT, "capability.cmd_hca_cap." #f)
    G(log_max_qp_sz);
    G(log_max_cq_sz);
    G(log_max_msg);
    G(cqe_version);
    G(port_type);
    G(roce);
    G(atomic);
    G(log_bf_reg_size);
    G(max_wqe_sz_sq);
    G(sq_ts_format);
#undef G
    if (!c->atomic)
        return dion__error_set(DION_ERR_UNSUPPORTED,
                               "gdaki/mlx5: %s reports no RDMA atomics (HCA cap 'atomic' is 0); gdaki needs "
                               "them for ADD signals and DION atomics: use DION_TRANSPORT=proxy",
                               m->devname);
    if ((s = query_cap(m, DION__DEVX_CAP_ATOMIC, out, 16 + 4096, "QUERY_HCA_CAP (atomic caps)"))) return s;
    c->atomic_endianness_mode =
        cap_get(out, DION__DEVX_QUERY_ATOMIC_CAP_OUT, "capability.atomic_caps.atomic_req_8B_endianness_mode");
    c->atomic_operations =
        cap_get(out, DION__DEVX_QUERY_ATOMIC_CAP_OUT, "capability.atomic_caps.atomic_operations");
    c->atomic_size_qp =
        cap_get(out, DION__DEVX_QUERY_ATOMIC_CAP_OUT, "capability.atomic_caps.atomic_size_qp");
    /* Mode 1: 8-byte atomics treat the target word in host byte order, as DION's signals and atomics are
     * stored (the Linux driver switches the device to it at load when it can). Mode 0 (big-endian words)
     * would make ADD signals and fetch-adds wrong on a little-endian host; nic.h has no slot to tell device
     * code yet. */
    if (c->atomic_endianness_mode != 1)
        DION_LOG(DION_LOG_WARN,
                 "gdaki/mlx5: %s: 8-byte atomics use atomic_req_8B_endianness_mode %u (not 1, host order): "
                 "remote ADDs and fetch-adds on DION's host-order words may come out byte-swapped",
                 m->devname, c->atomic_endianness_mode);
    /* The port's link layer and the caps' port type must agree, else the path below is the wrong kind. */
    int eth = m->pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (eth != (c->port_type == DION__DEVX_PORT_TYPE_ETH))
        DION_LOG(DION_LOG_WARN,
                 "gdaki/mlx5: %s port %u has link layer %s but the HCA caps say port type %u; addressing by "
                 "the link layer",
                 m->devname, m->port, eth ? "Ethernet" : "InfiniBand", c->port_type);
    return DION_SUCCESS;
}

static dion_status_t choose_gid(dion__mlx5_t *m)
{
    dion__verbs_gid_src_t src = {m->ctx,           m->devname,          m->port, m->pattr.gid_tbl_len,
                                 m->sym.query_gid, m->sym.query_gid_ex, NULL};
    dion__verbs_gid_pick_t pick;
    char why[512];
    dion_status_t s =
        dion__verbs_gid_read(&src, m->pattr.link_layer, m->cfg.gid_index, &pick, why, sizeof why);
    if (s) return dion__error_set(s, "gdaki/mlx5: %s port %u: %s", m->devname, m->port, why);
    m->gid_index = pick.index;
    m->gid_type = pick.type;
    if (m->pattr.gid_tbl_len > 0) memcpy(m->gid, pick.raw, 16);
    static const int mtu_bytes[] = {0, 256, 512, 1024, 2048, 4096};
    int mtu = m->pattr.active_mtu >= 1 && m->pattr.active_mtu <= 5 ? mtu_bytes[m->pattr.active_mtu] : 0;
    snprintf(m->desc, sizeof m->desc, "%s port %u, %s, %s, LID 0x%x, MTU %d, DEVX", m->devname, m->port,
             m->pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", why, m->pattr.lid, mtu);
    return DION_SUCCESS;
}

/* A UAR of its own when the kernel gives one (NC_DEDICATED), else the context's shared non-cached one, else a
 * BlueFlame one (written only with the 8-byte doorbell, never as BlueFlame). */
static dion_status_t alloc_uar(dion__mlx5_t *m)
{
    static const struct {
        uint32_t type;
        const char *name;
    } kinds[] = {{MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED, "NC_DEDICATED"},
                 {MLX5DV_UAR_ALLOC_TYPE_NC, "NC"},
                 {MLX5DV_UAR_ALLOC_TYPE_BF, "BF"}};
    char tried[256] = "";
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        errno = 0;
        m->uar = m->sym.alloc_uar(m->ctx, kinds[i].type);
        if (m->uar) {
            m->uar_type = kinds[i].name;
            return DION_SUCCESS;
        }
        dion__verbs_appendf(tried, sizeof tried, "%s%s: %s", i ? ", " : "", kinds[i].name,
                            strerror(errno ? errno : EIO));
    }
    return dion__error_set(DION_ERR_NETWORK,
                           "gdaki/mlx5: %s: mlx5dv_devx_alloc_uar failed for every type (%s); the device's "
                           "UARs may be used up by other processes",
                           m->devname, tried);
}

dion_status_t dion__mlx5_open(const dion__mlx5_open_args_t *args, dion__mlx5_t **out)
{
    *out = NULL;
    dion__mlx5_t *m = calloc(1, sizeof *m);
    if (!m) return dion__error_set(DION_ERR_NO_MEMORY, "gdaki/mlx5: no memory for the device");
    m->gpu = args->gpu ? args->gpu : &dion__mlx5_cuda_ops;
    m->db_want = args->doorbell;
    m->rank = args->rank;
    m->gid_index = -1;
    snprintf(m->devname, sizeof m->devname, "(no device yet)");
    dion_status_t s;
    if ((s = dion__verbs_cfg_read(&m->cfg)) ||
        (s = dion__mlx5_sym_load(args->ibv_lib, args->dv_lib, &m->sym)) || (s = choose_device(m)))
        goto fail;
    errno = 0;
    m->pd = m->sym.alloc_pd(m->ctx);
    if (!m->pd) {
        s = dion__error_set(DION_ERR_NETWORK, "gdaki/mlx5: %s: ibv_alloc_pd failed: %s", m->devname,
                            strerror(errno ? errno : EIO));
        goto fail;
    }
    struct mlx5dv_pd dvpd = {0};
    struct mlx5dv_obj obj = {.pd = {.in = m->pd, .out = &dvpd}};
    if (m->sym.init_obj(&obj, MLX5DV_OBJ_PD)) {
        s = dion__error_set(DION_ERR_NETWORK, "gdaki/mlx5: %s: mlx5dv_init_obj(PD) gave no PD number: %s",
                            m->devname, strerror(errno ? errno : EIO));
        goto fail;
    }
    m->pdn = dvpd.pdn;
    if ((s = query_caps(m)) || (s = choose_gid(m)) || (s = alloc_uar(m))) goto fail;
    /* CQs need an event queue number even though gdaki never arms them. */
    errno = 0;
    if (m->sym.query_eqn(m->ctx, 0, &m->eqn)) {
        s = dion__error_set(DION_ERR_NETWORK, "gdaki/mlx5: %s: mlx5dv_devx_query_eqn(0) failed: %s",
                            m->devname, strerror(errno ? errno : EIO));
        goto fail;
    }
    DION_LOG(DION_LOG_INFO,
             "gdaki/mlx5: %s; UAR %s page 0x%x; caps: log_max_qp_sz %u, cqe_version %u, atomic 8-byte "
             "endianness mode %u",
             m->desc, m->uar_type, m->uar->page_id, m->caps.log_max_qp_sz, m->caps.cqe_version,
             m->caps.atomic_endianness_mode);
    *out = m;
    return DION_SUCCESS;
fail:
    dion__mlx5_close(m);
    return s;
}

/* Reverse order of dion__mlx5_open and dion__mlx5_gpu_doorbell; safe on a partly opened device. */
void dion__mlx5_close(dion__mlx5_t *m)
{
    if (!m) return;
    dion__mlx5_db_stop(m);
    if (m->uar_page) m->gpu->unmap_io(m->gpu->arg, m->uar_page);
    if (m->uar) m->sym.free_uar(m->uar);
    if (m->pd) m->sym.dealloc_pd(m->pd);
    if (m->ctx) m->sym.close_device(m->ctx);
    if (m->sym.ibv_handle) dion__mlx5_sym_unload(&m->sym);
    free(m->db.qps);
    free(m);
}

dion_status_t dion__mlx5_gpu_doorbell(dion__mlx5_t *m)
{
    if (m->db_mode) return DION_SUCCESS;
    char why[384] = "";
    int r = -1;
    if (m->db_want != DION__MLX5_DB_CPU) {
        /* The whole UAR page: the register is 8 bytes at 0x800 (or more) into it. */
        uintptr_t page = (uintptr_t)m->uar->reg_addr & ~(uintptr_t)4095;
        void *dev = NULL;
        r = m->gpu->map_io(m->gpu->arg, (void *)page, 4096, &dev, why, sizeof why);
        if (r == 0) {
            m->uar_page = (void *)page;
            m->db_gpu = (uint64_t *)((char *)dev + ((uintptr_t)m->uar->reg_addr - page));
            m->db_mode = DION__MLX5_DB_GPU;
            DION_LOG(DION_LOG_INFO, "gdaki/mlx5: %s: GPU threads ring the doorbell (UAR mapped into the GPU)",
                     m->devname);
            return DION_SUCCESS;
        }
        if (m->db_want == DION__MLX5_DB_GPU)
            return dion__error_set(
                DION_ERR_UNSUPPORTED,
                "gdaki/mlx5: %s: the UAR doorbell page cannot be mapped into the GPU (%s) and "
                "DION_GDAKI_DOORBELL=gpu forbids the CPU doorbell thread; %s",
                m->devname, why,
                r == DION__MLX5_CU_NOT_PERMITTED
                    ? "add 'options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"' to "
                      "/etc/modprobe.d/nvidia.conf and reload the nvidia module, or unset DION_GDAKI_DOORBELL"
                    : "unset DION_GDAKI_DOORBELL to let a CPU thread ring");
    }
    if (m->db_want == DION__MLX5_DB_CPU)
        snprintf(m->db_why, sizeof m->db_why, "DION_GDAKI_DOORBELL=cpu");
    else if (r == DION__MLX5_CU_NOT_PERMITTED)
        snprintf(m->db_why, sizeof m->db_why,
                 "the GPU may not map the NIC's doorbell page (%s): the nvidia module lacks "
                 "NVreg_RegistryDwords=\"PeerMappingOverride=1;\" (add it in /etc/modprobe.d/nvidia.conf and "
                 "reload the module to let GPU threads ring)",
                 why);
    else
        snprintf(m->db_why, sizeof m->db_why, "the GPU cannot map the NIC's doorbell page: %s", why);
    dion_status_t s = dion__mlx5_db_start(m);
    if (s) return s;
    m->db_mode = DION__MLX5_DB_CPU;
    DION_LOG(DION_LOG_WARN, "gdaki/mlx5: %s: a CPU thread rings the doorbells for GPU threads (slower): %s",
             m->devname, m->db_why);
    return DION_SUCCESS;
}

void dion__mlx5_probe(const char *ibv_lib, const char *dv_lib, dion__mlx5_probe_t *p)
{
    memset(p, 0, sizeof *p);
    dion__mlx5_sym_t sym;
    if (dion__mlx5_sym_load(ibv_lib, dv_lib, &sym)) {
        snprintf(p->why, sizeof p->why, "%s", dion_last_error());
        return;
    }
    p->lib_ok = 1;
    p->umem_dmabuf = sym.umem_reg_ex != NULL;
    p->mr_dmabuf = sym.reg_dmabuf_mr != NULL;
    int n = 0;
    struct ibv_device **list = sym.get_device_list(&n);
    if (list) {
        p->ndev = n;
        for (int i = 0; i < n; i++) p->nmlx5 += sym.is_supported(list[i]) ? 1 : 0;
        sym.free_device_list(list);
    }
    dion__mlx5_sym_unload(&sym);
    /* The real open: device, DEVX, PD, caps, GID and UAR, as a comm would do it; then closed. */
    dion__mlx5_open_args_t a = {.ibv_lib = ibv_lib, .dv_lib = dv_lib, .doorbell = DION__MLX5_DB_AUTO};
    dion__mlx5_t *m = NULL;
    p->uar_map = -1;
    if (dion__mlx5_open(&a, &m) == DION_SUCCESS) {
        p->devx_ok = 1;
        snprintf(p->desc, sizeof p->desc, "%s", m->desc);
        /* What GPU threads would need to ring: the UAR page mapped into the GPU (then unmapped again). */
        if (dion__cuda_device_count() > 0) {
            uintptr_t page = (uintptr_t)m->uar->reg_addr & ~(uintptr_t)4095;
            void *dev = NULL;
            p->uar_map_rc =
                m->gpu->map_io(m->gpu->arg, (void *)page, 4096, &dev, p->uar_why, sizeof p->uar_why);
            p->uar_map = p->uar_map_rc == 0;
            if (p->uar_map) m->gpu->unmap_io(m->gpu->arg, (void *)page);
        }
        dion__mlx5_close(m);
    } else {
        snprintf(p->why, sizeof p->why, "%s", dion_last_error());
    }
}
