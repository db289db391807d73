// exec/op_profiler: the run's timeline. Time per op on the compute stream (--profile) from events recorded between
// ops, and spans of the copies on the h2d and d2h streams; with tracing on (--trace) every op and copy is kept with
// its start and end on one clock, for a Chrome/Perfetto trace with one track per stream. Nothing synchronises until
// collect(); when off, marks cost nothing, and when on each op costs one event record.
//
//   OpProfiler prof(backend);
//   prof.mark("attention_forward"); backend.attention_forward(...);   // compute-stream op
//   int c = prof.span_begin(be.d2h_stream(), "swap_out h.3", bytes);   // a copy, on its own stream
//   be.copy_d2h(...); prof.span_end(be.d2h_stream(), c);
//   TT_TRY(prof.collect());   // ends the last op, waits, adds to the totals (and to the trace)
//
// Ops whose names start with "wait " are the compute stream waiting for a copy: their time is the exposed (not
// overlapped) transfer time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tt {

class OpProfiler {
 public:
  enum Track : int { kCompute = 0, kH2D = 1, kD2H = 2, kHost = 3 };
  struct Span {
    int track;
    std::string name;
    double start_ms, end_ms;  // from the first event of the run
    int64_t bytes;            // copies; 0 for compute ops
    int64_t step;
  };
  // Bytes and times of the copies, and the compute stream's time waiting for them, over the collected steps.
  struct Transfers {
    int64_t h2d_bytes = 0, d2h_bytes = 0;
    double h2d_ms = 0, d2h_ms = 0, exposed_ms = 0;
  };

  explicit OpProfiler(Backend& backend) : be_(backend) {}
  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }
  // Keep every span for trace() (memory grows with the run).
  void set_tracing(bool on) { tracing_ = on; }

  // Starts op `name` (and ends the previous one) on the compute stream.
  void mark(const char* name);
  // A copy on the h2d or d2h stream, or host work on the host stream: events before and after it on that stream.
  // Returns -1 when disabled.
  int span_begin(Stream& stream, const char* name, int64_t bytes);
  void span_end(Stream& stream, int id);
  // Ends the last op, waits for the compute stream's events, adds the ops' durations to the totals and the step's
  // spans to the trace. The copies and host work of a step are resolved one collect() later (or by flush()), so
  // that collecting never waits for work that may overlap the next step (a CPU optimizer's update).
  Status collect(int64_t step = 0);
  // Resolves the copies still outstanding (before reading totals, transfers or the trace).
  Status flush();

  const std::map<std::string, double>& totals_ms() const { return totals_; }
  const Transfers& transfers() const { return transfers_; }
  int steps() const { return steps_; }
  const std::vector<Span>& spans() const { return spans_; }
  // Writes the spans as a Chrome trace (chrome://tracing, ui.perfetto.dev): one track per stream, one span per step.
  Status write_trace(const std::string& path, const std::string& process_name) const;

 private:
  struct Copy {
    std::unique_ptr<Event> begin, end;
    const char* name = nullptr;
    int track = kH2D;
    int64_t bytes = 0;
    int64_t step = 0;
  };
  Result<double> since_origin(Event& e);
  Status resolve(std::vector<Copy>& copies, size_t used);

  Backend& be_;
  bool enabled_ = false;
  bool tracing_ = false;
  std::unique_ptr<Event> origin_;               // recorded once, on the compute stream, at the first mark
  std::vector<std::unique_ptr<Event>> events_;  // reused from step to step
  std::vector<const char*> names_;
  size_t used_ = 0;
  std::vector<Copy> copies_;   // this step's (reused from step to step)
  size_t copies_used_ = 0;
  std::vector<Copy> pending_;  // the previous step's, resolved at the next collect()
  size_t pending_used_ = 0;
  std::map<std::string, double> totals_;
  Transfers transfers_;
  std::vector<Span> spans_;
  int steps_ = 0;
};

}  // namespace tt
