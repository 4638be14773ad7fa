/* The ofi engine with GPU memory, one process talking to itself through the provider (loopback).
 * Usage: test_engine_ofi_gpu [PROVIDER]. Exit 77 without a GPU.
 * Where the provider registers CUDA memory (FI_HMEM): puts from host into a GPU window, a get back, a
 * fetch-add on a GPU word, each checked byte by byte through cudaMemcpy. Where it does not: registering GPU
 * memory must fail with DION_ERR_UNSUPPORTED and say that the window needs staging. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dion/dion.h"
#include "transports/proxy/engine.h"
#include "../common/test_time.h"

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                 \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        exit(1);                                                                                             \
    } while (0)
#define CHECK_OK(call)                                                                                       \
    do {                                                                                                     \
        dion_status_t s_ = (call);                                                                           \
        if (s_ != DION_SUCCESS) FAIL("%s -> %s: %s", #call, dion_status_string(s_), dion_last_error());      \
    } while (0)
#define CUDA_OK(call)                                                                                        \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) FAIL("%s: %s", #call, cudaGetErrorString(e_));                                \
    } while (0)

static const dion__engine_ops_t *E = &dion__engine_ofi;

static dion__engine_cqe_t wait_one(dion__engine_t *e, uint64_t cookie)
{
    double end = now_s() + 20;
    dion__engine_cqe_t c;
    for (;;) {
        int n = E->poll(e, &c, 1);
        if (n < 0) FAIL("poll: %s", dion_last_error());
        if (n == 1) {
            if (c.cookie != cookie)
                FAIL("completion %llu, expected %llu", (unsigned long long)c.cookie,
                     (unsigned long long)cookie);
            if (c.status != DION_SUCCESS) FAIL("operation %llu: %s", (unsigned long long)cookie, c.why);
            return c;
        }
        if (now_s() > end) FAIL("operation %llu did not complete within 20 s", (unsigned long long)cookie);
    }
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no usable GPU\n");
        return 77;
    }
    if (argc > 1) setenv("DION_OFI_PROVIDER", argv[1], 1);
    CUDA_OK(cudaSetDevice(0));
    char why[512] = "";
    dion__engine_open_args_t oa = {.rank = 0, .nranks = 1, .cuda_device = 0, .want_cuda = 1};
    dion__engine_t *e = NULL;
    dion_status_t os = E->open(&oa, &e, why, sizeof why);
    if (os == DION_ERR_UNSUPPORTED) {
        printf("SKIP: the ofi engine cannot open here: %s\n", why);
        return 77;
    }
    if (os != DION_SUCCESS) FAIL("open: %s: %s", dion_status_string(os), why);
    dion__engine_caps_t caps;
    E->query(e, &caps);
    printf("provider %s, domain %s, order %s, GPU memory %s\n", caps.provider, caps.domain, caps.order,
           caps.cuda_mem ? "registered (FI_HMEM)" : "needs staging");

    const size_t bytes = 1u << 20;
    void *gpu = NULL;
    CUDA_OK(cudaMalloc(&gpu, bytes));
    CUDA_OK(cudaMemset(gpu, 0, bytes));
    dion__engine_mr_t *gmr = NULL;
    dion__engine_rkey_t gkey;
    dion_status_t rs = E->mem_reg(e, gpu, bytes, DION__ENGINE_MEM_CUDA, &gmr, &gkey);
    if (!caps.cuda_mem) {
        if (rs != DION_ERR_UNSUPPORTED || !strstr(dion_last_error(), "staging"))
            FAIL("GPU registration without FI_HMEM: %s: %s", dion_status_string(rs), dion_last_error());
        printf("GPU registration refused as expected: %s\nok\n", dion_last_error());
        E->close(e);
        return 0;
    }
    CHECK_OK(rs);
    dion__engine_addr_t self;
    CHECK_OK(E->address(e, &self));
    CHECK_OK(E->connect(e, &self, 1));
    unsigned char *host, *back;
    CUDA_OK(cudaMallocHost((void **)&host, bytes));
    CUDA_OK(cudaMallocHost((void **)&back, bytes));
    dion__engine_mr_t *hmr, *bmr;
    dion__engine_rkey_t hkey, bkey;
    CHECK_OK(E->mem_reg(e, host, bytes, DION__ENGINE_MEM_HOST, &hmr, &hkey));
    CHECK_OK(E->mem_reg(e, back, bytes, DION__ENGINE_MEM_HOST, &bmr, &bkey));
    uint64_t seed = 0x243f6a8885a308d3ull, cookie = 1;
    unsigned char *expect = calloc(1, bytes), *check = malloc(bytes);
    for (int k = 0; k < 50; k++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        size_t len = 1 + seed % (bytes / 8), off = (seed >> 24) % (bytes - len + 1);
        for (size_t i = 0; i < len; i++) host[i] = (unsigned char)(seed >> (i % 56)) ^ (unsigned char)i;
        memcpy(expect + off, host, len);
        CHECK_OK(E->put(e, 0, hmr, host, &gkey, off, len, 0, cookie));
        wait_one(e, cookie++);
    }
    CUDA_OK(cudaMemcpy(check, gpu, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bytes; i++)
        if (check[i] != expect[i]) FAIL("GPU window byte %zu is %u, expected %u", i, check[i], expect[i]);
    CHECK_OK(E->get(e, 0, bmr, back, &gkey, 0, bytes, 0, cookie));
    wait_one(e, cookie++);
    if (memcmp(back, expect, bytes)) FAIL("get of the GPU window differs from what was put");
    uint64_t w0 = 0;
    memcpy(&w0, expect, 8);
    CHECK_OK(E->atomic(e, 0, DION__ENGINE_AMO_FETCH_ADD, &gkey, 0, 5, 0, 0, cookie));
    dion__engine_cqe_t c = wait_one(e, cookie++);
    uint64_t w1 = 0;
    CUDA_OK(cudaMemcpy(&w1, gpu, 8, cudaMemcpyDeviceToHost));
    if (c.value != w0 || w1 != w0 + 5)
        FAIL("fetch-add on GPU memory: old %llu (expected %llu), now %llu", (unsigned long long)c.value,
             (unsigned long long)w0, (unsigned long long)w1);
    CHECK_OK(E->mem_dereg(e, gmr));
    CHECK_OK(E->mem_dereg(e, hmr));
    CHECK_OK(E->mem_dereg(e, bmr));
    E->close(e);
    printf("GPU window: 50 puts, a get and a fetch-add checked\nok\n");
    return 0;
}
