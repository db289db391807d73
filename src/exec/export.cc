#include "exec/export.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/tensorfile.h"
#include "exec/checkpoint.h"
#include "exec/executor.h"

namespace tt {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

std::string gpt2_name(const std::string& ours, bool* transposed) {
  if (transposed) *transposed = false;
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
        if (rest == a) {
          // GPT-2's Conv1D keeps its weight [in, out].
          if (transposed) *transposed = rest.size() > 2 && rest.compare(rest.size() - 2, 2, ".w") == 0 &&
                                        rest.rfind("ln", 0) != 0;
          return "transformer." + ours.substr(0, dot + 1) + b;
        }
    }
  }
  return ours;  // not one of the GPT's: kept as it is
}

namespace {

// Our parameter as GPT-2 stores it: its shape there, and its values from ours (rows of wte beyond vocab dropped,
// Conv1D weights transposed).
struct Gpt2Tensor {
  std::string name;
  std::vector<int64_t> shape;  // GPT-2's
  bool transposed = false;
  int64_t rows = 0, cols = 0;  // ours, the first `rows` of which are kept (wte: vocab of padded_vocab)
};

Gpt2Tensor gpt2_tensor(const ParamInfo& p, const ModelConfig& cfg) {
  Gpt2Tensor t;
  t.name = gpt2_name(p.name, &t.transposed);
  t.rows = p.shape[0];
  t.cols = p.shape.rank() > 1 ? p.shape[1] : 1;
  if (p.name == "wte") t.rows = cfg.vocab;
  if (p.shape.rank() == 1) t.shape = {t.rows};
  else t.shape = t.transposed ? std::vector<int64_t>{t.cols, t.rows} : std::vector<int64_t>{t.rows, t.cols};
  return t;
}

}  // namespace

Result<ExportSummary> export_gpt2(const std::string& where, const std::string& out_dir) {
  ExportSummary s;
  TT_ASSIGN_OR_RETURN(s.checkpoint, resolve_checkpoint(where));
  TT_ASSIGN_OR_RETURN(TensorFileReader r, TensorFileReader::open(s.checkpoint));
  TT_ASSIGN_OR_RETURN(CheckpointState st, checkpoint_state_from_meta(r.meta(), s.checkpoint));
  TT_RETURN_IF(st.dtype != DType::kF32, kUnimplemented, "%s: parameters in %s; export writes fp32 checkpoints",
               s.checkpoint.c_str(), dtype_name(st.dtype));
  const ModelConfig& cfg = st.model;
  TT_RETURN_IF(cfg.family != "gpt2", kUnimplemented,
               "%s: a %s model; export writes the gpt2 family's Hugging Face layout only so far", s.checkpoint.c_str(),
               cfg.family.c_str());
  const std::vector<ParamInfo> layout = model_param_layout(cfg);
  // The header first (its length fixes where the data starts), then the data in layout order.
  nlohmann::json header = nlohmann::json::object();
  std::vector<Gpt2Tensor> tensors;
  int64_t at = 0;
  for (const ParamInfo& p : layout) {
    tensors.push_back(gpt2_tensor(p, cfg));
    const Gpt2Tensor& t = tensors.back();
    const int64_t bytes = t.rows * t.cols * 4;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  header["__metadata__"] = {{"format", "pt"},
                            {"producer", "tiertrain export"},
                            {"checkpoint_step", std::to_string(st.step)}};
  std::string head = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  head.append((8 - head.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string file(8 + head.size() + static_cast<size_t>(at), '\0');
  const uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::memcpy(file.data() + 8, head.data(), head.size());
  char* data = file.data() + 8 + head.size();
  std::vector<float> ours;
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamInfo& p = layout[i];
    const Gpt2Tensor& t = tensors[i];
    std::vector<int64_t> shape;
    for (int d = 0; d < p.shape.rank(); ++d) shape.push_back(p.shape[d]);
    ours.resize(static_cast<size_t>(p.shape.numel()));
    TT_TRY(r.read("param/" + p.name, DType::kF32, shape, ours.data()));
    float* out = reinterpret_cast<float*>(data + header[t.name]["data_offsets"][0].get<int64_t>());
    if (t.transposed) {
      for (int64_t a = 0; a < t.rows; ++a)
        for (int64_t b = 0; b < t.cols; ++b) out[b * t.rows + a] = ours[static_cast<size_t>(a * t.cols + b)];
    } else {
      std::memcpy(out, ours.data(), static_cast<size_t>(t.rows * t.cols) * 4);
    }
    ++s.tensors;
    s.params += t.rows * t.cols;
  }
  const nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}},
                                 {"model_type", "gpt2"},
                                 {"vocab_size", cfg.vocab},
                                 {"n_positions", cfg.seq},
                                 {"n_ctx", cfg.seq},
                                 {"n_embd", cfg.dim},
                                 {"n_layer", cfg.layers},
                                 {"n_head", cfg.heads},
                                 {"n_inner", nullptr},
                                 {"activation_function", "gelu_new"},
                                 {"layer_norm_epsilon", 1e-5},
                                 {"resid_pdrop", 0.0},
                                 {"embd_pdrop", 0.0},
                                 {"attn_pdrop", 0.0},
                                 {"scale_attn_weights", true},
                                 {"tie_word_embeddings", true},
                                 {"bos_token_id", cfg.vocab > 256 ? 50256 : 0},
                                 {"eos_token_id", cfg.vocab > 256 ? 50256 : 0},
                                 {"torch_dtype", "float32"}};
  TT_TRY(make_directories(out_dir, "export folder (--out)"));
  s.file = out_dir + "/model.safetensors";
  TT_TRY(write_file_atomically(s.file, file));
  TT_TRY(write_file_atomically(out_dir + "/config.json", config.dump(2) + "\n"));
  s.bytes = static_cast<int64_t>(file.size());
  return s;
}

