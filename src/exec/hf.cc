#include "exec/hf.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/bf16.h"
#include "core/tensorfile.h"
#include "exec/checkpoint.h"
#include "exec/executor.h"

namespace tt {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

using StEntry = SafetensorsEntry;

Result<DType> st_dtype(const json& d, const std::string& where) {
  TT_RETURN_IF(!d.is_string(), kDataLoss, "%s: dtype is %s, expected a string", where.c_str(), dump(d).c_str());
  const std::string s = d.get<std::string>();
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  return make_status(StatusCode::kUnimplemented, "%s: dtype %s; tiertrain reads F32, BF16 and F16", where.c_str(),
                     s.c_str());
}

// A regular file, opened: its size.
Result<uint64_t> regular_file_size(const std::string& file, const char* what) {
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  TT_RETURN_IF(ec || !fs::exists(st), kNotFound, "%s %s: not found", what, file.c_str());
  TT_RETURN_IF(!fs::is_regular_file(st), kInvalidArgument, "%s %s: not a regular file", what, file.c_str());
  const uint64_t size = fs::file_size(file, ec);
  TT_RETURN_IF(ec, kIoError, "%s %s: %s", what, file.c_str(), ec.message().c_str());
  return size;
}

// The header of one safetensors file, checked whole: every entry's dtype, shape and byte range, the ranges within the
// data and not overlapping.
Status read_header(const std::string& file, std::map<std::string, StEntry>* out) {
  TT_ASSIGN_OR_RETURN(const uint64_t size, regular_file_size(file, "safetensors file"));
  std::ifstream in(file, std::ios::binary);
  TT_RETURN_IF(!in, kIoError, "%s: cannot open (%s)", file.c_str(), std::strerror(errno));
  unsigned char len[8] = {};
  TT_RETURN_IF(size < 8 || !in.read(reinterpret_cast<char*>(len), 8), kDataLoss,
               "%s: %llu bytes, too short for a safetensors file", file.c_str(), static_cast<unsigned long long>(size));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  TT_RETURN_IF(n > size - 8 || n > kMaxHeaderBytes, kDataLoss, "%s: a header of %llu bytes in a file of %llu",
               file.c_str(), static_cast<unsigned long long>(n), static_cast<unsigned long long>(size));
  std::string text(n, '\0');
  TT_RETURN_IF(!in.read(text.data(), static_cast<std::streamsize>(n)), kIoError, "%s: read failed", file.c_str());
  const json header = json::parse(text, nullptr, false);
  TT_RETURN_IF(!header.is_object(), kDataLoss, "%s: the header is not a JSON object", file.c_str());
  const uint64_t data_at = 8 + n, data_bytes = size - data_at;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string at = file + ": tensor " + name;
    TT_RETURN_IF(!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"),
                 kDataLoss, "%s: needs dtype, shape and data_offsets", at.c_str());
    StEntry s;
    s.file = file;
    TT_ASSIGN_OR_RETURN(s.dtype, st_dtype(e.at("dtype"), at));
    const json& shape = e.at("shape");
    TT_RETURN_IF(!shape.is_array() || shape.size() > 8, kDataLoss, "%s: shape is %s, expected up to 8 integers",
                 at.c_str(), dump(shape).c_str());
    uint64_t count = 1;
    for (const json& d : shape) {
      TT_RETURN_IF(!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40), kDataLoss,
                   "%s: shape %s has a dimension that is not an integer in [0, 2^40]", at.c_str(), dump(shape).c_str());
      count *= d.get<uint64_t>();
      TT_RETURN_IF(count > (uint64_t(1) << 40), kDataLoss, "%s: shape %s is too large", at.c_str(), dump(shape).c_str());
      s.shape.push_back(d.get<int64_t>());
    }
    const json& off = e.at("data_offsets");
    TT_RETURN_IF(!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned(),
                 kDataLoss, "%s: data_offsets is %s, expected [begin, end]", at.c_str(), dump(off).c_str());
    const uint64_t a = off[0].get<uint64_t>(), b = off[1].get<uint64_t>();
    const uint64_t want = count * dtype_size(s.dtype);
    TT_RETURN_IF(b < a || b - a != want || b > data_bytes, kDataLoss,
                 "%s: bytes [%llu, %llu) of a data section of %llu for %llu values of %zu bytes", at.c_str(),
                 static_cast<unsigned long long>(a), static_cast<unsigned long long>(b),
                 static_cast<unsigned long long>(data_bytes), static_cast<unsigned long long>(count),
                 dtype_size(s.dtype));
    s.begin = data_at + a;
    s.bytes = want;
    if (want > 0) ranges.emplace_back(a, b);
    TT_RETURN_IF(out->count(name) != 0, kDataLoss, "%s: tensor %s is also in %s", file.c_str(), name.c_str(),
                 out->at(name).file.c_str());
    (*out)[name] = std::move(s);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    TT_RETURN_IF(ranges[i].first < ranges[i - 1].second, kDataLoss,
                 "%s: two tensors' data overlap (bytes %llu-%llu and %llu-%llu)", file.c_str(),
                 static_cast<unsigned long long>(ranges[i - 1].first),
                 static_cast<unsigned long long>(ranges[i - 1].second), static_cast<unsigned long long>(ranges[i].first),
                 static_cast<unsigned long long>(ranges[i].second));
  return Status::ok();
}

}  // namespace

