/* The proxy backend's command ring driven by GPU threads: many threads of many blocks post stamped commands
 * into one ring in host memory mapped into the GPU; a host proxy thread drains it and checks that every
 * command arrives exactly once, in each thread's order, never torn. Then the GPU waits on quiet, and
 * fetch-add results come back through the ring. Exits 77 (skipped) without a GPU. proxy_ring_gpu [blocks
 * threads_per_block commands_per_thread] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "dion/device/proxy.cuh"
#include "transports/proxy/proxy.h"

#define CHECK_CUDA(call)                                                                                     \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

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

static __host__ __device__ uint64_t stamp_sum(uint32_t producer, uint64_t seq)
{
    uint64_t x = ((uint64_t)producer << 40) ^ seq ^ 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

/* Each thread posts `per` commands stamped (thread, sequence); odd blocks post with the warp variant. One
 * thread per block then waits on quiet. Failures are counted in errs[0] (posts) and errs[1] (quiet). */
__global__ void post_kernel(dion_proxy_ring_dev_t ring, uint32_t per, uint64_t timeout_ns, unsigned *errs)
{
    uint32_t id = blockIdx.x * blockDim.x + threadIdx.x;
    for (uint32_t s = 0; s < per; s++) {
        dion_proxy_cmd_t c =
            dion__proxy_cmd_rma(DION_PROXY_OP_PUT, (int)id, 7, s, 9, stamp_sum(id, s), s + 1);
        dion__proxy_cmd_signal(&c, id, DION_SIG_ADD, ~(uint64_t)s);
        dion_status_t st = (blockIdx.x & 1) ? dion__proxy_post_warp(&ring, &c, timeout_ns, NULL, NULL)
                                            : dion__proxy_post(&ring, &c, timeout_ns, NULL, NULL);
        if (st != DION_SUCCESS) {
            atomicAdd(&errs[0], 1u);
            break;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && dion__proxy_quiet(&ring, timeout_ns, NULL) != DION_SUCCESS)
        atomicAdd(&errs[1], 1u);
}

__global__ void fetch_kernel(dion_proxy_ring_dev_t ring, uint32_t per, uint64_t timeout_ns,
                             unsigned long long *results, unsigned *errs)
{
    uint32_t id = blockIdx.x * blockDim.x + threadIdx.x;
    for (uint32_t s = 0; s < per; s++) {
        dion_proxy_cmd_t c = dion__proxy_cmd(DION_PROXY_OP_FETCH_ADD, 0);
        c.u.amo.operand = 1;
        uint64_t old = ~0ull;
        if (dion__proxy_fetch(&ring, &c, timeout_ns, &old, NULL) != DION_SUCCESS) atomicAdd(&errs[2], 1u);
        results[(size_t)id * per + s] = old;
    }
}

/* One thread posts stamped commands first..first+count-1 of producer 0 (timeout long), then, if probe, one
 * more with a 50 ms timeout: out = {its status, its ticket, the consumed count it saw}. */
__global__ void full_kernel(dion_proxy_ring_dev_t ring, uint32_t first, uint32_t count, int probe,
                            unsigned *errs, unsigned long long *out)
{
    for (uint32_t s = first; s < first + count; s++) {
        dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 0, 7, s, 9, stamp_sum(0, s), s + 1);
        dion__proxy_cmd_signal(&c, 0, DION_SIG_ADD, ~(uint64_t)s);
        if (dion__proxy_post(&ring, &c, 10ull * 1000000000ull, NULL, NULL) != DION_SUCCESS)
            atomicAdd(&errs[3], 1u);
    }
    if (probe) {
        uint32_t s = first + count;
        dion_proxy_cmd_t c = dion__proxy_cmd_rma(DION_PROXY_OP_PUT, 0, 7, s, 9, stamp_sum(0, s), s + 1);
        uint64_t t = 0, seen = 99;
        out[0] = (unsigned long long)dion__proxy_post(&ring, &c, 50ull * 1000000ull, &t, &seen);
        out[1] = t;
        out[2] = seen;
    } else if (dion__proxy_quiet(&ring, 10ull * 1000000000ull, NULL) != DION_SUCCESS) {
        atomicAdd(&errs[3], 1u);
    }
}

