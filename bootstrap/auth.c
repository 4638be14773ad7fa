/* Keyed hashing for the bootstrap's handshakes and the memory-handle messages: SipHash-2-4, written from its
 * specification (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012). There is no crypto
 * library to lean on; SipHash is small, well studied, and a sound MAC for short messages under a 128-bit key.
 */
#include <string.h>

#include "net.h"

#define DION__ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void dion__sipround(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = DION__ROTL(v[1], 13);
    v[1] ^= v[0];
    v[0] = DION__ROTL(v[0], 32);
    v[2] += v[3];
    v[3] = DION__ROTL(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = DION__ROTL(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = DION__ROTL(v[1], 17);
    v[1] ^= v[2];
    v[2] = DION__ROTL(v[2], 32);
}

uint64_t dion__siphash24(const uint8_t key[16], const void *msg, size_t len)
{
    const uint8_t *m = msg;
    uint64_t k0 = dion__get_u64(key), k1 = dion__get_u64(key + 8);
    uint64_t v[4] = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
                     k1 ^ 0x7465646279746573ull};
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t w = dion__get_u64(m + i);
        v[3] ^= w;
        dion__sipround(v);
        dion__sipround(v);
        v[0] ^= w;
    }
    /* The last word: the remaining bytes, and the length's low byte in the top byte. */
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < (len & 7); i++) b |= (uint64_t)m[whole + i] << (8 * i);
    v[3] ^= b;
    dion__sipround(v);
    dion__sipround(v);
    v[0] ^= b;
    v[2] ^= 0xff;
    for (int i = 0; i < 4; i++) dion__sipround(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t dion__auth_tag(const uint8_t key[16], const char *label, const void *fields, size_t len)
{
    uint8_t buf[256];
    size_t ll = strlen(label) + 1; /* with its NUL: no label is a prefix of another's input */
    if (ll > 56) ll = 56;
    if (len > sizeof buf - ll) len = sizeof buf - ll;
    memcpy(buf, label, ll);
    memcpy(buf + ll, fields, len);
    return dion__siphash24(key, buf, ll + len);
}

int dion__auth_check(const uint8_t key[16], const char *label, const void *fields, size_t len,
                     const uint8_t tag[8])
{
    uint8_t want[8];
    dion__put_u64(want, dion__auth_tag(key, label, fields, len));
    return dion__secret_equal(want, tag, 8);
}
