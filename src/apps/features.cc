#include "apps/features.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "comm/comm.h"
#include "comm/nccl.h"
#include "core/atomic_file.h"
#include "core/rng.h"
#include "core/units.h"
#include "data/npy.h"
#include "exec/grad_reducer.h"
#include "mesh/mesh.h"

namespace tt {

Status generate_features(const FeatureGenOptions& o) {
  TT_RETURN_IF(o.out.empty(), kInvalidArgument, "gen-features: no --out folder");
  TT_RETURN_IF(o.samples < 1 || o.dim < 1 || o.classes < 2, kInvalidArgument,
               "gen-features: --samples %lld, --dim %d, --classes %d (at least 1, 1 and 2)",
               static_cast<long long>(o.samples), o.dim, o.classes);
  // Issue 47: the features are made in memory; a size past half the machine's is refused before anything is taken
  // (--samples 2^36 --dim 2^24, each within its range, asked for 4 EiB and ended in std::bad_alloc).
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const double want = static_cast<double>(o.samples) * static_cast<double>(o.dim) * sizeof(float) +
                      static_cast<double>(o.samples) * sizeof(int32_t);
  const double ram = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  TT_RETURN_IF(ram > 0 && want > ram / 2, kInvalidArgument,
               "gen-features: --samples %lld x --dim %d is %s of features; this machine has %s of memory (at most "
               "half of it is used): fewer samples or a smaller dim",
               static_cast<long long>(o.samples), o.dim, format_bytes(static_cast<int64_t>(std::min(want, 9e18))).c_str(),
               format_bytes(static_cast<int64_t>(ram)).c_str());
  TT_TRY(make_directories(o.out, "--out folder"));
  Rng rng(o.seed);
  std::vector<float> centres(static_cast<size_t>(o.classes) * o.dim);
  for (float& c : centres) c = static_cast<float>(rng.normal());
  std::vector<float> x(static_cast<size_t>(o.samples) * static_cast<size_t>(o.dim));
  std::vector<int32_t> y(static_cast<size_t>(o.samples));
  for (int64_t i = 0; i < o.samples; ++i) {
    const int k = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(o.classes)));
    y[static_cast<size_t>(i)] = k;
    const float* c = centres.data() + static_cast<size_t>(k) * o.dim;
    float* row = x.data() + static_cast<size_t>(i) * o.dim;
    for (int d = 0; d < o.dim; ++d) row[d] = c[d] + 2.0f * static_cast<float>(rng.normal());
  }
  TT_TRY(data::write_npy(o.out + "/features.npy", "<f4", {o.samples, o.dim}, x.data()));
  return data::write_npy(o.out + "/labels.npy", "<i4", {o.samples}, y.data());
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The rows of global batch `step`: a window of B rows from (step x B) mod N, wrapping.
int64_t row_of(int64_t step, int64_t j, int64_t B, int64_t N) { return (step * B + j) % N; }

// rows [first, first + count) of global batch `step` into x (count x D floats) and y.
void read_rows(const data::NpyArray& f, const data::NpyArray& l, int64_t step, int64_t first, int64_t count,
               int64_t B, float* x, int32_t* y) {
  const int64_t N = f.shape()[0], D = f.shape()[1];
  const float* fx = f.data<float>();
  const int32_t* ly = l.data<int32_t>();
  for (int64_t j = 0; j < count; ++j) {
    const int64_t r = row_of(step, first + j, B, N);
    std::memcpy(x + j * D, fx + r * D, static_cast<size_t>(D) * sizeof(float));
    y[j] = ly[r];
  }
}

}  // namespace

