// data/sampler: which token windows make each training batch, deterministically from a seed, with a position that
// checkpoints store so a resumed run sees exactly the batches it would have seen.
//
// Epoch e cuts the training tokens into windows of T+1 tokens (inputs and shifted targets) starting at a random
// offset in [0, T), and visits them in a random order; both are drawn from (seed, e) alone. A batch is the next B
// windows of that order, continuing into epoch e+1 when e runs out. The state is (epoch, cursor).
//
// Validation windows are fixed: consecutive windows from the start of the validation split.
//
//   BatchSampler s(&ds.train(), B, T, seed);
//   s.next(tokens, targets);           // B*T int32 each
//   SamplerState pos = s.state();      // into the checkpoint
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "data/dataset.h"

namespace tt::data {

struct SamplerState {
  uint64_t epoch = 0;
  uint64_t cursor = 0;  // windows of the epoch already used
};

class BatchSampler {
 public:
  // Fails when the tokens cannot fill one window of T+1 tokens.
  static Result<BatchSampler> create(const Tokens* tokens, int batch, int seq, uint64_t seed);

  // The next batch: B*T int32 each. With shards > 1, only the windows of shard `shard` of it (B/shards of them, the
  // shard-th run of consecutive windows) are written, and the sampler moves past the whole batch, so that each rank
  // of a data-parallel mesh reads its part of the batch the single-device run would see (B divisible by shards).
  // A target the loss does not count is -1 (Note [loss mask] in data/dataset.h). Returns the targets that count in
  // the whole batch (every shard's: B*T without a mask).
  int64_t next(int32_t* inputs, int32_t* targets, int shard = 0, int shards = 1);
  // Moves past the next batch without reading it (a rank that receives its part from another); the same count.
  int64_t skip();
  // The targets that count in the next `batches` batches, without moving past them (Note [gradient accumulation]:
  // a step's later micro-batches). Within the epoch nothing is copied; across its end, a copy draws the next one.
  int64_t count_ahead(int batches) const;
  SamplerState state() const { return state_; }
  void set_state(SamplerState state);
  uint64_t windows_in_epoch() const { return static_cast<uint64_t>(order_.size()); }

 private:
  BatchSampler(const Tokens* tokens, int batch, int seq, uint64_t seed)
      : tokens_(tokens), batch_(batch), seq_(seq), seed_(seed) {}
  void start_epoch(uint64_t epoch);
  int64_t counted(uint64_t start) const;  // the targets that count in the window starting at `start`

  const Tokens* tokens_;
  int batch_, seq_;
  uint64_t seed_;
  SamplerState state_;
  uint64_t offset_ = 0;          // of this epoch's first window
  std::vector<uint32_t> order_;  // window indices in visiting order
};

// The windows a sampler over `tokens` tokens of the training split (with this seq and seed) has drawn when it is at
// `state`: every window of the epochs before it, then `cursor`. An error names what is impossible: a cursor past
// its epoch's windows, or more than `most` windows (an epoch out of range). What a checkpoint's sampler is checked
// against (exec/checkpoint.cc).
Result<uint64_t> windows_drawn(uint64_t tokens, int seq, uint64_t seed, SamplerState state, uint64_t most);

// Number of whole validation batches of B windows of T+1 tokens in `tokens`.
int64_t val_batches_available(const Tokens& tokens, int batch, int seq);
// Fills validation batch k (consecutive windows from the start), targets -1 where the loss does not count; returns
// the targets that count.
int64_t val_batch(const Tokens& tokens, int batch, int seq, int64_t k, int32_t* inputs, int32_t* targets);

}  // namespace tt::data
