// backend/cuda/um: the CUDA backend's managed memory (memory/um.h): cudaMallocManaged for the reservation, refused
// beyond the GPU's free memory unless oversubscription is allowed; advice and prefetches through CUDA 13's forms
// that take a cudaMemLocation; discards through cudaMemDiscardBatchAsync. Needs concurrent managed access (every
// GPU since Pascal on Linux): checked at creation.
#pragma once

#include <memory>

#include "memory/um.h"

namespace tt::cuda {

Result<std::unique_ptr<memory::UmDriver>> create_um_driver(int device);

}  // namespace tt::cuda
