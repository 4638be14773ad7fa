/* 32 lanes of a warp each reserve and build one mlx5 WQE into a shared SQ ring at once (device/mlx5.cuh):
 * random kinds (WRITE, READ, inline WRITE crossing WQEBBs, fetch-add, SET, NOP), random fence modes, the CQE
 * requested by the group's last lane only, over five rounds with different sets of lanes, starting near the
 * 16-bit index wrap and the ring's end. The host then checks the reservations (each group of lanes that
 * reserved together tiles its range in lane order, the groups tile the whole range, the counter advanced by
 * the sum) and every byte of the ring against the same builders run on the CPU, which tests/unit/test_mlx5.c
 * checks byte for byte against rdma-core. Prints the number of atomics per round (1 when the lanes stayed
 * converged). Exits 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/device/mlx5.cuh"

#define ROUNDS 5
#define NBB    512u      /* ring of 512 WQEBBs */
#define START  0xffd0ull /* 48 WQEBBs before the 16-bit wrap, which is also a ring end; every run uses >= 57 \
                          */
#define MAX_INL 92u      /* 2 WQEBBs at most, so five rounds fit in the ring without reuse */

enum { K_WRITE, K_READ, K_INLINE, K_ADD, K_SET, K_NOP, K_KINDS };

typedef struct {
    int active, kind;
    uint8_t fm;
    uint64_t raddr, laddr, value;
    uint32_t rkey, lkey, len;
    uint8_t data[MAX_INL];
} lane_op_t;

typedef struct {
    uint64_t slot, base;
    uint32_t total, last, done;
} lane_out_t;

static __host__ __device__ uint32_t op_wqebbs(const lane_op_t *o)
{
    switch (o->kind) {
    case K_INLINE:
        return dion__mlx5_wqebbs(dion__mlx5_inline_ds(o->len));
    case K_SET:
        return dion__mlx5_wqebbs(DION__MLX5_DS_MASKED64);
    default:
        return 1;
    }
}

static __host__ __device__ uint32_t op_post(const dion__mlx5_sq_t *sq, uint16_t idx, uint8_t fm,
                                            const lane_op_t *o)
{
    switch (o->kind) {
    case K_WRITE:
        return dion__mlx5_wqe_write(sq, idx, fm, o->raddr, o->rkey, o->laddr, o->lkey, o->len);
    case K_READ:
        return dion__mlx5_wqe_read(sq, idx, fm, o->raddr, o->rkey, o->laddr, o->lkey, o->len);
    case K_INLINE:
        return dion__mlx5_wqe_write_inline(sq, idx, fm, o->raddr, o->rkey, o->data, o->len);
    case K_ADD:
        return dion__mlx5_wqe_fetch_add(sq, idx, fm, o->raddr, o->rkey, o->value, o->laddr, o->lkey);
    case K_SET:
        return dion__mlx5_wqe_set(sq, idx, fm, o->raddr, o->rkey, o->value, o->laddr, o->lkey);
    default:
        return dion__mlx5_wqe_nop(sq, idx, fm);
    }
}

__global__ void post_rounds(dion__mlx5_sq_t sq, uint64_t *head, const lane_op_t *ops, lane_out_t *out)
{
    uint32_t lane = threadIdx.x;
    for (int r = 0; r < ROUNDS; r++) {
        __syncwarp();
        const lane_op_t *o = &ops[r * 32 + lane];
        if (o->active) {
            dion__mlx5_resv_t v = dion__mlx5_reserve(head, op_wqebbs(o), DION_SCOPE_GPU);
            uint8_t fm = (uint8_t)(o->fm | (v.last ? DION__MLX5_CTRL_CQ_UPDATE : 0));
            uint32_t used = op_post(&sq, (uint16_t)v.slot, fm, o);
            lane_out_t res = {v.slot, v.base, v.total, v.last, used};
            out[r * 32 + lane] = res;
        }
        __syncwarp();
    }
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* Checks the reservations and the ring (see the top of the file); returns the number of failures. */
static int verify(const lane_op_t *ops, const lane_out_t *out, const uint8_t *init, const uint8_t *got,
                  uint64_t head, uint32_t qpn, uint32_t random_mask)
{
    /* Reservations: lanes that share a base reserved together; inside a group, slots follow lane order and
     * sum to the group's total; the groups of a round tile [start of round, start + sum of sizes). */
    int fails = 0;
    static uint8_t want[NBB * 64];
    uint64_t next = START;
    int wrapped16 = 0, wrapped_ring = 0;
    memcpy(want, init, (size_t)NBB * 64);
    dion__mlx5_sq_t hsq = {want, NBB - 1, qpn};
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t round_start = next, round_sum = 0;
        int groups = 0;
        for (int l = 0; l < 32; l++)
            if (ops[r * 32 + l].active) round_sum += op_wqebbs(&ops[r * 32 + l]);
        uint64_t cursor = round_start;
        while (cursor < round_start + round_sum) { /* the group that starts at cursor */
            uint64_t expect = cursor;
            int members = 0, last_lane = -1;
            uint32_t total = 0;
            for (int l = 0; l < 32; l++) {
                const lane_out_t *o = &out[r * 32 + l];
                if (!ops[r * 32 + l].active || o->base != cursor) continue;
                if (o->slot != expect) {
                    fprintf(stderr, "FAIL: round %d lane %d slot %llu, want %llu (lane order)\n", r, l,
                            (unsigned long long)o->slot, (unsigned long long)expect);
                    fails++;
                }
                expect += op_wqebbs(&ops[r * 32 + l]);
                total = o->total;
                last_lane = l;
                members++;
            }
            if (!members || expect - cursor != total) {
                fprintf(stderr, "FAIL: round %d: group at %llu has %d lanes, %llu WQEBBs, total says %u\n", r,
                        (unsigned long long)cursor, members, (unsigned long long)(expect - cursor), total);
                fails++;
                break;
            }
            for (int l = 0; l < 32; l++) {
                const lane_out_t *o = &out[r * 32 + l];
                if (!ops[r * 32 + l].active || o->base != cursor) continue;
                if (!!o->last != (l == last_lane)) {
                    fprintf(stderr, "FAIL: round %d lane %d last=%u\n", r, l, o->last);
                    fails++;
                }
                if (o->done != op_wqebbs(&ops[r * 32 + l])) {
                    fprintf(stderr, "FAIL: round %d lane %d builder used %u WQEBBs\n", r, l, o->done);
                    fails++;
                }
                uint8_t fm = (uint8_t)(ops[r * 32 + l].fm | (l == last_lane ? DION__MLX5_CTRL_CQ_UPDATE : 0));
                op_post(&hsq, (uint16_t)o->slot, fm, &ops[r * 32 + l]);
                wrapped16 |= (uint16_t)(o->slot + o->done) < (uint16_t)o->slot;
                wrapped_ring |=
                    ((o->slot & (NBB - 1)) + o->done) > NBB || ((o->slot + o->done) & (NBB - 1)) == 0;
            }
            groups++;
            cursor = expect;
        }
        printf("round %d: %d lanes, %llu WQEBBs, %d atomic(s)\n", r,
               __builtin_popcount(r == 0   ? ~0u
                                  : r == 1 ? 0xaaaaaaaau
                                  : r == 2 ? 0x7fu
                                  : r == 3 ? 1u << 13
                                           : random_mask),
               (unsigned long long)round_sum, groups);
        next = round_start + round_sum;
    }
    if (head != next) {
        fprintf(stderr, "FAIL: producer counter %llu, want %llu\n", (unsigned long long)head,
                (unsigned long long)next);
        fails++;
    }
    if (!wrapped16 || !wrapped_ring) {
        fprintf(stderr, "FAIL: the run did not cross the 16-bit wrap (%d) and the ring's end (%d)\n",
                wrapped16, wrapped_ring);
        fails++;
    }
    for (size_t i = 0; i < (size_t)NBB * 64; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "FAIL: ring byte %zu (slot %zu + %zu): GPU %02x, CPU builders %02x\n", i, i / 64,
                    i % 64, got[i], want[i]);
            fails++;
            break;
        }
    return fails;
}

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FAIL: %s: %s\n", #call, cudaGetErrorString(e_));                                \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

