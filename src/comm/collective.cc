#include "comm/collective.h"

#include <string>

namespace tt::comm {

Args in_place_form(Kind k, int rank, int root, size_t n, DType d, const void* s, void* r) {
  if (s == kInPlace || s == nullptr || r == nullptr) return {s, r};
  const size_t own = static_cast<size_t>(rank) * n * dtype_size(d);
  switch (k) {
    case kAllreduce:
    case kBroadcast:
    case kReduce:
    case kScatter:
    case kAlltoall:
      if (s == r && (k != kScatter || rank == root)) return {kInPlace, r};
      break;
    case kAllgather:
    case kGather:
      if (s == static_cast<const char*>(r) + own && (k != kGather || rank == root)) return {kInPlace, r};
      break;
    case kReduceScatter:
      if (r == static_cast<const char*>(s) + own) return {kInPlace, const_cast<void*>(s)};
      break;
    default: break;
  }
  return {s, r};
}

void describe(int64_t* out, int64_t seq, int64_t kind, size_t count, DType d, Op op, int root, int64_t misuse) {
  const bool reduces = kind == kReduce || kind == kAllreduce || kind == kReduceScatter;
  out[0] = seq;
  out[1] = kind;
  out[2] = static_cast<int64_t>(count);
  out[3] = kind == kBarrier ? 0 : static_cast<int64_t>(d);
  out[4] = reduces ? static_cast<int64_t>(op) : 0;
  out[5] = is_rooted(kind) ? root : -1;
  out[6] = misuse;
}

Status compare_descriptions(const char* backend, const int64_t* all, int size, int rank, const int64_t* mine) {
  std::string misused, diffs;
  static const char* fields[] = {"collective #", "", "count ", "dtype ", "op ", "root "};
  for (int q = 0; q < size; ++q) {
    const int64_t* t = all + static_cast<size_t>(q) * kDescriptionWords;
    if (t[6] != kNoMisuse) misused += str_format("%srank %d %s", misused.empty() ? "" : "; ", q, misuse_text(t[6]));
    std::string dq;
    for (int f = 0; f < 6; ++f) {
      if (t[f] == mine[f]) continue;
      std::string v = std::to_string(t[f]);
      if (f == 1) v = kind_name(t[f]);
      if (f == 3) v = dtype_name(static_cast<DType>(t[f]));
      if (f == 4) v = op_name(static_cast<Op>(t[f]));
      dq += std::string(" ") + fields[f] + v;
    }
    if (!dq.empty()) diffs += str_format("; rank %d has%s", q, dq.c_str());
  }
  const char* kind = kind_name(mine[1]);
  if (!misused.empty())
    return make_status(StatusCode::kInvalidArgument, "%s #%lld (%s, rank %d of %d): %s", kind,
                       static_cast<long long>(mine[0]), backend, rank, size, misused.c_str());
  if (!diffs.empty())
    return make_status(StatusCode::kInvalidArgument,
                       "%s #%lld (%s, rank %d of %d): ranks disagree: this rank has %s count %lld dtype %s op %s root "
                       "%lld%s",
                       kind, static_cast<long long>(mine[0]), backend, rank, size, kind,
                       static_cast<long long>(mine[2]), dtype_name(static_cast<DType>(mine[3])),
                       op_name(static_cast<Op>(mine[4])), static_cast<long long>(mine[5]), diffs.c_str());
  return Status::ok();
}

}  // namespace tt::comm
