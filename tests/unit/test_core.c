/* Unit tests of internal pieces: status strings, configuration parsing, unique-id encoding, frame headers,
 * comparisons, the device-side copy (the GPU algorithm, run here on the CPU) and the copy's group split, and
 * the packet units' writer and poll (device/packet.cuh, the same code GPU threads run).
 * Every check prints what failed; the exit status counts failures. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/bootstrap.h"
#include "dion/device/common.cuh"
#include "dion/device/packet.cuh"
#include "dion/device/p2p.cuh"
#include "src/internal.h"

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

static void test_status(void)
{
    for (int s = DION_SUCCESS; s <= DION_ERR_INTERNAL; s++) {
        const char *t = dion_status_string((dion_status_t)s);
        CHECK(t && strncmp(t, "DION_", 5) == 0 && !strstr(t, "unknown"), "status %d -> %s", s, t);
    }
    CHECK(strstr(dion_status_string((dion_status_t)99), "unknown") != NULL, "out-of-range status");
    dion__error_set(DION_ERR_TIMEOUT, "first %d", 1);
    dion__error_set(DION_ERR_TIMEOUT, "wrapped: %s", dion_last_error()); /* may refer to itself */
    CHECK(strcmp(dion_last_error(), "wrapped: first 1") == 0, "self-referencing sentence: %s",
          dion_last_error());
}

static void test_config(void)
{
    uint64_t ns = 0;
    struct {
        const char *text;
        uint64_t ns;
        int ok;
    } cases[] = {{"0", 0, 1},
                 {"2", 2000000000ull, 1},
                 {"1.5s", 1500000000ull, 1},
                 {"250ms", 250000000ull, 1},
                 {"10us", 10000, 1},
                 {"7ns", 7, 1},
                 {"2m", 120000000000ull, 1},
                 {"1h", 3600000000000ull, 1},
                 {"", 0, 0},
                 {"abc", 0, 0},
                 {"5 s", 0, 0},
                 {"-1s", 0, 0},
                 {"3parsecs", 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dion_status_t st = dion__parse_duration_ns(cases[i].text, &ns);
        CHECK((st == DION_SUCCESS) == cases[i].ok, "duration '%s' -> %s", cases[i].text,
              dion_status_string(st));
        if (cases[i].ok)
            CHECK(ns == cases[i].ns, "duration '%s' -> %llu", cases[i].text, (unsigned long long)ns);
    }
    setenv("DION_BOOTSTRAP_TIMEOUT", "forever", 1);
    CHECK(dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &ns) == DION_ERR_INVALID_ARG,
          "bad duration accepted");
    CHECK(strstr(dion_last_error(), "DION_BOOTSTRAP_TIMEOUT") != NULL, "sentence names the variable: %s",
          dion_last_error());
    unsetenv("DION_BOOTSTRAP_TIMEOUT");
    CHECK(dion__cfg_duration_ns("DION_BOOTSTRAP_TIMEOUT", &ns) == DION_SUCCESS && ns == 60000000000ull,
          "default bootstrap timeout %llu", (unsigned long long)ns);
    long long v = 0;
    setenv("DION_DEVICE", "12", 1);
    CHECK(dion__cfg_int("DION_DEVICE", -1, 7, &v) == DION_ERR_INVALID_ARG &&
              strstr(dion_last_error(), "[-1, 7]"),
          "range error: %s", dion_last_error());
    setenv("DION_DEVICE", "3x", 1);
    CHECK(dion__cfg_int("DION_DEVICE", -1, 7, &v) == DION_ERR_INVALID_ARG, "trailing junk accepted");
    setenv("DION_DEVICE", " 5 ", 1);
    CHECK(dion__cfg_int("DION_DEVICE", -1, 7, &v) == DION_ERR_INVALID_ARG || v == 5, "spaces");
    unsetenv("DION_DEVICE");
    int b = 0, e = -1;
    setenv("DION_CHECK", "yes", 1);
    CHECK(dion__cfg_bool("DION_CHECK", &b) == DION_SUCCESS && b == 1, "bool yes");
    setenv("DION_CHECK", "maybe", 1);
    CHECK(dion__cfg_bool("DION_CHECK", &b) == DION_ERR_INVALID_ARG, "bool maybe accepted");
    unsetenv("DION_CHECK");
    setenv("DION_LOG", "DEBUG", 1);
    CHECK(dion__cfg_enum("DION_LOG", &e) == DION_SUCCESS && e == DION_LOG_DEBUG, "enum is case-insensitive");
    setenv("DION_LOG", "loud", 1);
    CHECK(dion__cfg_enum("DION_LOG", &e) == DION_ERR_INVALID_ARG && strstr(dion_last_error(), "error|warn"),
          "enum error lists the choices: %s", dion_last_error());
    unsetenv("DION_LOG");
    CHECK(dion__cfg_find("DION_NO_SUCH_VARIABLE") == NULL, "unknown variable found");
    for (int i = 0; i < dion__cfg_count; i++)
        CHECK(dion__cfg_table[i].help && strlen(dion__cfg_table[i].help) > 10, "%s has no meaning",
              dion__cfg_table[i].name);
}

