/* dion-info: what DION can use on this machine and, for everything it cannot, why and what to do.
 * It reports and exits 0; missing hardware is an answer, not an error. Network libraries are dlopen'ed,
 * never linked, so that the tool runs (and explains) where they are absent. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cuda.h"
#include "gpu_select.h"
#include "internal.h"
#include "transports/gdaki/nic.h"
#include "transports/gdaki/softnic/wqe_check.h"
#include "transports/transport.h"
#if defined(DION_HAVE_VERBS)
#include "transports/proxy/engine_verbs.h"
#endif
#if defined(DION_HAVE_GDAKI_MLX5)
#include "transports/gdaki/mlx5.h"
#endif

#if defined(DION_IBVERBS_INCLUDE_FOUND)
#include <infiniband/verbs.h>
typedef struct ibv_device info_ibv_device_t;
#else
typedef struct info_ibv_device_opaque info_ibv_device_t; /* only handled through pointers */
#endif
#if defined(DION_FABRIC_INCLUDE_FOUND)
#include <rdma/fabric.h>
#endif

#ifndef DION_IBVERBS_INCLUDE_FOUND
#define DION_IBVERBS_INCLUDE_FOUND 0
#endif
#ifndef DION_MLX5DV_INCLUDE_FOUND
#define DION_MLX5DV_INCLUDE_FOUND 0
#endif
#ifndef DION_FABRIC_INCLUDE_FOUND
#define DION_FABRIC_INCLUDE_FOUND 0
#endif

#define SYS_IB   "/sys/class/infiniband"
#define MAX_RDMA 64

/* ---- output ---- */

static void section(const char *title)
{
    printf("\n== %s ==\n", title);
}

static void DION__PRINTF(1, 2) ok(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  [ok] ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* One line: what is missing, then after the arrow what to do about it. */
static void DION__PRINTF(2, 3) missing(const char *todo, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  [missing] ");
    vprintf(fmt, ap);
    printf(" -> %s\n", todo);
    va_end(ap);
}

/* The reasons a backend is unusable, gathered so that its verdict fits on one self-contained line. */
typedef struct {
    char why[1024];
    int blockers;
} verdict_t;

static void DION__PRINTF(2, 3) block(verdict_t *v, const char *fmt, ...)
{
    size_t len = strlen(v->why);
    if (len + 3 >= sizeof v->why) return;
    if (len) {
        strcpy(v->why + len, "; ");
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why + len, sizeof v->why - len, fmt, ap);
    va_end(ap);
    v->blockers++;
}

static void verdict(const char *backend, const verdict_t *v, const char *yes_note)
{
    if (v->blockers)
        printf("  => %s usable here: no (%s)\n", backend, v->why);
    else
        printf("  => %s usable here: yes (%s)\n", backend, yes_note);
}

/* ---- small file helpers ---- */

static int path_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* First line of a (sysfs) file without its newline; 0 when unreadable. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int got = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!got) return 0;
    buf[strcspn(buf, "\n")] = 0;
    return 1;
}

