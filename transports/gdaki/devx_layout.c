/* The DEVX command layouts: one table per command, (PRM field name, bit offset from the MSB of byte 0, bit
 * width). Sources: the opcodes and the CQC's first dword are in /work/shared/reference/mlx5_gdaki.md (4.4 and
 * 5.3, citing rdma-core mlx5_ifc.h:44-77 and UCX ib_mlx5_ifc.h:1863-1900); the rest are the offsets of the
 * same fields in rdma-core providers/mlx5/mlx5_ifc.h @691953d8d (the QP commands and qpc) and UCX
 * src/uct/ib/mlx5/dv/ib_mlx5_ifc.h @9466d104a3 (CREATE_CQ, cqc, and wq_umem_offset, which rdma-core leaves
 * reserved). Both copies agree on every field listed both places (checked with scripts/devx_layout_check.py).
 * Neither header is installed, so the offsets are written here, once. */
#include <string.h>

#include "devx_layout.h"
#include "src/internal.h"

#define F(name, off, width)                                                                                  \
    {                                                                                                        \
        name, off, width                                                                                     \
    }

static const dion__devx_field_t dion__devx_create_cq[] = {
    F("opcode", 0x0, 16),           F("uid", 0x10, 16),
    F("op_mod", 0x30, 16),          F("cqc.dbr_umem_valid", 0x86, 1),
    F("cqc.cqe_sz", 0x88, 3),       F("cqc.cc", 0x8b, 1),
    F("cqc.oi", 0x8e, 1),           F("cqc.cqe_comp_en", 0x91, 1),
    F("cqc.dbr_umem_id", 0xa0, 32), F("cqc.page_offset", 0xd4, 6),
    F("cqc.log_cq_size", 0xe3, 5),  F("cqc.uar_page", 0xe8, 24),
    F("cqc.c_eqn", 0x138, 8),       F("cqc.log_page_size", 0x143, 5),
    F("cqc.dbr_addr", 0x240, 64),   F("cq_umem_offset", 0x280, 64),
    F("cq_umem_id", 0x2c0, 32),     F("cq_umem_valid", 0x2e0, 1),
};

static const dion__devx_field_t dion__devx_create_qp[] = {
    F("opcode", 0x0, 16),
    F("uid", 0x10, 16),
    F("op_mod", 0x30, 16),
    F("opt_param_mask", 0x80, 32),
    F("qpc.st", 0xc8, 8),
    F("qpc.pm_state", 0xd3, 2),
    F("qpc.pd", 0xe8, 24),
    F("qpc.log_rq_size", 0x109, 4),
    F("qpc.log_rq_stride", 0x10d, 3),
    F("qpc.no_sq", 0x110, 1),
    F("qpc.log_sq_size", 0x111, 4),
    F("qpc.ts_format", 0x118, 2),
    F("qpc.uar_page", 0x128, 24),
    F("qpc.user_index", 0x148, 24),
    F("qpc.log_page_size", 0x163, 5),
    F("qpc.cqn_snd", 0x4a8, 24),
    F("qpc.cqn_rcv", 0x5a8, 24),
    F("qpc.dbr_addr", 0x5c0, 64),
    F("qpc.rq_type", 0x625, 3),
    F("qpc.srqn_rmpn_xrqn", 0x628, 24),
    F("qpc.cs_req", 0x6f0, 8),
    F("qpc.cs_res", 0x6f8, 8),
    F("qpc.dbr_umem_valid", 0x743, 1),
    F("qpc.dbr_umem_id", 0x7e0, 32),
    F("wq_umem_offset", 0x800, 64),
    F("wq_umem_id", 0x840, 32),
    F("wq_umem_valid", 0x860, 1),
};

