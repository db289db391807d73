#include "backend/cuda/um_counters.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <cupti.h>

#include "core/log.h"

#ifndef TT_CUDA_LIBRARY_DIR
#define TT_CUDA_LIBRARY_DIR ""
#endif
#ifndef TT_CUPTI_LIBRARY
#define TT_CUPTI_LIBRARY ""
#endif

namespace tt::cuda {
namespace {

// CUPTI's entry points we call, resolved from the library loaded at run time.
struct Cupti {
  void* handle = nullptr;
  CUptiResult (*configure)(CUpti_ActivityUnifiedMemoryCounterConfig*, uint32_t) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*get_dropped)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
};

// The activity API's callbacks are plain functions: the counts live here, one counter set per process.
std::mutex g_mu;
Cupti g_cupti;
std::map<std::string, int64_t> g_totals;
std::atomic<bool> g_running{false};

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t /*size*/, size_t valid) {
  std::map<std::string, int64_t> add;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && g_cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) continue;
    const auto* r = reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record);
    switch (r->counterKind) {
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
        add["bytes_to_device"] += static_cast<int64_t>(r->value);
        add["migrations_to_device"] += 1;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
        add["bytes_to_host"] += static_cast<int64_t>(r->value);
        add["migrations_to_host"] += 1;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT: add["cpu_page_faults"] += 1; break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        add["gpu_page_faults"] += static_cast<int64_t>(r->value);
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING: add["thrashing"] += 1; break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING: add["throttling"] += 1; break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP: add["remote_maps"] += 1; break;
      default: break;
    }
  }
  size_t dropped = 0;
  if (g_cupti.get_dropped != nullptr && g_cupti.get_dropped(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped > 0)
    add["dropped_records"] += static_cast<int64_t>(dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& [k, v] : add) g_totals[k] += v;
}

std::string cupti_error(CUptiResult rc) {
  const char* s = nullptr;
  if (g_cupti.result_string != nullptr) g_cupti.result_string(rc, &s);
  return s != nullptr ? s : "CUPTI error " + std::to_string(static_cast<int>(rc));
}

Status load_cupti() {
  if (g_cupti.handle != nullptr) return Status::ok();
  std::string tried;
  for (const std::string& name : {std::string(TT_CUPTI_LIBRARY),
                                  std::string(TT_CUDA_LIBRARY_DIR).empty() ? std::string()
                                                                           : std::string(TT_CUDA_LIBRARY_DIR) + "/libcupti.so",
                                  std::string("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"),
                                  std::string("/usr/local/cuda/lib64/libcupti.so"), std::string("libcupti.so"),
                                  std::string("libcupti.so.13")}) {
    if (name.empty()) continue;
    g_cupti.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (g_cupti.handle != nullptr) break;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  TT_RETURN_IF(g_cupti.handle == nullptr, kFailedPrecondition,
               "--um-counters needs CUPTI (libcupti.so), which is not found (tried %s)", tried.c_str());
  auto sym = [&](const char* n) { return dlsym(g_cupti.handle, n); };
  g_cupti.configure = reinterpret_cast<decltype(g_cupti.configure)>(sym("cuptiActivityConfigureUnifiedMemoryCounter"));
  g_cupti.enable = reinterpret_cast<decltype(g_cupti.enable)>(sym("cuptiActivityEnable"));
  g_cupti.disable = reinterpret_cast<decltype(g_cupti.disable)>(sym("cuptiActivityDisable"));
  g_cupti.register_callbacks =
      reinterpret_cast<decltype(g_cupti.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
  g_cupti.flush_all = reinterpret_cast<decltype(g_cupti.flush_all)>(sym("cuptiActivityFlushAll"));
  g_cupti.next_record = reinterpret_cast<decltype(g_cupti.next_record)>(sym("cuptiActivityGetNextRecord"));
  g_cupti.get_dropped = reinterpret_cast<decltype(g_cupti.get_dropped)>(sym("cuptiActivityGetNumDroppedRecords"));
  g_cupti.result_string = reinterpret_cast<decltype(g_cupti.result_string)>(sym("cuptiGetResultString"));
  const bool ok = g_cupti.configure && g_cupti.enable && g_cupti.disable && g_cupti.register_callbacks &&
                  g_cupti.flush_all && g_cupti.next_record;
  if (!ok) {
    dlclose(g_cupti.handle);
    g_cupti = Cupti{};
    return make_status(StatusCode::kFailedPrecondition, "libcupti lacks the activity API's functions");
  }
  return Status::ok();
}

#define TT_CUPTI(call, what)                                                                               \
  do {                                                                                                     \
    const CUptiResult tt_rc_ = (call);                                                                     \
    TT_RETURN_IF(tt_rc_ != CUPTI_SUCCESS, kFailedPrecondition, "--um-counters: %s: %s", what,              \
                 cupti_error(tt_rc_).c_str());                                                             \
  } while (0)

}  // namespace

Result<std::unique_ptr<UmCounters>> UmCounters::start() {
  TT_RETURN_IF(g_running.exchange(true), kFailedPrecondition, "--um-counters: counters already running");
  Status s = [] {
    TT_TRY(load_cupti());
    TT_CUPTI(g_cupti.register_callbacks(buffer_requested, buffer_completed), "registering the buffers");
    CUpti_ActivityUnifiedMemoryCounterConfig config[] = {
        {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, 0, 1},
        {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH, 0, 1},
        {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT, 0, 1},
        {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, 0, 1},
        {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, 0, 1},
        {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
         CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING, 0, 1},
    };
    TT_CUPTI(g_cupti.configure(config, static_cast<uint32_t>(std::size(config))),
             "configuring the unified memory counters");
    TT_CUPTI(g_cupti.enable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER), "enabling the unified memory counters");
    return Status::ok();
  }();
  if (!s.is_ok()) {
    g_running = false;
    return s;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_totals.clear();
  return std::unique_ptr<UmCounters>(new UmCounters());
}

UmCounters::~UmCounters() {
  g_cupti.disable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_running = false;
}

std::map<std::string, int64_t> UmCounters::totals() {
  if (const CUptiResult rc = g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); rc != CUPTI_SUCCESS)
    TT_LOG(WARN, PERF, "--um-counters: flushing CUPTI's buffers failed: %s", cupti_error(rc).c_str());
  std::lock_guard<std::mutex> lock(g_mu);
  return g_totals;
}

}  // namespace tt::cuda