static int not_dot(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* ---- gathered facts ---- */

typedef struct {
    char name[256];
    char guid[64];
    int ports;
    int active_ports;
    int mlx5;
} rdma_dev_t;

static struct {
    /* CUDA */
    int ngpu;
    int dmabuf; /* 1 yes, 0 no, -1 unknown (no GPU or driver query unavailable) */
    int p2p_pairs, p2p_missing;
    int driver_api; /* cuMem* entry points reachable: what p2p uses to export GPU memory */
    /* RDMA */
    int ib_dir; /* /sys/class/infiniband exists */
    int nrdma;
    rdma_dev_t rdma[MAX_RDMA];
    int nmlx5, nactive;
    void *ibv, *mlx5, *fabric;
    char ibv_err[512], mlx5_err[512], fabric_err[512];
    int ibv_count; /* from ibv_get_device_list; -1 when not asked */
    int ibv_dmabuf;
    int mlx5_devx;
    int peermem;
    int nvidia_params; /* /proc/driver/nvidia/params readable */
    int peer_override; /* PeerMappingOverride=1 in RegistryDwords */
    int nprov;         /* distinct libfabric providers; -1 unknown */
    char fabric_why[512];
} g = {.dmabuf = -1, .ibv_count = -1, .nprov = -1};

/* ---- build ---- */

static void report_build(void)
{
    struct utsname u;
    printf("dion-info: what DION can use on this machine, and why not\n");
    section("Build");
    printf("  version:          %s\n", dion_version_string());
    printf("  build type:       %s\n", DION_BUILD_TYPE);
    printf("  CUDA archs:       %s\n", DION_CUDA_ARCHS);
    printf("  CUDA toolkit:     %s\n", DION_CUDA_VERSION);
    printf("  sanitizers:       %s\n", DION_SANITIZE_ON ? "on (address, undefined)" : "off");
    printf("  network headers:  infiniband/verbs.h %s, infiniband/mlx5dv.h %s, rdma/fabric.h %s\n",
           DION_IBVERBS_INCLUDE_FOUND ? "found" : "not found",
           DION_MLX5DV_INCLUDE_FOUND ? "found" : "not found",
           DION_FABRIC_INCLUDE_FOUND ? "found" : "not found");
    if (uname(&u) == 0)
        printf("  host:             %s, %s %s %s\n", u.nodename, u.sysname, u.release, u.machine);
}

/* ---- CUDA ---- */

typedef CUresult (*cu_device_get_fn)(CUdevice *, int);
typedef CUresult (*cu_device_get_attribute_fn)(int *, CUdevice_attribute, CUdevice);

/* Driver-API device attributes: several that matter here (dmabuf, VMM, POSIX fd export) are absent from the
 * runtime's cudaDeviceAttr enum. -1 when the driver cannot be asked. */
static int cu_attr(int ordinal, CUdevice_attribute attr)
{
    static cu_device_get_fn get;
    static cu_device_get_attribute_fn get_attr;
    static int looked;
    if (!looked) {
        enum cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        looked = 1;
        if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &fn, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            get = (cu_device_get_fn)fn;
        fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &fn, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            get_attr = (cu_device_get_attribute_fn)fn;
        cudaGetLastError();
    }
    CUdevice dev;
    int val = 0;
    if (!get || !get_attr || get(&dev, ordinal) != CUDA_SUCCESS || get_attr(&val, attr, dev) != CUDA_SUCCESS)
        return -1;
    return val;
}

static const char *yes_no_unknown(int v)
{
    return v < 0 ? "unknown" : v ? "yes" : "no";
}

static void report_mps(void)
{
    char control[4096];
    const char *dir = dion__cfg_env("CUDA_MPS_PIPE_DIRECTORY");
    if (dir) {
        snprintf(control, sizeof control, "%s/control", dir);
        if (path_exists(control)) {
            ok("MPS daemon: control pipe %s exists (CUDA_MPS_PIPE_DIRECTORY)", control);
            return;
        }
    }
    if (path_exists("/tmp/nvidia-mps/control")) {
        ok("MPS daemon: control pipe /tmp/nvidia-mps/control exists");
        return;
    }
    missing(
        "ranks sharing one GPU run one at a time without it; start one with 'nvidia-cuda-mps-control -d' or "
        "launch with 'dionrun --mps'",
        "MPS daemon: none found (%s%s%s/tmp/nvidia-mps/control absent)",
        dir ? "CUDA_MPS_PIPE_DIRECTORY=" : "", dir ? dir : "", dir ? " has no control pipe, " : "");
}

/* The GPU each local rank would take when the launcher is not dionrun (comm.c, gpu_select.c). */
static void report_gpu_choice(void)
{
    const char *var = NULL;
    int lr = dion__gpu_local_rank(&var);
    long long want = -1;
    if (dion__cfg_env("DION_DEVICE") && dion__cfg_int("DION_DEVICE", -1, 1 << 20, &want) != DION_SUCCESS)
        want = -1;
    printf("  GPU choice when the launcher is not dionrun (dionrun sets DION_DEVICE for each rank):\n");
    if (g.ngpu == 0) {
        printf("    no GPU visible: ranks run in CPU mode\n");
        return;
    }
    int shown = g.ngpu * 2 > 8 ? g.ngpu * 2 : 8;
    printf(
        "    local rank -> GPU (local rank modulo %d visible, unless the application chose a device first):\n"
        "     ",
        g.ngpu);
    for (int r = 0; r < shown; r++)
        printf("%s %d->%d", r ? "," : "", r, dion__gpu_choose(r, g.ngpu, 0, -1).device);
    printf(", ...\n");
    dion__gpu_choice_t mine = dion__gpu_choose(lr, g.ngpu, 0, want);
    if (want >= 0)
        printf("    this process: DION_DEVICE=%lld -> GPU %lld\n", want, want);
    else if (lr >= 0)
        printf("    this process: local rank %d (%s) -> GPU %d\n", lr, var, mine.device);
    else
        printf("    this process: no launcher variable gives a local rank (DION_LOCAL_RANK, "
               "OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK, MPI_LOCALRANKID): keeps the current "
               "device\n");
    printf(
        "    more local ranks than GPUs share them: that needs MPS (dionrun --mps); without it DION warns\n");
}

static void report_cuda(void)
{
    section("CUDA");
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    cudaGetLastError();
    if (drv)
        printf("  driver supports:  CUDA %d.%d\n", drv / 1000, (drv % 1000) / 10);
    else
        printf("  driver supports:  none (no NVIDIA driver / libcuda.so.1 found)\n");
    printf("  runtime:          CUDA %d.%d (linked statically)\n", rt / 1000, (rt % 1000) / 10);

    g.ngpu = dion__cuda_device_count();
    if (g.ngpu == 0) {
        missing("install the NVIDIA driver on a machine with a GPU; without one DION runs in CPU mode",
                "a usable GPU: %s", dion__cuda_unavailable_reason());
        report_mps();
        report_gpu_choice();
        return;
    }
    ok("%d GPU%s visible", g.ngpu, g.ngpu > 1 ? "s" : "");
    g.driver_api = dion__cu() != NULL;
    for (int i = 0; i < g.ngpu; i++) {
        struct cudaDeviceProp p;
        char bus[32] = "?";
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            cudaError_t e = cudaGetLastError();
            printf("  GPU %d: properties unavailable: %s\n", i, cudaGetErrorString(e));
            continue;
        }
        if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) != cudaSuccess) cudaGetLastError();
        const unsigned char *u = (const unsigned char *)p.uuid.bytes;
        printf("  GPU %d: %s, compute capability %d.%d, %.1f GiB, PCI %s, UUID "
               "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-"
               "%02x%02x-%02x%02x%02x%02x%02x%02x\n",
               i, p.name, p.major, p.minor, (double)p.totalGlobalMem / (1024.0 * 1024 * 1024), bus, u[0],
               u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
               u[15]);
        int dmabuf = cu_attr(i, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
        printf("         virtual memory management %s, POSIX fd export %s, GPUDirect RDMA %s, dmabuf %s\n",
               yes_no_unknown(cu_attr(i, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)),
               yes_no_unknown(cu_attr(i, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)),
               yes_no_unknown(cu_attr(i, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED)),
               yes_no_unknown(dmabuf));
        /* GDAKI may use any GPU, so dmabuf counts only when every GPU has it. */
        if (i == 0 || g.dmabuf == 1 || (g.dmabuf == -1 && dmabuf == 0)) g.dmabuf = dmabuf;
    }
    if (g.ngpu > 1) {
        printf("  P2P access (row can map column's memory, cudaDeviceCanAccessPeer):\n       ");
        for (int j = 0; j < g.ngpu; j++) printf(" %4d", j);
        printf("\n");
        for (int i = 0; i < g.ngpu; i++) {
            printf("  %4d ", i);
            for (int j = 0; j < g.ngpu; j++) {
                int can = 0;
                if (i == j) {
                    printf("    -");
                    continue;
                }
                if (cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess) {
                    cudaGetLastError();
                    can = 0;
                }
                g.p2p_pairs++;
                if (!can) g.p2p_missing++;
                printf(" %4s", can ? "yes" : "no");
            }
            printf("\n");
        }
    }
    report_mps();
    report_gpu_choice();
}

