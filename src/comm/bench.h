// comm/bench: `tiertrain comm-bench`, the collectives' benchmark in nccl-tests' format, run in every rank of a job
// (tiertrain launch -n N -- tiertrain comm-bench ...):
//
//   #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//
// for out-of-place, then in-place. size is the bytes of the largest buffer (nccl-tests' convention: the gathered
// buffer of allgather, the scattered one of reduce_scatter), count its elements; time is the mean over ranks of each
// rank's mean time per operation; algbw = size / time; busbw = algbw x nccl-tests' factor (allreduce 2(n-1)/n;
// allgather, reduce_scatter, alltoall, gather, scatter (n-1)/n; broadcast, reduce 1); #wrong counts the elements
// that differ from the expected result over all ranks in `check` checked runs (-1: not checked).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "comm/comm.h"

namespace tt::comm {

struct BenchOptions {
  std::string collective = "allreduce";  // allreduce broadcast reduce allgather gather scatter reduce_scatter alltoall
  DType dtype = DType::kF32;
  Op op = Op::kSum;
  int root = 0;
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2.0;  // sizes multiply by this
  int iters = 20, warmup = 5, check = 1;
  // Untimed calls go on after the warmup ones until they have taken this long on every rank (the same number of
  // calls everywhere: the ranks agree on it).
  double warmup_ms = 0;
  // warmup_ms for the run's first row (0: the same): a process's first few hundred ms of collectives can be slower
  // than the rest on a virtual machine.
  double first_warmup_ms = 0;
  // Time at least as many calls as take this long at the warm-up's pace (the ranks agree; not fewer than iters).
  double min_ms = 0;
  bool vary = false;    // new data in the send buffer before every operation (not timed), as in real use
  // nccl: queue the timed calls on a stream and wait once at the end (as nccl-tests times), instead of a blocking
  // call each
  bool stream = false;
  std::string json;     // rank 0 writes the rows here
};

// Runs the sweep over `comm`; rank 0 prints the table to stdout.
Status run_bench(Communicator& comm, const BenchOptions& options);

// The warm-up comm-bench runs before each row, for the reference benchmarks to time alike (bench/mpi_raw_bench):
// `warmup` calls, then rounds of more, as many on every rank (max_over_ranks agrees on each round's count; a first
// round of one call where there is no pace yet), until every rank has spent warm_ms in them; drain() after each
// batch (queued calls are done when it returns). Every branch that leads to a collective depends only on values all
// ranks share.
struct WarmUp {
  double pace = 0;   // this rank's seconds per call over the rounds (over the `warmup` calls if none; 0 without calls)
  double calls = 0;  // calls made, rounds of them, and seconds taken
  int rounds = 0;
  double secs = 0;
};
using MaxOverRanks = std::function<Status(double*)>;
Result<WarmUp> warm_up(const std::function<Status()>& call, const std::function<Status()>& drain, int warmup,
                       double warm_ms, const MaxOverRanks& max_over_ranks);
// How many calls to time: iters, or (min_ms > 0) as many as take min_ms at `pace` on every rank (each rank's count
// from its own pace, the largest agreed: the fastest rank's), at most 1e6.
Result<int64_t> timed_calls(int iters, double min_ms, double pace, const MaxOverRanks& max_over_ranks);

}  // namespace tt::comm
