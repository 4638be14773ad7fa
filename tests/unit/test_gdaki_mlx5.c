/* The gdaki host half for mlx5 NICs (transports/gdaki/mlx5_*.c) through its nic.h table, over a fake
 * libibverbs + libmlx5 (fake_mlx5.c) and GPU operations on host memory. No NIC and no GPU: what runs is
 * every DEVX mailbox the code builds (each field read back through devx_layout.c and compared with what
 * the fake and the settings imply), the order of the QP transitions, the doorbell choice (GPU-mapped UAR,
 * or the CPU thread when the mapping is refused), registrations, the sentence of a failure at every step,
 * and that everything created is destroyed, in reverse order, after success and after each failure.
 *
 *   test_gdaki_mlx5 path/to/fake_mlx5.so */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_mlx5.h"
#include "transports/gdaki/devx_layout.h"
#include "transports/gdaki/mlx5_nic.h"

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            failures++;                                                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                             \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
        }                                                                                                    \
    } while (0)

static const char *LIB;
static fake_mlx5_ctl_t *F;
static fake_mlx5_reset_fn fake_reset;
static fake_mlx5_event_fn fake_event;
static const dion__gdaki_nic_ops_t *N = &dion__gdaki_mlx5;

/* ---- GPU operations on host memory ---- */
static struct {
    int no_gpu;
    int fail_alloc, fail_dmabuf, fail_mapped, map_rc, fail_fill;
    int map_calls, fds;
    void *last_alloc;
} G;

static int g_present(void *arg)
{
    return !G.no_gpu;
}
static int g_alloc(void *arg, size_t bytes, void **ptr, char *why, size_t cap)
{
    if (G.fail_alloc) {
        snprintf(why, cap, "cudaMalloc(%zu): out of memory", bytes);
        return -1;
    }
    if (posix_memalign(ptr, 65536, bytes)) return -1;
    memset(*ptr, 0x5a, bytes); /* garbage, so that the fills are seen */
    G.last_alloc = *ptr;
    fake_event("gpumem", (uintptr_t)*ptr, 1);
    return 0;
}
static void g_free(void *arg, void *ptr)
{
    fake_event("gpumem", (uintptr_t)ptr, 0);
    free(ptr);
}
static int g_fill(void *arg, void *ptr, int byte, size_t bytes, char *why, size_t cap)
{
    if (G.fail_fill) {
        snprintf(why, cap, "cudaMemset: an illegal memory access was encountered");
        return -1;
    }
    memset(ptr, byte, bytes);
    return 0;
}
static int g_dmabuf_fd(void *arg, uint64_t addr, size_t len, int *fd, uint64_t *offset, char *why, size_t cap)
{
    if (G.fail_dmabuf) {
        snprintf(why, cap, "cuMemGetHandleForAddressRange failed: operation not supported (CUresult 801)");
        return -1;
    }
    *fd = open("/dev/null", O_RDONLY);
    *offset = addr & 4095;
    G.fds++;
    return *fd < 0 ? -1 : 0;
}
static void g_close_fd(void *arg, int fd)
{
    close(fd);
    G.fds--;
}
/* The "device address" of a mapped page: never dereferenced, only compared. */
#define DEV_XOR 0x0000700000000000ull
static int g_map_io(void *arg, void *host, size_t len, void **dev, char *why, size_t cap)
{
    G.map_calls++;
    if (G.map_rc) {
        snprintf(why, cap,
                 "cuMemHostRegister(IOMEMORY) of the UAR page failed: operation not permitted (CUresult %d)",
                 G.map_rc);
        return G.map_rc;
    }
    CHECK(((uintptr_t)host & 4095) == 0 && len == 4096, "map_io of %p + %zu: not one whole page", host, len);
    *dev = (void *)((uintptr_t)host ^ DEV_XOR);
    fake_event("uar_map", (uintptr_t)host, 1);
    return 0;
}
static void g_unmap_io(void *arg, void *host)
{
    fake_event("uar_map", (uintptr_t)host, 0);
}
static int g_alloc_mapped(void *arg, size_t bytes, void **host, void **dev, char *why, size_t cap)
{
    if (G.fail_mapped) {
        snprintf(why, cap, "cudaHostAlloc(mapped): out of memory");
        return -1;
    }
    if (posix_memalign(host, 64, bytes)) return -1;
    *dev = *host; /* the same address, as with unified addressing */
    fake_event("mbox", (uintptr_t)*host, 1);
    return 0;
}
static void g_free_mapped(void *arg, void *host)
{
    fake_event("mbox", (uintptr_t)host, 0);
    free(host);
}
static const dion__mlx5_gpu_ops_t gpu_ops = {.present = g_present,
                                             .alloc = g_alloc,
                                             .free = g_free,
                                             .fill = g_fill,
                                             .dmabuf_fd = g_dmabuf_fd,
                                             .close_fd = g_close_fd,
                                             .map_io = g_map_io,
                                             .unmap_io = g_unmap_io,
                                             .alloc_mapped = g_alloc_mapped,
                                             .free_mapped = g_free_mapped};

/* ---- helpers ---- */

static void fresh(void)
{
    fake_reset();
    memset(&G, 0, sizeof G);
    unsetenv("DION_GDAKI_DOORBELL");
    unsetenv("DION_IB_GID_INDEX");
    unsetenv("DION_IB_SL");
    unsetenv("DION_IB_TC");
    unsetenv("DION_IB_TIMEOUT");
    unsetenv("DION_IB_RETRY_CNT");
    unsetenv("DION_IB_HCA");
    unsetenv("DION_IB_PORT");
    dion__mlx5_open_args_t a = {.ibv_lib = LIB, .dv_lib = LIB, .gpu = &gpu_ops};
    dion__gdaki_mlx5_test_args(&a);
}

/* Everything created was destroyed, each object after everything created after it (a stack); objects of
 * kind loose (windows' registrations, whose lifetime is the user's, not the device's) only counted. */