Result<std::map<std::string, SafetensorsEntry>> read_safetensors(const std::string& path) {
  std::map<std::string, StEntry> tensors;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    TT_TRY(read_header(path, &tensors));
    return tensors;
  }
  const std::string index = path + "/model.safetensors.index.json";
  if (!fs::exists(index, ec)) {
    TT_TRY(read_header(path + "/model.safetensors", &tensors));
    return tensors;
  }
  TT_ASSIGN_OR_RETURN(const uint64_t size, regular_file_size(index, "index"));
  TT_RETURN_IF(size > kMaxHeaderBytes, kDataLoss, "%s: %llu bytes, too large for an index", index.c_str(),
               static_cast<unsigned long long>(size));
  std::ifstream in(index);
  const json j = json::parse(in, nullptr, false);
  TT_RETURN_IF(!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object(), kDataLoss,
               "%s: expected an object with a \"weight_map\" object", index.c_str());
  std::map<std::string, std::string> owner;  // tensor -> shard file
  for (const auto& [name, file] : j.at("weight_map").items()) {
    TT_RETURN_IF(!file.is_string(), kDataLoss, "%s: weight_map[%s] is %s, expected a file name", index.c_str(),
                 name.c_str(), dump(file).c_str());
    const std::string f = file.get<std::string>();
    TT_RETURN_IF(f.empty() || f.find('/') != std::string::npos || f == "." || f == "..", kDataLoss,
                 "%s: weight_map[%s] is \"%s\", expected a file name in the folder", index.c_str(), name.c_str(),
                 f.c_str());
    owner[name] = f;
  }
  std::map<std::string, bool> files;
  for (const auto& [name, f] : owner) files[f] = true;
  for (const auto& [f, unused] : files) {
    (void)unused;
    TT_TRY(read_header(path + "/" + f, &tensors));
  }
  for (const auto& [name, f] : owner) {
    auto it = tensors.find(name);
    TT_RETURN_IF(it == tensors.end(), kDataLoss, "%s: %s is in %s by the index, and is not there", index.c_str(),
                 name.c_str(), f.c_str());
    TT_RETURN_IF(fs::path(it->second.file).filename() != f, kDataLoss, "%s: %s is in %s by the index, and in %s",
                 index.c_str(), name.c_str(), f.c_str(), it->second.file.c_str());
  }
  return tensors;
}

namespace {

// n values of `dtype` as floats.
void to_f32(const unsigned char* src, DType dtype, size_t n, float* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, src, n * 4);
  } else if (dtype == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = bf16_to_float(h);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = f16_to_float(h);
    }
  }
}

}  // namespace

Result<std::optional<ModelConfig>> read_hf_config(const std::string& path, int seq) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return std::optional<ModelConfig>();
  const std::string file = path + "/config.json";
  if (!fs::exists(file, ec)) return std::optional<ModelConfig>();
  TT_ASSIGN_OR_RETURN(const uint64_t size, regular_file_size(file, "config"));
  TT_RETURN_IF(size > (uint64_t(16) << 20), kDataLoss, "%s: %llu bytes, too large for a config", file.c_str(),
               static_cast<unsigned long long>(size));
  std::ifstream in(file);
  const json j = json::parse(in, nullptr, false);
  TT_RETURN_IF(j.is_discarded() || !j.is_object(), kDataLoss, "%s: not a JSON object", file.c_str());
  TT_ASSIGN_OR_RETURN(ModelConfig c, model_config_from_hf(j, seq, file));
  return std::optional<ModelConfig>(c);
}

