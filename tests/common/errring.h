/* Torn error records (issue 7, defect 4): many threads write error records at once; every record left in the
 * ring must be whole. Each record's fields are a chain of hashes of the writer's global thread id and its
 * record number, so a record mixed from two writers is caught. A runner (tests/cpu/test_errring.c,
 * tests/gpu/test_errring_gpu.cu) defines ER_KERNEL / ER_LAUNCH and er_copy_ring, then calls er_run. */
#ifndef DION_TEST_ERRRING_H
#define DION_TEST_ERRRING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

DION_HD uint64_t er_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct {
    dion_dev_t dev;
    uint32_t per_thread; /* records each thread writes */
    uint32_t launch;     /* folded into the hashes: records of an earlier launch are told apart */
} er_args_t;

#ifndef ER_BEFORE_RECORD
#define ER_BEFORE_RECORD(a, i) /* a runner's hook */
#endif

/* The body every thread runs: per_thread records whose fields hash (launch, thread, i). */
DION_HD void er_body(const er_args_t *a)
{
    uint32_t tid = dion__block_index() * dion__block_size() + dion__block_thread();
    dion_ctx_t c = dion_ctx(a->dev, 0);
    dion__group_sync(DION__BLOCK); /* the block's threads start together */
    for (uint32_t i = 0; i < a->per_thread; i++) {
        ER_BEFORE_RECORD(a, i);
        dion__err_t e = dion__err(DION_ERR_INVALID_ARG, DION_OP_PUT, (int)tid);
        e.sig = i;
        e.cmp = 100 + a->launch; /* clear of the DION_WCHK_* reasons that the description reads from cmp */
        e.expected = er_mix(((uint64_t)a->launch << 56) ^ ((uint64_t)tid << 24) ^ i);
        e.observed = er_mix(e.expected);
        e.offset = er_mix(e.observed);
        e.bytes = er_mix(e.offset);
        e.limit = er_mix(e.bytes) | 1; /* nonzero */
        dion__record(&c, e);
    }
}

/* 1 when the record is one writer's whole record of this launch. */
static int er_whole(const dion_err_record_t *r, uint32_t block_size, uint32_t launch, uint32_t per_thread)
{
    uint64_t x = er_mix(((uint64_t)launch << 56) ^ ((uint64_t)(uint32_t)r->peer << 24) ^ r->sig);
    return r->status == DION_ERR_INVALID_ARG && r->op == DION_OP_PUT && r->cmp == 100 + (uint32_t)launch &&
           r->sig < per_thread && r->peer >= 0 && r->block == (uint32_t)r->peer / block_size &&
           r->thread == (uint32_t)r->peer % block_size && r->ctx == 0 && r->expected == x &&
           r->observed == er_mix(x) && r->offset == er_mix(r->observed) && r->bytes == er_mix(r->offset) &&
           r->limit == (er_mix(r->bytes) | 1);
}

static void er_print(const char *what, const dion_err_record_t *r)
{
    fprintf(
        stderr,
        "  %s: seq %llu peer %d block %u thread %u sig %u cmp %u expected %016llx observed %016llx offset "
        "%016llx bytes %016llx limit %016llx\n",
        what, (unsigned long long)r->seq, r->peer, r->block, r->thread, r->sig, r->cmp,
        (unsigned long long)r->expected, (unsigned long long)r->observed, (unsigned long long)r->offset,
        (unsigned long long)r->bytes, (unsigned long long)r->limit);
}

/* Runner hooks. */
static int er_launch(unsigned grid, unsigned block, er_args_t *a); /* 0 on success */
static void er_copy_ring(const dion_dev_t *dev,
                         struct dion_dev_errors *out); /* the ring as the host sees it */
static uint64_t er_dropped(const dion_dev_t *dev);     /* the device's dropped count */

/* launches x (grid x block threads x per_thread records); returns the number of failures. */
static int er_run(dion_comm_t comm, dion_dev_t dev, unsigned grid, unsigned block, uint32_t per_thread,
                  int launches)
{
    int failures = 0;
    uint64_t total = (uint64_t)grid * block * per_thread, dropped_before = er_dropped(&dev);
    struct dion_dev_errors *ring = (struct dion_dev_errors *)malloc(sizeof *ring);
    for (int l = 0; l < launches; l++) {
        er_args_t a = {dev, per_thread, (uint32_t)l + 1};
        if (er_launch(grid, block, &a)) {
            fprintf(stderr, "FAIL: launch %d failed\n", l);
            failures++;
            break;
        }
        er_copy_ring(&dev, ring);
        int full = 0, torn = 0;
        const dion_err_record_t *first = NULL;
        for (int s = 0; s < DION_ERR_RING; s++) {
            const dion_err_record_t *r = &ring->rec[s];
            if (r->seq == 0) continue;
            full++;
            if (!er_whole(r, block, a.launch, per_thread)) {
                if (torn++ < 3) er_print("torn record", r);
                continue;
            }
            if (!first || r->seq < first->seq) first = r;
        }
        if (torn) {
            fprintf(stderr, "FAIL: launch %d: %d of the %d records in the ring are mixes of two writers\n", l,
                    torn, full);
            failures++;
        }
        uint64_t dropped = er_dropped(&dev);
        /* Nothing read the ring during the launch: it is full, and every other record was dropped. */
        if (full != DION_ERR_RING || dropped - dropped_before != total - DION_ERR_RING) {
            fprintf(
                stderr,
                "FAIL: launch %d: %d records in the ring and %llu dropped; %llu were written (expected %d "
                "and %llu)\n",
                l, full, (unsigned long long)(dropped - dropped_before), (unsigned long long)total,
                DION_ERR_RING, (unsigned long long)(total - DION_ERR_RING));
            failures++;
        }
        dropped_before = dropped;
        /* dion_dev_check describes the earliest record, counts the rest and the dropped ones, and empties the
         * ring for the next launch. */
        dion_status_t st = dion_dev_check(comm, &dev);
        const char *msg = dion_last_error();
        char want[96], more[64];
        want[0] = 0;
        if (first)
            snprintf(want, sizeof want, "block %u thread %u ctx 0: put: invalid argument (peer %d,",
                     first->block, first->thread, first->peer);
        snprintf(more, sizeof more, "and %d more device errors", DION_ERR_RING - 1);
        if (st != DION_ERR_INVALID_ARG || !first || !strstr(msg, want) || !strstr(msg, more) ||
            !strstr(msg, "dropped")) {
            fprintf(stderr, "FAIL: launch %d: dion_dev_check: %s: %s (wanted '%s', '%s' and the drops)\n", l,
                    dion_status_string(st), msg, want, more);
            failures++;
        }
        if (l == 0) printf("  dion_dev_check: %s\n", msg);
        er_copy_ring(&dev, ring);
        for (int s = 0; s < DION_ERR_RING; s++)
            if (ring->rec[s].seq != 0) {
                fprintf(stderr, "FAIL: launch %d: slot %d still holds a record after dion_dev_check\n", l, s);
                failures++;
                break;
            }
        if (dion_dev_check(comm, &dev) != DION_SUCCESS) {
            fprintf(stderr, "FAIL: launch %d: records reported twice: %s\n", l, dion_last_error());
            failures++;
        }
        printf("launch %d: %u x %u threads x %u records: %d whole records kept, %d torn, %llu dropped\n", l,
               grid, block, per_thread, full - torn, torn, (unsigned long long)(total - full));
        fflush(stdout);
    }
    free(ring);
    return failures;
}

#endif