/* ---- RDMA ---- */

static void *load(const char *lib, char *err, size_t cap)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, cap, "%s", e ? e : "unknown dlopen error");
    }
    return h;
}

static const char *loaded_path(void *h)
{
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name || !*lm->l_name) return "?";
    return lm->l_name;
}

static void scan_rdma_port(rdma_dev_t *d, const char *port)
{
    char path[1024], state[64] = "?", layer[64] = "?", rate[64] = "";
    snprintf(path, sizeof path, SYS_IB "/%s/ports/%s/state", d->name, port);
    read_line(path, state, sizeof state);
    snprintf(path, sizeof path, SYS_IB "/%s/ports/%s/link_layer", d->name, port);
    read_line(path, layer, sizeof layer);
    snprintf(path, sizeof path, SYS_IB "/%s/ports/%s/rate", d->name, port);
    read_line(path, rate, sizeof rate);
    d->ports++;
    if (strstr(state, "ACTIVE")) d->active_ports++;
    printf("      port %s: state %s, link_layer %s%s%s\n", port, state, layer, *rate ? ", rate " : "", rate);
}

static void report_rdma(void)
{
    section("RDMA devices");
    struct dirent **ents = NULL;
    g.ib_dir = path_exists(SYS_IB);
    int n = g.ib_dir ? scandir(SYS_IB, &ents, not_dot, alphasort) : 0;
    if (n < 0) n = 0;
    for (int i = 0; i < n; i++) {
        if (g.nrdma < MAX_RDMA) {
            rdma_dev_t *d = &g.rdma[g.nrdma++];
            char path[1024];
            snprintf(d->name, sizeof d->name, "%s", ents[i]->d_name);
            snprintf(path, sizeof path, SYS_IB "/%s/node_guid", d->name);
            if (!read_line(path, d->guid, sizeof d->guid)) snprintf(d->guid, sizeof d->guid, "?");
            d->mlx5 = strncmp(d->name, "mlx5_", 5) == 0;
            printf("  %s: node_guid %s\n", d->name, d->guid);
            struct dirent **ports = NULL;
            snprintf(path, sizeof path, SYS_IB "/%s/ports", d->name);
            int np = scandir(path, &ports, not_dot, alphasort);
            for (int k = 0; k < np; k++) {
                scan_rdma_port(d, ports[k]->d_name);
                free(ports[k]);
            }
            free(ports);
            g.nmlx5 += d->mlx5;
            g.nactive += d->active_ports > 0;
        }
        free(ents[i]);
    }
    free(ents);
    if (g.nrdma == 0)
        printf("  none: " SYS_IB " is %s\n", g.ib_dir ? "empty" : "absent (no RDMA kernel driver loaded)");

    g.ibv = load("libibverbs.so.1", g.ibv_err, sizeof g.ibv_err);
    if (g.ibv) {
        typedef info_ibv_device_t **(*get_list_fn)(int *);
        typedef void (*free_list_fn)(info_ibv_device_t **);
        get_list_fn get_list = (get_list_fn)dlsym(g.ibv, "ibv_get_device_list");
        free_list_fn free_list = (free_list_fn)dlsym(g.ibv, "ibv_free_device_list");
        g.ibv_dmabuf = dlsym(g.ibv, "ibv_reg_dmabuf_mr") != NULL;
        char count[256] = "ibv_get_device_list not exported";
        if (get_list && free_list) {
            int num = 0;
            errno = 0;
            info_ibv_device_t **list = get_list(&num);
            if (list) {
                g.ibv_count = num;
                snprintf(count, sizeof count, "%d device%s through ibv_get_device_list", num,
                         num == 1 ? "" : "s");
                free_list(list);
            } else {
                int e = errno;
                /* ENOSYS: the kernel has no uverbs interface, i.e. no RDMA driver is loaded. */
                snprintf(count, sizeof count, "ibv_get_device_list failed: %s%s", strerror(e),
                         e == ENOSYS ? " (no RDMA support in the kernel: ib_uverbs not loaded)" : "");
            }
        }
        ok("libibverbs.so.1 loads (%s): %s", loaded_path(g.ibv), count);
    } else {
        missing("install rdma-core's libibverbs (apt install libibverbs1, dnf install libibverbs)",
                "libibverbs.so.1 cannot be loaded: %s", g.ibv_err);
    }
    g.mlx5 = load("libmlx5.so.1", g.mlx5_err, sizeof g.mlx5_err);
    if (g.mlx5) {
        g.mlx5_devx = dlsym(g.mlx5, "mlx5dv_devx_obj_create") && dlsym(g.mlx5, "mlx5dv_devx_umem_reg") &&
                      dlsym(g.mlx5, "mlx5dv_devx_alloc_uar");
        ok("libmlx5.so.1 loads (%s)%s", loaded_path(g.mlx5),
           g.mlx5_devx ? ", DEVX entry points present" : ", but without DEVX entry points");
    } else {
        missing("install rdma-core's mlx5 provider (apt install ibverbs-providers, dnf install libibverbs)",
                "libmlx5.so.1 cannot be loaded: %s", g.mlx5_err);
    }

    /* GPUDirect RDMA through the peer-memory module; dmabuf is the other route (per GPU, see CUDA). */
    char line[512];
    FILE *f = fopen("/proc/modules", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "nvidia_peermem ", 15) || !strncmp(line, "nv_peer_mem ", 12)) g.peermem = 1;
    if (f) fclose(f);
    f = fopen("/proc/driver/nvidia/params", "r");
    g.nvidia_params = f != NULL;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RegistryDwords:", 15) && strstr(line, "PeerMappingOverride=1"))
            g.peer_override = 1;
    if (f) fclose(f);
}

