/* proxy/verbs GPU-memory registration on a machine with a GPU and no RDMA NIC: the dmabuf fd the engine gets
 * from cuMemGetHandleForAddressRange (page-widened range, offset of the window inside it), and the engine
 * registering cudaMalloc memory through the fake libibverbs, which checks that the fd it receives is a
 * dmabuf. Exit 77 (skipped) without a GPU, or where the driver gives no dmabuf (the engine then uses
 * nvidia-peermem). */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fake_ibverbs.h"
#include "src/cuda.h"
#include "transports/proxy/engine_verbs.h"

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

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d)) n++;
    if (d) closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (dion__cuda_device_count() == 0) {
        printf("verbs_gpu: no GPU (%s): skipped\n", dion__cuda_unavailable_reason());
        return 77;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: verbs_gpu <fake libibverbs>\n");
        return 2;
    }
    enum { BYTES = 3 << 20 };
    void *buf = NULL;
    if (cudaMalloc(&buf, BYTES) != cudaSuccess) {
        fprintf(stderr, "FAIL: cudaMalloc of %d bytes\n", BYTES);
        return 1;
    }
    uint64_t base = (uintptr_t)buf;
    const uint64_t offs[] = {0, 4096 + 123, (1 << 20) + 8};
    const size_t lens[] = {BYTES, 5000, 1 << 20};
    for (int i = 0; i < 3; i++) {
        int fd = -1;
        uint64_t off = ~0ull;
        char why[256] = "";
        int rc = dion__verbs_dmabuf_fd(NULL, base + offs[i], lens[i], &fd, &off, why, sizeof why);
        if (rc != 0 && i == 0) {
            printf("verbs_gpu: no dmabuf for cudaMalloc memory here (%s); the engine falls back to "
                   "nvidia-peermem: "
                   "skipped\n",
                   why);
            cudaFree(buf);
            return 77;
        }
        CHECK(rc == 0 && fd >= 0, "range %d: %s", i, why);
        CHECK(off == ((base + offs[i]) & 4095), "range %d: offset %llu", i, (unsigned long long)off);
        char path[64], target[256] = "";
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        CHECK(n > 0 && strstr(target, "dmabuf"), "range %d: fd %d is '%s', not a dmabuf", i, fd, target);
        if (fd >= 0) close(fd);
    }

    /* The engine's own registration over the fake libibverbs: dmabuf route taken, fd closed afterwards. */
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    fake_ibv_control_fn f = NULL;
    if (h) *(void **)&f = dlsym(h, "fake_ibv_control");
    if (!f) {
        fprintf(stderr, "FAIL: cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    fake_ibv_ctl_t *ctl = f();
    ctl->dmabuf_ok = 1;
    dion__verbs_t *v = NULL;
    dion__verbs_open_args_t a = {.nctx = 1, .npeers = 2, .libname = argv[1]};
    CHECK(dion__verbs_open(&a, &v) == DION_SUCCESS, "open: %s", dion_last_error());
    if (v) {
        int fds = open_fds();
        dion__verbs_mr_t *m = NULL;
        CHECK(dion__verbs_mem_reg(v, (char *)buf + 4096 + 123, 5000, DION__VERBS_MEM_GPU, &m) ==
                      DION_SUCCESS &&
                  m->path == DION__VERBS_REG_DMABUF,
              "GPU memory not registered through dmabuf: %s", dion_last_error());
        CHECK(ctl->dmabuf_fd_was_dmabuf && ctl->dmabuf_off == ((base + 4096 + 123) & 4095) &&
                  ctl->dmabuf_iova == base + 4096 + 123 && ctl->dmabuf_len == 5000,
              "ibv_reg_dmabuf_mr got fd dmabuf=%d offset %llu iova 0x%llx len %llu",
              ctl->dmabuf_fd_was_dmabuf, (unsigned long long)ctl->dmabuf_off,
              (unsigned long long)ctl->dmabuf_iova, (unsigned long long)ctl->dmabuf_len);
        CHECK(open_fds() == fds, "the dmabuf fd leaked (%d open, %d before)", open_fds(), fds);
        dion__verbs_mem_dereg(v, m);
        /* Without dmabuf in the NIC driver: the nvidia-peermem route (the fake's ibv_reg_mr). */
        ctl->dmabuf_ok = 0;
        CHECK(dion__verbs_mem_reg(v, buf, 4096, DION__VERBS_MEM_GPU, &m) == DION_SUCCESS &&
                  m->path == DION__VERBS_REG_PEERMEM,
              "fallback: %s", dion_last_error());
        dion__verbs_mem_dereg(v, m);
        dion__verbs_close(v);
    }
    cudaFree(buf);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("verbs_gpu: dmabuf fds and registration checks passed\n");
    return failures ? 1 : 0;
}
