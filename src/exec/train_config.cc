#include "exec/train_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numbers>

#include "backend/registry.h"
#include "core/log.h"

namespace tt {

void declare_train_knobs(Config& cfg) {
  using K = KnobType;
  auto knob = [&](const char* group, const char* name, K type, const char* def, const char* help, double min = -INFINITY,
                  double max = INFINITY) {
    KnobSpec s;
    s.group = group;
    s.name = name;
    s.type = type;
    s.default_value = def;
    s.help = help;
    s.min = min;
    s.max = max;
    cfg.declare(std::move(s));
  };
  auto choice = [&](const char* group, const char* name, const char* def, std::vector<std::string> choices,
                    const char* help) {
    KnobSpec s;
    s.group = group;
    s.name = name;
    s.type = K::kChoice;
    s.default_value = def;
    s.choices = std::move(choices);
    s.help = help;
    cfg.declare(std::move(s));
  };
  knob("general", "config", K::kString, "", "JSON file of knob values (lower priority than env and flags)");

  {
    // The families of this build (model/model.h), each with its description.
    std::vector<std::string> names;
    std::string help = "model family:";
    for (const ModelFamily* f : model_families()) {
      names.push_back(f->name());
      help += std::string(names.size() == 1 ? " " : "; ") + f->name() + " (" + f->summary() + ")";
    }
    choice("model", "family", model_families().front()->name(), names, help.c_str());
  }
  knob("model", "layers", K::kInt, "4", "transformer blocks", 1, 4096);
  knob("model", "dim", K::kInt, "128", "model width d", 1, 1 << 16);
  knob("model", "heads", K::kInt, "4", "attention heads (must divide dim)", 1, 1024);
  knob("model", "seq", K::kInt, "128", "sequence length T", 1, 1 << 20);
  // The options of the families that have them (each family's validate() refuses those it does not have).
  knob("model", "kv_heads", K::kInt, "0",
       "key/value heads of grouped-query attention (must divide --heads; 0: as many as --heads)", 0, 1024);
  knob("model", "ffn", K::kInt, "0", "the MLP's hidden width (0: the family's default)", 0, 1 << 20);
  knob("model", "tied_embeddings", K::kBool, "true",
       "the LM head is the token embedding (false: a matrix of its own, as Llama 3 8B's)");
  knob("model", "qkv_bias", K::kBool, "false", "biases on the query, key and value projections (as Qwen2's)");
  knob("model", "rope_theta", K::kFloat, "10000", "the rotary embedding's base (Llama 3: 500000)", 1, 1e12);
  knob("model", "norm_eps", K::kFloat, "1e-5", "the normalisations' epsilon", 1e-12, 0.1);

  knob("data", "data", K::kString, kDefaultCorpus, "text file, folder of text files, or llm.c token shard(s)");
  knob("data", "val_fraction", K::kFloat, "0.05", "share of each file held out for validation", 0, 0.5);

  knob("train", "batch", K::kInt, "16",
       "sequences per step B (per micro-batch with --grad-accum; the step's with --micro-batch)", 1, 1 << 20);
  {
    KnobSpec s;
    s.group = "train";
    s.name = "micro_batch";
    s.type = K::kString;
    s.default_value = "0";
    s.help =
        "sequences a micro-batch: a step of --batch sequences then runs as --batch / --micro-batch micro-batches whose "
        "gradients are summed before one update (what --grad-accum says the other way round; give one of them); "
        "auto (with --plan auto): the performance model chooses it with the plan; 0: --batch is one micro-batch";
    s.validate = [](const std::string& text) {
      if (text == "auto") return Status::ok();
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      TT_RETURN_IF(text.empty() || *end != '\0' || v < 0 || v > (1 << 20), kInvalidArgument,
                   "--micro-batch %s: a number of sequences (0 to %d) or auto", text.c_str(), 1 << 20);
      return Status::ok();
    };
    cfg.declare(std::move(s));
  }
  knob("train", "grad_accum", K::kInt, "1",
       "micro-batches of --batch sequences a step, their gradients summed before one update (a step: grad_accum x "
       "batch x seq tokens, in the memory of one micro-batch)",
       1, 1 << 16);
  knob("train", "steps", K::kInt, "0",
       "optimizer steps (length of the LR schedule); 0: the main job's, 2000 on a GPU and 800 on the CPU backend "
       "(about 2 minutes on 2 cores)",
       0, 1e12);
  knob("train", "stop_at", K::kInt, "0", "stop after this step, keeping the schedule of --steps (0: run all)", 0,
       1e12);
  knob("train", "time_limit", K::kFloat, "0",
       "minutes of wall time after which the run stops at the end of a step, writes a checkpoint and exits 75, as on "
       "SIGTERM (0: none); the job's limit less a checkpoint's writing",
       0, 1e9);
  knob("train", "lr", K::kFloat, "0",
       "peak learning rate (0: 3e-3 x min(1, 128 / dim), Adam's stable step shrinking with the width: 3e-3 for the "
       "default model, 5e-4 at d768, 9.4e-5 at d4096)",
       0, 10);
  knob("train", "min_lr_frac", K::kFloat, "0.1", "final learning rate as a fraction of --lr (cosine decay)", 0, 1);
  knob("train", "warmup", K::kInt, "30", "linear warmup steps", 0, 1e12);
  knob("train", "weight_decay", K::kFloat, "0.1", "AdamW weight decay (matrices and embeddings only)", 0, 10);
  knob("train", "grad_clip", K::kFloat, "1.0", "global gradient-norm clip (0: off)", 0, 1e6);
  knob("train", "beta1", K::kFloat, "0.9", "AdamW beta1", 0, 0.999999);
  knob("train", "beta2", K::kFloat, "0.95", "AdamW beta2", 0, 0.999999);
  knob("train", "seed", K::kInt, "1337", "seed of initialisation and data order", 0, 9.2e18);

  choice("runtime", "backend", "auto", {"auto", "cpu", "cuda"},
         "device to train on (auto: the GPU when the CUDA backend is available, else the CPU)");
  choice("runtime", "dtype", "auto", {"auto", "f32", "bf16"},
         "compute dtype; master weights and optimizer state stay f32 (auto: bf16 on a GPU, f32 on the CPU)");
  knob("runtime", "plan", K::kString, "in-core",
       "where each layer's tensors live: in-core keeps all on the device; in-core-selective too, but rebuilds each "
       "block's LayerNorm and GELU outputs in the backward with element-wise kernels (less memory for a few "
       "percent); recompute keeps block outputs and rebuilds the rest in the backward; swap-activations copies "
       "them to host memory and back; swap-attention-recompute-mlp "
       "swaps each block's attention half and rebuilds its MLP half; swap-attention-recompute-mlp-norms also "
       "rebuilds its LayerNorm outputs (swapping less); offload-params streams "
       "every block's parameters and gradients from host memory with the CPU optimizer; offload-all also swaps the "
       "activations; um puts activations and model state in Unified Memory without advice (default UM), um-advised "
       "with the advice table and the schedule's prefetches, um-swap-activations swaps activations through Unified "
       "Memory (prefetch and discard instead of copies); or a JSON plan file mixing them per layer (docs/PLANS.md); "
       "or auto, the fastest plan predicted to fit on this machine (tiertrain plan shows them all; chosen too when "
       "no --plan is given and in-core does not fit). All are bit-identical with the same kernels (on a GPU, a block "
       "whose GELU output is rebuilt runs its GELU apart from the GEMM: docs/PLANS.md)");
  choice("runtime", "optimizer", "plan", {"plan", "device", "cpu"},
         "where AdamW runs: device, or cpu (moments and fp32 master weights in host memory, updated by the host "
         "between the backward and the next forward); plan: as the plan says (device for the shortcuts)");
  knob("runtime", "speculative_update", K::kBool, "false",
       "CPU optimizer: update each block as soon as its gradients reach the host, during the backward, as if the "
       "gradient norm were under the clip, and redo it after the backward if it is not; bit-identical either way. "
       "Costs a second copy of the master, moments and bf16 copy in host memory (14 bytes a parameter)");
  choice("runtime", "host_buffers", "auto", {"auto", "whole", "ring"},
         "CPU optimizer: the gradients' host copy and the compute copy's staging copy, whole (a place for every "
         "parameter: 6 bytes a parameter with bf16 compute) or as rings of two slots of one segment each (Note [host "
         "buffers in rings]: the host then holds 12 bytes a parameter, the gradients' copies move from the backward "
         "into the update); auto: as a JSON plan says (\"host_buffers\"), else whole where the run fits the host's "
         "memory so and rings where only they fit");
  knob("runtime", "device_optimizer_segments", K::kString, "auto",
       "CPU optimizer: the first N parameter segments (the embeddings, then the first blocks) keep their fp32 master "
       "and AdamW moments on the device and are updated there, the rest on the host (Note [optimizer split]: 12 bytes "
       "a parameter more on the device, a shorter host update for the next forward to wait for); auto: the plan's "
       "count if it gives one (\"device_optimizer_segments\"), else as many as fit the device budget beside the run "
       "(none on the CPU backend, whose device memory is the host's); plan: as the plan says (none for the "
       "shortcuts)");
  knob("runtime", "swap_slots", K::kInt, "2", "device slots for swapped block activations (prefetch distance + 1)", 2,
       1024);
  knob("runtime", "device_budget", K::kBytes, "0",
       "hard cap on device memory, e.g. 512MiB, 2GiB (0: what the run needs on a GPU, half the RAM on the CPU)", 0, 9e18);
  knob("runtime", "threads", K::kInt, "0",
       "CPU threads: the CPU backend's kernels, beside a GPU the CPU optimizer's update (0: OMP_NUM_THREADS if set, "
       "else the cores this process may run on; beside a GPU one fewer)",
       0, 4096);
  knob("runtime", "host_numa_node", K::kInt, "-1",
       "NUMA node of the host memory the copy engines use (-1: the GPU's own node; none on the CPU backend)", -1, 1023);
  knob("runtime", "cpu_lock_host_memory", K::kBool, "false",
       "CPU backend: mlock host-tier buffers as a GPU pins them (needs RLIMIT_MEMLOCK, `ulimit -l`)");
  knob("runtime", "cpu_copy_delay_us", K::kInt, "0",
       "CPU backend: microseconds added to every host<->device copy, a slow link to study overlap (0: none)", 0, 1e9);

  knob("runtime", "cpu_compute_delay_us", K::kInt, "0",
       "CPU backend: microseconds added to every compute op, slow kernels to test copy ordering (0: none)", 0, 1e9);
  knob("runtime", "cpu_host_delay_us", K::kInt, "0",
       "CPU backend: microseconds added to every piece of host-stream work (the CPU optimizer's updates) (0: none)", 0,
       1e9);

  choice("runtime", "attention_impl", "auto", {"auto", "cudnn", "native"},
         "attention on a GPU: auto (cuDNN's fused attention where the library loads and takes the shape, else our "
         "kernels), cudnn (the same, but a cuDNN that does not load is an error), native (our kernels)");
  knob("runtime", "attention_deterministic", K::kBool, "true",
       "cuDNN's attention backward repeats bit for bit (true: d(q) by a plain matmul over a B*H*T^2 workspace); false: "
       "cuDNN's default form, which PyTorch's SDPA runs (d(q) summed in fp32 atomics: faster and a smaller workspace, "
       "but its last bits vary from run to run, so resume and the plans match in-core only up to rounding). Note "
       "[non-deterministic backward] in backend/cuda/sdpa_graph.h; our own kernels are deterministic either way");
  choice("runtime", "gemm_impl", "cublas", {"cublas", "cublaslt"},
         "bf16 GEMMs on a GPU without a fused bias or GELU (Llama's, GPT's backward): cublas (cublasGemmEx, its default "
         "algorithm), cublaslt (cuBLASLt's first heuristic algorithm per shape, as the fused GEMMs); both deterministic");
  knob("runtime", "xent_blocks", K::kInt, "0",
       "a GPU: the fused cross-entropy's grid (Note [cross-entropy rows in flight]): 0 one block a row of logits; N "
       "blocks, each taking every N-th row, so that the rows in flight stay in L2 for the loss's second pass; the "
       "same bits either way");
  choice("runtime", "f32_attention", "auto", {"auto", "gemm", "simt"},
         "f32 attention on a GPU: auto (fused 3xTF32 tensor-core kernels for head size 64 or 128, else cuBLAS SGEMMs "
         "over the attention workspace, else SIMT kernels), gemm (the SGEMMs where the workspace holds a (batch, "
         "head) pair, else SIMT), simt (our SIMT flash kernels); all fp32-accurate");
  knob("runtime", "cudnn_library", K::kString, "",
       "libcudnn.so.9 to load, or the folder holding it (empty: the folders found at build time, then the loader's "
       "path)");
  knob("runtime", "lm_chunk_rows", K::kInt, "0",
       "rows (tokens) of the LM head's logits computed at once (Note [LM head in chunks] in model/model.h): more rows "
       "take more device memory for the logits and fewer passes over the f32 gradient of wte (0: the model's "
       "default)",
       0, 1e9);
  knob("runtime", "um_allow_oversubscription", K::kBool, "false",
       "UNSAFE on a GPU shared with other jobs: let a plan's managed memory (--plan um, um-advised, "
       "um-swap-activations, or \"managed\" placements) be larger than the GPU's free memory, so that the driver "
       "evicts pages under load. Without it such a plan is refused at start");
  knob("runtime", "allow_nonfinite", K::kBool, "false",
       "resume or start from a checkpoint holding NaN, infinity or negative second moments (refused otherwise: a "
       "diverged or damaged run's), for forensics");
  knob("runtime", "norm_beside_backward", K::kBool, "true",
       "with AdamW on the device (one data and one tensor-parallel rank): each segment's part of the gradient norm "
       "on the comm stream as soon as its backward is done, beside the next block's backward (Note [norm beside the "
       "backward]; the same bits); false: all parts in the step, on the compute stream");
  choice("runtime", "grad_dtype", "auto", {"auto", "f32", "bf16"},
         "the blocks' weight gradients: f32, or bf16 as PyTorch's autocast writes them (Note [bf16 gradients]: each "
         "product's f32 sum rounded once; half the gradients' memory and bytes for the norm and AdamW; the "
         "embeddings' and final norm's stay f32; data ranks average them in bf16). bf16 needs AdamW on the device, "
         "not sharded, gradients not managed, and --grad-accum 1; on a GPU bf16 compute. auto: bf16 where the "
         "compute is bf16 (a GPU's default), one data rank, and the run takes them, else f32; a JSON plan's "
         "grad_dtype stands unless this names one");
  knob("runtime", "grads_in_activations", K::kBool, "true",
       "keep a block's gradients in the activation memory of later blocks, dead once their backwards are done "
       "(Note [gradients in dead activations]: resident blocks, device optimizer; bit-identical, less memory), and "
       "the head's tensors in blocks' gradient buffers before their backward (Note [head in gradients]); false: "
       "every gradient and head tensor in a buffer of its own");
  static_assert(memory::kDefaultUmHostPieceBytes == int64_t(32) << 20, "um_host_piece_mib's default below");
  knob("runtime", "um_host_piece_mib", K::kInt, "32",
       "a GPU: managed memory moved to the host in pieces of this many MiB (Note [prefetches to the host in pieces] "
       "in backend/cuda/um.cc: pieces move faster than one whole range); 0: one prefetch a range",
       0, 1 << 20);
  knob("runtime", "host_ahead", K::kBool, "true",
       "enqueue the next training step before reading this one's loss and gradient norm (Note [host one step ahead] "
       "in exec/trainer.cc), so that the GPU does not wait for the host between steps; the same results either way. "
       "Steps before an evaluation or a checkpoint, the first and the last, and runs with the CPU optimizer go one "
       "at a time");
  knob("runtime", "um_counters", K::kBool, "false",
       "count Unified Memory's page faults and migrations and print them per step (CUPTI's counters on a GPU; on "
       "the CPU backend what the emulated prefetches would move); in --metrics-out as um_counters_per_step");
  {
    KnobSpec s;
    s.group = "runtime";
    s.name = "attention_workspace";
    s.type = K::kString;
    s.default_value = "auto";
    s.help =
        "most device memory cuDNN's attention backward (bf16), the f32 attention's GEMMs or the fused f32 backward's "
        "d(q) partials may use, e.g. 512MiB (all grow as B*H*T^2; beyond this they run over chunks of the batch and "
        "heads, which is slower; the fused f32 backward takes its d(q) kernel instead where fewer than 32 (batch, "
        "head) pairs fit); auto: 1/64 of the --device-budget, or of the "
        "GPU's memory when the budget is automatic (the 512MiB floor where more would not let the run fit), at least "
        "512MiB; 0: none (f32 attention on the flash kernels)";
    s.validate = [](const std::string& text) { return parse_attention_workspace(text).status(); };
    cfg.declare(std::move(s));
  }
  knob("parallel", "mesh", K::kString, "",
       "the named device mesh this run is one rank of, e.g. data=2 or data=2,model=2 (its product: the ranks "
       "`tiertrain launch -n N` or mpirun starts); --batch is then the global batch, split over the batch dimension "
       "(data parallel: gradients averaged over its ranks); a dimension named model (or tp, tensor) splits the "
       "blocks' heads and MLP width and the vocabulary over its ranks (tensor parallel). Empty: one process");
  knob("parallel", "layout", K::kString, "",
       "which mesh dimension each tensor dimension (batch, heads, ff, vocab, embed) is split over, e.g. "
       "batch:data,heads:model (empty: batch on a dimension named data, dp or batch, or on the only one)");
  choice("parallel", "input", "direct", {"direct", "via-root", "replicated"},
         "how a data-parallel rank gets its part of each batch: direct (it reads only its part, into its own "
         "buffer, and copies it on its own stream), via-root (rank 0 of the batch dimension reads the whole batch "
         "and scatters it), replicated (every rank reads the whole batch and keeps its part); the same batches and "
         "results in all three");
  knob("parallel", "shard_optimizer", K::kBool, "false",
       "with data parallel: each rank keeps and updates only its 1/N of AdamW's moments (ZeRO stage 1), then the "
       "ranks exchange the updated parameters; the same results, 8 bytes a parameter less device memory times "
       "(N-1)/N with the device optimizer; with --optimizer cpu each rank's host keeps and updates only its 1/N of "
       "the master, moments and gradients (16 bytes a parameter times (N-1)/N less host memory, 1/N of the update's "
       "work)");
  knob("checkpoint", "checkpoint_dir", K::kString, "", "folder for checkpoints (created if missing)");
  knob("checkpoint", "checkpoint_every", K::kInt, "0", "write a checkpoint every N steps (0: only at the end)", 0,
       1e12);
  knob("checkpoint", "keep_checkpoints", K::kInt, "3", "checkpoints kept in --checkpoint-dir (older ones removed)", 1,
       1e6);
  KnobSpec resume;
  resume.group = "checkpoint";
  resume.name = "resume";
  resume.type = K::kString;
  resume.default_value = "";
  resume.implicit_value = "latest";
  resume.help = "continue from a checkpoint: --resume (latest in --checkpoint-dir) or --resume=FILE";
  cfg.declare(std::move(resume));
  knob("checkpoint", "from_safetensors", K::kString, "",
       "start from a Hugging Face model folder (config.json and safetensors, sharded or not, F32/BF16/F16, as "
       "transformers and tiertrain export write them; its config.json gives the model) or one .safetensors file of "
       "the model the flags give, with a fresh optimizer");
  knob("checkpoint", "init_from", K::kString, "",
       "start from the parameters of this checkpoint (a file, a checkpoint folder or a run folder: its latest), with "
       "a fresh optimizer and schedule, on any data: fine-tuning, or a longer run from a finished one; the model's "
       "shape must match");

  knob("eval", "eval_every", K::kInt, "100", "validation loss every N steps and at the end (0: never)", 0, 1e12);
  knob("eval", "eval_batches", K::kInt, "20", "validation batches per evaluation", 1, 1e9);

  knob("output", "run_dir", K::kString, "",
       "folder the run keeps everything in (Note [run folder]): checkpoints/, config.json, metrics.jsonl (streamed), "
       "metrics.json, sample.txt; 'auto': runs/<date-time>; the flags for each still win (scripts/train.sh: auto)");
  knob("output", "metrics_out", K::kString, "", "JSON file of metrics written at the end");
  knob("output", "metrics_jsonl", K::kString, "",
       "JSON Lines file appended as the run goes: a record per logged step, per evaluation, and the summary");
  knob("output", "sample_tokens", K::kInt, "200",
       "with --run-dir: tokens of text sampled from the final checkpoint at the end, printed and kept in sample.txt "
       "(0: none)",
       0, 1e6);
  knob("output", "log_every", K::kInt, "10", "progress line every N steps", 1, 1e12);
  knob("output", "profile", K::kBool, "false", "time every op on the compute stream; print a table at the end");
  knob("output", "trace", K::kString, "",
       "write a Chrome/Perfetto trace (JSON) of the training steps after the first: one track per stream (compute, "
       "h2d, d2h, host) with op names, bytes and times; open in ui.perfetto.dev or chrome://tracing");

  choice("logging", "debug", "WARN", {"NONE", "WARN", "INFO", "TRACE"}, "log level on stderr");
  KnobSpec subsys;
  subsys.group = "logging";
  subsys.name = "debug_subsys";
  subsys.type = K::kString;
  subsys.default_value = "ALL";
  subsys.help = "subsystems to log: ALL, or a list of MEM,SWAP,UM,PERF,COMM,MESH,DATA,EXEC,CKPT (^X: all but X)";
  subsys.validate = [](const std::string& text) { return log::parse_subsys(text).take_status(); };
  cfg.declare(std::move(subsys));
}

namespace {
// --steps 0: the main job's length on this backend.
Result<int64_t> default_steps(const std::string& backend_knob) {
  // (A GPU's needs none here: a dry run of --backend cuda may run where there is none, Note [dry run without the
  // GPU] in exec/trainer.cc; a real run is refused when the backend is resolved.)
  if (backend_knob == "cuda") return 2000;
  TT_ASSIGN_OR_RETURN(std::string backend, resolve_backend_name(backend_knob));
  return backend == "cpu" ? 800 : 2000;
}
}  // namespace

Result<TrainConfig> train_config_from(const Config& cfg) {
  TrainConfig tc;
  tc.model.layers = static_cast<int>(cfg.get_int("layers"));
  tc.model.dim = static_cast<int>(cfg.get_int("dim"));
  tc.model.heads = static_cast<int>(cfg.get_int("heads"));
  tc.model.seq = static_cast<int>(cfg.get_int("seq"));
  tc.model.family = cfg.get_string("family");
  tc.model.kv_heads = static_cast<int>(cfg.get_int("kv_heads"));
  tc.model.ffn = static_cast<int>(cfg.get_int("ffn"));
  tc.model.tied_embeddings = cfg.get_bool("tied_embeddings");
  tc.model.qkv_bias = cfg.get_bool("qkv_bias");
  tc.model.rope_theta = cfg.get_float("rope_theta");
  tc.model.norm_eps = cfg.get_float("norm_eps");
  for (const char* k : {"family", "layers", "dim", "heads", "seq", "kv_heads", "ffn", "tied_embeddings", "qkv_bias",
                        "rope_theta", "norm_eps"})
    if (cfg.source(k) != KnobSource::kDefault) tc.model_knobs_given.insert(k);
  tc.data = cfg.get_string("data");
  tc.val_fraction = cfg.get_float("val_fraction");
  tc.batch = static_cast<int>(cfg.get_int("batch"));
  tc.grad_accum = static_cast<int>(cfg.get_int("grad_accum"));
  const std::string micro_text = cfg.get_string("micro_batch");
  tc.micro_batch_auto = micro_text == "auto";
  if (tc.micro_batch_auto) {
    // Note [automatic micro-batch] in perf/auto_plan.h: --batch is the step's, split with the plan's choice.
    TT_RETURN_IF(cfg.source("grad_accum") != KnobSource::kDefault, kInvalidArgument,
                 "--micro-batch auto and --grad-accum %d both say how a step is split; give one", tc.grad_accum);
    TT_RETURN_IF(cfg.get_string("plan") != "auto", kInvalidArgument,
                 "--micro-batch auto is chosen with the plan: add --plan auto (or give --micro-batch a number)");
  }
  if (const int micro = tc.micro_batch_auto ? 0 : std::atoi(micro_text.c_str()); micro > 0) {
    // Note [gradient accumulation] in exec/executor.h: --batch B --micro-batch M is --batch M --grad-accum B / M.
    TT_RETURN_IF(cfg.source("grad_accum") != KnobSource::kDefault, kInvalidArgument,
                 "--micro-batch %d and --grad-accum %d both say how a step is split; give one (--batch %d "
                 "--micro-batch %d is --batch %d --grad-accum %d)",
                 micro, tc.grad_accum, tc.batch, micro, micro, tc.batch / micro);
    TT_RETURN_IF(tc.batch % micro != 0, kInvalidArgument,
                 "--batch %d is not a multiple of --micro-batch %d: a step is a whole number of micro-batches",
                 tc.batch, micro);
    TT_RETURN_IF(tc.batch / micro > (1 << 16), kInvalidArgument,
                 "--batch %d in micro-batches of %d: %d micro-batches a step, at most 65536", tc.batch, micro,
                 tc.batch / micro);
    tc.grad_accum = tc.batch / micro;
    tc.batch = micro;
  }
  tc.steps = cfg.get_int("steps");
  if (tc.steps == 0) {
    TT_ASSIGN_OR_RETURN(tc.steps, default_steps(cfg.get_string("backend")));
  }
  tc.stop_at = cfg.get_int("stop_at");
  tc.time_limit_min = cfg.get_float("time_limit");
  tc.lr = static_cast<float>(cfg.get_float("lr"));
  tc.lr_auto = tc.lr == 0.0f;
  if (tc.lr_auto) tc.lr = auto_learning_rate(tc.model.dim);
  tc.min_lr_frac = static_cast<float>(cfg.get_float("min_lr_frac"));
  tc.warmup = cfg.get_int("warmup");
  tc.weight_decay = static_cast<float>(cfg.get_float("weight_decay"));
  tc.grad_clip = static_cast<float>(cfg.get_float("grad_clip"));
  tc.beta1 = static_cast<float>(cfg.get_float("beta1"));
  tc.beta2 = static_cast<float>(cfg.get_float("beta2"));
  tc.seed = static_cast<uint64_t>(cfg.get_int("seed"));
  tc.backend = cfg.get_string("backend");
  tc.dtype = cfg.get_string("dtype");
  tc.plan = cfg.get_string("plan");
  tc.plan_given = cfg.source("plan") != KnobSource::kDefault;
  if (const std::string o = cfg.get_string("optimizer"); o != "plan") {
    TT_ASSIGN_OR_RETURN(tc.optimizer, parse_optimizer_placement(o));
  }
  tc.speculative_update = cfg.get_bool("speculative_update");
  tc.swap_slots = static_cast<int>(cfg.get_int("swap_slots"));
  tc.device_budget = cfg.get_bytes("device_budget");
  tc.threads = static_cast<int>(cfg.get_int("threads"));
  tc.cpu_copy_delay_us = cfg.get_int("cpu_copy_delay_us");
  tc.cpu_compute_delay_us = cfg.get_int("cpu_compute_delay_us");
  tc.cpu_host_delay_us = cfg.get_int("cpu_host_delay_us");
  tc.lm_chunk_rows = cfg.get_int("lm_chunk_rows");
  tc.um_allow_oversubscription = cfg.get_bool("um_allow_oversubscription");
  tc.grads_in_activations = cfg.get_bool("grads_in_activations");
  const std::string gd = cfg.get_string("grad_dtype");
  tc.grad_dtype = gd == "bf16" ? GradDtype::kBF16 : gd == "f32" ? GradDtype::kF32 : GradDtype::kAuto;
  tc.norm_beside_backward = cfg.get_bool("norm_beside_backward");
  tc.host_buffers = cfg.get_string("host_buffers");
  tc.device_optimizer_segments = cfg.get_string("device_optimizer_segments");
  if (const std::string& d = tc.device_optimizer_segments; d != "plan" && d != "auto") {
    const bool digits = !d.empty() && d.size() <= 6 && d.find_first_not_of("0123456789") == std::string::npos;
    TT_RETURN_IF(!digits, kInvalidArgument, "--device-optimizer-segments %s: plan, auto or a count of segments",
                 d.c_str());
  }
  tc.allow_nonfinite = cfg.get_bool("allow_nonfinite");
  tc.um_host_piece_mib = cfg.get_int("um_host_piece_mib");
  tc.host_ahead = cfg.get_bool("host_ahead");
  tc.um_counters = cfg.get_bool("um_counters");
  tc.host_numa_node = static_cast<int>(cfg.get_int("host_numa_node"));
  tc.cpu_lock_host_memory = cfg.get_bool("cpu_lock_host_memory");
  TT_ASSIGN_OR_RETURN(tc.attention.impl, parse_attention_impl(cfg.get_string("attention_impl")));
  TT_ASSIGN_OR_RETURN(tc.attention.f32, parse_f32_attention(cfg.get_string("f32_attention")));
  tc.attention.deterministic = cfg.get_bool("attention_deterministic");
  TT_ASSIGN_OR_RETURN(tc.gemm, parse_gemm_impl(cfg.get_string("gemm_impl")));
  tc.xent_blocks = cfg.get_int("xent_blocks");
  TT_RETURN_IF(tc.xent_blocks < 0, kInvalidArgument, "--xent-blocks must be >= 0, got %lld",
               static_cast<long long>(tc.xent_blocks));
  tc.attention.cudnn_library = cfg.get_string("cudnn_library");
  TT_ASSIGN_OR_RETURN(tc.attention.workspace_cap, parse_attention_workspace(cfg.get_string("attention_workspace")));
  tc.mesh = cfg.get_string("mesh");
  tc.layout = cfg.get_string("layout");
  // Issue 47: a layout says how a mesh's dimensions split the model; without a mesh it would be ignored unread.
  TT_RETURN_IF(!tc.layout.empty() && tc.mesh.empty(), kInvalidArgument,
               "--layout %s says how a mesh splits the model, but there is no --mesh (e.g. --mesh data=2,model=2)",
               tc.layout.c_str());
  tc.input = cfg.get_string("input");
  tc.shard_optimizer = cfg.get_bool("shard_optimizer");
  tc.checkpoint_dir = cfg.get_string("checkpoint_dir");
  tc.checkpoint_every = cfg.get_int("checkpoint_every");
  tc.keep_checkpoints = cfg.get_int("keep_checkpoints");
  tc.resume = cfg.get_string("resume");
  tc.init_from = cfg.get_string("init_from");
  tc.from_safetensors = cfg.get_string("from_safetensors");
  tc.eval_every = cfg.get_int("eval_every");
  tc.eval_batches = cfg.get_int("eval_batches");
  tc.metrics_out = cfg.get_string("metrics_out");
  tc.run_dir = cfg.get_string("run_dir");
  tc.metrics_jsonl = cfg.get_string("metrics_jsonl");
  tc.sample_tokens = cfg.get_int("sample_tokens");
  tc.log_every = cfg.get_int("log_every");
  tc.profile = cfg.get_bool("profile");
  tc.trace = cfg.get_string("trace");
  // A knob's text need not be UTF-8 (a path is bytes): JSON can hold only UTF-8, so invalid bytes become U+FFFD
  // here, once, and every copy (metrics, checkpoints, the resume check) agrees.
  tc.resolved = nlohmann::json::parse(cfg.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));

