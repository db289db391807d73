#include "backend/cuda/cudnn_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cuda_runtime_api.h>

#include <map>
#include <type_traits>
#include <memory>
#include <mutex>
#include <vector>

#include "core/log.h"

#ifndef TT_CUDNN_HINT_DIRS
#define TT_CUDNN_HINT_DIRS ""
#endif
#ifndef TT_CUDA_LIBRARY_DIR
#define TT_CUDA_LIBRARY_DIR ""
#endif

namespace tt::cudnn {
namespace {

// Opened before libcudnn.so.9, in dependency order (Note [cudnn search]); a missing one is not an error here.
constexpr const char* kSubLibraries[] = {"libcudnn_graph.so.9",     "libcudnn_engines_precompiled.so.9",
                                         "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
                                         "libcudnn_ops.so.9",       "libcudnn_cnn.so.9",
                                         "libcudnn_adv.so.9"};

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    const std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) out.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string join(const std::string& dir, const char* name) { return dir.empty() ? name : dir + "/" + name; }

// NVRTC for the runtime-compiled engines: only when the loader cannot find it by itself; of this program's CUDA
// major version (an NVRTC of another major would compile for another runtime).
void preload_nvrtc() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string versioned = str_format("libnvrtc.so.%d", CUDART_VERSION / 1000);
    for (const char* name : {versioned.c_str(), "libnvrtc.so"}) {
      if (dlopen(name, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != nullptr) return;
      if (dlopen(name, RTLD_NOW | RTLD_GLOBAL) != nullptr) return;
      const std::string dir = TT_CUDA_LIBRARY_DIR;
      if (!dir.empty() && dlopen(join(dir, name).c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return;
    }
    TT_LOG(INFO, PERF, "cuDNN: no libnvrtc found; engines that compile at run time will be refused");
  });
}

// One candidate: `dir` for the sub-libraries ("" = none), `file` the libcudnn to open. Fills lib or says why not.
bool try_open(const std::string& dir, const std::string& file, Library* lib, std::string* why) {
  if (!dir.empty())
    for (const char* sub : kSubLibraries) (void)dlopen(join(dir, sub).c_str(), RTLD_NOW | RTLD_GLOBAL);
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *why = file + ": " + (e ? e : "dlopen failed");
    return false;
  }
  Api& a = lib->api;
  bool missing = false;
  std::string missing_name;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (fn == nullptr && !missing) {
      missing = true;
      missing_name = name;
    }
  };
  sym(a.get_version, "cudnnGetVersion");
  sym(a.get_cudart_version, "cudnnGetCudartVersion");
  sym(a.get_error_string, "cudnnGetErrorString");
  sym(a.get_last_error_string, "cudnnGetLastErrorString");
  sym(a.create, "cudnnCreate");
  sym(a.destroy, "cudnnDestroy");
  sym(a.set_stream, "cudnnSetStream");
  sym(a.create_descriptor, "cudnnBackendCreateDescriptor");
  sym(a.destroy_descriptor, "cudnnBackendDestroyDescriptor");
  sym(a.finalize, "cudnnBackendFinalize");
  sym(a.set_attribute, "cudnnBackendSetAttribute");
  sym(a.get_attribute, "cudnnBackendGetAttribute");
  sym(a.execute, "cudnnBackendExecute");
  if (missing) {
    *why = file + ": not cuDNN 9 (no symbol " + missing_name + ")";
    return false;  // the handle stays open: closing a library that other code may have mapped is not worth it
  }
  const int64_t v = static_cast<int64_t>(a.get_version());
  if (v < 90000 || v >= 100000) {
    *why = str_format("%s: cuDNN version %lld, not 9.x", file.c_str(), static_cast<long long>(v));
    return false;
  }
  if (v == 91000 || v == 91001) {
    *why = str_format("%s: cuDNN %lld has known attention bugs (9.10.0 and 9.10.1 are refused)", file.c_str(),
                      static_cast<long long>(v));
    return false;
  }
  const int64_t cudart = static_cast<int64_t>(a.get_cudart_version());
  if (cudart / 1000 != CUDART_VERSION / 1000) {
    *why = str_format("%s: built for CUDA runtime %lld, this program uses %d", file.c_str(),
                      static_cast<long long>(cudart), CUDART_VERSION);
    return false;
  }
  lib->version = v;
  char real[4096];
  lib->path = dlinfo(h, RTLD_DI_ORIGIN, real) == 0 ? std::string(real) + "/libcudnn.so.9" : file;
  return true;
}

Result<const Library*> load_uncached(const std::string& where) {
  std::vector<std::pair<std::string, std::string>> candidates;  // (dir for sub-libraries, file)
  if (!where.empty()) {
    if (is_dir(where)) {
      candidates.emplace_back(where, join(where, "libcudnn.so.9"));
    } else {
      const size_t slash = where.rfind('/');
      candidates.emplace_back(slash == std::string::npos ? "" : where.substr(0, slash), where);
    }
  } else {
    for (const std::string& d : split(TT_CUDNN_HINT_DIRS, ':'))
      if (is_dir(d)) candidates.emplace_back(d, join(d, "libcudnn.so.9"));
    candidates.emplace_back("", "libcudnn.so.9");
  }
  auto lib = std::make_unique<Library>();
  std::string reasons;
  for (const auto& [dir, file] : candidates) {
    std::string why;
    if (try_open(dir, file, lib.get(), &why)) {
      preload_nvrtc();
      return lib.release();  // lives as long as the process, like the mapping of the library
    }
    reasons += (reasons.empty() ? "" : "; ") + why;
  }
  return make_status(StatusCode::kNotFound, "cuDNN unavailable: %s", reasons.c_str());
}

}  // namespace

std::string Library::describe() const {
  return str_format("cuDNN %lld.%lld.%lld from %s", static_cast<long long>(version / 10000),
                    static_cast<long long>(version / 100 % 100), static_cast<long long>(version % 100), path.c_str());
}

Result<const Library*> load(const std::string& where) {
  static std::mutex mu;
  static std::map<std::string, Result<const Library*>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(where);
  if (it == cache.end()) it = cache.emplace(where, load_uncached(where)).first;
  return it->second;
}

}  // namespace tt::cudnn
