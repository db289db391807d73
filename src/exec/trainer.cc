#include "exec/trainer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "host/adamw.h"
#include "core/log.h"
#include "core/tensorfile.h"
#include "core/units.h"
#include "exec/checkpoint.h"
#include "exec/hf.h"
#include "mesh/mesh.h"

namespace tt {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Writes j to path at once (core/atomic_file.h); paths in it need not be UTF-8 (invalid bytes become U+FFFD).
Status write_json_atomically(const std::string& path, const nlohmann::json& j) {
  return write_file_atomically(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace

// Note [host memory of a run]
// What a run takes of the host's RAM, counted before anything is allocated: the host slab of the inventory (pinned on
// a GPU, for the copy engines: input staging, swapped activations, the CPU optimizer's master, moments, gradients and
// compute copy), the managed pages the plan does not keep on the device (they live in host memory between uses), and
// on the CPU backend the device arena's need (its "device" memory is this RAM). Compared with the memory the kernel
// says is available (MemAvailable: free plus what it can reclaim without swapping), not the total: a run that needs
// more is refused with its parts (exit 1, or another plan with the automatic one), rather than killed by the kernel
// or paging at a tenth of the speed once its state is allocated. What the backend allocates for itself (CUDA's
// context, cuDNN's library, the threads' stacks) is not counted: tens to hundreds of MiB.
int64_t RunSpec::host_need() const {
  // (The CPU backend's device arena is host memory; a GPU's, present or not (a dry run without it), is not.)
  return inventory.total(Inventory::kHost) + (managed_total - managed_device) + (backend == "cpu" ? device_need() : 0);
}

std::string RunSpec::describe_host_need() const {
  // Note [pinned and pageable host memory] in plan/inventory.h.
  std::string s = str_format("%s %s (%s)", format_bytes(inventory.pinned_total()).c_str(),
                             backend != "cpu" ? "pinned" : "in the host slab",
                             inventory.describe_host(false).c_str());
  if (inventory.pageable_total() > 0)
    s += str_format(", %s pageable (%s)", format_bytes(inventory.pageable_total()).c_str(),
                    inventory.describe_host(true).c_str());
  if (managed_total > managed_device)
    s += str_format(", %s of managed pages off the device", format_bytes(managed_total - managed_device).c_str());
  if (backend == "cpu") s += str_format(", %s for the CPU backend's device arena", format_bytes(device_need()).c_str());
  return s;
}

namespace {
// Note [optimizer split] in plan/schedule.h (--device-optimizer-segments auto): the most segments whose master and
// moments fit beside the run, in the budget given, else in the free memory with the automatic budget's 5% on top;
// none where the plan cannot split. r's inventory (with the backend's reserve) and plan are those of the choice.
Status choose_device_optimizer_segments(const TrainConfig& cfg, int64_t usable, RunSpec& r) {
  ExecSpec& e = r.exec;
  const int S = e.model.layers + 2;
  const int64_t base = r.device_need();
  Inventory inv;
  const int lo = Executor::largest_optimizer_split(
      e,
      [&](const Inventory& i) {
        // (r.inventory holds the backend's reserve as an entry; a fresh inventory does not.)
        const int64_t need = i.total(Inventory::kDevice) + r.reserve.reserved_bytes + r.managed_device;
        return cfg.device_budget > 0 ? need <= cfg.device_budget : need + need / 20 <= usable;
      },
      &inv);
  if (lo == 0) return Status::ok();
  inv.add_backend_reserved(r.reserve.reserved_bytes);
  r.inventory = std::move(inv);
  e.plan.device_optimizer_segments = lo;
  const ParamSegments segs = model_segments(e.model);
  r.split_note = str_format(
      "AdamW of the first %d of %d segments on the device (Note [optimizer split]: %lld of %lld parameters, %s more "
      "device memory), the rest on the host", lo, S, static_cast<long long>(segs.offset[static_cast<size_t>(lo)]),
      static_cast<long long>(model_num_params(e.model)),
      format_bytes(r.device_need() - base).c_str());
  return Status::ok();
}
}  // namespace

// Note [dry run without the GPU]
// HPC users size a job on a login node, which has no GPU: `tiertrain train --backend cuda --dry-run` there (a build
// with the CUDA backend) counts what the run would take on a GPU, as on one: bf16 compute, the same inventory and the
// backend's reserve (cuBLAS workspace, scratch, and cuDNN's attention workspace where this machine's cuDNN loads,
// else none; the dry run prints what it counted), against --device-budget where one is given (the card's memory less
// what the CUDA context takes: a run's automatic budget leaves kAutoBudgetHeadroomBytes free), else against nothing
// (exit 0, said so).
// Without --dry-run the backend is refused as before.
Result<RunSpec> resolve_run(const TrainConfig& cfg) {
  RunSpec r;
  TT_TRY(cfg.model.validate());
  Result<std::string> backend = resolve_backend_name(cfg.backend);
  if (!backend.is_ok() && cfg.dry_run && cfg.backend == "cuda" && probe_backend("cuda").built) {
    r.backend = "cuda";
    r.gpu_absent = true;
  } else {
    TT_ASSIGN_OR_RETURN(r.backend, std::move(backend));
  }
  r.probe = probe_backend(r.backend);
  if (r.gpu_absent) r.probe.device_memory = false;  // (no device to size the budget or the split by)
  // The compute dtype: bf16 on a GPU unless asked otherwise; the CPU computes in f32.
  DType dtype = DType::kF32;
  if (cfg.dtype == "bf16" || (cfg.dtype == "auto" && (r.probe.device_memory || r.gpu_absent))) dtype = DType::kBF16;
  TT_RETURN_IF(dtype == DType::kBF16 && r.backend == "cpu", kInvalidArgument,
               "--dtype bf16: the CPU backend computes in f32 (use --dtype f32 or auto)");
  ExecSpec& e = r.exec;
  e.model = cfg.model;
  e.batch = cfg.batch;
  if (!cfg.mesh.empty()) {
    // Issue 21: --batch is the global batch; this rank runs its share (Note [data parallel] in plan/schedule.cc).
    TT_ASSIGN_OR_RETURN(mesh::MeshShape shape, mesh::MeshShape::parse(cfg.mesh));
    TT_ASSIGN_OR_RETURN(mesh::Layout layout, mesh::Layout::resolve(cfg.layout, shape));
    TT_RETURN_IF(layout.ways("embed", shape) > 1, kUnimplemented,
                 "layout %s splits embed over mesh dimension %s: the model width is not split (Note [tensor "
                 "parallel] in model/gpt.h; docs/design/mesh.md)",
                 layout.to_string().c_str(), layout.mesh_dim("embed").c_str());
    TT_RETURN_IF(layout.mesh_dim("heads") != layout.mesh_dim("ff"), kUnimplemented,
                 "layout %s: heads and ff must be split over the same mesh dimension (or neither): a block's "
                 "tensor-parallel ranks hold both halves' shards", layout.to_string().c_str());
    TT_RETURN_IF(layout.ways("vocab", shape) > 1 && layout.mesh_dim("vocab") != layout.mesh_dim("heads"),
                 kUnimplemented,
                 "layout %s: vocab is split over another mesh dimension than heads and ff (or they are not split): "
                 "the vocabulary is split over the blocks' tensor-parallel ranks only", layout.to_string().c_str());
    TT_TRY(layout.check(shape, cfg.model, cfg.batch));
    e.model.tp = layout.ways("heads", shape);
    e.model.split_vocab = layout.ways("vocab", shape) > 1;
    TT_RETURN_IF(cfg.input != "direct" && cfg.input != "via-root" && cfg.input != "replicated", kInvalidArgument,
                 "--input %s: direct, via-root or replicated", cfg.input.c_str());
    e.data_ranks = layout.ways("batch", shape);
    e.batch = cfg.batch / e.data_ranks;
    e.shard_optimizer = cfg.shard_optimizer && e.data_ranks > 1;
    e.input_scatter = cfg.input == "via-root" && e.data_ranks > 1;  // Note [data-parallel input]
  }
  e.compute = dtype;
  if (cfg.plan_value) {
    e.plan = *cfg.plan_value;
  } else {
    TT_RETURN_IF(cfg.plan == "auto", kInvalidArgument,
                 "--plan auto is chosen by the tiertrain command (perf/auto_plan.h), not by the trainer");
    TT_ASSIGN_OR_RETURN(e.plan, Plan::resolve(cfg.plan, cfg.model.layers, cfg.swap_slots));
  }
  if (cfg.optimizer) e.plan.optimizer = *cfg.optimizer;
  if (!cfg.grads_in_activations) e.plan.grads_in_activations = false;
  if (cfg.host_buffers != "auto") e.plan.host_ring = cfg.host_buffers == "ring";  // Note [host buffers in rings]
  // Note [optimizer split] in plan/schedule.h: a count here, auto once the run's device need is known.
  const std::string& split = cfg.device_optimizer_segments;
  if (split != "plan" && split != "auto") e.plan.device_optimizer_segments = std::stoi(split);
  const bool choose_split = split == "auto" && e.plan.device_optimizer_segments == 0;
  // Note [gradient accumulation]: the micro-batches' gradients stay in their own buffers until the step's last.
  e.grad_accum = cfg.grad_accum;
  if (cfg.grad_accum > 1) e.plan.grads_in_activations = false;
  e.norm_beside = cfg.norm_beside_backward;  // Note [norm beside the backward] (plan/schedule.cc)
  e.hyper.beta1 = cfg.beta1;
  e.hyper.beta2 = cfg.beta2;
  e.hyper.weight_decay = cfg.weight_decay;
  e.hyper.grad_clip = cfg.grad_clip;
  e.hyper.speculate = cfg.speculative_update;
  e.input_staging_slots = kInputStagingSlots;
  e.lm_chunk_rows = cfg.lm_chunk_rows;
  e.um_allow_oversubscription = cfg.um_allow_oversubscription;
  apply_grad_dtype(cfg.grad_dtype, e);  // Note [bf16 gradients] (exec/executor.h): once the spec says what it takes
  TT_RETURN_IF(e.plan.bf16_grads && r.backend == "cuda" && dtype != DType::kBF16, kUnimplemented,
               "--grad-dtype bf16 on a GPU needs bf16 compute (cuBLAS writes a bf16 product of bf16 operands); use "
               "--dtype bf16 or --grad-dtype f32");
  TT_TRY(e.validate());
  TT_ASSIGN_OR_RETURN(r.inventory, Executor::inventory(e));
  // The backend's own cuBLAS workspace and scratch come out of the budget too.
  const AttentionShape attention_shape{e.batch, cfg.model.seq, e.model.heads / e.model.tp,
                                       cfg.model.dim / cfg.model.heads, dtype == DType::kBF16,
                                       e.model.kv_head_count() / e.model.tp};
  r.attention = cfg.attention;
  r.attention.workspace_cap = resolve_attention_workspace(cfg.attention.workspace_cap, cfg.device_budget,
                                                          r.probe.device_memory ? r.probe.total_bytes : 0);
  r.reserve = backend_reserve(r.backend, attention_shape, r.attention);
  r.managed_total = r.inventory.total(Inventory::kManaged);
  r.managed_device = Executor::managed_device_bytes(e, r.inventory);
  const int64_t usable = r.probe.free_bytes - r.probe.auto_budget_headroom;
  if (cfg.attention.workspace_cap == kAutoAttentionWorkspace && cfg.device_budget == 0 && r.probe.device_memory &&
      r.attention.workspace_cap > kDefaultAttentionWorkspaceBytes) {
    // Note [automatic attention workspace]: where the larger workspace would keep the run from fitting the free
    // memory and the floor would not, the floor.
    AttentionOptions floor = r.attention;
    floor.workspace_cap = kDefaultAttentionWorkspaceBytes;
    const BackendReserve at_floor = backend_reserve(r.backend, attention_shape, floor);
    // r.device_need(): the inventory and the managed pages, no reserve yet.
    if (!keep_automatic_workspace(r.device_need(), r.reserve.reserved_bytes, at_floor.reserved_bytes, usable)) {
      r.attention = floor;
      r.reserve = at_floor;
    }
  }
  r.inventory.add_backend_reserved(r.reserve.reserved_bytes);
  if (choose_split && r.probe.device_memory) TT_TRY(choose_device_optimizer_segments(cfg, usable, r));
  const int64_t need = r.device_need();
  // The automatic budget: on a device with memory of its own, what the run needs plus 5%, never more than the free
  // memory less a headroom (the arena is one allocation, so a generous default would take memory other processes
  // may need); on the CPU half the RAM (the arena is reserved address space, touched only as it is used), so a run
  // that would need more is refused here rather than killed later.
  r.budget = cfg.device_budget;
  r.budget_auto = r.budget == 0;
  if (r.budget_auto) {
    if (r.probe.device_memory) {
      r.budget = std::min(need + need / 20, usable);
    } else if (!r.gpu_absent) {
      r.budget = r.probe.total_bytes / 2;
    }
  }
  // Note [dry run without the GPU]: with no budget given there is nothing to compare with.
  r.fits_device = (r.gpu_absent && r.budget_auto) || need <= r.budget;
  const BackendProbe host = probe_backend("cpu");
  r.host_ram = host.total_bytes;
  r.host_available = host.free_bytes;
  r.fits_host = r.host_need() <= r.host_available;
  if (!r.fits_host && cfg.host_buffers == "auto" && !e.plan.host_ring) {
    // Note [host buffers in rings] (plan/schedule.h): where the whole host copies do not fit and the rings would.
    ExecSpec ring = e;
    ring.plan.host_ring = true;
    if (ring.validate().is_ok()) {
      Result<Inventory> inv = Executor::inventory(ring);
      if (inv.is_ok()) {
        const int64_t whole_host = r.host_need();
        inv.value().add_backend_reserved(r.reserve.reserved_bytes);
        std::swap(r.inventory, inv.value());
        e.plan.host_ring = true;
        if (r.host_need() <= r.host_available) {
          r.fits_host = true;
          r.host_ring_note = str_format(
              "host buffers as rings (Note [host buffers in rings]): %s of host memory, against %s with whole "
              "copies of the gradients and the compute copy, %s available",
              format_bytes(r.host_need()).c_str(), format_bytes(whole_host).c_str(),
              format_bytes(r.host_available).c_str());
        } else {  // no better: keep the whole copies (the error names them)
          std::swap(r.inventory, inv.value());
          e.plan.host_ring = false;
        }
      }
    }
  }
  if (!r.fits_device && !cfg.plan_value) {
    // What the other plans would need, so that the error can say which of them fits.
    for (const char* alt : {"in-core-selective", "recompute", "swap-activations", "swap-attention-recompute-mlp",
                            "swap-attention-recompute-mlp-norms"}) {
      for (const OptimizerPlacement where : {OptimizerPlacement::kDevice, OptimizerPlacement::kCpu}) {
        ExecSpec a = e;
        auto plan = Plan::resolve(alt, cfg.model.layers, cfg.swap_slots);
        if (!plan.is_ok()) continue;
        a.plan = plan.value();
        a.plan.optimizer = where;
        a.plan.grads_in_activations = e.plan.grads_in_activations;
        a.hyper.speculate = false;
        apply_grad_dtype(cfg.grad_dtype, a);  // (Note [bf16 gradients]: a row that refuses the knob's is left out)
        if (a.plan.bf16_grads && a.bf16_grads_refusal() != nullptr) continue;
        auto inv = Executor::inventory(a);
        if (!inv.is_ok()) continue;
        const int64_t n = inv.value().total(Inventory::kDevice) + r.reserve.reserved_bytes;
        r.alternatives += str_format("; --plan %s%s needs %s%s", alt,
                                     where == OptimizerPlacement::kCpu ? " --optimizer cpu" : "",
                                     format_bytes(n).c_str(), n <= r.budget ? " (fits)" : "");
      }
    }
  }
  return r;
}

void Trainer::print(const char* fmt, ...) const {
  if (out_ == nullptr) return;
  va_list args;
  va_start(args, fmt);
  std::vfprintf(out_, fmt, args);
  va_end(args);
  std::fflush(out_);
}

Trainer::~Trainer() {
  if (backend_) (void)backend_->synchronize_all();
  for (Readback& rb : readback_) rb.done.reset();
  ex_.reset();
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainConfig& config, FILE* out) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->cfg_ = config;
  t->out_ = out;
  TrainConfig& cfg = t->cfg_;

  // Fail on what can be checked cheaply before reading data or allocating: an output file that names a folder
  // would fail only at the end, after the training.
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--metrics-out", &cfg.metrics_out},
                                   {"--trace", &cfg.trace}, {"--schedule", &cfg.schedule_out},
                                   {"--metrics-jsonl", &cfg.metrics_jsonl}}) {
    std::error_code ec;
    TT_RETURN_IF(!path->empty() && std::filesystem::is_directory(*path, ec), kInvalidArgument,
                 "%s %s: is a folder; give a file name in it", flag, path->c_str());
    // Issue 47: a FIFO or a device there would block the run at its first write, or take what it writes.
    const auto st = std::filesystem::status(*path, ec);
    TT_RETURN_IF(!path->empty() && !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st),
                 kInvalidArgument, "%s %s: is a FIFO, socket or device, not a file", flag, path->c_str());
  }
  if (!cfg.checkpoint_dir.empty()) TT_TRY(ensure_checkpoint_dir(cfg.checkpoint_dir));
  // What writers of these files that were killed left behind (Note [stale temporaries] in core/atomic_file.h).
  if (!cfg.dry_run) {
    std::vector<std::pair<std::string, std::string>> where;  // folder, name prefix
    for (const std::string* p : {&cfg.metrics_out, &cfg.trace, &cfg.schedule_out}) {
      if (p->empty()) continue;
      const std::filesystem::path f(*p);
      where.emplace_back(f.has_parent_path() ? f.parent_path().string() : ".", f.filename().string() + ".tmp.");
    }
    if (!cfg.checkpoint_dir.empty()) {
      where.emplace_back(cfg.checkpoint_dir, "step_");
      where.emplace_back(cfg.checkpoint_dir, "latest.tmp.");
    }
    std::map<std::string, RemovedFiles> removed;
    for (const auto& [dir, prefix] : where) {
      const RemovedFiles gone = remove_stale_temporaries(dir, prefix);
      removed[dir].files += gone.files;
      removed[dir].bytes += gone.bytes;
    }
    for (const auto& [dir, gone] : removed)
      if (gone.files > 0)
        t->print("removed %d temporary file%s (%s) that killed runs left in %s\n", gone.files,
                 gone.files == 1 ? "" : "s", format_bytes(gone.bytes).c_str(), dir.c_str());
  }
  TT_ASSIGN_OR_RETURN(t->dataset_, data::TokenDataset::load(cfg.data, cfg.val_fraction));
  cfg.model.vocab = t->dataset_.vocab();
  // The model of a Hugging Face folder's config.json, or of the checkpoint a run resumes, where the flags leave it
  // open; the data's tokens must fit its vocabulary.
  if (!cfg.from_safetensors.empty()) {
    TT_ASSIGN_OR_RETURN(std::optional<ModelConfig> hf, read_hf_config(cfg.from_safetensors, cfg.model.seq));
    if (hf) TT_TRY(adopt_model(cfg, *hf, cfg.from_safetensors + "/config.json", /*strict=*/true));
  } else if (!cfg.resume.empty()) {
    // (The checks of the resume below name a checkpoint that does not match the flags given.)
    auto adopt = [&]() -> Status {
      TT_ASSIGN_OR_RETURN(std::string path, find_checkpoint(cfg.checkpoint_dir, cfg.resume));
      TT_ASSIGN_OR_RETURN(TensorFileReader reader, TensorFileReader::open(path));
      TT_ASSIGN_OR_RETURN(CheckpointState st, checkpoint_state_from_meta(reader.meta(), path));
      return adopt_model(cfg, st.model, "checkpoint " + path, /*strict=*/false);
    };
    if (Status s = adopt(); !s.is_ok()) return std::move(s.with_context("cannot resume"));
  }
  TT_RETURN_IF(t->dataset_.vocab() > cfg.model.vocab, kInvalidArgument,
               "the data's tokens go up to %d, beyond the model's vocabulary of %d", t->dataset_.vocab() - 1,
               cfg.model.vocab);
  TT_ASSIGN_OR_RETURN(t->spec_, resolve_run(cfg));
  const RunSpec& r = t->spec_;
  // Note [bf16 gradients]: the knobs as resolved say the gradient type the run took, not auto, so that the run
  // folder's config, checkpoints (a resume that takes another is warned of) and the mesh's ranks compare it.
  if (cfg.resolved.is_object()) cfg.resolved["grad_dtype"] = r.exec.plan.grad_dtype_name();
  if (cfg.shard_optimizer && !r.exec.shard_optimizer)
    TT_LOG(WARN, EXEC,
           "--shard-optimizer: nothing to shard, the run has no data-parallel dimension of more than one rank "
           "(--mesh data=N with N > 1); every rank keeps the whole optimizer state");
  if (!cfg.mesh.empty() && !cfg.dry_run) {
    // Issue 21: this rank's place in the mesh (collective over the job: every rank gets here with the same mesh).
    TT_ASSIGN_OR_RETURN(mesh::MeshShape shape, mesh::MeshShape::parse(cfg.mesh));
    TT_ASSIGN_OR_RETURN(mesh::Layout layout, mesh::Layout::resolve(cfg.layout, shape));
    TT_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::world());
    TT_TRY(shape.check_ranks(world->size()));
    TT_ASSIGN_OR_RETURN(t->mesh_, mesh::Mesh::create(shape, std::move(world)));
    const std::string bdim = layout.mesh_dim("batch");
    t->shards_ = layout.ways("batch", shape);
    t->shard_ = t->mesh_->coord(bdim);
    t->data_comm_ = t->mesh_->along(bdim);
    t->spec_.exec.data_rank = t->shard_;
    if (r.exec.model.tp > 1) {  // Note [tensor parallel] in model/gpt.h
      const std::string mdim = layout.mesh_dim("heads");
      t->model_comm_ = t->mesh_->along(mdim);
      t->spec_.exec.tp_rank = t->mesh_->coord(mdim);
    }
    TT_TRY(t->check_same_config());
    if (!t->lead()) t->out_ = nullptr;  // rank 0 speaks for the job
    t->print("mesh %s, layout %s: %d ranks (%s backend); batch %d = %d a rank, input %s\n",
             shape.to_string().c_str(), layout.to_string().c_str(), shape.ranks(), t->mesh_->world().backend(),
             cfg.batch, r.exec.batch, cfg.input.c_str());
  }
  const int64_t need = r.device_need(), host_need = r.host_need();
  if (cfg.dry_run) {
    // What the run would take, whether or not it fits; nothing is allocated.
    std::string device = r.backend;
    if (r.probe.device_memory)
      device = str_format("%s (%s free of %s)", r.probe.device.c_str(), format_bytes(r.probe.free_bytes).c_str(),
                          format_bytes(r.probe.total_bytes).c_str());
    if (r.gpu_absent) device = "cuda (no usable GPU on this machine: what a run on one would take)";
    t->print("dry run (nothing allocated): %s, %lld parameters, %s compute%s, batch %d\n",
             cfg.model.describe().c_str(), static_cast<long long>(model_num_params(cfg.model)),
             dtype_name(r.exec.compute), r.exec.plan.bf16_grads ? " (bf16 block gradients)" : "", cfg.batch);
    t->print("  plan: %s\n", r.exec.plan.summary().c_str());
    if (!r.host_ring_note.empty()) t->print("  %s\n", r.host_ring_note.c_str());
    if (!r.split_note.empty()) t->print("  %s\n", r.split_note.c_str());
    if (r.gpu_absent)
      t->print("  (no GPU here: counted as on one, with %s of attention workspace under a cap of %s; the automatic "
               "cap is 1/64 of --device-budget, at least 512 MiB)\n",
               format_bytes(r.reserve.attention_workspace_bytes).c_str(), format_bytes(r.attention.workspace_cap).c_str());
    if (r.gpu_absent && r.budget_auto) {
      t->print("  device %s: needs %s (no budget to compare with: --device-budget SIZE checks a card's memory, less "
               "the %s a run leaves free for the CUDA context): %s\n",
               device.c_str(), format_bytes(need).c_str(), format_bytes(r.probe.auto_budget_headroom).c_str(),
               r.inventory.describe(Inventory::kDevice).c_str());
    } else {
      t->print("  device %s: needs %s of a %s budget%s (%s): %s\n", device.c_str(), format_bytes(need).c_str(),
               format_bytes(r.budget).c_str(), r.budget_auto ? " (automatic)" : "",
               r.fits_device ? "fits" : "DOES NOT FIT", r.inventory.describe(Inventory::kDevice).c_str());
    }
    // Note [gradients in dead activations]: what the gradients kept among dead activation sets save.
    const ActivationArena arena = activation_arena(r.exec.plan, r.exec.model, r.exec.batch, r.exec.compute);
    if (arena.blocks_with_grads() > 0 || arena.holds_embedding_grads())
      t->print("  gradients of %d blocks%s live in later blocks' activation memory once it is dead (%s saved against "
               "buffers of their own; --grads-in-activations false keeps them apart)\n",
               arena.blocks_with_grads(), arena.holds_embedding_grads() ? " and the embedding's" : "",
               format_bytes(arena.saved_bytes).c_str());
    // Note [head in gradients] (exec/executor.h).
    if (const HeadInGrads head = Executor::head_in_grads(r.exec); !head.at.empty())
      t->print("  the head's %s (%s) live%s in blocks' gradient buffers until their backward\n",
               head.at.size() == 1 ? "tensor" : "tensors", format_bytes(head.bytes).c_str(),
               head.at.size() == 1 ? "s" : "");
    if (r.managed_total > 0)
      t->print("  managed memory (Unified Memory): %s reserved (%s), of which the plan keeps %s on the device at "
               "once (counted in the need above); the rest lives in host memory between uses\n",
               format_bytes(r.managed_total).c_str(), r.inventory.describe(Inventory::kManaged).c_str(),
               format_bytes(r.managed_device).c_str());
    t->print("  host: needs %s of %s available (of %s RAM): %s: %s\n", format_bytes(host_need).c_str(),
             format_bytes(r.host_available).c_str(), format_bytes(r.host_ram).c_str(),
             r.fits_host ? "fits" : "DOES NOT FIT", r.describe_host_need().c_str());
    if (!cfg.schedule_out.empty()) {
      const Schedule sched = compile_schedule(r.exec.schedule_spec(), r.inventory);
      nlohmann::json j = sched.to_json();
      j["inventory"] = r.inventory.to_json();
      TT_TRY(write_json_atomically(cfg.schedule_out, j));
      t->print("  schedule: %zu operations a training step, written to %s\n", sched.pass(Pass::kTrain).size(),
               cfg.schedule_out.c_str());
    }
    t->dry_run_fits_ = r.fits_device && r.fits_host;
    return t;
  }
  if (!r.fits_device) {
    if (r.budget_auto && r.probe.device_memory)
      return make_status(StatusCode::kOutOfMemory,
                         "the run needs %s of device memory (%s) but %s has %s free, of which %s stays free for the "
                         "CUDA context and other processes; reduce --batch, --seq, --dim or --layers, or use --plan "
                         "recompute",
                         format_bytes(need).c_str(), r.inventory.describe(Inventory::kDevice).c_str(),
                         r.probe.device.c_str(), format_bytes(r.probe.free_bytes).c_str(),
                         format_bytes(r.probe.auto_budget_headroom).c_str());
    const std::string which = cfg.plan == "in-core" && !r.exec.plan.cpu_optimizer()
                                  ? "even in-core"
                                  : "with plan " + r.exec.plan.summary();
    return make_status(StatusCode::kOutOfMemory,
                       "the model does not fit the device budget %s: it needs %s (%s) but the budget is %s "
                       "(--device-budget)%s. Raise --device-budget, change the plan, or reduce --batch, --seq, "
                       "--dim or --layers",
                       which.c_str(), format_bytes(need).c_str(), r.inventory.describe(Inventory::kDevice).c_str(),
                       format_bytes(r.budget).c_str(), r.alternatives.c_str());
  }
  if (!r.fits_host)  // Note [host memory of a run]
    return make_status(StatusCode::kOutOfMemory,
                       "the run needs %s of host memory (%s) but this machine has %s available (of %s RAM); use a "
                       "plan that keeps more on the device (the optimizer on the device: --optimizer device; "
                       "activations recomputed rather than swapped), or reduce --batch, --seq, --dim or --layers",
                       format_bytes(host_need).c_str(), r.describe_host_need().c_str(),
                       format_bytes(r.host_available).c_str(), format_bytes(r.host_ram).c_str());
  if (!cfg.run_dir.empty() && t->lead()) TT_TRY(t->open_run_dir());
  TT_TRY(t->build());
  return t;
}

