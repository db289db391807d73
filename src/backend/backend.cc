#include "backend/backend.h"

namespace tt {

Status Backend::synchronize_all() {
  TT_TRY(compute_stream().synchronize());
  TT_TRY(h2d_stream().synchronize());
  TT_TRY(d2h_stream().synchronize());
  TT_TRY(host_stream().synchronize());
  return Status::ok();
}

}  // namespace tt
