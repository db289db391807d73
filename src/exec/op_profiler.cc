#include "exec/op_profiler.h"

#include "core/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tt {

void OpProfiler::mark(const char* name) {
  if (!enabled_) return;
  if (!origin_) {
    origin_ = be_.create_event(/*timing=*/true);
    be_.compute_stream().record(*origin_);
  }
  if (used_ == events_.size()) {
    events_.push_back(be_.create_event(/*timing=*/true));
    names_.push_back(nullptr);
  }
  be_.compute_stream().record(*events_[used_]);
  names_[used_] = name;
  ++used_;
}

int OpProfiler::span_begin(Stream& stream, const char* name, int64_t bytes) {
  if (!enabled_) return -1;
  if (!origin_) mark("(start)");
  if (copies_used_ == copies_.size()) {
    Copy c;
    c.begin = be_.create_event(true);
    c.end = be_.create_event(true);
    copies_.push_back(std::move(c));
  }
  Copy& c = copies_[copies_used_];
  c.name = name;
  c.track = &stream == &be_.d2h_stream() ? kD2H : &stream == &be_.host_stream() ? kHost : kH2D;
  c.bytes = bytes;
  stream.record(*c.begin);
  return static_cast<int>(copies_used_++);
}

void OpProfiler::span_end(Stream& stream, int id) {
  if (id < 0) return;
  stream.record(*copies_[static_cast<size_t>(id)].end);
}

Result<double> OpProfiler::since_origin(Event& e) { return e.elapsed_ms_since(*origin_); }

Status OpProfiler::resolve(std::vector<Copy>& copies, size_t used) {
  for (size_t i = 0; i < used; ++i) {
    Copy& c = copies[i];
    TT_ASSIGN_OR_RETURN(double ms, c.end->elapsed_ms_since(*c.begin));
    if (c.track != kHost) {
      (c.track == kD2H ? transfers_.d2h_bytes : transfers_.h2d_bytes) += c.bytes;
      (c.track == kD2H ? transfers_.d2h_ms : transfers_.h2d_ms) += ms;
    }
    if (tracing_) {
      TT_ASSIGN_OR_RETURN(double t0, since_origin(*c.begin));
      spans_.push_back(Span{c.track, c.name, t0, t0 + ms, c.bytes, c.step});
    }
  }
  return Status::ok();
}

Status OpProfiler::flush() {
  TT_TRY(resolve(pending_, pending_used_));
  pending_used_ = 0;
  return Status::ok();
}

Status OpProfiler::collect(int64_t step) {
  if (!enabled_ || (used_ == 0 && copies_used_ == 0)) return Status::ok();
  mark("(end)");
  for (size_t i = 0; i + 1 < used_; ++i) {
    TT_ASSIGN_OR_RETURN(double ms, events_[i + 1]->elapsed_ms_since(*events_[i]));
    totals_[names_[i]] += ms;
    if (std::strncmp(names_[i], "wait ", 5) == 0) transfers_.exposed_ms += ms;
    if (tracing_) {
      TT_ASSIGN_OR_RETURN(double t0, since_origin(*events_[i]));
      spans_.push_back(Span{kCompute, names_[i], t0, t0 + ms, 0, step});
    }
  }
  // The previous step's copies (done by now, normally), then this step's wait for the next collect().
  TT_TRY(flush());
  for (size_t i = 0; i < copies_used_; ++i) copies_[i].step = step;
  std::swap(copies_, pending_);
  pending_used_ = copies_used_;
  if (tracing_ && used_ > 1) {
    TT_ASSIGN_OR_RETURN(double t0, since_origin(*events_[0]));
    TT_ASSIGN_OR_RETURN(double t1, since_origin(*events_[used_ - 1]));
    spans_.push_back(Span{-1, "step " + std::to_string(step), t0, t1, 0, step});
  }
  used_ = 0;
  copies_used_ = 0;
  ++steps_;
  return Status::ok();
}

Status OpProfiler::write_trace(const std::string& path, const std::string& process_name) const {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", process_name}}}});
  // Tracks: steps (0), compute (1), h2d (2), d2h (3), host work such as the CPU optimizer (4).
  const char* tracks[] = {"steps", "compute stream", "h2d stream (host -> device copies)",
                          "d2h stream (device -> host copies)", "host stream (CPU optimizer)"};
  for (int t = 0; t < 5; ++t) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", t}, {"args", {{"name", tracks[t]}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 1}, {"tid", t}, {"args", {{"sort_index", t}}}});
  }
  for (const Span& s : spans_) {
    json e = {{"ph", "X"}, {"pid", 1}, {"tid", s.track + 1}, {"name", s.name},
              {"ts", s.start_ms * 1e3}, {"dur", (s.end_ms - s.start_ms) * 1e3}};
    json args = {{"step", s.step}};
    if (s.bytes > 0) {
      args["bytes"] = s.bytes;
      const double ms = s.end_ms - s.start_ms;
      if (ms > 0) args["GB/s"] = static_cast<double>(s.bytes) / (ms * 1e6);
    }
    e["args"] = args;
    events.push_back(std::move(e));
  }
  return write_file_atomically(
      path, json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(-1, ' ', false, json::error_handler_t::replace) +
                "\n");
}

}  // namespace tt
