// `tiertrain sample CHECKPOINT`: text drawn from a trained model (apps/generate.h), on stdout; its header and timing
// on stderr. Also the end of a `train` with a run folder (Note [run folder] in exec/train_config.h): a sample of the
// final checkpoint, printed and kept in the folder.
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "core/atomic_file.h"
#include "apps/generate.h"

namespace tt::cli {

namespace {

// The sample as people read it: a text model's bytes as they are, token ids as a line of numbers, to `out`; the
// header and the timing line to `info` (stderr for `tiertrain sample`, so that its stdout is the text alone).
void print_sample(const SampleResult& s, FILE* out, FILE* info) {
  const long long drawn = static_cast<long long>(s.tokens.size()) - static_cast<long long>(s.prompt_tokens);
  std::fprintf(info, "--- sample of %s (step %lld): %lld tokens after a prompt of %lld, in %.1f s (%.0f tokens/s, %lld "
               "full forwards) ---\n",
               s.checkpoint.c_str(), static_cast<long long>(s.step), drawn, static_cast<long long>(s.prompt_tokens),
               s.seconds, s.seconds > 0 ? static_cast<double>(drawn) / s.seconds : 0.0,
               static_cast<long long>(s.prefills));
  // Control bytes but newline and tab are shown escaped (\xNN): a terminal would act on them. sample.txt and --out
  // keep the bytes as they are.
  for (unsigned char c : s.text) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) std::fprintf(out, "\\x%02x", c);
    else std::fputc(c, out);
  }
  if (s.text.empty() || s.text.back() != '\n') std::fputc('\n', out);
  std::fflush(out);
  std::fputs("---\n", info);
  if (drawn > 0) {
    const double per = 1e3 / static_cast<double>(drawn);
    std::fprintf(info, "(a token: %.3f ms enqueuing the model, %.3f ms waiting for it, %.3f ms drawing)\n",
                 s.enqueue_seconds * per, s.wait_seconds * per, s.draw_seconds * per);
  }
}

class SampleCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* sample = app.add_subcommand(
        "sample", "print text drawn from a trained model: tiertrain sample CHECKPOINT (a checkpoint file, a "
                  "checkpoint folder or a run folder: its latest checkpoint); the text on stdout, the rest on stderr");
    sample->add_option("checkpoint", checkpoint_, "checkpoint file, checkpoint folder or run folder")->required();
    sample->add_option("--prompt", o_.prompt,
                       "text the sample continues (a text model, or a token-shard model with --tokenizer); else "
                       "token ids [default: a newline; the tokenizer's document start, or GPT-2's <|endoftext|>, for "
                       "a token-shard model]");
    sample->add_option("--tokens", o_.tokens, "tokens to draw [default: 200]")
        ->check(CLI::Range(int64_t(0), int64_t(1000000)));
    sample->add_option("--temperature", o_.temperature,
                       "softmax temperature, > 0: lower is more conservative [default: 0.8]")
        ->check(CLI::PositiveNumber);
    sample->add_option("--top-k", o_.top_k, "draw among the k likeliest tokens (0: all) [default: 0]")
        ->check(CLI::Range(0, 1 << 30));
    sample->add_option("--seed", o_.seed, "seed of the draws [default: 1337]")->check(kUnsigned);
    sample->add_option("--backend", o_.backend, "auto, cpu or cuda [default: auto]")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    sample->add_flag("--cuda-graph,!--no-cuda-graph", o_.cuda_graph,
                     "on a GPU, record a token's step through the cache once as a CUDA graph and replay it "
                     "[default]; --no-cuda-graph: launch its kernels one by one");
    sample->add_option("--dtype", o_.dtype, "auto (bf16 on a GPU, f32 on the CPU), f32 or bf16 [default: auto]")
        ->check(CLI::IsMember({"auto", "f32", "bf16"}));
    sample->add_option("--threads", o_.threads, "CPU threads (0: automatic) [default: 0]")->check(CLI::Range(0, 4096));
    sample->add_option("--out", out_, "also write the text to this file");
    sample->add_flag("--kv-cache,!--no-kv-cache", o_.kv_cache,
                     "each new token through the blocks alone against cached keys and values [default]; "
                     "--no-kv-cache: a forward over the whole context for every token (slower; the same draws up to "
                     "rounding)");
    sample->add_flag("--allow-nonfinite", o_.allow_nonfinite,
                     "load a checkpoint holding NaN, infinity or negative second moments (refused otherwise), for "
                     "forensics");
    sample->add_option("--tokenizer,--vocab", o_.vocab_file,
                       "the model's tokenizer: a tokenizer.json (or a folder holding one), or GPT-2's encoder.json "
                       "and vocab.bpe (a folder; encoder.json alone decodes only): a token-shard model's prompt read "
                       "as text and its tokens printed as text");
    return sample;
  }
  int run(Context&) override {
    auto s = sample_checkpoint(checkpoint_, o_);
    if (!s.is_ok()) return report(s.status());
    print_sample(s.value(), stdout, stderr);
    if (!out_.empty()) {
      if (Status w = write_file_atomically(out_, s.value().text); !w.is_ok()) return report(w);
      std::fprintf(stderr, "sample written to %s\n", out_.c_str());
    }
    return 0;
  }

 private:
  std::string checkpoint_;  // a checkpoint file, a checkpoint folder or a run folder
  SampleOptions o_;
  std::string out_;  // also write the text here
};

}  // namespace

std::unique_ptr<Command> make_sample_command() { return std::make_unique<SampleCommand>(); }

void finish_run_folder(const TrainConfig& cfg, FILE* out, bool sample) {
  if (cfg.run_dir.empty()) return;
  if (sample && cfg.sample_tokens > 0 && !cfg.checkpoint_dir.empty()) {
    SampleOptions o;
    o.tokens = cfg.sample_tokens;
    o.seed = cfg.seed;
    o.backend = cfg.backend;
    o.dtype = cfg.dtype;
    o.threads = cfg.threads;
    auto s = sample_checkpoint(cfg.checkpoint_dir, o);
    if (s.is_ok()) {
      print_sample(s.value(), out, out);
      const std::string path = cfg.run_dir + "/sample.txt";
      if (Status w = write_file_atomically(path, s.value().text); !w.is_ok())
        std::fprintf(out, "warning: %s\n", w.message().c_str());
    } else {
      std::fprintf(out, "warning: no sample: %s\n", s.status().message().c_str());
    }
  }
  const bool plotted = plot_run(cfg.run_dir, "", out) == 0;
  std::fprintf(out, "run folder: %s (config.json, metrics.jsonl, metrics.json, checkpoints/%s%s)\n",
               cfg.run_dir.c_str(), sample && cfg.sample_tokens > 0 ? ", sample.txt" : "", plotted ? ", loss.svg" : "");
}

}  // namespace tt::cli
