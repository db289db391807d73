// model/llama against a reference written here from the definitions (RMSNorm, rotary embeddings with Hugging Face's
// frequencies and Llama 3's scaling, grouped-query causal attention, SwiGLU, tied or untied head), in f64 on plain
// loops, sharing nothing with the model but the parameter layout:
// - the CPU backend's f64 losses equal the reference's (to 1e-12);
// - every gradient the backward writes equals the reference's central differences;
// - across variants: grouped-query (KV 2 of 4), multi-query (KV 1), multi-head, QKV biases, an untied head,
//   Llama 3's frequency scaling;
// - with a loss mask (Note [loss mask]: targets -1 where the loss does not count, the loss scale 1 / the targets
//   that count), the loss is the mean over the targets that count and the gradients are its differences.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "exec_util.h"
#include "model/llama.h"

namespace tt {
namespace {

// The reference model over a flat parameter vector in the family's layout.
class Reference {
 public:
  explicit Reference(const ModelConfig& cfg) : cfg_(cfg) {
    for (const ParamInfo& p : model_param_layout(cfg)) at_[p.name] = p.offset;
  }

  // Mean cross-entropy of the targets given tokens ([B, T] each) under parameters p, over the targets >= 0.
  double loss(const std::vector<double>& p, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
              int B) const {
    const int T = cfg_.seq, C = cfg_.dim, H = cfg_.heads, KV = cfg_.kv_head_count(), hs = C / H,
              F = llama_ffn(cfg_), V = cfg_.vocab, Q = (H + 2 * KV) * hs;
    const double* wte = &p[at_.at("wte")];
    const double* head = &p[at_.at(cfg_.tied_embeddings ? "wte" : "lm_head.w")];
    double total = 0;
    int64_t counted = 0;
    for (int b = 0; b < B; ++b) {
      std::vector<double> x(static_cast<size_t>(T) * C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t * C + c] = wte[static_cast<size_t>(tokens[b * T + t]) * C + c];
      for (int l = 0; l < cfg_.layers; ++l) {
        const std::string pre = "h." + std::to_string(l) + ".";
        const std::vector<double> h = rmsnorm(x, &p[at_.at(pre + "attn_norm.w")], T);
        std::vector<double> qkv = linear(h, &p[at_.at(pre + "attn.qkv.w")],
                                         cfg_.qkv_bias ? &p[at_.at(pre + "attn.qkv.b")] : nullptr, T, C, Q);
        for (int t = 0; t < T; ++t)
          for (int head_i = 0; head_i < H + KV; ++head_i) rotate(&qkv[static_cast<size_t>(t) * Q + head_i * hs], t);
        std::vector<double> att(static_cast<size_t>(T) * C, 0.0);
        for (int hq = 0; hq < H; ++hq) {
          const int kvh = hq / (H / KV);
          for (int t = 0; t < T; ++t) {
            std::vector<double> s(static_cast<size_t>(t) + 1);
            double m = -1e300;
            for (int j = 0; j <= t; ++j) {
              double dot = 0;
              for (int c = 0; c < hs; ++c) dot += qkv[t * Q + hq * hs + c] * qkv[j * Q + C + kvh * hs + c];
              s[j] = dot / std::sqrt(static_cast<double>(hs));
              m = std::max(m, s[j]);
            }
            double z = 0;
            for (double& e : s) z += e = std::exp(e - m);
            for (int j = 0; j <= t; ++j)
              for (int c = 0; c < hs; ++c)
                att[t * C + hq * hs + c] += s[j] / z * qkv[j * Q + C + KV * hs + kvh * hs + c];
          }
        }
        add(x, linear(att, &p[at_.at(pre + "attn.proj.w")], nullptr, T, C, C));
        const std::vector<double> h2 = rmsnorm(x, &p[at_.at(pre + "mlp_norm.w")], T);
        const std::vector<double> gu = linear(h2, &p[at_.at(pre + "mlp.gate_up.w")], nullptr, T, C, 2 * F);
        std::vector<double> act(static_cast<size_t>(T) * F);
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < F; ++i) {
            const double g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
            act[t * F + i] = g / (1 + std::exp(-g)) * u;
          }
        add(x, linear(act, &p[at_.at(pre + "mlp.down.w")], nullptr, T, F, C));
      }
      const std::vector<double> hf = rmsnorm(x, &p[at_.at("norm.w")], T);
      for (int t = 0; t < T; ++t) {
        std::vector<double> logit(static_cast<size_t>(V));
        double m = -1e300;
        for (int v = 0; v < V; ++v) {
          double dot = 0;
          for (int c = 0; c < C; ++c) dot += hf[t * C + c] * head[static_cast<size_t>(v) * C + c];
          logit[v] = dot;
          m = std::max(m, dot);
        }
        double z = 0;
        for (double e : logit) z += std::exp(e - m);
        if (targets[b * T + t] < 0) continue;
        total += m + std::log(z) - logit[targets[b * T + t]];
        ++counted;
      }
    }
    return total / static_cast<double>(counted);
  }