typedef struct {
    uint32_t nproducers;
    std::vector<uint64_t> expect;
    uint64_t total, bad, quiets, fetches, nops, next_pos;
    uint64_t word; /* fetch-add target */
} checker_t;

static dion_status_t check_exec(void *arg, uint32_t thread, dion__proxy_ring_t *r, dion_proxy_cmd_t *cmds,
                                uint32_t n, uint32_t *taken)
{
    checker_t *k = (checker_t *)arg;
    for (uint32_t i = 0; i < n; i++) {
        dion_proxy_cmd_t *c = &cmds[i];
        uint64_t pos = dion__proxy_cmd_pos(c);
        if (pos != k->next_pos && k->bad++ < 5)
            fprintf(stderr, "FAIL position %llu handed over, expected %llu\n", (unsigned long long)pos,
                    (unsigned long long)k->next_pos);
        k->next_pos = pos + 1;
        if (c->op == DION_PROXY_OP_QUIET) {
            k->quiets++;
            continue;
        }
        if (c->op == DION_PROXY_OP_NOP) {
            k->nops++;
            continue;
        }
        if (c->op == DION_PROXY_OP_FETCH_ADD) {
            dion__proxy_cmd_result(c, k->word);
            k->word += c->u.amo.operand;
            k->fetches++;
            continue;
        }
        int p = c->peer;
        uint64_t s = c->u.rma.dst_off;
        int ok = c->op == DION_PROXY_OP_PUT && p >= 0 && (uint32_t)p < k->nproducers &&
                 c->u.rma.src_off == stamp_sum((uint32_t)p, s) && c->u.rma.bytes == s + 1 &&
                 c->u.rma.value == ~s && c->u.rma.sig == (uint32_t)p && c->u.rma.dst_win == 7 &&
                 c->u.rma.src_win == 9;
        if (!ok) {
            if (k->bad++ < 5)
                fprintf(stderr, "FAIL torn or foreign command at position %llu\n", (unsigned long long)pos);
        } else if (s != k->expect[p]) {
            if (k->bad++ < 5)
                fprintf(stderr, "FAIL thread %d: sequence %llu, expected %llu\n", p, (unsigned long long)s,
                        (unsigned long long)k->expect[p]);
        } else {
            k->expect[p]++;
        }
        k->total++;
    }
    dion__proxy_ring_complete(r, dion__proxy_cmd_pos(&cmds[n - 1]) + 1);
    *taken = n;
    return DION_SUCCESS;
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    uint32_t blocks = argc > 3 ? (uint32_t)atoi(argv[1]) : 64, tpb = argc > 3 ? (uint32_t)atoi(argv[2]) : 256,
             per = argc > 3 ? (uint32_t)atoi(argv[3]) : 200;
    const uint64_t timeout = 20ull * 1000000000ull;
    CHECK_CUDA(cudaSetDevice(0));
    dion__proxy_ring_t *r = NULL;
    if (dion__proxy_ring_create(0, 1024, 1, &r) != DION_SUCCESS) {
        fprintf(stderr, "FAIL ring: %s\n", dion_last_error());
        return 1;
    }
    checker_t k;
    k.nproducers = blocks * tpb;
    k.expect.assign(k.nproducers, 0);
    k.total = k.bad = k.quiets = k.fetches = k.nops = k.next_pos = k.word = 0;
    dion__proxy_exec_t ex = {check_exec, NULL, &k};
    dion__proxy_threads_t *th = NULL;
    if (dion__proxy_threads_start(&r, 1, &ex, 0, &th) != DION_SUCCESS) {
        fprintf(stderr, "FAIL threads: %s\n", dion_last_error());
        return 1;
    }
    unsigned *errs;
    CHECK_CUDA(cudaMallocManaged(&errs, 4 * sizeof(unsigned)));
    memset(errs, 0, 4 * sizeof(unsigned));

    post_kernel<<<blocks, tpb>>>(r->dev, per, timeout, errs);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK(errs[0] == 0 && errs[1] == 0, "%u posts and %u quiets failed", errs[0], errs[1]);

    uint32_t fper = 16, fthreads = 32 * 64;
    unsigned long long *res;
    CHECK_CUDA(cudaMallocManaged(&res, sizeof *res * fthreads * fper));
    fetch_kernel<<<fthreads / 128, 128>>>(r->dev, fper, timeout, res, errs);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    dion__proxy_threads_stop(th);

    uint64_t want = (uint64_t)k.nproducers * per;
    uint64_t short_threads = 0;
    for (uint32_t p = 0; p < k.nproducers; p++)
        if (k.expect[p] != per) short_threads++;
    CHECK(short_threads == 0 && k.total == want && k.bad == 0,
          "%llu commands of %llu checked, %llu bad, %llu threads incomplete", (unsigned long long)k.total,
          (unsigned long long)want, (unsigned long long)k.bad, (unsigned long long)short_threads);
    CHECK(k.quiets == blocks, "%llu quiets for %u blocks", (unsigned long long)k.quiets, blocks);
    CHECK(errs[2] == 0 && k.fetches == (uint64_t)fthreads * fper, "%u fetches failed, %llu executed", errs[2],
          (unsigned long long)k.fetches);
    std::vector<unsigned long long> v(res, res + (size_t)fthreads * fper);
    std::sort(v.begin(), v.end());
    uint64_t wrong = 0;
    for (size_t i = 0; i < v.size(); i++)
        if (v[i] != i) wrong++;
    CHECK(wrong == 0, "%llu fetch-add results are not a permutation of 0..%zu", (unsigned long long)wrong,
          v.size() - 1);
    /* A full ring that nobody drains: the GPU's extra post times out and abandons its ticket, the published
     * commands stay intact, and once a proxy thread runs they execute, the abandoned ticket as a NOP. */
    {
        dion__proxy_ring_t *f = NULL;
        if (dion__proxy_ring_create(1, 16, 1, &f) != DION_SUCCESS) {
            fprintf(stderr, "FAIL ring: %s\n", dion_last_error());
            return 1;
        }
        unsigned long long *out;
        CHECK_CUDA(cudaMallocManaged(&out, 4 * sizeof *out));
        memset(out, 0, 4 * sizeof *out);
        errs[3] = 0;
        full_kernel<<<1, 1>>>(f->dev, 0, 16, 1, errs, out);
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK(errs[3] == 0 && out[0] == DION_ERR_TIMEOUT && out[1] == 16 && out[2] == 0,
              "full ring: %u posts failed; extra post %s, ticket %llu, consumed seen %llu", errs[3],
              dion_status_string((dion_status_t)out[0]), out[1], out[2]);
        CHECK(f->ctl->abandoned == 1 && f->abandon[0] == 17, "abandon list: %llu %llu",
              (unsigned long long)f->ctl->abandoned, (unsigned long long)f->abandon[0]);
        for (uint64_t i = 0; i < 16; i++)
            CHECK(f->slots[i].seq == i + 1 && f->slots[i].u.rma.dst_off == i &&
                      f->slots[i].u.rma.src_off == stamp_sum(0, i),
                  "slot %llu changed", (unsigned long long)i);
        checker_t fk;
        fk.nproducers = 1;
        fk.expect.assign(1, 0);
        fk.total = fk.bad = fk.quiets = fk.fetches = fk.nops = fk.next_pos = fk.word = 0;
        dion__proxy_exec_t fex = {check_exec, NULL, &fk};
        dion__proxy_threads_t *fth = NULL;
        if (dion__proxy_threads_start(&f, 1, &fex, 0, &fth) != DION_SUCCESS) {
            fprintf(stderr, "FAIL threads: %s\n", dion_last_error());
            return 1;
        }
        full_kernel<<<1, 1>>>(f->dev, 16, 40, 0, errs, out); /* the abandoned sequence number goes again */
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaDeviceSynchronize());
        dion__proxy_threads_stop(fth);
        CHECK(errs[3] == 0 && fk.expect[0] == 56 && fk.nops == 1 && fk.bad == 0 && fk.quiets == 1,
              "after the full ring: %u failures, %llu executed, %llu nops, %llu bad", errs[3],
              (unsigned long long)fk.expect[0], (unsigned long long)fk.nops, (unsigned long long)fk.bad);
        cudaFree(out);
        dion__proxy_ring_destroy(f);
    }
    printf("%s: %u blocks x %u threads x %u commands through 1024 slots; %u x %u fetch-adds; full ring\n",
           failures ? "FAIL" : "PASS", blocks, tpb, per, fthreads, fper);
    cudaFree(res);
    cudaFree(errs);
    dion__proxy_ring_destroy(r);
    return failures ? 1 : 0;
}