  TT_RETURN_IF(tc.model.dim % tc.model.heads != 0, kInvalidArgument, "--dim %d is not divisible by --heads %d",
               tc.model.dim, tc.model.heads);
  if (tc.model.kv_heads == tc.model.heads) tc.model.kv_heads = 0;  // the same model
  {
    // The family's checks, with the vocabulary not yet known (the data sets it): a valid stand-in.
    ModelConfig probe = tc.model;
    probe.vocab = 256;
    TT_TRY(probe.validate());
  }
  TT_RETURN_IF(tc.stop_at > tc.steps, kInvalidArgument, "--stop-at %lld is beyond --steps %lld",
               static_cast<long long>(tc.stop_at), static_cast<long long>(tc.steps));
  TT_RETURN_IF(tc.checkpoint_every > 0 && tc.checkpoint_dir.empty(), kInvalidArgument,
               "--checkpoint-every needs --checkpoint-dir");
  TT_RETURN_IF(!tc.from_safetensors.empty() && (!tc.init_from.empty() || !tc.resume.empty()), kInvalidArgument,
               "--from-safetensors with --init-from or --resume: each sets the starting weights. Give one");
  TT_RETURN_IF(!tc.init_from.empty() && !tc.resume.empty(), kInvalidArgument,
               "--init-from and --resume: --resume continues a run as it was (optimizer, data position, step); "
               "--init-from starts a new one from a checkpoint's parameters. Give one");
  TT_RETURN_IF(tc.resume == "latest" && tc.checkpoint_dir.empty(), kInvalidArgument,
               "--resume without a file needs --checkpoint-dir to find the latest checkpoint");
  // Issue 24: a warm-up as long as the run was silently accepted; the rate then never reaches --lr.
  if (tc.warmup >= tc.steps && tc.steps > 0)
    TT_LOG(WARN, EXEC,
           "--warmup %lld is not shorter than --steps %lld: the learning rate rises the whole run and never reaches "
           "--lr %g (and the cosine decay never starts); a warm-up is usually a few percent of the steps",
           static_cast<long long>(tc.warmup), static_cast<long long>(tc.steps), static_cast<double>(tc.lr));
  return tc;
}