static void check_teardown_but(const char *what, const char *loose)
{
    CHECK(F->live == 0, "%s: %d objects left alive", what, F->live);
    CHECK(G.fds == 0, "%s: %d dmabuf fds left open", what, G.fds);
    int stack[FM_EVENTS], n = 0;
    for (int i = 0; i < F->nev; i++) {
        if (loose && !strcmp(F->ev[i].kind, loose)) continue;
        if (F->ev[i].open) {
            stack[n++] = i;
            continue;
        }
        if (n == 0 || strcmp(F->ev[stack[n - 1]].kind, F->ev[i].kind) ||
            F->ev[stack[n - 1]].id != F->ev[i].id) {
            CHECK(0, "%s: event %d destroys %s %#lx while %s %#lx, created later, is alive", what, i,
                  F->ev[i].kind, (unsigned long)F->ev[i].id, n ? F->ev[stack[n - 1]].kind : "nothing",
                  n ? (unsigned long)F->ev[stack[n - 1]].id : 0ul);
            return;
        }
        n--;
    }
}

static void check_teardown(const char *what)
{
    check_teardown_but(what, NULL);
}

static int count_kind(const char *kind)
{
    int c = 0;
    for (int i = 0; i < F->nev; i++) c += F->ev[i].open && !strcmp(F->ev[i].kind, kind);
    return c;
}

/* The mailbox of the nth command with this opcode (and QPN for a modify, 0: any). */
static const uint8_t *cmd(uint16_t op, uint32_t qpn, int nth)
{
    for (int i = 0; i < F->ncmd; i++)
        if (F->cmd[i].opcode == op && (!qpn || F->cmd[i].obj == qpn) && nth-- == 0) return F->cmd[i].in;
    return NULL;
}

static uint64_t fld(const uint8_t *in, dion__devx_cmd_t c, const char *name)
{
    uint64_t v = ~0ull;
    CHECK(in && dion__devx_get(in, 272, c, name, &v) == DION_SUCCESS, "reading %s", name);
    return v;
}
#define EXPECT(in, c, name, want)                                                                            \
    do {                                                                                                     \
        uint64_t got_ = fld(in, c, name), want_ = (uint64_t)(want);                                          \
        CHECK(got_ == want_, "%s = %#llx, expected %#llx", name, (unsigned long long)got_,                   \
              (unsigned long long)want_);                                                                    \
    } while (0)

static int has(const char *text, const char *part)
{
    int ok = strstr(text, part) != NULL;
    if (!ok) fprintf(stderr, "  (sentence: %s)\n  (missing: %s)\n", text, part);
    return ok;
}

typedef struct {
    dion__gdaki_qp_t *qp;
    dion_gdaki_qp_dev_t dev;
    uint8_t blob[DION__GDAKI_QP_BLOB];
} tqp_t;

static dion_status_t make_qp(dion__gdaki_nic_t *nic, uint32_t ctx, int peer, uint32_t nwqebb, uint32_t ncqe,
                             int cpu, tqp_t *t)
{
    memset(t, 0, sizeof *t);
    dion__gdaki_qp_args_t a = {.ctx = ctx, .peer = peer, .nwqebb = nwqebb, .ncqe = ncqe, .cpu = cpu};
    return N->qp_create(nic, &a, &t->qp, &t->dev, t->blob);
}

/* ---- the whole path, checked field by field ---- */

static void check_queue_memory(const tqp_t *t, const uint8_t *cq_in, const uint8_t *qp_in, uint32_t nwqebb,
                               uint32_t ncqe, uint8_t *base, size_t umem_size)
{
    uint64_t wq_off = fld(qp_in, DION__DEVX_CREATE_QP, "wq_umem_offset"),
             qdbr = fld(qp_in, DION__DEVX_CREATE_QP, "qpc.dbr_addr"),
             cq_off = fld(cq_in, DION__DEVX_CREATE_CQ, "cq_umem_offset"),
             cdbr = fld(cq_in, DION__DEVX_CREATE_CQ, "cqc.dbr_addr");
    /* What device code gets is where the NIC was told the rings and records are. */
    CHECK(t->dev.sq == base + wq_off, "SQ %p is not umem base %p + wq_umem_offset %#llx", (void *)t->dev.sq,
          (void *)base, (unsigned long long)wq_off);
    CHECK(t->dev.cq == base + cq_off, "CQ pointer does not match cq_umem_offset");
    CHECK((uint8_t *)t->dev.dbrec == base + qdbr + 4, "dbrec is not the SQ word (byte 4) of the QP's DBR");
    /* Inside the umem, aligned, not overlapping. */
    struct {
        uint64_t off, len, align;
        const char *name;
    } r[4] = {{wq_off, nwqebb * 64ull, 64, "SQ"},
              {cq_off, ncqe * 64ull, 64, "CQ"},
              {qdbr, 8, 8, "QP DBR"},
              {cdbr, 8, 8, "CQ DBR"}};
    for (int i = 0; i < 4; i++) {
        CHECK(r[i].off + r[i].len <= umem_size, "%s [%#llx, +%llu) outside the %zu-byte umem", r[i].name,
              (unsigned long long)r[i].off, (unsigned long long)r[i].len, umem_size);
        CHECK(r[i].off % r[i].align == 0, "%s at %#llx is not %llu-aligned", r[i].name,
              (unsigned long long)r[i].off, (unsigned long long)r[i].align);
        for (int j = 0; j < i; j++)
            CHECK(r[i].off + r[i].len <= r[j].off || r[j].off + r[j].len <= r[i].off, "%s overlaps %s",
                  r[i].name, r[j].name);
    }
    /* Initial contents: SQ and records zero, every CQE byte 0xff (opcode INVALID). */
    int sq0 = 1, cqff = 1;
    for (uint64_t i = 0; i < nwqebb * 64ull; i++) sq0 &= base[wq_off + i] == 0;
    for (uint64_t i = 0; i < ncqe * 64ull; i++) cqff &= base[cq_off + i] == 0xff;
    CHECK(sq0 && cqff, "initial fill: SQ zero %d, CQ all 0xff %d", sq0, cqff);
    CHECK(!memcmp(base + qdbr, "\0\0\0\0\0\0\0\0", 8) && !memcmp(base + cdbr, "\0\0\0\0\0\0\0\0", 8),
          "doorbell records not zero");
}