static void test_uid_and_frames(void)
{
    dion__uid_t u, back;
    memset(&u, 0, sizeof u);
    u.root.family = 4;
    u.root.port = 4242;
    u.root.addr[0] = 10, u.root.addr[3] = 7;
    for (int i = 0; i < DION__SECRET_LEN; i++) u.secret[i] = (uint8_t)(i * 17 + 3);
    u.job = 0x1122334455667788ull;
    dion_unique_id_t id, id2;
    dion__uid_encode(&u, &id);
    CHECK(dion__uid_decode(&id, &back) == DION_SUCCESS, "decode");
    CHECK(back.root.port == 4242 && back.root.addr[0] == 10 && back.job == u.job &&
              memcmp(back.secret, u.secret, DION__SECRET_LEN) == 0,
          "round trip");
    char hex[2 * sizeof id.bytes + 1];
    dion__uid_to_hex(&id, hex);
    CHECK(dion__uid_from_hex(hex, &id2) == DION_SUCCESS && memcmp(&id, &id2, sizeof id) == 0,
          "hex round trip");
    hex[10] = 'z';
    CHECK(dion__uid_from_hex(hex, &id2) == DION_ERR_INVALID_ARG, "bad hex accepted");
    CHECK(dion__uid_from_hex("abcd", &id2) == DION_ERR_INVALID_ARG, "short hex accepted");
    id2 = id;
    id2.bytes[0] ^= 1;
    CHECK(dion__uid_decode(&id2, &back) == DION_ERR_INVALID_ARG, "bad magic accepted");
    id2 = id;
    id2.bytes[8] = 9; /* address family */
    CHECK(dion__uid_decode(&id2, &back) == DION_ERR_INVALID_ARG, "bad family accepted");

    uint8_t h[DION__FRAME_HDR];
    uint32_t type, len;
    dion__frame_hdr_encode(h, DION__FRAME_DATA, 1234);
    CHECK(dion__frame_hdr_decode(h, &type, &len) == 0 && type == DION__FRAME_DATA && len == 1234,
          "frame round trip");
    dion__frame_hdr_encode(h, DION__FRAME_DATA, DION__FRAME_MAX + 1);
    CHECK(dion__frame_hdr_decode(h, &type, &len) != 0, "oversized frame accepted");
    dion__frame_hdr_encode(h, 99, 8);
    CHECK(dion__frame_hdr_decode(h, &type, &len) != 0, "unknown type accepted");
    dion__frame_hdr_encode(h, DION__FRAME_HELLO, 48);
    h[1] ^= 0x40;
    CHECK(dion__frame_hdr_decode(h, &type, &len) != 0, "bad magic accepted");
    uint8_t a = 0x11, b = 0x11;
    CHECK(dion__secret_equal(&a, &b, 1) &&
              !dion__secret_equal((const uint8_t *)"ab", (const uint8_t *)"ac", 2),
          "secret compare");
    dion__addr_t ad;
    CHECK(dion__addr_parse("127.0.0.1:80", &ad) == DION_SUCCESS && ad.port == 80 && ad.addr[0] == 127,
          "parse v4");
    CHECK(dion__addr_parse("[::1]:9", &ad) == DION_SUCCESS && ad.family == 6 && ad.port == 9, "parse v6");
    CHECK(dion__addr_parse("localhost", &ad) == DION_ERR_INVALID_ARG, "no port accepted");
    CHECK(dion__addr_parse("127.0.0.1:99999", &ad) == DION_ERR_INVALID_ARG, "port out of range accepted");
}

