// comm/reduce: the element-wise reductions of the collectives, on host memory: dst = op over n sources, combined in
// source (rank) order so that every rank computes the same bits; bf16 and f16 are accumulated in f32 and rounded
// once (to nearest even); avg is the sum divided by n (integer division for integer types).
#pragma once

#include <cstddef>

#include "comm/comm.h"

namespace tt::comm {

// dst may be one of the sources. count elements of dtype each.
void reduce(void* dst, const void* const* srcs, int n, size_t count, DType dtype, Op op);

// Copies bytes with streaming (non-temporal) stores, which skip the cache, then fences (Note [streaming stores] in
// shm.cc); memcpy where there are none. Any alignment.
void stream_copy(void* dst, const void* src, size_t bytes);

// Whether every page of [p, p + bytes) is resident (mincore): a copy into pages not yet faulted in takes ordinary
// stores (Note [streaming stores] in comm/shm_internal.h). A few microseconds for 16 MiB.
bool pages_resident(const void* p, size_t bytes);

// IEEE half precision <-> float (round to nearest even; NaN stays NaN).
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

}  // namespace tt::comm