Status import_gpt2(const std::string& path, Executor& ex) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/model.safetensors" : path;
  std::ifstream in(file, std::ios::binary);
  TT_RETURN_IF(!in, kNotFound, "--from-safetensors %s: cannot open (%s)", file.c_str(), std::strerror(errno));
  const uint64_t size = std::filesystem::file_size(file, ec);
  TT_RETURN_IF(ec, kIoError, "--from-safetensors %s: %s", file.c_str(), ec.message().c_str());
  unsigned char len[8] = {};
  TT_RETURN_IF(size < 8 || !in.read(reinterpret_cast<char*>(len), 8), kDataLoss,
               "--from-safetensors %s: not a safetensors file (%llu bytes)", file.c_str(),
               static_cast<unsigned long long>(size));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  TT_RETURN_IF(n > size - 8 || n > (uint64_t(100) << 20), kDataLoss,
               "--from-safetensors %s: a header of %llu bytes in a file of %llu", file.c_str(),
               static_cast<unsigned long long>(n), static_cast<unsigned long long>(size));
  std::string text(n, '\0');
  TT_RETURN_IF(!in.read(text.data(), static_cast<std::streamsize>(n)), kIoError, "--from-safetensors %s: read failed",
               file.c_str());
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, false);
  TT_RETURN_IF(!header.is_object(), kDataLoss, "--from-safetensors %s: the header is not a JSON object", file.c_str());
  const uint64_t data_at = 8 + n, data_bytes = size - data_at;

  const Model& gpt = ex.model();
  const ModelConfig& cfg = gpt.config();
  TT_RETURN_IF(gpt.master_dtype() != DType::kF32, kUnimplemented, "--from-safetensors: an fp32 master only");
  TT_RETURN_IF(cfg.family != "gpt2", kUnimplemented,
               "--from-safetensors: a %s model; the gpt2 family's Hugging Face layout is read so far", cfg.family.c_str());
  std::vector<float> params(static_cast<size_t>(gpt.num_params()), 0.0f);
  std::vector<float> theirs;
  for (const ParamInfo& p : gpt.params()) {
    Gpt2Tensor t = gpt2_tensor(p, cfg);
    // GPT2LMHeadModel's files name them transformer.*; GPT2Model's (GPT-2's published weights) without the prefix.
    if (!header.contains(t.name) && t.name.rfind("transformer.", 0) == 0 && header.contains(t.name.substr(12)))
      t.name = t.name.substr(12);
    TT_RETURN_IF(!header.contains(t.name), kNotFound, "--from-safetensors %s: no tensor %s (the model's %s)",
                 file.c_str(), t.name.c_str(), p.name.c_str());
    const nlohmann::json& e = header[t.name];
    TT_RETURN_IF(!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"),
                 kDataLoss, "--from-safetensors %s: %s: needs dtype, shape and data_offsets", file.c_str(),
                 t.name.c_str());
    TT_RETURN_IF(e["dtype"] != "F32", kUnimplemented, "--from-safetensors %s: %s is %s; F32 only", file.c_str(),
                 t.name.c_str(), e["dtype"].dump().c_str());
    TT_RETURN_IF(e["shape"] != nlohmann::json(t.shape), kFailedPrecondition,
                 "--from-safetensors %s: %s has shape %s, this model's is %s (GPT-2 layout)", file.c_str(),
                 t.name.c_str(), e["shape"].dump().c_str(), nlohmann::json(t.shape).dump().c_str());
    const auto& off = e["data_offsets"];
    TT_RETURN_IF(!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned(),
                 kDataLoss, "--from-safetensors %s: %s: bad data_offsets", file.c_str(), t.name.c_str());
    const uint64_t a = off[0].get<uint64_t>(), b = off[1].get<uint64_t>();
    const uint64_t want = static_cast<uint64_t>(t.rows * t.cols) * 4;
    TT_RETURN_IF(b < a || b - a != want || b > data_bytes, kDataLoss,
                 "--from-safetensors %s: %s: bytes [%llu, %llu) of %llu for %llu values", file.c_str(), t.name.c_str(),
                 static_cast<unsigned long long>(a), static_cast<unsigned long long>(b),
                 static_cast<unsigned long long>(data_bytes), static_cast<unsigned long long>(want / 4));
    theirs.resize(static_cast<size_t>(t.rows * t.cols));
    in.seekg(static_cast<std::streamoff>(data_at + a));
    TT_RETURN_IF(!in.read(reinterpret_cast<char*>(theirs.data()), static_cast<std::streamsize>(want)), kIoError,
                 "--from-safetensors %s: reading %s failed", file.c_str(), t.name.c_str());
    float* out = params.data() + p.offset;  // wte's padding rows stay 0
    if (t.transposed) {
      for (int64_t x = 0; x < t.rows; ++x)
        for (int64_t y = 0; y < t.cols; ++y) out[x * t.cols + y] = theirs[static_cast<size_t>(y * t.rows + x)];
    } else {
      std::memcpy(out, theirs.data(), static_cast<size_t>(want));
    }
  }
  ex.wait_all();
  TT_TRY(ex.backend().synchronize_all());
  return ex.upload_params(params.data());
}

}  // namespace tt