 private:
  std::vector<double> rmsnorm(const std::vector<double>& x, const double* w, int T) const {
    const int C = cfg_.dim;
    std::vector<double> out(x.size());
    for (int t = 0; t < T; ++t) {
      double ms = 0;
      for (int c = 0; c < C; ++c) ms += x[t * C + c] * x[t * C + c];
      const double r = 1 / std::sqrt(ms / C + cfg_.norm_eps);
      for (int c = 0; c < C; ++c) out[t * C + c] = x[t * C + c] * r * w[c];
    }
    return out;
  }
  // out[t, o] = in[t, :] . w[o, :] + b[o]
  static std::vector<double> linear(const std::vector<double>& in, const double* w, const double* bias, int T, int I,
                                    int O) {
    std::vector<double> out(static_cast<size_t>(T) * O);
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < O; ++o) {
        double s = bias ? bias[o] : 0.0;
        for (int i = 0; i < I; ++i) s += in[t * I + i] * w[static_cast<size_t>(o) * I + i];
        out[t * O + o] = s;
      }
    return out;
  }
  static void add(std::vector<double>& x, const std::vector<double>& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  // Hugging Face's rotate_half convention at position t: (x_i, x_{i + hs/2}) turned by t * inv_freq_i.
  void rotate(double* x, int t) const {
    const int hs = cfg_.head_dim(), half = hs / 2;
    for (int i = 0; i < half; ++i) {
      double f = 1 / std::pow(cfg_.rope_theta, 2.0 * i / hs);
      const RopeScaling& r = cfg_.rope_scaling;
      if (r.factor > 0) {  // Llama 3: low frequencies slowed by the factor, the band between blended
        const double wavelen = 2 * M_PI / f, low = r.original_max_position / r.low_freq_factor,
                     high = r.original_max_position / r.high_freq_factor;
        if (wavelen > low) {
          f /= r.factor;
        } else if (wavelen >= high) {
          const double smooth = (r.original_max_position / wavelen - r.low_freq_factor) /
                                (r.high_freq_factor - r.low_freq_factor);
          f = (1 - smooth) * f / r.factor + smooth * f;
        }
      }
      const double c = std::cos(t * f), s = std::sin(t * f), a = x[i], b = x[half + i];
      x[i] = a * c - b * s;
      x[half + i] = b * c + a * s;
    }
  }

  ModelConfig cfg_;
  std::map<std::string, int64_t> at_;
};

struct Case {
  std::string what;
  ModelConfig cfg;
};

std::vector<Case> cases() {
  const ModelConfig base{.family = "llama", .vocab = 40, .layers = 2, .dim = 16, .heads = 4, .seq = 8,
                         .kv_heads = 2, .ffn = 24, .tied_embeddings = false, .qkv_bias = true};
  ModelConfig mqa = base;
  mqa.kv_heads = 1;
  mqa.tied_embeddings = true;
  mqa.qkv_bias = false;
  mqa.rope_theta = 500000;
  // Llama 3's scaling, with an original length short enough that the model's 8 positions see all three bands.
  mqa.rope_scaling = {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position = 16};
  ModelConfig mha = base;
  mha.kv_heads = 0;
  mha.norm_eps = 1e-6;
  return {{"grouped-query, QKV bias, untied head", base}, {"multi-query, tied, Llama 3 scaling", mqa},
          {"multi-head, eps 1e-6", mha}};
}

void check_against_reference(bool masked) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.what);
    const ModelConfig& cfg = c.cfg;
    ASSERT_TRUE(cfg.validate().is_ok()) << cfg.validate().to_string();
    const int B = 2, T = cfg.seq;
    auto be = testing::make_cpu_backend();
    auto ex = testing::make_gpt(*be, cfg, B, DType::kF64);
    ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
    Executor& x = *ex.value();
    // Every parameter random (norm weights and biases too), the vocabulary padding rows zero.
    const std::vector<ParamInfo> layout = model_param_layout(cfg);
    std::vector<double> p(static_cast<size_t>(model_num_params(cfg)));
    Rng rng(5);
    for (double& v : p) v = 0.3 * rng.normal();
    for (const ParamInfo& info : layout) {
      if (info.name.ends_with("norm.w"))
        for (int64_t i = 0; i < info.shape.numel(); ++i) p[static_cast<size_t>(info.offset + i)] += 1.0;
      if (info.name == "wte" || info.name == "lm_head.w")
        for (int64_t i = int64_t(cfg.vocab) * cfg.dim; i < info.shape.numel(); ++i) p[static_cast<size_t>(info.offset + i)] = 0;
    }
    ASSERT_TRUE(x.upload_params(p.data()).is_ok());
    std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
    for (auto& t : tokens) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
    for (auto& t : targets) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
    int64_t counted = static_cast<int64_t>(targets.size());
    if (masked) {  // about 40% of the targets do not count, the first among them
      counted = 0;
      for (size_t i = 0; i < targets.size(); ++i) {
        if (i == 0 || rng.uniform() < 0.4) targets[i] = -1;
        counted += targets[i] >= 0 ? 1 : 0;
      }
      x.model().set_loss_scale(1.0f / static_cast<float>(counted));
    }
    be->copy_h2d(x.tokens(), tokens.data(), be->compute_stream());
    be->copy_h2d(x.targets(), targets.data(), be->compute_stream());
    x.forward_backward();
    std::vector<double> losses(tokens.size()), grads(p.size());
    be->copy_d2h(losses.data(), x.losses(), be->compute_stream());
    ASSERT_TRUE(be->compute_stream().synchronize().is_ok());
    ASSERT_TRUE(x.download_grads(grads.data()).is_ok());
    double mean = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      if (targets[i] < 0) {
        EXPECT_EQ(losses[i], 0.0) << "a target that does not count has loss 0";
      }
      mean += losses[i];
    }
    mean /= static_cast<double>(counted);

    const Reference ref(cfg);
    const double want = ref.loss(p, tokens, targets, B);
    EXPECT_NEAR(mean, want, 1e-12 * std::abs(want)) << "loss";
    // Central differences of the reference over every parameter but the padding rows (no gradient by contract).
    int checked = 0, bad = 0;
    for (const ParamInfo& info : layout) {
      const int64_t n = info.name == "wte" || info.name == "lm_head.w" ? int64_t(cfg.vocab) * cfg.dim
                                                                        : info.shape.numel();
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(info.offset + i);
        const double h = 1e-5, keep = p[k];
        p[k] = keep + h;
        const double up = ref.loss(p, tokens, targets, B);
        p[k] = keep - h;
        const double down = ref.loss(p, tokens, targets, B);
        p[k] = keep;
        const double fd = (up - down) / (2 * h);
        ++checked;
        if (std::abs(grads[k] - fd) > 1e-8 + 1e-6 * std::abs(fd) && ++bad <= 5)
          ADD_FAILURE() << info.name << "[" << i << "]: backward " << grads[k] << ", differences " << fd;
      }
      for (int64_t i = n; i < info.shape.numel(); ++i)
        EXPECT_EQ(grads[static_cast<size_t>(info.offset + i)], 0.0) << info.name << " padding row element " << i;
    }
    EXPECT_EQ(bad, 0) << bad << " of " << checked << " gradients differ";
    EXPECT_GT(checked, 3000);
  }
}

