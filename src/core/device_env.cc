#include "core/device_env.h"

#include <cstdlib>

#include "core/env.h"

namespace tt {

int launcher_local_rank() {
  for (const char* v : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* s = env::get(v); s != nullptr && *s != '\0') {
      char* end = nullptr;
      const long r = std::strtol(s, &end, 10);
      if (*end == '\0' && r >= 0 && r < (1 << 20)) return static_cast<int>(r);
    }
  return -1;
}

Result<int> process_device(int visible) {
  TT_RETURN_IF(visible < 1, kFailedPrecondition, "no device is visible");
  if (const char* d = env::get("TIERTRAIN_DEVICE"); d != nullptr && *d != '\0') {
    char* end = nullptr;
    const long v = std::strtol(d, &end, 10);
    TT_RETURN_IF(*end != '\0' || v < 0 || v >= visible, kInvalidArgument,
                 "TIERTRAIN_DEVICE=%s: a device 0..%d of the %d this process sees", d, visible - 1, visible);
    return static_cast<int>(v);
  }
  const int lr = launcher_local_rank();
  return lr >= 0 ? lr % visible : 0;
}

}  // namespace tt
