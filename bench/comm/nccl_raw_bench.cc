// bench/nccl_raw_bench: NCCL's allreduce, allgather, reduce_scatter or broadcast timed as nccl-tests times them (the
// iterations queued on a stream, one wait), with nothing of tiertrain between the clock and NCCL: the reference the
// nccl backend is measured against. tiertrain's host communicator only carries the unique id and the barrier before
// each timing. With --blocking each call is waited for before the next (cudaStreamSynchronize), the like-for-like
// reference of comm-bench's blocking calls. Run in every rank, one GPU each:
//   tiertrain launch -n 2 -- build/gpu/bench/nccl_raw_bench -C allreduce -b 8 -e 1G -f 4 -n 20 -w 5 --json F
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/comm.h"

#include "size_arg.h"

namespace {

#define CHECK(expr, what)                                                   \
  do {                                                                      \
    if (!(expr)) {                                                          \
      std::fprintf(stderr, "nccl_raw_bench: %s failed (%s:%d)\n", what, __FILE__, __LINE__); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  std::string coll = "allreduce", json;
  size_t min_b = 8, max_b = size_t(1) << 30;
  double factor = 4;
  int iters = 20, warmup = 5;
  bool blocking = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--blocking") {
      blocking = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "nccl_raw_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[i + 1];
    if (a == "-C") coll = v;
    else if (a == "-b") min_b = parse_size(v);
    else if (a == "-e") max_b = parse_size(v);
    else if (a == "-f") factor = std::atof(v.c_str());
    else if (a == "-n") iters = std::atoi(v.c_str());
    else if (a == "-w") warmup = std::atoi(v.c_str());
    else if (a == "--json") json = v;
    else {
      std::fprintf(stderr, "nccl_raw_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto w = tt::comm::world();
  if (!w.is_ok()) {
    std::fprintf(stderr, "nccl_raw_bench: %s\n", w.status().to_string().c_str());
    return 1;
  }
  tt::comm::Communicator& host = *w.value();
  const int me = host.rank(), n = host.size();
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0, "cudaGetDeviceCount");
  const char* lr = std::getenv("LOCAL_RANK");
  CHECK(cudaSetDevice((lr ? std::atoi(lr) : me) % devices) == cudaSuccess, "cudaSetDevice");
  ncclUniqueId id{};
  if (me == 0) CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
  CHECK(host.broadcast(tt::comm::kInPlace, &id, sizeof(id) / 8, tt::comm::DType::kI64, 0).is_ok(), "broadcast");
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, me) == ncclSuccess, "ncclCommInitRank");
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  void *send = nullptr, *recv = nullptr;
  CHECK(cudaMalloc(&send, max_b) == cudaSuccess && cudaMalloc(&recv, max_b) == cudaSuccess, "cudaMalloc");
  cudaMemset(send, 0, max_b);
  cudaMemset(recv, 0, max_b);
  const double part = (n - 1.0) / n;
  const double bus_factor = coll == "allreduce" ? 2 * part : coll == "broadcast" ? 1 : part;
  if (me == 0)
    std::printf("# nccl_raw_bench: %s, float, %d ranks, %d iterations after %d warm-up, %s\n"
                "#%11s %13s %9s %8s %8s %9s %8s %8s\n", coll.c_str(), n, iters, warmup,
                blocking ? "each call waited for" : "queued on a stream", "size", "count", "time",
                "algbw", "busbw", "time", "algbw", "busbw");
  nlohmann::json rows = nlohmann::json::array();
  for (double bd = static_cast<double>(min_b); bd <= static_cast<double>(max_b) * 1.0000001; bd *= factor) {
    size_t count = static_cast<size_t>(bd) / 4;
    if (coll != "allreduce" && coll != "broadcast") count = count / n * n;
    if (count == 0) continue;
    const size_t per = count / n;
    double times[2];
    for (int place = 0; place < 2; ++place) {
      char* r = static_cast<char*>(recv);
      const void* s = place ? static_cast<const void*>(r) : send;
      auto call = [&]() {
        ncclResult_t res = ncclSuccess;
        if (coll == "allreduce") res = ncclAllReduce(s, r, count, ncclFloat32, ncclSum, comm, stream);
        else if (coll == "broadcast") res = ncclBroadcast(s, r, count, ncclFloat32, 0, comm, stream);
        else if (coll == "allgather")
          res = ncclAllGather(place ? r + me * per * 4 : s, r, per, ncclFloat32, comm, stream);
        else if (coll == "reduce_scatter")
          res = place ? ncclReduceScatter(r, r + me * per * 4, per, ncclFloat32, ncclSum, comm, stream)
                      : ncclReduceScatter(s, r, per, ncclFloat32, ncclSum, comm, stream);
        CHECK(res == ncclSuccess, "the collective");
      };
      for (int i = 0; i < warmup; ++i) call();
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "warm-up");
      CHECK(host.barrier().is_ok(), "barrier");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        call();
        if (blocking) CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "a blocking call");
      }
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "timed run");
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      CHECK(host.allreduce(tt::comm::kInPlace, &t, 1, tt::comm::DType::kF64, tt::comm::Op::kAvg).is_ok(), "avg");
      times[place] = t;
    }
    const double bytes = static_cast<double>(count) * 4;
    if (me == 0) {
      std::printf("%12zu %13zu", count * 4, count);
      for (int p = 0; p < 2; ++p) {
        const double alg = bytes / times[p] / 1e9;
        std::printf(" %9.2f %8.2f %8.2f", times[p] * 1e6, alg, alg * bus_factor);
        rows.push_back({{"collective", coll}, {"ranks", n}, {"backend", "nccl-raw"}, {"size", count * 4},
                        {"count", count}, {"type", "float"}, {"in_place", p == 1}, {"time_us", times[p] * 1e6},
                        {"algbw_gbs", alg}, {"busbw_gbs", alg * bus_factor}, {"queued", !blocking}});
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (me == 0 && !json.empty()) std::ofstream(json) << rows.dump(1) << "\n";
  ncclCommDestroy(comm);
  cudaFree(send);
  cudaFree(recv);
  return 0;
}
