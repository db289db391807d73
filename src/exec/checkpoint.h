// exec/checkpoint: everything needed to continue a run bit for bit (parameters, AdamW moments and step, data
// position, RNG state, configuration), in one .ttf file written atomically. docs/CHECKPOINTS.md describes the
// format; a resumed run checks that model shape, dtype and dataset match and names what differs.
//
//   TT_TRY(ensure_checkpoint_dir(dir));                        // before step 1: fail early, lose nothing
//   TT_TRY(save_checkpoint(dir, state, executor, keep));          // step_00000100.ttf + "latest"
//   TT_ASSIGN_OR_RETURN(std::string path, find_checkpoint(dir, "latest"));
//   TT_ASSIGN_OR_RETURN(CheckpointState st, load_checkpoint(path, expected, executor));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/sampler.h"
#include "comm/comm.h"
#include "exec/executor.h"
#include "model/model.h"

namespace tt {

struct CheckpointState {
  int64_t step = 0;  // optimizer steps completed
  data::SamplerState sampler;
  Rng::State rng{};
  ModelConfig model;
  DType dtype = DType::kF32;
  int batch = 0;
  int grad_accum = 1;  // micro-batches of `batch` a step (Note [gradient accumulation]): windows a step, with batch
  uint64_t seed = 0;
  std::string data_path;
  uint64_t data_fingerprint = 0;
  nlohmann::json config;  // the resolved knobs of the run that wrote it
  // load_checkpoint's `expected` only: the training split's tokens, against which the sampler's position is checked
  // (it must have drawn step x batch x grad_accum windows); 0: not checked.
  uint64_t train_tokens = 0;
};

// Creates dir if needed and proves it writable (creates and removes a probe file).
Status ensure_checkpoint_dir(const std::string& dir);

// The whole model's master parameters and AdamW moments in its single-device layout (ModelConfig::whole()), as a
// checkpoint holds them: with a sharded optimizer (Note [sharded optimizer] in exec/optimizer.h) every rank's shares
// gathered over `data_comm`, with a tensor-parallel model (Note [tensor parallel] in model/gpt.h) the shards gathered
// over `model_comm`, collectively (every rank of those dimensions calls it); else this executor's own.
// Note [checkpoints without copies]
// A checkpoint holds the whole model's master and AdamW moments (12 bytes a parameter in f32). Gathered into copies,
// they would need as much host memory again while the run's own state is held: an 8B Llama whose CPU optimizer keeps
// 90 GiB on a 128 GiB host could not save. Where the CPU optimizer holds them whole on the host, in the model's
// layout (one device, unsharded), the checkpoint is written straight from them, and a resume or --init-from reads
// straight into them (then sends the compute copies from the master, as at start). Elsewhere (the device optimizer,
// a sharded optimizer, tensor parallel) the state is copied out of the device or gathered from the ranks, as before.
struct WholeState {
  // The whole model's master and moments (master dtype): the CPU optimizer's host state itself, or own_*'s.
  const unsigned char *params = nullptr, *m = nullptr, *v = nullptr;
  size_t bytes = 0;  // of each
  std::vector<unsigned char> own_params, own_m, own_v;
  bool copied() const { return params == own_params.data(); }
};
Result<WholeState> gather_whole_state(Executor& ex, comm::Communicator* model_comm,
                                      comm::Communicator* data_comm = nullptr);

// A step's checkpoint file's name in its folder: step_00000042.ttf.
std::string checkpoint_file_name(int64_t step);

// Writes <dir>/step_<step>.ttf atomically, then points <dir>/latest at it (also atomically), then removes the
// oldest step_*.ttf beyond `keep`. `whole`: what gather_whole_state returned (required for a tensor-parallel model;
// else read from the executor).
Status save_checkpoint(const std::string& dir, const CheckpointState& state, Executor& ex, int64_t keep,
                       const WholeState* whole = nullptr);

// `resume` is "latest" (the file named by <dir>/latest, else the highest step_*.ttf) or a file path.
Result<std::string> find_checkpoint(const std::string& dir, const std::string& resume);

// A checkpoint file as given; a folder: a run folder's checkpoints/ or a checkpoint folder, its latest checkpoint.
Result<std::string> resolve_checkpoint(const std::string& where);
// The run state a checkpoint's metadata records, read strictly (issue 25): every field present, of its type and in
// its range, optimizer.step equal to step. Reads no tensor; `path` only names the file in errors.
Result<CheckpointState> checkpoint_state_from_meta(const nlohmann::json& meta, const std::string& path);

// Whether `st` (from checkpoint_state_from_meta) can continue the run described by `expected`: model shape, dtype and
// data fingerprint must match (kFailedPrecondition), the sampler must be where step x batch windows of the data leave
// it (kDataLoss, when expected.train_tokens is set); batch, seed, data path and knob differences are warnings.
Status check_checkpoint_continues(const CheckpointState& st, const CheckpointState& expected, const std::string& path);

// Checks the file against `expected` (model shape, dtype, data fingerprint must match; batch, seed and data path
// differences are reported as warnings), then loads parameters and optimizer state into the executor's model and
// optimizer. A tensor-parallel executor takes its shard of the whole tensors (Note [tensor parallel]).
Result<CheckpointState> load_checkpoint(const std::string& path, const CheckpointState& expected, Executor& ex,
                                        bool allow_nonfinite = false);
// Only the parameters of checkpoint `path` into the executor's model, for something that starts from them
// (--init-from: a new run on other data; sampling): the model's shape and master dtype must match (kFailedPrecondition,
// naming what differs); the optimizer state, data position and step are not read. Returns the checkpoint's state.
Result<CheckpointState> load_checkpoint_params(const std::string& path, Executor& ex, bool allow_nonfinite = false);

// Issue 47: a checkpoint's tensors hold finite values, and AdamW's second moments none below 0; the first element that
// does not is named (a diverged or damaged run's checkpoint would otherwise sample bytes 0xFF, evaluate to "loss nan"
// or export NaNs). The loads above check every tensor they read unless allow_nonfinite (--allow-nonfinite, for
// forensics). `n` values of `dtype` (f32, f64, bf16) at `data`.
Status check_finite_tensor(const std::string& path, const std::string& name, DType dtype, const void* data, size_t n,
                           bool nonnegative = false);

}  // namespace tt
