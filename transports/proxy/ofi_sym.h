/* libfabric, loaded at run time. Most of libfabric's API is static inline wrappers over the ops tables of the
 * objects it returns (fi_domain, fi_write, fi_cq_read, ...); only the entry points below are exported
 * symbols, so only they go through this table. libdion links nothing of libfabric and loads where it is
 * absent. */
#ifndef DION_OFI_SYM_H
#define DION_OFI_SYM_H

#include <rdma/fabric.h>

#include "src/internal.h"

typedef struct {
    uint32_t (*version)(void);
    int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
    const char *(*strerror)(int errnum);
    char *(*tostr)(const void *data, enum fi_type datatype);
    char path[256]; /* where the library was found, for logs and docs */
} dion__fi_t;

/* The table, loaded once (DION_OFI_LIBRARY, else libfabric.so.1). NULL when the library or one of its entry
 * points is missing; then why (when not NULL) receives a sentence naming the piece and what to install. */
const dion__fi_t *dion__fi(char *why, size_t cap);

#endif
