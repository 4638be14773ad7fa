/* Loads libfabric once and fills the entry-point table; see ofi_sym.h. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "ofi_sym.h"

static pthread_once_t dion__fi_once = PTHREAD_ONCE_INIT;
static dion__fi_t dion__fi_table;
static int dion__fi_ok;
static char dion__fi_why[512];

static void dion__fi_load(void)
{
    const char *lib = dion__cfg_str("DION_OFI_LIBRARY");
    /* Never closed: providers start threads and register atexit handlers inside the library. */
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(
            dion__fi_why, sizeof dion__fi_why,
            "%s cannot be loaded (%s); install libfabric (apt install libfabric1, dnf install libfabric), "
            "point LD_LIBRARY_PATH at it, or set DION_OFI_LIBRARY to its path",
            lib, e ? e : "unknown dlopen error");
        return;
    }
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
        snprintf(dion__fi_table.path, sizeof dion__fi_table.path, "%s", lm->l_name);
    else
        snprintf(dion__fi_table.path, sizeof dion__fi_table.path, "%s", lib);
        /* Function pointers from dlsym go through a union: ISO C has no conversion from void * to them. */
#define DION__FI_SYM(field, name)                                                                            \
    do {                                                                                                     \
        union {                                                                                              \
            void *p;                                                                                         \
            __typeof__(dion__fi_table.field) f;                                                              \
        } u_ = {.p = dlsym(h, name)};                                                                        \
        if (!u_.p) {                                                                                         \
            snprintf(dion__fi_why, sizeof dion__fi_why,                                                      \
                     "%s lacks the entry point %s; use libfabric 1.10 or newer", dion__fi_table.path, name); \
            return;                                                                                          \
        }                                                                                                    \
        dion__fi_table.field = u_.f;                                                                         \
    } while (0)
    DION__FI_SYM(version, "fi_version");
    DION__FI_SYM(getinfo, "fi_getinfo");
    DION__FI_SYM(freeinfo, "fi_freeinfo");
    DION__FI_SYM(dupinfo, "fi_dupinfo");
    DION__FI_SYM(fabric, "fi_fabric");
    DION__FI_SYM(strerror, "fi_strerror");
    DION__FI_SYM(tostr, "fi_tostr");
#undef DION__FI_SYM
    dion__fi_ok = 1;
}

const dion__fi_t *dion__fi(char *why, size_t cap)
{
    pthread_once(&dion__fi_once, dion__fi_load);
    if (dion__fi_ok) return &dion__fi_table;
    if (why && cap) snprintf(why, cap, "%s", dion__fi_why);
    return NULL;
}
