/** \file dion_mpi.h
 * Header-only MPI bootstrap: libdion never links MPI, this header does it in the caller's program. */
#ifndef DION_MPI_H
#define DION_MPI_H

#include <mpi.h>
#include "dion.h"

/** Collective over mc (blocking): rank 0 of mc starts the bootstrap root, the id travels by MPI_Bcast, and
 * every rank joins with dion_comm_init_rank; DION ranks equal ranks in mc.
 * \param comm receives the communicator (NULL on failure).
 * \param mc the MPI communicator (MPI must be initialized).
 * \return DION_SUCCESS; DION_ERR_INVALID_ARG (MPI_Comm_rank/size failed); DION_ERR_BOOTSTRAP (the root did
 * not start or an MPI call failed); DION_ERR_PEER_FAILED (this rank joined but another did not); or this
 * rank's dion_comm_init_rank error. */
static inline dion_status_t dion_comm_init_mpi(dion_comm_t *comm, MPI_Comm mc)
{
    int rank = 0, size = 0;
    dion_unique_id_t id;
    int ok = 1, all_ok = 0;
    if (MPI_Comm_rank(mc, &rank) != MPI_SUCCESS || MPI_Comm_size(mc, &size) != MPI_SUCCESS)
        return DION_ERR_INVALID_ARG;
    if (rank == 0) ok = dion_get_unique_id(&id) == DION_SUCCESS;
    /* Every rank learns whether the root started, so none waits for a root that does not exist. */
    if (MPI_Bcast(&ok, 1, MPI_INT, 0, mc) != MPI_SUCCESS) return DION_ERR_BOOTSTRAP;
    if (!ok) return DION_ERR_BOOTSTRAP;
    if (MPI_Bcast(id.bytes, (int)sizeof id.bytes, MPI_BYTE, 0, mc) != MPI_SUCCESS) return DION_ERR_BOOTSTRAP;
    dion_status_t st = dion_comm_init_rank(comm, size, &id, rank);
    ok = st == DION_SUCCESS;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, mc) != MPI_SUCCESS) return DION_ERR_BOOTSTRAP;
    if (st == DION_SUCCESS && !all_ok) {
        dion_comm_destroy(*comm);
        *comm = NULL;
        return DION_ERR_PEER_FAILED;
    }
    return st;
}

#endif /* DION_MPI_H */
