/* The fake libibverbs + libmlx5 of fake_mlx5.h. Exports the names mlx5_sym.c looks up. The parentheses
 * around some names stop verbs.h's function-like macros of the same names. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_mlx5.h"

#define EXPORT __attribute__((visibility("default")))

static fake_mlx5_ctl_t ctl;
static int seen[0x600]; /* DEVX commands seen, per opcode: for fail_nth */

static void defaults(void)
{
    memset(&ctl, 0, sizeof ctl);
    memset(seen, 0, sizeof seen);
    ctl.link_layer = IBV_LINK_LAYER_ETHERNET;
    ctl.umem_dmabuf_ok = ctl.umem_plain_ok = ctl.mr_dmabuf_ok = ctl.mr_plain_ok = 1;
    ctl.cap_log_max_qp_sz = 15;
    ctl.cap_log_max_cq_sz = 22;
    ctl.cap_log_max_msg = 31;
    ctl.cap_cqe_version = 1;
    ctl.cap_port_type = 1;
    ctl.cap_atomic = 1;
    ctl.cap_max_wqe_sz_sq = 1024;
    ctl.cap_sq_ts_format = 2;
    ctl.cap_atomic_endian = 1; /* host order: what the Linux driver sets at load */
    ctl.pdn = 0x15;
    ctl.eqn = 0x9;
}

static int inited;
EXPORT fake_mlx5_ctl_t *fake_mlx5_control(void)
{
    if (!inited) defaults(), inited = 1;
    return &ctl;
}
EXPORT void fake_mlx5_reset(void)
{
    defaults();
    inited = 1;
}

EXPORT void fake_mlx5_event(const char *kind, uintptr_t id, int open)
{
    if (ctl.nev < FM_EVENTS) {
        snprintf(ctl.ev[ctl.nev].kind, sizeof ctl.ev[ctl.nev].kind, "%s", kind);
        ctl.ev[ctl.nev].id = id;
        ctl.ev[ctl.nev].open = open;
        ctl.nev++;
    }
    ctl.live += open ? 1 : -1;
}

/* ---- bits in PRM order (bit 0 = MSB of byte 0), written independently of devx_layout.c ---- */
static void put_bits(uint8_t *b, unsigned off, unsigned width, uint64_t v)
{
    for (unsigned i = 0; i < width; i++) {
        unsigned p = off + i;
        uint8_t m = (uint8_t)(0x80u >> (p & 7));
        if ((v >> (width - 1 - i)) & 1)
            b[p >> 3] |= m;
        else
            b[p >> 3] &= (uint8_t)~m;
    }
}
static uint64_t get_bits(const uint8_t *b, unsigned off, unsigned width)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < width; i++) v = (v << 1) | ((b[(off + i) >> 3] >> (7 - ((off + i) & 7))) & 1u);
    return v;
}

/* ---- devices ---- */
static struct ibv_device devs[2] = {{.name = "fake_hfi0"}, {.name = "mlx5_fake"}};
static struct ibv_device *dev_list[3] = {&devs[0], &devs[1], NULL};

