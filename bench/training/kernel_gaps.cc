// A CUDA injection library (CUDA_INJECTION64_PATH) that records, through CUPTI's activity API, when every kernel,
// memory copy and memset of a program ran on the GPU, and writes them to the CSV file named by TT_GAPS_OUT:
//   kind,start_ns,end_ns,stream,name
// (kind: K kernel, C copy, S memset, D records CUPTI dropped (start_ns holds their count): the analysis refuses such a
// trace, since the missing records' time would count as idle; the name is the kernel's mangled name, or the copy's
// kind and bytes).
// bench/training/kernel_gaps.py reads the file and reports the GPU's idle time between them per training step: what
// a CUDA graph of the step could at most remove (docs/design/cuda-graph-step.md). The records are the GPU's own
// timestamps in a run at the card's normal clocks, unlike a kernel-by-kernel replay under ncu, where each kernel runs
// alone on an idle (faster-clocked) card.
//
// Built on the GPU machine by bench/training/kernel_gaps_gpu.sh against the CUPTI of CUDA 13 (the activity record
// structures are versioned: CUpti_ActivityKernel10, CUpti_ActivityMemcpy6 and CUpti_ActivityMemset4 are CUDA 13.0's).
#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

constexpr size_t kBufferBytes = 8u << 20;
std::mutex g_mutex;
FILE* g_out = nullptr;
std::atomic<uint64_t> g_records{0};

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_gaps: %s failed: %s\n", what, msg ? msg : "unknown error");
  std::exit(3);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_out == nullptr) {  // after at_exit closed the file
    std::free(buffer);
    return;
  }
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        std::fprintf(g_out, "K,%llu,%llu,%u,%s\n", static_cast<unsigned long long>(k->start),
                     static_cast<unsigned long long>(k->end), k->streamId, k->name ? k->name : "?");
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        std::fprintf(g_out, "C,%llu,%llu,%u,copy kind %u %llu B\n", static_cast<unsigned long long>(c->start),
                     static_cast<unsigned long long>(c->end), c->streamId, static_cast<unsigned>(c->copyKind),
                     static_cast<unsigned long long>(c->bytes));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* s = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        std::fprintf(g_out, "S,%llu,%llu,%u,memset %llu B\n", static_cast<unsigned long long>(s->start),
                     static_cast<unsigned long long>(s->end), s->streamId,
                     static_cast<unsigned long long>(s->bytes));
        break;
      }
      default:
        break;
    }
    ++g_records;
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    std::fprintf(stderr, "kernel_gaps: CUPTI dropped %zu records\n", dropped);
    std::fprintf(g_out, "D,%zu,0,%u,dropped records\n", dropped, stream);
  }
  std::free(buffer);
}

void at_exit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_out) {
    std::fclose(g_out);
    g_out = nullptr;
  }
  std::fprintf(stderr, "kernel_gaps: %llu records\n", static_cast<unsigned long long>(g_records.load()));
}

}  // namespace

// Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH), before the program's first CUDA call
// returns.
extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("TT_GAPS_OUT");
  if (!path) {
    std::fprintf(stderr, "kernel_gaps: TT_GAPS_OUT (the CSV to write) is not set\n");
    return 0;
  }
  g_out = std::fopen(path, "w");
  if (!g_out) {
    std::fprintf(stderr, "kernel_gaps: cannot write %s\n", path);
    return 0;
  }
  std::fprintf(g_out, "kind,start_ns,end_ns,stream,name\n");
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  // CONCURRENT_KERNEL, not KERNEL: the latter serializes the program's kernels.
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable copies");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memsets");
  std::atexit(at_exit);
  return 1;
}
