#include "cli/model_commands.h"

#include "cli/exit_codes.h"
#include "core/atomic_file.h"

namespace tt::cli {

namespace {

// The sample as people read it: a text model's bytes as they are, token ids as a line of numbers.
void print_sample(const SampleResult& s, FILE* out) {
  std::fprintf(out, "--- sample of %s (step %lld): %lld tokens after a prompt of %lld, in %.1f s ---\n",
               s.checkpoint.c_str(), static_cast<long long>(s.step),
               static_cast<long long>(s.tokens.size()) - static_cast<long long>(s.prompt_tokens),
               static_cast<long long>(s.prompt_tokens), s.seconds);
  // Control bytes but newline and tab are shown escaped (\xNN): a terminal would act on them. sample.txt and --out
  // keep the bytes as they are.
  for (unsigned char c : s.text) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) std::fprintf(out, "\\x%02x", c);
    else std::fputc(c, out);
  }
  if (s.text.empty() || s.text.back() != '\n') std::fputc('\n', out);
  std::fputs("---\n", out);
}

}  // namespace

int run_sample(const SampleCommand& cmd, FILE* out) {
  auto s = sample_checkpoint(cmd.checkpoint, cmd.options);
  if (!s.is_ok()) return report(s.status());
  print_sample(s.value(), out);
  if (!cmd.out.empty()) {
    if (Status w = write_file_atomically(cmd.out, s.value().text); !w.is_ok()) return report(w);
    std::fprintf(out, "sample written to %s\n", cmd.out.c_str());
  }
  return 0;
}

void finish_run_folder(const TrainConfig& cfg, FILE* out) {
  if (cfg.run_dir.empty()) return;
  if (cfg.sample_tokens > 0 && !cfg.checkpoint_dir.empty()) {
    SampleOptions o;
    o.tokens = cfg.sample_tokens;
    o.seed = cfg.seed;
    o.backend = cfg.backend;
    o.dtype = cfg.dtype;
    o.threads = cfg.threads;
    auto s = sample_checkpoint(cfg.checkpoint_dir, o);
    if (s.is_ok()) {
      print_sample(s.value(), out);
      const std::string path = cfg.run_dir + "/sample.txt";
      if (Status w = write_file_atomically(path, s.value().text); !w.is_ok())
        std::fprintf(out, "warning: %s\n", w.message().c_str());
    } else {
      std::fprintf(out, "warning: no sample: %s\n", s.status().message().c_str());
    }
  }
  std::fprintf(out, "run folder: %s (config.json, metrics.jsonl, metrics.json, checkpoints/%s)\n", cfg.run_dir.c_str(),
               cfg.sample_tokens > 0 ? ", sample.txt" : "");
}

}  // namespace tt::cli
