// `tiertrain tokenize FILE|DIR... --tokenizer DIR --out DIR`: text files to token shards of a byte-level BPE
// tokenizer's vocabulary (data/tokenize.h), which `train --data` reads.
#include <cstdint>
#include <cstdio>

#include "cli/command.h"
#include "core/units.h"
#include "data/tokenize.h"

namespace tt::cli {

namespace {

class TokenizeCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* tokenize = app.add_subcommand(
        "tokenize", "text files to token shards (train --data reads them): tiertrain tokenize FILE|DIR... "
                    "--tokenizer DIR --out DIR (each file a document after the tokenizer's document start: "
                    "<|begin_of_text|> for Llama 3, else <|endoftext|>)");
    tokenize->add_option("inputs", o_.inputs, "text files or folders (recursively; binary files skipped)")->required();
    tokenize->add_option("--tokenizer,--vocab", o_.vocab,
                         "a Hugging Face tokenizer.json (byte-level BPE: Llama 3's, Qwen2's, GPT-2's) or a folder "
                         "holding one, or a folder with GPT-2's encoder.json and vocab.bpe (or vocab.json and "
                         "merges.txt)")
        ->required();
    tokenize->add_option("--out", o_.out, "the folder of shards to write (train_000000.bin, ...)")->required();
    tokenize->add_option("--shard-tokens", o_.shard_tokens, "tokens a shard [default: 100000000]")
        ->check(CLI::Range(int64_t(1), int64_t(INT32_MAX)));
    tokenize->add_option("--val-tokens", o_.val_tokens,
                         "the first N tokens to val_000000.bin, which train uses as its validation split [default: 0: "
                         "none; train holds out --val-fraction of each shard]")
        ->check(CLI::Range(int64_t(0), int64_t(INT32_MAX)));
    tokenize->add_flag("--print-ids", o_.print_ids, "also print the token ids, a document a line");
    return tokenize;
  }
  int run(Context&) override {
    auto r = data::tokenize_to_shards(o_, stdout);
    if (!r.is_ok()) return report(r.status());
    const auto& t = r.value();
    std::printf("tokenized %lld files (%s; %lld skipped as binary or empty) into %lld tokens (%.2f bytes a token) in "
                "%.1f s: %zu shards in %s\n",
                static_cast<long long>(t.files), format_bytes(t.bytes).c_str(), static_cast<long long>(t.skipped),
                static_cast<long long>(t.tokens), t.tokens ? static_cast<double>(t.bytes) / t.tokens : 0.0, t.seconds,
                t.shards.size(), o_.out.c_str());
    if (t.examples > 0)
      std::printf("fine-tuning: %lld examples, %lld of the tokens counted by the loss (their completions)\n",
                  static_cast<long long>(t.examples), static_cast<long long>(t.counted));
    return 0;
  }

 private:
  data::TokenizeOptions o_;
};

}  // namespace

std::unique_ptr<Command> make_tokenize_command() { return std::make_unique<TokenizeCommand>(); }

}  // namespace tt::cli
