/* An error completion of the proxy's verbs engine, end to end: every rank puts 64 bytes to the next rank
 * (succeeds, data checked), then puts again; the fake libibverbs (FAKE_IBV_FAIL_AT=1) completes that second
 * WRITE with the status FAKE_IBV_FAIL_STATUS names (IBV_WC_REM_ACCESS_ERR unless set). The second quiet must
 * return an error, the target must not have been written, and dion_dev_check must name the peer and the
 * decoded status. Run under dionrun with DION_TRANSPORT=proxy/verbs and DION_IB_LIBRARY=the fake.
 * usage: proxy_verbs_fault EXPECTED_STATUS_WORDS (e.g. "remote access error") */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dion/dion.h"
#include "dion/dion_device.cuh"

#define PF_BYTES 64
#define PF_SRC   4096

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win;
    int peer;
    dion_status_t q1, q2;
} pf_args_t;

static void pf_body(void *p)
{
    pf_args_t *a = p;
    dion_ctx_t c = dion_ctx(a->dev, 0);
    dion_put(c, a->win, a->peer, 0, a->win, PF_SRC, PF_BYTES);
    a->q1 = dion_quiet(c);
    dion_put(c, a->win, a->peer, PF_BYTES, a->win, PF_SRC, PF_BYTES); /* the fake fails this one */
    a->q2 = dion_quiet(c);
}

static int failures;
#define PF_FAIL(...)                                                                                         \
    do {                                                                                                     \
        fprintf(stderr, "FAIL rank %d: ", rank);                                                             \
        fprintf(stderr, __VA_ARGS__);                                                                        \
        fprintf(stderr, "\n");                                                                               \
        failures++;                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    const char *words = argc > 1 ? argv[1] : "remote access error";
    int rank = -1;
    dion_comm_t comm;
    if (dion_comm_init_env(&comm) != DION_SUCCESS) {
        fprintf(stderr, "FAIL: comm: %s\n", dion_last_error());
        return 1;
    }
    rank = dion_comm_rank(comm);
    int n = dion_comm_size(comm), peer = (rank + 1) % n, from = (rank + n - 1) % n;
    void *base = NULL;
    dion_win_t win;
    dion_dev_t dev;
    dion_dev_attr_t attr = {16, 1, 5000000000ull, 0};
    if (dion_win_alloc(comm, 8192, 1, &base, &win) != DION_SUCCESS ||
        dion_dev_create(comm, &attr, &dev) != DION_SUCCESS) {
        fprintf(stderr, "FAIL rank %d: setup: %s\n", rank, dion_last_error());
        return 1;
    }
    unsigned char *w = base;
    memset(w, 0, 8192);
    for (int i = 0; i < PF_BYTES; i++) w[PF_SRC + i] = (unsigned char)(rank * 16 + i);
    dion_comm_barrier(comm);
    pf_args_t a = {dev, dion_win_device(win), peer, DION_SUCCESS, DION_SUCCESS};
    if (dion_cpu_launch(1, 1, pf_body, &a) != DION_SUCCESS) PF_FAIL("launch: %s", dion_last_error());
    dion_comm_barrier(comm);
    if (a.q1 != DION_SUCCESS) PF_FAIL("the first quiet returned %s", dion_status_string(a.q1));
    for (int i = 0; i < PF_BYTES; i++)
        if (w[i] != (unsigned char)(from * 16 + i)) {
            PF_FAIL("byte %d of rank %d's put is %u, expected %u", i, from, w[i], (unsigned)(from * 16 + i));
            break;
        }
    for (int i = PF_BYTES; i < 2 * PF_BYTES; i++)
        if (w[i]) {
            PF_FAIL("the failed put wrote byte %d", i);
            break;
        }
    if (a.q2 == DION_SUCCESS) PF_FAIL("the quiet after the failed put returned DION_SUCCESS");
    dion_status_t st = dion_dev_check(comm, &dev);
    const char *msg = dion_last_error();
    char want[32];
    snprintf(want, sizeof want, "rank %d", peer);
    if (st == DION_SUCCESS)
        PF_FAIL("dion_dev_check reported nothing");
    else if (!strstr(msg, want) || !strstr(msg, words))
        PF_FAIL("dion_dev_check's sentence does not name %s and '%s': %s", want, words, msg);
    else
        printf("rank %d: quiet -> %s; dion_dev_check: %s\n", rank, dion_status_string(a.q2), msg);
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    printf("%s: rank %d, error completion -> failed ring naming the peer\n", failures ? "FAIL" : "PASS",
           rank);
    return failures ? 1 : 0;
}