/* ---- libfabric ---- */

static void report_fabric(void)
{
    section("libfabric");
    g.fabric = load("libfabric.so.1", g.fabric_err, sizeof g.fabric_err);
    if (!g.fabric) {
        missing(
            "install libfabric (apt install libfabric1, dnf install libfabric) or point LD_LIBRARY_PATH at "
            "your vendor's build",
            "libfabric.so.1 cannot be loaded: %s", g.fabric_err);
        snprintf(g.fabric_why, sizeof g.fabric_why, "libfabric.so.1 cannot be loaded");
        return;
    }
    uint32_t (*version)(void) = (uint32_t(*)(void))dlsym(g.fabric, "fi_version");
    uint32_t v = version ? version() : 0;
    ok("libfabric.so.1 loads (%s), API %u.%u", loaded_path(g.fabric), v >> 16, v & 0xffff);
#if DION_FABRIC_INCLUDE_FOUND
    typedef int (*getinfo_fn)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                              struct fi_info **);
    typedef void (*freeinfo_fn)(struct fi_info *);
    typedef const char *(*strerror_fn)(int);
    getinfo_fn getinfo = (getinfo_fn)dlsym(g.fabric, "fi_getinfo");
    freeinfo_fn freeinfo = (freeinfo_fn)dlsym(g.fabric, "fi_freeinfo");
    strerror_fn fstrerror = (strerror_fn)dlsym(g.fabric, "fi_strerror");
    if (!getinfo || !freeinfo) {
        missing("use a complete libfabric build", "libfabric.so.1 lacks fi_getinfo/fi_freeinfo");
        snprintf(g.fabric_why, sizeof g.fabric_why, "libfabric.so.1 lacks fi_getinfo");
        return;
    }
    struct fi_info *info = NULL;
    int rc = getinfo(FI_VERSION(1, 9), NULL, NULL, 0, NULL, &info);
    if (rc != 0) {
        const char *text = fstrerror ? fstrerror(-rc) : "fi_strerror unavailable";
        missing("check the providers libfabric was built with (fi_info -l) and FI_PROVIDER",
                "fi_getinfo(1.9) found no provider: %s (%d)", text, rc);
        snprintf(g.fabric_why, sizeof g.fabric_why, "fi_getinfo found no provider: %s", text);
        g.nprov = 0;
        return;
    }
    /* fi_getinfo lists one entry per (provider, domain, endpoint type); show each provider once. */
    const char *seen[128];
    int counts[128];
    int nseen = 0;
    for (struct fi_info *i = info; i; i = i->next) {
        const char *name = i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "?";
        int k = 0;
        while (k < nseen && strcmp(seen[k], name)) k++;
        if (k == nseen && nseen < 128) {
            seen[nseen] = name;
            counts[nseen++] = 0;
        }
        if (k < nseen) counts[k]++;
    }
    for (int k = 0; k < nseen; k++)
        printf("  provider %s (%d fi_info entr%s)\n", seen[k], counts[k], counts[k] == 1 ? "y" : "ies");
    g.nprov = nseen;
    freeinfo(info);
    if (!nseen) snprintf(g.fabric_why, sizeof g.fabric_why, "fi_getinfo returned no provider");
