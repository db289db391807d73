// apps/generate: text from a checkpoint.
//  - the draw: temperature near 0 takes the likeliest token; top-k never leaves the k likeliest; the frequencies
//    follow the softmax;
//  - a model trained on one repeated sentence continues that sentence from its start, through and past the end
//    of its context window (the window slides): the logits read are those of the prompt's last position;
//  - the same checkpoint, options and seed give the same text; another seed another;
//  - a missing checkpoint, an empty folder and a bad temperature are refused, named;
//  - evaluation scores the windows of a file (the same at any batch size; low where the model learnt);
//  - --init-from starts a run on other data from a checkpoint's parameters (and refuses another shape).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensorfile.h"
#include "data/npy.h"
#include "exec/hf.h"
#include "apps/generate.h"
#include "exec/trainer.h"
#include "temp_dir.h"
#include "test_util.h"
#include "exec_util.h"

namespace tt {
namespace {

using testing::TempDir;

TEST(Sample, TheDrawFollowsTemperatureAndTopK) {
  const float logits[5] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  // Near-zero temperature: the likeliest; tied likeliest share the draw, the lower first.
  const float unique[5] = {1.0f, 3.0f, 2.0f, 2.9f, -1.0f};
  for (double u : {0.0, 0.5, 0.999}) EXPECT_EQ(draw_token(unique, 5, 1e-4, 0, u), 1);
  EXPECT_EQ(draw_token(logits, 5, 1e-4, 0, 0.25), 1);
  EXPECT_EQ(draw_token(logits, 5, 1e-4, 0, 0.75), 3);
  // top-k 2: only tokens 1 and 3 (the two 3.0s) are ever drawn, half each at any temperature.
  std::map<int, int> seen;
  for (int i = 0; i < 1000; ++i) seen[draw_token(logits, 5, 5.0, 2, (i + 0.5) / 1000)]++;
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], 500);
  EXPECT_EQ(seen[3], 500);
  // All tokens at temperature 1: the frequencies of a uniform u are the softmax's.
  seen.clear();
  const int n = 100000;
  for (int i = 0; i < n; ++i) seen[draw_token(logits, 5, 1.0, 0, (i + 0.5) / n)]++;
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  for (int t = 0; t < 5; ++t)
    EXPECT_NEAR(seen[t] / static_cast<double>(n), std::exp(static_cast<double>(logits[t])) / z, 2e-4) << t;
}

// A run that learns one sentence by heart and keeps its final checkpoint in dir/ckpt.
std::string train_sentence(TempDir& dir, const std::string& sentence) {
  std::string text;
  while (text.size() < 20000) text += sentence;
  TrainConfig tc;
  tc.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 64, .heads = 2, .seq = 32};
  tc.batch = 8;
  tc.data = dir.write("sentence.txt", text);
  tc.steps = 300;
  tc.warmup = 10;
  tc.eval_every = 0;
  tc.backend = "cpu";
  tc.threads = 2;
  tc.checkpoint_dir = dir.path() + "/ckpt";
  auto trainer = Trainer::create(tc, nullptr);
  EXPECT_TRUE(trainer.is_ok()) << trainer.status().to_string();
  auto summary = trainer.value()->run();
  EXPECT_TRUE(summary.is_ok()) << summary.status().to_string();
  EXPECT_LT(summary.value().last_loss, 0.3) << "the sentence was not learnt; the samples below would mean nothing";
  return tc.checkpoint_dir;
}

