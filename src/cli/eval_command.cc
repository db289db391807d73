// `tiertrain eval CHECKPOINT --data FILE`: a trained model's mean loss on every token of the data (apps/generate.h).
#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "apps/generate.h"

namespace tt::cli {

namespace {

class EvalCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* eval = app.add_subcommand(
        "eval", "the loss of a trained model on a text file, folder or token shards: tiertrain eval CHECKPOINT --data "
                "FILE (every token of it, or --split val as training held it out)");
    eval->add_option("checkpoint", checkpoint_, "checkpoint file, checkpoint folder or run folder")->required();
    eval->add_option("--data", o_.data, "text file, folder of text files, or llm.c token shard(s)")->required();
    eval->add_option("--tokenizer", o_.tokenizer,
                     "read the text of --data through this tokenizer (a tokenizer.json or a folder holding one, or "
                     "GPT-2's encoder.json and vocab.bpe), each file a document after its start, as tokenize writes "
                     "it: the loss of a token model on text");
    eval->add_option("--batch", o_.batch, "sequences per forward [default: 8]")->check(CLI::Range(1, 1 << 20));
    eval->add_option("--split", o_.split,
                     "all (every token), or val / train: that split as a run with --val-fraction makes it "
                     "[default: all]")
        ->check(CLI::IsMember({"all", "val", "train"}));
    eval->add_option("--val-fraction", o_.val_fraction, "as train's, for --split val|train [default: 0.05]")
        ->check(CLI::Range(0.0, 0.5));
    eval->add_option("--batches", o_.batches, "at most this many batches (0: all) [default: 0]")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
    eval->add_option("--backend", o_.backend, "auto, cpu or cuda [default: auto]")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    eval->add_option("--threads", o_.threads, "CPU threads (0: automatic) [default: 0]")->check(CLI::Range(0, 4096));
    eval->add_flag("--allow-nonfinite", o_.allow_nonfinite,
                   "load a checkpoint holding NaN, infinity or negative second moments (refused otherwise), for "
                   "forensics");
    eval->add_option("--dtype", o_.dtype, "compute dtype: auto (bf16 on a GPU, f32 on the CPU), f32 or bf16 "
                                          "[default: auto]")
        ->check(CLI::IsMember({"auto", "f32", "bf16"}));
    CLI::Option* json = eval->add_flag("--json", json_,
                                       "print one JSON object (the loss in full precision) instead of the line");
    eval->add_flag("--token-losses", o_.token_losses,
                   "with --json: each scored token's loss too (\"token_losses\", the windows in order), for golden "
                   "checks against another implementation")
        ->needs(json);
    eval->add_option("--grads-out", o_.grads_out,
                     "write the gradient of the mean loss over the scored windows (f32, no update) into this folder, "
                     "named and laid out as export writes the weights (Hugging Face safetensors), for golden checks "
                     "(tools/hf_golden.py); unmasked data");
    eval->add_option("--logits-out", o_.logits_out,
                     "write the logits of every scored position as a NumPy array (.npy, f32, [windows, seq, vocab], "
                     "the windows in the order scored), written as they are computed: seq x vocab x 4 bytes a "
                     "window");
    return eval;
  }
  int run(Context&) override {
  auto e = evaluate_checkpoint(checkpoint_, o_);
  if (!e.is_ok()) return report(e.status());
  const EvalResult& r = e.value();
  if (json_) {
    const nlohmann::json j = {{"checkpoint", r.checkpoint}, {"step", r.step},     {"data", o_.data},
                              {"split", o_.split},          {"loss", r.loss},     {"batches", r.batches},
                              {"tokens", r.tokens},         {"seconds", r.seconds}};
    nlohmann::json out = j;
    if (o_.token_losses) out["token_losses"] = r.token_losses;
    if (!o_.grads_out.empty()) out["grads_out"] = o_.grads_out;
    if (!o_.logits_out.empty()) out["logits_out"] = o_.logits_out;
    std::fprintf(stdout, "%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::fprintf(stdout,
               "%s (step %lld) on %s: loss %.4f nats/token, perplexity %.3f, %.4f bits/token; %lld batches, %lld "
               "tokens, %.1f s\n",
               r.checkpoint.c_str(), static_cast<long long>(r.step), o_.data.c_str(), r.loss, std::exp(r.loss),
               r.loss / std::log(2.0), static_cast<long long>(r.batches), static_cast<long long>(r.tokens), r.seconds);
  return 0;
  }

 private:
  std::string checkpoint_;
  EvalOptions o_;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> make_eval_command() { return std::make_unique<EvalCommand>(); }

}  // namespace tt::cli
