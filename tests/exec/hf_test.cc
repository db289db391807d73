// exec/hf: Hugging Face model folders both ways for every family.
// - A Llama checkpoint exported (f32, sharded with an index, and bf16) and read back by a new run gives its
//   parameters bit for bit (bf16: each rounded once); the new run's model is the folder's config.json; a tensor-
//   parallel rank takes its shard.
// - config.json says what transformers reads for each family (Llama, Qwen2 with QKV biases); a config.json of a
//   setting a family does not have is refused naming the key; model flags that disagree with the folder are named.
// - Malformed folders and files give errors naming the file and the tensor: a missing tensor, another shape, another
//   dtype, overlapping data, a header past the end, an index naming a missing shard, values that are not finite.
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/tensorfile.h"
#include "exec/hf.h"
#include "exec/trainer.h"
#include "temp_dir.h"
#include "test_util.h"

namespace tt {
namespace {

using nlohmann::json;
using testing::TempDir;

const ModelConfig kLlama{.family = "llama", .vocab = 256, .layers = 2, .dim = 32, .heads = 4, .seq = 16,
                         .kv_heads = 2, .ffn = 48, .tied_embeddings = false, .qkv_bias = true, .rope_theta = 500000};

TrainConfig config(const std::string& data, const ModelConfig& model) {
  TrainConfig tc;
  tc.model = model;
  tc.batch = 4;
  tc.data = data;
  tc.steps = 3;
  tc.warmup = 1;
  tc.eval_every = 0;
  tc.backend = "cpu";
  tc.threads = 1;
  return tc;
}

// Trains cfg a few steps into `ckpt` (a checkpoint folder).
void train(const TrainConfig& cfg, const std::string& ckpt) {
  TrainConfig tc = cfg;
  tc.checkpoint_dir = ckpt;
  auto t = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_TRUE(t.value()->run().is_ok());
}

// The parameters a new run starts with from `folder`.
std::vector<float> started_from(const TrainConfig& cfg, const std::string& folder, ModelConfig* model = nullptr) {
  TrainConfig tc = cfg;
  tc.model = ModelConfig{};  // the folder's config.json gives the model
  tc.model.seq = cfg.model.seq;
  tc.from_safetensors = folder;
  auto t = Trainer::create(tc, nullptr);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return {};
  if (model) *model = t.value()->model().config();
  std::vector<float> p(static_cast<size_t>(t.value()->model().num_params()));
  EXPECT_TRUE(t.value()->executor().download_params(p.data()).is_ok());
  return p;
}

std::vector<float> checkpoint_params(const std::string& ckpt, const ModelConfig& cfg) {
  auto path = resolve_checkpoint(ckpt);
  auto r = TensorFileReader::open(path.value());
  EXPECT_TRUE(r.is_ok());
  std::vector<float> all(static_cast<size_t>(model_num_params(cfg)));
  for (const ParamInfo& p : model_param_layout(cfg)) {
    auto v = r.value().read_all<float>("param/" + p.name);
    EXPECT_TRUE(v.is_ok()) << p.name;
    std::memcpy(all.data() + p.offset, v.value().data(), v.value().size() * 4);
  }
  return all;
}

json read_json(const std::string& file) {
  std::ifstream in(file);
  return json::parse(in);
}

TEST(HuggingFace, LlamaExportedAndReadBackBitForBitShardedAndInBf16) {
  TempDir dir;
  const std::string data = dir.write("text.txt", testing::synthetic_text(20000));
  const TrainConfig cfg = config(data, kLlama);
  const std::string ckpt = dir.path() + "/ck";
  train(cfg, ckpt);
  const std::vector<float> want = checkpoint_params(ckpt, kLlama);

  // f32 in shards of at most 40 KB: several files and the index.
  ExportOptions o;
  o.max_shard_bytes = 40000;
  auto s = export_hf(ckpt, dir.path() + "/f32", o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_GT(s.value().files, 2);
  // wte, norm, lm_head; a block: 2 norms, q, k, v and their biases, o, gate, up, down.
  EXPECT_EQ(s.value().tensors, 3 + 2 * 12);
  const json index = read_json(dir.path() + "/f32/model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"]["model.layers.1.self_attn.k_proj.bias"].get<std::string>().substr(0, 6), "model-");
  EXPECT_EQ(index["weight_map"].size(), 27u);
  const json c = read_json(dir.path() + "/f32/config.json");
  EXPECT_EQ(c["model_type"], "qwen2");  // QKV biases: Qwen2's class
  EXPECT_EQ(c["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["intermediate_size"], 48);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["rope_theta"], 500000.0);
  ModelConfig read;
  const std::vector<float> back = started_from(cfg, dir.path() + "/f32", &read);
  EXPECT_EQ(read, kLlama);
  ASSERT_EQ(back.size(), want.size());
  EXPECT_EQ(std::memcmp(back.data(), want.data(), want.size() * 4), 0) << "f32 round trip";

  // bf16 in one file: each value rounded once.
  o = ExportOptions{};
  o.dtype = DType::kBF16;
  s = export_hf(ckpt, dir.path() + "/bf16", o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s.value().files, 1);
  EXPECT_EQ(read_json(dir.path() + "/bf16/config.json")["torch_dtype"], "bfloat16");
  const std::vector<float> b16 = started_from(cfg, dir.path() + "/bf16");
  ASSERT_EQ(b16.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(b16[i], bf16_to_float(float_to_bf16(want[i]))) << "element " << i;

  // A tied Llama without biases is Llama's own class.
  ModelConfig tied = kLlama;
  tied.tied_embeddings = true;
  tied.qkv_bias = false;
  const std::string ck2 = dir.path() + "/ck2";
  train(config(data, tied), ck2);
  ASSERT_TRUE(export_hf(ck2, dir.path() + "/tied", {}).is_ok());
  const json t = read_json(dir.path() + "/tied/config.json");
  EXPECT_EQ(t["model_type"], "llama");
  EXPECT_EQ(t["attention_bias"], false);
  EXPECT_EQ(t["tie_word_embeddings"], true);
  const std::vector<float> tb = started_from(config(data, tied), dir.path() + "/tied", &read);
  EXPECT_EQ(read, tied);
  const std::vector<float> tw = checkpoint_params(ck2, tied);
  ASSERT_EQ(tb.size(), tw.size());
  EXPECT_EQ(std::memcmp(tb.data(), tw.data(), tw.size() * 4), 0);
}

// Writes a safetensors file of the given header entries and data bytes.
void write_safetensors(const std::string& file, const json& header, const std::string& data) {
  std::string head = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((head.size() >> (8 * i)) & 0xff);
  std::ofstream(file, std::ios::binary) << out << head << data;
}

TEST(HuggingFace, MalformedFoldersAreNamed) {
  TempDir dir;
  const std::string data = dir.write("text.txt", testing::synthetic_text(20000));
  const TrainConfig cfg = config(data, kLlama);
  const std::string ckpt = dir.path() + "/ck";
  train(cfg, ckpt);
  const std::string good = dir.path() + "/good";
  ASSERT_TRUE(export_hf(ckpt, good, {}).is_ok());
  const std::string st = good + "/model.safetensors";
  std::ifstream in(st, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const json header = json::parse(bytes.substr(8, n));
  const std::string body = bytes.substr(8 + n);

  auto expect_refused = [&](const std::string& what, const std::function<void(const std::string&)>& make,
                            const std::string& message) {
    SCOPED_TRACE(what);
    const std::string folder = dir.path() + "/bad-" + std::to_string(std::hash<std::string>()(what));
    std::filesystem::create_directories(folder);
    std::filesystem::copy_file(good + "/config.json", folder + "/config.json");
    make(folder);
    TrainConfig tc = cfg;
    tc.from_safetensors = folder;
    auto t = Trainer::create(tc, nullptr);
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find(message), std::string::npos) << t.status().message();
  };
  expect_refused("a missing tensor", [&](const std::string& f) {
    json h = header;
    h.erase("model.layers.1.mlp.up_proj.weight");
    write_safetensors(f + "/model.safetensors", h, body);
  }, "no tensor model.layers.1.mlp.up_proj.weight");
  expect_refused("another shape", [&](const std::string& f) {
    json h = header;
    h["model.norm.weight"]["shape"] = {8, 4};
    write_safetensors(f + "/model.safetensors", h, body);
  }, "model.norm.weight has shape [8,4], this model's is [32]");
  expect_refused("another dtype", [&](const std::string& f) {
    json h = header;
    h["model.norm.weight"]["dtype"] = "I64";
    write_safetensors(f + "/model.safetensors", h, body);
  }, "dtype I64; tiertrain reads F32, BF16 and F16");
  expect_refused("overlapping data", [&](const std::string& f) {
    json h = header;
    const json& a = h["model.layers.0.input_layernorm.weight"]["data_offsets"];
    h["model.norm.weight"]["data_offsets"] = a;
    write_safetensors(f + "/model.safetensors", h, body);
  }, "two tensors' data overlap");
  expect_refused("a header past the end", [&](const std::string& f) {
    std::string b = bytes;
    b[6] = 1;
    std::ofstream(f + "/model.safetensors", std::ios::binary) << b;
  }, "a header of");
  expect_refused("an index naming a missing shard", [&](const std::string& f) {
    std::ofstream(f + "/model.safetensors.index.json") << R"({"weight_map": {"model.norm.weight": "nowhere.safetensors"}})";
  }, "nowhere.safetensors: not found");
  expect_refused("an index naming a file elsewhere", [&](const std::string& f) {
    std::ofstream(f + "/model.safetensors.index.json") << R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})";
  }, "expected a file name in the folder");
  expect_refused("a value that is not finite", [&](const std::string& f) {
    std::string b = body;
    const int64_t at = header["model.norm.weight"]["data_offsets"][0].get<int64_t>();
    const float nan = std::nanf("");
    std::memcpy(b.data() + at, &nan, 4);
    write_safetensors(f + "/model.safetensors", header, b);
  }, "a value that is not finite");
  expect_refused("a config of a setting the family lacks", [&](const std::string& f) {
    json c = read_json(good + "/config.json");
    c["model_type"] = "llama";
    c["attention_bias"] = true;
    std::ofstream(f + "/config.json") << c.dump();
    std::filesystem::copy_file(st, f + "/model.safetensors");
  }, "\"attention_bias\" is true; this family supports false only");
  expect_refused("an unknown model type", [&](const std::string& f) {
    json c = read_json(good + "/config.json");
    c["model_type"] = "mamba";
    std::ofstream(f + "/config.json") << c.dump();
  }, "model_type \"mamba\" is not a family tiertrain trains");
  expect_refused("a config that is not JSON", [&](const std::string& f) {
    std::ofstream(f + "/config.json") << "{ nope";
  }, "config.json: not a JSON object");

  // A base model's file (transformers' LlamaModel, GPT2Model: GPT-2's published weights) names the tensors without
  // the first part: read the same.
  {
    const std::string folder = dir.path() + "/base";
    std::filesystem::create_directories(folder);
    std::filesystem::copy_file(good + "/config.json", folder + "/config.json");
    json h = json::object();
    for (const auto& [name, e] : header.items())
      h[name.rfind("model.", 0) == 0 ? name.substr(6) : name] = e;
    write_safetensors(folder + "/model.safetensors", h, body);
    const std::vector<float> base = started_from(cfg, folder), want = checkpoint_params(ckpt, kLlama);
    ASSERT_EQ(base.size(), want.size());
    EXPECT_EQ(std::memcmp(base.data(), want.data(), want.size() * 4), 0) << "a base model's names";
  }

  // Model flags that disagree with the folder are named; those that agree are fine.
  TrainConfig flags = cfg;
  flags.from_safetensors = good;
  flags.model_knobs_given = {"layers", "heads"};
  flags.model.layers = 3;
  auto t = Trainer::create(flags, nullptr);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("--layers 3 but 2"), std::string::npos) << t.status().message();
  flags.model.layers = 2;
  EXPECT_TRUE(Trainer::create(flags, nullptr).is_ok());
}

// A run that started from a Hugging Face folder resumes from its checkpoint without the model flags (the model is the
// checkpoint's), and a flag that disagrees with the checkpoint is named.
TEST(HuggingFace, ARunFromAFolderResumesWithoutModelFlags) {
  TempDir dir;
  const std::string data = dir.write("text.txt", testing::synthetic_text(20000));
  const TrainConfig cfg = config(data, kLlama);
  train(cfg, dir.path() + "/ck");
  ASSERT_TRUE(export_hf(dir.path() + "/ck", dir.path() + "/hf", {}).is_ok());
  TrainConfig first = config(data, ModelConfig{});  // the folder gives the model
  first.model.seq = kLlama.seq;
  first.steps = 6;
  first.stop_at = 3;
  first.from_safetensors = dir.path() + "/hf";
  first.checkpoint_dir = dir.path() + "/ck2";
  auto a = Trainer::create(first, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a.value()->run().is_ok());
  TrainConfig again = first;
  again.from_safetensors.clear();
  again.stop_at = 0;
  again.model = ModelConfig{};
  again.model.seq = kLlama.seq;
  again.resume = "latest";
  auto b = Trainer::create(again, nullptr);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(b.value()->model().config(), kLlama);
  ASSERT_TRUE(b.value()->run().is_ok());
  again.model_knobs_given = {"family"};
  auto c = Trainer::create(again, nullptr);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("family is llama in the checkpoint but gpt2 now"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace tt
