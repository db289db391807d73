// The whole GPT against finite differences in double precision: the gradient of the mean loss with respect to
// every parameter of a tiny model equals the central difference of the loss.
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/kernels.h"
#include "core/rng.h"
#include "exec/executor.h"
#include "model/gpt.h"
#include "exec_util.h"

namespace tt {
namespace {

TEST(GptGradcheck, EveryParameterMatchesFiniteDifferences) {
  const ModelConfig cfg{.vocab = 11, .layers = 2, .dim = 8, .heads = 2, .seq = 5};
  const int B = 2;
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  auto gr = testing::make_gpt(*be, cfg, B, DType::kF64);
  ASSERT_TRUE(gr.is_ok()) << gr.status().to_string();
  Executor& gpt = *gr.value();
  // Larger than the default init so every path carries signal; LayerNorm params perturbed away from 1/0.
  Rng rng(42);
  std::vector<double> params(static_cast<size_t>(gpt.num_params()));
  for (auto& p : params) p = 0.3 * rng.normal();
  ASSERT_TRUE(gpt.upload_params(params.data()).is_ok());
  std::vector<int32_t> tokens(B * cfg.seq), targets(B * cfg.seq);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  for (auto& t : targets) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  be->copy_h2d(gpt.tokens(), tokens.data(), be->compute_stream());
  be->copy_h2d(gpt.targets(), targets.data(), be->compute_stream());

  std::vector<double> losses(B * cfg.seq);
  auto loss_at = [&](const std::vector<double>& p) {
    EXPECT_TRUE(gpt.upload_params(p.data()).is_ok());
    gpt.forward();
    be->copy_d2h(losses.data(), gpt.losses(), be->compute_stream());
    EXPECT_TRUE(be->compute_stream().synchronize().is_ok());
    double s = 0;
    for (double l : losses) s += l;
    return s / static_cast<double>(losses.size());
  };

  loss_at(params);
  gpt.backward();
  std::vector<double> grads(params.size());
  ASSERT_TRUE(gpt.download_grads(grads.data()).is_ok());

  const double h = 1e-5;
  std::vector<double> numeric(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<double> p = params;
    p[i] = params[i] + h;
    const double lp = loss_at(p);
    p[i] = params[i] - h;
    const double lm = loss_at(p);
    numeric[i] = (lp - lm) / (2 * h);
  }
  for (const ParamInfo& p : gpt.params()) {
    EXPECT_TRUE(testing::all_close("d " + p.name, grads.data() + p.offset, numeric.data() + p.offset,
                                   static_cast<size_t>(p.shape.numel()), 1e-8, 1e-6));
  }
}

// The LM head in chunks of rows (Note [LM head in chunks]) gives the losses and gradients of the whole-batch head,
// and forward_backward() those of forward() + backward().
TEST(GptLmHead, ChunksAndFusedStepMatchTheWholeBatch) {
  const ModelConfig cfg{.vocab = 200, .layers = 1, .dim = 16, .heads = 2, .seq = 12};
  const int B = 3;  // 36 rows: chunks of 7 leave a remainder of 1
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  Rng rng(7);
  std::vector<int32_t> tokens(B * cfg.seq), targets(B * cfg.seq);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  for (auto& t : targets) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  std::vector<double> params;
  auto run = [&](int64_t chunk_rows, bool fused, std::vector<double>* losses, std::vector<double>* grads) {
    ExecSpec options;
    options.lm_chunk_rows = chunk_rows;
    auto gr = testing::make_gpt(*be, cfg, B, DType::kF64, options);
    ASSERT_TRUE(gr.is_ok()) << gr.status().to_string();
    Executor& gpt = *gr.value();
    if (params.empty()) {
      params.resize(static_cast<size_t>(gpt.num_params()));
      for (auto& p : params) p = 0.2 * rng.normal();
    }
    ASSERT_TRUE(gpt.upload_params(params.data()).is_ok());
    be->copy_h2d(gpt.tokens(), tokens.data(), be->compute_stream());
    be->copy_h2d(gpt.targets(), targets.data(), be->compute_stream());
    if (fused) {
      gpt.forward_backward();
    } else {
      gpt.forward();
      gpt.backward();
    }
    losses->resize(static_cast<size_t>(B * cfg.seq));
    grads->resize(params.size());
    be->copy_d2h(losses->data(), gpt.losses(), be->compute_stream());
    ASSERT_TRUE(gpt.download_grads(grads->data()).is_ok());
  };
  std::vector<double> l_full, g_full, l_chunk, g_chunk, l_fused, g_fused;
  run(0, false, &l_full, &g_full);
  run(7, false, &l_chunk, &g_chunk);
  run(7, true, &l_fused, &g_fused);
  EXPECT_EQ(model_default_lm_chunk_rows(cfg, B, DType::kF64), B * cfg.seq);
  EXPECT_TRUE(testing::all_close("losses, chunked", l_chunk, l_full, 1e-13, 1e-12));
  EXPECT_TRUE(testing::all_close("grads, chunked", g_chunk, g_full, 1e-13, 1e-10));
  EXPECT_TRUE(testing::all_close("losses, fused step", l_fused, l_chunk, 0, 0));
  EXPECT_TRUE(testing::all_close("grads, fused step", g_fused, g_chunk, 0, 0));
}

TEST(GptLmHead, DefaultChunksBoundTheLogitsBuffer) {
  const ModelConfig gpt2{.vocab = 50257, .layers = 12, .dim = 768, .heads = 12, .seq = 1024};
  EXPECT_EQ(gpt2.padded_vocab(), 50304);
  const int64_t rows = model_default_lm_chunk_rows(gpt2, 16, DType::kBF16);
  EXPECT_EQ(rows % 64, 0);
  EXPECT_LE(rows * gpt2.padded_vocab() * 2, int64_t(512) << 20);
  EXPECT_EQ(rows, 4096);  // 16384 rows in 4 equal chunks
  EXPECT_EQ(model_default_lm_chunk_rows(gpt2, 32, DType::kBF16), 4736);  // 32768 rows in 7 chunks, the last short
  EXPECT_EQ(model_default_lm_chunk_rows(gpt2, 1, DType::kBF16), 1024);   // everything at once
  for (const TensorRequest& r : model_fixed_tensors(gpt2, 16, DType::kBF16, 0))
    if (r.name == "logits") {
      EXPECT_EQ(r.shape.numel(), rows * gpt2.padded_vocab());
    }
}

// Note [master on host]: with the master in host memory the device keeps only the bf16 compute copy (2 bytes a
// parameter), and the host holds the f32 master and its bf16 staging copy. On the device the master is the compute
// copy and its low halves (Note [master in two halves] in core/bf16.h): 4 bytes a parameter, not 6.
TEST(GptMasterOnHost, DeviceKeepsOnlyTheComputeCopy) {
  const ModelConfig cfg{.vocab = 256, .layers = 2, .dim = 64, .heads = 2, .seq = 32};
  const int64_t P = model_num_params(cfg);
  auto spec = [&](bool host, DType dt) {
    ExecSpec s;
    s.model = cfg;
    s.batch = 2;
    s.compute = dt;
    s.plan = Plan::resolve("in-core", cfg.layers, 2).value();
    if (host) s.plan.optimizer = OptimizerPlacement::kCpu;
    return Executor::inventory(s).value();
  };
  for (const bool host : {false, true}) {
    int64_t param_bytes = 0;
    const Inventory inv = spec(host, DType::kBF16);
    for (const InventoryEntry& r : inv.entries()) {
      if (r.cls != TensorClass::kParam || r.where != Inventory::kDevice) continue;
      param_bytes += r.shape.numel() * static_cast<int64_t>(dtype_size(r.dtype));
      EXPECT_TRUE(r.name == "params.compute" || (!host && r.name == "params.low")) << r.name;
      EXPECT_EQ(r.dtype, DType::kBF16);
    }
    EXPECT_EQ(param_bytes, host ? 2 * P : 4 * P);
  }
  EXPECT_EQ(spec(true, DType::kBF16).of(Inventory::kHost, TensorClass::kParam),
            memory::host_alloc_size(static_cast<size_t>(P) * 4) + memory::host_alloc_size(static_cast<size_t>(P) * 2));
  // f32 compute: the staging copy is the master itself.
  EXPECT_EQ(spec(true, DType::kF32).of(Inventory::kHost, TensorClass::kParam),
            memory::host_alloc_size(static_cast<size_t>(P) * 4));
}

// Note [parallel init]: every value depends on the seed and its flat index only (the same bits with 1 and 3
// threads), and follows the specification: N(0, 0.02) matrices and embeddings, N(0, 0.02 / sqrt(2L)) residual
// projections, zero vocabulary padding rows, LayerNorm weights 1, biases 0.
TEST(GptInit, ValuesDependOnSeedAndIndexOnlyAndFollowTheSpecification) {
  const ModelConfig cfg{.vocab = 200, .layers = 3, .dim = 256, .heads = 4, .seq = 8};  // 2.4M parameters: 3 chunks
  auto be = testing::make_cpu_backend(int64_t(256) << 20, 1);
  auto gr = testing::make_gpt(*be, cfg, 1, DType::kF32);
  ASSERT_TRUE(gr.is_ok()) << gr.status().to_string();
  Executor& gpt = *gr.value();
  const size_t n = static_cast<size_t>(gpt.num_params());
  ASSERT_GT(n, size_t(2) << 20);
  auto init = [&](uint64_t seed, int threads) {
    cpu::set_num_threads(threads);
    EXPECT_TRUE(gpt.init_params(seed).is_ok());
    std::vector<float> p(n);
    EXPECT_TRUE(gpt.download_params(p.data()).is_ok());
    return p;
  };
  const std::vector<float> one = init(7, 1), three = init(7, 3), other = init(8, 3);
  cpu::set_num_threads(1);
  ASSERT_EQ(std::memcmp(one.data(), three.data(), n * sizeof(float)), 0) << "the values depend on the thread count";
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += one[i] == other[i] && one[i] != 0 && one[i] != 1;
  EXPECT_LT(same, n / 1000) << "seeds 7 and 8 give the same values";
  for (const ParamInfo& p : gpt.params()) {
    const float* v = one.data() + p.offset;
    const int64_t count = p.shape.numel();
    if (p.shape.rank() != 2) {
      const bool ln_weight = p.name.ends_with("ln1.w") || p.name.ends_with("ln2.w") || p.name == "lnf.w";
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(v[i], ln_weight ? 1.0f : 0.0f) << p.name << "[" << i << "]";
      continue;
    }
    const int64_t real = p.name == "wte" ? int64_t(cfg.vocab) * cfg.dim : count;
    for (int64_t i = real; i < count; ++i) ASSERT_EQ(v[i], 0.0f) << p.name << " padding [" << i << "]";
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < real; ++i) {
      sum += v[i];
      sq += double(v[i]) * v[i];
    }
    const double mean = sum / double(real), sd = std::sqrt(sq / double(real) - mean * mean);
    const bool residual = p.name.ends_with("attn.proj.w") || p.name.ends_with("mlp.proj.w");
    const double want = residual ? 0.02 / std::sqrt(2.0 * cfg.layers) : 0.02;
    // The sample std within 5 of its standard errors (a relative 1/sqrt(2 n)) of the true one, the mean near 0.
    EXPECT_NEAR(sd, want, 5 * want / std::sqrt(2.0 * double(real))) << p.name;
    EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(double(real))) << p.name;
  }
}