int main(void)
{
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    static const uint8_t fences[] = {0, DION__MLX5_CTRL_FM_SMALL_INITIATR, DION__MLX5_CTRL_FM_FENCE,
                                     DION__MLX5_CTRL_FM_STRONG_ORDER, DION__MLX5_CTRL_FM_SMALL_AND_FENC};
    static lane_op_t ops[ROUNDS * 32];
    uint32_t random_mask = (uint32_t)rnd() | 1u;
    for (int r = 0; r < ROUNDS; r++)
        for (int l = 0; l < 32; l++) {
            lane_op_t *o = &ops[r * 32 + l];
            /* rounds: the whole warp, odd lanes, lanes 0..6, lane 13 alone, a random set */
            o->active = r == 0   ? 1
                        : r == 1 ? (l & 1)
                        : r == 2 ? l < 7
                        : r == 3 ? l == 13
                                 : (random_mask >> l) & 1;
            o->kind = (int)(rnd() % K_KINDS);
            o->fm = (uint8_t)(fences[rnd() % 5] | (rnd() & 1 ? DION__MLX5_CTRL_SOLICITED : 0));
            o->raddr = rnd(), o->laddr = rnd(), o->value = rnd();
            o->rkey = (uint32_t)rnd(), o->lkey = (uint32_t)rnd();
            o->len = o->kind == K_INLINE ? 1 + (uint32_t)(rnd() % MAX_INL) : (uint32_t)(rnd() % (1u << 30));
            for (uint32_t i = 0; i < MAX_INL; i++) o->data[i] = (uint8_t)rnd();
        }
    static uint8_t init[NBB * 64], got[NBB * 64];
    for (size_t i = 0; i < sizeof init; i++) init[i] = (uint8_t)rnd();
    uint32_t qpn = (uint32_t)rnd() & 0xffffff;

    uint8_t *d_ring;
    uint64_t *d_head, head = START;
    lane_op_t *d_ops;
    lane_out_t *d_out, out[ROUNDS * 32];
    CK(cudaMalloc(&d_ring, sizeof init));
    CK(cudaMalloc(&d_head, sizeof head));
    CK(cudaMalloc(&d_ops, sizeof ops));
    CK(cudaMalloc(&d_out, sizeof out));
    CK(cudaMemcpy(d_ring, init, sizeof init, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_head, &head, sizeof head, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_ops, ops, sizeof ops, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_out, 0, sizeof out));
    dion__mlx5_sq_t sq = {d_ring, NBB - 1, qpn};
    post_rounds<<<1, 32>>>(sq, d_head, d_ops, d_out);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, d_ring, sizeof got, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&head, d_head, sizeof head, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));

    int fails = verify(ops, out, init, got, head, qpn, random_mask);
    cudaFree(d_ring), cudaFree(d_head), cudaFree(d_ops), cudaFree(d_out);
    if (fails) return 1;
    printf("mlx5_warp_gpu: %llu WQEBBs from %d rounds match byte for byte\n",
           (unsigned long long)(head - START), ROUNDS);
    return 0;
}
