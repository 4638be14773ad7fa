/* MoE dispatch and combine in CPU mode, no GPU needed (moe_dispatch_combine.h has the protocol):
 *   dionrun -n 4 ./moe_dispatch_combine_cpu [small [iterations]]
 * Each "block" is one CPU thread; one per rank, so that ranks x threads stays near the number of cores. */
#include "moe_dispatch_combine.h"

static void cpu_dispatch(const void *a, ex_team_t t)
{
    moe_dispatch((const moe_args_t *)a, t);
}
static void cpu_expert(const void *a, ex_team_t t)
{
    moe_expert((const moe_args_t *)a, t);
}
static void cpu_combine(const void *a, ex_team_t t)
{
    moe_combine((const moe_args_t *)a, t);
}

static int moe_launch(int phase, const moe_args_t *a, unsigned blocks)
{
    static void (*const core[3])(const void *, ex_team_t) = {cpu_dispatch, cpu_expert, cpu_combine};
    return ex_cpu_run(ex_name, blocks, core[phase], a);
}

/* one block per rank: block s receives from rank s */
int main(int argc, char **argv)
{
    return moe_main(argc, argv, "small", 0);
}
