// comm/shm_rounds: the round protocol of the shm backend (Note [shm rounds], Note [arrival line], Note [arrival
// tree], Note [rooted rounds]): checking the peers' descriptions, arriving through the tree, freeing a half.
#include "comm/shm_internal.h"

namespace tt::comm {
namespace shm_detail {

Status ShmComm::check_metas(int only) {
  const auto checked = [&](int r) { return r != rank_ && (only < 0 || r == only); };
  if (cur_.misuse == kNoMisuse) {
    const int64_t packed = pack_description(cur_);
    bool same = true;
    for (int r = 0; r < size_ && same; ++r)
      if (checked(r)) same = describes(hdr(r)->arrived, cur_, packed);
    if (same) return Status::ok();
  }
  std::string misuse;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && !checked(r)) continue;
    const int32_t m = r == rank_ ? cur_.misuse : hdr(r)->meta[half_].misuse;
    if (m != kNoMisuse) misuse += str_format("%srank %d %s", misuse.empty() ? "" : "; ", r, misuse_text(m));
  }
  if (!misuse.empty())
    return fail(make_status(StatusCode::kInvalidArgument, "%s #%lld (rank %d of %d, root %d): %s",
                            kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_, cur_.root,
                            misuse.c_str()));
  std::string diffs;
  for (int r = 0; r < size_; ++r) {
    if (!checked(r)) continue;
    const Meta& m = hdr(r)->meta[half_];
    std::string d;
    if (m.seq != cur_.seq) d += str_format(" collective #%lld", static_cast<long long>(m.seq));
    if (m.kind != cur_.kind) d += str_format(" %s", kind_name(m.kind));
    if (m.count != cur_.count) d += str_format(" count %llu", static_cast<unsigned long long>(m.count));
    if (m.dtype != cur_.dtype) d += str_format(" dtype %s", dtype_name(static_cast<DType>(m.dtype)));
    if (m.op != cur_.op && cur_.kind != kBarrier) d += str_format(" op %s", op_name(static_cast<Op>(m.op)));
    if (m.root != cur_.root) d += str_format(" root %d", m.root);
    if (!d.empty()) diffs += str_format("; rank %d has%s", r, d.c_str());
  }
  if (diffs.empty()) return Status::ok();
  return fail(make_status(StatusCode::kInvalidArgument,
                          "%s #%lld (rank %d of %d): ranks disagree: this rank has %s count %llu dtype %s op %s root "
                          "%d%s",
                          kind_name(cur_.kind), static_cast<long long>(cur_.seq), rank_, size_, kind_name(cur_.kind),
                          static_cast<unsigned long long>(cur_.count), dtype_name(static_cast<DType>(cur_.dtype)),
                          op_name(static_cast<Op>(cur_.op)), cur_.root, diffs.c_str()));
}

Status ShmComm::arrive_tree(int64_t r) {
  const int lead = leader_of(rank_), end = std::min(size_, lead + group_);
  if (rank_ == lead) {
    TT_TRY(wait_for(&Header::arrived, r, "waiting for the ranks of this group to arrive",
                    [&](int q) { return q > lead && q < end; }, true));
    const int64_t packed = pack_description(cur_);
    bool ok = cur_.misuse == kNoMisuse;
    for (int q = lead + 1; q < end && ok; ++q) ok = describes(hdr(q)->arrived, cur_, packed);
    Arrival& g = hdr(rank_)->group;
    g.ok.store(ok ? 1 : 0, std::memory_order_relaxed);
    publish(g, cur_, packed, r);
  }
  return wait_for(&Header::group, r, "waiting for the ranks to arrive", [&](int q) { return q % group_ == 0; }, true);
}

Status ShmComm::check_tree() {
  if (cur_.misuse == kNoMisuse) {
    const int64_t packed = pack_description(cur_);
    bool same = true;
    for (int q = 0; q < size_ && same; q += group_) {
      const Arrival& g = hdr(q)->group;
      same = g.ok.load(std::memory_order_relaxed) == 1 && describes(g, cur_, packed);
    }
    if (same) return Status::ok();
  }
  return check_metas();  // every rank's line, and the exact message where they differ
}

Status ShmComm::free_half() {
  const HalfUse u = use_[half_];
  const int64_t done = u.round + 1;  // a reader is done with round u.round once it has arrived at the next
  if (u.round == 0 || size_ == 1 || seen_all_ >= done) return Status::ok();
  if (u.reader >= 0) {
    if (u.reader == hub_seen_ && seen_hub_ >= done) return Status::ok();  // (a loop of one root's rounds)
    return wait_all(&Header::arrived, done, "waiting for the root to finish the round before", u.reader);
  }
  TT_TRY(wait_all(&Header::arrived, done, "waiting for the ranks to finish the round before"));
  seen_all_ = done;
  return Status::ok();
}


}  // namespace shm_detail
}  // namespace tt::comm