#else
    printf("  providers: not listed: this dion-info was built without <rdma/fabric.h> (install libfabric-dev "
           "and "
           "rebuild to list them)\n");
    snprintf(g.fabric_why, sizeof g.fabric_why, "providers unknown (built without rdma/fabric.h)");
#endif
}

/* ---- backends ---- */

static const char *no_rdma_reason(void)
{
    return g.ib_dir ? "no RDMA device: " SYS_IB " is empty" : "no RDMA device: " SYS_IB " is absent";
}

static void report_p2p(void)
{
    verdict_t v = {{0}, 0};
    char note[256];
    printf("\np2p (same-node peers whose memory this GPU can map)\n");
    if (g.ngpu == 0) {
        missing("use a machine with an NVIDIA GPU and driver for GPU windows", "a CUDA GPU: %s",
                dion__cuda_unavailable_reason());
        ok("CPU mode over shared memory always works (host windows in memfd, mapped by every local rank)");
        verdict("p2p", &v, "CPU mode over shared memory; no GPU here");
        return;
    }
    ok("%d CUDA GPU%s", g.ngpu, g.ngpu > 1 ? "s" : "");
    if (g.driver_api)
        ok("same-node peers through CUDA IPC: cuMem* exports as POSIX file descriptors");
    else {
        missing("update the NVIDIA driver to one that supports CUDA 12 or newer",
                "same-node peers through CUDA IPC: the driver's cuMem* entry points are not reachable");
        block(&v, "CUDA IPC unavailable: the driver lacks the cuMem* entry points");
    }
    if (g.ngpu == 1) {
        ok("one GPU: ranks sharing it map each other's memory (run them concurrently under MPS)");
        snprintf(note, sizeof note, "ranks sharing the GPU");
    } else if (g.p2p_missing == 0) {
        ok("P2P access between every pair of the %d GPUs", g.ngpu);
        snprintf(note, sizeof note, "all %d GPUs reach each other", g.ngpu);
    } else {
        missing("peers on those GPUs need a network backend (gdaki or proxy); check the topology with "
                "'nvidia-smi "
                "topo -m' and that IOMMU/ACS do not block PCIe P2P",
                "P2P access: %d of %d GPU pairs cannot map each other (matrix above)", g.p2p_missing,
                g.p2p_pairs);
        snprintf(note, sizeof note, "%d of %d GPU pairs; the rest need a network backend",
                 g.p2p_pairs - g.p2p_missing, g.p2p_pairs);
    }
    verdict("p2p", &v, note);
}

