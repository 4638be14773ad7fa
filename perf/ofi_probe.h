/* libfabric shm, without DION: the pieces perf/ofi_shm_probe.c and perf/proxy_floor.cu share (an endpoint
 * with one registered page, its address card, progress, and the posts the proxy's ofi engine makes: an 8-byte
 * write and a signal as a fetching or a plain atomic). Benchmarks only: a failure prints and exits. Static
 * functions in a header so that the C probe and the CUDA floor build each take what they use. */
#ifndef DION_PERF_OFI_PROBE_H
#define DION_PERF_OFI_PROBE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
} F;

#define CHK(x)                                                                                               \
    do {                                                                                                     \
        int r_ = (int)(x);                                                                                   \
        if (r_) {                                                                                            \
            fprintf(stderr, "FAIL %s: %d %s\n", #x, r_, F.strerror(-r_));                                    \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

typedef struct {
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_mr *mr;
    uint64_t *mem; /* [0] signal word, [1] data word */
    uint64_t key;
    int virt;
    char name[256];
    size_t namelen;
} side_t;

typedef struct { /* what one side tells the other (shared memory set up before fork, or the same process) */
    char name[256];
    size_t namelen;
    uint64_t key, base;
    volatile int ready;
} card_t;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static struct fi_info *info_for(int ordered)
{
    struct fi_info *h = F.dupinfo(NULL), *i = NULL;
    h->fabric_attr->prov_name = strdup("shm");
    h->caps = FI_RMA | FI_ATOMIC;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->mr_mode = ordered ? 0 : FI_MR_VIRT_ADDR;
    if (ordered) h->tx_attr->msg_order = FI_ORDER_WAW | FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_RAR;
    CHK(F.getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i));
    return i;
}

static void side_open(side_t *s, struct fi_info *i, uint64_t req_key)
{
    s->virt = (i->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    CHK(F.fabric(i->fabric_attr, &s->fab, NULL));
    CHK(fi_domain(s->fab, i, &s->dom, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT};
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    CHK(fi_endpoint(s->dom, i, &s->ep, NULL));
    CHK(fi_cq_open(s->dom, &ca, &s->cq, NULL));
    CHK(fi_av_open(s->dom, &aa, &s->av, NULL));
    CHK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
    CHK(fi_ep_bind(s->ep, &s->av->fid, 0));
    CHK(fi_enable(s->ep));
    s->mem = (uint64_t *)aligned_alloc(4096, 4096);
    memset(s->mem, 0, 4096);
    CHK(fi_mr_reg(s->dom, s->mem, 4096, FI_REMOTE_WRITE | FI_REMOTE_READ | FI_READ | FI_WRITE, 0, req_key, 0,
                  &s->mr, NULL));
    s->key = fi_mr_key(s->mr);
    s->namelen = sizeof s->name;
    CHK(fi_getname(&s->ep->fid, s->name, &s->namelen));
}

static void card_fill(card_t *c, const side_t *s)
{
    memcpy(c->name, s->name, s->namelen);
    c->namelen = s->namelen;
    c->key = s->key;
    c->base = s->virt ? (uint64_t)(uintptr_t)s->mem : 0;
    __atomic_store_n(&c->ready, 1, __ATOMIC_RELEASE);
}

static fi_addr_t side_connect(side_t *s, const card_t *peer)
{
    while (!__atomic_load_n(&peer->ready, __ATOMIC_ACQUIRE)) usleep(100);
    fi_addr_t a;
    if (fi_av_insert(s->av, peer->name, 1, &a, 0, NULL) != 1) {
        fprintf(stderr, "FAIL fi_av_insert\n");
        exit(1);
    }
    return a;
}

static void progress(side_t *s, int *completions)
{
    struct fi_cq_entry ent[8];
    ssize_t n = fi_cq_read(s->cq, ent, 8);
    if (n > 0 && completions) *completions += (int)n;
    if (n < 0 && n != -FI_EAGAIN) {
        fprintf(stderr, "FAIL fi_cq_read: %zd\n", n);
        exit(1);
    }
}

/* The operations: a signal (fetching or not), after an 8-byte write or alone. */
typedef struct {
    const char *name;
    int write, fetch, flush; /* flush: a fetch-add of 0 on another word right after the signal */
} op_t;

/* Posts op's write (value v into the peer's data word) and signal (v into its signal word); the
 * progress callback runs while shm refuses (connecting, queue full). */
static void post(side_t *s, side_t *also, fi_addr_t to, const card_t *peer, const op_t *op, uint64_t *src,
                 uint64_t *res, uint64_t v)
{
    *src = v;
    ssize_t r;
    if (op->write) {
        while ((r = fi_write(s->ep, src, 8, NULL, to, peer->base + 8, peer->key, src)) == -FI_EAGAIN) {
            progress(s, NULL);
            if (also) progress(also, NULL);
        }
        CHK(r);
    }
    struct fi_ioc io = {.addr = src, .count = 1}, ro = {.addr = res, .count = 1};
    struct fi_rma_ioc ri = {.addr = peer->base, .count = 1, .key = peer->key};
    struct fi_msg_atomic m = {.msg_iov = &io,
                              .iov_count = 1,
                              .addr = to,
                              .rma_iov = &ri,
                              .rma_iov_count = 1,
                              .datatype = FI_UINT64,
                              .op = FI_ATOMIC_WRITE,
                              .context = res};
    for (;;) {
        r = op->fetch ? fi_fetch_atomicmsg(s->ep, &m, &ro, NULL, 1, FI_COMPLETION)
                      : fi_atomicmsg(s->ep, &m, FI_COMPLETION);
        if (r != -FI_EAGAIN) break;
        progress(s, NULL);
        if (also) progress(also, NULL);
    }
    CHK(r);
    if (!op->flush) return;
    static uint64_t zero = 0, old = 0;
    struct fi_ioc zo = {.addr = &zero, .count = 1}, oo = {.addr = &old, .count = 1};
    struct fi_rma_ioc fi = {.addr = peer->base + 64, .count = 1, .key = peer->key};
    struct fi_msg_atomic f = {.msg_iov = &zo,
                              .iov_count = 1,
                              .addr = to,
                              .rma_iov = &fi,
                              .rma_iov_count = 1,
                              .datatype = FI_UINT64,
                              .op = FI_SUM,
                              .context = &old};
    while ((r = fi_fetch_atomicmsg(s->ep, &f, &oo, NULL, 1, FI_COMPLETION)) == -FI_EAGAIN) {
        progress(s, NULL);
        if (also) progress(also, NULL);
    }
    CHK(r);
}

/* Loads libfabric.so.1 as the engine does: 0, 77 when it is not there, 1 when it lacks a symbol. */
static int ofi_probe_load(const char *who)
{
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "%s: libfabric.so.1 not found (%s)\n", who, dlerror());
        return 77;
    }
    *(void **)&F.getinfo = dlsym(h, "fi_getinfo");
    *(void **)&F.dupinfo = dlsym(h, "fi_dupinfo");
    *(void **)&F.fabric = dlsym(h, "fi_fabric");
    *(void **)&F.strerror = dlsym(h, "fi_strerror");
    if (!F.getinfo || !F.dupinfo || !F.fabric || !F.strerror) {
        fprintf(stderr, "%s: libfabric lacks fi_getinfo/fi_dupinfo/fi_fabric/fi_strerror\n", who);
        return 1;
    }
    return 0;
}

#endif /* DION_PERF_OFI_PROBE_H */
