#include "comm/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/env.h"
#include "comm/nccl.h"
#include "comm/reduce.h"
#include "core/bf16.h"

namespace tt::comm {
namespace {

const char* nccl_type_name(DType d) {
  switch (d) {
    case DType::kF32: return "float";
    case DType::kF64: return "double";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "half";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
  }
  return "?";
}

// Small integers, exact in every dtype and under every op for a few ranks: rank r's element i in iteration k; -2 to 2,
// or 0 to 4 for bytes (unsigned).
double pattern(int r, size_t i, int k, DType d) {
  return static_cast<double>(static_cast<int>((r * 7 + i * 3 + k) % 5) - (d == DType::kU8 ? 0 : 2));
}

void put(void* p, size_t i, DType d, double x) {
  switch (d) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(x); break;
    case DType::kF64: static_cast<double*>(p)[i] = x; break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(x)); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = float_to_f16(static_cast<float>(x)); break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(x); break;
    case DType::kI64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(x); break;
    case DType::kU8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(x); break;
  }
}

double get(const void* p, size_t i, DType d) {
  switch (d) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF64: return static_cast<const double*>(p)[i];
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kU8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

// Bytes wrap around: a sum or product of bytes is taken modulo 256 (and an average of the wrapped sum).
double reduce_expected(int n, size_t i, int k, Op op, DType d) {
  double acc = pattern(0, i, k, d);
  for (int r = 1; r < n; ++r) {
    const double x = pattern(r, i, k, d);
    switch (op) {
      case Op::kSum:
      case Op::kAvg: acc += x; break;
      case Op::kProd: acc *= x; break;
      case Op::kMin: acc = std::min(acc, x); break;
      case Op::kMax: acc = std::max(acc, x); break;
      default: break;  // (the benchmark reduces with the arithmetic ops)
    }
  }
  if (d == DType::kU8) acc = std::fmod(acc, 256.0);
  return acc;
}

struct Shape {
  size_t send, recv;  // elements of each buffer on this rank
  double bus_factor;
  bool rooted, reduces;
};

Result<Shape> shape_of(const std::string& c, size_t count, int n) {
  const double nn = n, part = (nn - 1) / nn;
  const size_t per = count / static_cast<size_t>(n);
  if (c == "allreduce") return Shape{count, count, 2 * part, false, true};
  if (c == "broadcast") return Shape{count, count, 1, true, false};
  if (c == "reduce") return Shape{count, count, 1, true, true};
  if (c == "allgather") return Shape{per, count, part, false, false};
  if (c == "gather") return Shape{per, count, part, true, false};
  if (c == "scatter") return Shape{count, per, part, true, false};
  if (c == "reduce_scatter") return Shape{count, per, part, false, true};
  if (c == "alltoall") return Shape{count, count, part, false, false};
  return make_status(StatusCode::kInvalidArgument,
                     "comm-bench: unknown collective '%s' (allreduce, broadcast, reduce, allgather, gather, scatter, "
                     "reduce_scatter, alltoall)",
                     c.c_str());
}

// An allreduce of one 8-byte value held on the host, through a buffer of the communicator's memory.
Status allreduce_scalar(Communicator& comm, void* value, DType d, Op op) {
  TT_ASSIGN_OR_RETURN(void* buf, comm.alloc_buffer(8));
  Status s = comm.copy_in(buf, value, 8);
  if (s.is_ok()) s = comm.allreduce(kInPlace, buf, 1, d, op);
  if (s.is_ok()) s = comm.copy_out(value, buf, 8);
  comm.free_buffer(buf);
  return s;
}

}  // namespace

Result<WarmUp> warm_up(const std::function<Status()>& call, const std::function<Status()>& drain, int warmup,
                       double warm_ms, const MaxOverRanks& max_over_ranks) {
  using Clock = std::chrono::steady_clock;
  const auto secs = [](Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); };
  const auto w0 = Clock::now();
  for (int w = 0; w < warmup; ++w) TT_TRY(call());
  TT_TRY(drain());
  WarmUp r;
  r.pace = warmup > 0 ? secs(w0) / warmup : 0;
  double round_secs = 0;
  for (; warm_ms > 0 && r.rounds < 20; ++r.rounds) {
    const double left = warm_ms / 1e3 - secs(w0);
    double want = left <= 0 ? 0 : r.pace <= 0 ? 1 : std::min(std::max(std::ceil(left / r.pace), 1.0), 1e6);
    TT_TRY(max_over_ranks(&want));
    if (want == 0) break;
    const auto r0 = Clock::now();
    for (int64_t w = 0; w < static_cast<int64_t>(want); ++w) TT_TRY(call());
    TT_TRY(drain());
    round_secs += secs(r0);
    r.calls += want;
    r.pace = round_secs / r.calls;
  }
  r.calls += warmup;
  r.secs = secs(w0);
  return r;
}

