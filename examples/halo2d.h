/* A 2D Jacobi stencil split over a PX x PY grid of ranks, written once for the GPU build (halo2d.cu) and the
 * CPU build (halo2d_cpu.c).
 *
 * Each rank owns an nx x ny tile, two copies (time parity). A step from time t to t + 1:
 *   1. wait until each neighbour's edge of time t has arrived: HALO(dir) >= t + 1;
 *   2. compute this tile's edge cells of time t + 1 (they need the neighbours' edges);
 *   3. send the new edges with dion_put_signal_block into the neighbours' halo buffers, setting
 *      HALO(their side) = t + 2 there (columns are packed first: a put copies contiguous bytes);
 *   4. compute the interior cells while the edges travel: the overlap.
 * Why two halo buffers (by parity) are enough and need no credits: a neighbour writes my halo of time t + 1
 * only after it computed time t + 1, which needed my edge of time t, which I sent after my last read of the
 * buffer of that parity (time t - 1). The same argument lets a pack buffer be refilled two steps later: its
 * earlier contents had arrived (the neighbour's reply proves it).
 * The update is (n + s + w + e) * 0.25f, added in that order everywhere: no fused multiply-add can change
 * the rounding, so the result must equal the single-rank run bit for bit. */
#ifndef HALO2D_H
#define HALO2D_H

#include "example_common.h"

static const char ex_name[] = "halo2d";

enum { HALO_N = 0, HALO_S = 1, HALO_W = 2, HALO_E = 3 }; /* direction of the neighbour; also its signal */

typedef struct {
    dion_dev_t dev;
    dion_dwin_t win; /* u[2][ny][nx], halo[2][4][hmax], pack[2][2][ny] (floats) */
    float *base;
    int NX, NY, PX, PY, px, py, nx, ny, hmax, steps;
    int nbr[4]; /* neighbour's rank per direction, -1 at the domain's edge */
    ex_result_t *res;
} halo_args_t;

EX_HD size_t halo_u(const halo_args_t *a, int p)
{
    return (size_t)p * a->nx * a->ny;
} /* offsets in floats */
EX_HD size_t halo_in(const halo_args_t *a, int p, int d)
{
    return 2 * (size_t)a->nx * a->ny + ((size_t)p * 4 + d) * a->hmax;
}
EX_HD size_t halo_pack(const halo_args_t *a, int p, int side) /* side 0: my west column, 1: east */
{
    return 2 * (size_t)a->nx * a->ny + 8 * (size_t)a->hmax + ((size_t)p * 2 + side) * a->ny;
}
EX_HD size_t halo_floats(const halo_args_t *a)
{
    return halo_pack(a, 2, 0);
}

/* Fixed values outside the domain, and the start inside: shared with the reference. */
EX_HD float halo_boundary(int gx, int gy)
{
    return (float)((gx * 3 + gy * 5 + 70) % 17) / 16.0f;
}
EX_HD float halo_start(int gx, int gy)
{
    return (float)((gx * 7 + gy * 13) % 29) / 28.0f;
}

/* Value of cell (i, j) of time parity p, i in [-1, nx], j in [-1, ny]: the tile, a halo, or the boundary. */
EX_HD float halo_get(const halo_args_t *a, int p, int i, int j)
{
    const float *f = a->base;
    if (i >= 0 && i < a->nx && j >= 0 && j < a->ny) return f[halo_u(a, p) + (size_t)j * a->nx + i];
    int d = j < 0 ? HALO_N : j >= a->ny ? HALO_S : i < 0 ? HALO_W : HALO_E;
    if (a->nbr[d] < 0) return halo_boundary(a->px * a->nx + i, a->py * a->ny + j);
    return f[halo_in(a, p, d) + (size_t)(d <= HALO_S ? i : j)];
}

EX_HD void halo_cell(const halo_args_t *a, int p, int i, int j)
{
    float v = (halo_get(a, p, i, j - 1) + halo_get(a, p, i, j + 1) + halo_get(a, p, i - 1, j) +
               halo_get(a, p, i + 1, j)) *
              0.25f;
    a->base[halo_u(a, 1 - p) + (size_t)j * a->nx + i] = v;
    if (i == 0) a->base[halo_pack(a, 1 - p, 0) + j] = v; /* the columns, packed for their puts */
    if (i == a->nx - 1) a->base[halo_pack(a, 1 - p, 1) + j] = v;
}

