/* Little-endian fields of the fixed-size blobs the verbs engine exchanges (connection data, handshakes):
 * the byte order on the wire does not depend on the hosts'. */
#ifndef DION_PROXY_WIRE_LE_H
#define DION_PROXY_WIRE_LE_H

#include <stdint.h>

static inline void dion__verbs_put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t dion__verbs_get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif /* DION_PROXY_WIRE_LE_H */