TEST(Sample, AModelThatLearntASentenceContinuesItPastItsWindow) {
  TempDir dir;
  const std::string sentence = "the quick brown fox jumps over the lazy dog. ";
  const std::string ckpt = train_sentence(dir, sentence);
  SampleOptions o;
  o.prompt = "the quick";
  o.tokens = 100;  // past the window of 32: the window slides
  o.temperature = 0.05;
  o.backend = "cpu";
  auto s = sample_checkpoint(ckpt, o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_TRUE(s.value().bytes);
  EXPECT_EQ(s.value().prompt_tokens, 9);
  EXPECT_EQ(s.value().tokens.size(), 109u);
  EXPECT_EQ(s.value().step, 300);
  std::string expect;
  while (expect.size() < 109) expect += sentence;
  EXPECT_EQ(s.value().text, expect.substr(0, 109));

  // The same options give the same text; at a high temperature another seed gives another.
  o.temperature = 2.0;
  auto a = sample_checkpoint(ckpt, o), b = sample_checkpoint(ckpt, o);
  o.seed = 7;
  auto c = sample_checkpoint(ckpt, o);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ(a.value().text, b.value().text);
  EXPECT_NE(a.value().text, c.value().text);
  // A checkpoint file works as well as its folder.
  o.seed = 1337;
  auto f = sample_checkpoint(a.value().checkpoint, o);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f.value().text, a.value().text);

  // Evaluation: low on the sentence, high on other text; the same windows give the same loss at any batch size.
  EvalOptions e;
  e.data = dir.path() + "/sentence.txt";
  e.backend = "cpu";
  e.batch = 8;
  e.batches = 4;
  auto on_sentence = evaluate_checkpoint(ckpt, e);
  ASSERT_TRUE(on_sentence.is_ok()) << on_sentence.status().to_string();
  EXPECT_LT(on_sentence.value().loss, 0.3);
  EXPECT_EQ(on_sentence.value().tokens, 4 * 8 * 32);
  e.batch = 4;
  e.batches = 8;
  auto halves = evaluate_checkpoint(ckpt, e);
  ASSERT_TRUE(halves.is_ok());
  EXPECT_NEAR(halves.value().loss, on_sentence.value().loss, 1e-4);
  e.data = dir.write("other_text.txt", testing::synthetic_text(5000));
  auto elsewhere = evaluate_checkpoint(ckpt, e);
  ASSERT_TRUE(elsewhere.is_ok());
  EXPECT_GT(elsewhere.value().loss, 2.0);

  // GPT-2 layout: exported, then read back by a new run (--from-safetensors), the parameters bit for bit.
  auto exported = export_hf(ckpt, dir.path() + "/hf", {});
  ASSERT_TRUE(exported.is_ok()) << exported.status().to_string();
  EXPECT_EQ(exported.value().tensors, 2 + 12 * 2 + 2);
  {
    TrainConfig tc;
    tc.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 64, .heads = 2, .seq = 32};
    tc.batch = 8;
    tc.data = dir.path() + "/sentence.txt";
    tc.steps = 1;
    tc.backend = "cpu";
    tc.from_safetensors = dir.path() + "/hf";
    auto t = Trainer::create(tc, nullptr);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    std::vector<float> back(static_cast<size_t>(model_num_params(tc.model)));
    ASSERT_TRUE(t.value()->executor().download_params(back.data()).is_ok());
    auto r = TensorFileReader::open(exported.value().checkpoint);
    ASSERT_TRUE(r.is_ok());
    for (const ParamInfo& p : model_param_layout(tc.model)) {
      auto want = r.value().read_all<float>("param/" + p.name);
      ASSERT_TRUE(want.is_ok());
      EXPECT_EQ(std::memcmp(back.data() + p.offset, want.value().data(), want.value().size() * 4), 0) << p.name;
    }
  }

  // --init-from: a new run on other data starts from the learnt parameters (its first loss is the learnt model's,
  // far below a fresh model's ln 256), with step 1 of a fresh schedule.
  TrainConfig tc;
  tc.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 64, .heads = 2, .seq = 32};
  tc.batch = 8;
  std::string other;
  while (other.size() < 20000) other += "the lazy dog. the quick brown fox jumps over ";
  tc.data = dir.write("other.txt", other);
  tc.steps = 2;
  tc.eval_every = 0;
  tc.backend = "cpu";
  tc.threads = 2;
  tc.init_from = ckpt;
  auto tuned = Trainer::create(tc, nullptr);
  ASSERT_TRUE(tuned.is_ok()) << tuned.status().to_string();
  auto run = tuned.value()->run();
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_EQ(run.value().first_step, 1);
  EXPECT_LT(run.value().first_loss, 0.5);
  // Another shape is refused, naming what differs.
  tc.model.dim = 32;
  auto wrong = Trainer::create(tc, nullptr);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("dim is 64 in the checkpoint but 32 now"), std::string::npos)
      << wrong.status().message();
}

