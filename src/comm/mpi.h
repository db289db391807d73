// comm/mpi: the Communicator over MPI (comm/mpi.cc), in builds where CMake found MPI (TIERTRAIN_WITH_MPI).
#pragma once

#include <memory>

#include "comm/comm.h"

namespace tt::comm {

// Initialises MPI if needed (MPI_THREAD_SERIALIZED) and wraps a duplicate of MPI_COMM_WORLD.
Result<std::unique_ptr<Communicator>> create_mpi(const Options& options);

}  // namespace tt::comm
