#include "apps/generate.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/bf16.h"
#include "core/rng.h"
#include "core/tensorfile.h"
#include "core/units.h"
#include "exec/checkpoint.h"
#include "exec/hf.h"
#include "data/dataset.h"
#include "data/npy.h"
#include "data/sampler.h"
#include "data/tokenize.h"
#include "exec/trainer.h"

namespace tt {

int32_t draw_token(const float* logits, int vocab, double temperature, int top_k, double u) {
  const double t = std::max(temperature, 1e-6);
  if (top_k <= 0 || top_k >= vocab) {
    // Every token, in token order: no sort of the vocabulary (50257 tokens for GPT-2) for each token drawn, and the
    // exponentials in float (in double they took a large share of a token's time with the KV cache); the sums in
    // double.
    const float top = *std::max_element(logits, logits + vocab), inv_t = static_cast<float>(1.0 / t);
    std::vector<float> p(static_cast<size_t>(vocab));
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += p[static_cast<size_t>(i)] = std::exp((logits[i] - top) * inv_t);
    double acc = 0;
    int last = 0;
    for (int i = 0; i < vocab; ++i) {
      if (p[static_cast<size_t>(i)] == 0) continue;
      last = i;
      acc += p[static_cast<size_t>(i)] / sum;
      if (u < acc) return i;
    }
    return last;  // u beyond the rounded total: the last token that can be drawn
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const size_t k = static_cast<size_t>(top_k);
  // The k likeliest, the likeliest first; ties keep the lower token first.
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> p(k);
  const double top = static_cast<double>(logits[order[0]]);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / t);
  double acc = 0;
  for (size_t i = 0; i < k; ++i) {
    acc += p[i] / sum;
    if (u < acc) return order[i];
  }
  return order[k - 1];
}

namespace {
// The model of checkpoint `path` in-core at `batch` sequences, its parameters loaded.
struct LoadedModel {
  CheckpointState st;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Executor> ex;
};
Result<LoadedModel> load_model(const std::string& path, int batch, const std::string& backend,
                               const std::string& dtype, int threads, const char* what, bool allow_nonfinite,
                               bool f32_grads = false) {
  LoadedModel m;
  {
    TT_ASSIGN_OR_RETURN(TensorFileReader reader, TensorFileReader::open(path));
    TT_ASSIGN_OR_RETURN(m.st, checkpoint_state_from_meta(reader.meta(), path));
  }
  TrainConfig tc;
  tc.model = m.st.model;
  tc.batch = batch;
  tc.backend = backend;
  tc.dtype = dtype;
  tc.threads = threads;
  tc.plan = "in-core";
  tc.optimizer = OptimizerPlacement::kDevice;
  if (f32_grads) tc.grad_dtype = GradDtype::kF32;  // (Note [bf16 gradients]: gradients to compare, in full)
  TT_ASSIGN_OR_RETURN(RunSpec spec, resolve_run(tc));
  TT_RETURN_IF(!spec.fits_device, kOutOfMemory,
               "%s needs the model in-core at batch %d: %s of device memory (%s), but the budget is %s", what, batch,
               format_bytes(spec.inventory.total(Inventory::kDevice)).c_str(),
               spec.inventory.describe(Inventory::kDevice).c_str(), format_bytes(spec.budget).c_str());
  TT_ASSIGN_OR_RETURN(m.be, create_run_backend(tc, spec));
  TT_ASSIGN_OR_RETURN(m.ex, Executor::create(*m.be, spec.exec));
  TT_TRY(load_checkpoint_params(path, *m.ex, allow_nonfinite).status());
  return m;
}

// n values of dtype dt (a model's compute dtype: f32, bf16 or f64) at src into dst as f32.
void to_f32(const unsigned char* src, DType dt, size_t n, float* dst) {
  if (dt == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = bf16_to_float(h);
    }
  } else if (dt == DType::kF64) {
    for (size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      dst[i] = static_cast<float>(d);
    }
  } else {
    std::memcpy(dst, src, 4 * n);
  }
}

// eval --logits-out: the logits of each batch's B*T positions, the vocabulary's columns (not the padding), f32, into
// an .npy file written as they come, chunk positions at a time (Model::compute_logits_rows after the forward).
class LogitsWriter {
 public:
  static Result<LogitsWriter> open(const std::string& path, Backend& be, Model& model, int64_t windows,
                                   int64_t chunk_rows) {
    const ModelConfig& cfg = model.config();
    LogitsWriter w(be, model);
    w.rows_ = static_cast<int64_t>(model.batch()) * cfg.seq;
    w.vocab_ = cfg.vocab;
    w.padded_ = cfg.padded_vocab();
    const int64_t es = static_cast<int64_t>(dtype_size(model.dtype()));
    w.chunk_ = std::min(chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, (int64_t(64) << 20) / (w.padded_ * es)),
                        w.rows_);
    TT_ASSIGN_OR_RETURN(w.dev_, be.pool().allocate({w.chunk_, w.padded_}, model.dtype(), TensorClass::kWorkspace,
                                                   "eval.logits"));
    w.raw_.resize(static_cast<size_t>(w.chunk_ * w.padded_ * es));
    w.f32_.resize(static_cast<size_t>(w.chunk_ * w.vocab_));
    TT_ASSIGN_OR_RETURN(std::string header, data::npy_header("<f4", {windows, cfg.seq, cfg.vocab}));
    TT_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::open(path));
    TT_TRY(f.write(header.data(), header.size()));
    w.file_.emplace(std::move(f));
    return w;
  }
  // The last forward's logits, appended.
  Status write() {
    const size_t es = dtype_size(model_->dtype());
    for (int64_t r0 = 0; r0 < rows_; r0 += chunk_) {
      const int64_t n = std::min(chunk_, rows_ - r0);
      const Tensor out = dev_.view(0, {n, padded_});
      model_->compute_logits_rows(out, r0);
      be_->copy_d2h(raw_.data(), out, be_->compute_stream());
      TT_TRY(be_->compute_stream().synchronize());
      for (int64_t i = 0; i < n; ++i)
        to_f32(raw_.data() + static_cast<size_t>(i * padded_) * es, model_->dtype(), static_cast<size_t>(vocab_),
               f32_.data() + i * vocab_);
      TT_TRY(file_->write(f32_.data(), static_cast<size_t>(n * vocab_) * sizeof(float)));
    }
    return Status::ok();
  }
  Status commit() { return file_->commit(); }

 private:
  LogitsWriter(Backend& be, Model& model) : be_(&be), model_(&model) {}
  Backend* be_;
  Model* model_;
  int64_t rows_ = 0, vocab_ = 0, padded_ = 0, chunk_ = 0;
  Tensor dev_;
  std::vector<unsigned char> raw_;
  std::vector<float> f32_;
  std::optional<AtomicFile> file_;
};
}  // namespace

