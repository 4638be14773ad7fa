/* The 2D halo exchange on GPUs (halo2d.h has the protocol):
 *   dionrun -n 4 --mps ./halo2d [N [steps]]    (or mpirun -n 4 ...; any rank count: the grid is made
 * square-ish) */
#include "halo2d.h"

#define THREADS 1024

__global__ void __launch_bounds__(THREADS, 1) k_halo(halo_args_t a)
{
    halo_run(&a, ex_team_gpu());
}

static int halo_launch(const halo_args_t *a)
{
    k_halo<<<1, THREADS>>>(*a);
    return ex_cuda_done(ex_name, "halo2d");
}

int main(int argc, char **argv)
{
    return halo_main(argc, argv, 512, 200);
}
