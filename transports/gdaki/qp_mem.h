/* The backend's part of gdaki QP descriptors (dion_gdaki_qp_dev_t, device/gdaki_proto.cuh): where the
 * counters, marks, pend flags and scratch words of QP i of nq lie. The backend (gdaki.c) and
 * perf/gdaki_post_bench both lay their QPs out through these, so that a per-QP array added to the descriptor
 * cannot be left unallocated by one of them (it was: the bench faulted on NULL marks after proto v2).
 *
 * Counter block (device memory; host memory in CPU mode), zeroed: nq dion_gdaki_qp_state_t, then nq x depth
 * marks, then nq x depth pend words. Scratch block (memory the NIC writes; mapped host memory on a GPU):
 * nq x depth words. */
#ifndef DION_GDAKI_QP_MEM_H
#define DION_GDAKI_QP_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "dion/device/gdaki_proto.cuh"

static inline size_t dion__gdaki_states_bytes(size_t nq, uint32_t depth)
{
    return nq * sizeof(dion_gdaki_qp_state_t) + 2u * nq * (size_t)depth * 8u;
}

static inline size_t dion__gdaki_scratch_bytes(size_t nq, uint32_t depth)
{
    return nq * (size_t)depth * 8u;
}

/* Points q's backend fields at QP i's parts: states is the counter block as device code addresses it,
 * scratch_dev the scratch block as device code addresses it, scratch_addr and scratch_lkey the same block as
 * WQEs name it (the NIC's registration). */
static inline void dion__gdaki_qp_bind(dion_gdaki_qp_dev_t *q, char *states, char *scratch_dev,
                                       uint64_t scratch_addr, uint32_t scratch_lkey, size_t nq, size_t i,
                                       uint32_t depth)
{
    size_t mb = nq * (size_t)depth * 8u, off = i * (size_t)depth * 8u;
    q->st = (dion_gdaki_qp_state_t *)(states + i * sizeof(dion_gdaki_qp_state_t));
    q->marks = (uint64_t *)(states + nq * sizeof(dion_gdaki_qp_state_t) + off);
    q->pend = (uint64_t *)(states + nq * sizeof(dion_gdaki_qp_state_t) + mb + off);
    q->scratch = (uint64_t *)(scratch_dev + off);
    q->scratch_addr = scratch_addr + off;
    q->scratch_lkey = scratch_lkey;
}

#endif /* DION_GDAKI_QP_MEM_H */
