// cli/main: the `tiertrain` program. Each subcommand is a cli/<name>_command.cc (cli/command.h lists them); main()
// does what they share, in order:
//   1. corrects OpenBLAS's kernel choice, which may execute the program again (Note [OpenBLAS core]);
//   2. builds the program: the commands' flags, and every knob as a flag of train, plan and calibrate;
//   3. parses the command line (launch's command after "--" is kept apart, not parsed);
//   4. resolves the knobs (defaults < --config file < TIERTRAIN_* variables < flags) and the log settings;
//   5. runs the command parsed; `--print-config` prints the knobs and environment variables instead.
// Exit codes (cli/exit_codes.h; the guide's table): 0 success, 1 a run failed, 2 bad usage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/cpu/openblas_core.h"
#include "cli/command.h"
#include "cli/knob_flags.h"
#include "core/config.h"
#include "core/log.h"

int main(int argc, char** argv) {
  tt::cpu::correct_openblas_core(argv);
  const std::string openblas_note = tt::cpu::openblas_core_note();
  tt::Config cfg;
  tt::declare_train_knobs(cfg);

  CLI::App app{"tiertrain: train neural networks larger than device memory.\n"
               "Knobs come from defaults < --config FILE.json < TIERTRAIN_* variables < flags."};
  app.set_version_flag("--version", "tiertrain 0.1.0");
  app.footer(
      "Exit codes:\n"
      "  0        success (--dry-run: the run fits)\n"
      "  1        the run failed: data (missing, unreadable, empty, neither text nor a token shard), a checkpoint\n"
      "           (damaged, or of another model or data), memory (the budget; --dry-run: it does not fit), I/O,\n"
      "           another rank or a collective's deadline\n"
      "  2        bad usage: an unknown flag, a value malformed or out of range, no subcommand\n"
      "  75       train stopped early (a signal, --time-limit) after a checkpoint: the same command with --resume\n"
      "           goes on\n"
      "  127      launch: the command could not be started\n"
      "  128+N    launch: the first rank to fail was killed by signal N (otherwise its own exit code)");
  bool print_config = false;
  app.add_flag("--print-config", print_config,
               "print every knob and environment variable, its value and where it came from, then exit");

  std::vector<std::unique_ptr<tt::cli::Command>> commands = tt::cli::all_commands();
  std::vector<CLI::App*> subs;
  tt::cli::KnobFlags knobs;
  for (auto& c : commands) {
    CLI::App* sub = c->add_to(app);
    if (c->takes_knobs()) {
      sub->add_flag("--print-config", print_config, "print the resolved configuration and exit");
      knobs.add_to(sub, cfg);
    }
    subs.push_back(sub);
  }

  // `launch ... -- CMD ...`: the command after "--" is not ours to parse (CLI11 would take it as positionals).
  tt::cli::Context ctx{.cfg = cfg, .tail = {}, .has_tail = false};
  if (argc > 1 && std::string(argv[1]) == "launch") {
    for (int i = 2; i < argc; ++i) {
      if (std::string(argv[i]) != "--") continue;
      ctx.tail.assign(argv + i + 1, argv + argc);
      ctx.has_tail = true;
      argc = i;
      break;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : tt::cli::kExitUsage;
  }

  if (tt::Status s = knobs.resolve(cfg); !s.is_ok()) return tt::cli::report(s);
  tt::log::configure(cfg.get_string("debug"), cfg.get_string("debug_subsys"));
  if (!openblas_note.empty()) TT_LOG(INFO, EXEC, "%s", openblas_note.c_str());

  tt::cli::Command* parsed = nullptr;
  for (size_t i = 0; i < commands.size(); ++i)
    if (subs[i]->parsed()) parsed = commands[i].get();
  if (parsed != nullptr && !parsed->takes_knobs()) return parsed->run(ctx);
  if (parsed != nullptr) {
    if (tt::Status s = tt::apply_backend_defaults(cfg); !s.is_ok()) return tt::cli::report(s);
    if (tt::Status s = parsed->prepare(cfg); !s.is_ok()) return tt::cli::report(s);
  }
  if (print_config) {
    std::fputs(tt::cli::describe_config(cfg).c_str(), stdout);
    return 0;
  }
  if (parsed == nullptr) {
    std::fputs(app.help().c_str(), stdout);
    return tt::cli::kExitUsage;
  }
  return parsed->run(ctx);
}
