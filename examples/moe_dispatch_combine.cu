/* MoE dispatch and combine on GPUs (moe_dispatch_combine.h has the protocol):
 *   dionrun -n 2 --mps ./moe_dispatch_combine [small|ll|normal [iterations [blocks]]]    (or mpirun -n 2 ...)
 * ll and normal are DeepEP's shapes (hidden 7168 bf16, top-8 of 256 experts, 128 or 4096 tokens per rank). */
#include "moe_dispatch_combine.h"

#define THREADS 256
#define BLOCKS  32 /* every block must be resident at once, on every rank sharing the GPU */

__global__ void __launch_bounds__(THREADS, 1) k_dispatch(moe_args_t a)
{
    moe_dispatch(&a, ex_team_gpu());
}
__global__ void __launch_bounds__(THREADS, 1) k_expert(moe_args_t a)
{
    moe_expert(&a, ex_team_gpu());
}
__global__ void __launch_bounds__(THREADS, 1) k_combine(moe_args_t a)
{
    moe_combine(&a, ex_team_gpu());
}

static int moe_launch(int phase, const moe_args_t *a, unsigned blocks)
{
    if (phase == 0) k_dispatch<<<blocks, THREADS>>>(*a);
    if (phase == 1) k_expert<<<blocks * 4, THREADS>>>(*a);
    if (phase == 2) k_combine<<<blocks, THREADS>>>(*a);
    return ex_cuda_done(ex_name, phase == 0 ? "dispatch" : phase == 1 ? "expert" : "combine");
}

int main(int argc, char **argv)
{
    return moe_main(argc, argv, "ll", BLOCKS);
}
