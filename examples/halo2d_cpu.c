/* The 2D halo exchange in CPU mode, no GPU needed (halo2d.h has the protocol):
 *   dionrun -n 4 ./halo2d_cpu [N [steps]]
 * One CPU thread per rank runs what one GPU block runs. */
#include "halo2d.h"

static void cpu_halo(const void *a, ex_team_t t)
{
    halo_run((const halo_args_t *)a, t);
}

static int halo_launch(const halo_args_t *a)
{
    return ex_cpu_run(ex_name, 1, cpu_halo, a);
}

int main(int argc, char **argv)
{
    return halo_main(argc, argv, 48, 40);
}