Status adopt_model(TrainConfig& cfg, const ModelConfig& from, const std::string& source, bool strict) {
  const ModelConfig& m = cfg.model;
  ModelConfig out = from;
  std::string mismatch;
  // Each model knob: whether it was given, its value in cfg and in `from` (as text), and how to keep cfg's.
  auto knob = [&](const char* name, const std::string& given, const std::string& theirs, auto keep) {
    if (cfg.model_knobs_given.count(name) == 0) return;
    keep();
    if (given == theirs) return;
    mismatch += mismatch.empty() ? "" : "; ";
    mismatch += strict ? str_format("%s %s but %s", Config::flag_name(name).c_str(), given.c_str(), theirs.c_str())
                       : str_format("%s is %s in the checkpoint but %s now", name, theirs.c_str(), given.c_str());
  };
  auto num = [](double v) { return str_format("%g", v); };
  auto yes = [](bool b) { return std::string(b ? "true" : "false"); };
  knob("family", m.family, from.family, [&] { out.family = m.family; });
  knob("layers", num(m.layers), num(from.layers), [&] { out.layers = m.layers; });
  knob("dim", num(m.dim), num(from.dim), [&] { out.dim = m.dim; });
  knob("heads", num(m.heads), num(from.heads), [&] { out.heads = m.heads; });
  knob("seq", num(m.seq), num(from.seq), [&] { out.seq = m.seq; });
  knob("kv_heads", num(m.kv_head_count()), num(from.kv_head_count()), [&] { out.kv_heads = m.kv_heads; });
  knob("ffn", num(m.ffn), num(from.ffn), [&] { out.ffn = m.ffn; });
  knob("tied_embeddings", yes(m.tied_embeddings), yes(from.tied_embeddings),
       [&] { out.tied_embeddings = m.tied_embeddings; });
  knob("qkv_bias", yes(m.qkv_bias), yes(from.qkv_bias), [&] { out.qkv_bias = m.qkv_bias; });
  knob("rope_theta", num(m.rope_theta), num(from.rope_theta), [&] { out.rope_theta = m.rope_theta; });
  knob("norm_eps", num(m.norm_eps), num(from.norm_eps), [&] { out.norm_eps = m.norm_eps; });
  TT_RETURN_IF(strict && !mismatch.empty(), kInvalidArgument,
               "the model of %s is not the one the flags give: %s (leave the model flags out to take %s's)",
               source.c_str(), mismatch.c_str(), source.c_str());
  TT_RETURN_IF(!mismatch.empty(), kFailedPrecondition, "%s does not match this run: %s (leave the model flags out to "
               "take its model)", source.c_str(), mismatch.c_str());
  out.tp = cfg.model.tp;
  out.split_vocab = cfg.model.split_vocab;
  cfg.model = out;
  // The knobs as resolved (written to checkpoints and the run folder) follow the model taken.
  if (cfg.resolved.is_object()) {
    const nlohmann::json values = {{"family", out.family},       {"layers", out.layers},
                                   {"dim", out.dim},             {"heads", out.heads},
                                   {"seq", out.seq},             {"kv_heads", out.kv_heads},
                                   {"ffn", out.ffn},             {"tied_embeddings", out.tied_embeddings},
                                   {"qkv_bias", out.qkv_bias},   {"rope_theta", out.rope_theta},
                                   {"norm_eps", out.norm_eps}};
    for (const auto& [k, v] : values.items())
      if (cfg.resolved.contains(k)) cfg.resolved[k] = v;
  }
  return Status::ok();
}