// `eval --split val` at the run's batch and --eval-batches is the run's own validation loss, to the bit.
TEST(Eval, TheValidationSplitGivesTheRunsValidationLoss) {
  TempDir dir;
  TrainConfig tc;
  tc.model = ModelConfig{.vocab = 256, .layers = 1, .dim = 32, .heads = 2, .seq = 16};
  tc.batch = 4;
  tc.data = dir.write("text.txt", testing::synthetic_text(30000));
  tc.steps = 20;
  tc.eval_every = 20;
  tc.eval_batches = 5;
  tc.backend = "cpu";
  tc.threads = 1;
  tc.checkpoint_dir = dir.path() + "/ck";
  auto t = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto s = t.value()->run();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EvalOptions e;
  e.data = tc.data;
  e.split = "val";
  e.val_fraction = tc.val_fraction;
  e.batch = tc.batch;
  e.batches = tc.eval_batches;
  e.backend = "cpu";
  e.threads = 1;
  auto v = evaluate_checkpoint(tc.checkpoint_dir, e);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v.value().batches, 5);
  EXPECT_EQ(v.value().loss, s.value().last_val_loss);
  e.split = "train";
  auto tr = evaluate_checkpoint(tc.checkpoint_dir, e);
  ASSERT_TRUE(tr.is_ok());
  EXPECT_NE(tr.value().loss, v.value().loss);
}

// eval --logits-out: an .npy array [windows, seq, vocab] of f32 whose every row gives the token's loss that eval
// reports (log-sum-exp less the target's logit), the same (CPU: the same bytes) in chunks of any size (7 rows: chunks
// across windows and batches) as in one, and with --grads-out (the logits before the backward); a GPT-2 and a Llama
// with grouped-query attention. On a GPU in bf16 (logits rounded as the model computed them; a GEMM of other rows may
// round an element the other way: bounds, not bytes).
// A checkpoint of `model` after `steps` steps on the CPU backend at batch 2 on `data` (in dir/ck).
std::string trained(TempDir& dir, const ModelConfig& model, const std::string& data, int steps) {
  TrainConfig tc;
  tc.model = model;
  tc.batch = 2;
  tc.data = data;
  tc.steps = steps;
  tc.eval_every = 0;
  tc.backend = "cpu";
  tc.threads = 1;
  tc.checkpoint_dir = dir.path() + "/ck";
  auto t = Trainer::create(tc, nullptr);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (t.is_ok()) {
    EXPECT_TRUE(t.value()->run().is_ok());
  }
  return tc.checkpoint_dir;
}