EXPORT struct ibv_device **(ibv_get_device_list)(int *n)
{
    *n = 2;
    return dev_list;
}
EXPORT void ibv_free_device_list(struct ibv_device **l) {}
EXPORT const char *ibv_get_device_name(struct ibv_device *d)
{
    return d->name;
}
EXPORT bool mlx5dv_is_supported(struct ibv_device *d)
{
    return d == &devs[1];
}
EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *d, struct mlx5dv_context_attr *attr)
{
    fake_mlx5_control();
    ctl.open_flags = attr ? attr->flags : 0;
    if (ctl.open_errno) {
        errno = ctl.open_errno;
        return NULL;
    }
    struct ibv_context *c = calloc(1, sizeof *c);
    c->device = d;
    c->async_fd = c->cmd_fd = -1;
    fake_mlx5_event("ctx", (uintptr_t)c, 1);
    return c;
}
EXPORT int ibv_close_device(struct ibv_context *c)
{
    fake_mlx5_event("ctx", (uintptr_t)c, 0);
    free(c);
    return 0;
}
EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof *a);
    a->phys_port_cnt = 1;
    a->max_qp_rd_atom = 16;
    a->max_qp_init_rd_atom = 8;
    a->atomic_cap = IBV_ATOMIC_HCA;
    return 0;
}
EXPORT int(ibv_query_port)(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *compat)
{
    struct ibv_port_attr *a = (struct ibv_port_attr *)compat;
    memset(a, 0, sizeof *a);
    if (port != 1) return EINVAL;
    a->state = IBV_PORT_ACTIVE;
    a->active_mtu = IBV_MTU_4096;
    a->max_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 4;
    a->lid = ctl.link_layer == IBV_LINK_LAYER_INFINIBAND ? FM_LID : 0;
    a->link_layer = (uint8_t)ctl.link_layer;
    return 0;
}
static int gid_entry(uint32_t i, union ibv_gid *g, uint32_t *type)
{
    memset(g, 0, sizeof *g);
    if (ctl.link_layer == IBV_LINK_LAYER_INFINIBAND) {
        if (i != 0) return ENODATA;
        g->raw[0] = 0xfe, g->raw[1] = 0x80, g->raw[15] = FM_LID;
        *type = IBV_GID_TYPE_IB;
        return 0;
    }
    if (i > 3) return ENODATA;
    if (i < 2) {
        g->raw[0] = 0xfe, g->raw[1] = 0x80, g->raw[15] = 1;
    } else {
        g->raw[10] = g->raw[11] = 0xff;
        g->raw[12] = 10, g->raw[15] = 1;
    }
    *type = i % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
    return 0;
}
EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
    uint32_t t;
    return gid_entry((uint32_t)index, g, &t) ? -1 : 0;
}
EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
                             uint32_t flags, size_t size)
{
    memset(e, 0, size);
    e->gid_index = index;
    e->port_num = port;
    return gid_entry(index, &e->gid, &e->gid_type);
}

/* ---- PD, MRs, AHs ---- */
EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
    if (ctl.fail_pd) {
        errno = ENOMEM;
        return NULL;
    }
    struct ibv_pd *pd = calloc(1, sizeof *pd);
    pd->context = c;
    fake_mlx5_event("pd", (uintptr_t)pd, 1);
    return pd;
}
EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    fake_mlx5_event("pd", (uintptr_t)pd, 0);
    free(pd);
    return 0;
}
static uint32_t next_key = 0x5000;
static struct ibv_mr *new_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, uint64_t off,
                             int dmabuf, int access)
{
    struct ibv_mr *mr = calloc(1, sizeof *mr);
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = len;
    mr->lkey = next_key++;
    mr->rkey = next_key++;
    if (ctl.nmr < 64) {
        ctl.mr[ctl.nmr].addr = addr;
        ctl.mr[ctl.nmr].len = len;
        ctl.mr[ctl.nmr].iova = iova;
        ctl.mr[ctl.nmr].offset = off;
        ctl.mr[ctl.nmr].dmabuf = dmabuf;
        ctl.mr[ctl.nmr].access = access;
        ctl.nmr++;
    }
    fake_mlx5_event("mr", (uintptr_t)mr, 1);
    return mr;
}
EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    if (!ctl.mr_plain_ok) {
        errno = EFAULT;
        return NULL;
    }
    return new_mr(pd, addr, len, (uintptr_t)addr, 0, 0, access);
}
EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova, int fd,
                                        int access)
{
    if (!ctl.mr_dmabuf_ok || fcntl(fd, F_GETFD) < 0) {
        errno = ctl.mr_dmabuf_ok ? EBADF : EOPNOTSUPP;
        return NULL;
    }
    return new_mr(pd, NULL, len, iova, off, 1, access);
}
EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    fake_mlx5_event("mr", (uintptr_t)mr, 0);
    free(mr);
    return 0;
}
typedef struct {
    struct ibv_ah ah;
    struct mlx5_wqe_av av;
} fah_t;
EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a)
{
    if (ctl.fail_ah) {
        errno = EHOSTUNREACH;
        return NULL;
    }
    fah_t *h = calloc(1, sizeof *h);
    h->ah.context = pd->context;
    h->ah.pd = pd;
    memcpy(ctl.ah_dgid, a->grh.dgid.raw, 16);
    ctl.ah_sgid_index = a->grh.sgid_index;
    ctl.ah_hop_limit = a->grh.hop_limit;
    h->av.rmac[0] = 0x02;
    memcpy(h->av.rmac + 2, a->grh.dgid.raw + 12, 4);
    fake_mlx5_event("ah", (uintptr_t)h, 1);
    return &h->ah;
}
EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
    fake_mlx5_event("ah", (uintptr_t)ah, 0);
    free(ah);
    return 0;
}
EXPORT int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t type)
{
    if (type & MLX5DV_OBJ_PD) obj->pd.out->pdn = ctl.pdn;
    if (type & MLX5DV_OBJ_AH) obj->ah.out->av = &((fah_t *)obj->ah.in)->av;
    return 0;
}

