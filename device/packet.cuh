/* Packet puts: small messages whose flags travel inside the data (the LL protocol's idea), so the receiver
 * polls the data itself and neither side fences. Included by dion_device.cuh; docs/semantics.md, "Packet
 * puts", has the contract.
 *
 * Layout. A message of `bytes` payload bytes occupies DION_PACKET_SPAN(bytes) = 16 * ceil(bytes / 8) bytes
 * of the receiver's window, at a 16-byte aligned address: unit i carries payload bytes [8i, 8i+8) as two
 * 64-bit words, word j = payload bytes [8i+4j, 8i+4j+4) in its low half and the message's 32-bit sequence
 * number in its high half. Every word is written and read as one aligned 64-bit access, which is single-copy
 * atomic on the GPU (the 16-byte vector access is two such words as far as the PTX memory model goes), on
 * 64-bit CPUs, and for one RDMA write on the NICs DION targets: a reader that sees a word's flag equal to the
 * sequence it expects also sees that word's payload, with no fence, acquire or release on either side.
 *
 * Sequences. 32 bits, never 0 (a zeroed buffer holds no message): the next one is dion_packet_seq_next(s).
 * Each message to a region carries a sequence the region's previous message did not, so buffers are reused
 * without clearing; the receiver must have taken the previous message before the sender overwrites it (flow
 * control is the caller's: alternate two regions, or let the reply be the credit). */
#ifndef DION_DEVICE_PACKET_CUH
#define DION_DEVICE_PACKET_CUH

#include "dion/device/common.cuh"
#include "dion/device/p2p.cuh"
#include "dion/device/trace.cuh"

#define DION_PACKET_UNIT    16u /* bytes of window per unit */
#define DION_PACKET_PAYLOAD 8u  /* payload bytes per unit */
/* Bytes of window a message of `bytes` payload bytes occupies. */
#define DION_PACKET_SPAN(bytes)                                                                              \
    ((((uint64_t)(bytes) + DION_PACKET_PAYLOAD - 1) / DION_PACKET_PAYLOAD) * DION_PACKET_UNIT)

#if !DION__GPU
#ifdef __cplusplus
extern "C" {
#endif
/* CPU mode: 1 on every thread of the group when any of them passes v != 0 (all of them must call). */
DION_API int dion__cpu_group_any(int block, int v);
#ifdef __cplusplus
}
#endif
#endif

/* The next sequence number after s: wraps from 2^32 - 1 to 1, never 0. */
DION_HD uint32_t dion_packet_seq_next(uint32_t s)
{
    return s == 0xffffffffu ? 1u : s + 1u;
}

/* 1 on every thread of group g when any of them passes v != 0. */
DION_HD int dion__group_any(dion__group_t g, int v)
{
    if (g == DION__THREAD) return v != 0;
#if DION__GPU
    if (g == DION__BLOCK) return __syncthreads_or(v);
    uint32_t n = dion__group_size(DION__WARP);
    return __any_sync(n == 32 ? 0xffffffffu : (1u << n) - 1u, v);
#else
    return dion__cpu_group_any(g == DION__BLOCK, v);
#endif
}

/* ---- one unit: two 64-bit words, each written and read whole ---- */