static void test_cmp(void)
{
    const uint64_t vals[] = {0, 1, 5, 6, 7, UINT64_MAX - 1, UINT64_MAX};
    for (size_t i = 0; i < 7; i++)
        for (size_t j = 0; j < 7; j++) {
            uint64_t v = vals[i], x = vals[j];
            CHECK(dion__cmp_holds(v, DION_CMP_EQ, x) == (v == x), "EQ");
            CHECK(dion__cmp_holds(v, DION_CMP_NE, x) == (v != x), "NE");
            CHECK(dion__cmp_holds(v, DION_CMP_GT, x) == (v > x), "GT");
            CHECK(dion__cmp_holds(v, DION_CMP_GE, x) == (v >= x), "GE");
            CHECK(dion__cmp_holds(v, DION_CMP_LT, x) == (v < x), "LT");
            CHECK(dion__cmp_holds(v, DION_CMP_LE, x) == (v <= x), "LE");
        }
    CHECK(!dion__cmp_holds(1, 77, 1), "unknown comparison holds");
}

static uint64_t rng_state = 0x1234;
static uint64_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 17;
}

/* The GPU copy algorithm with every thread of a group run in turn: all bytes arrive, nothing else moves. */
static void test_copy_vec(void)
{
    enum { CAP = 1 << 16 };
    char *src = malloc(CAP + 64), *dst = malloc(CAP + 64), *want = malloc(CAP + 64);
    static const uint32_t groups[] = {1, 2, 3, 32, 40, 1024};
    int cases = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = iter < 600 ? (size_t)(iter % 300) : (size_t)(rnd() % (iter % 7 == 0 ? CAP : 2048));
        size_t so = rnd() % 32, dof = rnd() % 32;
        uint32_t g = groups[rnd() % 6];
        for (size_t i = 0; i < CAP + 64; i++) src[i] = (char)rnd(), dst[i] = (char)0x5a;
        memcpy(want, dst, CAP + 64);
        memcpy(want + dof, src + so, n);
        for (uint32_t r = 0; r < g; r++) dion__copy_vec(dst + dof, src + so, n, r, g);
        if (memcmp(dst, want, CAP + 64) != 0) {
            size_t k = 0;
            while (dst[k] == want[k]) k++;
            CHECK(0, "copy_vec n=%zu src+%zu dst+%zu g=%u: first wrong byte at %zu", n, so, dof, g, k);
            break;
        }
        /* and the CPU-mode split */
        for (size_t i = 0; i < CAP + 64; i++) dst[i] = (char)0x5a;
        for (uint32_t r = 0; r < g; r++) dion__copy(dst + dof, src + so, n, r, g);
        if (memcmp(dst, want, CAP + 64) != 0) {
            CHECK(0, "copy (CPU split) n=%zu g=%u", n, g);
            break;
        }
        cases++;
    }
    CHECK(cases == 3000, "only %d copy cases ran", cases);
    /* The fast paths random offsets rarely reach: both ends 16-byte aligned with whole 16-byte elements, and
     * 8 or 16 bytes with both ends 8-byte aligned (offsets relative to the 16-aligned buffers). */
    char *s16 = (char *)(((uintptr_t)src + 15) & ~(uintptr_t)15),
         *d16 = (char *)(((uintptr_t)dst + 15) & ~(uintptr_t)15);
    int fast = 0;
    for (size_t n = 0; n <= 8192 && fast >= 0; n += (n < 512 ? 16 : 1552))
        for (size_t so = 0; so <= 24; so += 8)
            for (size_t dof = 0; dof <= 24; dof += 8)
                for (int gi = 0; gi < 6; gi++) {
                    size_t m =
                        (so % 16 || dof % 16) ? (n == 0 ? 8 : 16) : n; /* 8-aligned ends: 8 or 16 bytes */
                    if ((so % 16 || dof % 16) && n > 16) continue;
                    uint32_t g = groups[gi];
                    for (size_t i = 0; i < 8192 + 48; i++) s16[i] = (char)rnd(), d16[i] = (char)0x5a;
                    memcpy(want, d16, 8192 + 48);
                    memcpy(want + dof, s16 + so, m);
                    for (uint32_t r = 0; r < g; r++) dion__copy_vec(d16 + dof, s16 + so, m, r, g);
                    if (memcmp(d16, want, 8192 + 48) != 0) {
                        CHECK(0, "copy_vec fast path n=%zu src+%zu dst+%zu g=%u", m, so, dof, g);
                        fast = -1;
                        break;
                    }
                    fast++;
                }
    CHECK(fast > 900, "only %d fast-path copy cases ran", fast);
    free(src), free(dst), free(want);
}