static void test_roce_path(void)
{
    fresh();
    setenv("DION_IB_SL", "5", 1);
    setenv("DION_IB_TC", "96", 1);
    setenv("DION_IB_TIMEOUT", "14", 1);
    setenv("DION_IB_RETRY_CNT", "5", 1);
    dion__gdaki_nic_t *nic = NULL;
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    if (!nic) return;
    dion__mlx5_t *m = dion__gdaki_mlx5_dev(nic);
    CHECK(F->open_flags & MLX5DV_CONTEXT_FLAGS_DEVX, "mlx5dv_open_device without MLX5DV_CONTEXT_FLAGS_DEVX");
    CHECK(!strcmp(m->devname, "mlx5_fake"), "opened %s, not the mlx5 device", m->devname);
    CHECK(m->uar_type && !strcmp(m->uar_type, "NC_DEDICATED") && F->uar_types_asked == 1,
          "UAR: asked types %#x, got %s", F->uar_types_asked, m->uar_type ? m->uar_type : "none");
    /* QUERY_HCA_CAP: current general caps (op_mod 1), then current atomic caps (op_mod 7). */
    const uint8_t *q0 = cmd(0x100, 0, 0), *q1 = cmd(0x100, 0, 1);
    CHECK(q0 && q1, "two QUERY_HCA_CAP commands");
    if (q0 && q1) {
        EXPECT(q0, DION__DEVX_QUERY_HCA_CAP, "op_mod", 1);
        EXPECT(q1, DION__DEVX_QUERY_HCA_CAP, "op_mod", 7);
    }
    CHECK(m->caps.log_max_qp_sz == 15 && m->caps.log_max_cq_sz == 22 && m->caps.log_max_msg == 31 &&
              m->caps.cqe_version == 1 && m->caps.port_type == 1 && m->caps.atomic == 1 &&
              m->caps.max_wqe_sz_sq == 1024 && m->caps.sq_ts_format == 2 && m->caps.atomic_operations == 3 &&
              m->caps.atomic_size_qp == 8 && m->caps.atomic_endianness_mode == 1,
          "caps read back wrong (the fake writes them at mlx5_ifc.h's offsets)");
    CHECK(m->gid_index == 3, "GID index %d, expected 3 (RoCE v2, IPv4-mapped)", m->gid_index);

    tqp_t a, b;
    CHECK(make_qp(nic, 0, 1, 256, 1, 0, &a) == DION_SUCCESS, "qp a: %s", dion_last_error());
    void *mem_a = G.last_alloc;
    CHECK(make_qp(nic, 1, 1, 1024, 4, 0, &b) == DION_SUCCESS, "qp b: %s", dion_last_error());
    void *mem_b = G.last_alloc;
    CHECK(G.map_calls == 1, "the UAR page mapped %d times, expected once", G.map_calls);
    CHECK(m->db_mode == DION__MLX5_DB_GPU, "doorbell mode %d, expected the GPU", m->db_mode);
    uint64_t *want_db = (uint64_t *)((uintptr_t)F->uar[0].reg_addr ^ DEV_XOR);
    CHECK(a.dev.db == want_db && b.dev.db == want_db,
          "db %p, expected the GPU address of the UAR register %p", (void *)a.dev.db, (void *)want_db);
    CHECK(a.dev.qpn == FM_QPN0 && b.dev.qpn == FM_QPN0 + 1, "QPNs %#x %#x", a.dev.qpn, b.dev.qpn);
    CHECK(a.dev.wq_mask == 255 && b.dev.wq_mask == 1023 && a.dev.log_ncqe == 0 && b.dev.log_ncqe == 2,
          "wq_mask %u/%u log_ncqe %u/%u", a.dev.wq_mask, b.dev.wq_mask, a.dev.log_ncqe, b.dev.log_ncqe);
    CHECK(a.dev.flags == DION_GDAKI_QP_COLLAPSED && a.dev.max_inline == 220, "flags %#x max_inline %u",
          a.dev.flags, a.dev.max_inline);

    /* umems: dmabuf route, offset in the dmabuf = the block's offset from its page (0 here), whole block. */
    CHECK(F->numem == 2 && F->umem[0].dmabuf && F->umem[1].dmabuf, "umems %d, dmabuf %d %d", F->numem,
          F->umem[0].dmabuf, F->umem[1].dmabuf);
    CHECK(F->umem[0].addr == NULL && F->umem[0].access == IBV_ACCESS_LOCAL_WRITE &&
              F->umem[0].pgsz_bitmap == ~(uint64_t)4095,
          "dmabuf umem: addr %p (offset in the dmabuf), access %#x, pgsz %#llx", F->umem[0].addr,
          F->umem[0].access, (unsigned long long)F->umem[0].pgsz_bitmap);

    for (int k = 0; k < 2; k++) {
        const tqp_t *t = k ? &b : &a;
        uint32_t nw = k ? 1024 : 256, nc = k ? 4 : 1;
        const uint8_t *cq = cmd(0x400, 0, k), *qp = cmd(0x500, 0, k);
        CHECK(cq && qp, "CREATE_CQ and CREATE_QP of QP %d", k);
        if (!cq || !qp) continue;
        const dion__devx_cmd_t C = DION__DEVX_CREATE_CQ, Q = DION__DEVX_CREATE_QP;
        EXPECT(cq, C, "opcode", 0x400);
        EXPECT(cq, C, "cqc.cqe_sz", 0);
        EXPECT(cq, C, "cqc.cc", 1);
        EXPECT(cq, C, "cqc.oi", 1);
        EXPECT(cq, C, "cqc.cqe_comp_en", 0);
        EXPECT(cq, C, "cqc.log_cq_size", k ? 2 : 0);
        EXPECT(cq, C, "cqc.uar_page", FM_UAR_PAGE0);
        EXPECT(cq, C, "cqc.c_eqn", 9);
        EXPECT(cq, C, "cqc.dbr_umem_valid", 1);
        EXPECT(cq, C, "cqc.dbr_umem_id", F->umem[k].umem_id);
        EXPECT(cq, C, "cq_umem_id", F->umem[k].umem_id);
        EXPECT(cq, C, "cq_umem_valid", 1);
        EXPECT(qp, Q, "opcode", 0x500);
        EXPECT(qp, Q, "qpc.st", DION__DEVX_QP_ST_RC);
        EXPECT(qp, Q, "qpc.pm_state", 3);
        EXPECT(qp, Q, "qpc.pd", 0x15);
        EXPECT(qp, Q, "qpc.uar_page", FM_UAR_PAGE0);
        EXPECT(qp, Q, "qpc.cqn_snd", FM_CQN0 + k);
        EXPECT(qp, Q, "qpc.cqn_rcv", FM_CQN0 + k);
        EXPECT(qp, Q, "qpc.log_sq_size", k ? 10 : 8);
        EXPECT(qp, Q, "qpc.no_sq", 0);
        EXPECT(qp, Q, "qpc.rq_type", 3); /* zero-length RQ */
        EXPECT(qp, Q, "qpc.user_index", k);
        EXPECT(qp, Q, "qpc.ts_format", 1); /* sq_ts_format 2 (both): the default */
        EXPECT(qp, Q, "qpc.dbr_umem_valid", 1);
        EXPECT(qp, Q, "qpc.dbr_umem_id", F->umem[k].umem_id);
        EXPECT(qp, Q, "wq_umem_id", F->umem[k].umem_id);
        EXPECT(qp, Q, "wq_umem_valid", 1);
        /* the same bits at mlx5_ifc.h's offsets, not through the table: st @0xc8, pd @0xe8 */
        CHECK(qp[0x19] == 0 && qp[0x1d] == 0 && qp[0x1e] == 0 && qp[0x1f] == 0x15,
              "qpc.st / qpc.pd raw bytes");
        check_queue_memory(t, cq, qp, nw, nc, k ? mem_b : mem_a, F->umem[k].size);
        /* RST2INIT at creation */
        const uint8_t *i2 = cmd(0x502, t->dev.qpn, 0);
        CHECK(i2 != NULL, "RST2INIT of QP %#x", t->dev.qpn);
        if (i2) {
            const dion__devx_cmd_t R = DION__DEVX_RST2INIT_QP;
            EXPECT(i2, R, "qpn", t->dev.qpn);
            EXPECT(i2, R, "qpc.pm_state", 3);
            EXPECT(i2, R, "qpc.primary_address_path.vhca_port_num", 1);
            EXPECT(i2, R, "qpc.primary_address_path.pkey_index", 0);
            EXPECT(i2, R, "qpc.rre", 1);
            EXPECT(i2, R, "qpc.rwe", 1);
            EXPECT(i2, R, "qpc.rae", 1);
            EXPECT(i2, R, "qpc.atomic_mode", DION__DEVX_QP_ATOMIC_UP_TO_8);
        }
    }

    /* Connect a <-> b (loopback), through the blobs as the backend would carry them. */
    CHECK(N->qp_connect(nic, a.qp, b.blob) == DION_SUCCESS, "connect a: %s", dion_last_error());
    CHECK(N->qp_connect(nic, b.qp, a.blob) == DION_SUCCESS, "connect b: %s", dion_last_error());
    dion__mlx5_qp_t *qa = dion__gdaki_mlx5_qp(a.qp), *qb = dion__gdaki_mlx5_qp(b.qp);
    for (int k = 0; k < 2; k++) {
        dion__mlx5_qp_t *me = k ? qb : qa, *peer = k ? qa : qb;
        /* the transitions of this QP, in order */
        int seq = 0;
        for (int i = 0; i < F->ncmd; i++)
            if (!F->cmd[i].create && F->cmd[i].obj == me->qpn) {
                CHECK(F->cmd[i].opcode == 0x502 + seq, "QP %#x: transition %d is %#x", me->qpn, seq,
                      F->cmd[i].opcode);
                seq++;
            }
        CHECK(seq == 3, "QP %#x went through %d transitions, expected RST2INIT, INIT2RTR, RTR2RTS", me->qpn,
              seq);
        const uint8_t *r = cmd(0x503, me->qpn, 0), *s = cmd(0x504, me->qpn, 0);
        if (!r || !s) continue;
        const dion__devx_cmd_t R = DION__DEVX_INIT2RTR_QP, S = DION__DEVX_RTR2RTS_QP;
        EXPECT(r, R, "qpn", me->qpn);
        EXPECT(r, R, "qpc.remote_qpn", peer->qpn);
        EXPECT(r, R, "qpc.next_rcv_psn", peer->psn);
        EXPECT(r, R, "qpc.mtu", IBV_MTU_4096);
        EXPECT(r, R, "qpc.log_msg_max", 30);
        EXPECT(r, R, "qpc.min_rnr_nak", 12);
        EXPECT(r, R, "qpc.log_rra_max", 4); /* responder: 16 reads/atomics */
        EXPECT(r, R, "qpc.primary_address_path.vhca_port_num", 1);
        EXPECT(r, R, "qpc.primary_address_path.grh", 0);
        EXPECT(r, R, "qpc.primary_address_path.rlid", 0);
        EXPECT(r, R, "qpc.primary_address_path.src_addr_index", 3);
        EXPECT(r, R, "qpc.primary_address_path.hop_limit", 64);
        EXPECT(r, R, "qpc.primary_address_path.tclass", 96);
        EXPECT(r, R, "qpc.primary_address_path.eth_prio", 5);
        EXPECT(r, R, "qpc.primary_address_path.rmac_47_32", 0x0200);
        EXPECT(r, R, "qpc.primary_address_path.rmac_31_0", 0x0a000001);
        uint64_t sport = fld(r, R, "qpc.primary_address_path.udp_sport");
        CHECK(sport >= 0xc000 && sport <= 0xffff, "udp_sport %#llx outside the RoCE v2 range",
              (unsigned long long)sport);
        static const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
        CHECK(!memcmp(r + 0x200 / 8, gid, 16), "rgid_rip is not the peer's GID ::ffff:10.0.0.1");
        CHECK(!memcmp(F->ah_dgid, gid, 16) && F->ah_sgid_index == 3 && F->ah_hop_limit == 64,
              "the AH that resolved the MAC was for another GID or index");
        EXPECT(s, S, "qpn", me->qpn);
        EXPECT(s, S, "qpc.next_send_psn", me->psn);
        EXPECT(s, S, "qpc.retry_count", 5);
        EXPECT(s, S, "qpc.rnr_retry", 7);
        EXPECT(s, S, "qpc.primary_address_path.ack_timeout", 14);
        EXPECT(s, S, "qpc.log_sra_max", 3); /* min(8 this device issues, 16 the peer accepts) */
        EXPECT(s, S, "qpc.log_ack_req_freq", 0);
        CHECK(me->state == IBV_QPS_RTS, "QP %#x in state %d, not RTS", me->qpn, me->state);
    }
    CHECK(qa->psn != qb->psn || qa->qpn == qb->qpn, "both QPs start at PSN %#x", qa->psn);
    CHECK(count_kind("ah") == 2, "%d AHs made, expected one per connect", count_kind("ah"));

    N->qp_destroy(nic, b.qp);
    N->qp_destroy(nic, a.qp);
    N->close(nic);
    check_teardown("RoCE path");
}

