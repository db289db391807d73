#include "backend/cuda/um.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#ifdef TT_HAVE_CUPTI
#include "backend/cuda/um_counters.h"
#endif
#include "core/log.h"
#include "core/units.h"

namespace tt::cuda {
namespace {
#if CUDART_VERSION >= 13000  // CUDA 13's advice and prefetch by cudaMemLocation, its batched discard-and-prefetch

cudaMemLocation location(memory::UmPlace p, int device) {
  cudaMemLocation loc{};
  if (p == memory::UmPlace::kDevice) {
    loc.type = cudaMemLocationTypeDevice;
    loc.id = device;
  } else {
    loc.type = cudaMemLocationTypeHost;
    loc.id = 0;
  }
  return loc;
}

class CudaUmDriver final : public memory::UmDriver {
 public:
  CudaUmDriver(int device, int64_t host_piece) : device_(device), host_piece_(host_piece) {}
  ~CudaUmDriver() override {
    for (auto& [p, n] : sizes_) cudaFree(p);
  }
  std::string describe() const override { return str_format("CUDA managed memory on device %d", device_); }

  Result<void*> reserve(size_t bytes, bool allow_oversubscription) override {
    TT_CUDA_CHECK(cudaSetDevice(device_));
    size_t free_b = 0, total_b = 0;
    TT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    TT_RETURN_IF(!allow_oversubscription && bytes > free_b, kOutOfMemory,
                 "managed memory: %s asked for, more than the %s free on the GPU (of %s). Managed memory beyond "
                 "the free memory makes the driver evict pages under load and can stall other jobs on a shared GPU; "
                 "--um-allow-oversubscription allows it where the GPU is yours alone",
                 format_bytes(static_cast<int64_t>(bytes)).c_str(), format_bytes(static_cast<int64_t>(free_b)).c_str(),
                 format_bytes(static_cast<int64_t>(total_b)).c_str());
    void* p = nullptr;
    const cudaError_t rc = cudaMallocManaged(&p, std::max<size_t>(bytes, 1), cudaMemAttachGlobal);
    TT_RETURN_IF(rc != cudaSuccess, kOutOfMemory, "cudaMallocManaged of %s failed: %s",
                 format_bytes(static_cast<int64_t>(bytes)).c_str(), cudaGetErrorString(rc));
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = bytes;
    TT_LOG(INFO, MEM, "managed memory: %s reserved (GPU free before: %s of %s)",
           format_bytes(static_cast<int64_t>(bytes)).c_str(), format_bytes(static_cast<int64_t>(free_b)).c_str(),
           format_bytes(static_cast<int64_t>(total_b)).c_str());
    return p;
  }

  void release(void* base) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(base);
    if (it == sizes_.end()) return;
    cudaFree(base);
    sizes_.erase(it);
  }

  Status advise(const std::vector<memory::UmRange>& ranges, const memory::UmAdvice& a) override {
    const cudaMemLocation dev = location(memory::UmPlace::kDevice, device_);
    const cudaMemLocation host = location(memory::UmPlace::kHost, device_);
    for (const memory::UmRange& r : ranges) {
      if (r.bytes == 0) continue;
      if (a.preferred != memory::UmPlace::kNone)
        TT_CUDA_CHECK(cudaMemAdvise(r.ptr, r.bytes, cudaMemAdviseSetPreferredLocation, location(a.preferred, device_)));
      if (a.accessed_by_device) TT_CUDA_CHECK(cudaMemAdvise(r.ptr, r.bytes, cudaMemAdviseSetAccessedBy, dev));
      if (a.accessed_by_host) TT_CUDA_CHECK(cudaMemAdvise(r.ptr, r.bytes, cudaMemAdviseSetAccessedBy, host));
      if (a.read_mostly) TT_CUDA_CHECK(cudaMemAdvise(r.ptr, r.bytes, cudaMemAdviseSetReadMostly, dev));
    }
    return Status::ok();
  }

