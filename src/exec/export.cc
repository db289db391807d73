#include "exec/export.h"

#include <bit>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/tensorfile.h"
#include "exec/checkpoint.h"
#include "model/gpt.h"

namespace tt {

std::string nanogpt_name(const std::string& ours) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"wte", "transformer.wte.weight"}, {"wpe", "transformer.wpe.weight"},
      {"lnf.w", "transformer.ln_f.weight"}, {"lnf.b", "transformer.ln_f.bias"}};
  for (const auto& [a, b] : kTop)
    if (ours == a) return b;
  static const std::pair<const char*, const char*> kBlock[] = {
      {"ln1.w", "ln_1.weight"},          {"ln1.b", "ln_1.bias"},         {"attn.qkv.w", "attn.c_attn.weight"},
      {"attn.qkv.b", "attn.c_attn.bias"}, {"attn.proj.w", "attn.c_proj.weight"}, {"attn.proj.b", "attn.c_proj.bias"},
      {"ln2.w", "ln_2.weight"},          {"ln2.b", "ln_2.bias"},         {"mlp.fc.w", "mlp.c_fc.weight"},
      {"mlp.fc.b", "mlp.c_fc.bias"},     {"mlp.proj.w", "mlp.c_proj.weight"}, {"mlp.proj.b", "mlp.c_proj.bias"}};
  if (ours.rfind("h.", 0) == 0) {
    const size_t dot = ours.find('.', 2);
    if (dot != std::string::npos) {
      const std::string rest = ours.substr(dot + 1);
      for (const auto& [a, b] : kBlock)
        if (rest == a) return "transformer." + ours.substr(0, dot + 1) + b;
    }
  }
  return ours;  // not one of the GPT's: kept as it is
}

Result<ExportSummary> export_safetensors(const std::string& where, const std::string& out) {
  ExportSummary s;
  TT_ASSIGN_OR_RETURN(s.checkpoint, resolve_checkpoint(where));
  TT_ASSIGN_OR_RETURN(TensorFileReader r, TensorFileReader::open(s.checkpoint));
  TT_ASSIGN_OR_RETURN(CheckpointState st, checkpoint_state_from_meta(r.meta(), s.checkpoint));
  TT_RETURN_IF(st.dtype != DType::kF32, kUnimplemented, "%s: parameters in %s; export writes fp32 checkpoints",
               s.checkpoint.c_str(), dtype_name(st.dtype));
  const std::vector<ParamInfo> layout = gpt_param_layout(st.model);
  // The header first (its length fixes where the data starts), then the data in layout order.
  nlohmann::json header = nlohmann::json::object();
  int64_t at = 0;
  for (const ParamInfo& p : layout) {
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape.rank(); ++i) shape.push_back(p.shape[i]);
    const int64_t bytes = p.shape.numel() * 4;
    header[nanogpt_name(p.name)] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  header["__metadata__"] = {{"format", "pt"},
                            {"producer", "tiertrain export"},
                            {"layout", "nanoGPT (Linear weights [out, in]; lm_head tied to transformer.wte)"},
                            {"n_layer", std::to_string(st.model.layers)},
                            {"n_head", std::to_string(st.model.heads)},
                            {"n_embd", std::to_string(st.model.dim)},
                            {"block_size", std::to_string(st.model.seq)},
                            {"vocab_size", std::to_string(st.model.vocab)},
                            {"padded_vocab_size", std::to_string(st.model.padded_vocab())},
                            {"step", std::to_string(st.step)}};
  std::string head = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  head.append((8 - head.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string file(8 + head.size() + static_cast<size_t>(at), '\0');
  const uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::memcpy(file.data() + 8, head.data(), head.size());
  char* data = file.data() + 8 + head.size();
  for (const ParamInfo& p : layout) {
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape.rank(); ++i) shape.push_back(p.shape[i]);
    TT_TRY(r.read("param/" + p.name, DType::kF32, shape, data + p.offset * 4));
    ++s.tensors;
    s.params += p.shape.numel();
  }
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  TT_TRY(write_file_atomically(out, file));
  s.bytes = static_cast<int64_t>(file.size());
  return s;
}

}  // namespace tt