Result<int64_t> timed_calls(int iters, double min_ms, double pace, const MaxOverRanks& max_over_ranks) {
  double timed = iters;
  if (min_ms > 0) {
    if (pace > 0) timed = std::min(std::max<double>(iters, std::ceil(min_ms / 1e3 / pace)), 1e6);
    TT_TRY(max_over_ranks(&timed));
  }
  return static_cast<int64_t>(timed);
}

Status run_bench(Communicator& comm, const BenchOptions& o) {
  const int n = comm.size(), me = comm.rank();
  const size_t es = dtype_size(o.dtype);
  TT_RETURN_IF(o.factor <= 1.0, kInvalidArgument, "comm-bench: -f %g must be > 1", o.factor);
  TT_RETURN_IF(o.min_bytes > o.max_bytes, kInvalidArgument, "comm-bench: -b %zu > -e %zu", o.min_bytes, o.max_bytes);
  // Sizes grow by -f from -b: from 0 they would never grow.
  TT_RETURN_IF(o.min_bytes == 0, kInvalidArgument, "comm-bench: -b 0: the smallest size must be at least 1 byte");
  TT_RETURN_IF(o.iters < 1 || o.warmup < 0 || o.check < 0, kInvalidArgument, "comm-bench: -n >= 1, -w and -c >= 0");
  TT_RETURN_IF(!(o.warmup_ms >= 0 && o.first_warmup_ms >= 0 && o.min_ms >= 0), kInvalidArgument,
               "comm-bench: --warmup-ms, --first-warmup-ms and --min-ms are >= 0");
  TT_ASSIGN_OR_RETURN(Shape probe, shape_of(o.collective, static_cast<size_t>(n), n));
  (void)probe;
  TT_RETURN_IF(o.root < 0 || o.root >= n, kInvalidArgument, "comm-bench: -r %d is not a rank of 0..%d", o.root, n - 1);
  auto* queued = dynamic_cast<NcclCommunicator*>(&comm);
  TT_RETURN_IF(o.stream && queued == nullptr, kInvalidArgument,
               "comm-bench: --stream is for the nccl backend (this is %s)", comm.backend());
  if (!o.stream) queued = nullptr;
  const int root = o.root;
  nlohmann::json rows = nlohmann::json::array();
  if (me == 0) {
    std::printf("# tiertrain comm-bench: %s, %s, %s, %d ranks (%s), %d%s iterations after %d warm-up, %s data, %s\n",
                o.collective.c_str(), nccl_type_name(o.dtype), op_name(o.op), n, comm.backend(), o.iters,
                o.min_ms > 0 ? " or more" : "", o.warmup,
                o.vary ? "varying" : "fixed",
                queued ? "queued on a stream, one wait per size" : "blocking calls");
    if (!comm.placement().empty()) std::printf("# rank 0's buffers: %s\n", comm.placement().c_str());
    std::printf("#%11s %13s %9s %7s %7s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type", "redop", "root",
                "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("#%11s %13s %9s %7s %7s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
                "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  double bus_sum = 0;
  int bus_rows = 0;
  bool first_row = true;  // the run's first timed row (its warm-up is first_warmup_ms)
  for (double bytes_d = static_cast<double>(o.min_bytes); bytes_d <= static_cast<double>(o.max_bytes) * 1.0000001;
       bytes_d *= o.factor) {
    // Whole elements, and for the per-rank collectives a multiple of the ranks.
    size_t count = static_cast<size_t>(bytes_d) / es;
    const bool split = o.collective == "allgather" || o.collective == "gather" || o.collective == "scatter" ||
                       o.collective == "reduce_scatter" || o.collective == "alltoall";
    if (split) count = count / static_cast<size_t>(n) * static_cast<size_t>(n);
    if (count == 0) continue;
    TT_ASSIGN_OR_RETURN(Shape sh, shape_of(o.collective, count, n));
    const size_t per = count / static_cast<size_t>(n);
    const size_t coll_count = split ? per : count;  // what the API takes
    // The buffers are in the communicator's memory (host, or the GPU for nccl); send_h and recv_h are their host
    // images, for filling and checking.
    std::vector<char> send_h(sh.send * es), recv_h(std::max(sh.send, sh.recv) * es);
    TT_ASSIGN_OR_RETURN(void* send_b, comm.alloc_buffer(send_h.size()));
    std::unique_ptr<void, std::function<void(void*)>> send_own(send_b, [&](void* p) { comm.free_buffer(p); });
    TT_ASSIGN_OR_RETURN(void* recv_b, comm.alloc_buffer(recv_h.size()));
    std::unique_ptr<void, std::function<void(void*)>> recv_own(recv_b, [&](void* p) { comm.free_buffer(p); });
    char* send = static_cast<char*>(send_b);
    char* recv = static_cast<char*>(recv_b);
    auto fill = [&](int k) -> Status {
      for (size_t i = 0; i < sh.send; ++i) put(send_h.data(), i, o.dtype, pattern(me, i, k, o.dtype));
      return comm.copy_in(send, send_h.data(), send_h.size());
    };
    TT_TRY(fill(0));
    double times[2] = {0, 0};
    int64_t wrong[2] = {0, 0}, iters[2] = {0, 0};
    for (int place = 0; place < 2; ++place) {
      const bool in_place = place == 1;
      auto call = [&]() -> Status {
        // In place, the data is in recv (stage() put it there); the non-roots of reduce and gather still send.
        const void* s = !in_place || ((o.collective == "gather" || o.collective == "reduce") && me != root)
                            ? static_cast<const void*>(send)
                            : kInPlace;
        void* r = recv;
        if (queued != nullptr) {
          static const std::map<std::string, Kind> kinds = {
              {"allreduce", kAllreduce}, {"broadcast", kBroadcast}, {"reduce", kReduce},
              {"allgather", kAllgather}, {"gather", kGather},       {"scatter", kScatter},
              {"reduce_scatter", kReduceScatter}, {"alltoall", kAlltoall}};
          return queued->enqueue(nullptr, Call{kinds.at(o.collective), s, r, coll_count, o.dtype, o.op, root});
        }
        if (o.collective == "allreduce") return comm.allreduce(s, r, coll_count, o.dtype, o.op);
        if (o.collective == "broadcast") return comm.broadcast(s, r, coll_count, o.dtype, root);
        if (o.collective == "reduce") return comm.reduce(s, r, coll_count, o.dtype, o.op, root);
        if (o.collective == "allgather") return comm.allgather(s, r, coll_count, o.dtype);
        if (o.collective == "gather") return comm.gather(s, r, coll_count, o.dtype, root);
        if (o.collective == "scatter") return comm.scatter(s, r, coll_count, o.dtype, root);
        if (o.collective == "reduce_scatter") return comm.reduce_scatter(s, r, coll_count, o.dtype, o.op);
        return comm.alltoall(s, r, coll_count, o.dtype);
      };
      auto stage = [&](int k) -> Status {  // in place: the send data into recv, where the call reads it
        TT_TRY(fill(k));
        if (!in_place) return Status::ok();
        const size_t at = (o.collective == "allgather" || o.collective == "gather") ? me * per * es : 0;
        return comm.copy_in(recv + at, send_h.data(), send_h.size());
      };
      // Queued calls are done when the stream is; blocking ones when they return.
      auto drain = [&]() { return queued ? queued->synchronize(nullptr) : Status::ok(); };
      TT_TRY(stage(0));
      // The warm-up (warm_up), then how many calls to time.
      const double warm_ms = first_row && o.first_warmup_ms > 0 ? o.first_warmup_ms : o.warmup_ms;
      first_row = false;
      const MaxOverRanks agree = [&](double* v) { return allreduce_scalar(comm, v, DType::kF64, Op::kMax); };
      TT_ASSIGN_OR_RETURN(const WarmUp warm, warm_up(call, drain, o.warmup, warm_ms, agree));
      if (me == 0 && env::is_set("TIERTRAIN_BENCH_TRACE"))
        std::fprintf(stderr, "warm-up: %.0f calls in %.2f ms over %d round(s), %.4f us a call\n", warm.calls,
                     warm.secs * 1e3, warm.rounds, warm.pace * 1e6);
      TT_ASSIGN_OR_RETURN(const int64_t n_it, timed_calls(o.iters, o.min_ms, warm.pace, agree));
      iters[place] = n_it;
      double total = 0;
      if (o.vary) {
        for (int64_t it = 0; it < n_it; ++it) {
          TT_TRY(stage(it + 1));  // not timed
          TT_TRY(comm.barrier());
          const auto t0 = std::chrono::steady_clock::now();
          TT_TRY(call());
          TT_TRY(drain());
          total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
      } else {
        TT_TRY(comm.barrier());
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t it = 0; it < n_it; ++it) TT_TRY(call());
        TT_TRY(drain());
        total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      // Mean over ranks of each rank's mean time per operation.
      double t = total / static_cast<double>(n_it);
      TT_TRY(allreduce_scalar(comm, &t, DType::kF64, Op::kAvg));
      times[place] = t;
      // Checked runs: known data, every element compared.
      int64_t bad = o.check > 0 ? 0 : -1;
      for (int c = 0; c < o.check; ++c) {
        const int k = 1000 + c;
        TT_TRY(stage(k));
        TT_TRY(call());
        TT_TRY(drain());
        TT_TRY(comm.copy_out(recv_h.data(), recv, recv_h.size()));
        const bool integral = o.dtype == DType::kI32 || o.dtype == DType::kI64 || o.dtype == DType::kU8;
        auto expect_at = [&](size_t i) -> double {  // element i of this rank's result
          if (o.collective == "allreduce" || o.collective == "reduce") {
            const double v = reduce_expected(n, i, k, o.op, o.dtype);
            return o.op == Op::kAvg ? (integral ? std::trunc(v / n) : v / n)
                                    : v;
          }
          if (o.collective == "reduce_scatter") {
            const double v = reduce_expected(n, me * per + i, k, o.op, o.dtype);
            return o.op == Op::kAvg ? (integral ? std::trunc(v / n) : v / n)
                                    : v;
          }
          if (o.collective == "broadcast") return pattern(root, i, k, o.dtype);
          if (o.collective == "allgather" || o.collective == "gather")
            return pattern(static_cast<int>(i / per), i % per, k, o.dtype);
          if (o.collective == "scatter") return pattern(root, me * per + i, k, o.dtype);
          return pattern(static_cast<int>(i / per), me * per + i % per, k, o.dtype);  // alltoall
        };
        const bool has_result = !(sh.rooted && o.collective != "broadcast" && o.collective != "scatter" && me != root);
        if (has_result) {
          const size_t m = sh.recv;
          // In place, reduce_scatter leaves this rank's result, and scatter the root's piece, at its own offset.
          const bool own_piece = in_place && (o.collective == "reduce_scatter" || (o.collective == "scatter" && me == root));
          const char* res = recv_h.data() + (own_piece ? me * per * es : 0);
          for (size_t i = 0; i < m; ++i) {
            double want = expect_at(i);
            std::vector<char> one(8);
            put(one.data(), 0, o.dtype, want);
            want = get(one.data(), 0, o.dtype);
            if (get(res, i, o.dtype) != want) ++bad;
          }
        }
      }
      if (bad >= 0) TT_TRY(allreduce_scalar(comm, &bad, DType::kI64, Op::kSum));
      wrong[place] = bad;
    }
    const double size_b = static_cast<double>(count * es);
    double alg[2], bus[2];
    for (int p = 0; p < 2; ++p) {
      alg[p] = size_b / times[p] / 1e9;
      bus[p] = alg[p] * sh.bus_factor;
    }
    bus_sum += bus[0] + bus[1];
    bus_rows += 2;
    if (me == 0) {
      std::printf("%12zu %13zu %9s %7s %7d %9.2f %8.2f %8.2f %6lld %9.2f %8.2f %8.2f %6lld\n", count * es, count,
                  nccl_type_name(o.dtype), sh.reduces ? op_name(o.op) : "none", sh.rooted ? root : -1, times[0] * 1e6,
                  alg[0], bus[0], static_cast<long long>(wrong[0]), times[1] * 1e6, alg[1], bus[1],
                  static_cast<long long>(wrong[1]));
      std::fflush(stdout);
      for (int p = 0; p < 2; ++p)
        rows.push_back({{"collective", o.collective}, {"ranks", n}, {"backend", comm.backend()},
                        {"size", count * es}, {"count", count}, {"type", nccl_type_name(o.dtype)},
                        {"redop", sh.reduces ? op_name(o.op) : "none"}, {"root", sh.rooted ? root : -1},
                        {"in_place", p == 1}, {"time_us", times[p] * 1e6}, {"algbw_gbs", alg[p]},
                        {"busbw_gbs", bus[p]}, {"wrong", wrong[p]}, {"varying_data", o.vary},
                        {"queued", queued != nullptr}, {"iters", iters[p]}});
    }
  }
  if (me == 0) {
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", bus_rows ? bus_sum / bus_rows : 0.0);
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      TT_RETURN_IF(!f, kIoError, "comm-bench: cannot write %s", o.json.c_str());
      f << rows.dump(1) << "\n";
    }
  }
  return Status::ok();
}

}  // namespace tt::comm