Result<FeatureRun> train_features(const FeatureTrainOptions& o, FILE* out) {
  TT_RETURN_IF(o.input != "direct" && o.input != "via-root" && o.input != "replicated", kInvalidArgument,
               "--input %s: direct, via-root or replicated", o.input.c_str());
  TT_RETURN_IF(o.batch < 1 || o.hidden < 1 || o.steps < 1, kInvalidArgument,
               "--batch %d, --hidden %d, --steps %d: each at least 1", o.batch, o.hidden, o.steps);
  TT_ASSIGN_OR_RETURN(data::NpyArray feats, data::NpyArray::open(o.data + "/features.npy"));
  TT_ASSIGN_OR_RETURN(data::NpyArray labels, data::NpyArray::open(o.data + "/labels.npy"));
  TT_RETURN_IF(feats.descr() != "<f4" || feats.shape().size() != 2, kDataLoss,
               "%s: must be a 2-D float32 array (samples x features), is %s of rank %zu", feats.path().c_str(),
               feats.descr().c_str(), feats.shape().size());
  TT_RETURN_IF(labels.descr() != "<i4" || labels.shape().size() != 1 || labels.shape()[0] != feats.shape()[0],
               kDataLoss, "%s: must be %lld int32 labels, one a row of %s", labels.path().c_str(),
               static_cast<long long>(feats.shape()[0]), feats.path().c_str());
  const int64_t N = feats.shape()[0], D = feats.shape()[1], H = o.hidden, B = o.batch;
  int32_t K = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t c = labels.data<int32_t>()[i];
    TT_RETURN_IF(c < 0, kDataLoss, "%s: label %d at row %lld", labels.path().c_str(), c,
                 static_cast<long long>(i));
    K = std::max(K, c + 1);
  }
  TT_RETURN_IF(K < 2, kDataLoss, "%s: fewer than 2 classes", labels.path().c_str());

  // The ranks: the data dimension of a one-dimensional mesh.
  TT_ASSIGN_OR_RETURN(mesh::MeshShape shape, mesh::MeshShape::parse(o.mesh.empty() ? "data=1" : o.mesh));
  TT_RETURN_IF(shape.dims().size() != 1, kInvalidArgument,
               "train-features: --mesh %s: the feature workload is data parallel only (one dimension)",
               shape.to_string().c_str());
  TT_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::world());
  TT_TRY(shape.check_ranks(world->size()));
  TT_ASSIGN_OR_RETURN(std::unique_ptr<mesh::Mesh> mesh, mesh::Mesh::create(shape, std::move(world)));
  const int ranks = shape.ranks(), rank = mesh->rank();
  comm::Communicator& comm = mesh->world();
  TT_RETURN_IF(B % ranks != 0, kInvalidArgument, "--batch %lld is not divisible by the %d ranks",
               static_cast<long long>(B), ranks);
  const int64_t b = B / ranks;
  FILE* say = rank == 0 ? out : nullptr;

  // Everything on the device: parameters (W1 [H, D], b1, W2 [K, H], b2), their gradients and moments, the batch and
  // the activations; rank 0's global batch for via-root (with one rank, via-root is direct: the batch is its share).
  const int64_t P = H * D + H + K * H + K;
  const bool via_root = o.input == "via-root" && ranks > 1, replicated = o.input == "replicated";
  const int64_t device_floats =
      4 * P + 1 + b * D + 4 * b * H + 2 * b * K + b + (via_root && rank == 0 ? B * D + B : 0);
  const int64_t device_bytes = device_floats * 4 + b * 4 + (int64_t(64) << 20);
  TT_ASSIGN_OR_RETURN(std::string backend_name, resolve_backend_name(o.backend));
  BackendOptions bo;
  bo.device_budget = device_bytes;
  bo.threads = o.threads;
  TT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, create_backend(backend_name, bo));
  const bool global_host = replicated || (via_root && rank == 0);
  const int64_t host_bytes = (b * D + b) * 4 + (global_host ? (B * D + B) * 4 : 0) + b * 4 + 4096 * 4;
  TT_TRY(be->host_pool().reserve(static_cast<size_t>(host_bytes)));
  auto dev = [&](Shape s, DType t, const char* name) { return be->pool().allocate(s, t, TensorClass::kWorkspace, name); };
  TT_ASSIGN_OR_RETURN(Tensor params, dev({P}, DType::kF32, "params"));
  TT_ASSIGN_OR_RETURN(Tensor grads, dev({P}, DType::kF32, "grads"));
  TT_ASSIGN_OR_RETURN(Tensor m, dev({P}, DType::kF32, "adam.m"));
  TT_ASSIGN_OR_RETURN(Tensor v, dev({P}, DType::kF32, "adam.v"));
  TT_ASSIGN_OR_RETURN(Tensor norm, dev({1}, DType::kF32, "norm"));
  TT_ASSIGN_OR_RETURN(Tensor x, dev({b, D}, DType::kF32, "x"));
  TT_ASSIGN_OR_RETURN(Tensor y, dev({b}, DType::kI32, "y"));
  TT_ASSIGN_OR_RETURN(Tensor pre, dev({b, H}, DType::kF32, "pre"));
  TT_ASSIGN_OR_RETURN(Tensor hid, dev({b, H}, DType::kF32, "hidden"));
  TT_ASSIGN_OR_RETURN(Tensor dpre, dev({b, H}, DType::kF32, "dpre"));
  TT_ASSIGN_OR_RETURN(Tensor logits, dev({b, K}, DType::kF32, "logits"));
  TT_ASSIGN_OR_RETURN(Tensor losses, dev({b}, DType::kF32, "losses"));
  Tensor x_all, y_all;
  if (via_root && rank == 0) {
    TT_ASSIGN_OR_RETURN(x_all, dev({B, D}, DType::kF32, "x.global"));
    TT_ASSIGN_OR_RETURN(y_all, dev({B}, DType::kI32, "y.global"));
  }
  auto view = [&](Tensor& t, int64_t off, Shape s) { return t.view(off, s); };
  const Tensor W1 = view(params, 0, {H, D}), b1 = view(params, H * D, {H}), W2 = view(params, H * D + H, {K, H}),
               b2 = view(params, H * D + H + K * H, {K});
  const Tensor dW1 = view(grads, 0, {H, D}), db1 = view(grads, H * D, {H}), dW2 = view(grads, H * D + H, {K, H}),
               db2 = view(grads, H * D + H + K * H, {K});

  // Host buffers: pinned on a GPU.
  TT_ASSIGN_OR_RETURN(void* xh, be->allocate_host(static_cast<size_t>(b * D) * 4, TensorClass::kInput, "x.host"));
  TT_ASSIGN_OR_RETURN(void* yh, be->allocate_host(static_cast<size_t>(b) * 4, TensorClass::kInput, "y.host"));
  TT_ASSIGN_OR_RETURN(void* lh, be->allocate_host(static_cast<size_t>(b) * 4, TensorClass::kInput, "losses.host"));
  void *xg = nullptr, *yg = nullptr;
  if (global_host) {
    TT_ASSIGN_OR_RETURN(xg, be->allocate_host(static_cast<size_t>(B * D) * 4, TensorClass::kInput, "x.global.host"));
    TT_ASSIGN_OR_RETURN(yg, be->allocate_host(static_cast<size_t>(B) * 4, TensorClass::kInput, "y.global.host"));
  }
  auto* xhf = static_cast<float*>(xh);
  auto* yhi = static_cast<int32_t*>(yh);

  // The same initial values on every rank: normal(0, 1/sqrt(fan in)) weights, zero biases.
  {
    std::vector<float> init(static_cast<size_t>(P), 0.0f);
    Rng rng(o.seed);
    for (int64_t i = 0; i < H * D; ++i) init[static_cast<size_t>(i)] = static_cast<float>(rng.normal() / std::sqrt(double(D)));
    for (int64_t i = 0; i < K * H; ++i)
      init[static_cast<size_t>(H * D + H + i)] = static_cast<float>(rng.normal() / std::sqrt(double(H)));
    be->copy_h2d(params, init.data(), be->compute_stream());
    be->fill_zero(m, be->compute_stream());
    be->fill_zero(v, be->compute_stream());
    TT_TRY(be->compute_stream().synchronize());
  }
  std::unique_ptr<GradReducer> reducer;
  if (ranks > 1) {
    TT_ASSIGN_OR_RETURN(reducer, make_stream_reducer(*be, comm, be->compute_stream(), "train-features"));
  }
  AdamWArgs args;
  args.lr = o.lr;
  args.weight_decay = 0.1f;
  args.grad_clip = 1.0f;
  args.add_piece(H * D, true);
  args.add_piece(H * D + H, false);
  args.add_piece(H * D + H + K * H, true);
  args.add_piece(P, false);

  FeatureRun run;
  run.ranks = ranks;
  run.input_bytes_per_step = B * (D + 1) * 4;
  if (say)
    std::fprintf(say,
                 "features %s: %lld rows of %lld floats, %d classes | MLP %lld -> %lld -> %d (%lld parameters) | %d "
                 "rank%s on %s, batch %lld = %lld a rank, %s of input a step, input %s\n",
                 o.data.c_str(), static_cast<long long>(N), static_cast<long long>(D), K, static_cast<long long>(D),
                 static_cast<long long>(H), K, static_cast<long long>(P), ranks, ranks == 1 ? "" : "s",
                 be->describe().c_str(), static_cast<long long>(B), static_cast<long long>(b),
                 format_bytes(run.input_bytes_per_step).c_str(), o.input.c_str());
  for (int step = 0; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    // --- the input stage ---
    if (via_root) {
      // Rank 0 reads the global batch and copies it to its device, then scatters it from there to the ranks'
      // devices: the reducer's collectives (NCCL on a GPU; on the CPU backend, whose device memory is host memory,
      // the host communicator).
      if (rank == 0) {
        read_rows(feats, labels, step, 0, B, B, static_cast<float*>(xg), static_cast<int32_t*>(yg));
        be->copy_h2d(x_all, xg, be->h2d_stream());
        be->copy_h2d(y_all, yg, be->h2d_stream());
        TT_TRY(be->h2d_stream().synchronize());
      }
      reducer->scatter(x_all, x, 0, be->compute_stream());
      reducer->scatter(y_all, y, 0, be->compute_stream());
      TT_TRY(be->compute_stream().synchronize());
      TT_TRY(reducer->status());
    } else {
      if (replicated) {
        read_rows(feats, labels, step, 0, B, B, static_cast<float*>(xg), static_cast<int32_t*>(yg));
        std::memcpy(xhf, static_cast<float*>(xg) + rank * b * D, static_cast<size_t>(b * D) * 4);
        std::memcpy(yhi, static_cast<int32_t*>(yg) + rank * b, static_cast<size_t>(b) * 4);
      } else {  // direct (or via-root on one rank)
        read_rows(feats, labels, step, rank * b, b, B, xhf, yhi);
      }
      be->copy_h2d(x, xhf, be->h2d_stream());
      be->copy_h2d(y, yhi, be->h2d_stream());
      TT_TRY(be->h2d_stream().synchronize());
    }
    FeatureStep rec;
    rec.input_ms = ms_since(t0);
    // --- the step: forward, backward, the gradients averaged over the ranks, AdamW ---
    be->matmul_gelu_forward(pre, hid, x, W1, b1);
    be->matmul_forward(logits, hid, W2, b2);
    be->softmax_xent_fused(losses, logits, logits, y, 1.0f / static_cast<float>(b), K);
    // Each gradient is written once (Note [gradients first written]): nothing zeroes them.
    be->matmul_backward_gelu(dpre, dW2, db2, logits, hid, W2, pre, GradWrite::kOverwrite);
    be->matmul_backward(Tensor(), dW1, db1, dpre, x, W1, GradWrite::kOverwrite);
    if (reducer) reducer->reduce(grads, be->compute_stream());
    be->sum_squares(norm, grads);
    args.step = step + 1;
    be->adamw_update(params, grads, m, v, norm, args, Tensor());
    be->copy_d2h(lh, losses, be->compute_stream());
    TT_TRY(be->compute_stream().synchronize());
    if (reducer) TT_TRY(reducer->status());
    double loss = 0;
    for (int64_t i = 0; i < b; ++i) loss += static_cast<const float*>(lh)[i];
    loss /= static_cast<double>(b);
    double stats[2] = {loss, rec.input_ms};
    if (ranks > 1) {
      TT_TRY(comm.allreduce(comm::kInPlace, &stats[0], 1, comm::DType::kF64, comm::Op::kAvg));
      TT_TRY(comm.allreduce(comm::kInPlace, &stats[1], 1, comm::DType::kF64, comm::Op::kMax));
    }
    rec.loss = stats[0];
    rec.input_ms_max = stats[1];
    rec.step_ms = ms_since(t0);
    run.steps.push_back(rec);
    if (say)
      std::fprintf(say, "step %4d/%d | loss %.4f | input %.1f ms (slowest rank %.1f ms) | step %.1f ms\n", step + 1,
                   o.steps, rec.loss, rec.input_ms, rec.input_ms_max, rec.step_ms);
  }
  if (!o.metrics_out.empty() && rank == 0) {
    nlohmann::json j;
    j["data"] = o.data;
    j["input"] = o.input;
    j["ranks"] = ranks;
    j["batch"] = B;
    j["features"] = D;
    j["hidden"] = H;
    j["classes"] = K;
    j["backend"] = be->describe();
    j["input_bytes_per_step"] = run.input_bytes_per_step;
    for (const FeatureStep& s : run.steps)
      j["steps"].push_back({{"loss", s.loss}, {"input_ms", s.input_ms}, {"input_ms_max", s.input_ms_max},
                            {"step_ms", s.step_ms}});
    TT_TRY(write_file_atomically(o.metrics_out, j.dump(1) + "\n"));
  }
  TT_TRY(be->synchronize_all());
  for (void* p : {xh, yh, lh, xg, yg})
    if (p) be->free_host(p);
  for (Tensor* t : {&y_all, &x_all, &losses, &logits, &dpre, &hid, &pre, &y, &x, &norm, &v, &m, &grads, &params})
    if (t->raw()) be->pool().free(*t);
  return run;
}

}  // namespace tt
