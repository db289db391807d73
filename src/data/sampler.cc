#include "data/sampler.h"

#include <numeric>

#include "core/check.h"
#include "core/rng.h"

namespace tt::data {

Result<BatchSampler> BatchSampler::create(const Tokens* tokens, int batch, int seq, uint64_t seed) {
  TT_RETURN_IF(batch < 1 || seq < 1, kInvalidArgument, "batch %d and seq %d must be >= 1", batch, seq);
  TT_RETURN_IF(tokens->size() < static_cast<size_t>(2 * seq + 1), kFailedPrecondition,
               "the training split has %zu tokens, too few for windows of --seq %d (need at least %d)",
               tokens->size(), seq, 2 * seq + 1);
  TT_RETURN_IF(tokens->size() / static_cast<size_t>(seq) > UINT32_MAX, kInvalidArgument,
               "the training split has too many windows (%zu) for 32-bit indices", tokens->size() / seq);
  BatchSampler s(tokens, batch, seq, seed);
  s.start_epoch(0);
  return s;
}

namespace {

// An epoch's random generator, seeded from the run's seed and the epoch.
Rng epoch_rng(uint64_t seed, uint64_t epoch) { return Rng(seed ^ (0x9e3779b97f4a7c15ull * (epoch + 1))); }

}  // namespace

Result<uint64_t> windows_drawn(uint64_t tokens, int seq, uint64_t seed, SamplerState state, uint64_t most) {
  TT_RETURN_IF(seq < 1 || tokens < static_cast<uint64_t>(2 * seq + 1), kInvalidArgument,
               "%llu tokens cannot fill windows of seq %d", static_cast<unsigned long long>(tokens), seq);
  // Every epoch has at least this many windows (its offset is below seq).
  const uint64_t least = (tokens - static_cast<uint64_t>(seq)) / static_cast<uint64_t>(seq);
  TT_RETURN_IF(state.epoch > most / least, kDataLoss,
               "sampler epoch %llu is beyond the %llu windows drawn so far (at least %llu an epoch)",
               static_cast<unsigned long long>(state.epoch), static_cast<unsigned long long>(most),
               static_cast<unsigned long long>(least));
  auto windows = [&](uint64_t epoch) {
    Rng rng = epoch_rng(seed, epoch);
    const uint64_t offset = rng.uniform_int(static_cast<uint64_t>(seq));
    return (tokens - 1 - offset) / static_cast<uint64_t>(seq);
  };
  uint64_t drawn = 0;
  for (uint64_t e = 0; e < state.epoch; ++e) drawn += windows(e);
  const uint64_t n = windows(state.epoch);
  TT_RETURN_IF(state.cursor > n, kDataLoss, "sampler cursor %llu is past the %llu windows of epoch %llu",
               static_cast<unsigned long long>(state.cursor), static_cast<unsigned long long>(n),
               static_cast<unsigned long long>(state.epoch));
  return drawn + state.cursor;
}

void BatchSampler::start_epoch(uint64_t epoch) {
  Rng rng = epoch_rng(seed_, epoch);
  offset_ = rng.uniform_int(static_cast<uint64_t>(seq_));
  const uint64_t n = (tokens_->size() - 1 - offset_) / static_cast<uint64_t>(seq_);
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0u);
  for (uint64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[rng.uniform_int(i + 1)]);
  state_.epoch = epoch;
  state_.cursor = 0;
}

void BatchSampler::set_state(SamplerState state) {
  start_epoch(state.epoch);
  state_.cursor = state.cursor;
}

int64_t BatchSampler::next(int32_t* inputs, int32_t* targets, int shard, int shards) {
  TT_CHECK(shards >= 1 && shard >= 0 && shard < shards && batch_ % shards == 0,
           "shard %d of %d of a batch of %d", shard, shards, batch_);
  const int local = batch_ / shards, first = shard * local;
  const Tokens& src = *tokens_;
  int64_t count = 0;
  for (int b = 0; b < batch_; ++b) {
    if (state_.cursor >= order_.size()) start_epoch(state_.epoch + 1);
    const uint64_t start = offset_ + static_cast<uint64_t>(order_[state_.cursor++]) * static_cast<uint64_t>(seq_);
    count += counted(start);
    if (b < first || b >= first + local) continue;  // another shard's window: drawn, not read
    const int row = b - first;
    for (int t = 0; t < seq_; ++t) {
      const uint64_t at = start + static_cast<uint64_t>(t);
      inputs[row * seq_ + t] = src[at];
      targets[row * seq_ + t] = src.counts(at + 1) ? src[at + 1] : -1;  // Note [loss mask]
    }
  }
  return count;
}

int64_t BatchSampler::skip() {
  int64_t count = 0;
  for (int b = 0; b < batch_; ++b) {
    if (state_.cursor >= order_.size()) start_epoch(state_.epoch + 1);
    count += counted(offset_ + static_cast<uint64_t>(order_[state_.cursor++]) * static_cast<uint64_t>(seq_));
  }
  return count;
}

int64_t BatchSampler::count_ahead(int batches) const {
  const uint64_t windows = static_cast<uint64_t>(batches) * static_cast<uint64_t>(batch_);
  if (state_.cursor + windows > order_.size()) {  // into the next epoch: its order is drawn on a copy
    BatchSampler ahead = *this;
    int64_t n = 0;
    for (int b = 0; b < batches; ++b) n += ahead.skip();
    return n;
  }
  int64_t n = 0;
  for (uint64_t w = 0; w < windows; ++w)
    n += counted(offset_ + static_cast<uint64_t>(order_[state_.cursor + w]) * static_cast<uint64_t>(seq_));
  return n;
}

int64_t BatchSampler::counted(uint64_t start) const {
  if (!tokens_->masked()) return seq_;
  int64_t n = 0;
  for (int t = 1; t <= seq_; ++t) n += tokens_->counts(start + static_cast<uint64_t>(t)) ? 1 : 0;
  return n;
}

int64_t val_batches_available(const Tokens& tokens, int batch, int seq) {
  if (tokens.size() < 2) return 0;
  const int64_t windows = static_cast<int64_t>((tokens.size() - 1) / static_cast<size_t>(seq));
  return windows / batch;
}

int64_t val_batch(const Tokens& tokens, int batch, int seq, int64_t k, int32_t* inputs, int32_t* targets) {
  int64_t count = 0;
  for (int b = 0; b < batch; ++b) {
    const size_t at = static_cast<size_t>((k * batch + b) * static_cast<int64_t>(seq));
    for (int t = 0; t < seq; ++t) {
      const size_t i = at + static_cast<size_t>(t);
      inputs[b * seq + t] = tokens[i];
      const bool counts = tokens.counts(i + 1);  // Note [loss mask]
      targets[b * seq + t] = counts ? tokens[i + 1] : -1;
      count += counts ? 1 : 0;
    }
  }
  return count;
}

}  // namespace tt::data