static const dion__devx_field_t dion__devx_rst2init_qp[] = {
    F("opcode", 0x0, 16),
    F("uid", 0x10, 16),
    F("op_mod", 0x30, 16),
    F("qpn", 0x48, 24),
    F("opt_param_mask", 0x80, 32),
    F("qpc.pm_state", 0xd3, 2),
    F("qpc.primary_address_path.pkey_index", 0x190, 16),
    F("qpc.primary_address_path.vhca_port_num", 0x2a8, 8),
    F("qpc.atomic_mode", 0x54c, 4),
    F("qpc.rre", 0x550, 1),
    F("qpc.rwe", 0x551, 1),
    F("qpc.rae", 0x552, 1),
};

static const dion__devx_field_t dion__devx_init2rtr_qp[] = {
    F("opcode", 0x0, 16),
    F("uid", 0x10, 16),
    F("op_mod", 0x30, 16),
    F("qpn", 0x48, 24),
    F("opt_param_mask", 0x80, 32),
    F("qpc.mtu", 0x100, 3),
    F("qpc.log_msg_max", 0x103, 5),
    F("qpc.remote_qpn", 0x168, 24),
    F("qpc.primary_address_path.pkey_index", 0x190, 16),
    F("qpc.primary_address_path.grh", 0x1a8, 1),
    F("qpc.primary_address_path.rlid", 0x1b0, 16),
    F("qpc.primary_address_path.src_addr_index", 0x1c8, 8),
    F("qpc.primary_address_path.hop_limit", 0x1d8, 8),
    F("qpc.primary_address_path.tclass", 0x1e4, 8),
    F("qpc.primary_address_path.flow_label", 0x1ec, 20),
    F("qpc.primary_address_path.rgid_rip", 0x200, 128),
    F("qpc.primary_address_path.dscp", 0x28a, 6),
    F("qpc.primary_address_path.udp_sport", 0x290, 16),
    F("qpc.primary_address_path.eth_prio", 0x2a1, 3),
    F("qpc.primary_address_path.sl", 0x2a4, 4),
    F("qpc.primary_address_path.vhca_port_num", 0x2a8, 8),
    F("qpc.primary_address_path.rmac_47_32", 0x2b0, 16),
    F("qpc.primary_address_path.rmac_31_0", 0x2c0, 32),
    F("qpc.log_rra_max", 0x548, 3),
    F("qpc.min_rnr_nak", 0x563, 5),
    F("qpc.next_rcv_psn", 0x568, 24),
};

static const dion__devx_field_t dion__devx_rtr2rts_qp[] = {
    F("opcode", 0x0, 16),
    F("uid", 0x10, 16),
    F("op_mod", 0x30, 16),
    F("qpn", 0x48, 24),
    F("opt_param_mask", 0x80, 32),
    F("qpc.primary_address_path.ack_timeout", 0x1c0, 5),
    F("qpc.log_ack_req_freq", 0x440, 4),
    F("qpc.log_sra_max", 0x448, 3),
    F("qpc.retry_count", 0x44d, 3),
    F("qpc.rnr_retry", 0x450, 3),
    F("qpc.next_send_psn", 0x488, 24),
};

static const dion__devx_field_t dion__devx_create_cq_out[] = {
    F("status", 0x0, 8),
    F("syndrome", 0x20, 32),
    F("cqn", 0x48, 24),
};

static const dion__devx_field_t dion__devx_create_qp_out[] = {
    F("status", 0x0, 8),
    F("syndrome", 0x20, 32),
    F("qpn", 0x48, 24),
};

static const dion__devx_field_t dion__devx_query_hca_cap[] = {
    F("opcode", 0x0, 16),
    F("uid", 0x10, 16),
    F("op_mod", 0x30, 16),
};

/* The capability union starts at bit 0x80; offsets below are 0x80 plus the field's offset in
 * cmd_hca_cap / atomic_caps (rdma-core mlx5_ifc.h @691953d8d). */