void check_logits_out(const char* backend, const char* dtype) {
  struct Case {
    const char* name;
    ModelConfig model;
  };
  const Case cases[] = {
      {"gpt2", ModelConfig{.vocab = 256, .layers = 1, .dim = 32, .heads = 2, .seq = 16}},
      {"llama", ModelConfig{.family = "llama", .vocab = 256, .layers = 2, .dim = 32, .heads = 4, .seq = 16,
                            .kv_heads = 2, .ffn = 48, .tied_embeddings = false}},
  };
  const bool exact = std::string(dtype) == "f32" && std::string(backend) == "cpu";
  const double tolerance = std::string(dtype) == "bf16" ? 5e-2 : 1e-4;  // (bf16: a logit's unit in the last place)
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    const std::string data = dir.write("text.txt", testing::synthetic_text(20000));
    const std::string ck = trained(dir, c.model, data, 5);
    EvalOptions e;
    e.data = data;
    e.batch = 3;
    e.batches = 2;
    e.backend = backend;
    e.dtype = dtype;
    e.threads = 1;
    e.token_losses = true;
    e.logits_out = dir.file("chunks.npy");
    e.logits_chunk_rows = 7;
    auto r = evaluate_checkpoint(ck, e);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const int64_t W = 6, T = 16, V = 256;
    const std::string text = testing::read_file(data);
    // The largest difference between each row's log-sum-exp less its target's logit and the token's loss; and
    // between the arrays of two files.
    auto read = [&](const std::string& path) -> std::vector<float> {
      auto a = data::NpyArray::open(path);
      EXPECT_TRUE(a.is_ok()) << a.status().to_string();
      if (!a.is_ok()) return {};
      EXPECT_EQ(a.value().descr(), "<f4");
      EXPECT_EQ(a.value().shape(), (std::vector<int64_t>{W, T, V}));
      if (a.value().numel() != W * T * V) return {};
      return std::vector<float>(a.value().data<float>(), a.value().data<float>() + W * T * V);
    };
    const std::vector<float> chunked = read(e.logits_out);
    ASSERT_EQ(chunked.size(), static_cast<size_t>(W * T * V));
    const std::vector<float>& tl = r.value().token_losses;
    ASSERT_EQ(tl.size(), static_cast<size_t>(W * T));
    double worst = 0;
    for (int64_t w = 0; w < W; ++w) {
      for (int64_t p = 0; p < T; ++p) {  // (the windows: consecutive runs of seq + 1 bytes from the start)
        const float* row = chunked.data() + (w * T + p) * V;
        double mx = row[0], sum = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
        const int target = static_cast<unsigned char>(text[static_cast<size_t>(w * T + p + 1)]);
        worst = std::max(worst, std::abs(mx + std::log(sum) - row[target] - tl[static_cast<size_t>(w * T + p)]));
      }
    }
    EXPECT_LT(worst, tolerance) << "a row's log-sum-exp less its target's logit against the token's loss";
    auto apart = [&](const std::vector<float>& other) {
      double d = other.size() == chunked.size() ? 0 : 1e30;
      for (size_t i = 0; i < std::min(other.size(), chunked.size()); ++i)
        d = std::max(d, std::abs(static_cast<double>(other[i]) - chunked[i]));
      return d;
    };
    e.logits_chunk_rows = 0;  // one chunk a batch
    e.logits_out = dir.file("whole.npy");
    ASSERT_TRUE(evaluate_checkpoint(ck, e).is_ok());
    if (exact) {
      EXPECT_TRUE(read(e.logits_out) == chunked) << "chunks of 7 rows against one of 48";
    }
    EXPECT_LT(apart(read(e.logits_out)), tolerance);
    e.grads_out = dir.file("grads");
    e.logits_out = dir.file("with_grads.npy");
    auto g = evaluate_checkpoint(ck, e);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    if (exact) {
      EXPECT_TRUE(read(e.logits_out) == chunked) << "with --grads-out";
    }
    EXPECT_LT(apart(read(e.logits_out)), tolerance);
    EXPECT_EQ(g.value().loss, r.value().loss);
  }
}

TEST(Eval, LogitsOutHoldsEveryScoredPositionsLogits) {
  check_logits_out("cpu", "f32");
  // A folder that does not exist is named before anything is scored.
  TempDir dir;
  EvalOptions e;
  e.data = dir.write("text.txt", testing::synthetic_text(2000));
  const std::string ck =
      trained(dir, ModelConfig{.vocab = 256, .layers = 1, .dim = 16, .heads = 2, .seq = 8}, e.data, 1);
  e.backend = "cpu";
  e.logits_out = dir.file("no/such/l.npy");
  auto bad = evaluate_checkpoint(ck, e);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("no/such/l.npy"), std::string::npos) << bad.status().to_string();
}

TEST(EvalCuda, LogitsOutInBf16AndF32) {
  TT_SKIP_WITHOUT_GPU();
  check_logits_out("cuda", "bf16");
  check_logits_out("cuda", "f32");
}

