// `tiertrain export CHECKPOINT --out DIR`: its parameters in Hugging Face's GPT-2 layout, DIR/model.safetensors and
// DIR/config.json (exec/export.h).
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "core/units.h"
#include "exec/export.h"

namespace tt::cli {

namespace {

class ExportCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* e = app.add_subcommand(
        "export", "write a checkpoint's parameters in Hugging Face's GPT-2 layout (model.safetensors and config.json, "
                  "for transformers' GPT2LMHeadModel): tiertrain export CHECKPOINT --out DIR");
    e->add_option("checkpoint", checkpoint_, "checkpoint file, checkpoint folder or run folder")->required();
    e->add_option("--out", out_, "the folder to write model.safetensors and config.json into")->required();
    e->add_option("--format", format_, "safetensors (the only one) [default: safetensors]")
        ->check(CLI::IsMember({"safetensors"}));
    return e;
  }
  int run(Context&) override {
  auto s = export_gpt2(checkpoint_, out_);
  if (!s.is_ok()) return report(s.status());
  std::fprintf(stdout,
               "%s: %lld tensors, %lld parameters (fp32, GPT-2 layout) written to %s (%s) with %s/config.json; in "
               "Python: transformers.GPT2LMHeadModel.from_pretrained(\"%s\")\n",
               s.value().checkpoint.c_str(), static_cast<long long>(s.value().tensors),
               static_cast<long long>(s.value().params), s.value().file.c_str(), format_bytes(s.value().bytes).c_str(),
               out_.c_str(), out_.c_str());
  return 0;
  }

 private:
  std::string checkpoint_;
  std::string out_;
  std::string format_ = "safetensors";
};

}  // namespace

std::unique_ptr<Command> make_export_command() { return std::make_unique<ExportCommand>(); }

}  // namespace tt::cli
