/* gdaki's mlx5 host half with the real CUDA operations (transports/gdaki/mlx5_cuda.c) on a machine with a GPU
 * and no RDMA NIC, over the fake libibverbs/libmlx5 of tests/unit/fake_mlx5.c:
 * - queue memory: cudaMalloc'd, 64 KiB aligned, SQ and doorbell records zero and the CQ all 0xff (read back);
 *   registered as a umem through a real dmabuf fd (the fake checks the fd is open) or, where the driver gives
 *   none, through the peer-memory route;
 * - the doorbell as GPU threads ring it: a kernel stores a value to the QP's dev->db and the host finds it in
 *   the (fake) UAR register - through cuMemHostRegister(IOMEMORY) of that page when the driver accepts it,
 * and through the CPU doorbell thread (mapped host mailbox) when it does not, and always with
 *   DION_GDAKI_DOORBELL=cpu;
 * - a window of GPU memory registered (dmabuf or plain), and nothing left alive after close.
 * Exit 77 (skipped) without a GPU. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_mlx5.h"
#include "src/cuda.h"
#include "transports/gdaki/mlx5_nic.h"

int gdaki_test_ring(uint64_t *db, uint64_t value); /* gdaki_mlx5_store.cu */

static int failures;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static int wait_for(volatile uint64_t *p, uint64_t v)
{
    for (int i = 0; i < 5000; i++) {
        if (__atomic_load_n(p, __ATOMIC_ACQUIRE) == v) return 1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void run(const char *doorbell, fake_mlx5_ctl_t *F, fake_mlx5_reset_fn reset)
{
    const dion__gdaki_nic_ops_t *N = &dion__gdaki_mlx5;
    reset();
    if (doorbell)
        setenv("DION_GDAKI_DOORBELL", doorbell, 1);
    else
        unsetenv("DION_GDAKI_DOORBELL");
    dion__gdaki_nic_t *nic = NULL;
    CHECK(N->open(NULL, &nic) == DION_SUCCESS, "open: %s", dion_last_error());
    if (!nic) return;
    dion__mlx5_t *m = dion__gdaki_mlx5_dev(nic);
    dion__gdaki_qp_args_t a = {.ctx = 0, .peer = 1, .nwqebb = 256, .ncqe = 1, .cpu = 0};
    dion__gdaki_qp_t *qp = NULL;
    dion_gdaki_qp_dev_t dev;
    uint8_t blob[DION__GDAKI_QP_BLOB];
    memset(&dev, 0, sizeof dev);
    dion_status_t s = N->qp_create(nic, &a, &qp, &dev, blob);
    CHECK(s == DION_SUCCESS, "qp_create with real GPU memory: %s", dion_last_error());
    if (s == DION_SUCCESS) {
        dion__mlx5_qp_t *q = dion__gdaki_mlx5_qp(qp);
        CHECK(((uintptr_t)q->mem & 65535) == 0, "queue memory %p not 64 KiB aligned", (void *)q->mem);
        uint8_t *h = malloc(q->mem_bytes);
        CHECK(h && cudaMemcpy(h, q->mem, q->mem_bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "read back");
        int ok = 1;
        for (size_t i = 0; h && i < q->mem_bytes; i++)
            ok &= h[i] == ((i >= q->cq_off && i < q->cq_off + 64) ? 0xff : 0);
        CHECK(ok, "queue memory: SQ and doorbell records zero, CQ 0xff");
        free(h);
        printf("  doorbell %s: umem through %s; %s\n", doorbell ? doorbell : "auto", q->umem_path,
               m->db_mode == DION__MLX5_DB_GPU ? "the UAR page is mapped into the GPU" : m->db_why);
        volatile uint64_t *reg = m->uar->reg_addr;
        const uint64_t v1 = 0x0001000000a00100ull, v2 = 0x0002000000a00100ull;
        CHECK(gdaki_test_ring(dev.db, v1) == 0, "kernel storing to dev->db failed: %s",
              cudaGetErrorString(cudaGetLastError()));
        CHECK(wait_for(reg, v1), "the GPU's doorbell did not reach the UAR register (mode %d): %#llx",
              m->db_mode, (unsigned long long)*reg);
        CHECK(gdaki_test_ring(dev.db, v2) == 0 && wait_for(reg, v2), "second doorbell");
        if (doorbell && !strcmp(doorbell, "cpu"))
            CHECK(m->db_mode == DION__MLX5_DB_CPU, "doorbell=cpu ignored");
    }
    static char *win;
    if (!win) cudaMalloc((void **)&win, 1 << 20);
    dion__gdaki_mr_t *mr = NULL;
    uint32_t lkey;
    uint64_t laddr;
    dion__gdaki_rdesc_t d;
    CHECK(N->mr_reg(nic, win + 4096, 65536, 0, &mr, &lkey, &laddr, &d) == DION_SUCCESS &&
              laddr == (uintptr_t)(win + 4096),
          "GPU window: %s", dion_last_error());
    printf("  window registered through %s\n", F->nmr && F->mr[F->nmr - 1].dmabuf ? "dmabuf" : "ibv_reg_mr");
    N->close(nic);
    CHECK(F->live == 0, "%d fake objects alive after close", F->live);
}

int main(int argc, char **argv)
{
    if (dion__cuda_device_count() == 0) {
        printf("gdaki_mlx5_gpu: no GPU (%s): skipped\n", dion__cuda_unavailable_reason());
        return 77;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: gdaki_mlx5_gpu <fake_mlx5 module>\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    fake_mlx5_control_fn ctl = NULL;
    fake_mlx5_reset_fn reset = NULL;
    void *p = h ? dlsym(h, "fake_mlx5_control") : NULL;
    memcpy(&ctl, &p, sizeof p);
    p = h ? dlsym(h, "fake_mlx5_reset") : NULL;
    memcpy(&reset, &p, sizeof p);
    if (!ctl || !reset) {
        fprintf(stderr, "cannot load the fake %s\n", argv[1]);
        return 1;
    }
    dion__mlx5_open_args_t a = {.ibv_lib = argv[1], .dv_lib = argv[1], .gpu = NULL};
    dion__gdaki_mlx5_test_args(&a);
    run(NULL, ctl(), reset);
    run("cpu", ctl(), reset);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("gdaki_mlx5_gpu: all checks passed\n");
    return 0;
}