static const dion__devx_field_t dion__devx_query_hca_cap_out[] = {
    F("status", 0x0, 8),
    F("syndrome", 0x20, 32),
    F("capability.cmd_hca_cap.log_max_qp_sz", 0x108, 8),
    F("capability.cmd_hca_cap.log_max_cq_sz", 0x148, 8),
    F("capability.cmd_hca_cap.port_type", 0x236, 2),
    F("capability.cmd_hca_cap.log_max_msg", 0x243, 5),
    F("capability.cmd_hca_cap.cqe_version", 0x27c, 4),
    F("capability.cmd_hca_cap.roce", 0x29d, 1),
    F("capability.cmd_hca_cap.atomic", 0x29e, 1),
    F("capability.cmd_hca_cap.log_bf_reg_size", 0x2eb, 5),
    F("capability.cmd_hca_cap.max_wqe_sz_sq", 0x310, 16),
    F("capability.cmd_hca_cap.sq_ts_format", 0x4c0, 2),
};

static const dion__devx_field_t dion__devx_query_atomic_cap_out[] = {
    F("status", 0x0, 8),
    F("syndrome", 0x20, 32),
    F("capability.atomic_caps.atomic_req_8B_endianness_mode", 0xc0, 2),
    F("capability.atomic_caps.supported_atomic_req_8B_endianness_mode_1", 0xc6, 1),
    F("capability.atomic_caps.atomic_operations", 0x110, 16),
    F("capability.atomic_caps.atomic_size_qp", 0x130, 16),
};

static const dion__devx_field_t dion__devx_cmd_out[] = {
    F("status", 0x0, 8),
    F("syndrome", 0x20, 32),
};

#define L(cmd, op, bytes)                                                                                    \
    {                                                                                                        \
#cmd, op, bytes, dion__devx_##cmd, sizeof dion__devx_##cmd / sizeof dion__devx_##cmd[0]              \
    }
static const dion__devx_layout_t dion__devx_layouts[DION__DEVX_NLAYOUTS] = {
    [DION__DEVX_CREATE_CQ] = L(create_cq, 0x400, 272),
    [DION__DEVX_CREATE_QP] = L(create_qp, 0x500, 272),
    [DION__DEVX_RST2INIT_QP] = L(rst2init_qp, 0x502, 272),
    [DION__DEVX_INIT2RTR_QP] = L(init2rtr_qp, 0x503, 272),
    [DION__DEVX_RTR2RTS_QP] = L(rtr2rts_qp, 0x504, 272),
    [DION__DEVX_CREATE_CQ_OUT] = L(create_cq_out, 0, 16),
    [DION__DEVX_CREATE_QP_OUT] = L(create_qp_out, 0, 16),
    [DION__DEVX_QUERY_HCA_CAP] = L(query_hca_cap, 0x100, 16),
    [DION__DEVX_QUERY_HCA_CAP_OUT] = L(query_hca_cap_out, 0, 16 + 4096),
    [DION__DEVX_QUERY_ATOMIC_CAP_OUT] = L(query_atomic_cap_out, 0, 16 + 4096),
    [DION__DEVX_CMD_OUT] = L(cmd_out, 0, 16),
};

const dion__devx_layout_t *dion__devx_layout(dion__devx_cmd_t cmd)
{
    return (unsigned)cmd < DION__DEVX_NLAYOUTS ? &dion__devx_layouts[cmd] : NULL;
}

const dion__devx_field_t *dion__devx_field(dion__devx_cmd_t cmd, const char *name)
{
    const dion__devx_layout_t *l = dion__devx_layout(cmd);
    for (uint32_t i = 0; l && name && i < l->nfields; i++)
        if (strcmp(l->fields[i].name, name) == 0) return &l->fields[i];
    return NULL;
}