static void test_ib_path(void)
{
    for (int forced = 0; forced < 2; forced++) {
        fresh();
        F->link_layer = IBV_LINK_LAYER_INFINIBAND;
        F->cap_port_type = 0;
        F->cap_sq_ts_format = 1; /* real time only */
        setenv("DION_IB_SL", "9", 1);
        if (forced) setenv("DION_IB_GID_INDEX", "0", 1);
        dion__gdaki_nic_t *nic = NULL;
        CHECK(N->open(NULL, &nic) == DION_SUCCESS, "IB open: %s", dion_last_error());
        if (!nic) return;
        tqp_t a, b;
        CHECK(make_qp(nic, 0, 0, 64, 1, 0, &a) == DION_SUCCESS &&
                  make_qp(nic, 0, 0, 64, 1, 0, &b) == DION_SUCCESS,
              "IB QPs: %s", dion_last_error());
        EXPECT(cmd(0x500, 0, 0), DION__DEVX_CREATE_QP, "qpc.ts_format", 2);
        CHECK(N->qp_connect(nic, a.qp, b.blob) == DION_SUCCESS, "IB connect: %s", dion_last_error());
        const uint8_t *r = cmd(0x503, a.dev.qpn, 0);
        const dion__devx_cmd_t R = DION__DEVX_INIT2RTR_QP;
        EXPECT(r, R, "qpc.remote_qpn", b.dev.qpn);
        EXPECT(r, R, "qpc.primary_address_path.rlid", FM_LID);
        EXPECT(r, R, "qpc.primary_address_path.sl", 9);
        EXPECT(r, R, "qpc.primary_address_path.eth_prio", 0);
        EXPECT(r, R, "qpc.primary_address_path.rmac_31_0", 0);
        EXPECT(r, R, "qpc.primary_address_path.grh", forced);
        EXPECT(r, R, "qpc.primary_address_path.udp_sport", 0);
        static const uint8_t zero[16], gid[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, FM_LID};
        CHECK(r && !memcmp(r + 0x200 / 8, forced ? gid : zero, 16), "IB rgid (forced GID index %d)", forced);
        CHECK(count_kind("ah") == 0, "an AH was made on InfiniBand");
        N->close(nic); /* QPs left for close to destroy */
        check_teardown("IB path");
    }
}