/* Send the edges of time parity p (time t) to the neighbours; they wait for t + 1. */
EX_HD void halo_send(const halo_args_t *a, dion_ctx_t c, int p, uint64_t t)
{
    const size_t row = (size_t)a->nx * 4, col = (size_t)a->ny * 4;
    /* my north row is my north neighbour's south halo, and so on */
    if (a->nbr[HALO_N] >= 0)
        dion_put_signal_block(c, a->win, a->nbr[HALO_N], halo_in(a, p, HALO_S) * 4, a->win, halo_u(a, p) * 4,
                              row, HALO_S, DION_SIG_SET, t + 1);
    if (a->nbr[HALO_S] >= 0)
        dion_put_signal_block(c, a->win, a->nbr[HALO_S], halo_in(a, p, HALO_N) * 4, a->win,
                              (halo_u(a, p) + (size_t)(a->ny - 1) * a->nx) * 4, row, HALO_N, DION_SIG_SET,
                              t + 1);
    if (a->nbr[HALO_W] >= 0)
        dion_put_signal_block(c, a->win, a->nbr[HALO_W], halo_in(a, p, HALO_E) * 4, a->win,
                              halo_pack(a, p, 0) * 4, col, HALO_E, DION_SIG_SET, t + 1);
    if (a->nbr[HALO_E] >= 0)
        dion_put_signal_block(c, a->win, a->nbr[HALO_E], halo_in(a, p, HALO_W) * 4, a->win,
                              halo_pack(a, p, 1) * 4, col, HALO_W, DION_SIG_SET, t + 1);
}

/* The whole run, one block per rank (a larger code would split the interior over more blocks). */
EX_HD void halo_run(const halo_args_t *a, ex_team_t tm)
{
    dion_ctx_t c = dion_ctx(a->dev, 0);
    unsigned long long t0 = ex_now_ns();
    const int nx = a->nx, ny = a->ny, edge = 2 * nx + 2 * (ny - 2);
    halo_send(a, c, 0, 0); /* the edges of time 0 (the host packed the columns) */
    for (int t = 0; t < a->steps; t++) {
        const int p = t & 1;
        if (tm.thread == 0)
            for (int d = 0; d < 4; d++) {
                dion_status_t st = a->nbr[d] < 0
                                       ? DION_SUCCESS
                                       : dion_wait(c, (uint32_t)d, DION_CMP_GE, (uint64_t)t + 1, NULL);
                if (st != DION_SUCCESS) {
                    ex_fail(a->res, st);
                    break;
                }
            }
        EX_SYNC();
        if (ex_failed(a->res)) return;
        for (int k = (int)tm.thread; k < edge; k += (int)tm.nthreads) { /* the edge cells first */
            int i, j;
            if (k < nx)
                i = k, j = 0;
            else if (k < 2 * nx)
                i = k - nx, j = ny - 1;
            else if (k < 2 * nx + ny - 2)
                i = 0, j = k - 2 * nx + 1;
            else
                i = nx - 1, j = k - 2 * nx - (ny - 2) + 1;
            halo_cell(a, p, i, j);
        }
        EX_SYNC(); /* the block's edge values are written before its threads copy them out */
        halo_send(a, c, 1 - p, (uint64_t)t + 1);
        for (int k = (int)tm.thread; k < (nx - 2) * (ny - 2); k += (int)tm.nthreads)
            halo_cell(a, p, 1 + k % (nx - 2), 1 + k / (nx - 2)); /* the interior, while the edges travel */
        EX_SYNC(); /* time t + 1 complete before the next step reads it */
    }
    if (tm.thread == 0) {
        dion_status_t st = dion_quiet(c);
        if (st != DION_SUCCESS) ex_fail(a->res, st);
        ex_record_span(a->res, t0, ex_now_ns());
    }
}

/* Supplied by the build: one launch of halo_run on one block; 0 on success. */
static int halo_launch(const halo_args_t *a);