// Note [run folder] in exec/train_config.h.
Status Trainer::open_run_dir() {
  const std::string config = cfg_.run_dir + "/config.json";
  std::error_code ec;
  TT_RETURN_IF(cfg_.resume.empty() && std::filesystem::exists(config, ec), kInvalidArgument,
               "--run-dir %s already holds a run (%s): continue it with --resume, or give another folder",
               cfg_.run_dir.c_str(), config.c_str());
  TT_TRY(make_directories(cfg_.run_dir, "run folder (--run-dir)"));
  TT_TRY(write_json_atomically(config, cfg_.resolved));
  print("run folder: %s\n", cfg_.run_dir.c_str());
  return Status::ok();
}

void Trainer::record(const nlohmann::json& j) {
  if (cfg_.metrics_jsonl.empty() || jsonl_failed_ || !lead()) return;
  if (jsonl_ == nullptr) {
    const std::filesystem::path p(cfg_.metrics_jsonl);
    if (p.has_parent_path()) (void)make_directories(p.parent_path().string(), "--metrics-jsonl folder");
    jsonl_ = std::fopen(cfg_.metrics_jsonl.c_str(), "a");
  }
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (jsonl_ == nullptr || std::fwrite(line.data(), 1, line.size(), jsonl_) != line.size() || std::fflush(jsonl_) != 0) {
    // A metrics file that cannot be written must not end the training: said once, then no more records.
    print("warning: --metrics-jsonl %s: %s; no more records are written\n", cfg_.metrics_jsonl.c_str(),
          std::strerror(errno));
    jsonl_failed_ = true;
  }
}