/* The block put's fast-path copy (device/p2p.cuh, dion__p2p_put_block_inl: what a block's threads run on the
 * GPU when peer, rank and windows have inline entries), every thread of a group run in turn: the destination
 * base is the peer's in the destination window's slot and the source base this rank's in the source window's,
 * all bytes arrive and nothing else in any window moves; 16-byte ends and sizes (the body alone, threads past
 * the last element leaving) and any others (through the general copy), in every early-leave mode. */
static void test_block_put_inl(void)
{
    enum { SLOTS = DION_DEV_WIN_SLOTS, RANKS = DION_DEV_INLINE_PEERS, PART = 1 << 13 };
    const size_t total = (size_t)SLOTS * RANKS * PART;
    char *arena = aligned_alloc(16, total), *want = malloc(total);
    static uint64_t tag[SLOTS]; /* distinct window handles; never dereferenced here */
    static dion_dev_t d;
    memset(&d, 0, sizeof d);
    for (int w = 0; w < SLOTS; w++) d.win_slot[w].win = (dion_dwin_t)(void *)&tag[w];
    static const uint32_t groups[] = {1, 32, 33, 256, 1024};
    int cases = 0;
    for (int iter = 0; iter < 1500; iter++) {
        /* every early-leave mode (DION__BLOCK_EARLY); the windows' alignment flag is true when set, and when
         * clear the bases may be 8 bytes off 16 (the leave must then not trust the offsets alone) */
        int early = (int)(rnd() % 3);
        uint32_t flags = rnd() % 2 ? DION_WIN_ALIGN16 : 0;
        size_t shift = !flags && rnd() % 2 ? 8 : 0;
        for (int w = 0; w < SLOTS; w++) {
            d.win_slot[w].flags = flags;
            for (int k = 0; k < RANKS; k++)
                d.win_slot[w].base[k] = arena + ((size_t)w * RANKS + (size_t)k) * PART + shift;
        }
        /* 16-byte ends and sizes, 8-byte ones (the early leave must not take them for 16), or any */
        size_t align = iter % 2 == 0 ? 16 : iter % 4 == 1 ? 8 : 1;
        int ds = (int)(rnd() % SLOTS), ss = (int)(rnd() % SLOTS);
        d.rank = (int32_t)(rnd() % RANKS);
        for (int w = 0; w < SLOTS; w++)
            d.win_slot[w].self = d.win_slot[w].base[d.rank]; /* as the host fills it */
        int peer = (int)(rnd() % RANKS);
        if (ds == ss && peer == d.rank) peer = (peer + 1) % RANKS; /* ranges may not overlap */
        size_t n = iter < 200 ? (size_t)iter * align : (size_t)(rnd() % (PART / 2));
        size_t dof = rnd() % (PART / 2 - 16),
               sof = rnd() % (PART / 2 - 16); /* inside the part when shifted */
        n &= ~(align - 1), dof &= ~(align - 1), sof &= ~(align - 1);
        uint32_t g = groups[rnd() % 5];
        for (size_t i = 0; i < total; i++) arena[i] = (char)rnd();
        memcpy(want, arena, total);
        memcpy(want + (d.win_slot[ds].base[peer] - arena) + dof, d.win_slot[ss].base[d.rank] + sof, n);
        for (uint32_t r = 0; r < g; r++)
            dion__p2p_put_block_inl(&d, d.win_slot[ds].win, peer, dof, d.win_slot[ss].win, sof, n, r, g, 0,
                                    early);
        if (memcmp(arena, want, total) != 0) {
            size_t k = 0;
            while (arena[k] == want[k]) k++;
            CHECK(0,
                  "block put n=%zu dst slot %d rank %d +%zu src slot %d rank %d +%zu g=%u early %d flags %#x "
                  "shift %zu: byte %zu",
                  n, ds, peer, dof, ss, (int)d.rank, sof, g, early, flags, shift, k);
            break;
        }
        cases++;
    }
    CHECK(cases == 1500, "only %d block put cases ran", cases);
    free(arena), free(want);
}