static int halo_main(int argc, char **argv, int n_default, int steps_default)
{
    const int N = argc > 1 ? atoi(argv[1]) : n_default, steps = argc > 2 ? atoi(argv[2]) : steps_default;
    dion_comm_t comm;
    EX_DION(dion_comm_init_env(&comm));
    const int R = dion_comm_size(comm), me = dion_comm_rank(comm);
    int PX = 1; /* the most square process grid */
    for (int q = 1; q * q <= R; q++)
        if (R % q == 0) PX = q;
    const int PY = R / PX;
    if (steps < 1 || N < 1 || N % PX || N % PY || N / PX < 3 || N / PY < 3) {
        fprintf(stderr,
                "usage: %s [N [steps >= 1]]: N divisible by the %d x %d process grid, tiles >= 3 x 3\n",
                ex_name, PX, PY);
        return 2;
    }
    halo_args_t a;
    memset(&a, 0, sizeof a);
    a.NX = a.NY = N, a.PX = PX, a.PY = PY, a.px = me % PX, a.py = me / PX, a.steps = steps;
    a.nx = N / PX, a.ny = N / PY, a.hmax = a.nx > a.ny ? a.nx : a.ny;
    a.nbr[HALO_N] = a.py > 0 ? me - PX : -1;
    a.nbr[HALO_S] = a.py < PY - 1 ? me + PX : -1;
    a.nbr[HALO_W] = a.px > 0 ? me - 1 : -1;
    a.nbr[HALO_E] = a.px < PX - 1 ? me + 1 : -1;
    const size_t bytes = halo_floats(&a) * 4;
    void *base;
    dion_win_t win;
    EX_DION(dion_win_alloc(comm, bytes, EX_ON_HOST, &base, &win));
    dion_dev_attr_t attr = {4, 1, 0, EX_DEV_FLAGS};
    dion_dev_t dev;
    EX_DION(dion_dev_create(comm, &attr, &dev));
    a.dev = dev, a.win = dion_win_device(win), a.base = (float *)base;
    a.res = (ex_result_t *)ex_alloc(ex_name, sizeof(ex_result_t));

    /* Time 0: my tile and its packed columns. */
    float *host = (float *)calloc(1, bytes);
    for (int j = 0; j < a.ny; j++)
        for (int i = 0; i < a.nx; i++)
            host[(size_t)j * a.nx + i] = halo_start(a.px * a.nx + i, a.py * a.ny + j);
    for (int j = 0; j < a.ny; j++) {
        host[halo_pack(&a, 0, 0) + j] = host[(size_t)j * a.nx];
        host[halo_pack(&a, 0, 1) + j] = host[(size_t)j * a.nx + a.nx - 1];
    }
    ex_to_dev(ex_name, base, host, bytes);
    ex_result_t r;
    ex_result_reset(&r);
    ex_to_dev(ex_name, a.res, &r, sizeof r);
    EX_DION(dion_comm_barrier(comm)); /* every rank's buffers are ready before the first halo is sent */
    int ok = halo_launch(&a) == 0;
    ex_to_host(ex_name, &r, a.res, sizeof r);
    ok = ok && ex_launch_ok(ex_name, comm, &dev, &r, "halo2d");
    if (ok) ex_to_host(ex_name, host, base, bytes);

    /* The reference: the whole N x N grid on this rank alone, the same steps, the same arithmetic. */
    float *g[2] = {(float *)malloc(sizeof(float) * N * N), (float *)malloc(sizeof(float) * N * N)};
    for (int y = 0; y < N; y++)
        for (int x = 0; x < N; x++) g[0][(size_t)y * N + x] = halo_start(x, y);
    for (int t = 0; ok && t < steps; t++) {
        const float *s = g[t & 1];
        float *d = g[1 - (t & 1)];
#define G(x, y) ((x) < 0 || (x) >= N || (y) < 0 || (y) >= N ? halo_boundary(x, y) : s[(size_t)(y)*N + (x)])
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++)
                d[(size_t)y * N + x] = (G(x, y - 1) + G(x, y + 1) + G(x - 1, y) + G(x + 1, y)) * 0.25f;
#undef G
    }
    const float *want = g[steps & 1], *got = host + halo_u(&a, steps & 1);
    for (int j = 0; ok && j < a.ny; j++)
        for (int i = 0; i < a.nx; i++) {
            int x = a.px * a.nx + i, y = a.py * a.ny + j;
            if (got[(size_t)j * a.nx + i] != want[(size_t)y * N + x]) {
                fprintf(stderr,
                        "%s: rank %d: cell (%d, %d) after %d steps is %.9g, the single-rank run has %.9g\n",
                        ex_name, me, x, y, steps, got[(size_t)j * a.nx + i], want[(size_t)y * N + x]);
                ok = 0;
                break;
            }
        }
    ok = ex_all_ok(ex_name, comm, ok);
    double us = (double)(r.t1 - r.t0) * 1e-3, worst = 0;
    double *all = (double *)malloc(sizeof(double) * R);
    EX_DION(dion_comm_allgather(comm, &us, sizeof us, all));
    for (int i = 0; i < R; i++) worst = fmax(worst, all[i]);
    if (ok && me == 0)
        printf(
            "%s: %d x %d grid on %d x %d ranks, %d steps: verified, every cell equals the single-rank run; "
            "%.2f us per step\n",
            ex_name, N, N, PX, PY, steps, worst / steps);
    free(all), free(g[0]), free(g[1]), free(host);
    ex_free(a.res);
    EX_DION(dion_dev_destroy(comm, &dev));
    EX_DION(dion_win_destroy(win));
    EX_DION(dion_comm_destroy(comm));
    return ok ? 0 : 1;
}

#endif /* HALO2D_H */
