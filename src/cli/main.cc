// cli/main: the `tiertrain` program. Subcommands: `train`, `plan`, `calibrate`, `launch`, `comm-bench`. Every knob
// of the config registry is a flag of `train`, `plan` and `calibrate`; `tiertrain --print-config` (or `tiertrain train ... --print-config`) prints every knob, its value and its origin.
//
// Exit codes: 0 success, 1 a run failed (bad data, checkpoint, out of memory), 2 bad usage (unknown flag, bad value).
#include <climits>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "core/config.h"
#include "core/log.h"
#include "comm/bench.h"
#include "comm/comm.h"
#include "comm/launch.h"
#include "cli/exit_codes.h"
#include "cli/model_commands.h"
#include "cli/perf_commands.h"
#include "data/tokenize.h"
#include "exec/features.h"
#include "exec/train_config.h"
#include "core/units.h"
#include "exec/trainer.h"

extern char** environ;

extern "C" char* openblas_get_corename(void);

namespace {

using tt::cli::kExitUsage;
using tt::cli::report;

const char* type_hint(tt::KnobType t) {
  switch (t) {
    case tt::KnobType::kBool: return "BOOL";
    case tt::KnobType::kInt: return "INT";
    case tt::KnobType::kFloat: return "FLOAT";
    case tt::KnobType::kBytes: return "BYTES";
    case tt::KnobType::kChoice: return "CHOICE";  // shown as {a,b,c} instead, below
    case tt::KnobType::kString: return "TEXT";
  }
  return "VALUE";
}

// `launch`'s usage line: the command after `--` is what it runs, which CLI11's own line ("[OPTIONS]") does not show.
class LaunchFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return "\nUsage: " + name + " -n N [OPTIONS] -- CMD [ARGS...]\n       " + name + " --cleanup\n";
  }
};

