// `tiertrain comm-bench`: a collective benchmarked in nccl-tests' format (comm/bench.h), in every rank of a job:
// tiertrain launch -n N -- tiertrain comm-bench -b 8 -e 256M -f 2.
#include <cstdlib>
#include <string>

#include "cli/command.h"
#include "comm/bench.h"
#include "comm/comm.h"

namespace tt::cli {

namespace {

// A size in bytes with an optional K, M or G (powers of 1024).
Result<size_t> parse_size(const std::string& t) {
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  const std::string unit = end;
  const double mult = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  TT_RETURN_IF(end == t.c_str() || mult < 0 || v < 0, kInvalidArgument,
               "comm-bench: size '%s' (a number of bytes with an optional K, M or G)", t.c_str());
  return static_cast<size_t>(v * mult);
}

class CommBenchCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* bench = app.add_subcommand(
        "comm-bench", "benchmark a collective in nccl-tests' format, in every rank of a job: tiertrain launch -n N -- "
                      "tiertrain comm-bench -b 8 -e 256M -f 2");
    bench->add_option("-C,--collective", o_.collective,
                      "allreduce (default), broadcast, reduce, allgather, gather, scatter, reduce_scatter, alltoall");
    bench->add_option("-b,--minbytes", min_, "smallest size (bytes; K, M, G suffixes) [default: 8]");
    bench->add_option("-e,--maxbytes", max_, "largest size [default: 64M]");
    bench->add_option("-f,--stepfactor", o_.factor, "size multiplier between rows [default: 2]")->check(kFinitePositive);
    bench->add_option("-n,--iters", o_.iters, "timed iterations per size [default: 20]");
    bench->add_option("-w,--warmup_iters", o_.warmup, "untimed iterations first [default: 5]");
    bench->add_option("--warmup-ms", o_.warmup_ms,
                      "then more untimed iterations, as many on every rank, until this many ms have passed "
                      "[default: 0]");
    bench->add_option("--first-warmup-ms", o_.first_warmup_ms,
                      "--warmup-ms for the first row (0: the same) [default: 0]");
    bench->add_option("--min-ms", o_.min_ms,
                      "time at least as many iterations as take this many ms at the warm-up's pace [default: 0]");
    bench->add_option("-c,--check", o_.check,
                      "checked iterations per size, counted in #wrong (0: none) [default: 1]");
    bench->add_option("-d,--datatype", dtype_, "f32, f64, bf16, f16, i32, i64, u8 [default: f32]");
    bench->add_option("-o,--op", op_, "sum, prod, min, max, avg [default: sum]");
    bench->add_option("-r,--root", o_.root, "root of the rooted collectives [default: 0]");
    bench->add_flag("--vary", o_.vary, "new data before every operation (untimed), so caches do not flatter");
    bench->add_option("--json", o_.json, "write the rows as JSON to this file (rank 0)");
    bench->add_option("--backend", backend_,
                      "shm, mpi or nccl (device buffers) [default: TIERTRAIN_COMM_BACKEND, else auto]")
        ->check(CLI::IsMember({"auto", "shm", "mpi", "nccl"}));
    bench->add_flag("--stream", o_.stream,
                    "nccl: queue the timed calls on a stream and wait once per size, as nccl-tests does");
    return bench;
  }
  int run(Context&) override {
    auto mn = parse_size(min_), mx = parse_size(max_);
    if (!mn.is_ok()) return report(mn.status());
    if (!mx.is_ok()) return report(mx.status());
    o_.min_bytes = mn.value();
    o_.max_bytes = mx.value();
    auto dt = parse_dtype(dtype_);
    if (!dt.is_ok()) return report(dt.status());
    auto op = comm::parse_op(op_);
    if (!op.is_ok()) return report(op.status());
    o_.dtype = dt.value();
    o_.op = op.value();
    if (!backend_.empty()) setenv("TIERTRAIN_COMM_BACKEND", backend_.c_str(), 1);
    auto comm = comm::world();
    if (!comm.is_ok()) return report(comm.status());
    if (Status s = comm::run_bench(*comm.value(), o_); !s.is_ok()) return report(s);
    return 0;
  }

 private:
  comm::BenchOptions o_;
  std::string min_ = "8", max_ = "64M", dtype_ = "f32", op_ = "sum", backend_;
};

}  // namespace

std::unique_ptr<Command> make_comm_bench_command() { return std::make_unique<CommBenchCommand>(); }

}  // namespace tt::cli
