/* The RDMA device and port choice shared by both verbs users (proxy/verbs and gdaki/mlx5); see
 * engine_verbs.h. Each caller opens devices its own way (ibv_open_device, mlx5dv_open_device with DEVX) and
 * words its own sentences from what this returns. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine_verbs.h"

void dion__verbs_appendf(char *buf, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 2 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

int dion__verbs_port_query(int (*compat)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *),
                           struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    if (vctx) return vctx->query_port(ctx, port, attr, sizeof *attr);
    memset(attr, 0, sizeof *attr);
    return compat(ctx, port, (struct _compat_ibv_port_attr *)attr);
}

const char *dion__verbs_port_state_name(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_DOWN:
        return "DOWN";
    case IBV_PORT_INIT:
        return "INIT (no subnet manager?)";
    case IBV_PORT_ARMED:
        return "ARMED";
    case IBV_PORT_ACTIVE:
        return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
        return "ACTIVE_DEFER";
    default:
        return "NOP";
    }
}

/* Opens dev (through the caller) and picks its port; 0 with out's ctx, attributes, port and name set, else -1
 * with the reasons appended to out->seen. */
static int try_device(const dion__verbs_dev_src_t *src, struct ibv_device *dev, dion__verbs_dev_pick_t *out)
{
    const char *name = src->get_device_name(dev);
    size_t cap = src->seen_cap && src->seen_cap < sizeof out->seen ? src->seen_cap : sizeof out->seen;
    struct ibv_context *c = src->open(src->arg, dev, name, out->seen, cap);
    if (!c) return -1;
    struct ibv_device_attr da;
    if (src->query_device(c, &da)) {
        dion__verbs_appendf(out->seen, cap, "%s: ibv_query_device failed (%s); ", name, strerror(errno));
        src->close_device(c);
        return -1;
    }
    for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
        if (src->port && p != (unsigned)src->port) continue;
        struct ibv_port_attr pa;
        if (src->query_port(src->arg, c, (uint8_t)p, &pa)) continue;
        if (pa.state == IBV_PORT_ACTIVE) {
            out->ctx = c;
            out->dattr = da;
            out->pattr = pa;
            out->port = (uint8_t)p;
            snprintf(out->name, sizeof out->name, "%s", name);
            return 0;
        }
        if (src->state_numbers)
            dion__verbs_appendf(out->seen, cap, "%s port %u not ACTIVE (state %d); ", name, p, (int)pa.state);
        else
            dion__verbs_appendf(out->seen, cap, "%s port %u %s; ", name, p,
                                dion__verbs_port_state_name(pa.state));
    }
    if (src->port && (unsigned)src->port > da.phys_port_cnt)
        dion__verbs_appendf(out->seen, cap, "%s has %u port(s), not port %d (DION_IB_PORT); ", name,
                            da.phys_port_cnt, src->port);
    src->close_device(c);
    return -1;
}

dion__verbs_dev_result_t dion__verbs_dev_choose(const dion__verbs_dev_src_t *src, dion__verbs_dev_pick_t *out)
{
    memset(out, 0, sizeof *out);
    int n = 0;
    errno = 0;
    struct ibv_device **list = src->get_device_list(&n);
    if (!list) {
        out->err = errno;
        return DION__VERBS_DEV_LIST_FAILED;
    }
    int found = 0;
    for (int i = 0; i < n && !out->ctx; i++) {
        const char *name = src->get_device_name(list[i]);
        if (src->hca && src->hca[0] && strcmp(name, src->hca)) continue;
        found = 1;
        try_device(src, list[i], out);
    }
    for (int i = 0; i < n; i++)
        dion__verbs_appendf(out->names, sizeof out->names, "%s%s", i ? " " : "",
                            src->get_device_name(list[i]));
    src->free_device_list(list);
    if (out->ctx) return DION__VERBS_DEV_OK;
    if (n == 0) return DION__VERBS_DEV_NONE;
    if (src->hca && src->hca[0] && !found) return DION__VERBS_DEV_NO_HCA;
    return DION__VERBS_DEV_NO_PORT;
}
