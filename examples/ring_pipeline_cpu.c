/* The ring pipeline in CPU mode, no GPU needed (ring_pipeline.h has the protocol):
 *   dionrun -n 4 ./ring_pipeline_cpu [chunks [chunk bytes [slots]]]
 * The two "blocks" are two CPU threads of one dion_cpu_launch. */
#include "ring_pipeline.h"

static void cpu_ring(const void *a, ex_team_t t)
{
    ring_pipeline((const ring_args_t *)a, t);
}

static int ring_launch(const ring_args_t *a)
{
    return ex_cpu_run(ex_name, 2, cpu_ring, a);
}

int main(int argc, char **argv)
{
    return ring_main(argc, argv, 32, 4096, 3);
}
