/* The rdma-core dlopen table of gdaki on mlx5; see mlx5_sym.h. */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "mlx5_sym.h"
#include "transports/proxy/engine_verbs.h"

static void *open_lib(const char *name, char *path, size_t cap)
{
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) return NULL;
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
        snprintf(path, cap, "%s", lm->l_name);
    else
        snprintf(path, cap, "%s", name);
    return h;
}

dion_status_t dion__mlx5_sym_load(const char *ibv_lib, const char *dv_lib, dion__mlx5_sym_t *t)
{
    const char *iname = ibv_lib ? ibv_lib : DION__MLX5_IBV_LIBNAME;
    const char *dname = dv_lib ? dv_lib : DION__MLX5_DV_LIBNAME;
    memset(t, 0, sizeof *t);
    t->ibv_handle = open_lib(iname, t->ibv_path, sizeof t->ibv_path);
    if (!t->ibv_handle) {
        const char *e = dlerror();
        return dion__error_set(
            DION_ERR_UNSUPPORTED,
            "gdaki/mlx5: %s cannot be loaded (%s); install rdma-core (Debian/Ubuntu: apt "
            "install libibverbs1 ibverbs-providers; RHEL: dnf install rdma-core libibverbs)",
            iname, e ? e : "unknown dlopen error");
    }
    t->dv_handle = open_lib(dname, t->dv_path, sizeof t->dv_path);
    if (!t->dv_handle) {
        /* dlclose frees dlerror's text: keep a copy first */
        const char *e = dlerror();
        char err[256];
        snprintf(err, sizeof err, "%s", e ? e : "unknown dlopen error");
        dlclose(t->ibv_handle);
        memset(t, 0, sizeof *t);
        return dion__error_set(DION_ERR_UNSUPPORTED,
                               "gdaki/mlx5: %s cannot be loaded (%s); install rdma-core's mlx5 provider "
                               "(Debian/Ubuntu: apt install ibverbs-providers; RHEL: dnf install libibverbs)",
                               dname, err);
    }
    const char *missing = NULL, *missing_in = NULL;
    /* The cast goes through memcpy because ISO C has no conversion from void * to a function pointer. */
#define SYM(h, lib, field, sym)                                                                              \
    do {                                                                                                     \
        void *p_ = dlsym(h, sym);                                                                            \
        if (!p_ && !missing) missing = sym, missing_in = lib;                                                \
        memcpy(&t->field, &p_, sizeof p_);                                                                   \
    } while (0)
    void *ih = t->ibv_handle, *dh = t->dv_handle;
    SYM(ih, t->ibv_path, get_device_list, "ibv_get_device_list");
    SYM(ih, t->ibv_path, free_device_list, "ibv_free_device_list");
    SYM(ih, t->ibv_path, get_device_name, "ibv_get_device_name");
    SYM(ih, t->ibv_path, close_device, "ibv_close_device");
    SYM(ih, t->ibv_path, query_device, "ibv_query_device");
    SYM(ih, t->ibv_path, query_port, "ibv_query_port");
    SYM(ih, t->ibv_path, query_gid, "ibv_query_gid");
    SYM(ih, t->ibv_path, alloc_pd, "ibv_alloc_pd");
    SYM(ih, t->ibv_path, dealloc_pd, "ibv_dealloc_pd");
    SYM(ih, t->ibv_path, reg_mr, "ibv_reg_mr");
    SYM(ih, t->ibv_path, dereg_mr, "ibv_dereg_mr");
    SYM(ih, t->ibv_path, create_ah, "ibv_create_ah");
    SYM(ih, t->ibv_path, destroy_ah, "ibv_destroy_ah");
    SYM(dh, t->dv_path, is_supported, "mlx5dv_is_supported");
    SYM(dh, t->dv_path, open_device, "mlx5dv_open_device");
    SYM(dh, t->dv_path, init_obj, "mlx5dv_init_obj");
    SYM(dh, t->dv_path, general_cmd, "mlx5dv_devx_general_cmd");
    SYM(dh, t->dv_path, obj_create, "mlx5dv_devx_obj_create");
    SYM(dh, t->dv_path, obj_modify, "mlx5dv_devx_obj_modify");
    SYM(dh, t->dv_path, obj_destroy, "mlx5dv_devx_obj_destroy");
    SYM(dh, t->dv_path, alloc_uar, "mlx5dv_devx_alloc_uar");
    SYM(dh, t->dv_path, free_uar, "mlx5dv_devx_free_uar");
    SYM(dh, t->dv_path, umem_reg, "mlx5dv_devx_umem_reg");
    SYM(dh, t->dv_path, umem_dereg, "mlx5dv_devx_umem_dereg");
    SYM(dh, t->dv_path, query_eqn, "mlx5dv_devx_query_eqn");
    const char *req_missing = missing, *req_in = missing_in;
    SYM(ih, t->ibv_path, reg_dmabuf_mr, "ibv_reg_dmabuf_mr");
    SYM(ih, t->ibv_path, query_gid_ex, "_ibv_query_gid_ex");
    SYM(dh, t->dv_path, umem_reg_ex, "mlx5dv_devx_umem_reg_ex");
#undef SYM
    if (req_missing) {
        dion_status_t s = dion__error_set(
            DION_ERR_UNSUPPORTED,
            "gdaki/mlx5: %s lacks %s (DEVX needs rdma-core 24 or newer); install a newer rdma-core", req_in,
            req_missing);
        dion__mlx5_sym_unload(t);
        return s;
    }
    return DION_SUCCESS;
}

void dion__mlx5_sym_unload(dion__mlx5_sym_t *t)
{
    if (t->dv_handle) dlclose(t->dv_handle);
    if (t->ibv_handle) dlclose(t->ibv_handle);
    memset(t, 0, sizeof *t);
}

int dion__mlx5_query_port(const dion__mlx5_sym_t *t, struct ibv_context *ctx, uint8_t port,
                          struct ibv_port_attr *attr)
{
    return dion__verbs_port_query(t->query_port, ctx, port, attr);
}