// Note [tensor parallel]: a rank's parameters are exactly its slices of the whole model's: QKV's rows of its heads
// (in Q, K and V), the MLP's rows of its hidden units, the projections' matching input columns; the rest whole. The
// ranks' shards put back make the whole model again, and each sharded element belongs to exactly one rank.
TEST(GptTensorParallel, ShardsAreTheWholeModelsSlices) {
  const ModelConfig whole{.vocab = 100, .layers = 2, .dim = 16, .heads = 4, .seq = 8};
  const int64_t n = model_num_params(whole), C = whole.dim;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i);
  std::map<std::string, ParamInfo> by_name;
  for (const ParamInfo& p : model_param_layout(whole)) by_name[p.name] = p;
  for (auto [tp, split_vocab] : {std::pair{2, false}, {4, false}, {2, true}, {4, true}}) {
    SCOPED_TRACE(split_vocab ? "vocabulary split too" : "blocks only");
    ModelConfig cfg = whole;
    cfg.tp = tp;
    cfg.split_vocab = split_vocab;
    const std::vector<ParamInfo> layout = model_param_layout(cfg);
    int64_t sharded = 0, replicated = 0;
    for (const ParamInfo& p : layout) (p.sharded ? sharded : replicated) += p.shape.numel();
    EXPECT_EQ(sharded * tp + replicated, n) << tp;
    EXPECT_EQ(model_num_params(cfg), sharded + replicated);
    std::vector<float> rebuilt(static_cast<size_t>(n), -1.0f);
    std::vector<int> owners(static_cast<size_t>(n), 0);
    for (int r = 0; r < tp; ++r) {
      std::vector<float> local(static_cast<size_t>(model_num_params(cfg)));
      model_take_shard(cfg, r, values.data(), local.data(), sizeof(float));
      // Spot checks against the whole layout: element [i, j] of the local tensor is the whole one's at [I, J].
      auto at = [&](const std::string& name, int64_t i, int64_t j) {
        const ParamInfo* p = nullptr;
        for (const ParamInfo& q : layout)
          if (q.name == name) p = &q;
        const int64_t cols = p->shape.rank() == 2 ? p->shape[1] : 1;
        return local[static_cast<size_t>(p->offset + i * cols + j)];
      };
      auto whole_at = [&](const std::string& name, int64_t i, int64_t j) {
        const ParamInfo& p = by_name.at(name);
        const int64_t cols = p.shape.rank() == 2 ? p.shape[1] : 1;
        return values[static_cast<size_t>(p.offset + i * cols + j)];
      };
      const int64_t Cl = C / tp, Fl = 4 * C / tp;
      EXPECT_EQ(at("h.1.attn.qkv.w", 0, 3), whole_at("h.1.attn.qkv.w", r * Cl, 3));               // Q of head block r
      EXPECT_EQ(at("h.1.attn.qkv.w", Cl + 1, 2), whole_at("h.1.attn.qkv.w", C + r * Cl + 1, 2));  // its K
      EXPECT_EQ(at("h.1.attn.qkv.b", 2 * Cl, 0), whole_at("h.1.attn.qkv.b", 2 * C + r * Cl, 0));  // its V bias
      EXPECT_EQ(at("h.0.attn.proj.w", 5, 1), whole_at("h.0.attn.proj.w", 5, r * Cl + 1));
      EXPECT_EQ(at("h.0.mlp.fc.w", 3, 7), whole_at("h.0.mlp.fc.w", r * Fl + 3, 7));
      EXPECT_EQ(at("h.0.mlp.proj.w", 2, Fl - 1), whole_at("h.0.mlp.proj.w", 2, r * Fl + Fl - 1));
      EXPECT_EQ(at("h.0.attn.proj.b", 4, 0), whole_at("h.0.attn.proj.b", 4, 0));  // replicated
      const int64_t Vl = whole.padded_vocab() / tp;
      if (split_vocab) EXPECT_EQ(at("wte", 9, 3), whole_at("wte", r * Vl + 9, 3));
      else EXPECT_EQ(at("wte", 9, 3), whole_at("wte", 9, 3));
      EXPECT_EQ(at("wpe", 5, 2), whole_at("wpe", 5, 2));
      model_put_shard(cfg, r, local.data(), rebuilt.data(), sizeof(float));
      for (const ShardCopy& c : model_shard_copies(cfg, r))
        for (int64_t k = 0; k < c.count; ++k) ++owners[static_cast<size_t>(c.whole + k)];
    }
    EXPECT_EQ(rebuilt, values) << tp;
    for (const ParamInfo& p : model_param_layout(whole)) {
      const bool split = (split_vocab && p.name == "wte") ||
                         (p.layer >= 0 && (p.name.ends_with(".w") ? !p.name.ends_with("ln1.w") && !p.name.ends_with("ln2.w")
                                                                  : p.name.ends_with("qkv.b") || p.name.ends_with("fc.b")));
      for (int64_t k = 0; k < p.shape.numel(); ++k)
        ASSERT_EQ(owners[static_cast<size_t>(p.offset + k)], split ? 1 : tp) << p.name << " tp " << tp;
    }
    // A block's replicated parameters come first: the gradient norm's two parts (ParamSegments::shard_begin).
    const ParamSegments segs = model_segments(cfg);
    // The embeddings: wpe whole, then this rank's rows of wte when the vocabulary is split.
    EXPECT_EQ(segs.shard_begin[0], split_vocab ? segs.offset[0] + whole.seq * C : segs.offset[0] + segs.size[0]);
    EXPECT_EQ(segs.shard_begin[1] - segs.offset[1], 6 * C);          // ln1 (2C), attn.proj.b, ln2 (2C), mlp.proj.b
  }
  ModelConfig bad = whole;
  bad.tp = 3;
  EXPECT_NE(bad.validate().message().find("4 attention heads cannot be split 3 ways"), std::string::npos);
  ModelConfig alone = whole;
  alone.split_vocab = true;  // without tensor-parallel ranks
  EXPECT_NE(alone.validate().message().find("the vocabulary (128 rows, padded) cannot be split 1 ways"),
            std::string::npos) << alone.validate().message();
}

}  // namespace
}  // namespace tt