Status import_hf(const std::string& path, Executor& ex) {
  const Model& model = ex.model();
  const ModelConfig whole = model.config().whole();
  TT_RETURN_IF(model.master_dtype() != DType::kF32, kUnimplemented, "--from-safetensors: an fp32 master only");
  TT_ASSIGN_OR_RETURN(auto tensors, read_safetensors(path));
  const std::vector<ParamInfo> layout = model_param_layout(whole);
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : layout) by_name[p.name] = &p;
  std::vector<float> params(static_cast<size_t>(model_num_params(whole)), 0.0f);  // padding rows stay 0
  std::vector<unsigned char> raw;
  std::vector<float> theirs;
  for (const HfParam& hp : model_hf_tensors(whole)) {
    const ParamInfo& p = *by_name.at(hp.param);
    const int64_t cols = p.shape.rank() == 2 ? p.shape[1] : 1;
    for (const HfTensor& t : hp.tensors) {
      auto it = tensors.find(t.name);
      // The base model's files (GPT2Model: GPT-2's published weights; LlamaModel) name them without the first part
      // ("transformer.", "model.").
      if (it == tensors.end() && t.name.find('.') != std::string::npos)
        it = tensors.find(t.name.substr(t.name.find('.') + 1));
      TT_RETURN_IF(it == tensors.end(), kNotFound, "--from-safetensors %s: no tensor %s (the model's %s)", path.c_str(),
                   t.name.c_str(), p.name.c_str());
      const StEntry& e = it->second;
      bool shape_ok = e.shape.size() == t.shape.size();
      for (size_t d = 0; shape_ok && d < e.shape.size(); ++d)
        shape_ok = d == 0 && t.more_rows_ok ? e.shape[0] >= t.shape[0] : e.shape[d] == t.shape[d];
      TT_RETURN_IF(!shape_ok, kFailedPrecondition, "--from-safetensors %s: %s has shape %s, this model's is %s",
                   e.file.c_str(), t.name.c_str(), dump(json(e.shape)).c_str(), dump(json(t.shape)).c_str());
      const size_t n = static_cast<size_t>(t.rows * cols), esize = dtype_size(e.dtype);
      raw.resize(n * esize);
      std::ifstream in(e.file, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(e.begin));
      TT_RETURN_IF(!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size())), kIoError,
                   "--from-safetensors %s: reading %s failed", e.file.c_str(), t.name.c_str());
      theirs.resize(n);
      to_f32(raw.data(), e.dtype, n, theirs.data());
      float* out = params.data() + p.offset + t.row0 * cols;
      if (t.transposed) {  // stored [cols, rows]: the first `rows` columns of each of its rows
        const int64_t stored_cols = e.shape[1];
        for (int64_t x = 0; x < t.rows; ++x)
          for (int64_t y = 0; y < cols; ++y) out[x * cols + y] = theirs[static_cast<size_t>(y * stored_cols + x)];
      } else {
        std::memcpy(out, theirs.data(), n * sizeof(float));
      }
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    TT_RETURN_IF(!std::isfinite(params[i]), kDataLoss, "--from-safetensors %s: a value that is not finite (%g) in %s",
                 path.c_str(), static_cast<double>(params[i]),
                 [&] {
                   for (const ParamInfo& p : layout)
                     if (static_cast<int64_t>(i) >= p.offset && static_cast<int64_t>(i) < p.offset + p.shape.numel())
                       return p.name;
                   return std::string("?");
                 }()
                     .c_str());
  ex.wait_all();
  TT_TRY(ex.backend().synchronize_all());
  if (model.config().tp == 1) return ex.upload_params(params.data());
  // Note [tensor parallel]: this rank's shard of the whole model's values.
  std::vector<float> local(static_cast<size_t>(model.num_params()));
  model_take_shard(model.config(), model.tp_rank(), params.data(), local.data(), sizeof(float));
  return ex.upload_params(local.data());
}

Result<ExportSummary> export_hf(const std::string& where, const std::string& out_dir, const ExportOptions& o) {
  TT_ASSIGN_OR_RETURN(const std::string checkpoint, resolve_checkpoint(where));
  TT_ASSIGN_OR_RETURN(TensorFileReader r, TensorFileReader::open(checkpoint));
  TT_ASSIGN_OR_RETURN(CheckpointState st, checkpoint_state_from_meta(r.meta(), checkpoint));
  TT_RETURN_IF(st.dtype != DType::kF32, kUnimplemented, "%s: parameters in %s; export reads fp32 checkpoints",
               checkpoint.c_str(), dtype_name(st.dtype));
  // A damaged file is refused whole, the tensors export does not write (AdamW's moments) too (issue 47).
  for (const TensorFileEntry& e : r.entries())
    if (!e.name.starts_with("param/")) TT_TRY(r.verify(e.name));
  auto read = [&](const ParamInfo& p, float* dst) -> Status {
    std::vector<int64_t> shape;
    for (int d = 0; d < p.shape.rank(); ++d) shape.push_back(p.shape[d]);
    TT_TRY(r.read("param/" + p.name, DType::kF32, shape, dst));
    if (!o.allow_nonfinite)
      TT_TRY(check_finite_tensor(checkpoint, "param/" + p.name, DType::kF32, dst,
                                 static_cast<size_t>(p.shape.numel())));
    return Status::ok();
  };
  TT_ASSIGN_OR_RETURN(ExportSummary s, write_hf_folder(st.model, read, out_dir, o, "tiertrain export",
                                                       {{"checkpoint_step", std::to_string(st.step)}}));
  s.checkpoint = checkpoint;
  return s;
}

