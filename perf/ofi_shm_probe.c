/* What libfabric's shm provider costs for the operations the proxy's ofi engine posts, without DION: an
 * 8-byte signal as a fetching atomic (what the engine posts) or a plain one, after an 8-byte write or
 * alone, over shm's ordered variant (the engine's: FI_ORDER_* asked, mr_mode 0) and over its unordered
 * "fast RMA" variant (FI_MR_VIRT_ADDR, no order: writes are the sender's own CMA copy).
 *   ofi_shm_probe [iters]
 * one: one thread drives both endpoints: the initiator's post call, the target's progress until the word
 *      changed, the initiator's progress until its completion (CPU cost with warm caches; medians, ns).
 * pingpong: two processes, each spinning on its completion queue; the one-way time of a signal from one
 *      process's CPU to the other's (the proxy-to-proxy hop of a DION signal, without the GPU legs).
 * Every signal is checked to arrive with its value, and its write's data before it. libfabric is loaded at
 * run time (libfabric.so.1), as the engine does. docs/backends/proxy.md uses the numbers. */
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
#include <sys/mman.h>
#include <sys/wait.h>
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
    s->mem = aligned_alloc(4096, 4096);
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
static const op_t OPS[] = {
    {"fetch-atomic SET", 0, 1, 0},         {"atomic SET (no fetch)", 0, 0, 0},
    {"atomic SET + fetch-add 0", 0, 0, 1}, {"write 8B + fetch-atomic SET", 1, 1, 0},
    {"write 8B + atomic SET", 1, 0, 0},    {"write 8B + atomic SET + fetch-add 0", 1, 0, 1}};

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

static void check_arrival(const side_t *s, const op_t *op, uint64_t v)
{
    if (op->write && __atomic_load_n(&s->mem[1], __ATOMIC_RELAXED) != v) {
        fprintf(stderr, "FAIL %s: the signal %llu arrived before its data (%llu)\n", op->name,
                (unsigned long long)v, (unsigned long long)s->mem[1]);
        exit(1);
    }
}

static void run_one(int ordered, int iters)
{
    struct fi_info *i = info_for(ordered);
    side_t a, b;
    card_t ca, cb;
    memset(&ca, 0, sizeof ca);
    memset(&cb, 0, sizeof cb);
    side_open(&a, i, 1);
    side_open(&b, i, 2);
    card_fill(&ca, &a);
    card_fill(&cb, &b);
    fi_addr_t to = side_connect(&a, &cb);
    (void)side_connect(&b, &ca);
    uint64_t *tp = malloc(sizeof *tp * iters), *tt = malloc(sizeof *tt * iters),
             *tc = malloc(sizeof *tc * iters);
    uint64_t src = 0, res = 0;
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        const op_t *op = &OPS[k];
        for (int it = 0; it < iters; it++) {
            uint64_t v = ((uint64_t)(k + 1) << 40) + (uint64_t)it + 1;
            uint64_t t0 = now_ns();
            post(&a, &b, to, &cb, op, &src, &res, v);
            uint64_t t1 = now_ns();
            while (__atomic_load_n(&b.mem[0], __ATOMIC_ACQUIRE) != v) progress(&b, NULL);
            uint64_t t2 = now_ns();
            check_arrival(&b, op, v);
            int got = 0;
            while (got < 1 + op->write + op->flush) progress(&a, &got);
            tp[it] = t1 - t0;
            tt[it] = t2 - t1;
            tc[it] = now_ns() - t2;
        }
        qsort(tp, iters, 8, cmp_u64);
        qsort(tt, iters, 8, cmp_u64);
        qsort(tc, iters, 8, cmp_u64);
        printf("one      %-8s %-36s post %5llu  target %5llu  completion %5llu ns (medians)\n",
               ordered ? "ordered" : "fastrma", op->name, (unsigned long long)tp[iters / 2],
               (unsigned long long)tt[iters / 2], (unsigned long long)tc[iters / 2]);
    }
    free(tp);
    free(tt);
    free(tc);
}

/* Two processes: the parent times round trips (its signal, the child's answer) and reports half. */
static void run_pingpong(int ordered, int iters)
{
    card_t *cards = mmap(NULL, 2 * sizeof(card_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(cards, 0, 2 * sizeof(card_t));
    fflush(stdout);
    pid_t pid = fork();
    int me = pid == 0;
    struct fi_info *i = info_for(ordered);
    side_t s;
    side_open(&s, i, 10 + (uint64_t)me);
    card_fill(&cards[me], &s);
    fi_addr_t to = side_connect(&s, &cards[1 - me]);
    uint64_t *rt = malloc(sizeof *rt * iters), src = 0, res = 0;
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        const op_t *op = &OPS[k];
        int pending = 0;
        for (int it = 0; it < iters + 100; it++) {
            uint64_t v = ((uint64_t)(k + 1) << 40) + (uint64_t)it + 1, t0 = now_ns();
            if (!me) post(&s, NULL, to, &cards[1], op, &src, &res, v);
            while (__atomic_load_n(&s.mem[0], __ATOMIC_ACQUIRE) != v) progress(&s, &pending);
            check_arrival(&s, op, v);
            if (me) post(&s, NULL, to, &cards[0], op, &src, &res, v);
            if (!me && it >= 100) rt[it - 100] = now_ns() - t0;
            progress(&s, &pending); /* own completions, not waited for: as the engine, in the next pass */
        }
        if (!me) {
            qsort(rt, iters, 8, cmp_u64);
            printf("pingpong %-8s %-36s one-way %5llu ns (median; p10 %llu, p90 %llu)\n",
                   ordered ? "ordered" : "fastrma", op->name, (unsigned long long)rt[iters / 2] / 2,
                   (unsigned long long)rt[iters / 10] / 2, (unsigned long long)rt[iters * 9 / 10] / 2);
        }
        /* both sides drain their completions before the next op kind */
        uint64_t until = now_ns() + 20000000ull;
        while (now_ns() < until) progress(&s, &pending);
    }
    fflush(stdout);
    if (me) _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "FAIL the ping-pong child exited with %d\n", status);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "ofi_shm_probe: libfabric.so.1 not found (%s)\n", dlerror());
        return 77;
    }
    *(void **)&F.getinfo = dlsym(h, "fi_getinfo");
    *(void **)&F.dupinfo = dlsym(h, "fi_dupinfo");
    *(void **)&F.fabric = dlsym(h, "fi_fabric");
    *(void **)&F.strerror = dlsym(h, "fi_strerror");
    if (!F.getinfo || !F.dupinfo || !F.fabric || !F.strerror) {
        fprintf(stderr, "ofi_shm_probe: libfabric lacks fi_getinfo/fi_dupinfo/fi_fabric/fi_strerror\n");
        return 1;
    }
    if (iters < 100) iters = 100;
    for (int ordered = 1; ordered >= 0; ordered--) run_one(ordered, iters);
    for (int ordered = 1; ordered >= 0; ordered--) run_pingpong(ordered, iters);
    return 0;
}