/* GPUDirect RDMA: the NIC reads and writes GPU memory. Shared by gdaki and proxy/verbs. */
static int report_gpudirect(void)
{
    if (g.peermem) {
        ok("GPUDirect RDMA: nvidia_peermem module loaded");
        return 1;
    }
    if (g.dmabuf == 1 && g.ibv_dmabuf) {
        ok("GPUDirect RDMA: dmabuf (every GPU supports it and libibverbs has ibv_reg_dmabuf_mr)");
        return 1;
    }
    char dmabuf[160];
    if (g.dmabuf == 1)
        snprintf(dmabuf, sizeof dmabuf, "GPUs support dmabuf but libibverbs lacks ibv_reg_dmabuf_mr");
    else if (g.dmabuf == 0)
        snprintf(dmabuf, sizeof dmabuf, "dmabuf unsupported by the GPU/driver");
    else
        snprintf(dmabuf, sizeof dmabuf, "dmabuf support unknown (%s)",
                 g.ngpu ? "driver not asked" : "no GPU");
    missing(
        "'modprobe nvidia_peermem', or use the open NVIDIA kernel module (R535+) with a kernel and rdma-core "
        "that support dmabuf",
        "GPUDirect RDMA: nvidia_peermem not loaded (/proc/modules), %s", dmabuf);
    return 0;
}

/* gdaki over the softnic model: a CPU thread per rank plays the NIC (tests; never chosen by auto). */
static void report_softnic(void)
{
    verdict_t v = {{0}, 0};
    int which = 0;
    if (dion__cfg_enum("DION_GDAKI_NIC", &which) != DION_SUCCESS) dion__error_clear();
    if (which == 2)
        ok("softnic model selected (DION_GDAKI_NIC=softnic): a CPU thread per rank plays the NIC, reading "
           "the "
           "WQEs device code writes; nothing runs on a NIC");
    else {
        missing("set DION_GDAKI_NIC=softnic to run gdaki over the model (tests only)",
                "softnic model not selected (DION_GDAKI_NIC=%s)", which == 1 ? "mlx5" : "auto");
        block(&v, "not selected: DION_GDAKI_NIC=softnic selects it");
    }
    char why[256] = "";
    if (dion__gdaki_softnic.usable(why, sizeof why))
        ok("the model executes work requests through the ofi engine, which opens here");
    else {
        missing("install libfabric (libfabric1) or set DION_OFI_PROVIDER=tcp", "%s", why);
        block(&v, "its ofi engine cannot run");
    }
    if (dion__snic_uses_mlx5dv())
        ok("the model reads WQEs with rdma-core's mlx5dv.h definitions (a field DION lays out wrongly is "
           "caught)");
    else
        missing(
            "install libibverbs-dev and rebuild",
            "the model reads WQEs with DION's own copy of the layouts (mlx5dv.h was absent at build time)");
    verdict("gdaki/softnic", &v, "softnic model selected: gdaki runs against the model; nothing on a NIC");
}

/* gdaki on an mlx5 NIC, one line per requirement: the device, DEVX, GPUDirect RDMA for the queues and
 * windows, and who rings the doorbell. The DEVX line is the real open (the same device choice, DEVX context,
 * PD, HCA caps, GID and UAR a comm makes), and the doorbell line the real cuMemHostRegister of that UAR page.
 */