/* ---- DEVX ---- */
struct mlx5dv_devx_obj {
    uint16_t type; /* 0x400 CQ, 0x500 QP */
    uint32_t id;
};

/* Logs the mailbox; 1 when the test asked this command to fail (out then holds status and syndrome). */
static int command(const void *in, size_t inlen, void *out, size_t outlen, int create, uint32_t obj)
{
    uint16_t op = (uint16_t)get_bits(in, 0, 16);
    if (ctl.ncmd < FM_CMDS) {
        ctl.cmd[ctl.ncmd].opcode = op;
        ctl.cmd[ctl.ncmd].create = create;
        ctl.cmd[ctl.ncmd].obj = obj;
        ctl.cmd[ctl.ncmd].inlen = inlen;
        memcpy(ctl.cmd[ctl.ncmd].in, in, inlen < 272 ? inlen : 272);
        ctl.ncmd++;
    }
    memset(out, 0, outlen);
    int nth = op < 0x600 ? seen[op]++ : 0;
    if (ctl.fail_opcode == op && ctl.fail_nth == nth) {
        put_bits(out, 0x0, 8, ctl.fail_status);
        put_bits(out, 0x20, 32, ctl.fail_syndrome);
        errno = EREMOTEIO;
        return 1;
    }
    return 0;
}

EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *c, const void *in, size_t inlen, void *out,
                                   size_t outlen)
{
    if (command(in, inlen, out, outlen, 0, 0)) return EREMOTEIO;
    uint16_t op = (uint16_t)get_bits(in, 0, 16);
    if (op != 0x100 || outlen < 16 + 4096) {
        put_bits(out, 0, 8, 0x2); /* bad operation */
        errno = EINVAL;
        return EINVAL;
    }
    unsigned type = (unsigned)get_bits(in, 0x30, 16) >> 1;
    uint8_t *o = out;
    if (type == 0) { /* cmd_hca_cap, at bit 0x80 (mlx5_ifc.h) */
        put_bits(o, 0x80 + 136, 8, ctl.cap_log_max_qp_sz);
        put_bits(o, 0x80 + 200, 8, ctl.cap_log_max_cq_sz);
        put_bits(o, 0x80 + 438, 2, ctl.cap_port_type);
        put_bits(o, 0x80 + 451, 5, ctl.cap_log_max_msg);
        put_bits(o, 0x80 + 508, 4, ctl.cap_cqe_version);
        put_bits(o, 0x80 + 541, 1, 1); /* roce */
        put_bits(o, 0x80 + 542, 1, ctl.cap_atomic);
        put_bits(o, 0x80 + 619, 5, 9); /* log_bf_reg_size */
        put_bits(o, 0x80 + 656, 16, ctl.cap_max_wqe_sz_sq);
        put_bits(o, 0x80 + 1088, 2, ctl.cap_sq_ts_format);
    } else if (type == 3) { /* atomic_caps */
        put_bits(o, 0x80 + 64, 2, ctl.cap_atomic_endian);
        put_bits(o, 0x80 + 144, 16, 0x3);
        put_bits(o, 0x80 + 176, 16, 0x8);
    }
    return 0;
}