// Note [OpenBLAS core]
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels when it is loaded, from the CPU's model number; a CPU
// newer than it knows (the development machine's Xeon with AVX-512) gets its "Prescott" kernels, SSE3 only, and the
// CPU backend's GEMMs (three quarters of a step) run several times slower. OPENBLAS_CORETYPE overrides the choice but
// is read only at load time, so when OpenBLAS chose a core without AVX2 on a CPU that has AVX2 and FMA, and the user
// did not set the variable, tiertrain sets OPENBLAS_CORETYPE (SkylakeX, its AVX-512 kernels, where the CPU has
// AVX-512 F/BW/DQ/VL/CD; else Haswell, its AVX2 kernels) and executes itself again, once. Measured on a 2-core Xeon
// VM with AVX-512 (2026-12-01, default model, 60-80 steps, interleaved runs): 404-446 ms/step as OpenBLAS chose
// (Prescott), 168-214 with Haswell, 142-163 with SkylakeX; the golden tests against PyTorch pass with each.
// TIERTRAIN_OPENBLAS_CORE=keep turns this off.
void use_openblas_avx2_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (const char* keep = std::getenv("TIERTRAIN_OPENBLAS_CORE"); keep != nullptr && std::string(keep) == "keep") return;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
  const std::string core = openblas_get_corename();
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine",
                          "Northwood", "Banias", "Generic", "Opteron", "Opteron_SSE3", "Barcelona", "Nano"}) {
    if (core == old) {
      const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512cd");
      setenv("OPENBLAS_CORETYPE", avx512 ? "SkylakeX" : "Haswell", 1);
      setenv("TIERTRAIN_OPENBLAS_CHOSE", core.c_str(), 1);  // for the log line after the restart
      execv("/proc/self/exe", argv);
      return;  // exec failed: go on with the kernels OpenBLAS chose
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  use_openblas_avx2_kernels(argv);
  std::string openblas_chose;
  if (const char* chose = std::getenv("TIERTRAIN_OPENBLAS_CHOSE"); chose != nullptr) {
    openblas_chose = chose;
    unsetenv("TIERTRAIN_OPENBLAS_CHOSE");
  }
  tt::Config cfg;
  tt::declare_train_knobs(cfg);

  CLI::App app{"tiertrain: train neural networks larger than device memory.\n"
               "Knobs come from defaults < --config FILE.json < TIERTRAIN_* variables < flags."};
  app.set_version_flag("--version", "tiertrain 0.1.0");
  // The same table as the README's.
  app.footer(
      "Exit codes:\n"
      "  0        success (--dry-run: the run fits)\n"
      "  1        the run failed: data (missing, unreadable, empty, neither text nor a token shard), a checkpoint\n"
      "           (damaged, or of another model or data), memory (the budget; --dry-run: it does not fit), I/O,\n"
      "           another rank or a collective's deadline\n"
      "  2        bad usage: an unknown flag, a value malformed or out of range, no subcommand\n"
      "  127      launch: the command could not be started\n"
      "  128+N    launch: the first rank to fail was killed by signal N (otherwise its own exit code)");
  bool print_config = false;
  app.add_flag("--print-config", print_config, "print every knob, its value and where it came from, then exit");
  CLI::App* train = app.add_subcommand("train", "train the GPT on a text corpus or token shards");
  train->add_flag("--print-config", print_config, "print the resolved configuration and exit");
  bool dry_run = false;
  train->add_flag("--dry-run", dry_run,
                  "load the data, resolve the plan and print the device and host memory the run needs against the "
                  "budget, then exit (0: it fits, 1: it does not); nothing is allocated");
  bool explain_plan = false;
  train->add_flag("--explain", explain_plan,
                  "with --plan auto (or no --plan when in-core does not fit): say how the plan was chosen, with the "
                  "runners-up");
  std::string schedule_out;
  train->add_option("--schedule", schedule_out,
                    "with --dry-run: write the compiled schedule (every pass's operations per stream, with bytes, "
                    "FLOPs and events) and the memory inventory to this JSON file (docs/FORMATS.md)");

  CLI::App* calibrate = app.add_subcommand(
      "calibrate", "measure this machine for the performance model (kernels of the configured model and its plans, host "
                   "links, host AdamW) and cache the profile; takes the train command's flags");
  tt::cli::CalibrateCommand calibrate_cmd;
  calibrate->add_option("--out", calibrate_cmd.out,
                        "write the profile here as well (default: only $XDG_CACHE_HOME/tiertrain/profile-<machine>.json)");
  calibrate->add_option("--heat", calibrate_cmd.heat_seconds,
                        "seconds each sequence of kernels the step runs (a block's forward, its backward, ...) runs "
                        "before it is timed, so that it is timed at the clock a long run settles at [default: 0.2]")
      ->check(CLI::Range(0.0, 10.0));
  CLI::App* plan = app.add_subcommand(
      "plan", "predict every plan of the configured run on this machine (fits, memory, ms/step, exposed copies); "
              "takes the train command's flags; calibrates on first use");
  tt::cli::PlanCommand plan_cmd;
  plan->add_option("--machine-profile", plan_cmd.profile, "read this machine profile (tiertrain calibrate --out) instead of the cache");
  plan->add_option("--measure", plan_cmd.measure_steps,
                   "also train each plan that fits for this many steps (after one warm-up step) and print the "
                   "measured step time beside the prediction")
      ->check(CLI::Range(0, 100000));
  plan->add_option("--plans", plan_cmd.plans,
                   "only these rows: a comma-separated list of shortcuts, or shortcut/device, shortcut/cpu, or auto");
  plan->add_flag("--explain", plan_cmd.explain, "say how the automatic plan was chosen, with the runners-up");
  plan->add_option("--what-if", plan_cmd.what_if,
                   "predict for this machine's compute with another link and memory: a preset (v100-pcie3, a100-pcie4, "
                   "h100-pcie5, gh200-c2c) or h2d=25GB/s,d2h=25GB/s,latency=10us,device_mem=32GiB");
  plan->add_option("--sweep-budget", plan_cmd.sweep_budget,
                   "A:B:STEP (sizes): predicted ms/step of every plan at each budget, to --sweep-out.csv and .svg");
  plan->add_option("--sweep-out", plan_cmd.sweep_out, "prefix of the sweep's CSV and SVG [default: plan-sweep]");

  CLI::App* sample = app.add_subcommand(
      "sample", "print text drawn from a trained model: tiertrain sample CHECKPOINT (a checkpoint file, a checkpoint "
                "folder or a run folder: its latest checkpoint)");
  tt::cli::SampleCommand sample_cmd;
  sample->add_option("checkpoint", sample_cmd.checkpoint, "checkpoint file, checkpoint folder or run folder")
      ->required();
  sample->add_option("--prompt", sample_cmd.options.prompt,
                     "text the sample continues (a text model, or a token-shard model with --vocab); else GPT-2 "
                     "token ids [default: a newline; <|endoftext|> for a token-shard model]");
  sample->add_option("--tokens", sample_cmd.options.tokens, "tokens to draw [default: 200]")
      ->check(CLI::Range(int64_t(0), int64_t(1000000)));
  sample->add_option("--temperature", sample_cmd.options.temperature,
                     "softmax temperature, > 0: lower is more conservative [default: 0.8]")
      ->check(CLI::PositiveNumber);
  sample->add_option("--top-k", sample_cmd.options.top_k, "draw among the k likeliest tokens (0: all) [default: 0]")
      ->check(CLI::Range(0, 1 << 30));
  sample->add_option("--seed", sample_cmd.options.seed, "seed of the draws [default: 1337]");
  sample->add_option("--backend", sample_cmd.options.backend, "auto, cpu or cuda [default: auto]")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sample->add_flag("--cuda-graph,!--no-cuda-graph", sample_cmd.options.cuda_graph,
                   "on a GPU, record a token's step through the cache once as a CUDA graph and replay it [default]; "
                   "--no-cuda-graph: launch its kernels one by one");
  sample->add_option("--dtype", sample_cmd.options.dtype, "auto (bf16 on a GPU, f32 on the CPU), f32 or bf16 "
                     "[default: auto]")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  sample->add_option("--threads", sample_cmd.options.threads, "CPU threads (0: automatic) [default: 0]")
      ->check(CLI::Range(0, 4096));
  sample->add_option("--out", sample_cmd.out, "also write the text to this file");
  sample->add_flag("--kv-cache,!--no-kv-cache", sample_cmd.options.kv_cache,
                   "each new token through the blocks alone against cached keys and values [default]; "
                   "--no-kv-cache: a forward over the whole context for every token (slower; the same draws up to "
                   "rounding)");
  sample->add_option("--vocab", sample_cmd.options.vocab_file,
                     "GPT-2's tokenizer: a folder with encoder.json and vocab.bpe (or vocab.json and merges.txt), or "
                     "encoder.json: a token-shard model's prompt read as text and its tokens printed as text");

  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "text files to token shards of GPT-2's vocabulary (train --data reads them): tiertrain tokenize "
                  "FILE|DIR... --vocab GPT2DIR --out DIR (each file a document after <|endoftext|>)");
  tt::data::TokenizeOptions tok_opt;
  tokenize->add_option("inputs", tok_opt.inputs, "text files or folders (recursively; binary files skipped)")
      ->required();
  tokenize->add_option("--vocab", tok_opt.vocab, "a folder with GPT-2's encoder.json and vocab.bpe (or vocab.json and "
                       "merges.txt)")->required();
  tokenize->add_option("--out", tok_opt.out, "the folder of shards to write (train_000000.bin, ...)")->required();
  tokenize->add_option("--shard-tokens", tok_opt.shard_tokens, "tokens a shard [default: 100000000]")
      ->check(CLI::Range(int64_t(1), int64_t(INT32_MAX)));
  tokenize->add_option("--val-tokens", tok_opt.val_tokens,
                       "the first N tokens to val_000000.bin, which train uses as its validation split [default: 0: "
                       "none; train holds out --val-fraction of each shard]")
      ->check(CLI::Range(int64_t(0), int64_t(INT32_MAX)));
  tokenize->add_flag("--print-ids", tok_opt.print_ids, "also print the token ids, a document a line");

  CLI::App* plot = app.add_subcommand(
      "plot", "draw a run's loss curves (training and validation) as an SVG: tiertrain plot RUN (a run folder, or a "
              "metrics .jsonl / .json file)");
  tt::cli::PlotCommand plot_cmd;
  plot->add_option("run", plot_cmd.run, "run folder or metrics file")->required();
  plot->add_option("--out", plot_cmd.out, "the SVG to write [default: RUN/loss.svg]");

  CLI::App* eval = app.add_subcommand(
      "eval", "the loss of a trained model on a text file, folder or token shards: tiertrain eval CHECKPOINT --data "
              "FILE (every token of it, or --split val as training held it out)");
  tt::cli::EvalCommand eval_cmd;
  eval->add_option("checkpoint", eval_cmd.checkpoint, "checkpoint file, checkpoint folder or run folder")->required();
  eval->add_option("--data", eval_cmd.options.data, "text file, folder of text files, or llm.c token shard(s)")
      ->required();
  eval->add_option("--batch", eval_cmd.options.batch, "sequences per forward [default: 8]")
      ->check(CLI::Range(1, 1 << 20));
  eval->add_option("--split", eval_cmd.options.split,
                   "all (every token), or val / train: that split as a run with --val-fraction makes it [default: all]")
      ->check(CLI::IsMember({"all", "val", "train"}));
  eval->add_option("--val-fraction", eval_cmd.options.val_fraction, "as train's, for --split val|train [default: 0.05]")
      ->check(CLI::Range(0.0, 0.5));
  eval->add_option("--batches", eval_cmd.options.batches, "at most this many batches (0: all) [default: 0]")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  eval->add_option("--backend", eval_cmd.options.backend, "auto, cpu or cuda [default: auto]")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  eval->add_option("--threads", eval_cmd.options.threads, "CPU threads (0: automatic) [default: 0]")
      ->check(CLI::Range(0, 4096));

  CLI::App* export_ = app.add_subcommand(
      "export", "write a checkpoint's parameters in Hugging Face's GPT-2 layout (model.safetensors and config.json, "
                "for transformers' GPT2LMHeadModel): tiertrain export CHECKPOINT --out DIR");
  tt::cli::ExportCommand export_cmd;
  export_->add_option("checkpoint", export_cmd.checkpoint, "checkpoint file, checkpoint folder or run folder")
      ->required();
  export_->add_option("--out", export_cmd.out, "the folder to write model.safetensors and config.json into")
      ->required();
  export_->add_option("--format", export_cmd.format, "safetensors (the only one) [default: safetensors]")
      ->check(CLI::IsMember({"safetensors"}));

  CLI::App* gen_features = app.add_subcommand(
      "gen-features", "write a synthetic dense-feature dataset for train-features (issue 21's large-input workload): "
                      "DIR/features.npy (samples x dim, float32) and DIR/labels.npy (int32)");
  tt::FeatureGenOptions gen_opt;
  gen_features->add_option("--out", gen_opt.out, "the folder to write")->required();
  gen_features->add_option("--samples", gen_opt.samples, "rows [default: 65536]")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 36));
  gen_features->add_option("--dim", gen_opt.dim, "floats a row [default: 1024]")->check(CLI::Range(1, 1 << 24));
  gen_features->add_option("--classes", gen_opt.classes, "label classes [default: 16]")->check(CLI::Range(2, 1 << 20));
  gen_features->add_option("--seed", gen_opt.seed, "[default: 1]");
  CLI::App* train_features = app.add_subcommand(
      "train-features", "train an MLP classifier on dense float features (numpy .npy), data parallel over the ranks "
                        "of a job with --input direct|via-root|replicated, timing each rank's input stage (issue 21's "
                        "large-input workload): tiertrain launch -n 4 -- tiertrain train-features --data DIR --mesh "
                        "data=4 --batch 16384");
  tt::FeatureTrainOptions feat_opt;
  train_features->add_option("--data", feat_opt.data, "a folder with features.npy and labels.npy")->required();
  train_features->add_option("--mesh", feat_opt.mesh, "data=N: the ranks of the job [default: one rank]");
  train_features->add_option("--input", feat_opt.input,
                             "direct (each rank reads its rows), via-root (rank 0 reads all and scatters), replicated "
                             "(each rank reads all, keeps its rows) [default: direct]")
      ->check(CLI::IsMember({"direct", "via-root", "replicated"}));
  train_features->add_option("--backend", feat_opt.backend, "auto, cpu or cuda [default: auto]")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  train_features->add_option("--batch", feat_opt.batch, "rows a step over all ranks [default: 4096]")
      ->check(CLI::Range(1, 1 << 30));
  train_features->add_option("--hidden", feat_opt.hidden, "the MLP's hidden width [default: 256]")
      ->check(CLI::Range(1, 1 << 20));
  train_features->add_option("--steps", feat_opt.steps, "[default: 20]")->check(CLI::Range(1, 1 << 30));
  train_features->add_option("--lr", feat_opt.lr, "AdamW's learning rate [default: 0.001]");
  train_features->add_option("--seed", feat_opt.seed, "initial values [default: 1]");
  train_features->add_option("--threads", feat_opt.threads, "CPU threads (0: automatic) [default: 0]")
      ->check(CLI::Range(0, 4096));
  train_features->add_option("--metrics-out", feat_opt.metrics_out, "per-step loss and times as JSON (rank 0)");

  CLI::App* launch = app.add_subcommand(
      "launch", "start N local ranks of one job: tiertrain launch -n N [--bind-to core|share] -- CMD [ARGS...]; each gets "
                "RANK, WORLD_SIZE, LOCAL_RANK and TIERTRAIN_COMM_ID; when a rank fails the others are stopped. "
                "tiertrain launch --cleanup: remove the shared-memory segments killed jobs left");
  tt::comm::LaunchOptions launch_opt;
  std::string bind_to = "none";
  bool launch_cleanup = false;
  launch->add_option("-n,--nproc", launch_opt.ranks, "number of ranks (required but with --cleanup)")
      ->check(CLI::Range(1, 4096));
  launch->add_flag("--cleanup", launch_cleanup,
                   "remove this user's tiertrain shared-memory segments that no process uses and that are over a "
                   "minute old (what killed jobs left; every launch does it first), then exit");
  launch->add_option("--bind-to", bind_to,
                     "core: pin rank r to the r-th CPU this process may use; share: to its equal share of those CPUs "
                     "(room for its helper threads); none (default: the ranks share the CPUs, and each rank's "
                     "OMP_NUM_THREADS is its share of them unless it is set)")
      ->check(CLI::IsMember({"none", "core", "share"}));
  launch->add_flag("--tag-output,!--no-tag-output", launch_opt.tag_output,
                   "prefix every line a rank writes with [rank R] (the ranks' output goes through the launcher, line "
                   "by line) [default: on]");
  launch->add_option("--log-dir", launch_opt.log_dir,
                     "also write each rank's stdout and stderr, untagged, to DIR/rank<R>.out and DIR/rank<R>.err");
  launch->add_option("--grace", launch_opt.grace_seconds,
                     "seconds between SIGTERM and SIGKILL when stopping the ranks after one failed [default: 5]");
  launch->formatter(std::make_shared<LaunchFormatter>());
  launch->prefix_command();  // everything from the command on is the command
  launch->allow_extras();

  CLI::App* bench = app.add_subcommand(
      "comm-bench", "benchmark a collective in nccl-tests' format, in every rank of a job: tiertrain launch -n N -- "
                    "tiertrain comm-bench -b 8 -e 256M -f 2");
  tt::comm::BenchOptions bench_opt;
  std::string bench_min = "8", bench_max = "64M", bench_dtype = "f32", bench_op = "sum";
  bench->add_option("-C,--collective", bench_opt.collective,
                    "allreduce (default), broadcast, reduce, allgather, gather, scatter, reduce_scatter, alltoall");
  bench->add_option("-b,--minbytes", bench_min, "smallest size (bytes; K, M, G suffixes) [default: 8]");
  bench->add_option("-e,--maxbytes", bench_max, "largest size [default: 64M]");
  bench->add_option("-f,--stepfactor", bench_opt.factor, "size multiplier between rows [default: 2]");
  bench->add_option("-n,--iters", bench_opt.iters, "timed iterations per size [default: 20]");
  bench->add_option("-w,--warmup_iters", bench_opt.warmup, "untimed iterations first [default: 5]");
  bench->add_option("--warmup-ms", bench_opt.warmup_ms,
                    "then more untimed iterations, as many on every rank, until this many ms have passed [default: 0]");
  bench->add_option("--first-warmup-ms", bench_opt.first_warmup_ms,
                    "--warmup-ms for the first row (0: the same) [default: 0]");
  bench->add_option("--min-ms", bench_opt.min_ms,
                    "time at least as many iterations as take this many ms at the warm-up's pace [default: 0]");
  bench->add_option("-c,--check", bench_opt.check, "checked iterations per size, counted in #wrong (0: none) [default: 1]");
  bench->add_option("-d,--datatype", bench_dtype, "f32, f64, bf16, f16, i32, i64 [default: f32]");
  bench->add_option("-o,--op", bench_op, "sum, prod, min, max, avg [default: sum]");
  bench->add_option("-r,--root", bench_opt.root, "root of the rooted collectives [default: 0]");
  bench->add_flag("--vary", bench_opt.vary, "new data before every operation (untimed), so caches do not flatter");
  bench->add_option("--json", bench_opt.json, "write the rows as JSON to this file (rank 0)");
  std::string bench_backend;
  bench->add_option("--backend", bench_backend, "shm, mpi or nccl (device buffers) [default: TIERTRAIN_COMM_BACKEND, else auto]")
      ->check(CLI::IsMember({"auto", "shm", "mpi", "nccl"}));
  bench->add_flag("--stream", bench_opt.stream,
                  "nccl: queue the timed calls on a stream and wait once per size, as nccl-tests does");

  // Every knob is a flag of train, plan and calibrate (only the parsed subcommand's options are filled).
  std::map<std::string, std::vector<std::string>> raw;
  std::map<std::string, std::vector<CLI::Option*>> opts;
  for (CLI::App* sub : {train, plan, calibrate}) {
    for (const tt::Knob& k : cfg.knobs()) {
      CLI::Option* o = sub->add_option(tt::Config::flag_name(k.spec.name), raw[k.spec.name],
                                       k.spec.help + " [default: " +
                                           (k.spec.default_value.empty() ? "none" : k.spec.default_value) + "]");
      if (k.spec.type == tt::KnobType::kChoice) {
        std::string names;  // the choices themselves, as CLI11 shows its own IsMember checks
        for (const std::string& c : k.spec.choices) names += (names.empty() ? "" : ",") + c;
        o->type_name("{" + names + "}");
      } else {
        o->type_name(type_hint(k.spec.type));
      }
      o->group(k.spec.group);
      if (k.spec.implicit_value.empty()) {
        o->expected(1);
      } else {
        o->expected(0, 1);
      }
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      opts[k.spec.name].push_back(o);
    }
  }
  auto given = [&](const std::string& name) {
    size_t n = 0;
    for (CLI::Option* o : opts[name]) n += o->count();
    return n;
  };

  // `launch ... -- CMD ...`: the command after "--" is not ours to parse (CLI11 would take it as positionals).
  std::vector<std::string> launch_tail;
  bool launch_dashes = false;
  if (argc > 1 && std::string(argv[1]) == "launch") {
    for (int i = 2; i < argc; ++i) {
      if (std::string(argv[i]) != "--") continue;
      launch_tail.assign(argv + i + 1, argv + argc);
      launch_dashes = true;
      argc = i;
      break;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  // Resolve in priority order: file, environment, flags.
  std::string config_file;
  if (given("config") > 0 && !raw["config"].empty()) config_file = raw["config"].back();
  else if (const char* env = std::getenv("TIERTRAIN_CONFIG")) config_file = env;
  if (!config_file.empty()) {
    if (tt::Status s = cfg.load_file(config_file); !s.is_ok()) return report(s);
  }
  cfg.also_in_env(tt::comm::environment_variables());
  if (tt::Status s = cfg.load_env(environ); !s.is_ok()) return report(s);
  for (const auto& [name, unused] : opts) {
    if (given(name) == 0) continue;
    const tt::KnobSpec& spec = cfg.spec(name);
    const std::vector<std::string>& values = raw[name];
    // A bare `--resume` reaches us as no value or an empty one: it means the implicit value.
    const bool bare = values.empty() || (values.back().empty() && !spec.implicit_value.empty());
    const std::string text = bare ? spec.implicit_value : values.back();
    if (tt::Status s = cfg.set(name, text, tt::KnobSource::kFlag); !s.is_ok()) return report(s);
  }
  tt::log::configure(cfg.get_string("debug"), cfg.get_string("debug_subsys"));
  if (!openblas_chose.empty())
    TT_LOG(INFO, EXEC, "OpenBLAS chose its %s kernels on a CPU with AVX2 and FMA: running with OPENBLAS_CORETYPE=%s "
           "(Note [OpenBLAS core]; TIERTRAIN_OPENBLAS_CORE=keep keeps OpenBLAS's choice)", openblas_chose.c_str(),
           std::getenv("OPENBLAS_CORETYPE"));

  if (launch->parsed()) {
    if (launch_cleanup) {
      const tt::RemovedFiles gone = tt::comm::remove_stale_segments();
      std::printf("removed %d shared-memory segment%s (%s) that killed jobs left\n", gone.files,
                  gone.files == 1 ? "" : "s", tt::format_bytes(gone.bytes).c_str());
      return 0;
    }
    if (launch->count("-n") == 0) {
      std::fprintf(stderr, "tiertrain launch: -n N is required (tiertrain launch -n N -- CMD ...)\n");
      return kExitUsage;
    }
    launch_opt.command = launch_dashes ? launch_tail : launch->remaining();
    launch_opt.bind_cores = bind_to == "core";
    launch_opt.bind_share = bind_to == "share";
    auto rc = tt::comm::launch(launch_opt);
    if (!rc.is_ok()) return report(rc.status());
    return rc.value();
  }
  if (bench->parsed()) {
    auto size = [](const std::string& t) -> tt::Result<size_t> {
      char* end = nullptr;
      const double v = std::strtod(t.c_str(), &end);
      const std::string unit = end;
      const double mult = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
      TT_RETURN_IF(end == t.c_str() || mult < 0 || v < 0, kInvalidArgument,
                   "comm-bench: size '%s' (a number of bytes with an optional K, M or G)", t.c_str());
      return static_cast<size_t>(v * mult);
    };
    auto mn = size(bench_min), mx = size(bench_max);
    if (!mn.is_ok()) return report(mn.status());
    if (!mx.is_ok()) return report(mx.status());
    bench_opt.min_bytes = mn.value();
    bench_opt.max_bytes = mx.value();
    auto dt = tt::comm::parse_dtype(bench_dtype);
    if (!dt.is_ok()) return report(dt.status());
    auto op = tt::comm::parse_op(bench_op);
    if (!op.is_ok()) return report(op.status());
    bench_opt.dtype = dt.value();
    bench_opt.op = op.value();
    if (!bench_backend.empty()) setenv("TIERTRAIN_COMM_BACKEND", bench_backend.c_str(), 1);
    auto comm = tt::comm::world();
    if (!comm.is_ok()) return report(comm.status());
    if (tt::Status s = tt::comm::run_bench(*comm.value(), bench_opt); !s.is_ok()) return report(s);
    return 0;
  }
  if (sample->parsed()) return tt::cli::run_sample(sample_cmd, stdout);
  if (plot->parsed()) return tt::cli::run_plot(plot_cmd, stdout);
  if (tokenize->parsed()) {
    auto r = tt::data::tokenize_to_shards(tok_opt, stdout);
    if (!r.is_ok()) return tt::cli::report(r.status());
    const auto& t = r.value();
    std::printf("tokenized %lld files (%s; %lld skipped as binary or empty) into %lld tokens (%.2f bytes a token) in "
                "%.1f s: %zu shards in %s\n",
                static_cast<long long>(t.files), tt::format_bytes(t.bytes).c_str(), static_cast<long long>(t.skipped),
                static_cast<long long>(t.tokens), t.tokens ? static_cast<double>(t.bytes) / t.tokens : 0.0,
                t.seconds, t.shards.size(), tok_opt.out.c_str());
    return 0;
  }
  if (export_->parsed()) return tt::cli::run_export(export_cmd, stdout);
  if (gen_features->parsed()) {
    tt::Status s = tt::generate_features(gen_opt);
    if (!s.is_ok()) return tt::cli::report(s);
    std::printf("wrote %s/features.npy (%lld x %d float32) and %s/labels.npy (%d classes)\n", gen_opt.out.c_str(),
                static_cast<long long>(gen_opt.samples), gen_opt.dim, gen_opt.out.c_str(), gen_opt.classes);
    return 0;
  }
  if (train_features->parsed()) {
    auto r = tt::train_features(feat_opt, stdout);
    if (!r.is_ok()) return tt::cli::report(r.status());
    return 0;
  }
  if (eval->parsed()) return tt::cli::run_eval(eval_cmd, stdout);
  if (train->parsed() || plan->parsed() || calibrate->parsed()) {
    if (tt::Status s = tt::apply_backend_defaults(cfg); !s.is_ok()) return report(s);
  }
  if (train->parsed()) {
    // Note [run folder] in exec/train_config.h: --run-dir sets the paths of what the run keeps.
    char now[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(now, sizeof now, "%Y%m%d-%H%M%S", std::localtime(&t));
    if (tt::Status s = tt::apply_run_dir(cfg, now); !s.is_ok()) return report(s);
  }
  if (print_config) {
    // Wrapped to the terminal's width (COLUMNS, else 100 when stdout is not a terminal).
    int width = 100;
    winsize ws{};
    if (isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) width = ws.ws_col;
    else if (const char* c = std::getenv("COLUMNS"); c != nullptr && std::atoi(c) >= 40) width = std::atoi(c);
    std::fputs(cfg.describe(width).c_str(), stdout);
    return 0;
  }
  if (!train->parsed() && !plan->parsed() && !calibrate->parsed()) {
    std::fputs(app.help().c_str(), stdout);
    return kExitUsage;
  }

  auto tc = tt::train_config_from(cfg);
  if (!tc.is_ok()) return report(tc.status());
  if (plan->parsed()) return tt::cli::run_plan(tc.value(), plan_cmd, stdout);
  if (calibrate->parsed()) return tt::cli::run_calibrate(tc.value(), calibrate_cmd, stdout);
  // Issue 24: under `tiertrain launch -n 2` (or mpirun, srun) without a --mesh every rank would train the same model
  // alone, and with a shared --checkpoint-dir write over the others' files: refused (issue 21: --mesh data=N makes
  // them one data-parallel run).
  for (const char* var : {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && std::atoi(v) > 1 && tc.value().mesh.empty()) {
      std::fprintf(stderr,
                   "tiertrain: error: %s=%s says this is one of %s ranks, and train has no --mesh: each rank would "
                   "train the same model alone (and write over the others' checkpoints). Give --mesh data=%s to "
                   "train one model data-parallel over them\n",
                   var, v, v, v);
      return kExitUsage;
    }
  }
  if (!tc.value().mesh.empty() && tc.value().plan == "auto") {
    std::fprintf(stderr, "tiertrain: error: --plan auto with --mesh: the automatic plan of a mesh run is not built yet "
                         "(every rank must run the same plan); give one (--plan in-core, recompute, ...)\n");
    return kExitUsage;
  }
  tc.value().dry_run = dry_run;
  tc.value().schedule_out = schedule_out;
  if (!schedule_out.empty() && !dry_run) {
    std::fprintf(stderr, "error: --schedule FILE is written by a dry run: add --dry-run\n");
    return kExitUsage;
  }
  // --plan auto is chosen before the run; with no --plan, only when the in-core plan turns out not to fit.
  if (tc.value().plan == "auto") {
    auto chose = tt::cli::choose_train_plan(tc.value(), explain_plan, stdout);
    if (!chose.is_ok()) return report(chose.status());
  }
  auto trainer = tt::Trainer::create(tc.value(), stdout);
  if (!trainer.is_ok() && trainer.status().code() == tt::StatusCode::kOutOfMemory && !tc.value().plan_given &&
      !dry_run && tc.value().mesh.empty()) {
    auto chose = tt::cli::choose_train_plan(tc.value(), explain_plan, stdout);
    if (!chose.is_ok()) return report(chose.status());
    if (chose.value()) trainer = tt::Trainer::create(tc.value(), stdout);
  }
  if (!trainer.is_ok()) return report(trainer.status());
  if (dry_run) return trainer.value()->dry_run_fits() ? 0 : 1;
  auto summary = trainer.value()->run();
  if (!summary.is_ok()) return report(summary.status());
  const bool lead = trainer.value()->is_lead();
  trainer.value().reset();  // the device memory back before the sample takes its own
  if (lead) tt::cli::finish_run_folder(tc.value(), stdout);
  return 0;
}