static void report_gdaki(void)
{
    verdict_t v = {{0}, 0};
    char note[512] = "";
    printf("\ngdaki (GPU threads post RDMA work requests to mlx5 NICs directly)\n");
    if (g.nmlx5)
        ok("an mlx5 device: %d (" SYS_IB "/mlx5_*)", g.nmlx5);
    else if (g.nrdma) {
        missing("gdaki needs a ConnectX (mlx5) NIC; other NICs can use proxy/verbs or proxy/ofi",
                "an mlx5 device: found %d RDMA device%s, none named mlx5_*", g.nrdma, g.nrdma > 1 ? "s" : "");
        block(&v, "no mlx5 device (%d other RDMA device%s)", g.nrdma, g.nrdma > 1 ? "s" : "");
    } else {
        missing("install a ConnectX NIC and load its driver (mlx5_ib); gdaki needs one",
                "an mlx5 device: " SYS_IB " is %s", g.ib_dir ? "empty" : "absent");
        block(&v, "%s", no_rdma_reason());
    }
#if defined(DION_HAVE_GDAKI_MLX5)
    dion__mlx5_probe_t p;
    dion__mlx5_probe(NULL, NULL, &p);
    if (!p.lib_ok) {
        missing("install rdma-core (apt install libibverbs1 ibverbs-providers; dnf install rdma-core)", "%s",
                p.why);
        block(&v, "rdma-core's libibverbs/libmlx5 not loadable");
    } else if (p.devx_ok) {
        ok("DEVX allowed: opened %s", p.desc);
    } else if (g.nmlx5) {
        missing("see the sentence; DEVX needs mlx5_ib of Linux 5.1+ or MLNX_OFED, a ConnectX-5 or newer, and "
                "the device's rights in a container",
                "DEVX: %s", p.why);
        block(&v, "DEVX open failed");
    } else {
        printf("  DEVX: not tried without an mlx5 device\n");
    }
    if (p.lib_ok)
        printf("  rdma-core offers: %s, %s\n",
               p.umem_dmabuf ? "dmabuf umem (mlx5dv_devx_umem_reg_ex)" : "no dmabuf umem (rdma-core < 38)",
               p.mr_dmabuf ? "dmabuf MRs (ibv_reg_dmabuf_mr)" : "no dmabuf MRs (rdma-core < 34)");
#else
    missing("install libibverbs-dev (rdma-core headers) and rebuild",
            "this build has no mlx5 NIC for gdaki (built without infiniband/mlx5dv.h)");
    block(&v, "built without rdma-core's mlx5dv.h");
#endif
    if (g.ngpu)
        ok("a CUDA GPU (%d)", g.ngpu);
    else {
        missing("gdaki posts from GPU threads; use a machine with an NVIDIA GPU and driver (CPU mode over an "
                "mlx5 "
                "NIC needs none)",
                "a CUDA GPU: %s", dion__cuda_unavailable_reason());
        block(&v, "no GPU");
    }
    if (!report_gpudirect() && g.ngpu) block(&v, "no GPUDirect RDMA (nvidia_peermem or dmabuf)");
    /* The doorbell: never a blocker, a CPU thread rings when GPU threads cannot. */
    const char *setting = "add 'options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"' to "
                          "/etc/modprobe.d/nvidia.conf and reload the nvidia module (or reboot)";
#if defined(DION_HAVE_GDAKI_MLX5)
    if (p.uar_map == 1)
        ok("doorbell: the NIC's UAR page maps into the GPU (cuMemHostRegister IOMEMORY): GPU threads ring "
           "it");
    else if (p.uar_map == 0) {
        missing(setting,
                "doorbell: the GPU may not map the NIC's UAR page (%s): a CPU thread rings the doorbells "
                "for GPU threads (slower)%s",
                p.uar_why, p.uar_map_rc == 800 ? "; PeerMappingOverride=1 is missing" : "");
        snprintf(note, sizeof note, "; doorbells rung by a CPU thread (PeerMappingOverride=1 missing)");
    } else
#endif
        if (g.peer_override)
        ok("PeerMappingOverride=1 in /proc/driver/nvidia/params: GPU threads may ring the doorbell");
    else {
        missing(setting, "PeerMappingOverride=1 (%s): without it a CPU thread rings the doorbells (slower)",
                g.nvidia_params ? "not in RegistryDwords of /proc/driver/nvidia/params"
                                : "/proc/driver/nvidia/params absent: no NVIDIA kernel driver");
        snprintf(note, sizeof note, "; doorbells rung by a CPU thread (PeerMappingOverride=1 missing)");
    }
    ok("gdaki backend built: device half device/gdaki.cuh (GPU kernels need -DDION_DEVICE_BACKENDS=5), "
       "NIC seam transports/gdaki/nic.h");
    char yes[640];
    snprintf(yes, sizeof yes, "mlx5 NIC through DEVX%s", note);
    verdict("gdaki", &v, yes);
    report_softnic();
}