static uint32_t next_cqn = FM_CQN0, next_qpn = FM_QPN0;
EXPORT struct mlx5dv_devx_obj *mlx5dv_devx_obj_create(struct ibv_context *c, const void *in, size_t inlen,
                                                      void *out, size_t outlen)
{
    if (command(in, inlen, out, outlen, 1, 0)) return NULL;
    uint16_t op = (uint16_t)get_bits(in, 0, 16);
    struct mlx5dv_devx_obj *o = calloc(1, sizeof *o);
    o->type = op;
    if (op == 0x400) {
        o->id = next_cqn++;
        put_bits(out, 0x48, 24, o->id);
        fake_mlx5_event("cq", (uintptr_t)o, 1);
    } else if (op == 0x500) {
        o->id = next_qpn++;
        put_bits(out, 0x48, 24, o->id);
        fake_mlx5_event("qp", (uintptr_t)o, 1);
    } else {
        free(o);
        put_bits(out, 0, 8, 0x2);
        errno = EINVAL;
        return NULL;
    }
    return o;
}
EXPORT int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj *o, const void *in, size_t inlen, void *out,
                                  size_t outlen)
{
    uint32_t qpn = (uint32_t)get_bits(in, 0x48, 24);
    if (command(in, inlen, out, outlen, 0, qpn)) return EREMOTEIO;
    if (o->type != 0x500 || qpn != o->id) { /* the firmware checks the QPN against the object */
        put_bits(out, 0, 8, 0x3);
        errno = EINVAL;
        return EINVAL;
    }
    return 0;
}
EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj *o)
{
    fake_mlx5_event(o->type == 0x400 ? "cq" : "qp", (uintptr_t)o, 0);
    free(o);
    return 0;
}

EXPORT struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(struct ibv_context *c, uint32_t flags)
{
    unsigned kind = flags == MLX5DV_UAR_ALLOC_TYPE_BF ? 2u : flags == MLX5DV_UAR_ALLOC_TYPE_NC ? 1u : 0u;
    ctl.uar_types_asked |= 1u << kind;
    if ((ctl.fail_uar >> kind) & 1) {
        errno = ENOMEM;
        return NULL;
    }
    if (ctl.nuars >= 8) {
        errno = ENOMEM;
        return NULL;
    }
    struct mlx5dv_devx_uar *u = &ctl.uar[ctl.nuars];
    void *page = NULL;
    if (posix_memalign(&page, 4096, 4096)) return NULL;
    memset(page, 0, 4096);
    u->base_addr = page;
    u->reg_addr = (char *)page + 0x800;
    u->page_id = FM_UAR_PAGE0 + (uint32_t)ctl.nuars;
    ctl.nuars++;
    fake_mlx5_event("uar", (uintptr_t)u, 1);
    return u;
}
EXPORT void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *u)
{
    fake_mlx5_event("uar", (uintptr_t)u, 0);
    free(u->base_addr);
    u->base_addr = u->reg_addr = NULL;
}

static uint32_t next_umem = FM_UMEM0;
static struct mlx5dv_devx_umem *new_umem(void *addr, size_t size, uint32_t access, int dmabuf, uint64_t pgsz)
{
    struct mlx5dv_devx_umem *u = calloc(1, sizeof *u);
    u->umem_id = next_umem++;
    if (ctl.numem < 64) {
        ctl.umem[ctl.numem].addr = addr;
        ctl.umem[ctl.numem].size = size;
        ctl.umem[ctl.numem].access = access;
        ctl.umem[ctl.numem].umem_id = u->umem_id;
        ctl.umem[ctl.numem].dmabuf = dmabuf;
        ctl.umem[ctl.numem].pgsz_bitmap = pgsz;
        ctl.numem++;
    }
    fake_mlx5_event("umem", (uintptr_t)u, 1);
    return u;
}
EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(struct ibv_context *c, void *addr, size_t size,
                                                     uint32_t access)
{
    if (!ctl.umem_plain_ok) {
        errno = EFAULT;
        return NULL;
    }
    return new_umem(addr, size, access, 0, 0);
}
EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(struct ibv_context *c, struct mlx5dv_devx_umem_in *in)
{
    if (!(in->comp_mask & MLX5DV_UMEM_MASK_DMABUF))
        return mlx5dv_devx_umem_reg(c, in->addr, in->size, in->access);
    if (!ctl.umem_dmabuf_ok || fcntl(in->dmabuf_fd, F_GETFD) < 0) {
        errno = ctl.umem_dmabuf_ok ? EBADF : EOPNOTSUPP;
        return NULL;
    }
    return new_umem(in->addr, in->size, in->access, 1, in->pgsz_bitmap);
}
EXPORT int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *u)
{
    fake_mlx5_event("umem", (uintptr_t)u, 0);
    free(u);
    return 0;
}
EXPORT int mlx5dv_devx_query_eqn(struct ibv_context *c, uint32_t vector, uint32_t *eqn)
{
    if (ctl.fail_eqn) return EINVAL;
    *eqn = ctl.eqn;
    return 0;
}