/* Packet units (device/packet.cuh) with every thread of a group run in turn: each 8-byte word of the message
 * carries the sequence in its high half and 4 payload bytes (zero past the payload) in its low half, nothing
 * past the message is written, and the poll copies exactly the payload out; sizes across the one-unit, the
 * batched (8-aligned source or destination, several units per thread) and the remainder paths, every
 * alignment. Then a unit that never arrives: the poll gives up at the timeout and reports the flag it saw. */
static void test_packet_units(void)
{
    enum { MAXB = 1300, WORDS = 2 * (MAXB / 8 + 1) + 4 };
    static uint64_t win[WORDS];
    static char src[MAXB + 16], dst[MAXB + 16], want[MAXB + 16];
    static const uint32_t groups[] = {1, 3, 32, 40};
    uint64_t signals[DION_CTL_WORDS + 1];
    memset(signals, 0, sizeof signals);
    dion_ctx_t c;
    memset(&c, 0, sizeof c);
    c.dev.signals = signals; /* num_signals 0: the abort word is signals[DION_CTL_ABORT], zero */
    c.dev.wait_timeout_ns = 20 * 1000 * 1000;
    int cases = 0, batched = 0, single = 0;
    for (int iter = 0; iter < 2500 && !failures; iter++) {
        size_t bytes = iter < 400 ? (size_t)(iter % 200) + 1 : (size_t)(rnd() % MAXB) + 1;
        size_t so = rnd() % 2 ? 0 : rnd() % 8, dof = rnd() % 2 ? 0 : rnd() % 8;
        uint32_t g = groups[rnd() % 4], seq = (uint32_t)rnd() | 1u;
        int batch = iter % 5 == 0 ? 0 : 1 + iter % 2; /* blocks never batch; 2: the last unit first */
        size_t units = (bytes + 7) / 8;
        for (size_t i = 0; i < sizeof src; i++) src[i] = (char)rnd(), dst[i] = (char)0x5a;
        for (size_t i = 0; i < WORDS; i++) win[i] = 0x0123456789abcdefull ^ i;
        memcpy(want, dst, sizeof dst);
        memcpy(want + dof, src + so, bytes);
        for (uint32_t r = 0; r < g; r++)
            dion__pkt_put_units(win, src + so, bytes, seq, r, g, DION_SCOPE_GPU, batch);
        for (size_t w = 0; w < WORDS; w++) {
            uint64_t v = win[w];
            if (w >= 2 * units) {
                CHECK(v == (0x0123456789abcdefull ^ w),
                      "packet put bytes=%zu g=%u: word %zu past the message "
                      "written",
                      bytes, g, w);
                continue;
            }
            uint32_t lo = 0;
            for (size_t b = 0; b < 4; b++) {
                size_t at = (w / 2) * 8 + (w % 2) * 4 + b;
                if (at < bytes) lo |= (uint32_t)(uint8_t)src[so + at] << (8 * b);
            }
            CHECK((uint32_t)(v >> 32) == seq && (uint32_t)v == lo,
                  "packet put bytes=%zu src+%zu g=%u: word %zu is %016llx, expected seq %08x payload %08x",
                  bytes, so, g, w, (unsigned long long)v, seq, lo);
        }
        for (uint32_t r = 0; r < g; r++) {
            uint32_t seen = 0;
            dion_status_t st = dion__pkt_poll(&c, win, dst + dof, bytes, seq, r, g, &seen, batch);
            CHECK(st == DION_SUCCESS, "packet poll bytes=%zu g=%u r=%u: %d", bytes, g, r, (int)st);
        }
        CHECK(memcmp(dst, want, sizeof dst) == 0,
              "packet poll bytes=%zu src+%zu dst+%zu g=%u: payload differs", bytes, so, dof, g);
        if (units <=
            g) { /* the fast path's wait (at most one unit a thread): the same payload, nothing more */
            static char dst2[MAXB + 16];
            memset(dst2, 0x5a, sizeof dst2);
            for (uint32_t r = 0; r * 8 < bytes; r++) {
                uint32_t seen = 0;
                dion_status_t st = dion__pkt_poll_unit(&c.dev, win, dst2 + dof, bytes, seq, r, &seen);
                CHECK(st == DION_SUCCESS, "packet poll_unit bytes=%zu r=%u: %d", bytes, r, (int)st);
            }
            CHECK(memcmp(dst2, want, sizeof dst2) == 0,
                  "packet poll_unit bytes=%zu dst+%zu g=%u: payload differs", bytes, dof, g);
            single++;
        }
        batched +=
            batch && units > g && (((uintptr_t)(src + so) & 7) == 0 || ((uintptr_t)(dst + dof) & 7) == 0);
        cases++;
    }
    CHECK(cases == 2500, "only %d packet cases ran", cases);
    CHECK(batched > 300, "only %d packet cases took the batched path", batched);
    CHECK(single > 300, "only %d packet cases took the one-unit-a-thread wait", single);
    /* unit 5 of 12 carries the previous sequence: a timeout naming it, for one thread and for a group */
    for (uint32_t g = 1; g <= 32; g += 31) {
        uint32_t seq = 77;
        for (uint32_t r = 0; r < g; r++) dion__pkt_put_units(win, src, 96, seq, r, g, DION_SCOPE_GPU, 1);
        win[2 * 5 + 1] = (uint64_t)(seq - 1) << 32;
        dion_status_t st = DION_SUCCESS;
        uint32_t seen = 0;
        for (uint32_t r = 0; r < g && st == DION_SUCCESS; r++)
            st = dion__pkt_poll(&c, win, dst, 96, seq, r, g, &seen, 1);
        CHECK(st == DION_ERR_TIMEOUT && seen == seq - 1,
              "packet poll of a stale unit (g=%u): status %d, seen %u", g, (int)st, seen);
    }
    /* a thread's poll that waits on each batch's last unit first (batch 2): a stale last unit (7, the first
     * batch's) and a stale unit before it (5) both time out naming the stale flag */
    for (int stale = 5; stale <= 7; stale += 2) {
        uint32_t seq = 88, seen = 0;
        dion__pkt_put_units(win, src, 96, seq, 0, 1, DION_SCOPE_GPU, 1);
        win[2 * stale] = (uint64_t)(seq - 1) << 32;
        dion_status_t st = dion__pkt_poll(&c, win, dst, 96, seq, 0, 1, &seen, 2);
        CHECK(st == DION_ERR_TIMEOUT && seen == seq - 1,
              "packet poll (last unit first) of stale unit %d: status %d, seen %u", stale, (int)st, seen);
    }
    /* the same for the one-unit wait: unit 5's second word is stale, and its payload stays where it was */
    {
        uint32_t seq = 99, seen = 0;
        for (uint32_t r = 0; r < 12; r++) dion__pkt_put_units(win, src, 96, seq, r, 12, DION_SCOPE_GPU, 0);
        win[2 * 5 + 1] = (uint64_t)(seq - 1) << 32;
        memset(dst, 0x5a, 96);
        dion_status_t st = dion__pkt_poll_unit(&c.dev, win, dst, 96, seq, 5, &seen);
        CHECK(st == DION_ERR_TIMEOUT && seen == seq - 1 && dst[40] == 0x5a,
              "packet poll_unit of a stale unit: status %d, seen %u", (int)st, seen);
    }
}

int main(void)
{
    dion__log_init();
    test_status();
    test_config();
    test_uid_and_frames();
    test_cmp();
    test_copy_vec();
    test_block_put_inl();
    test_packet_units();
    printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
