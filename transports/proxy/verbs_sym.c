/* The libibverbs dlopen table; see verbs_sym.h. */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "engine_verbs.h"
#include "verbs_sym.h"

dion_status_t dion__ibv_load(const char *libname, dion__ibv_t *t)
{
    const char *env = dion__cfg_env("DION_IB_LIBRARY");
    const char *name = libname ? libname : env && *env ? env : DION__IBV_LIBNAME;
    memset(t, 0, sizeof *t);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        return dion__error_set(DION_ERR_UNSUPPORTED,
                               "proxy/verbs: %s cannot be loaded (%s); install rdma-core's verbs library and "
                               "its providers (Debian/Ubuntu: apt install libibverbs1 ibverbs-providers; "
                               "RHEL: dnf install rdma-core libibverbs), or use another backend (proxy/ofi)",
                               name, e ? e : "unknown dlopen error");
    }
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
        snprintf(t->path, sizeof t->path, "%s", lm->l_name);
    else
        snprintf(t->path, sizeof t->path, "%s", name);
    const char *missing = NULL;
    /* Required entries; the cast goes through void * because ISO C has no function-pointer cast from it. */
#define DION__IBV_REQ(field, sym)                                                                            \
    do {                                                                                                     \
        void *p_ = dlsym(h, sym);                                                                            \
        if (!p_ && !missing) missing = sym;                                                                  \
        memcpy(&t->field, &p_, sizeof p_);                                                                   \
    } while (0)
    DION__IBV_REQ(get_device_list, "ibv_get_device_list");
    DION__IBV_REQ(free_device_list, "ibv_free_device_list");
    DION__IBV_REQ(get_device_name, "ibv_get_device_name");
    DION__IBV_REQ(open_device, "ibv_open_device");
    DION__IBV_REQ(close_device, "ibv_close_device");
    DION__IBV_REQ(query_device, "ibv_query_device");
    DION__IBV_REQ(query_port, "ibv_query_port");
    DION__IBV_REQ(query_gid, "ibv_query_gid");
    DION__IBV_REQ(alloc_pd, "ibv_alloc_pd");
    DION__IBV_REQ(dealloc_pd, "ibv_dealloc_pd");
    DION__IBV_REQ(create_cq, "ibv_create_cq");
    DION__IBV_REQ(destroy_cq, "ibv_destroy_cq");
    DION__IBV_REQ(create_qp, "ibv_create_qp");
    DION__IBV_REQ(modify_qp, "ibv_modify_qp");
    DION__IBV_REQ(destroy_qp, "ibv_destroy_qp");
    DION__IBV_REQ(reg_mr, "ibv_reg_mr");
    DION__IBV_REQ(dereg_mr, "ibv_dereg_mr");
    DION__IBV_REQ(get_async_event, "ibv_get_async_event");
    DION__IBV_REQ(ack_async_event, "ibv_ack_async_event");
    const char *required_missing = missing;
    DION__IBV_REQ(reg_dmabuf_mr, "ibv_reg_dmabuf_mr");
    DION__IBV_REQ(query_gid_ex, "_ibv_query_gid_ex");
#undef DION__IBV_REQ
    if (required_missing) {
        dion_status_t s = dion__error_set(DION_ERR_UNSUPPORTED,
                                          "proxy/verbs: %s lacks %s; install a newer rdma-core (libibverbs1)",
                                          t->path, required_missing);
        dlclose(h);
        memset(t, 0, sizeof *t);
        return s;
    }
    t->handle = h;
    return DION_SUCCESS;
}

void dion__ibv_unload(dion__ibv_t *t)
{
    if (t->handle) dlclose(t->handle);
    memset(t, 0, sizeof *t);
}

int dion__ibv_query_port(const dion__ibv_t *t, struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr)
{
    return dion__verbs_port_query(t->query_port, ctx, port, attr);
}