bool keep_automatic_workspace(int64_t need_without_reserve, int64_t reserve, int64_t floor_reserve, int64_t usable) {
  const auto fits = [&](int64_t reserved) {
    const int64_t n = need_without_reserve + reserved;
    return n + n / 20 <= usable;  // the automatic budget's 5% (resolve_run)
  };
  return fits(reserve) || !fits(floor_reserve);
}

BackendOptions run_backend_options(const TrainConfig& cfg, int64_t budget, int64_t scratch_bytes,
                                   int64_t attention_workspace_bytes) {
  return {.device_budget = budget,
          .scratch_bytes = scratch_bytes,
          .threads = cfg.threads,
          .copy_delay_us = cfg.cpu_copy_delay_us,
          .compute_delay_us = cfg.cpu_compute_delay_us,
          .host_delay_us = cfg.cpu_host_delay_us,
          .lock_host_memory = cfg.cpu_lock_host_memory,
          .host_numa_node = cfg.host_numa_node,
          .attention = cfg.attention,
          .gemm = cfg.gemm,
          .xent_blocks = cfg.xent_blocks,
          .attention_workspace_bytes = attention_workspace_bytes,
          .um_host_piece_bytes = cfg.um_host_piece_mib << 20};
}

Result<std::unique_ptr<Backend>> create_run_backend(const TrainConfig& cfg, const RunSpec& r) {
  BackendOptions options = run_backend_options(cfg, r.budget - r.managed_device, r.reserve.scratch_bytes,
                                                r.reserve.attention_workspace_bytes);
  options.attention = r.attention;
  TT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, create_backend(r.backend, options));
  // The host memory the run keeps for the copy engines, taken (and pinned) in one slab: the inventory's pinned host
  // part; what only the host touches in another, never pinned (Note [pinned and pageable host memory]).
  Status s = be->host_pool().reserve(static_cast<size_t>(r.inventory.pinned_total()));
  if (!s.is_ok()) return std::move(s.with_context("reserving the run's host memory"));
  if (r.inventory.pageable_total() > 0) {
    s = be->pageable_pool().reserve(static_cast<size_t>(r.inventory.pageable_total()));
    if (!s.is_ok()) return std::move(s.with_context("reserving the run's pageable host memory"));
  }
  return be;
}