// Note [KV cache]: Backend::attention_decode writes the new row into the cache at its position and gives row pos of
// attention_forward on the cache's first pos + 1 rows; the rows after pos are left as they were.
TEST(Decode, AttentionOfTheNewRowIsTheForwardsRowAtItsPosition) {
  auto be = testing::make_cpu_backend();
  const int b = 2, c = 24, h = 3, tmax = 16;
  Rng rng(5);
  for (int n : {1, 2, 7, 16}) {
    std::vector<double> cache(static_cast<size_t>(b * tmax * 3 * c));
    for (double& x : cache) x = rng.normal();
    // The new rows, and the cache as the forward sees it: rows 0..n-2 as they are, row n-1 the new one.
    std::vector<double> fresh(static_cast<size_t>(b * 3 * c)), rows(static_cast<size_t>(b * n * 3 * c));
    for (double& x : fresh) x = rng.normal();
    for (int bi = 0; bi < b; ++bi)
      for (int t = 0; t < n; ++t)
        for (int k = 0; k < 3 * c; ++k)
          rows[(static_cast<size_t>(bi) * n + t) * 3 * c + k] =
              t == n - 1 ? fresh[static_cast<size_t>(bi) * 3 * c + k]
                         : cache[(static_cast<size_t>(bi) * tmax + t) * 3 * c + k];
    const std::vector<int32_t> pos(static_cast<size_t>(b), n - 1);
    auto alloc = [&](Shape sh, DType dt, const char* name) {
      auto t = be->pool().allocate(sh, dt, TensorClass::kWorkspace, name);
      EXPECT_TRUE(t.is_ok());
      return t.value();
    };
    Tensor tc = alloc({b, tmax, 3 * c}, DType::kF64, "cache"), tn = alloc({b, 3 * c}, DType::kF64, "new"),
           tp = alloc({b}, DType::kI32, "pos"), tr = alloc({b, n, 3 * c}, DType::kF64, "rows"),
           to = alloc({b, n, c}, DType::kF64, "out"), tl = alloc({b, h, n}, DType::kF64, "lse"),
           td = alloc({b, c}, DType::kF64, "dec");
    be->copy_h2d(tc, cache.data(), be->compute_stream());
    be->copy_h2d(tn, fresh.data(), be->compute_stream());
    be->copy_h2d(tp, pos.data(), be->compute_stream());
    be->copy_h2d(tr, rows.data(), be->compute_stream());
    be->attention_forward(to, tl, tr, h);
    be->attention_decode(td, tc, tn, tp, h);
    std::vector<double> full(static_cast<size_t>(b * n * c)), dec(static_cast<size_t>(b * c)), after(cache.size());
    be->copy_d2h(full.data(), to, be->compute_stream());
    be->copy_d2h(dec.data(), td, be->compute_stream());
    be->copy_d2h(after.data(), tc, be->compute_stream());
    ASSERT_TRUE(be->compute_stream().synchronize().is_ok());
    for (int bi = 0; bi < b; ++bi) {
      EXPECT_TRUE(testing::all_close("decode n " + std::to_string(n), dec.data() + bi * c,
                                     full.data() + (static_cast<size_t>(bi) * n + static_cast<size_t>(n) - 1) * c,
                                     static_cast<size_t>(c), 1e-13, 1e-12));
      for (int t = 0; t < tmax; ++t)
        for (int k = 0; k < 3 * c; ++k) {
          const size_t at = (static_cast<size_t>(bi) * tmax + t) * 3 * c + k;
          const double want = t == n - 1 ? fresh[static_cast<size_t>(bi) * 3 * c + k] : cache[at];
          ASSERT_EQ(after[at], want) << "cache row " << t << " of sequence " << bi << " (n " << n << ")";
        }
    }
    for (Tensor* t : {&td, &tl, &to, &tr, &tp, &tn, &tc}) be->pool().free(*t);
  }
}

