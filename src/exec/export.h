// exec/export: a checkpoint's parameters for other frameworks, as a safetensors file (the format of Hugging Face's
// safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
// then the raw little-endian data). Tensors carry nanoGPT's names and layout, which are ours (PyTorch Linear
// weights [out, in]; q, k, v stacked in c_attn; the token embedding padded to a multiple of 128 rows, tied to the LM
// head, so there is no lm_head.weight): `transformer.wte.weight`, `transformer.h.0.attn.c_attn.weight`, ...
// The header's __metadata__ holds the model's shape (n_layer, n_head, n_embd, block_size, vocab_size) and the step.
//
//   TT_ASSIGN_OR_RETURN(ExportSummary s, export_safetensors("runs/x", "model.safetensors"));
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace tt {

// nanoGPT's name of one of our parameters ("h.3.attn.qkv.w" -> "transformer.h.3.attn.c_attn.weight").
std::string nanogpt_name(const std::string& ours);

struct ExportSummary {
  std::string checkpoint;
  int64_t tensors = 0, params = 0, bytes = 0;
};
// The parameters of checkpoint `where` (a file, a checkpoint folder or a run folder), fp32, written atomically.
Result<ExportSummary> export_safetensors(const std::string& where, const std::string& out);

}  // namespace tt