Result<ExportSummary> write_hf_folder(const ModelConfig& cfg, const HfParamSource& read, const std::string& out_dir,
                                      const ExportOptions& o, const std::string& producer,
                                      const std::map<std::string, std::string>& metadata) {
  TT_RETURN_IF(o.dtype != DType::kF32 && o.dtype != DType::kBF16, kInvalidArgument, "export: f32 or bf16, not %s",
               dtype_name(o.dtype));
  TT_RETURN_IF(o.max_shard_bytes < 1, kInvalidArgument, "export: a shard of at least one byte");
  ExportSummary s;
  s.dir = out_dir;
  std::map<std::string, ParamInfo> by_name;
  for (const ParamInfo& p : model_param_layout(cfg)) by_name[p.name] = p;
  // The tensors in the family's order, cut into shards of at most max_shard_bytes (a larger tensor alone).
  struct Out {
    const HfTensor* t;
    const ParamInfo* p;
    int64_t bytes;
  };
  const std::vector<HfParam> hf = model_hf_tensors(cfg);
  std::vector<std::vector<Out>> shards(1);
  int64_t in_shard = 0;
  const int64_t esize = static_cast<int64_t>(dtype_size(o.dtype));
  for (const HfParam& hp : hf)
    for (const HfTensor& t : hp.tensors) {
      int64_t count = 1;
      for (int64_t d : t.shape) count *= d;
      const int64_t bytes = count * esize;
      if (!shards.back().empty() && in_shard + bytes > o.max_shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back({&t, &by_name.at(hp.param), bytes});
      in_shard += bytes;
    }
  TT_TRY(make_directories(out_dir, "export folder (--out)"));
  const int n = static_cast<int>(shards.size());
  json weight_map = json::object();
  std::vector<float> ours;
  std::string cached;  // the parameter in `ours`
  for (int k = 0; k < n; ++k) {
    char name[64];
    if (n == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, n);
    json header = json::object();
    int64_t at = 0;
    for (const Out& x : shards[static_cast<size_t>(k)]) {
      header[x.t->name] = {{"dtype", o.dtype == DType::kF32 ? "F32" : "BF16"},
                           {"shape", x.t->shape},
                           {"data_offsets", {at, at + x.bytes}}};
      at += x.bytes;
      weight_map[x.t->name] = name;
    }
    json meta = {{"format", "pt"}, {"producer", producer}};
    for (const auto& [k2, v] : metadata) meta[k2] = v;
    header["__metadata__"] = meta;
    std::string head = dump(header);
    head.append((8 - head.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    std::string file(8 + head.size() + static_cast<size_t>(at), '\0');
    const uint64_t hn = head.size();
    for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((hn >> (8 * i)) & 0xff);
    std::memcpy(file.data() + 8, head.data(), head.size());
    char* data = file.data() + 8 + head.size();
    for (const Out& x : shards[static_cast<size_t>(k)]) {
      const ParamInfo& p = *x.p;
      const HfTensor& t = *x.t;
      if (cached != p.name) {
        ours.resize(static_cast<size_t>(p.shape.numel()));
        TT_TRY(read(p, ours.data()));
        cached = p.name;
      }
      const int64_t cols = p.shape.rank() == 2 ? p.shape[1] : 1;
      char* out = data + header[t.name]["data_offsets"][0].get<int64_t>();
      auto put = [&](int64_t i, float v) {
        if (o.dtype == DType::kF32) {
          std::memcpy(out + i * 4, &v, 4);
        } else {
          const uint16_t h = float_to_bf16(v);
          std::memcpy(out + i * 2, &h, 2);
        }
      };
      const float* src = ours.data() + t.row0 * cols;
      if (t.transposed) {
        for (int64_t a = 0; a < t.rows; ++a)
          for (int64_t b = 0; b < cols; ++b) put(b * t.rows + a, src[a * cols + b]);
      } else {
        for (int64_t i = 0; i < t.rows * cols; ++i) put(i, src[i]);
      }
      ++s.tensors;
      s.params += t.rows * cols;
    }
    TT_TRY(write_file_atomically(out_dir + "/" + name, file));
    s.bytes += static_cast<int64_t>(file.size());
    ++s.files;
  }
  if (n > 1) {
    const json index = {{"metadata", {{"total_size", s.params * esize}}}, {"weight_map", weight_map}};
    TT_TRY(write_file_atomically(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  json config = model_hf_config(cfg);
  config["torch_dtype"] = o.dtype == DType::kF32 ? "float32" : "bfloat16";
  TT_TRY(write_file_atomically(out_dir + "/config.json", config.dump(2) + "\n"));
  return s;
}

}  // namespace tt