Status Trainer::build() {
  const TrainConfig& cfg = cfg_;
  const RunSpec& r = spec_;
  TT_ASSIGN_OR_RETURN(backend_, create_run_backend(cfg, r));
  if (cfg.um_counters) {  // issue 20: the driver's page faults and migrations, counted per step, from before the
                          // managed memory is reserved
    TT_RETURN_IF(backend_->um() == nullptr, kFailedPrecondition, "--um-counters: the %s backend has no managed memory",
                 r.backend.c_str());
    TT_TRY(backend_->um()->start_counting());
  }
  TT_ASSIGN_OR_RETURN(ex_, Executor::create(*backend_, r.exec));
  TT_TRY(ex_->init_params(cfg.seed));
  if (!cfg.init_from.empty()) {
    TT_ASSIGN_OR_RETURN(std::string path, resolve_checkpoint(cfg.init_from));
    auto from = load_checkpoint_params(path, *ex_, cfg.allow_nonfinite);
    if (!from.is_ok()) return std::move(from.take_status().with_context("--init-from"));
    print("parameters from %s (step %lld of its run); optimizer, schedule and data start afresh\n", path.c_str(),
          static_cast<long long>(from.value().step));
  }
  if (!cfg.from_safetensors.empty()) {
    TT_TRY(import_hf(cfg.from_safetensors, *ex_));
    print("parameters from %s (%s, Hugging Face layout); optimizer, schedule and data start afresh\n",
          cfg.from_safetensors.c_str(), cfg.model.describe().c_str());
  }
  TT_ASSIGN_OR_RETURN(data::BatchSampler sampler,
                      data::BatchSampler::create(&dataset_.train(), cfg.batch, cfg.model.seq, cfg.seed));
  sampler_ = std::make_unique<data::BatchSampler>(std::move(sampler));
  rng_.reseed(cfg.seed);
  // Note [input staging]: the executor draws each batch through this when its schedule says so; a checkpoint
  // records the sampler as it was before the batch in flight.
  // Note [data-parallel input]
  // Each rank's share of every global batch (all of it alone), three ways with the same batches (--input): direct,
  // the rank draws only its windows (data::BatchSampler's shards) into its own staging slot, which its own h2d
  // stream copies to its device; replicated, every rank draws the whole batch and keeps its part; via-root, rank 0
  // of the batch dimension draws the whole batch into its staging slot (each rank's tokens and targets in turn; the
  // others move their samplers past it unread), its h2d stream copies it to its device and scatters it from there
  // to every rank's input.next (ExecSpec::input_scatter: the seed's baseline), through a reducer of its own on the
  // h2d stream (NCCL on GPUs); a failure is reported by the step.
  const size_t batch_tokens = static_cast<size_t>(r.exec.batch) * static_cast<size_t>(cfg.model.seq);
  if (shards_ > 1 && cfg.input != "direct") {
    global_inputs_.resize(batch_tokens * static_cast<size_t>(shards_));
    global_targets_.resize(batch_tokens * static_cast<size_t>(shards_));
  }
  // Note [loss mask]: each batch's targets that count (every rank knows the global batch's), kept in the order the
  // batches are drawn until their step's loss is read back; the gradient's scale goes with the batch.
  ex_->set_input_source([this, batch_tokens](int32_t* host) -> float {
    sampler_before_prefetch_ = sampler_->state();
    int32_t* targets = host + batch_tokens;
    int64_t count = 0;
    if (shards_ == 1 || cfg_.input == "direct") {
      count = sampler_->next(host, targets, shard_, shards_);
    } else if (cfg_.input == "replicated") {
      const size_t from = static_cast<size_t>(shard_) * batch_tokens;
      count = sampler_->next(global_inputs_.data(), global_targets_.data());
      std::copy_n(global_inputs_.begin() + static_cast<std::ptrdiff_t>(from), batch_tokens, host);
      std::copy_n(global_targets_.begin() + static_cast<std::ptrdiff_t>(from), batch_tokens, targets);
    } else if (shard_ != 0) {
      count = sampler_->skip();
    } else {
      count = sampler_->next(global_inputs_.data(), global_targets_.data());
      for (int r = 0; r < shards_; ++r) {  // rank r's share: its tokens, then its targets
        const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * batch_tokens);
        int32_t* to = host + 2 * static_cast<size_t>(r) * batch_tokens;
        std::copy_n(global_inputs_.begin() + at, batch_tokens, to);
        std::copy_n(global_targets_.begin() + at, batch_tokens, to + batch_tokens);
      }
    }
    // Note [gradient accumulation]: micro-batch j of a step; each is scaled by the whole step's count.
    const int accum = cfg_.grad_accum;
    const int j = static_cast<int>(fills_++ % accum);
    if (!dataset_.train().masked()) {  // every target counts: 1 / (B x T), as always; over the step's micro-batches
      return accum == 1 ? -1.0f : 1.0f / static_cast<float>(static_cast<int64_t>(accum) * batch_tokens);
    }
    if (j == 0) {  // the step's count: this micro-batch's and those of the ones after it (drawn here only to count)
      step_count_ = count + sampler_->count_ahead(accum - 1);
      batch_counts_.push_back(step_count_);
    }
    // Each rank's gradient is averaged over the data ranks: shards / count makes the average 1 / count.
    return step_count_ > 0 ? static_cast<float>(shards_) / static_cast<float>(step_count_) : 0.0f;
  });
  if (r.exec.input_scatter) {
    TT_ASSIGN_OR_RETURN(input_reducer_,
                        make_stream_reducer(*backend_, *data_comm_, backend_->h2d_stream(), "--input via-root"));
    ex_->set_input_reducer(input_reducer_.get());
  }
  if (shards_ > 1) {  // Note [data parallel] in plan/schedule.cc: on the comm stream
    TT_ASSIGN_OR_RETURN(reducer_, make_stream_reducer(*backend_, *data_comm_, backend_->comm_stream(), "data parallel"));
    ex_->set_grad_reducer(reducer_.get());
  }
  if (model_comm_ != nullptr) {  // Note [tensor parallel] in model/gpt.h: sums on the compute stream
    TT_ASSIGN_OR_RETURN(tp_reducer_,
                        make_stream_reducer(*backend_, *model_comm_, backend_->compute_stream(), "tensor parallel"));
    ex_->set_tp_reducer(tp_reducer_.get());
  }
  profiler_ = std::make_unique<OpProfiler>(*backend_);
  profiler_->set_tracing(!cfg.trace.empty());
  ex_->set_profiler(profiler_.get());
  const size_t bt = static_cast<size_t>(r.exec.batch) * static_cast<size_t>(cfg.model.seq);
  host_tokens_.resize(bt);
  host_targets_.resize(bt);
  host_losses_.resize(bt);
  for (int i = 0; i < 2; ++i) {  // Note [host one step ahead]: a step's losses, then its squared gradient norm
    Readback& rb = readback_[i];
    rb.losses = ex_->step_readback(i);
    TT_CHECK(rb.losses != nullptr, "the executor has no readback slots (no input staging)");
    rb.norm_sq = rb.losses + bt * static_cast<size_t>(cfg.grad_accum);  // after each micro-batch's losses
    rb.done = backend_->create_event();
    rb.host_done = backend_->create_event();
  }
  // Host memory this run holds for its whole life: the token dataset and the evaluation buffers (the pinned
  // staging slots are counted by allocate_host).
  const int64_t host_bytes =
      static_cast<int64_t>((dataset_.train().bytes() + dataset_.val().bytes()) +
                           bt * (2 * sizeof(int32_t) + sizeof(float)));
  backend_->stats().on_alloc(memory::Tier::kHost, TensorClass::kInput, host_bytes);

  if (!cfg.resume.empty()) {
    TT_ASSIGN_OR_RETURN(std::string path, find_checkpoint(cfg.checkpoint_dir, cfg.resume));
    CheckpointState expected;
    expected.model = cfg.model;
    expected.dtype = ex_->model().master_dtype();
    expected.batch = cfg.batch;
    expected.grad_accum = cfg.grad_accum;
    expected.seed = cfg.seed;
    expected.data_path = cfg.data;
    expected.data_fingerprint = dataset_.info().fingerprint;
    expected.config = cfg.resolved;
    expected.train_tokens = dataset_.train().size();
    auto loaded = load_checkpoint(path, expected, *ex_, cfg.allow_nonfinite);
    if (!loaded.is_ok()) return std::move(loaded.take_status().with_context("cannot resume"));
    const CheckpointState& st = loaded.value();
    sampler_->set_state(st.sampler);
    rng_.set_state(st.rng);
    step_ = st.step;
    print("resumed from %s at step %lld\n", path.c_str(), static_cast<long long>(st.step));
  }
  return Status::ok();
}

