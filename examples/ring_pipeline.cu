/* The ring pipeline on GPUs (ring_pipeline.h has the protocol):
 *   dionrun -n 2 --mps ./ring_pipeline [chunks [chunk bytes [slots]]]    (or mpirun -n 2 ...)
 * One kernel of two blocks per rank: both blocks must run at once (a persistent kernel). */
#include "ring_pipeline.h"

#define THREADS 512

__global__ void __launch_bounds__(THREADS, 1) k_ring(ring_args_t a)
{
    ring_pipeline(&a, ex_team_gpu());
}

static int ring_launch(const ring_args_t *a)
{
    k_ring<<<2, THREADS>>>(*a);
    return ex_cuda_done(ex_name, "ring_pipeline");
}

int main(int argc, char **argv)
{
    return ring_main(argc, argv, 64, 1 << 20, 4);
}
