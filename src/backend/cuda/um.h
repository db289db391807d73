// backend/cuda/um: the CUDA backend's managed memory (memory/um.h): cudaMallocManaged for the reservation, refused
// beyond the GPU's free memory unless oversubscription is allowed; advice and prefetches through CUDA 13's forms
// that take a cudaMemLocation; discards through cudaMemDiscardBatchAsync. Needs concurrent managed access (every
// GPU since Pascal on Linux): checked at creation.
#pragma once

#include <memory>

#include "memory/um.h"

namespace tt::cuda {

// Prefetches to the host are cut into pieces of host_piece_bytes (0: one call a range): Note [prefetches to the host
// in pieces] in um.cc.
Result<std::unique_ptr<memory::UmDriver>> create_um_driver(
    int device, int64_t host_piece_bytes = memory::kDefaultUmHostPieceBytes);

}  // namespace tt::cuda