// Note [host one step ahead]: a training step is enqueued (enqueue_step) and later finished (finish_step: its loss and
// gradient norm read back, checked and recorded). Between two steps the host has work of its own: reading the loss
// back, the sampler's next batch, the log line. Done one step at a time, the GPU idles through it
// (docs/benchmarks/2026-12-03-h200-engine-host-ahead/), so the loop enqueues step k + 1 before it finishes step
// k, whenever nothing between the two needs the host to see the model after step k alone: the first step of a process
// (warm-up, the allocation counts), the last, evaluations, checkpoints, the CPU optimizer (its speculative update
// guesses from the last norm) and --host-ahead false finish each step before the next is enqueued. (--profile and
// --trace read each step's events as it is enqueued, so the host waits for the step there: counted as ahead, such steps
// do not overlap.) The results are the same bits either way: the device runs the same operations in the same order;
// each step's losses and norm are copied into a pinned slot of their own (two, alternating) right behind it on the
// compute stream, and the input ring's host slots are written only after the copy that read them last has finished
// (Executor, Note [slot rings]). A step that fails (a non-finite loss) is reported when it is finished, with its own
// number, after the next step was enqueued; nothing is saved from that next step. An error of a collective or copy that
// the reducers or the input slots keep is seen when a step is finished and reported as that step's, though it may
// belong to the step enqueued after it. A step's time (StepRecord::ms) is from its enqueue or the previous finish,
// whichever is later: with steps ahead, the time between two finishes, a step's share of the throughput rather than its
// latency.
Status Trainer::enqueue_step(int64_t step) {
  Backend& be = *backend_;
  // Profile (and trace) every step but the first this process runs (warm-up: cuBLAS heuristics, first touches);
  // only the training step itself (evaluation and checkpoints run with the profiler off).
  profiler_->set_enabled((cfg_.profile || !cfg_.trace.empty()) && !history_.empty());
  // The step's pass begins by taking its prefetched batch and drawing the next (Note [input staging]).
  Enqueued e;
  e.step = step;
  e.lr = learning_rate(cfg_, step);
  e.slot = static_cast<int>(step % 2);
  e.enqueued = Clock::now();
  const Readback& r = readback_[static_cast<size_t>(e.slot)];
  // Note [gradient accumulation]: the micro-batches before the last add their gradients; each one's losses are read
  // back after it.
  const int accum = cfg_.grad_accum;
  const size_t bt = host_losses_.size();
  // Note [gradients summed on the host] (plan/schedule.h): the squared norm is whole only on the host, which writes
  // it into the readback itself; the compute stream's record of the step then follows the host's (the next step's
  // forward waits for the host's updates anyway).
  const bool host_norm = ex_->optimizer().sums_on_host();
  if (host_norm) ex_->optimizer().set_norm_readback(r.norm_sq);
  for (int j = 0; j + 1 < accum; ++j) {
    ex_->accumulate_step(/*first=*/j == 0);
    be.copy_d2h(r.losses + static_cast<size_t>(j) * bt, ex_->model().losses(), be.compute_stream());
  }
  ex_->train_step(e.lr, speculate_next_, /*accumulated=*/accum > 1);
  TT_TRY(profiler_->collect(step));
  profiler_->set_enabled(false);
  be.copy_d2h(r.losses + static_cast<size_t>(accum - 1) * bt, ex_->model().losses(), be.compute_stream());
  if (host_norm) {
    be.host_stream().record(*r.host_done);
    be.compute_stream().wait(*r.host_done);
  } else {
    be.copy_d2h(r.norm_sq, ex_->optimizer().grad_norm_sq(), be.compute_stream());
  }
  be.compute_stream().record(*r.done);
  in_flight_.push_back(e);
  return Status::ok();
}

Status Trainer::finish_step(StepRecord* rec) {
  TT_CHECK(!in_flight_.empty(), "finish_step without a step in flight");
  const Enqueued e = in_flight_.front();
  in_flight_.pop_front();
  const Readback& r = readback_[static_cast<size_t>(e.slot)];
  TT_TRY(r.done->synchronize());
  if (reducer_) TT_TRY(reducer_->status());
  if (tp_reducer_) TT_TRY(tp_reducer_->status());
  if (input_reducer_) TT_TRY(input_reducer_->status());
  TT_TRY(ex_->input_status());
  const size_t n = host_losses_.size() * static_cast<size_t>(cfg_.grad_accum);  // every micro-batch's
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(r.losses[i]);
  const float norm_sq = *r.norm_sq;
  rec->step = e.step;
  double mine = sum / static_cast<double>(n);
  if (dataset_.train().masked()) {  // Note [loss mask]: the mean over the targets that count, of the whole batch
    TT_CHECK(!batch_counts_.empty(), "step %lld's batch was never drawn", static_cast<long long>(e.step));
    const int64_t count = batch_counts_.front();
    batch_counts_.pop_front();
    mine = count > 0 ? sum * shards_ / static_cast<double>(count) : 0.0;
  }
  TT_ASSIGN_OR_RETURN(rec->loss, mean_over_data(mine));
  rec->lr = e.lr;
  rec->grad_norm = std::sqrt(static_cast<double>(norm_sq));
  // The step's time: from when it was enqueued, or from when the step before it finished if that was later (the
  // GPU then ran it behind that one): in the steady state of host-ahead steps, the time between two finishes.
  const Clock::time_point from = std::max(e.enqueued, last_finish_);
  last_finish_ = Clock::now();
  rec->ms = std::chrono::duration<double, std::milli>(last_finish_ - from).count();
  // Note [speculative update]: guess that the next norm is under the clip when this one was (a wrong guess costs a
  // second update, never a different result).
  speculate_next_ = host::adamw_clip_factor(norm_sq, cfg_.grad_clip) == 1.0f;
  TT_RETURN_IF(!std::isfinite(rec->loss), kInternal,
               "loss is %f at step %lld: training diverged (try a lower --lr or a --grad-clip)", rec->loss,
               static_cast<long long>(e.step));
  // Issue 47: a gradient norm that is not finite (an overflow in the backward with a finite loss) would write NaN
  // into every parameter; the step is refused, as a non-finite loss is, before it is checkpointed.
  TT_RETURN_IF(!std::isfinite(rec->grad_norm), kInternal,
               "gradient norm is %f at step %lld: training diverged (try a lower --lr)", rec->grad_norm,
               static_cast<long long>(e.step));
  step_ = e.step;
  return Status::ok();
}

