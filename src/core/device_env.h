// core/device_env: which GPU this process uses, from its environment, in one place (issue 21): the backend's probe
// and creation, and the NCCL communicator, all ask it, so that every rank of a job on one node takes its own GPU.
//
//   TT_ASSIGN_OR_RETURN(int device, process_device(visible_count));
#pragma once

#include "core/status.h"

namespace tt {

// The local rank a launcher gave this process (ours and torchrun's LOCAL_RANK, Open MPI's, MPICH's, Slurm's), or -1.
int launcher_local_rank();

// The device among `visible` (> 0) that this process uses: TIERTRAIN_DEVICE if set (an error if it is not one of
// them), else its local rank modulo `visible`, else 0.
Result<int> process_device(int visible);

}  // namespace tt