// The decoder's logits for each new token (its qkv rows appended to the cache) are those of a forward over the whole
// context, at every position up to the model's length; a prefill from a forward starts the same cache.
void decode_matches_forward(const ModelConfig& cfg) {
  auto be = testing::make_cpu_backend();
  auto ex = testing::make_gpt(*be, cfg, 1, DType::kF64);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  Executor& x = *ex.value();
  ASSERT_TRUE(x.init_params(3).is_ok());
  Model& gpt = x.model();
  NamedTensors dec;
  for (const TensorRequest& r : model_decode_tensors(cfg, DType::kF64)) {
    auto t = be->pool().allocate(r.shape, r.dtype, r.cls, r.name.c_str());
    ASSERT_TRUE(t.is_ok()) << r.name;
    dec[r.name] = t.value();
  }
  const int T = cfg.seq, PV = cfg.padded_vocab();
  Rng rng(11);
  std::vector<int32_t> tokens(static_cast<size_t>(T)), zeros(static_cast<size_t>(T), 0);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  auto all_logits = be->pool().allocate({T, PV}, DType::kF64, TensorClass::kWorkspace, "logits");
  ASSERT_TRUE(all_logits.is_ok());
  // The forward over the whole sequence (causal: row p's logits see tokens 0..p only).
  be->copy_h2d(gpt.tokens(), tokens.data(), be->compute_stream());
  be->copy_h2d(gpt.targets(), zeros.data(), be->compute_stream());
  x.forward();
  gpt.compute_logits(all_logits.value());
  std::vector<double> want(static_cast<size_t>(T * PV)), got(static_cast<size_t>(PV));
  be->copy_d2h(want.data(), all_logits.value(), be->compute_stream());
  ASSERT_TRUE(be->compute_stream().synchronize().is_ok());
  for (int prefill : {1, 5}) {
    // A forward over the first `prefill` tokens (the rest of the window zero), then one token at a time.
    std::vector<int32_t> window(static_cast<size_t>(T), 0);
    std::copy(tokens.begin(), tokens.begin() + prefill, window.begin());
    be->copy_h2d(gpt.tokens(), window.data(), be->compute_stream());
    x.forward();
    gpt.decode_prefill(dec, prefill);
    for (int p = prefill - 1; p < T; ++p) {
      const int32_t at = p;
      if (p >= prefill) {
        be->copy_h2d(dec.at("decode.token"), &tokens[static_cast<size_t>(p)], be->compute_stream());
        be->copy_h2d(dec.at("decode.pos"), &at, be->compute_stream());
        gpt.decode_step(dec);
      }
      be->copy_d2h(got.data(), dec.at("decode.logits"), be->compute_stream());
      ASSERT_TRUE(be->compute_stream().synchronize().is_ok());
      EXPECT_TRUE(testing::all_close("prefill " + std::to_string(prefill) + " position " + std::to_string(p),
                                     got.data(), want.data() + static_cast<size_t>(p) * PV, static_cast<size_t>(PV),
                                     1e-12, 1e-10));
    }
  }
}

// Every family: GPT-2, and a Llama with grouped-query heads (its rotation at the new row's position), QKV biases
// and an untied head.
TEST(Decode, EachTokenThroughTheCacheGivesTheForwardsLogits) {
  for (const ModelConfig& cfg :
       {ModelConfig{.vocab = 64, .layers = 2, .dim = 32, .heads = 4, .seq = 16},
        ModelConfig{.family = "llama", .vocab = 64, .layers = 2, .dim = 32, .heads = 4, .seq = 16, .kv_heads = 2,
                    .ffn = 40, .tied_embeddings = false, .qkv_bias = true, .rope_theta = 500000}}) {
    SCOPED_TRACE(cfg.describe());
    decode_matches_forward(cfg);
  }
}

