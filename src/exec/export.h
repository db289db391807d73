// exec/export: a checkpoint's parameters for other frameworks, and weights from them. The format is safetensors (an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte range, then the raw
// little-endian data); the layout is Hugging Face's GPT-2 (`transformers`' GPT2LMHeadModel): names such as
// `transformer.h.0.attn.c_attn.weight`, the four projection matrices of a block stored [in, out] (GPT-2's Conv1D; ours
// are [out, in], as PyTorch's Linear), the token embedding with exactly vocab_size rows (ours are padded to a
// multiple of 128) and tied to the LM head (no lm_head.weight), GELU's tanh form, LayerNorm epsilon 1e-5.
//
//   TT_ASSIGN_OR_RETURN(ExportSummary s, export_gpt2("runs/x", "gpt2-out"));  // gpt2-out/model.safetensors, config.json
//   // python: GPT2LMHeadModel.from_pretrained("gpt2-out")
//   TT_TRY(import_gpt2("gpt2-out", executor));                                // --from-safetensors
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/model.h"

namespace tt {

class Executor;

// Hugging Face's GPT-2 name of one of our parameters ("h.3.attn.qkv.w" -> "transformer.h.3.attn.c_attn.weight"), and
// whether it is stored transposed there.
std::string gpt2_name(const std::string& ours, bool* transposed = nullptr);

struct ExportSummary {
  std::string checkpoint;
  std::string file;  // the .safetensors written
  int64_t tensors = 0, params = 0, bytes = 0;
};
// The parameters of checkpoint `where` (a file, a checkpoint folder or a run folder), fp32, as `out_dir`/
// model.safetensors with `out_dir`/config.json (GPT2Config's fields), both written atomically.
Result<ExportSummary> export_gpt2(const std::string& where, const std::string& out_dir);

// Reads GPT-2-layout weights (a .safetensors file, or a folder holding model.safetensors; F32, as export_gpt2
// writes and as GPT-2's published weights are) into the executor's model: every tensor of the model must be there
// with its shape (the token embedding with the model's vocabulary rows; the padding rows become 0). Names the first
// tensor that is missing or of another shape or dtype.
Status import_gpt2(const std::string& path, Executor& ex);

}  // namespace tt