  // Note [prefetches to the host in pieces]
  // The driver moves a large range to the host faster in pieces than in one call, most of all for a range preferred
  // on the device (the activations' advice); pieces over several streams add little, and pieces of 2 MiB are slower
  // (bench/um/prefetch_rate.cu; docs/benchmarks/2026-12-03-h200-engine-grads-written/). To the device one call is
  // fastest, so only prefetches to the host are cut. The knob um_host_piece_mib sets the piece (0: whole ranges;
  // bench/um/um_pieces_gpu.sh times both).

  void prefetch(const std::vector<memory::UmRange>& ranges, memory::UmPlace to, Stream& stream) override {
    auto s = static_cast<cudaStream_t>(stream.native());
    const cudaMemLocation loc = location(to, device_);
    const size_t piece = to == memory::UmPlace::kHost && host_piece_ > 0 ? static_cast<size_t>(host_piece_) : SIZE_MAX;
    for (const memory::UmRange& r : ranges)
      for (size_t off = 0; off < r.bytes; off += piece) {
        char* p = static_cast<char*>(r.ptr) + off;
        TT_CUDA_ASSERT(cudaMemPrefetchAsync(p, std::min(piece, r.bytes - off), loc, 0, s));
      }
  }

  Status start_counting() override {
#ifdef TT_HAVE_CUPTI
    TT_CUDA_CHECK(cudaSetDevice(device_));
    TT_ASSIGN_OR_RETURN(counters_, UmCounters::start());
    return Status::ok();
#else
    return make_status(StatusCode::kUnimplemented, "--um-counters: this build has no CUPTI headers");
#endif
  }
  std::map<std::string, int64_t> counted() override {
#ifdef TT_HAVE_CUPTI
    if (counters_) return counters_->totals();
#endif
    return {};
  }

  // One discard-and-prefetch for every range (Note [managed activations] in plan/schedule.cc: a plain
  // cudaMemDiscardBatchAsync, followed later by a prefetch, a write and a prefetch to the host, sometimes gave the
  // range's previous contents back with CUDA 13.0 and driver 580; bench/um/discard_repro.cu).
  void discard(const std::vector<memory::UmRange>& ranges, memory::UmPlace to, Stream& stream) override {
    std::vector<void*> ptrs;
    std::vector<size_t> sizes;
    for (const memory::UmRange& r : ranges)
      if (r.bytes > 0) {
        ptrs.push_back(r.ptr);
        sizes.push_back(r.bytes);
      }
    if (ptrs.empty()) return;
    cudaMemLocation loc = location(to, device_);
    size_t first = 0;
    TT_CUDA_ASSERT(cudaMemDiscardAndPrefetchBatchAsync(ptrs.data(), sizes.data(), ptrs.size(), &loc, &first, 1, 0,
                                                       static_cast<cudaStream_t>(stream.native())));
  }

 private:
  int device_;
  int64_t host_piece_;  // bytes; 0: whole ranges
#ifdef TT_HAVE_CUPTI
  std::unique_ptr<UmCounters> counters_;
#endif
  std::mutex mu_;
  std::map<void*, size_t> sizes_;
};

#endif
}  // namespace

Result<std::unique_ptr<memory::UmDriver>> create_um_driver(int device, int64_t host_piece_bytes) {
#if CUDART_VERSION < 13000
  (void)host_piece_bytes;
  return make_status(StatusCode::kFailedPrecondition,
                     "managed memory needs CUDA 13's runtime (advice and prefetch by cudaMemLocation, batched "
                     "discard); this build has %d", CUDART_VERSION);
#else
  int concurrent = 0;
  TT_CUDA_CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device));
  TT_RETURN_IF(concurrent == 0, kFailedPrecondition,
               "managed memory: device %d has no concurrent managed access (cudaDevAttrConcurrentManagedAccess 0), "
               "which prefetching and discarding need",
               device);
  TT_RETURN_IF(host_piece_bytes < 0, kInvalidArgument, "managed memory: a piece of %lld bytes",
               static_cast<long long>(host_piece_bytes));
  return std::unique_ptr<memory::UmDriver>(std::make_unique<CudaUmDriver>(device, host_piece_bytes));
#endif
}

}  // namespace tt::cuda
