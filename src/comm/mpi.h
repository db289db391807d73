// comm/mpi: the Communicator over MPI (comm/mpi.cc), in builds where CMake found MPI (TIERTRAIN_WITH_MPI).
#pragma once

#include <memory>

#include "comm/comm.h"

namespace tt::comm {

// Initialises MPI if needed (MPI_THREAD_SERIALIZED; finalised at exit) and wraps a duplicate of MPI_COMM_WORLD.
Result<std::unique_ptr<Communicator>> create_mpi(const Options& options);
// For the shm backend under mpirun: this process's rank and the world's size from MPI, and a job id that rank 0
// makes and broadcasts; every rank must be on this node.
Status mpi_bootstrap_shm(int* rank, int* size, std::string* job_id);

}  // namespace tt::comm