bool Trainer::finish_before_next(int64_t step, int64_t end) const {
  // Only knobs every rank of a mesh shares (check_same_config; not --trace, whose file is each rank's own): finishing
  // a step is a collective over the data dimension (mean_over_data), so every rank must take the same path.
  if (!cfg_.host_ahead || step >= end || history_.empty() || spec_.exec.plan.cpu_optimizer()) return true;
  if (cfg_.eval_every > 0 && step % cfg_.eval_every == 0) return true;
  if (!cfg_.checkpoint_dir.empty() && cfg_.checkpoint_every > 0 && step % cfg_.checkpoint_every == 0) return true;
  return false;
}

Result<EvalRecord> Trainer::evaluate() {
  Backend& be = *backend_;
  const int B = cfg_.batch, T = cfg_.model.seq, b = spec_.exec.batch;  // the global batch, this rank's share
  const int64_t available = data::val_batches_available(dataset_.val(), B, T);
  const int64_t n = std::min<int64_t>(available, cfg_.eval_batches);
  TT_RETURN_IF(n == 0, kFailedPrecondition,
               "the validation split (%zu tokens) is too small for one batch of %d x %d tokens; raise --val-fraction",
               dataset_.val().size(), B, T + 1);
  double sum = 0;
  std::vector<int32_t> all_tokens, all_targets;  // (a data-parallel rank's global batch, of which it takes its part)
  if (shards_ > 1) {
    all_tokens.resize(static_cast<size_t>(B) * T);
    all_targets.resize(static_cast<size_t>(B) * T);
  }
  const bool masked = dataset_.val().masked();
  double counted = 0;  // Note [loss mask]: the targets that count, over the batches (a mean weighted by them)
  for (int64_t k = 0; k < n; ++k) {
    int64_t count = 0;
    if (shards_ > 1) {
      count = data::val_batch(dataset_.val(), B, T, k, all_tokens.data(), all_targets.data());
      const size_t from = static_cast<size_t>(shard_) * b * T, len = static_cast<size_t>(b) * T;
      std::copy_n(all_tokens.begin() + static_cast<std::ptrdiff_t>(from), len, host_tokens_.begin());
      std::copy_n(all_targets.begin() + static_cast<std::ptrdiff_t>(from), len, host_targets_.begin());
    } else {
      count = data::val_batch(dataset_.val(), B, T, k, host_tokens_.data(), host_targets_.data());
    }
    const Model& model = ex_->model();
    be.copy_h2d(model.tokens(), host_tokens_.data(), be.compute_stream());
    be.copy_h2d(model.targets(), host_targets_.data(), be.compute_stream());
    ex_->forward();
    be.copy_d2h(host_losses_.data(), model.losses(), be.compute_stream());
    TT_TRY(be.compute_stream().synchronize());
    double s = 0;
    for (float l : host_losses_) s += static_cast<double>(l);
    if (masked) {
      TT_ASSIGN_OR_RETURN(double total, mean_over_data(s * shards_));  // the batch's sum over every rank
      sum += total;
      counted += static_cast<double>(count);
      continue;
    }
    TT_ASSIGN_OR_RETURN(double mean, mean_over_data(s / static_cast<double>(host_losses_.size())));
    sum += mean;
  }
  if (masked) return EvalRecord{step_, counted > 0 ? sum / counted : 0.0, n};
  return EvalRecord{step_, sum / static_cast<double>(n), n};
}

