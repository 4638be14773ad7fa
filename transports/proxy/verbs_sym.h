/* libibverbs reached through dlopen, so that libdion loads and runs (p2p, proxy/ofi) where rdma-core is
 * absent. Compiled against the real <infiniband/verbs.h>; nothing links libibverbs. ibv_post_send and
 * ibv_poll_cq are inline in verbs.h (they call through the context's ops) and need no entry here. */
#ifndef DION_VERBS_SYM_H
#define DION_VERBS_SYM_H

#include <infiniband/verbs.h>

#include "src/internal.h"

#define DION__IBV_LIBNAME "libibverbs.so.1"

typedef struct {
    void *handle;
    char path[256]; /* the file dlopen found, for messages and dion-info */
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
    int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
    int (*destroy_cq)(struct ibv_cq *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*destroy_qp)(struct ibv_qp *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    int (*get_async_event)(struct ibv_context *, struct ibv_async_event *);
    void (*ack_async_event)(struct ibv_async_event *);
    /* Optional: NULL when this rdma-core lacks them. */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int); /* rdma-core 34 */
    int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t,
                        size_t); /* _ibv_query_gid_ex, rdma-core 36 */
} dion__ibv_t;

/* Loads libname (NULL: DION_IB_LIBRARY, else DION__IBV_LIBNAME; tests pass a name that does not exist) and
 * fills t. On failure t holds nothing to release and the sentence names the library and the package that
 * provides it. */
dion_status_t dion__ibv_load(const char *libname, dion__ibv_t *t);
void dion__ibv_unload(dion__ibv_t *t);

/* ibv_query_port as verbs.h's inline wrapper does it: the provider's extended op when it has one, else the
 * exported compat entry on a zeroed struct. */
int dion__ibv_query_port(const dion__ibv_t *t, struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr);

#endif