DION_HD void dion__pkt_store(uint64_t *p, uint64_t w0, uint64_t w1, uint32_t scope)
{
#if DION__GPU
    if (scope == DION_SCOPE_GPU)
        asm volatile("st.relaxed.gpu.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(w0), "l"(w1) : "memory");
    else
        asm volatile("st.relaxed.sys.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(w0), "l"(w1) : "memory");
#else
    (void)scope;
    __atomic_store_n(p, w0, __ATOMIC_RELAXED);
    __atomic_store_n(p + 1, w1, __ATOMIC_RELAXED);
#endif
}

DION_HD void dion__pkt_load(const uint64_t *p, uint64_t *w0, uint64_t *w1, uint32_t scope)
{
#if DION__GPU
    uint64_t a, b;
    if (scope == DION_SCOPE_GPU)
        asm volatile("ld.relaxed.gpu.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    else
        asm volatile("ld.relaxed.sys.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    *w0 = a, *w1 = b;
#else
    (void)scope;
    *w0 = __atomic_load_n(p, __ATOMIC_RELAXED);
    *w1 = __atomic_load_n(p + 1, __ATOMIC_RELAXED);
#endif
}

/* Payload bytes [8u, 8u+8) of src (n bytes in all) as two 32-bit halves; bytes past n are zero. */
DION_HD void dion__pkt_gather(const char *src, size_t n, size_t u, uint32_t *lo, uint32_t *hi)
{
    size_t at = u * DION_PACKET_PAYLOAD;
    if (at + 8 <= n && ((uintptr_t)src & 7) == 0) { /* one load for the unit */
        uint64_t v = *(const uint64_t *)(src + at);
        *lo = (uint32_t)v;
        *hi = (uint32_t)(v >> 32);
        return;
    }
    if (at + 8 <= n && ((uintptr_t)src & 3) == 0) {
        *lo = *(const uint32_t *)(src + at);
        *hi = *(const uint32_t *)(src + at + 4);
        return;
    }
    uint8_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < 8 && at + i < n; i++) b[i] = (uint8_t)src[at + i];
    *lo = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    *hi = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
}

DION_HD void dion__pkt_scatter(char *dst, size_t n, size_t u, uint32_t lo, uint32_t hi)
{
    size_t at = u * DION_PACKET_PAYLOAD;
    if (at + 8 <= n && ((uintptr_t)dst & 7) == 0) {
        *(uint64_t *)(dst + at) = (uint64_t)hi << 32 | lo;
        return;
    }
    if (at + 8 <= n && ((uintptr_t)dst & 3) == 0) {
        *(uint32_t *)(dst + at) = lo;
        *(uint32_t *)(dst + at + 4) = hi;
        return;
    }
    for (size_t i = 0; i < 8 && at + i < n; i++)
        dst[at + i] = (char)(uint8_t)((i < 4 ? lo >> (8 * i) : hi >> (8 * (i - 4))) & 0xff);
}

/* Packets need every 8-byte word to land whole: p2p and the calling rank itself give that; the network
 * backends will once their engines guarantee it for 8-byte RDMA writes (docs/semantics.md). Until then a call
 * for such a peer records DION_ERR_UNSUPPORTED and touches nothing. */
DION_HD int dion__pkt_peer_ok(const dion_ctx_t *c, int peer, dion_op_t op, int lead)
{
    uint32_t t = dion__peer_transport(&c->dev, peer);
    if (t == DION_TRANSPORT_P2P || t == DION_TRANSPORT_SELF) return 1;
    if (lead && t != DION_TRANSPORT_NONE) {
        dion__err_t e = dion__err(DION_ERR_UNSUPPORTED, op, peer);
        e.observed = t;
        dion__record(c, e);
    }
    return 0;
}

DION_HD int dion__pkt_check_seq(const dion_ctx_t *c, uint32_t seq, dion_op_t op, int peer, int lead)
{
    if (seq != 0) return 1;
    if (lead) {
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, op, peer);
        e.expected = 1; /* sequence numbers start at 1: 0 is what a cleared buffer holds */
        dion__record(c, e);
    }
    return 0;
}

/* ---- put ---- */

DION_HD void dion__put_packet_group(dion_ctx_t c, dion__group_t g, dion_dwin_t dst, int peer, size_t dst_off,
                                    const void *src, size_t bytes, uint32_t seq)
{
    uint32_t r = dion__group_rank(g), n = dion__group_size(g);
    int lead = r == 0;
    uint64_t t0 = dion__trace_start(&c);
    uint64_t span = DION_PACKET_SPAN(bytes);
    if (dion__check_enabled(&c)) {
        if (!dion__check_ctx(&c, DION_OP_PUT_PACKET, lead) ||
            !dion__check_peer(&c, peer, DION_OP_PUT_PACKET, lead) ||
            !dion__pkt_check_seq(&c, seq, DION_OP_PUT_PACKET, peer, lead) ||
            !dion__check_range(&c, dst, peer, dst_off, span, DION_PACKET_UNIT, DION_OP_PUT_PACKET, peer,
                               lead))
            return;
    }
    if (!dion__pkt_peer_ok(&c, peer, DION_OP_PUT_PACKET, lead)) return;
    uint64_t *to = (uint64_t *)(dion__win_base(&c.dev, dst, peer) + dst_off);
    uint32_t scope = dion__p2p_scope(&c, peer, dst);
    uint64_t flag = (uint64_t)seq << 32;
    size_t units = (size_t)(span / DION_PACKET_UNIT);
    for (size_t u = r; u < units; u += n) {
        uint32_t lo, hi;
        dion__pkt_gather((const char *)src, bytes, u, &lo, &hi);
        dion__pkt_store(to + 2 * u, flag | lo, flag | hi, scope);
    }
    dion__group_sync(g);
    if (lead) {
        DION__STAT(&c, puts, 1);
        DION__STAT(&c, put_bytes, bytes);
        DION__TRACE(&c, t0, DION_OP_PUT_PACKET, peer, 0, bytes, seq, 0, 0, DION_SUCCESS);
    }
}

/* ---- wait ---- */

/* Polls this thread's units (r, r+n, ...) of the message at p until each carries seq in both words, copying
 * their payload to dst; stops on abort or timeout. *seen: the flag last read from a unit that was not ready.
 */
DION_HD dion_status_t dion__pkt_poll(const dion_ctx_t *c, const uint64_t *p, char *dst, size_t bytes,
                                     uint32_t seq, uint32_t r, uint32_t n, uint32_t *seen)
{
    const dion_dev_t *d = &c->dev;
    uint32_t scope = dion__dev_scope(d);
    size_t units = (size_t)(DION_PACKET_SPAN(bytes) / DION_PACKET_UNIT);
    const uint64_t *abort_word = dion__ctl_word(d, d->signals, DION_CTL_ABORT);
    uint64_t start = 0;
    uint32_t polls = 0;
    for (size_t u = r; u < units; u += n) {
        uint64_t w0, w1;
        for (;;) {
            /* DION__POLL_BATCH loads in a row with nothing but the comparison between them
             * (device/common.cuh) */
            int whole = 0;
#if DION__POLL_BATCH > 1
#pragma unroll
#endif
            for (int k = 0; k < DION__POLL_BATCH; k++) {
                dion__pkt_load(p + 2 * u, &w0, &w1, scope);
                if ((uint32_t)(w0 >> 32) == seq && (uint32_t)(w1 >> 32) == seq) {
                    whole = 1;
                    break;
                }
            }
            if (whole) break;
            /* The clock and the abort word only every 128 polls: the fast path is the load and compare. */
            polls += DION__POLL_BATCH;
            if ((polls & 127) == 0) {
                uint64_t ab = dion__ld_relaxed(abort_word, scope);
                *seen = (uint32_t)(w0 >> 32) != seq ? (uint32_t)(w0 >> 32) : (uint32_t)(w1 >> 32);
                if (ab) return (dion_status_t)ab;
                uint64_t now = dion__time_ns();
                if (start == 0) start = now;
                if (d->wait_timeout_ns && now - start > d->wait_timeout_ns) return DION_ERR_TIMEOUT;
            }
            dion__backoff(polls);
        }
        dion__pkt_scatter(dst, bytes, u, (uint32_t)w0, (uint32_t)w1);
    }
    return DION_SUCCESS;
}

DION_HD dion_status_t dion__wait_packet_group(dion_ctx_t c, dion__group_t g, dion_dwin_t win, size_t off,
                                              void *dst, size_t bytes, uint32_t seq)
{
    uint32_t r = dion__group_rank(g), n = dion__group_size(g);
    int lead = r == 0;
    int me = c.dev.rank;
    uint64_t span = DION_PACKET_SPAN(bytes);
    if (dion__check_enabled(&c)) {
        if (!dion__check_ctx(&c, DION_OP_WAIT_PACKET, lead) ||
            !dion__pkt_check_seq(&c, seq, DION_OP_WAIT_PACKET, me, lead) ||
            !dion__check_range(&c, win, me, off, span, DION_PACKET_UNIT, DION_OP_WAIT_PACKET, me, lead))
            return DION_ERR_INVALID_ARG;
    }
    if (lead) DION__STAT(&c, waits, 1);
    uint64_t t0 = dion__trace_start(&c);
    const uint64_t *p = (const uint64_t *)(dion__win_base(&c.dev, win, me) + off);
    uint32_t seen = 0;
    dion_status_t st = dion__pkt_poll(&c, p, (char *)dst, bytes, seq, r, n, &seen);
    /* The group returns one status: success only when every unit arrived. The leader records one error. */
    if (dion__group_any(g, st != DION_SUCCESS)) {
        uint64_t ab =
            dion__ld_relaxed(dion__ctl_word(&c.dev, c.dev.signals, DION_CTL_ABORT), dion__dev_scope(&c.dev));
        st = ab ? (dion_status_t)ab : DION_ERR_TIMEOUT;
        if (lead && st == DION_ERR_TIMEOUT) {
            uint64_t w0, w1;
            dion__pkt_load(p, &w0, &w1, dion__dev_scope(&c.dev));
            dion__err_t e = dion__err(DION_ERR_TIMEOUT, DION_OP_WAIT_PACKET, me);
            e.cmp = DION_CMP_EQ;
            e.expected = seq;
            e.observed = g == DION__THREAD ? seen : (uint32_t)(w0 >> 32); /* the first unit's flag */
            e.offset = off;
            e.bytes = bytes;
            e.limit = c.dev.wait_timeout_ns;
            dion__record(&c, e);
            DION__STAT(&c, wait_timeouts, 1);
        }
    } else if (g == DION__WARP) {
        dion__group_sync(g); /* the whole payload is in dst for every thread of the warp (a block's vote is
                                already a barrier) */
    }
    if (lead) DION__TRACE(&c, t0, DION_OP_WAIT_PACKET, me, 0, bytes, seq, seen, DION_CMP_EQ, st);
    return st;
}

#endif /* DION_DEVICE_PACKET_CUH */