Status apply_backend_defaults(Config& cfg) {
  if (cfg.get_int("steps") != 0) return Status::ok();
  TT_ASSIGN_OR_RETURN(int64_t steps, default_steps(cfg.get_string("backend")));
  return cfg.set("steps", std::to_string(steps), cfg.source("steps"),
                 steps == 800 ? "default on the cpu backend" : "default on a GPU");
}

Status apply_run_dir(Config& cfg, const std::string& now) {
  std::string dir = cfg.get_string("run_dir");
  if (dir.empty()) return Status::ok();
  const std::string origin = "from --run-dir";
  if (dir == "auto") {
    dir = "runs/" + now;
    TT_TRY(cfg.set("run_dir", dir, cfg.source("run_dir"), origin + " auto"));
  }
  for (const auto& [knob, path] : {std::pair<const char*, std::string>{"checkpoint_dir", dir + "/checkpoints"},
                                   {"metrics_out", dir + "/metrics.json"},
                                   {"metrics_jsonl", dir + "/metrics.jsonl"}})
    if (cfg.source(knob) == KnobSource::kDefault) TT_TRY(cfg.set(knob, path, KnobSource::kDefault, origin));
  return Status::ok();
}

float auto_learning_rate(int dim) {
  return static_cast<float>(3e-3 * std::min(1.0, 128.0 / static_cast<double>(std::max(dim, 1))));
}

float learning_rate(const TrainConfig& tc, int64_t step) {
  const double lr = tc.lr, min_lr = tc.lr * static_cast<double>(tc.min_lr_frac);
  if (tc.warmup > 0 && step <= tc.warmup) return static_cast<float>(lr * static_cast<double>(step) / tc.warmup);
  const int64_t decay_steps = tc.steps - tc.warmup;
  if (decay_steps <= 0) return static_cast<float>(lr);
  const double progress = static_cast<double>(step - tc.warmup) / static_cast<double>(decay_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

}  // namespace tt