/* ---- the doorbell ---- */

static int wait_for(volatile uint64_t *p, uint64_t v)
{
    for (int i = 0; i < 5000; i++) {
        if (__atomic_load_n(p, __ATOMIC_ACQUIRE) == v) return 1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void test_doorbell(void)
{
    /* The GPU may not map the UAR (error 800): a CPU thread copies the mailbox to the register. */
    fresh();
    G.map_rc = DION__MLX5_CU_NOT_PERMITTED;
    dion__gdaki_nic_t *nic = NULL;
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    if (!nic) return;
    dion__mlx5_t *m = dion__gdaki_mlx5_dev(nic);
    tqp_t a, b;
    CHECK(make_qp(nic, 0, 1, 64, 1, 0, &a) == DION_SUCCESS &&
              make_qp(nic, 1, 1, 64, 1, 0, &b) == DION_SUCCESS,
          "QPs with the CPU doorbell: %s", dion_last_error());
    CHECK(m->db_mode == DION__MLX5_DB_CPU && m->db.running, "doorbell mode %d, thread %d", m->db_mode,
          m->db.running);
    CHECK(has(m->db_why, "PeerMappingOverride=1") && has(m->db_why, "not permitted"),
          "the fallback's reason names the setting");
    volatile uint64_t *reg = F->uar[0].reg_addr;
    CHECK(a.dev.db != (uint64_t *)reg && a.dev.db != b.dev.db && a.dev.db && b.dev.db,
          "GPU threads must write a mailbox of their own QP, not the register");
    /* What device code writes: BE32(pi << 8), BE32(qpn << 8); the thread forwards the latest value. */
    uint64_t v1 = 0x0012340000010400ull, v2 = 0x00a0010000010800ull, v3 = 0x0013340000010400ull;
    __atomic_store_n(a.dev.db, v1, __ATOMIC_RELEASE);
    CHECK(wait_for(reg, v1), "the CPU doorbell did not forward QP a's doorbell within 5 s");
    __atomic_store_n(b.dev.db, v2, __ATOMIC_RELEASE);
    CHECK(wait_for(reg, v2), "the CPU doorbell did not forward QP b's doorbell");
    __atomic_store_n(a.dev.db, v3, __ATOMIC_RELEASE);
    CHECK(wait_for(reg, v3), "the CPU doorbell did not forward QP a's second doorbell");
    CHECK(__atomic_load_n(&m->db.rings, __ATOMIC_RELAXED) == 3, "%llu UAR writes for 3 doorbells",
          (unsigned long long)m->db.rings);
    N->qp_destroy(nic, b.qp);
    N->qp_destroy(nic, a.qp);
    N->close(nic);
    check_teardown("CPU doorbell");

    /* DION_GDAKI_DOORBELL=gpu: no fallback, a sentence with the setting. */
    fresh();
    G.map_rc = DION__MLX5_CU_NOT_PERMITTED;
    setenv("DION_GDAKI_DOORBELL", "gpu", 1);
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    CHECK(make_qp(nic, 0, 1, 64, 1, 0, &a) == DION_ERR_UNSUPPORTED &&
              has(dion_last_error(), "PeerMappingOverride=1") &&
              has(dion_last_error(), "DION_GDAKI_DOORBELL=gpu"),
          "DION_GDAKI_DOORBELL=gpu without the mapping must fail with the setting");
    N->close(nic);
    check_teardown("doorbell=gpu refused");

    /* DION_GDAKI_DOORBELL=cpu: the thread even though the mapping would work; the UAR never mapped. */
    fresh();
    setenv("DION_GDAKI_DOORBELL", "cpu", 1);
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    CHECK(make_qp(nic, 0, 1, 64, 1, 0, &a) == DION_SUCCESS, "QP: %s", dion_last_error());
    m = dion__gdaki_mlx5_dev(nic);
    CHECK(G.map_calls == 0 && m->db_mode == DION__MLX5_DB_CPU && has(m->db_why, "DION_GDAKI_DOORBELL=cpu"),
          "doorbell=cpu: map calls %d, mode %d", G.map_calls, m->db_mode);
    N->close(nic);
    check_teardown("doorbell=cpu");

    /* CPU mode: queues in host memory registered as such, CPU threads write the UAR register directly. */
    fresh();
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    CHECK(make_qp(nic, 0, 1, 128, 1, 1, &a) == DION_SUCCESS, "CPU-mode QP: %s", dion_last_error());
    m = dion__gdaki_mlx5_dev(nic);
    CHECK(a.dev.db == (uint64_t *)F->uar[0].reg_addr &&
              a.dev.flags == (DION_GDAKI_QP_COLLAPSED | DION_GDAKI_QP_HOSTMEM),
          "CPU mode: db %p flags %#x", (void *)a.dev.db, a.dev.flags);
    CHECK(G.map_calls == 0 && !m->db.running && count_kind("gpumem") == 0, "CPU mode touched the GPU");
    CHECK(F->numem == 1 && !F->umem[0].dmabuf && F->umem[0].addr == a.dev.sq, "CPU mode: host-memory umem");
    check_queue_memory(&a, cmd(0x400, 0, 0), cmd(0x500, 0, 0), 128, 1, a.dev.sq, F->umem[0].size);
    N->close(nic);
    check_teardown("CPU mode");
}

/* ---- registrations and the umem routes ---- */

static void test_registration(void)
{
    fresh();
    dion__gdaki_nic_t *nic = NULL;
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    if (!nic) return;
    static uint8_t win[3][8192];
    dion__gdaki_mr_t *mr[3];
    uint32_t lkey;
    uint64_t laddr;
    dion__gdaki_rdesc_t d;
    CHECK(N->mr_reg(nic, win[0] + 100, 5000, 1, &mr[0], &lkey, &laddr, &d) == DION_SUCCESS, "host mr");
    CHECK(F->nmr == 1 && !F->mr[0].dmabuf && F->mr[0].addr == win[0] + 100 && F->mr[0].len == 5000 &&
              F->mr[0].access == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC),
          "host memory: ibv_reg_mr of the range with local write and remote write/read/atomic");
    CHECK(laddr == (uintptr_t)(win[0] + 100) && d.addr == laddr && d.bytes == 5000 &&
              d.flags == DION__GDAKI_MR_HOST && d.rkey != lkey && d.rkey,
          "host desc: addr %#llx rkey %#x flags %#x", (unsigned long long)d.addr, d.rkey, d.flags);
    CHECK(N->mr_reg(nic, win[1] + 4096 + 64, 2048, 0, &mr[1], &lkey, &laddr, &d) == DION_SUCCESS, "GPU mr");
    CHECK(F->nmr == 2 && F->mr[1].dmabuf && F->mr[1].iova == (uintptr_t)(win[1] + 4096 + 64) &&
              F->mr[1].offset == ((uintptr_t)(win[1] + 4096 + 64) & 4095) && d.flags == 0,
          "GPU memory: dmabuf first, iova = the address, offset in the dmabuf");
    F->mr_dmabuf_ok = 0;
    CHECK(N->mr_reg(nic, win[2], 512, 0, &mr[2], &lkey, &laddr, &d) == DION_SUCCESS && F->nmr == 3 &&
              !F->mr[2].dmabuf && F->mr[2].addr == win[2],
          "GPU memory without dmabuf: ibv_reg_mr (nvidia-peermem)");
    F->mr_plain_ok = 0;
    dion__gdaki_mr_t *bad = NULL;
    CHECK(N->mr_reg(nic, win[2], 512, 0, &bad, &lkey, &laddr, &d) == DION_ERR_UNSUPPORTED && !bad &&
              has(dion_last_error(), "dmabuf route") && has(dion_last_error(), "nvidia_peermem"),
          "both routes refused: a sentence naming both");
    CHECK(G.fds == 0, "dmabuf fds left open");
    CHECK(N->mr_dereg(nic, mr[2]) == DION_SUCCESS, "dereg");
    CHECK(N->mr_dereg(nic, (dion__gdaki_mr_t *)&lkey) == DION_ERR_INVALID_ARG, "deregistering a stranger");
    /* mr[0] and mr[1] left for close */

    /* umem: no dmabuf fd -> peermem route on the GPU address */
    G.fail_dmabuf = 1;
    tqp_t a;
    CHECK(make_qp(nic, 0, 1, 64, 1, 0, &a) == DION_SUCCESS, "QP over peermem: %s", dion_last_error());
    CHECK(F->numem == 1 && !F->umem[0].dmabuf && F->umem[0].addr == G.last_alloc &&
              !strcmp(dion__gdaki_mlx5_qp(a.qp)->umem_path, "nvidia-peermem"),
          "umem without dmabuf: the GPU address through nvidia-peermem");
    N->close(nic);
    check_teardown_but("registration", "mr");
}

/* ---- a failure at every step: the sentence names the step (and the firmware's answer); nothing leaks ----
 */

typedef struct {
    const char *name;
    void (*arm)(void);
    int at; /* 0: open fails, 1: qp_create, 2: qp_connect */
    const char *want[3];
} step_t;

static void f_open(void)
{
    F->open_errno = EOPNOTSUPP;
}
static void f_pd(void)
{
    F->fail_pd = 1;
}
static void f_query(void)
{
    F->fail_opcode = 0x100, F->fail_status = 0x3, F->fail_syndrome = 0x1b2c3d4e;
}
static void f_query2(void)
{
    F->fail_opcode = 0x100, F->fail_nth = 1, F->fail_status = 0x2, F->fail_syndrome = 0x11;
}
static void f_atomic(void)
{
    F->cap_atomic = 0;
}
static void f_uar(void)
{
    F->fail_uar = 7;
}
static void f_eqn(void)
{
    F->fail_eqn = 1;
}
static void f_alloc(void)
{
    G.fail_alloc = 1;
}
static void f_fill(void)
{
    G.fail_fill = 1;
}
static void f_umem(void)
{
    F->umem_dmabuf_ok = 0, F->umem_plain_ok = 0;
}
static void f_cq(void)
{
    F->fail_opcode = 0x400, F->fail_status = 0x5, F->fail_syndrome = 0x6d1fa3;
}
static void f_qp(void)
{
    F->fail_opcode = 0x500, F->fail_status = 0x3, F->fail_syndrome = 0x2c9b0e;
}
static void f_init(void)
{
    F->fail_opcode = 0x502, F->fail_status = 0x9, F->fail_syndrome = 0x11aa22;
}
static void f_mbox(void)
{
    G.map_rc = DION__MLX5_CU_NOT_PERMITTED, G.fail_mapped = 1;
}
static void f_ah(void)
{
    F->fail_ah = 1;
}
static void f_rtr(void)
{
    F->fail_opcode = 0x503, F->fail_status = 0x3, F->fail_syndrome = 0x7f00ab;
}
static void f_rts(void)
{
    F->fail_opcode = 0x504, F->fail_status = 0x40, F->fail_syndrome = 0x3141;
}

static const step_t steps[] = {
    {"DEVX open", f_open, 0, {"cannot be opened with DEVX", "no DEVX user context", "mlx5_fake"}},
    {"PD", f_pd, 0, {"ibv_alloc_pd failed", "mlx5_fake", NULL}},
    {"QUERY_HCA_CAP",
     f_query,
     0,
     {"QUERY_HCA_CAP (general caps)", "status 0x3 (bad parameter)", "syndrome 0x1b2c3d4e"}},
    {"QUERY_HCA_CAP atomic",
     f_query2,
     0,
     {"QUERY_HCA_CAP (atomic caps)", "status 0x2 (bad operation)", "syndrome 0x00000011"}},
    {"no atomics", f_atomic, 0, {"no RDMA atomics", "DION_TRANSPORT=proxy", NULL}},
    {"UAR", f_uar, 0, {"mlx5dv_devx_alloc_uar failed for every type", "NC_DEDICATED", "BF"}},
    {"EQN", f_eqn, 0, {"mlx5dv_devx_query_eqn", NULL, NULL}},
    {"GPU memory", f_alloc, 1, {"allocating", "GPU memory", "context 3, peer 2"}},
    {"GPU fill", f_fill, 1, {"initializing the queue memory", "illegal memory access", NULL}},
    {"umem", f_umem, 1, {"dmabuf route", "nvidia-peermem route", "GPUDirect RDMA"}},
    {"CREATE_CQ",
     f_cq,
     1,
     {"CREATE_CQ for context 3, peer 2", "status 0x5 (bad resource)", "syndrome 0x006d1fa3"}},
    {"CREATE_QP",
     f_qp,
     1,
     {"CREATE_QP for context 3, peer 2", "status 0x3 (bad parameter)", "syndrome 0x002c9b0e"}},
    {"RST2INIT", f_init, 1, {"RST2INIT of QP", "status 0x9 (bad resource state)", "syndrome 0x0011aa22"}},
    {"CPU doorbell mailbox", f_mbox, 1, {"CPU doorbell's mailbox", "context 3, peer 2", "out of memory"}},
    {"AH", f_ah, 2, {"no route to rank 2", "ibv_create_ah", "DION_IB_GID_INDEX"}},
    {"INIT2RTR", f_rtr, 2, {"INIT2RTR of QP", "status 0x3 (bad parameter)", "syndrome 0x007f00ab"}},
    {"RTR2RTS", f_rts, 2, {"RTR2RTS of QP", "status 0x40 (bad QP state)", "syndrome 0x00003141"}},
};

static void test_failures(void)
{
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        const step_t *st = &steps[i];
        fresh();
        st->arm();
        dion__gdaki_nic_t *nic = NULL;
        dion_status_t s = N->open(NULL, &nic);
        tqp_t a, b;
        int at = 0;
        if (s == DION_SUCCESS) {
            at = 1;
            s = make_qp(nic, 3, 2, 64, 1, 0, &a);
            if (s == DION_SUCCESS) {
                at = 2;
                CHECK(make_qp(nic, 2, 3, 64, 1, 0, &b) == DION_SUCCESS || st->at == 1, "%s: second QP",
                      st->name);
                s = N->qp_connect(nic, a.qp, b.blob);
                if (s == DION_SUCCESS) at = 3;
            }
        }
        CHECK(s != DION_SUCCESS && at == st->at, "%s: expected a failure at step %d, got status %d at %d",
              st->name, st->at, (int)s, at);
        const char *e = dion_last_error();
        for (int k = 0; k < 3; k++)
            if (st->want[k]) CHECK(has(e, st->want[k]), "%s: the sentence lacks '%s'", st->name, st->want[k]);
        if (st->at == 2) {
            char why[512] = "";
            CHECK(N->qp_why(a.qp, why, sizeof why) && !strcmp(why, e),
                  "%s: qp_why does not repeat the failure", st->name);
        }
        if (nic) N->close(nic);
        char what[96];
        snprintf(what, sizeof what, "failure at %s", st->name);
        check_teardown(what);
    }
}