TEST(LlamaReference, LossesAndEveryGradientAreTheDefinitions) { check_against_reference(false); }

TEST(LlamaReference, WithALossMaskTheLossAndGradientsAreThoseOfTheTargetsThatCount) {
  check_against_reference(true);
}

// The rotary table is Hugging Face's: with f32 angles, the inverse frequencies and position products rounded to f32
// as LlamaRotaryEmbedding computes them; in f64, exact.
TEST(LlamaReference, RotaryTableHasTheFrequenciesOfEachHeadPair) {
  const ModelConfig cfg{.family = "llama", .vocab = 64, .layers = 1, .dim = 64, .heads = 2, .seq = 300,
                        .rope_theta = 500000};
  const int hs = cfg.head_dim(), half = hs / 2;
  for (const bool f32 : {false, true}) {
    const std::vector<double> t = llama_rope_table(cfg, f32);
    ASSERT_EQ(t.size(), static_cast<size_t>(cfg.seq) * hs);
    for (int p : {0, 1, 17, 299})
      for (int i : {0, 5, half - 1}) {
        const double angle = p / std::pow(500000.0, 2.0 * i / hs);
        // f32 angles differ from exact ones by the rounding of p * f (relative 2^-24 each) only.
        const double tol = f32 ? 1e-7 * std::max(1.0, std::abs(angle)) : 1e-12;
        EXPECT_NEAR(t[static_cast<size_t>(p) * hs + i], std::cos(angle), tol) << p << " " << i;
        EXPECT_NEAR(t[static_cast<size_t>(p) * hs + half + i], std::sin(angle), tol) << p << " " << i;
      }
  }
}

}  // namespace
}  // namespace tt