// The sample through the cache draws what a forward per token draws, past the window (the context restarting from
// its last half), with fewer full forwards; on the GPU too, in f32 and bf16, where there is one.
TEST(Sample, TheCacheDrawsWhatAForwardPerTokenDraws) {
  TempDir dir;
  TrainConfig tc;
  tc.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 32, .heads = 2, .seq = 16};
  tc.batch = 4;
  tc.data = dir.write("text.txt", testing::synthetic_text(20000));
  tc.steps = 30;
  tc.eval_every = 0;
  tc.backend = "cpu";
  tc.threads = 2;
  tc.checkpoint_dir = dir.path() + "/ck";
  auto t = Trainer::create(tc, nullptr);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_TRUE(t.value()->run().is_ok());
  t.value().reset();
  SampleOptions o;
  o.prompt = "The ";
  o.tokens = 60;  // past the window of 16 several times
  o.temperature = 1.0;
  o.backend = "cpu";
  o.dtype = "f64";
  auto cached = sample_checkpoint(tc.checkpoint_dir, o);
  o.kv_cache = false;
  auto uncached = sample_checkpoint(tc.checkpoint_dir, o);
  ASSERT_TRUE(cached.is_ok()) << cached.status().to_string();
  ASSERT_TRUE(uncached.is_ok()) << uncached.status().to_string();
  EXPECT_EQ(cached.value().text, uncached.value().text);
  EXPECT_EQ(uncached.value().prefills, 60);
  // The first token, then a restart each time the context would pass 16 (from its last 8): at 17, 26, ..., 62.
  EXPECT_EQ(cached.value().prefills, 7);
  if (!testing::have_gpu()) GTEST_SKIP() << "no GPU here (or a build without CUDA): the CUDA half skipped";
  for (const char* dtype : {"f32", "bf16"}) {
    for (bool graph : {true, false}) {
      SCOPED_TRACE(std::string(dtype) + (graph ? " with the CUDA graph" : " without the CUDA graph"));
      o.backend = "cuda";
      o.dtype = dtype;
      o.temperature = 0.02;  // the likeliest token (up to near ties, which rounding may decide either way)
      o.kv_cache = true;
      o.cuda_graph = graph;
      auto gc = sample_checkpoint(tc.checkpoint_dir, o);
      o.kv_cache = false;
      auto gu = sample_checkpoint(tc.checkpoint_dir, o);
      ASSERT_TRUE(gc.is_ok() && gu.is_ok()) << gc.status().to_string() << gu.status().to_string();
      // Compared up to the first difference: rounding in M=1 and M=T GEMMs may tip a near tie, after which texts
      // part.
      const std::string& a = gc.value().text;
      const std::string& b = gu.value().text;
      size_t same = 0;
      while (same < std::min(a.size(), b.size()) && a[same] == b[same]) ++same;
      EXPECT_GE(same, o.prompt.size() + 20) << "cached: " << a << "\nuncached: " << b;
      EXPECT_EQ(gc.value().prefills, 7);
    }
  }
}

// GPT-2's encoder.json: byte-level characters back to bytes (U+0120 is a space, U+010A a newline).
TEST(Sample, Gpt2VocabularyDecodesByteLevelTokens) {
  TempDir dir;
  const std::string path = dir.write("encoder.json", "{\"hello\": 0, \"\\u0120world\": 1, \"\\u010a\": 2, "
                                                     "\"caf\\u00c3\\u00a9\": 3}");
  auto v = load_vocab_bytes(path);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  ASSERT_EQ(v.value().size(), 4u);
  EXPECT_EQ(v.value()[0], "hello");
  EXPECT_EQ(v.value()[1], " world");
  EXPECT_EQ(v.value()[2], "\n");
  EXPECT_EQ(v.value()[3], "caf\xc3\xa9");  // UTF-8 of e-acute, byte by byte
  EXPECT_FALSE(load_vocab_bytes(dir.write("bad.json", "[1, 2]")).is_ok());
  EXPECT_FALSE(load_vocab_bytes(dir.write("notbytes.json", "{\"\\u4e00\": 0}")).is_ok());
}

TEST(Sample, BadRequestsAreNamed) {
  TempDir dir;
  SampleOptions o;
  o.backend = "cpu";
  auto missing = sample_checkpoint(dir.path() + "/nothing", o);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos) << missing.status().message();
  auto empty = sample_checkpoint(dir.path(), o);
  ASSERT_FALSE(empty.is_ok());
  o.temperature = 0;
  auto cold = sample_checkpoint(dir.path(), o);
  ASSERT_FALSE(cold.is_ok());
  EXPECT_NE(cold.status().message().find("--temperature"), std::string::npos) << cold.status().message();
}

}  // namespace
}  // namespace tt
