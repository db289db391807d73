// `tiertrain export CHECKPOINT --out DIR`: its parameters as a Hugging Face model folder of its family, DIR/config.json
// and the safetensors, sharded past --max-shard-size (exec/hf.h).
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "core/units.h"
#include "exec/hf.h"

namespace tt::cli {

namespace {

class ExportCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* e = app.add_subcommand(
        "export", "write a checkpoint's parameters as a Hugging Face model folder of its family (config.json and "
                  "safetensors, for transformers' GPT2LMHeadModel, LlamaForCausalLM or Qwen2ForCausalLM): tiertrain "
                  "export CHECKPOINT --out DIR");
    e->add_option("checkpoint", checkpoint_, "checkpoint file, checkpoint folder or run folder")->required();
    e->add_option("--out", out_, "the folder to write config.json and the safetensors into")->required();
    e->add_option("--format", format_, "safetensors (the only one) [default: safetensors]")
        ->check(CLI::IsMember({"safetensors"}));
    e->add_option("--dtype", dtype_, "f32 or bf16 [default: f32]")->check(CLI::IsMember({"f32", "bf16"}));
    e->add_option("--max-shard-size", shard_,
                  "the largest safetensors file, in bytes (5000000000, or 5GB, 500MiB); more are written with "
                  "model.safetensors.index.json [default: 5GB]");
    e->add_flag("--allow-nonfinite", allow_nonfinite_,
                "export a checkpoint holding NaN or infinity (refused otherwise), for forensics");
    return e;
  }
  int run(Context&) override {
    ExportOptions o;
    o.dtype = dtype_ == "bf16" ? DType::kBF16 : DType::kF32;
    o.allow_nonfinite = allow_nonfinite_;
    auto bytes = parse_bytes(shard_);
    if (!bytes.is_ok() || bytes.value() < 1) {
      std::fprintf(stderr, "tiertrain export: --max-shard-size '%s' is not a size of at least one byte\n",
                   shard_.c_str());
      return kExitUsage;
    }
    o.max_shard_bytes = bytes.value();
    auto s = export_hf(checkpoint_, out_, o);
    if (!s.is_ok()) return report(s.status());
    std::fprintf(stdout,
                 "%s: %lld tensors, %lld parameters (%s) in %d safetensors file%s of %s, with %s/config.json; in "
                 "Python: transformers.AutoModelForCausalLM.from_pretrained(\"%s\")\n",
                 s.value().checkpoint.c_str(), static_cast<long long>(s.value().tensors),
                 static_cast<long long>(s.value().params), dtype_.c_str(), s.value().files,
                 s.value().files == 1 ? "" : "s", format_bytes(s.value().bytes).c_str(), out_.c_str(), out_.c_str());
    return 0;
  }

 private:
  bool allow_nonfinite_ = false;
  std::string checkpoint_;
  std::string out_;
  std::string format_ = "safetensors";
  std::string dtype_ = "f32";
  std::string shard_ = "5GB";
};

}  // namespace

std::unique_ptr<Command> make_export_command() { return std::make_unique<ExportCommand>(); }

}  // namespace tt::cli
