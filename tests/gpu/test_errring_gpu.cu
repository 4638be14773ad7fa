/* Torn error records on the GPU (issue 7, defect 4): 32 blocks of 1024 threads write 4 error records each at
 * once, three launches; every record left in the ring must be whole, the rest counted as dropped, and
 * dion_dev_check must describe the earliest. Exits 77 without a GPU. */
#include <cuda_runtime.h>

#include "../common/errring.h"

__global__ void er_kernel(er_args_t a)
{
    er_body(&a);
}

static int er_launch(unsigned grid, unsigned block, er_args_t *a)
{
    er_kernel<<<grid, block>>>(*a);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fprintf(stderr, "kernel: %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
}
static void er_copy_ring(const dion_dev_t *dev, struct dion_dev_errors *out)
{
    if (cudaMemcpy(out, dev->errors, sizeof *out, cudaMemcpyDefault) != cudaSuccess)
        memset(out, 0xff, sizeof *out);
}
static uint64_t er_dropped(const dion_dev_t *dev)
{
    uint64_t v = 0;
#ifdef DION_CTL_ERR_DROPPED
    cudaMemcpy(&v, dev->signals + dev->num_signals + DION_CTL_ERR_DROPPED, 8, cudaMemcpyDeviceToHost);
#endif
    (void)dev;
    return v;
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    setenv("DION_WATCHDOG_INTERVAL", "0", 1); /* nothing reads the ring while the threads write */
    dion_unique_id_t id;
    dion_comm_t comm;
    dion_dev_t dev;
    dion_dev_attr_t attr = {16, 1, 0, 0};
    if (dion_get_unique_id(&id) != DION_SUCCESS || dion_comm_init_rank(&comm, 1, &id, 0) != DION_SUCCESS ||
        dion_dev_create(comm, &attr, &dev) != DION_SUCCESS) {
        fprintf(stderr, "FAIL: setup: %s\n", dion_last_error());
        return 1;
    }
    int failures = er_run(comm, dev, 32, 1024, 4, 3);
    if (dion_dev_destroy(comm, &dev) != DION_SUCCESS) failures++;
    dion_comm_destroy(comm);
    printf("%s: torn error records on the GPU\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
