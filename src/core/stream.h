// core/stream: the ordering primitives every backend provides: streams run work in submission order, events mark a
// point in a stream that other streams or the host can wait for.
//
//   backend.copy_h2d(dst, src, n, backend.h2d_stream());
//   backend.h2d_stream().record(*copied);
//   backend.compute_stream().wait(*copied);   // compute sees the copied bytes
//
// Semantics follow CUDA's: record() captures the work submitted so far; wait() makes later work on this stream
// start only after that captured work finished; re-recording an event moves it to the newer point.
#pragma once

#include "core/status.h"

namespace tt {

class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling host thread until the captured work finished.
  virtual Status synchronize() = 0;
  // True when the captured work finished (or nothing was recorded).
  virtual bool query() = 0;
  // Milliseconds from `start`'s recorded point to this event's, both finished; the events must come from
  // create_event(/*timing=*/true) of the same backend.
  virtual Result<double> elapsed_ms_since(Event& start) = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual const char* name() const = 0;
  // Blocks until all submitted work finished; reports the first error raised by that work.
  virtual Status synchronize() = 0;
  virtual void record(Event& event) = 0;
  virtual void wait(Event& event) = 0;
  // The device runtime's own handle of this stream (a cudaStream_t), for libraries that queue work on it (NCCL);
  // nullptr for a stream that has none (the CPU backend's threads).
  virtual void* native() { return nullptr; }
};

}  // namespace tt
