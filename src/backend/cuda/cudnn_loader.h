// backend/cuda/cudnn_loader: finds and loads cuDNN 9 at run time (dlopen), so that the binary builds without cuDNN
// and runs unchanged with or without it (docs/design/cudnn-attention.md §4). Never fatal: a library that is not
// there, not cuDNN, or of another major version gives a Status that says which paths were tried and why each
// failed, and the caller runs its own kernels.
//
//   Result<const cudnn::Library*> lib = cudnn::load("");   // search; or a file / folder (knob cudnn_library)
//   if (lib.is_ok()) TT_LOG(INFO, PERF, "%s", (*lib)->describe().c_str());
#pragma once

#include <cstdint>
#include <string>

#include "backend/cuda/cudnn_api.h"
#include "core/status.h"

namespace tt::cudnn {

struct Library {
  Api api{};
  int64_t version = 0;  // cudnnGetVersion(): major * 10000 + minor * 100 + patch (9.19.0 -> 91900)
  std::string path;     // the libcudnn.so.9 that was loaded
  std::string describe() const;  // "cuDNN 9.19.0 from /.../libcudnn.so.9"
};

// Note [cudnn search]
// `where` empty: the folders CMake found at configure time (TT_CUDNN_HINT_DIRS, ':'-separated: the cuDNN wheel of the Python
// environment, a CUDNN_ROOT), then the dynamic loader's own path. `where` a folder: that folder only; a file: that
// file only (its folder supplies the sub-libraries). In each folder the sub-libraries (libcudnn_graph,
// libcudnn_engines_*, libcudnn_heuristic, ...) are opened first with RTLD_GLOBAL, so that libcudnn.so.9, which opens
// them by soname, gets these and not another cuDNN elsewhere on the loader path (the GPU machine has a 9.14 in
// /usr/lib beside the 9.19 wheel). NVRTC (the runtime-compiled engines open it by soname) is preloaded from the CUDA
// toolkit's library folder when the loader path does not have it. Accepted: major version 9, except 9.10.0 and
// 9.10.1 (attention bugs the cuDNN frontend refuses them for). The result is cached per `where` for the process.
Result<const Library*> load(const std::string& where);

}  // namespace tt::cudnn
