/* Uses the installed headers (host and, in CPU mode, device) and library: a one-rank comm, a host window, a
 * CPU-mode handle, a put and a signal to itself. */
#include <stdio.h>
#include <string.h>

#include <dion/dion.h>
#include <dion/dion_device.cuh>

int main(void)
{
    dion_unique_id_t id;
    dion_comm_t comm;
    dion_win_t win;
    dion_dev_t dev;
    void *base;
    dion_dev_attr_t attr = {8, 1, 0, DION_DEV_FLAG_CPU};
    if (dion_get_unique_id(&id) || dion_comm_init_rank(&comm, 1, &id, 0) ||
        dion_win_alloc(comm, 64, 1, &base, &win) || dion_dev_create(comm, &attr, &dev)) {
        fprintf(stderr, "consumer: %s\n", dion_last_error());
        return 1;
    }
    memcpy(base, "installed", 10);
    dion_ctx_t c = dion_ctx(dev, 0);
    dion_put_signal(c, dion_win_device(win), 0, 32, dion_win_device(win), 0, 10, 0, DION_SIG_SET, 1);
    int ok =
        dion_wait(c, 0, DION_CMP_EQ, 1, NULL) == DION_SUCCESS && strcmp((char *)base + 32, "installed") == 0;
    dion_dev_destroy(comm, &dev);
    dion_win_destroy(win);
    dion_comm_destroy(comm);
    printf("consumer: DION %s %s\n", dion_version_string(), ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
