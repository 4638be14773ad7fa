/* A peer whose provider refuses every post (-FI_EAGAIN; the ofi engine's test hook stands for a peer that
 * stopped draining its queue), through the whole proxy path in CPU mode: rank 0 puts into rank 1's window and
 * quiets; quiet must return an error within DION_OFI_OP_TIMEOUT (set short by the caller) plus slack, not
 * hang, and dion_dev_check must give the engine's sentence (the refusals, the peer, the size). Then the hook
 * is off and a second handle's put arrives. Run with dionrun -n 2, DION_CPU_MODE=1, DION_TRANSPORT=proxy. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"
#include "transports/proxy/engine.h"
#include "../common/test_time.h"

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    size_t off, bytes;
    dion_status_t quiet;
} args_t;

static void kern(void *p)
{
    args_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    dion_put(c, a->win, 1, a->off, a->win, 0, a->bytes);
    a->quiet = dion_quiet(c);
}

#define OK(x)                                                                                                \
    do {                                                                                                     \
        if ((x) != DION_SUCCESS) {                                                                           \
            fprintf(stderr, "FAIL rank %d: %s: %s\n", rank, #x, dion_last_error());                          \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

int main(void)
{
    int rank = -1;
    dion_comm_t comm;
    OK(dion_comm_init_env(&comm));
    rank = dion_comm_rank(comm);
    const char *tv = getenv("DION_OFI_OP_TIMEOUT");
    double T = tv ? atof(tv) : 0;
    if (T <= 0 || T > 10) {
        fprintf(stderr, "FAIL: set DION_OFI_OP_TIMEOUT to a few seconds (e.g. 1s)\n");
        return 1;
    }
    size_t bytes = 1 << 16;
    void *base;
    dion_win_t win;
    OK(dion_win_alloc(comm, bytes, 1, &base, &win));
    uint8_t *b = base;
    for (size_t i = 0; i < 4096; i++) b[i] = (uint8_t)(i * 13 + rank);
    memset(b + 4096, 0, bytes - 4096);
    dion_dev_attr_t attr = {64, 1, 0, DION_DEV_FLAG_CPU};
    dion_dev_t dev;
    OK(dion_dev_create(comm, &attr, &dev));
    uint64_t rs = 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
    args_t a = {dev, dion_win_device(win), 8192 + (rs % 1000) * 8, 1 + (rs >> 20) % 4000, DION_SUCCESS};
    int bad = 0;
    OK(dion_comm_barrier(comm));
    if (rank == 0) {
        dion__ofi_test_refuse_peer = 1;
        double t0 = now_s();
        OK(dion_cpu_launch(1, 1, kern, &a));
        double dt = now_s() - t0;
        dion__ofi_test_refuse_peer = -1;
        dion_status_t cs = dion_dev_check(comm, &dev);
        const char *why = dion_last_error();
        char want[128];
        snprintf(want, sizeof want, "put of %zu bytes to rank 1 at offset %zu was not accepted", a.bytes,
                 a.off);
        printf("rank 0: quiet -> %s after %.2f s; dion_dev_check -> %s: %s\n", dion_status_string(a.quiet),
               dt, dion_status_string(cs), why);
        if (a.quiet == DION_SUCCESS) {
            fprintf(stderr, "FAIL rank 0: quiet succeeded although the provider refused the put\n");
            bad = 1;
        } else if (dt > T + 8) {
            fprintf(stderr, "FAIL rank 0: quiet returned after %.1f s, DION_OFI_OP_TIMEOUT is %.1f s\n", dt,
                    T);
            bad = 1;
        } else if (cs == DION_SUCCESS || !strstr(why, want) || !strstr(why, "-FI_EAGAIN")) {
            fprintf(stderr,
                    "FAIL rank 0: dion_dev_check said '%s', expected '%s ... (-FI_EAGAIN, N retries)'\n", why,
                    want);
            bad = 1;
        }
    }
    OK(dion_comm_barrier(comm));
    if (rank == 1)
        for (size_t i = 0; i < a.bytes; i++)
            if (b[a.off + i] != 0) {
                fprintf(stderr, "FAIL rank 1: byte %zu of the refused put arrived\n", i);
                bad = 1;
                break;
            }
    dion_dev_destroy(comm, &dev); /* its ring failed: destroy may report that */
    /* the engine works again: a fresh handle's put arrives */
    dion_dev_t dev2;
    OK(dion_dev_create(comm, &attr, &dev2));
    args_t a2 = {dev2, dion_win_device(win), 32768, 4096, DION_SUCCESS};
    OK(dion_comm_barrier(comm));
    if (rank == 0) {
        OK(dion_cpu_launch(1, 1, kern, &a2));
        if (a2.quiet != DION_SUCCESS) {
            fprintf(stderr, "FAIL rank 0: the put after the refusals: %s\n", dion_status_string(a2.quiet));
            bad = 1;
        }
    }
    OK(dion_comm_barrier(comm));
    if (rank == 1)
        for (size_t i = 0; i < 4096; i++)
            if (b[32768 + i] != (uint8_t)(i * 13)) {
                fprintf(stderr, "FAIL rank 1: byte %zu of the put after the refusals is %u\n", i,
                        b[32768 + i]);
                bad = 1;
                break;
            }
    OK(dion_dev_destroy(comm, &dev2));
    OK(dion_win_destroy(win));
    dion_comm_destroy(comm);
    if (!bad && rank == 0) printf("ok: a refused put fails quiet with the engine's sentence\n");
    return bad;
}