/* The field, checked against the buffer; NULL with the sentence set otherwise. */
static const dion__devx_field_t *lookup(size_t len, dion__devx_cmd_t cmd, const char *name)
{
    const dion__devx_layout_t *l = dion__devx_layout(cmd);
    const dion__devx_field_t *f = dion__devx_field(cmd, name);
    if (!f) {
        dion__error_set(DION_ERR_INVALID_ARG,
                        "DEVX %s has no field '%s' in devx_layout.c; add its PRM row there",
                        l ? l->name : "(unknown command)", name ? name : "(null)");
        return NULL;
    }
    if (((size_t)f->bit_off + f->bit_width + 7) / 8 > len) {
        dion__error_set(DION_ERR_INVALID_ARG, "DEVX %s.%s ends at byte %u, past the %zu-byte buffer", l->name,
                        name, (unsigned)((f->bit_off + f->bit_width + 7) / 8), len);
        return NULL;
    }
    return f;
}

dion_status_t dion__devx_init(void *buf, size_t len, dion__devx_cmd_t cmd)
{
    const dion__devx_layout_t *l = dion__devx_layout(cmd);
    if (!l || !buf || len < l->bytes)
        return dion__error_set(DION_ERR_INVALID_ARG, "DEVX mailbox of %zu bytes for command %d: needs %u",
                               len, (int)cmd, l ? l->bytes : 0);
    memset(buf, 0, l->bytes);
    return l->opcode ? dion__devx_set(buf, len, cmd, "opcode", l->opcode) : DION_SUCCESS;
}

/* Bit by bit, most significant first: slow, but these are a few commands per QP, and the one loop holds for
 * any offset and width. */
dion_status_t dion__devx_set(void *buf, size_t len, dion__devx_cmd_t cmd, const char *name, uint64_t value)
{
    const dion__devx_field_t *f = lookup(len, cmd, name);
    if (!f) return DION_ERR_INVALID_ARG;
    if (f->bit_width > 64 || (f->bit_width < 64 && value >> f->bit_width))
        return dion__error_set(
            DION_ERR_INVALID_ARG,
            "DEVX %s.%s is %u bits wide: value %#llx does not fit (or use dion__devx_set_bytes)",
            dion__devx_layout(cmd)->name, name, f->bit_width, (unsigned long long)value);
    uint8_t *b = (uint8_t *)buf;
    for (uint32_t i = 0; i < f->bit_width; i++) {
        uint32_t p = f->bit_off + i;
        uint8_t m = (uint8_t)(0x80u >> (p & 7));
        if ((value >> (f->bit_width - 1 - i)) & 1)
            b[p >> 3] |= m;
        else
            b[p >> 3] &= (uint8_t)~m;
    }
    return DION_SUCCESS;
}

dion_status_t dion__devx_get(const void *buf, size_t len, dion__devx_cmd_t cmd, const char *name,
                             uint64_t *value)
{
    const dion__devx_field_t *f = lookup(len, cmd, name);
    if (!f) return DION_ERR_INVALID_ARG;
    if (f->bit_width > 64)
        return dion__error_set(DION_ERR_INVALID_ARG, "DEVX %s.%s is %u bits wide, more than a uint64_t",
                               dion__devx_layout(cmd)->name, name, f->bit_width);
    const uint8_t *b = (const uint8_t *)buf;
    uint64_t v = 0;
    for (uint32_t i = 0; i < f->bit_width; i++) {
        uint32_t p = f->bit_off + i;
        v = (v << 1) | ((b[p >> 3] >> (7 - (p & 7))) & 1u);
    }
    *value = v;
    return DION_SUCCESS;
}

dion_status_t dion__devx_set_bytes(void *buf, size_t len, dion__devx_cmd_t cmd, const char *name,
                                   const void *src, size_t n)
{
    const dion__devx_field_t *f = lookup(len, cmd, name);
    if (!f) return DION_ERR_INVALID_ARG;
    if ((f->bit_off & 7) || f->bit_width != n * 8)
        return dion__error_set(DION_ERR_INVALID_ARG, "DEVX %s.%s is %u bits at bit %u: not %zu whole bytes",
                               dion__devx_layout(cmd)->name, name, f->bit_width, f->bit_off, n);
    memcpy((uint8_t *)buf + f->bit_off / 8, src, n);
    return DION_SUCCESS;
}