static void test_limits_and_usable(void)
{
    fresh();
    F->cap_log_max_qp_sz = 10;
    dion__gdaki_nic_t *nic = NULL;
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    tqp_t a;
    CHECK(make_qp(nic, 0, 1, 2048, 1, 0, &a) == DION_ERR_INVALID_ARG &&
              has(dion_last_error(), "log_max_qp_sz 10"),
          "2048 WQEBBs above log_max_qp_sz 10 accepted");
    CHECK(make_qp(nic, 0, 1, 100, 1, 0, &a) == DION_ERR_INVALID_ARG,
          "100 WQEBBs (not a power of two) accepted");
    CHECK(make_qp(nic, 0, 1, 64, 3, 0, &a) == DION_ERR_INVALID_ARG, "3 CQEs accepted");
    N->close(nic);
    check_teardown("limits");

    char why[512] = "";
    CHECK(N->usable(why, sizeof why) == 1, "usable over the fake: %s", why);
    CHECK(F->live == 0, "usable left %d objects open", F->live);
    F->open_errno = EPERM; /* a device that refuses DEVX is not offered */
    CHECK(N->usable(why, sizeof why) == 0 && has(why, "cannot be opened with DEVX") &&
              has(why, "not allowed DEVX"),
          "usable with DEVX refused");
    F->open_errno = 0;
    /* With a GPU, the NIC must reach GPU memory: a trial umem, released again. */
    F->umem_dmabuf_ok = F->umem_plain_ok = 0;
    CHECK(N->usable(why, sizeof why) == 0 && has(why, "a 64 KiB trial block") && has(why, "GPUDirect RDMA"),
          "usable without GPUDirect RDMA");
    CHECK(F->live == 0, "the trial left %d objects open", F->live);
    G.no_gpu = 1; /* without a GPU only CPU-mode handles use the NIC: host memory is enough */
    CHECK(N->usable(why, sizeof why) == 1, "usable without a GPU: %s", why);
    G.no_gpu = 0;
    F->umem_dmabuf_ok = F->umem_plain_ok = 1;
    CHECK(N->usable(why, sizeof why) == 1 && F->live == 0 && count_kind("gpumem") >= 2,
          "usable with GPUDirect RDMA: %s", why);
    dion__mlx5_open_args_t bad = {.ibv_lib = LIB, .dv_lib = "libmlx5-not-here.so.9", .gpu = &gpu_ops};
    dion__gdaki_mlx5_test_args(&bad);
    CHECK(N->usable(why, sizeof why) == 0 && has(why, "libmlx5-not-here.so.9") &&
              has(why, "ibverbs-providers"),
          "usable without libmlx5");
    CHECK(N->open(NULL, &nic) == DION_ERR_UNSUPPORTED && has(dion_last_error(), "libmlx5-not-here.so.9"),
          "open without libmlx5");
    dion__gdaki_mlx5_test_args(NULL);
    CHECK(!strcmp(N->name, "mlx5") && N->version == DION__GDAKI_NIC_VERSION, "table name and version");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s path/to/fake_mlx5.so\n", argv[0]);
        return 2;
    }
    LIB = argv[1];
    void *h = dlopen(LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot load %s: %s\n", LIB, dlerror());
        return 1;
    }
    fake_mlx5_control_fn ctl;
    void *p = dlsym(h, "fake_mlx5_control");
    memcpy(&ctl, &p, sizeof p);
    p = dlsym(h, "fake_mlx5_reset");
    memcpy(&fake_reset, &p, sizeof p);
    p = dlsym(h, "fake_mlx5_event");
    memcpy(&fake_event, &p, sizeof p);
    if (!ctl || !fake_reset || !fake_event) {
        fprintf(stderr, "%s is not the fake\n", LIB);
        return 1;
    }
    F = ctl();
    test_roce_path();
    test_ib_path();
    test_doorbell();
    test_registration();
    test_failures();
    test_limits_and_usable();
    dlclose(h);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("gdaki mlx5 host half over the fake rdma-core: all checks passed\n");
    return 0;
}
