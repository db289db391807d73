#include "backend/backend.h"

namespace tt {

Status Backend::synchronize_all() {
  // Every stream, even after one fails: callers free buffers that work on the others may still use.
  Status first = Status::ok();
  for (Stream* s : {&compute_stream(), &h2d_stream(), &d2h_stream(), &host_stream(), &comm_stream()}) {
    Status st = s->synchronize();
    if (!st.is_ok() && first.is_ok()) first = std::move(st);
  }
  return first;
}

}  // namespace tt