static void report_proxy_verbs(void)
{
    verdict_t v = {{0}, 0};
    printf("\nproxy/verbs (CPU proxy threads post RDMA verbs for GPU commands)\n");
#if defined(DION_HAVE_VERBS)
    /* The engine's own probe: the same library load, device, port and GID choice that opening it does. */
    dion__verbs_probe_t p;
    dion__verbs_probe(NULL, &p);
    if (p.lib_ok)
        ok("libibverbs loads (%s)%s", p.lib_path,
           p.has_dmabuf_mr
               ? ", with ibv_reg_dmabuf_mr"
               : ", without ibv_reg_dmabuf_mr (rdma-core < 34: GPU memory only through nvidia-peermem)");
    else {
        missing("apt install libibverbs1 ibverbs-providers (dnf install rdma-core), or use proxy/ofi", "%s",
                p.why);
        block(&v, "libibverbs.so.1 not loadable");
    }
    if (p.dev_ok)
        ok("engine would use %s", p.dev);
    else if (p.lib_ok) {
        missing("see the sentence; DION_IB_HCA, DION_IB_PORT and DION_IB_GID_INDEX choose by hand", "%s",
                p.why);
        if (g.nrdma == 0)
            block(&v, "%s", no_rdma_reason());
        else
            block(&v, "the engine found no usable RDMA port (see above)");
    }
    if (g.ngpu) {
        if (!report_gpudirect()) block(&v, "no GPUDirect RDMA for GPU windows");
        if (p.has_cuda_dmabuf)
            ok("GPU windows: dmabuf fds from cuMemGetHandleForAddressRange, then ibv_reg_mr "
               "(nvidia-peermem)");
    }
#else
    missing("install libibverbs-dev (rdma-core headers) and rebuild", "built without infiniband/verbs.h");
    block(&v, "built without the verbs engine (no infiniband/verbs.h); %s",
          g.nrdma ? "RDMA devices present" : no_rdma_reason());
#endif
    verdict(
        "proxy/verbs", &v,
        "the proxy backend opens it when every rank can (else ofi); DION_TRANSPORT=proxy/verbs forces it. "
        "Not yet run on an RDMA NIC: tested over a fake libibverbs only");
}

static void report_proxy_ofi(void)
{
    verdict_t v = {{0}, 0};
    printf("\nproxy/ofi (CPU proxy threads drive libfabric endpoints: EFA, Slingshot, TCP, shared memory)\n");
    if (g.fabric && g.nprov > 0)
        ok("libfabric.so.1 loadable with %d provider%s", g.nprov, g.nprov > 1 ? "s" : "");
    else if (g.fabric && g.nprov < 0 && !DION_FABRIC_INCLUDE_FOUND) {
        missing("install libfabric-dev and rebuild dion-info to list them", "libfabric providers: %s",
                g.fabric_why);
        block(&v, "%s", g.fabric_why);
    } else {
        missing("install libfabric with at least the tcp provider", "libfabric with a provider: %s",
                g.fabric_why);
        block(&v, "%s", g.fabric_why);
    }
    /* built: the backend "proxy" of the selection list below opens this engine */
    verdict(
        "proxy/ofi", &v,
        "the proxy backend opens it when some rank cannot open verbs; DION_TRANSPORT=proxy/ofi forces it; "
        "DION_OFI_PROVIDER picks the provider");
}

/* The backends this library was built with, in the order dion_dev_create tries them for each peer, and what
 * each says of this process (the same probe the selection runs). */
static void report_transport_table(void)
{
    const char *forced = dion__cfg_str("DION_TRANSPORT");
    printf("\nbuilt into this library, in the order tried for each peer%s%s%s:\n",
           forced && strcmp(forced, "auto") ? " (DION_TRANSPORT=" : "",
           forced && strcmp(forced, "auto") ? forced : "",
           forced && strcmp(forced, "auto") ? " forces one)" : "");
    for (int i = 0; dion__tl_all[i]; i++) {
        char why[DION__TL_WHY] = "";
        int usable = dion__tl_all[i]->usable(NULL, why, sizeof why);
        printf("  %d. %-12s %s%s%s\n", i + 1, dion__tl_all[i]->name,
               usable ? "usable here" : "not usable here", why[0] ? ": " : "", why);
    }
    printf(
        "  proxy uses one engine per communicator, the first that every rank can open: verbs, then ofi\n"
        "  (DION_TRANSPORT=proxy/verbs or proxy/ofi forces one). The choice for each peer, with the engine,\n"
        "  is logged at DION_LOG=info (\"rank A reaches rank B ... through proxy/verbs\").\n");
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: dion-info [--config-markdown] [-h|--help]\n"
        "  (no option)        report the build, GPUs, RDMA devices, libfabric, and for each backend every\n"
        "                     requirement met or missed, with what to do\n"
        "  --config-markdown  print docs/configuration.md (every environment variable DION reads)\n"
        "  -h, --help         this text\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config-markdown")) {
            dion__cfg_markdown(stdout);
            return fflush(stdout) == 0 ? 0 : 1;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        fprintf(stderr, "dion-info: unknown option '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }
    dion__log_init();
    /* Libraries loaded below may write to stdout themselves; keep our lines in order. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    report_build();
    report_cuda();
    report_rdma();
    report_fabric();
    section("Backends (per peer: p2p if reachable, else gdaki, else proxy/verbs, else proxy/ofi)");
    report_transport_table();
    report_p2p();
    report_gdaki();
    report_proxy_verbs();
    report_proxy_ofi();
    /* The network libraries stay loaded: unloading libfabric would orphan its provider state at exit. */
    return 0;
}
