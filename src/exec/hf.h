// exec/hf: Hugging Face model folders, both ways, for every family (Note [Hugging Face layout] in model/model.h says
// how a family's parameters are stored there). A folder holds config.json and the weights as safetensors: one
// model.safetensors, or shards named by model.safetensors.index.json's weight_map. Safetensors is an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range, then the raw
// little-endian data; tiertrain reads F32, BF16 and F16 tensors and writes F32 or BF16.
//
//   TT_ASSIGN_OR_RETURN(ExportSummary s, export_hf("runs/x", "out", {}));  // out/config.json, out/model*.safetensors
//   // python: AutoModelForCausalLM.from_pretrained("out")
//   TT_ASSIGN_OR_RETURN(ModelConfig m, read_hf_config("meta-llama/Llama-3.2-1B", 2048));  // --from-safetensors
//   TT_TRY(import_hf("meta-llama/Llama-3.2-1B", executor));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace tt {

class Executor;

struct ExportSummary {
  std::string checkpoint;
  std::string dir;
  int files = 0;  // safetensors files written (more than one: with model.safetensors.index.json)
  int64_t tensors = 0, params = 0, bytes = 0;
};
struct ExportOptions {
  int64_t max_shard_bytes = 5'000'000'000;  // transformers' default "5GB"; a tensor larger than it is a shard alone
  DType dtype = DType::kF32;                // kF32 or kBF16
  bool allow_nonfinite = false;             // export a checkpoint holding NaN or infinity (check_finite_tensor)
};
// The parameters of checkpoint `where` (a file, a checkpoint folder or a run folder) in its family's Hugging Face
// layout into `out_dir`: config.json and the safetensors (sharded past max_shard_bytes, with the index), each written
// atomically.
Result<ExportSummary> export_hf(const std::string& where, const std::string& out_dir, const ExportOptions& options);

// What write_hf_folder writes for each of the model's parameters (ParamInfo: our layout's name and shape): its f32
// values into `dst` (shape.numel() of them).
using HfParamSource = std::function<Status(const ParamInfo& param, float* dst)>;
// The tensors `read` gives, in cfg's family's Hugging Face layout, into `out_dir` as export_hf writes them (config.json,
// the safetensors sharded past max_shard_bytes, the index); `producer` and `metadata` go into each file's
// __metadata__. export_hf's parameters, or `tiertrain eval --grads-out`'s gradients (laid out as the parameters).
Result<ExportSummary> write_hf_folder(const ModelConfig& cfg, const HfParamSource& read, const std::string& out_dir,
                                      const ExportOptions& options, const std::string& producer,
                                      const std::map<std::string, std::string>& metadata = {});

// The model a Hugging Face folder's config.json describes, for training on sequences of `seq`; nullopt when the
// folder (or file) has no config.json (then the weights must be in the layout of the model the run configures).
Result<std::optional<ModelConfig>> read_hf_config(const std::string& path, int seq);

// One tensor of a safetensors file, as its header says: its file, dtype (kF32, kBF16 or kF16), shape and bytes.
struct SafetensorsEntry {
  std::string file;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, bytes = 0;  // in the file
};
// Every tensor of a folder (model.safetensors, or the shards model.safetensors.index.json names, each a file of the
// folder) or of one .safetensors file, every header checked whole: the dtypes, the shapes, each tensor's bytes within
// its file's data and none overlapping another, the index's shards in the folder and holding what it says.
Result<std::map<std::string, SafetensorsEntry>> read_safetensors(const std::string& path);

// Reads the weights of a folder (or one .safetensors file) into the executor's model (a tensor-parallel rank takes its
// shard of them): every tensor of the family's layout must be there with its shape; the vocabulary's padding rows
// become 0. Names the first tensor that is missing or malformed, and the file.
Status import_hf(const std::string& path, Executor& ex);

}  // namespace tt