// Issue 21: the ranks of a mesh must run the same configuration (a rank started with another --lr or --plan would
// compute something else, or wait at another collective). Rank 0's resolved knobs go to every rank, each names the
// knobs where it differs, and every rank fails if any does. The knobs of the lead's own outputs may differ (an
// automatic run folder is named after each rank's start time).
Status Trainer::check_same_config() {
  comm::Communicator& w = mesh_->world();
  static const std::set<std::string> kOwnOutputs = {"run_dir", "metrics_out", "metrics_jsonl", "trace",
                                                    "checkpoint_dir", "sample_tokens"};
  nlohmann::json mine = cfg_.resolved;
  for (const std::string& k : kOwnOutputs) mine.erase(k);
  if (!cfg_.resume.empty()) mine["checkpoint_dir"] = cfg_.checkpoint_dir;  // (every rank reads it)
  std::string text = mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  int64_t n = static_cast<int64_t>(text.size());
  TT_TRY(w.broadcast(comm::kInPlace, &n, 1, comm::DType::kI64, 0));
  std::vector<int64_t> words(static_cast<size_t>((n + 7) / 8), 0);
  if (w.rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  TT_TRY(w.broadcast(comm::kInPlace, words.data(), words.size(), comm::DType::kI64, 0));
  std::string differ;
  if (w.rank() != 0) {
    const nlohmann::json lead = nlohmann::json::parse(
        std::string(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(n)), nullptr, false);
    for (auto it = mine.begin(); it != mine.end(); ++it) {
      std::string flag = it.key();  // the knob's flag: grad_clip -> --grad-clip
      std::replace(flag.begin(), flag.end(), '_', '-');
      if (lead.is_discarded() || !lead.contains(it.key()) || lead.at(it.key()) != it.value())
        differ += str_format("%s--%s %s (rank 0: %s)", differ.empty() ? "" : ", ", flag.c_str(),
                             it.value().dump().c_str(),
                             lead.is_discarded() || !lead.contains(it.key()) ? "unset" : lead.at(it.key()).dump().c_str());
    }
  }
  // Every rank's findings to every rank (lengths, then the texts padded to the longest), so that each names the
  // first rank that differs and how: the job stops with that message whichever rank the launcher hears from first.
  int64_t len = static_cast<int64_t>(differ.size());
  std::vector<int64_t> lens(static_cast<size_t>(w.size()));
  TT_TRY(w.allgather(&len, lens.data(), 1, comm::DType::kI64));
  const size_t width = static_cast<size_t>((*std::max_element(lens.begin(), lens.end()) + 7) / 8);
  if (width == 0) return Status::ok();
  std::vector<int64_t> mine_words(width, 0), all(width * static_cast<size_t>(w.size()));
  std::memcpy(mine_words.data(), differ.data(), differ.size());
  TT_TRY(w.allgather(mine_words.data(), all.data(), width, comm::DType::kI64));
  for (int q = 0; q < w.size(); ++q) {
    if (lens[static_cast<size_t>(q)] == 0) continue;
    const std::string text(reinterpret_cast<const char*>(all.data() + static_cast<size_t>(q) * width),
                           static_cast<size_t>(lens[static_cast<size_t>(q)]));
    return make_status(StatusCode::kInvalidArgument,
                       "rank %d of the mesh was started with another configuration than rank 0: %s (start every rank "
                       "with the same flags, environment and config file)",
                       q, text.c_str());
  }
  return Status::ok();
}

Result<double> Trainer::mean_over_data(double x) {
  if (data_comm_ == nullptr) return x;
  TT_TRY(data_comm_->allreduce(comm::kInPlace, &x, 1, comm::DType::kF64, comm::Op::kAvg));
  return x;
}

Status Trainer::check_replicas(const WholeState& whole) {
  if (mesh_ == nullptr || mesh_->world().size() == 1) return Status::ok();
  // Whole models (gathered over the model dimension): every rank's is the same.
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the master parameters' bytes
  for (size_t i = 0; i < whole.bytes; ++i) h = (h ^ whole.params[i]) * 1099511628211ull;
  comm::Communicator& w = mesh_->world();
  std::vector<int64_t> all(static_cast<size_t>(w.size()));
  const int64_t mine = static_cast<int64_t>(h);
  TT_TRY(w.allgather(&mine, all.data(), 1, comm::DType::kI64));
  std::string differ;
  for (int q = 0; q < w.size(); ++q)
    if (all[static_cast<size_t>(q)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(q);
  TT_RETURN_IF(!differ.empty(), kInternal,
               "mesh: the (whole model's) parameters of rank(s) %s differ from rank 0's at step %lld: the replicas "
               "drifted apart (a bug: please report it with the command line)",
               differ.c_str(), static_cast<long long>(step_));
  return Status::ok();
}

Status Trainer::save(int64_t step) {
  ex_->wait_all();  // the CPU optimizer's last parameters on the device before they are read
  // Every rank gathers (a collective over the model dimension when the model is split), then rank 0 writes.
  TT_ASSIGN_OR_RETURN(WholeState whole, gather_whole_state(*ex_, model_comm_, data_comm_));
  TT_TRY(check_replicas(whole));
  if (!lead()) return Status::ok();  // one copy: the replicas are the same bits
  CheckpointState st;
  st.step = step;
  st.sampler = sampler_before_prefetch_;
  st.rng = rng_.state();
  st.model = cfg_.model;
  st.dtype = ex_->model().master_dtype();
  st.batch = cfg_.batch;
  st.grad_accum = cfg_.grad_accum;
  st.seed = cfg_.seed;
  st.data_path = cfg_.data;
  st.data_fingerprint = dataset_.info().fingerprint;
  st.config = cfg_.resolved;
  const auto t0 = Clock::now();
  TT_TRY(save_checkpoint(cfg_.checkpoint_dir, st, *ex_, cfg_.keep_checkpoints, &whole));
  // (Its size and time: what --time-limit must leave room for, Note [stopping early].)
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(cfg_.checkpoint_dir + "/" + checkpoint_file_name(step), ec);
  print("step %6lld | checkpoint written to %s (%s in %.2f s)\n", static_cast<long long>(step),
        cfg_.checkpoint_dir.c_str(), ec ? "?" : format_bytes(static_cast<int64_t>(bytes)).c_str(),
        std::chrono::duration<double>(Clock::now() - t0).count());
  return Status::ok();
}

Result<int> Trainer::agreed_stop(const StopRequest* stop) {
  int code = stop != nullptr ? stop->code() : 0;
  if (stop == nullptr || mesh_ == nullptr || mesh_->world().size() == 1) return code;
  int32_t c = code;
  TT_TRY(mesh_->world().allreduce(comm::kInPlace, &c, 1, comm::DType::kI32, comm::Op::kMax));
  return static_cast<int>(c);
}

// Note [stopping early]: a scheduler warns a job before it ends it (SLURM: SIGTERM, then SIGKILL after KillWait;
// `--signal=USR1@120` earlier), a user presses Ctrl-C, or the job's own wall-time limit (--time-limit) comes near.
// The run then ends as it would at its last step, only sooner: after each step the ranks agree on whether to stop
// (agreed_stop: every rank, at the same step, so that they stop together and the collectives stay matched); once they
// do, no step is enqueued, the step in flight (Note [host one step ahead]) is finished, and the last one is
// checkpointed and written to the metrics, without the evaluation and the run folder's sample a finished run has.
// `train` exits 75 (EX_TEMPFAIL: try again), and the same command with --resume continues bit for bit. The signal's
// handler only sets a flag (core/stop.h); a process stuck in a collective or a kernel is not stopped by it (a second
// signal, or the scheduler's SIGKILL, is).
Result<TrainSummary> Trainer::run(const StopRequest* stop) {
  TT_RETURN_IF(cfg_.dry_run, kFailedPrecondition, "a dry-run trainer has nothing to run");
  const int64_t planned_end = cfg_.stop_at > 0 ? cfg_.stop_at : cfg_.steps;
  int64_t end = planned_end;
  const int64_t B = static_cast<int64_t>(cfg_.batch) * cfg_.grad_accum, T = cfg_.model.seq;  // a step's sequences
  TrainSummary summary;
  summary.first_step = step_ + 1;
  print("%s\n", dataset_.describe().c_str());
  const std::string accum =
      cfg_.grad_accum > 1 ? str_format(" = %d micro-batches of %d", cfg_.grad_accum, cfg_.batch) : std::string();
  // (Note [master in two halves] in core/bf16.h: say so where the master is the compute copy and a low half.)
  // (Note [bf16 gradients] in exec/executor.h: and where the blocks' weight gradients are bf16.)
  print("model: %s, %lld parameters, %s compute (%s master%s%s), plan %s | batch %lld%s (%lld tokens/step) | %s\n",
        cfg_.model.describe().c_str(), static_cast<long long>(model_num_params(cfg_.model)), dtype_name(ex_->model().dtype()),
        dtype_name(ex_->model().master_dtype()), spec_.exec.master_in_halves() ? " in two halves" : "",
        spec_.exec.plan.bf16_grads ? ", bf16 block gradients" : "",
        cfg_.plan.c_str(), static_cast<long long>(B), accum.c_str(),
        static_cast<long long>(B * T), backend_->describe().c_str());
  print("optimizer: AdamW, lr %.3g%s, %lld warm-up steps, cosine to %.3g at step %lld\n", cfg_.lr,
        cfg_.lr_auto ? " (for this width; --lr sets it)" : "", static_cast<long long>(cfg_.warmup),
        cfg_.lr * cfg_.min_lr_frac, static_cast<long long>(cfg_.steps));
  const Plan& plan = spec_.exec.plan;
  if (cfg_.plan != "in-core" || plan.cpu_optimizer()) print("plan: %s\n", plan.summary().c_str());
  if (!spec_.host_ring_note.empty()) print("%s\n", spec_.host_ring_note.c_str());
  if (!spec_.split_note.empty()) print("%s\n", spec_.split_note.c_str());
  if (step_ >= end) {
    print("nothing to do: already at step %lld of %lld\n", static_cast<long long>(step_),
          static_cast<long long>(end));
    summary.last_step = step_;
    return summary;
  }
  const auto t0 = Clock::now();
  ex_->prefetch();
  std::vector<double> step_ms;
  bool warned_eval = false, said_stopping = false;
  // Note [host one step ahead]: at most two steps in flight; the front one is finished each time round.
  last_finish_ = Clock::time_point{};
  steps_enqueued_ahead_ = 0;
  int64_t next = step_ + 1;
  while (next <= end || !in_flight_.empty()) {
    if (in_flight_.empty()) TT_TRY(enqueue_step(next++));
    if (next <= end && !finish_before_next(in_flight_.front().step, end)) {
      TT_TRY(enqueue_step(next++));
      ++steps_enqueued_ahead_;
    }
    StepRecord rec;
    TT_TRY(finish_step(&rec));
    rec.tokens_per_s = static_cast<double>(B * T) / (rec.ms / 1e3);
    history_.push_back(rec);
    if (history_.size() == 1) {
      summary.first_loss = rec.loss;
      // Warm-up ends with the first step: from here on neither pool should allocate (metrics report the counts).
      allocs_after_first_step_[0] = backend_->pool().allocation_count();
      allocs_after_first_step_[1] = backend_->host_pool().allocation_count();
      allocs_after_first_step_[2] = backend_->host_pool().slab_count();
      if (cfg_.um_counters) um_after_first_step_ = backend_->um()->counted();
    }
    if (history_.size() > 1 || end - summary.first_step == 0) step_ms.push_back(rec.ms);
    if (summary.stopped.empty()) {  // Note [stopping early]
      TT_ASSIGN_OR_RETURN(const int code, agreed_stop(stop));
      const int64_t through = in_flight_.empty() ? step_ : in_flight_.back().step;  // what is enqueued already
      if (code != 0 && through < planned_end) {
        summary.stopped = stop->describe(code);  // (code != 0: every rank has its StopRequest)
        end = through;
      }
    }
    const bool last = step_ == end;
    if (step_ % cfg_.log_every == 0 || last || history_.size() == 1) {
      record({{"kind", "train"}, {"step", rec.step}, {"loss", rec.loss}, {"lr", rec.lr}, {"grad_norm", rec.grad_norm},
              {"ms", rec.ms}, {"tokens_per_s", rec.tokens_per_s}});
      print("step %6lld/%lld | loss %.4f | lr %.2e | norm %.3f | %s tok/s | %.1f ms/step | dev peak %s\n",
            static_cast<long long>(step_), static_cast<long long>(cfg_.steps), rec.loss, rec.lr, rec.grad_norm,
            format_count(rec.tokens_per_s).c_str(), rec.ms,
            format_bytes(static_cast<int64_t>(backend_->pool().peak_in_use())).c_str());
    }
    if (!summary.stopped.empty() && !said_stopping) {
      said_stopping = true;
      print("step %6lld | stopping: %s%s\n", static_cast<long long>(step_), summary.stopped.c_str(),
            end > step_ ? " (after the step in flight)" : "");
    }
    if (cfg_.eval_every > 0 && summary.stopped.empty() && (step_ % cfg_.eval_every == 0 || last)) {
      Result<EvalRecord> ev = evaluate();
      if (ev.is_ok()) {
        evals_.push_back(ev.value());
        record({{"kind", "val"}, {"step", ev->step}, {"loss", ev->loss}, {"batches", ev->batches}});
        print("step %6lld | val loss %.4f (%lld batches)\n", static_cast<long long>(step_), ev->loss,
              static_cast<long long>(ev->batches));
      } else if (!warned_eval) {
        warned_eval = true;
        print("warning: no validation: %s\n", ev.status().message().c_str());
      }
    }
    if (!cfg_.checkpoint_dir.empty() &&
        ((cfg_.checkpoint_every > 0 && step_ % cfg_.checkpoint_every == 0) || last)) {
      TT_TRY(save(step_));
    }
  }
  summary.last_step = step_;
  summary.last_loss = history_.back().loss;
  summary.last_val_loss = evals_.empty() ? -1 : evals_.back().loss;
  summary.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  summary.median_ms = median(step_ms);
  summary.steps_enqueued_ahead = steps_enqueued_ahead_;
  summary.median_tokens_per_s = summary.median_ms > 0 ? static_cast<double>(B * T) / (summary.median_ms / 1e3) : 0;
  summary.device_peak_bytes = static_cast<int64_t>(backend_->pool().peak_in_use());
  print("done: steps %lld-%lld in %.1f s | loss %.4f -> %.4f", static_cast<long long>(summary.first_step),
        static_cast<long long>(summary.last_step), summary.wall_s, summary.first_loss, summary.last_loss);
  if (summary.last_val_loss >= 0) print(" | val loss %.4f", summary.last_val_loss);
  if (cfg_.um_counters && history_.size() > 1) {
    // Per step after the first (the steady state): Unified Memory's faults and migrations.
    const double n = static_cast<double>(history_.size() - 1);
    nlohmann::json per_step = nlohmann::json::object();
    for (const auto& [k, v] : backend_->um()->counted()) {
      auto it = um_after_first_step_.find(k);
      per_step[k] = static_cast<double>(v - (it == um_after_first_step_.end() ? 0 : it->second)) / n;
    }
    um_per_step_ = per_step;
  }
  print(" | median %s tok/s, %.1f ms/step | device peak %s of %s budget",
        format_count(summary.median_tokens_per_s).c_str(), summary.median_ms,
        format_bytes(summary.device_peak_bytes).c_str(),
        format_bytes(static_cast<int64_t>(backend_->pool().budget())).c_str());
  // Issue 20: the managed pool beside the device pool (its pages move; the plan keeps managed_device on the device).
  if (spec_.managed_total > 0)
    print(" (device pool) + %s managed, %s of it kept on the device", format_bytes(spec_.managed_total).c_str(),
          format_bytes(spec_.managed_device).c_str());
  print("\n");
  if (!um_per_step_.is_null() && um_per_step_.empty()) {
    // Not a count of zero: nothing was reported at all (CUPTI may deliver no UM record even where gigabytes
    // migrate each step).
    print("unified memory counters: no record was reported (%s), so nothing is counted\n",
          backend_->um()->describe().c_str());
  } else if (!um_per_step_.is_null()) {
    auto get = [&](const char* k) { return um_per_step_.value(k, 0.0); };
    print("unified memory per step (after the first): GPU page faults %.1f, CPU page faults %.1f, migrated to the "
          "device %s, to the host %s\n",
          get("gpu_page_faults"), get("cpu_page_faults"),
          format_bytes(static_cast<int64_t>(get("bytes_to_device"))).c_str(),
          format_bytes(static_cast<int64_t>(get("bytes_to_host"))).c_str());
  }
  TT_TRY(profiler_->flush());
  if (cfg_.profile) print_profile();
  if (!cfg_.trace.empty() && lead()) {
    TT_TRY(profiler_->write_trace(cfg_.trace, "tiertrain " + backend_->describe()));
    print("trace: %zu spans of %d steps in %s (open in ui.perfetto.dev)\n", profiler_->spans().size(),
          profiler_->steps(), cfg_.trace.c_str());
  }
  record({{"kind", "summary"},
          {"first_step", summary.first_step},
          {"last_step", summary.last_step},
          {"first_loss", summary.first_loss},
          {"last_loss", summary.last_loss},
          {"last_val_loss", summary.last_val_loss < 0 ? nlohmann::json() : nlohmann::json(summary.last_val_loss)},
          {"median_ms_per_step", summary.median_ms},
          {"median_tokens_per_s", summary.median_tokens_per_s},
          {"wall_s", summary.wall_s},
          {"device_peak_bytes", summary.device_peak_bytes},
          {"steps_enqueued_ahead", summary.steps_enqueued_ahead},
          {"stopped", summary.stopped.empty() ? nlohmann::json() : nlohmann::json(summary.stopped)}});
  if (!cfg_.metrics_out.empty() && lead()) TT_TRY(write_metrics(summary));
  ex_->wait_all();  // the run ends with every parameter on the device
  if (mesh_ != nullptr && mesh_->world().size() > 1) {
    TT_ASSIGN_OR_RETURN(WholeState whole, gather_whole_state(*ex_, model_comm_, data_comm_));
    TT_TRY(check_replicas(whole));
  }
  return summary;
}

void Trainer::print_profile() const {
  const int steps = profiler_->steps();
  if (steps == 0) return;
  std::vector<std::pair<double, std::string>> rows;
  double total = 0;
  for (const auto& [name, ms] : profiler_->totals_ms()) {
    rows.emplace_back(ms / steps, name);
    total += ms / steps;
  }
  std::sort(rows.rbegin(), rows.rend());
  print("profile: compute stream, mean of %d steps (%.2f ms/step in ops)\n", steps, total);
  for (const auto& [ms, name] : rows) print("  %-28s %9.3f ms %5.1f%%\n", name.c_str(), ms, 100.0 * ms / total);
  const OpProfiler::Transfers& tr = profiler_->transfers();
  if (tr.h2d_bytes + tr.d2h_bytes > 0)
    print("transfers per step: h2d %s in %.3f ms, d2h %s in %.3f ms; compute waited %.3f ms for them (exposed)\n",
          format_bytes(tr.h2d_bytes / steps).c_str(), tr.h2d_ms / steps, format_bytes(tr.d2h_bytes / steps).c_str(),
          tr.d2h_ms / steps, tr.exposed_ms / steps);
}

Status Trainer::write_metrics(const TrainSummary& summary) const {
  nlohmann::json j;
  j["config"] = cfg_.resolved;
  j["backend"] = backend_->describe();
  j["dtype"] = {{"compute", dtype_name(ex_->model().dtype())}, {"master", dtype_name(ex_->model().master_dtype())}};
  j["dataset"] = {{"kind", dataset_.info().kind},
                  {"path", dataset_.info().path},
                  {"files", dataset_.info().files.size()},
                  {"vocab", dataset_.vocab()},
                  {"train_tokens", dataset_.train().size()},
                  {"val_tokens", dataset_.val().size()}};
  j["model"] = model_config_json(cfg_.model);
  j["model"]["params"] = model_num_params(cfg_.model);
  nlohmann::json steps = nlohmann::json::array();
  for (const StepRecord& r : history_)
    steps.push_back({{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"ms", r.ms},
                     {"tokens_per_s", r.tokens_per_s}});
  j["steps"] = steps;
  nlohmann::json val = nlohmann::json::array();
  for (const EvalRecord& e : evals_) val.push_back({{"step", e.step}, {"loss", e.loss}, {"batches", e.batches}});
  j["val"] = val;
  j["summary"] = {{"first_step", summary.first_step},
                  {"last_step", summary.last_step},
                  {"first_loss", summary.first_loss},
                  {"last_loss", summary.last_loss},
                  {"last_val_loss", summary.last_val_loss < 0 ? nlohmann::json() : nlohmann::json(summary.last_val_loss)},
                  {"median_ms_per_step", summary.median_ms},
                  {"median_tokens_per_s", summary.median_tokens_per_s},
                  {"tokens_per_step", static_cast<int64_t>(cfg_.batch) * cfg_.grad_accum * cfg_.model.seq},
                  {"wall_s", summary.wall_s},
                  {"steps_enqueued_ahead", summary.steps_enqueued_ahead},
                  {"stopped", summary.stopped.empty() ? nlohmann::json() : nlohmann::json(summary.stopped)}};
  if (cfg_.speculative_update)  // Note [speculative update]: segment updates kept and redone over the run
    j["speculation"] = {{"kept", ex_->optimizer().speculation_kept()}, {"redone", ex_->optimizer().speculation_redone()}};
  if (profiler_->steps() > 0) {
    nlohmann::json prof = nlohmann::json::object();
    for (const auto& [name, ms] : profiler_->totals_ms()) prof[name] = ms / profiler_->steps();
    j["profile_ms_per_step"] = prof;
    const OpProfiler::Transfers& tr = profiler_->transfers();
    const double n = profiler_->steps();
    j["transfers_per_step"] = {{"h2d_bytes", static_cast<double>(tr.h2d_bytes) / n},
                               {"d2h_bytes", static_cast<double>(tr.d2h_bytes) / n},
                               {"h2d_ms", tr.h2d_ms / n},
                               {"d2h_ms", tr.d2h_ms / n},
                               {"exposed_ms", tr.exposed_ms / n}};
  }
  j["plan"] = spec_.exec.plan.to_json();
  j["grad_dtype"] = spec_.exec.plan.grad_dtype_name();  // Note [bf16 gradients]: as the run resolved it
  if (!um_per_step_.is_null()) j["um_counters_per_step"] = um_per_step_;
  j["memory"] = backend_->stats().to_json();
  j["memory"]["device"]["budget"] = backend_->pool().budget();
  j["memory"]["device"]["allocation_count"] = backend_->pool().allocation_count();
  const memory::HostPool& hp = backend_->host_pool();
  if (!history_.empty()) {
    j["memory"]["allocations_after_first_step"] = {
        {"device", backend_->pool().allocation_count() - allocs_after_first_step_[0]},
        {"host", hp.allocation_count() - allocs_after_first_step_[1]},
        {"host_slabs", hp.slab_count() - allocs_after_first_step_[2]}};
  }
  j["memory"]["host_pool"] = {{"slab_bytes", hp.slab_bytes()},        {"peak_held_bytes", hp.peak_in_use()},
                              {"slabs", hp.slab_count()},              {"allocation_count", hp.allocation_count()},
                              {"numa_node", hp.numa_node()},           {"pinned", hp.pinned()}};
  const memory::HostPool& pp = backend_->pageable_pool();
  j["memory"]["pageable_host_pool"] = {{"slab_bytes", pp.slab_bytes()}, {"peak_held_bytes", pp.peak_in_use()},
                                       {"slabs", pp.slab_count()}};
  return write_json_atomically(cfg_.metrics_out, j);
}

}  // namespace tt
