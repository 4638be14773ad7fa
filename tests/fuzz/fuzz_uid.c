/* Fuzzes the unique id: decoding 128 raw bytes (dion_comm_init_rank takes them from the user) and the hex
 * text of DION_UNIQUE_ID. Whatever decodes must re-encode to the same fields, and hex must round-trip. */
#include <ctype.h>

#include "bootstrap/bootstrap.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_log_everything();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The bytes as an id, zero-padded as a caller's struct would be. */
    dion_unique_id_t id;
    memset(&id, 0, sizeof id);
    memcpy(id.bytes, data, size < sizeof id.bytes ? size : sizeof id.bytes);
    dion__uid_t u;
    if (dion__uid_decode(&id, &u) == DION_SUCCESS) {
        FUZZ_CHECK(u.root.family == 4 || u.root.family == 6, "family %u", u.root.family);
        FUZZ_CHECK(u.root.port != 0, "a decoded root has port 0");
        char a[DION__ADDR_STRLEN];
        dion__addr_str(&u.root, a);
        FUZZ_CHECK(strlen(a) < DION__ADDR_STRLEN, "address text too long");
        dion_unique_id_t id2;
        dion__uid_t u2;
        dion__uid_encode(&u, &id2);
        FUZZ_CHECK(dion__uid_decode(&id2, &u2) == DION_SUCCESS, "re-encoded id does not decode");
        FUZZ_CHECK(memcmp(&u.root, &u2.root, sizeof u.root) == 0 && u.job == u2.job &&
                       memcmp(u.secret, u2.secret, sizeof u.secret) == 0,
                   "decode(encode(u)) != u");
    }
    char hex[2 * sizeof id.bytes + 1];
    dion__uid_to_hex(&id, hex);
    dion_unique_id_t back;
    FUZZ_CHECK(dion__uid_from_hex(hex, &back) == DION_SUCCESS && memcmp(&back, &id, sizeof id) == 0,
               "hex round trip of raw bytes");

    /* The bytes as DION_UNIQUE_ID text. */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    if (dion__uid_from_hex(text, &back) == DION_SUCCESS) {
        FUZZ_CHECK(strlen(text) == 2 * sizeof id.bytes, "accepted %zu characters", strlen(text));
        dion__uid_to_hex(&back, hex);
        for (size_t i = 0; i < 2 * sizeof id.bytes; i++)
            FUZZ_CHECK(hex[i] == tolower((unsigned char)text[i]), "hex differs at %zu", i);
    }
    free(text);
    return 0;
}
