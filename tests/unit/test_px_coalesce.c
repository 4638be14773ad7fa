/* dion__px_coalesce (px_stage.c): the staged windows' copies of a batch are joined where their ranges touch
 * or overlap, per region, and never across a gap. Random batches over three regions: the runs must cover
 * exactly the bytes the ranges covered (a bitmap per region), be sorted, and be as few as the bitmap's runs
 * (touching ranges joined: [0,8) and [8,16) are one copy). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transports/proxy/px.h"

#define SPAN   4096u
#define NREG   3
#define ROUNDS 2000

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        fprintf(stderr, "FAIL round %d: ", round);                                                           \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        return 1;                                                                                            \
    } while (0)

int main(void)
{
    static dion__pxr_t *regs[NREG];
    static uint8_t want[NREG][SPAN], got[NREG][SPAN];
    static char fake[NREG]; /* the function compares region pointers only */
    for (int i = 0; i < NREG; i++) regs[i] = (dion__pxr_t *)(void *)&fake[i];
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    dion__px_range_t rg[300];
    for (int round = 0; round < ROUNDS; round++) {
        uint32_t n = (uint32_t)(rng(&seed) % 300);
        int dense = round % 3 == 0; /* 8-byte words, msgrate-like: many touch */
        memset(want, 0, sizeof want);
        for (uint32_t i = 0; i < n; i++) {
            int r = (int)(rng(&seed) % NREG);
            uint64_t off = dense ? (rng(&seed) % (SPAN / 8)) * 8 : rng(&seed) % (SPAN - 1);
            uint64_t len = dense ? 8 : 1 + rng(&seed) % 64;
            if (off + len > SPAN) len = SPAN - off;
            rg[i] = (dion__px_range_t){regs[r], off, off + len};
            memset(&want[r][off], 1, len);
        }
        uint32_t k = dion__px_coalesce(rg, n);
        if (k > n) FAIL("%u runs from %u ranges", k, n);
        memset(got, 0, sizeof got);
        uint32_t runs_want = 0;
        for (int r = 0; r < NREG; r++)
            for (uint32_t b = 0; b < SPAN; b++) runs_want += want[r][b] && (b == 0 || !want[r][b - 1]);
        for (uint32_t i = 0; i < k; i++) {
            int r = -1;
            for (int j = 0; j < NREG; j++)
                if (rg[i].r == regs[j]) r = j;
            if (r < 0 || rg[i].off >= rg[i].end || rg[i].end > SPAN) FAIL("run %u is malformed", i);
            if (i && rg[i - 1].r == rg[i].r && rg[i - 1].end >= rg[i].off)
                FAIL("runs %u and %u of one region touch or are out of order", i - 1, i);
            for (uint64_t b = rg[i].off; b < rg[i].end; b++) {
                if (got[r][b]) FAIL("byte %llu of region %d copied twice", (unsigned long long)b, r);
                got[r][b] = 1;
            }
        }
        if (memcmp(got, want, sizeof got)) FAIL("the runs cover other bytes than the ranges (a gap copied?)");
        if (k != runs_want) FAIL("%u runs where the bytes form %u", k, runs_want);
    }
    printf("PASS: %d random batches coalesced\n", ROUNDS);
    return 0;
}
