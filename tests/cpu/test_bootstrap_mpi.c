/* dion_comm_init_mpi from the header-only dion_mpi.h, checked against MPI's own view. */
#include <stdio.h>
#include <stdlib.h>

#include "dion/dion_mpi.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    dion_comm_t comm;
    dion_status_t st = dion_comm_init_mpi(&comm, MPI_COMM_WORLD);
    if (st != DION_SUCCESS) {
        fprintf(stderr, "FAIL rank %d: dion_comm_init_mpi: %s: %s\n", rank, dion_status_string(st),
                dion_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (dion_comm_rank(comm) != rank || dion_comm_size(comm) != size) {
        fprintf(stderr, "FAIL: dion rank/size %d/%d vs MPI %d/%d\n", dion_comm_rank(comm),
                dion_comm_size(comm), rank, size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Ranks agree on data exchanged through DION's own collectives. */
    int *all = malloc(sizeof(int) * (size_t)size), mine = 1000 + rank * rank;
    if (dion_comm_allgather(comm, &mine, sizeof mine, all) != DION_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int r = 0; r < size; r++)
        if (all[r] != 1000 + r * r) {
            fprintf(stderr, "FAIL rank %d: allgather[%d] = %d\n", rank, r, all[r]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    for (int i = 0; i < 100; i++)
        if (dion_comm_barrier(comm) != DION_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
    free(all);
    dion_comm_destroy(comm);
    if (rank == 0) printf("dion_mpi.h: %d ranks ok\n", size);
    MPI_Finalize();
    return 0;
}
