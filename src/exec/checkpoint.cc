#include "exec/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "core/atomic_file.h"
#include "core/bf16.h"
#include "core/log.h"
#include "core/tensorfile.h"

namespace tt {
namespace {

constexpr const char* kFormat = "tiertrain-checkpoint";
constexpr int kVersion = 1;

// The step_*.ttf files in dir, oldest first.
std::vector<std::string> step_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("step_", 0) == 0 && name.size() > 9 && name.ends_with(".ttf")) out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Metadata fields read strictly (issue 25: a step of -5, or 2^64-1 read as -1, was accepted): the field must be
// there, an integer (not a float or a string), and within [lo, hi]; an error names the field and the range.
class MetaReader {
 public:
  MetaReader(const nlohmann::json& meta, const std::string& path) : meta_(meta), path_(path) {}
  Result<const nlohmann::json*> at(const std::string& field) const {
    const nlohmann::json* j = &meta_;
    size_t a = 0;
    while (a <= field.size()) {
      const size_t b = std::min(field.find('.', a), field.size());
      const std::string key = field.substr(a, b - a);
      TT_RETURN_IF(!j->is_object() || !j->contains(key), kDataLoss, "checkpoint '%s': metadata has no %s",
                   path_.c_str(), field.c_str());
      j = &j->at(key);
      a = b + 1;
    }
    return j;
  }
  Result<int64_t> integer(const std::string& field, int64_t lo, int64_t hi) const {
    TT_ASSIGN_OR_RETURN(const nlohmann::json* j, at(field));
    // An unsigned value above INT64_MAX (2^64-1 read as -1 before) is out of any range here.
    bool in = j->is_number_integer() && !(j->is_number_unsigned() && j->get<uint64_t>() > uint64_t(INT64_MAX));
    const int64_t v = in ? j->get<int64_t>() : 0;
    in = in && v >= lo && v <= hi;
    TT_RETURN_IF(!in, kDataLoss,
                 "checkpoint '%s': metadata %s is %s, not an integer from %lld to %lld", path_.c_str(), field.c_str(),
                 j->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str(),
                 static_cast<long long>(lo), static_cast<long long>(hi));
    return v;
  }
  Result<uint64_t> unsigned_integer(const std::string& field) const {
    TT_ASSIGN_OR_RETURN(const nlohmann::json* j, at(field));
    TT_RETURN_IF(!j->is_number_unsigned(), kDataLoss, "checkpoint '%s': metadata %s is %s, not an integer >= 0",
                 path_.c_str(), field.c_str(), j->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return j->get<uint64_t>();
  }
  Result<std::string> string(const std::string& field) const {
    TT_ASSIGN_OR_RETURN(const nlohmann::json* j, at(field));
    TT_RETURN_IF(!j->is_string(), kDataLoss, "checkpoint '%s': metadata %s is not a string", path_.c_str(),
                 field.c_str());
    return j->get<std::string>();
  }

 private:
  const nlohmann::json& meta_;
  const std::string& path_;
};

// The most steps (and batch size) a checkpoint may record: far above any run, and exact in a double (JSON readers).
constexpr int64_t kMaxSteps = int64_t(1) << 50;
constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;


}  // namespace

std::string checkpoint_file_name(int64_t step) { return str_format("step_%08lld.ttf", static_cast<long long>(step)); }

Status ensure_checkpoint_dir(const std::string& dir) {
  TT_RETURN_IF(dir.empty(), kInvalidArgument, "no checkpoint directory given (--checkpoint-dir)");
  TT_TRY(make_directories(dir, "checkpoint directory"));
  const std::string probe = dir + "/.tiertrain-write-probe." + std::to_string(getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TT_RETURN_IF(fd < 0, kIoError, "checkpoint directory '%s' is not writable: %s", dir.c_str(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

namespace {
void point_at_own(WholeState& w) {
  w.params = w.own_params.data();
  w.m = w.own_m.data();
  w.v = w.own_v.data();
  w.bytes = w.own_params.size();
}
}  // namespace

Result<WholeState> gather_whole_state(Executor& ex, comm::Communicator* model_comm, comm::Communicator* data_comm) {
  const Model& model = ex.model();
  const size_t esize = dtype_size(model.master_dtype());
  const size_t bytes = static_cast<size_t>(model.num_params()) * esize;
  Optimizer& opt = ex.optimizer();
  ex.wait_all();  // every update of the CPU optimizer has reached the master
  if (opt.host_state_whole() && model.config().tp == 1) {  // Note [checkpoints without copies]
    TT_TRY(ex.backend().synchronize_all());
    TT_TRY(opt.device_part_to_host());  // Note [optimizer split] in plan/schedule.h
    WholeState w;
    w.params = reinterpret_cast<const unsigned char*>(opt.host_master());
    w.m = reinterpret_cast<const unsigned char*>(opt.host_m());
    w.v = reinterpret_cast<const unsigned char*>(opt.host_v());
    w.bytes = bytes;
    return w;
  }
  WholeState local;
  local.own_params.resize(bytes);
  local.own_m.resize(bytes);
  local.own_v.resize(bytes);
  point_at_own(local);
  TT_TRY(ex.download_params(local.own_params.data()));
  TT_TRY(opt.download_state(reinterpret_cast<float*>(local.own_m.data()), reinterpret_cast<float*>(local.own_v.data())));
  const OptimizerShard& shard = opt.shard();
  if (shard.on()) {
    // Note [sharded optimizer]: each segment's shares from their owners (the bytes themselves: no arithmetic).
    TT_RETURN_IF(data_comm == nullptr || data_comm->size() != shard.ranks, kInternal,
                 "an optimizer sharded %d ways gathered over %d ranks", shard.ranks, data_comm ? data_comm->size() : 1);
    const ParamSegments& segs = model.segments();
    const int64_t per_rank = OptimizerShard::moment_elements(segs, shard.ranks);
    std::vector<unsigned char> mine(static_cast<size_t>(per_rank) * esize),
        all(static_cast<size_t>(per_rank * shard.ranks) * esize);
    for (std::vector<unsigned char>* t : {&local.own_params, &local.own_m, &local.own_v}) {
      std::fill(mine.begin(), mine.end(), 0);
      int64_t at = 0;
      for (int s = 0; s < segs.count(); ++s) {
        const int64_t n = segs.size[static_cast<size_t>(s)];
        const auto [lo, hi] = OptimizerShard::range(n, shard.rank, shard.ranks);
        std::memcpy(mine.data() + at * esize, t->data() + (segs.offset[static_cast<size_t>(s)] + lo) * esize,
                    static_cast<size_t>(hi - lo) * esize);
        at += (n + shard.ranks - 1) / shard.ranks;
      }
      TT_TRY(data_comm->allgather(mine.data(), all.data(), mine.size() / 4, comm::DType::kI32));  // f32/f64 bits
      for (int r = 0; r < shard.ranks; ++r) {
        const unsigned char* from = all.data() + static_cast<size_t>(r * per_rank) * esize;
        at = 0;
        for (int s = 0; s < segs.count(); ++s) {
          const int64_t n = segs.size[static_cast<size_t>(s)];
          const auto [lo, hi] = OptimizerShard::range(n, r, shard.ranks);
          std::memcpy(t->data() + (segs.offset[static_cast<size_t>(s)] + lo) * esize, from + at * esize,
                      static_cast<size_t>(hi - lo) * esize);
          at += (n + shard.ranks - 1) / shard.ranks;
        }
      }
    }
  }
  const ModelConfig& cfg = model.config();
  if (cfg.tp == 1) return local;
  TT_RETURN_IF(model_comm == nullptr || model_comm->size() != cfg.tp, kInternal,
               "a model split %d ways gathered over %d ranks", cfg.tp, model_comm ? model_comm->size() : 1);
  // Every rank's shard (the same size on each), then each put where the whole model has it.
  WholeState whole;
  const size_t whole_bytes = static_cast<size_t>(model_num_params(cfg.whole())) * esize;
  std::vector<unsigned char> all(bytes * static_cast<size_t>(cfg.tp));
  for (auto [mine, out] : {std::pair{&local.own_params, &whole.own_params}, {&local.own_m, &whole.own_m},
                           {&local.own_v, &whole.own_v}}) {
    TT_TRY(model_comm->allgather(mine->data(), all.data(), bytes / 4, comm::DType::kI32));  // f32/f64 bits
    out->resize(whole_bytes);
    for (int r = 0; r < cfg.tp; ++r) model_put_shard(cfg, r, all.data() + static_cast<size_t>(r) * bytes, out->data(), esize);
  }
  point_at_own(whole);
  return whole;
}

Status save_checkpoint(const std::string& dir, const CheckpointState& state, Executor& ex, int64_t keep,
                       const WholeState* whole) {
  const Model& model = ex.model();
  Optimizer& opt = ex.optimizer();
  TT_TRY(ensure_checkpoint_dir(dir));
  WholeState own;
  if (whole == nullptr) {
    TT_RETURN_IF(model.config().tp > 1 || ex.optimizer().shard().on(), kInternal,
                 "a tensor-parallel model's or a sharded optimizer's checkpoint needs its gathered state");
    TT_ASSIGN_OR_RETURN(own, gather_whole_state(ex, nullptr));
    whole = &own;
  }
  const unsigned char *params = whole->params, *m = whole->m, *v = whole->v;

  nlohmann::json meta;
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["step"] = state.step;
  meta["model"] = model_config_json(state.model);
  meta["dtype"] = dtype_name(state.dtype);
  meta["batch"] = state.batch;
  if (state.grad_accum != 1) meta["grad_accum"] = state.grad_accum;  // (absent: 1, as before it existed)
  meta["seed"] = state.seed;
  meta["data"] = {{"path", state.data_path}, {"fingerprint", state.data_fingerprint}};
  meta["sampler"] = {{"epoch", state.sampler.epoch}, {"cursor", state.sampler.cursor}};
  meta["rng"] = std::vector<uint64_t>(state.rng.begin(), state.rng.end());
  meta["optimizer"] = {{"name", "adamw"}, {"step", opt.steps_taken()}};
  meta["config"] = state.config;

  TensorFileWriter w;
  w.set_meta(meta);
  const DType md = model.master_dtype();
  const size_t esize = dtype_size(md);
  for (const ParamInfo& p : model_param_layout(model.config().whole())) {
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape.rank(); ++i) shape.push_back(p.shape[i]);
    const size_t off = static_cast<size_t>(p.offset) * esize;
    w.add("param/" + p.name, md, shape, params + off);
    w.add("adam.m/" + p.name, md, shape, m + off);
    w.add("adam.v/" + p.name, md, shape, v + off);
  }
  const std::string name = checkpoint_file_name(state.step);
  TT_TRY(w.write_atomic(dir + "/" + name));
  TT_TRY(write_file_atomically(dir + "/latest", name + "\n"));
  TT_LOG(INFO, CKPT, "wrote checkpoint %s/%s", dir.c_str(), name.c_str());
  std::vector<std::string> files = step_files(dir);
  while (static_cast<int64_t>(files.size()) > keep) {
    if (files.front() != name) ::unlink((dir + "/" + files.front()).c_str());
    files.erase(files.begin());
  }
  return Status::ok();
}

Result<std::string> find_checkpoint(const std::string& dir, const std::string& resume) {
  if (resume != "latest") {
    TT_TRY(require_regular_file(resume, "checkpoint"));
    return resume;
  }
  // The newest step file stands in for `latest` only when there is no `latest`: one that is there but cannot be
  // read (or is not a file) is an error, not a reason to load another step.
  const std::string latest = dir + "/latest";
  struct stat lst {};
  if (::lstat(latest.c_str(), &lst) == 0) {
    // Issue 47: the pointer is a small file of the folder's own, one line naming a file beside it: a symbolic link
    // is not followed (one to /etc/shadow printed its first line), and nothing of what it holds is echoed.
    TT_RETURN_IF(S_ISLNK(lst.st_mode), kDataLoss,
                 "'%s' is a symbolic link; a checkpoint pointer is a file of the checkpoint folder's own (tiertrain "
                 "writes it): remove the link, or resume from a checkpoint file",
                 latest.c_str());
    if (Status s = require_regular_file(latest, "checkpoint pointer"); !s.is_ok())
      return Status(StatusCode::kDataLoss, s.message());
    TT_RETURN_IF(lst.st_size > 255, kDataLoss, "'%s' is %lld bytes: not a checkpoint pointer (one short line)",
                 latest.c_str(), static_cast<long long>(lst.st_size));
    const int fd = ::open(latest.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    TT_RETURN_IF(fd < 0, kIoError, "cannot read '%s': %s", latest.c_str(), std::strerror(errno));
    char buf[256] = {};
    const ssize_t got = ::read(fd, buf, sizeof(buf) - 1);
    ::close(fd);
    std::string text = got > 0 ? std::string(buf, static_cast<size_t>(got)) : "";
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
    const bool one_name = !text.empty() && text[0] != '.' &&
                          text.find_first_of(std::string("/\n\r\0", 4)) == std::string::npos;
    TT_RETURN_IF(!one_name, kDataLoss,
                 "'%s/latest' does not hold one line naming a checkpoint file beside it (its contents are not shown)",
                 dir.c_str());
    return dir + "/" + text;
  }
  std::vector<std::string> files = step_files(dir);
  TT_RETURN_IF(files.empty(), kNotFound, "no checkpoint to resume from in '%s'", dir.c_str());
  return dir + "/" + files.back();
}

Result<CheckpointState> checkpoint_state_from_meta(const nlohmann::json& meta, const std::string& path) {
  CheckpointState st;
  TT_RETURN_IF(!meta.is_object() || !meta.contains("format") || meta.at("format") != kFormat, kDataLoss,
               "'%s' is a tensor file but not a tiertrain checkpoint", path.c_str());
  TT_RETURN_IF(!meta.contains("version") || meta.at("version") != kVersion, kFailedPrecondition,
               "checkpoint '%s' has format version %s; this build reads version %d", path.c_str(),
               meta.contains("version")
                   ? meta.at("version").dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str()
                   : "(none)",
               kVersion);
  const MetaReader m(meta, path);
  int64_t v = 0;
  {
    TT_ASSIGN_OR_RETURN(const nlohmann::json* model, m.at("model"));
    auto cfg = model_config_from_json(*model, "checkpoint '" + path + "': metadata");
    if (!cfg.is_ok()) return Status(StatusCode::kDataLoss, cfg.status().message());
    st.model = cfg.value();
  }
  TT_ASSIGN_OR_RETURN(std::string dtype, m.string("dtype"));
  auto dt = parse_dtype(dtype);
  TT_RETURN_IF(!dt.is_ok(), kDataLoss, "checkpoint '%s': metadata dtype '%s' is not a dtype", path.c_str(),
               dtype.c_str());
  st.dtype = dt.value();
  TT_ASSIGN_OR_RETURN(st.step, m.integer("step", 0, kMaxSteps));
  TT_ASSIGN_OR_RETURN(v, m.integer("batch", 1, kMaxDim));
  st.batch = static_cast<int>(v);
  st.grad_accum = 1;
  if (meta.contains("grad_accum")) {
    TT_ASSIGN_OR_RETURN(v, m.integer("grad_accum", 1, 1 << 16));
    st.grad_accum = static_cast<int>(v);
  }
  TT_ASSIGN_OR_RETURN(st.seed, m.unsigned_integer("seed"));
  TT_ASSIGN_OR_RETURN(st.data_path, m.string("data.path"));
  TT_ASSIGN_OR_RETURN(st.data_fingerprint, m.unsigned_integer("data.fingerprint"));
  TT_ASSIGN_OR_RETURN(st.sampler.epoch, m.unsigned_integer("sampler.epoch"));
  TT_ASSIGN_OR_RETURN(st.sampler.cursor, m.unsigned_integer("sampler.cursor"));
  TT_ASSIGN_OR_RETURN(const nlohmann::json* rng, m.at("rng"));
  TT_RETURN_IF(!rng->is_array() || rng->size() != st.rng.size(), kDataLoss,
               "checkpoint '%s': metadata rng is not an array of %zu words", path.c_str(), st.rng.size());
  for (size_t i = 0; i < st.rng.size(); ++i) {
    const nlohmann::json& w = rng->at(i);
    TT_RETURN_IF(!w.is_number_unsigned(), kDataLoss, "checkpoint '%s': metadata rng[%zu] is not an integer >= 0",
                 path.c_str(), i);
    st.rng[i] = w.get<uint64_t>();
  }
  // An all-zero generator state is the one state a xorshift-family generator never leaves (every draw 0): not what
  // any run saves.
  TT_RETURN_IF(std::all_of(st.rng.begin(), st.rng.end(), [](uint64_t w) { return w == 0; }), kDataLoss,
               "checkpoint '%s': metadata rng is all zero, a state no run's generator has (damaged)", path.c_str());
  st.config = meta.value("config", nlohmann::json::object());
  if (st.config.is_null()) st.config = nlohmann::json::object();  // a run configured in code, not by knobs
  TT_RETURN_IF(!st.config.is_object(), kDataLoss, "checkpoint '%s': metadata config is not an object",
               path.c_str());
  // What the config says of the run that a resume compares against (Note [checkpoint metadata] below): numbers that
  // no run had are damage.
  for (const char* k : {"lr", "min_lr_frac", "weight_decay", "grad_clip"}) {
    if (!st.config.contains(k)) continue;
    const nlohmann::json& x = st.config.at(k);
    TT_RETURN_IF(!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < 0, kDataLoss,
                 "checkpoint '%s': metadata config.%s is %s, not a finite number >= 0", path.c_str(), k,
                 x.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  for (const char* k : {"steps", "warmup", "batch", "layers", "dim", "heads", "seq"}) {
    if (!st.config.contains(k)) continue;
    const nlohmann::json& x = st.config.at(k);
    TT_RETURN_IF(!x.is_number_integer() || x.get<int64_t>() < 0, kDataLoss,
                 "checkpoint '%s': metadata config.%s is %s, not an integer >= 0", path.c_str(), k,
                 x.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  // The config's model sizes against the model's (which the tensors follow, and which is the one used). Runs that
  // took their model from a checkpoint wrote the flags' defaults there before the knobs followed the model
  // (adopt_model): such files are read, with a warning naming both.
  const ModelConfig& mc = st.model;
  for (const auto& [k, have] : {std::pair<const char*, int64_t>{"layers", mc.layers}, {"dim", mc.dim},
                                {"heads", mc.heads}, {"seq", mc.seq}}) {
    if (!st.config.contains(k) || st.config.at(k).get<int64_t>() == have) continue;
    TT_LOG(WARN, CKPT,
           "checkpoint '%s': metadata config.%s is %lld but the model's (metadata model.%s, which the tensors "
           "follow) is %lld: the model's is used",
           path.c_str(), k, static_cast<long long>(st.config.at(k).get<int64_t>()), k, static_cast<long long>(have));
  }
  TT_ASSIGN_OR_RETURN(const std::string opt_name, m.string("optimizer.name"));
  TT_RETURN_IF(opt_name != "adamw", kDataLoss,
               "checkpoint '%s': metadata optimizer.name is '%s'; tiertrain's checkpoints hold AdamW's state "
               "('adamw')", path.c_str(), opt_name.c_str());
  TT_ASSIGN_OR_RETURN(const int64_t opt_step, m.integer("optimizer.step", 0, kMaxSteps));
  // The optimizer takes one step a training step: a checkpoint whose counts differ is damaged (AdamW's bias
  // correction would use the wrong step: -100 gave NaN, 0 silently another trajectory).
  TT_RETURN_IF(opt_step != st.step, kDataLoss,
               "checkpoint '%s': metadata optimizer.step is %lld but step is %lld (one optimizer step a training "
               "step)", path.c_str(), static_cast<long long>(opt_step), static_cast<long long>(st.step));

  return st;
}

Status check_checkpoint_continues(const CheckpointState& st, const CheckpointState& expected,
                                  const std::string& path) {
  // What must match for the run to continue.
  std::string mismatch;
  // Every field of the model: its family, sizes and options.
  const nlohmann::json have = model_config_json(st.model.whole()), want = model_config_json(expected.model.whole());
  for (const char* key : {"family", "layers", "dim", "heads", "seq", "vocab", "kv_heads", "ffn", "tied_embeddings",
                          "qkv_bias", "rope_theta", "rope_scaling", "norm_eps"}) {
    const nlohmann::json a = have.value(key, nlohmann::json()), b = want.value(key, nlohmann::json());
    if (a != b)
      mismatch += str_format("%s%s is %s in the checkpoint but %s now", mismatch.empty() ? "" : "; ", key,
                             a.dump().c_str(), b.dump().c_str());
  }
  if (st.dtype != expected.dtype)
    mismatch += str_format("%sdtype is %s in the checkpoint but %s now", mismatch.empty() ? "" : "; ",
                           dtype_name(st.dtype), dtype_name(expected.dtype));
  if (st.data_fingerprint != expected.data_fingerprint)
    mismatch += str_format("%sthe dataset differs (checkpoint: '%s', fingerprint %016llx; now: '%s', %016llx)",
                           mismatch.empty() ? "" : "; ", st.data_path.c_str(),
                           static_cast<unsigned long long>(st.data_fingerprint), expected.data_path.c_str(),
                           static_cast<unsigned long long>(expected.data_fingerprint));
  TT_RETURN_IF(!mismatch.empty(), kFailedPrecondition, "checkpoint '%s' does not match this run: %s", path.c_str(),
               mismatch.c_str());
  // The sampler must be where step x batch windows of this data leave it (Note [input staging]: the checkpoint
  // records it before the batch in flight); an epoch or cursor out of range used to restart the epoch silently.
  if (expected.train_tokens > 0) {
    const uint64_t batch = static_cast<uint64_t>(st.batch) * static_cast<uint64_t>(st.grad_accum);  // a step's
    TT_RETURN_IF(static_cast<uint64_t>(st.step) > UINT64_MAX / batch, kDataLoss,
                 "checkpoint '%s': metadata step %lld of batch %llu is more windows than can be counted", path.c_str(),
                 static_cast<long long>(st.step), static_cast<unsigned long long>(batch));
    const uint64_t want = static_cast<uint64_t>(st.step) * batch;
    auto drawn = data::windows_drawn(expected.train_tokens, st.model.seq, st.seed, st.sampler, want);
    if (!drawn.is_ok())
      return make_status(StatusCode::kDataLoss, "checkpoint '%s': metadata sampler: %s", path.c_str(),
                         drawn.status().message().c_str());
    TT_RETURN_IF(drawn.value() != want, kDataLoss,
                 "checkpoint '%s': metadata sampler (epoch %llu, cursor %llu) has drawn %llu windows, but %lld steps "
                 "of batch %llu draw %llu", path.c_str(), static_cast<unsigned long long>(st.sampler.epoch),
                 static_cast<unsigned long long>(st.sampler.cursor), static_cast<unsigned long long>(drawn.value()),
                 static_cast<long long>(st.step), static_cast<unsigned long long>(batch),
                 static_cast<unsigned long long>(want));
  }
  if (st.batch != expected.batch)
    TT_LOG(WARN, CKPT, "checkpoint was written with --batch %d, resuming with %d: the run will not be bit-identical",
           st.batch, expected.batch);
  if (st.grad_accum != expected.grad_accum)
    TT_LOG(WARN, CKPT,
           "checkpoint was written with --grad-accum %d, resuming with %d: the run will not be bit-identical",
           st.grad_accum, expected.grad_accum);
  if (st.seed != expected.seed)
    TT_LOG(WARN, CKPT, "checkpoint was written with --seed %llu, resuming with %llu: the data order changes",
           static_cast<unsigned long long>(st.seed), static_cast<unsigned long long>(expected.seed));
  if (st.data_path != expected.data_path)
    TT_LOG(WARN, CKPT, "checkpoint was written with --data '%s', resuming with '%s' (same tokens)",
           st.data_path.c_str(), expected.data_path.c_str());
  // Knobs whose change keeps the run going but not bit for bit.
  for (const char* k : {"dtype", "backend", "threads", "steps", "plan", "lr", "warmup", "min_lr_frac", "grad_dtype"}) {
    if (!st.config.is_object() || !expected.config.is_object() || !st.config.contains(k) ||
        !expected.config.contains(k))
      continue;
    if (st.config.at(k) != expected.config.at(k))
      TT_LOG(WARN, CKPT, "checkpoint was written with %s=%s, resuming with %s: the run will not be bit-identical to "
             "one that never stopped", k,
             st.config.at(k).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str(),
             expected.config.at(k).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }

  return Status::ok();
}

Result<std::string> resolve_checkpoint(const std::string& where) {
  std::error_code ec;
  TT_RETURN_IF(!std::filesystem::exists(where, ec), kNotFound, "checkpoint '%s' does not exist", where.c_str());
  if (!std::filesystem::is_directory(where, ec)) return where;
  const std::string run_checkpoints = where + "/checkpoints";
  return find_checkpoint(std::filesystem::is_directory(run_checkpoints, ec) ? run_checkpoints : where, "latest");
}

Status check_finite_tensor(const std::string& path, const std::string& name, DType dtype, const void* data, size_t n,
                           bool nonnegative) {
  const auto value = [&](size_t i) -> double {
    if (dtype == DType::kF64) return static_cast<const double*>(data)[i];
    if (dtype == DType::kBF16) return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    return static_cast<const float*>(data)[i];
  };
  TT_RETURN_IF(dtype != DType::kF32 && dtype != DType::kF64 && dtype != DType::kBF16, kInvalidArgument,
               "check_finite_tensor: %s values", dtype_name(dtype));
  for (size_t i = 0; i < n; ++i) {
    const double v = value(i);
    TT_RETURN_IF(!std::isfinite(v) || (nonnegative && v < 0), kDataLoss,
                 "checkpoint '%s': %s holds %g at element %zu (%s): a diverged or damaged run's checkpoint; "
                 "--allow-nonfinite loads it anyway, for forensics",
                 path.c_str(), name.c_str(), v, i, std::isfinite(v) ? "a second moment below 0" : "not finite");
  }
  return Status::ok();
}

Result<CheckpointState> load_checkpoint_params(const std::string& path, Executor& ex, bool allow_nonfinite) {
  const Model& model = ex.model();
  TT_ASSIGN_OR_RETURN(TensorFileReader r, TensorFileReader::open(path));
  TT_ASSIGN_OR_RETURN(CheckpointState st, checkpoint_state_from_meta(r.meta(), path));
  // The shape and dtype checks of a resumed run, with this run's data standing in for the checkpoint's.
  CheckpointState expected = st;
  expected.model = model.config();
  expected.dtype = model.master_dtype();
  TT_TRY(check_checkpoint_continues(st, expected, path));
  const size_t esize = dtype_size(st.dtype);
  const ModelConfig whole = model.config().whole();
  // Note [checkpoints without copies]: straight into the CPU optimizer's host master where it is whole.
  const bool in_place = ex.optimizer().host_state_whole() && model.config().tp == 1;
  if (in_place) {
    ex.wait_all();
    TT_TRY(ex.backend().synchronize_all());
  }
  std::vector<unsigned char> params(in_place ? 0 : static_cast<size_t>(model_num_params(whole)) * esize);
  unsigned char* into = in_place ? reinterpret_cast<unsigned char*>(ex.optimizer().host_master()) : params.data();
  for (const ParamInfo& p : model_param_layout(whole)) {
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape.rank(); ++i) shape.push_back(p.shape[i]);
    void* at = into + static_cast<size_t>(p.offset) * esize;
    TT_TRY(r.read("param/" + p.name, st.dtype, shape, at));
    if (!allow_nonfinite)
      TT_TRY(check_finite_tensor(path, "param/" + p.name, st.dtype, at, static_cast<size_t>(p.shape.numel())));
  }
  // The tensors not loaded (AdamW's moments) are checked against their CRCs too, so that a damaged file is refused
  // here and not only by a later resume (issue 47; reading them costs twice the parameters' bytes again).
  for (const TensorFileEntry& e : r.entries())
    if (!e.name.starts_with("param/")) TT_TRY(r.verify(e.name));
  if (in_place) {
    TT_TRY(ex.master_loaded());
    TT_LOG(INFO, CKPT, "parameters from %s (step %lld)", path.c_str(), static_cast<long long>(st.step));
    return st;
  }
  if (model.config().tp > 1) {  // Note [tensor parallel]: this rank's shard of the whole tensors
    std::vector<unsigned char> local(static_cast<size_t>(model.num_params()) * esize);
    model_take_shard(model.config(), model.tp_rank(), params.data(), local.data(), esize);
    params = std::move(local);
  }
  ex.wait_all();
  TT_TRY(ex.backend().synchronize_all());
  TT_TRY(ex.upload_params(params.data()));
  TT_LOG(INFO, CKPT, "parameters from %s (step %lld)", path.c_str(), static_cast<long long>(st.step));
  return st;
}

Result<CheckpointState> load_checkpoint(const std::string& path, const CheckpointState& expected, Executor& ex,
                                        bool allow_nonfinite) {
  const Model& model = ex.model();
  Optimizer& opt = ex.optimizer();
  TT_ASSIGN_OR_RETURN(TensorFileReader r, TensorFileReader::open(path));
  TT_ASSIGN_OR_RETURN(CheckpointState st, checkpoint_state_from_meta(r.meta(), path));
  TT_TRY(check_checkpoint_continues(st, expected, path));

  const DType md = model.master_dtype();
  const size_t esize = dtype_size(md);
  const ModelConfig whole = model.config().whole();
  const size_t bytes = static_cast<size_t>(model_num_params(whole)) * esize;
  Backend& be = ex.backend();
  // Note [checkpoints without copies]: straight into the CPU optimizer's host state where it is whole.
  const bool in_place = opt.host_state_whole() && model.config().tp == 1;
  if (in_place) {
    ex.wait_all();
    TT_TRY(be.synchronize_all());
  }
  std::vector<unsigned char> params(in_place ? 0 : bytes), m(in_place ? 0 : bytes), v(in_place ? 0 : bytes);
  unsigned char* const into[3] = {
      in_place ? reinterpret_cast<unsigned char*>(opt.host_master()) : params.data(),
      in_place ? reinterpret_cast<unsigned char*>(opt.host_m()) : m.data(),
      in_place ? reinterpret_cast<unsigned char*>(opt.host_v()) : v.data()};
  for (const ParamInfo& p : model_param_layout(whole)) {
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape.rank(); ++i) shape.push_back(p.shape[i]);
    const size_t off = static_cast<size_t>(p.offset) * esize;
    TT_TRY(r.read("param/" + p.name, md, shape, into[0] + off));
    TT_TRY(r.read("adam.m/" + p.name, md, shape, into[1] + off));
    TT_TRY(r.read("adam.v/" + p.name, md, shape, into[2] + off));
    if (allow_nonfinite) continue;
    const size_t count = static_cast<size_t>(p.shape.numel());
    TT_TRY(check_finite_tensor(path, "param/" + p.name, md, into[0] + off, count));
    TT_TRY(check_finite_tensor(path, "adam.m/" + p.name, md, into[1] + off, count));
    TT_TRY(check_finite_tensor(path, "adam.v/" + p.name, md, into[2] + off, count, /*nonnegative=*/true));
  }
  if (in_place) {
    TT_TRY(ex.master_loaded());
    TT_TRY(opt.state_written());  // Note [optimizer split] in plan/schedule.h
    opt.set_steps_taken(st.step);  // checkpoint_state_from_meta checked optimizer.step == step
    TT_LOG(INFO, CKPT, "resumed from %s at step %lld", path.c_str(), static_cast<long long>(st.step));
    return st;
  }
  if (model.config().tp > 1) {  // Note [tensor parallel]: this rank's shards of the whole tensors
    const size_t local_bytes = static_cast<size_t>(model.num_params()) * esize;
    for (std::vector<unsigned char>* t : {&params, &m, &v}) {
      std::vector<unsigned char> local(local_bytes);
      model_take_shard(model.config(), model.tp_rank(), t->data(), local.data(), esize);
      *t = std::move(local);
    }
  }
  ex.wait_all();  // no parameter upload of the CPU optimizer may land after the loaded values
  TT_TRY(be.synchronize_all());
  TT_TRY(ex.upload_params(params.data()));
  TT_TRY(be.compute_stream().synchronize());
  TT_TRY(opt.upload_state(reinterpret_cast<const float*>(m.data()), reinterpret_cast<const float*>(v.data())));
  opt.set_steps_taken(st.step);  // checkpoint_state_from_meta checked optimizer.step == step
  TT_LOG(INFO, CKPT, "resumed from %s at step %lld", path.c_str(), static_cast<long long>(st.step));
  return st;
}

}  // namespace tt