Result<EvalResult> evaluate_checkpoint(const std::string& where, const EvalOptions& o) {
  TT_RETURN_IF(o.batch < 1 || o.batches < 0, kInvalidArgument, "--batch must be >= 1 and --batches >= 0");
  EvalResult out;
  TT_ASSIGN_OR_RETURN(out.checkpoint, resolve_checkpoint(where));
  TT_RETURN_IF(o.split != "all" && o.split != "val" && o.split != "train", kInvalidArgument,
               "--split %s: all, val or train", o.split.c_str());
  const double val_fraction = o.split == "all" ? 0.0 : o.val_fraction;
  data::TokenDataset ds;
  if (o.tokenizer.empty()) {
    TT_ASSIGN_OR_RETURN(ds, data::TokenDataset::load(o.data, val_fraction));
  } else {
    // Text through the model's tokenizer, as `tokenize` would write it (each file a document after its start).
    TT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(o.tokenizer));
    data::Tokens train, val;
    TT_TRY(data::tokenize_in_memory({o.data}, tok, val_fraction, &train, &val));
    ds = data::TokenDataset::from_tokens(std::move(train), std::move(val), tok.vocab());
  }
  const bool grads = !o.grads_out.empty();
  TT_ASSIGN_OR_RETURN(LoadedModel m, load_model(out.checkpoint, o.batch, o.backend, o.dtype, o.threads, "evaluation",
                                                 o.allow_nonfinite, grads));
  out.step = m.st.step;
  const ModelConfig& cfg = m.st.model;
  // A tokenizer's vocabulary may be below the model's (Qwen2 pads its embedding past its tokenizer), never above.
  TT_RETURN_IF(o.tokenizer.empty() ? ds.vocab() != cfg.vocab : ds.vocab() > cfg.vocab, kFailedPrecondition,
               "%s has vocabulary %d but the model of %s has %d (a text model reads text, a token model token "
               "shards or text with --tokenizer)",
               o.tokenizer.empty() ? o.data.c_str() : o.tokenizer.c_str(), ds.vocab(), out.checkpoint.c_str(),
               cfg.vocab);
  data::Tokens tokens = o.split == "val" ? ds.val() : ds.train();
  if (o.split == "all") tokens.append(ds.val());
  const int B = o.batch, T = cfg.seq;
  const int64_t available = data::val_batches_available(tokens, B, T);
  TT_RETURN_IF(available == 0, kFailedPrecondition,
               "%s holds %zu tokens: fewer than one batch of %d windows of %d; lower --batch", o.data.c_str(),
               tokens.size(), B, T + 1);
  out.batches = o.batches > 0 ? std::min(o.batches, available) : available;
  // (Note [loss mask]: a masked batch's loss is a sum over the targets that count, scaled per batch; the gradient of
  // the mean over the whole data is not the mean of the batches' then.)
  TT_RETURN_IF(grads && tokens.masked(), kUnimplemented,
               "--grads-out with masked data (%s): the gradient of the mean loss is written for unmasked data only",
               o.data.c_str());
  Backend& be = *m.be;
  Model& model = m.ex->model();
  const size_t bt = static_cast<size_t>(B) * static_cast<size_t>(T);
  std::optional<LogitsWriter> logits;
  if (!o.logits_out.empty()) {
    TT_ASSIGN_OR_RETURN(LogitsWriter w, LogitsWriter::open(o.logits_out, be, model, out.batches * B,
                                                           o.logits_chunk_rows));
    logits.emplace(std::move(w));
  }
  std::vector<int32_t> in(bt), tg(bt);
  std::vector<float> losses(bt);
  double sum = 0;
  int64_t counted = 0;  // Note [loss mask]: masked data's loss is the mean over the targets that count
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> grad;                      // one batch's, the parameters' layout
  std::vector<double> grad_sum;                 // their sum over the batches
  if (grads) {
    grad.resize(static_cast<size_t>(m.ex->num_params()));
    grad_sum.assign(grad.size(), 0.0);
  }
  for (int64_t k = 0; k < out.batches; ++k) {
    counted += data::val_batch(tokens, B, T, k, in.data(), tg.data());
    be.copy_h2d(model.tokens(), in.data(), be.compute_stream());
    be.copy_h2d(model.targets(), tg.data(), be.compute_stream());
    if (grads) {
      if (logits) {  // (before the backward, which may reuse the head's tensors: Note [head in gradients])
        m.ex->forward();
        TT_TRY(logits->write());
      }
      m.ex->forward_backward();  // the batch's mean loss's gradients (the model's default loss scale), no update
    } else {
      m.ex->forward();
      if (logits) TT_TRY(logits->write());
    }
    be.copy_d2h(losses.data(), model.losses(), be.compute_stream());
    // (With gradients every stream: the norm's parts on the comm stream read them; the next forward may reuse them.)
    TT_TRY(grads ? be.synchronize_all() : be.compute_stream().synchronize());
    if (grads) {
      TT_TRY(m.ex->download_grads(grad.data()));
      for (size_t i = 0; i < grad.size(); ++i) grad_sum[i] += static_cast<double>(grad[i]);
    }
    if (o.token_losses) out.token_losses.insert(out.token_losses.end(), losses.begin(), losses.end());
    // The mean of the batches' means, summed as Trainer::evaluate does: the same bits on the same windows.
    double s = 0;
    for (float l : losses) s += static_cast<double>(l);
    sum += tokens.masked() ? s : s / static_cast<double>(losses.size());
  }
  if (logits) TT_TRY(logits->commit());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.tokens = tokens.masked() ? counted : out.batches * static_cast<int64_t>(bt);
  out.loss = tokens.masked() ? (counted > 0 ? sum / static_cast<double>(counted) : 0.0)
                             : sum / static_cast<double>(out.batches);
  if (grads) {
    // The mean loss is the mean of the batches' means: its gradient the mean of theirs.
    for (size_t i = 0; i < grad.size(); ++i)
      grad[i] = static_cast<float>(grad_sum[i] / static_cast<double>(out.batches));
    auto read = [&](const ParamInfo& p, float* dst) -> Status {
      std::copy_n(grad.data() + p.offset, static_cast<size_t>(p.shape.numel()), dst);
      return Status::ok();
    };
    TT_TRY(write_hf_folder(cfg, read, o.grads_out, ExportOptions{}, "tiertrain eval --grads-out",
                           {{"checkpoint_step", std::to_string(out.step)},
                            {"batches", std::to_string(out.batches)},
                            {"what", "the gradient of the mean cross-entropy over the scored windows"}})
               .status());
  }
  return out;
}

namespace {

// GPT-2's encoder.json with no merges beside it: it decodes ids, but encodes no text.
bool is_gpt2_encoder_alone(const std::string& where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(where, ec) ? fs::path(where) : fs::path(where).parent_path();
  if (fs::exists(dir / "tokenizer.json", ec) || fs::path(where).filename() == "tokenizer.json") return false;
  return !fs::exists(dir / "vocab.bpe", ec) && !fs::exists(dir / "merges.txt", ec);
}

}  // namespace

Result<SampleResult> sample_checkpoint(const std::string& where, const SampleOptions& o) {
  TT_RETURN_IF(!(o.temperature > 0) || !std::isfinite(o.temperature), kInvalidArgument,
               "--temperature %g: must be a number > 0", o.temperature);
  TT_RETURN_IF(o.tokens < 0 || o.top_k < 0, kInvalidArgument, "--tokens and --top-k must not be negative");
  SampleResult out;
  TT_ASSIGN_OR_RETURN(out.checkpoint, resolve_checkpoint(where));
  // An in-core model of batch 1 on the backend asked for.
  TT_ASSIGN_OR_RETURN(LoadedModel m, load_model(out.checkpoint, 1, o.backend, o.dtype, o.threads, "sampling",
                                                 o.allow_nonfinite));
  const CheckpointState& st = m.st;
  out.step = st.step;
  out.bytes = st.model.vocab <= 256;
  std::unique_ptr<Backend>& be = m.be;
  std::unique_ptr<Executor>& ex = m.ex;
  Model& model = ex->model();

  // The prompt's tokens: its bytes (a text model); the tokenizer's ids of its text with --tokenizer (GPT-2's
  // encoder.json alone decodes but cannot encode: its merges beside it do); else ids separated by spaces or commas.
  std::optional<Tokenizer> tok;
  if (out.bytes) {
    const std::string prompt = o.prompt.empty() ? "\n" : o.prompt;
    for (unsigned char c : prompt) out.tokens.push_back(c);
  } else if (!o.vocab_file.empty() && (!o.prompt.empty() || !is_gpt2_encoder_alone(o.vocab_file))) {
    TT_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::load(o.vocab_file));
    tok = std::move(t);
    // No prompt: a document's start (Llama 3's <|begin_of_text|>, else <|endoftext|>). A prompt: its ids after the
    // tokens the template puts before a text (Llama 3's <|begin_of_text|>; none for GPT-2 and Qwen2), as
    // `tokenizers` encodes it for transformers' generate().
    if (o.prompt.empty()) {
      TT_RETURN_IF(tok->document_start() < 0, kInvalidArgument,
                   "--prompt: %s has no token that starts a document; give a prompt", o.vocab_file.c_str());
      out.tokens.push_back(tok->document_start());
    } else {
      out.tokens = tok->text_prefix();
      const std::vector<int32_t> ids = tok->encode(o.prompt);
      out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    }
  } else if (o.prompt.empty()) {
    out.tokens.push_back(50256);  // GPT-2's <|endoftext|>: a document's start
  } else {
    std::string text = o.prompt;
    std::replace(text.begin(), text.end(), ',', ' ');
    size_t at = 0;
    while (at < text.size()) {
      size_t end = 0;
      long long v = -1;
      try {
        v = std::stoll(text.substr(at), &end);
      } catch (...) {
        end = 0;
      }
      if (end == 0) {
        if (std::isspace(static_cast<unsigned char>(text[at]))) {
          ++at;
          continue;
        }
        return make_status(StatusCode::kInvalidArgument,
                           "--prompt: this model reads token ids: give --tokenizer (a tokenizer.json, or GPT-2's "
                           "encoder.json and vocab.bpe) to write the prompt as text, or give token ids, not '%s'",
                           text.substr(at, 20).c_str());
      }
      TT_RETURN_IF(v < 0 || v >= st.model.vocab, kInvalidArgument, "--prompt: token %lld is not below the vocabulary %d",
                   v, st.model.vocab);
      out.tokens.push_back(static_cast<int32_t>(v));
      at += end;
    }
  }
  for (int32_t t : out.tokens)
    TT_RETURN_IF(t >= st.model.vocab, kInvalidArgument, "--prompt: byte %d is not in this model's vocabulary (%d)", t,
                 st.model.vocab);
  out.prompt_tokens = static_cast<int64_t>(out.tokens.size());

  // The context: the tokens from `start` on, at positions 0.. (at most T of them). When a new token would be past
  // position T - 1, the context restarts from the last T/2 tokens (a prefill), so that the next T/2 tokens are drawn
  // from the cache again (Note [KV cache]). Without the cache, each token is a forward over the whole context: the
  // same context, the same draws up to rounding.
  const int T = st.model.seq, V = st.model.vocab, PV = st.model.padded_vocab();
  const DType cd = model.dtype();
  NamedTensors dec;
  for (const TensorRequest& r : model_decode_tensors(st.model, cd)) {
    TT_ASSIGN_OR_RETURN(Tensor t, be->pool().allocate(r.shape, r.dtype, r.cls, r.name.c_str()));
    dec[r.name] = t;
  }
  std::vector<int32_t> window(static_cast<size_t>(T), 0), targets(static_cast<size_t>(T), 0);
  std::vector<unsigned char> row(static_cast<size_t>(PV) * dtype_size(cd));
  std::vector<float> row_f(static_cast<size_t>(V));
  Rng rng(o.seed);
  size_t start = out.tokens.size() > static_cast<size_t>(T) ? out.tokens.size() - static_cast<size_t>(T) : 0;
  int cached = 0;  // positions in the cache (0: the next token needs a prefill)
  std::unique_ptr<Graph> graph;  // a recorded decode step (CUDA; nullptr on the CPU: each step enqueued)
  bool stepped = false;
  int32_t position = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.tokens; ++i) {
    if (out.tokens.size() - start > static_cast<size_t>(T)) {
      start = out.tokens.size() - static_cast<size_t>(std::max(1, T / 2));
      cached = 0;
    }
    const int n = static_cast<int>(out.tokens.size() - start);
    const auto e0 = std::chrono::steady_clock::now();
    if (cached > 0 && o.kv_cache) {
      // From memory that stays as it is until the stream has run (the CPU backend's copies run later).
      position = cached;
      be->copy_h2d(dec.at("decode.token"), &out.tokens.back(), be->compute_stream());
      be->copy_h2d(dec.at("decode.pos"), &position, be->compute_stream());
      // The first step runs as it is (the GEMMs choose their algorithms), the second is recorded, then replayed.
      if (!graph && stepped && o.cuda_graph) graph = be->capture([&] { model.decode_step(dec); });
      if (graph) {
        graph->replay();
      } else {
        model.decode_step(dec);
        stepped = true;
      }
      ++cached;
    } else {
      std::fill(window.begin(), window.end(), 0);
      std::copy(out.tokens.begin() + static_cast<std::ptrdiff_t>(start), out.tokens.end(), window.begin());
      be->copy_h2d(model.tokens(), window.data(), be->compute_stream());
      be->copy_h2d(model.targets(), targets.data(), be->compute_stream());
      ex->forward();
      model.decode_prefill(dec, n);
      ++out.prefills;
      cached = n;
    }
    const auto e1 = std::chrono::steady_clock::now();
    be->copy_d2h(row.data(), dec.at("decode.logits"), be->compute_stream());
    TT_TRY(be->compute_stream().synchronize());
    const auto e2 = std::chrono::steady_clock::now();
    out.enqueue_seconds += std::chrono::duration<double>(e1 - e0).count();
    out.wait_seconds += std::chrono::duration<double>(e2 - e1).count();
    to_f32(row.data(), cd, static_cast<size_t>(V), row_f.data());
    out.tokens.push_back(draw_token(row_f.data(), V, o.temperature, o.top_k, rng.uniform()));
    out.draw_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - e2).count();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out.bytes) {
    for (int32_t t : out.tokens) out.text.push_back(static_cast<char>(t));
  } else if (tok) {
    TT_ASSIGN_OR_RETURN(out.text, tok->decode(out.tokens));
  } else if (!o.vocab_file.empty()) {
    TT_ASSIGN_OR_RETURN(std::vector<std::string> vocab, load_vocab_bytes(o.vocab_file));
    for (int32_t t : out.tokens) {
      TT_RETURN_IF(static_cast<size_t>(t) >= vocab.size(), kFailedPrecondition,
                   "--tokenizer %s has %zu tokens; the model drew %d", o.vocab_file.c_str(), vocab.size(), t);
      out.text += vocab[static_cast<size_t>(t)];
    }
  } else {
    for (size_t i = 0; i < out.tokens.size(); ++i) out.text += (i ? " " : "") + std::to_string(out.tokens[i]);
  }
  return out;
}

}  // namespace tt
