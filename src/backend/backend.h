// backend: the interface every kind of device implements: three streams (compute, h2d, d2h), events, the budgeted
// device pool, copies, and the forward/backward kernels of the reference models plus the optimizer.
//
// All ops are asynchronous: they are enqueued on the compute stream and return at once; read results with a copy on
// a stream and synchronize. Tensors passed to ops live in this backend's device pool. Shapes and dtypes are checked
// at enqueue time (a mismatch is a programming error and aborts with the shapes involved).
//
// Conventions (as llm.c's): row-major; a Linear weight is [out, in]; a backward op writes its parameter gradients
// as its GradWrite says (Note [gradients first written]); softmax_xent_backward overwrites its output.
// Mixed precision: activations (and the weights an op reads) are in the compute dtype; parameter gradients,
// LayerNorm mean/rstd and losses in the master dtype (fp32 for bf16 compute; backend/op_shapes.h).
//
//   std::unique_ptr<Backend> be = ...;                 // backend/cpu or backend/cuda
//   be->layernorm_forward(out, mean, rstd, x, w, b);   // enqueued on be->compute_stream()
//   be->copy_d2h(host, out, be->compute_stream());
//   TT_TRY(be->compute_stream().synchronize());
#pragma once

#include <functional>
#include <array>
#include <map>
#include <memory>
#include <string>

#include "core/stream.h"
#include "core/tensor.h"
#include "memory/device_pool.h"
#include "memory/host_pool.h"
#include "memory/stats.h"
#include "memory/um.h"

namespace tt {

// Note [gradients first written]
// How a backward op writes a parameter's gradient: kAccumulate adds to it (+=), kOverwrite writes it (=). The first
// op of a step to write a gradient overwrites it and any later one adds (in the GPT: the first chunk of the LM head
// overwrites d(wte), its other chunks and the embedding's backward add), so no gradient is ever zeroed: PyTorch's
// gradients set to None, without the allocation. On a GPU the dW GEMMs then run with beta 0 and do not read the fp32
// gradient (13.7 GB a step at d4096 L16), and the zeroing (as many bytes written) is gone; the GEMMs themselves were
// no faster for it (docs/benchmarks/2026-12-03-h200-engine-grads-written/). The values are those of
// adding to zeros, but for the sign of a zero (0 + -0 is +0).
enum class GradWrite { kAccumulate, kOverwrite };

// Hyper-parameters of one AdamW update (PyTorch's semantics: decoupled weight decay, bias correction).
struct AdamWArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;        // 1-based, for bias correction
  float grad_clip = 0.0f;  // > 0: gradients are scaled by min(1, clip / (sqrt(grad_norm_sq) + 1e-6))
  // Note [master in two halves] (core/bf16.h): the f32 master is param (its low halves, 16 bits each in a bf16
  // tensor) with copy_out (its high halves, the bf16 compute copy), read and written as one.
  bool split_master = false;
  // The pieces of the tensor with and without weight decay, in element order, so that one call updates several
  // parameters laid out one after the other (a segment's: exec/optimizer.h): piece i covers the elements
  // [piece_end[i - 1], piece_end[i]) (piece_end[-1] = 0) and decays by weight_decay iff bit i of decay_bits is set.
  // No pieces: the whole tensor decays by weight_decay.
  static constexpr int kMaxPieces = 16;
  int pieces = 0;
  std::array<int64_t, kMaxPieces> piece_end{};
  uint32_t decay_bits = 0;

  // Appends the piece ending at `end` (merged with the last one when it decays alike); false when full.
  bool add_piece(int64_t end, bool decay) {
    if (pieces > 0 && ((decay_bits >> (pieces - 1)) & 1u) == static_cast<uint32_t>(decay)) {
      piece_end[static_cast<size_t>(pieces - 1)] = end;
      return true;
    }
    if (pieces == kMaxPieces) return false;
    piece_end[static_cast<size_t>(pieces)] = end;
    if (decay) decay_bits |= 1u << pieces;
    ++pieces;
    return true;
  }
};

// Work of a backend's compute stream recorded once and replayed as one launch (Backend::capture: CUDA graphs).
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void replay() = 0;  // enqueued on the compute stream
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Records what `body` enqueues on the compute stream into a Graph, without running it; nullptr where the backend
  // records nothing (the CPU backend): the caller then runs body itself each time. body may only enqueue kernels of
  // this backend on its compute stream (no copies from pageable memory, no waits, no allocations), on tensors that
  // outlive the Graph.
  virtual std::unique_ptr<Graph> capture(const std::function<void()>& body) {
    (void)body;
    return nullptr;
  }

  virtual Device device() const = 0;
  virtual std::string describe() const = 0;
  virtual Stream& compute_stream() = 0;
  virtual Stream& h2d_stream() = 0;
  virtual Stream& d2h_stream() = 0;
  // A fourth stream for host work in stream order (the CPU optimizer): enqueue_host runs fn on a host thread after
  // everything enqueued before it on this stream; events recorded on it order the device streams after host work
  // and the other way round. fn must not call the backend (on a GPU it runs as a CUDA host function).
  virtual Stream& host_stream() = 0;
  virtual void enqueue_host(std::function<void()> fn) = 0;
  // A fifth stream for collectives (the data-parallel gradient reductions: Note [data parallel] in
  // plan/schedule.cc), so that they overlap the compute stream's backward.
  virtual Stream& comm_stream() = 0;
  // Runs fn on a host thread in `stream`'s order (after the work submitted to it before, before the work after)
  // where this backend can: the CPU backend, whose streams are threads and whose device memory is host memory (the
  // data-parallel gradient reductions: exec/grad_reducer.h). false: not here (a GPU's streams take its collectives
  // through NCCL instead).
  virtual bool enqueue_on(Stream& stream, std::function<void()> fn) { return false; }
  // The OpenMP team size of host work on the host stream (the CPU optimizer's update): the CPU backend's threads;
  // beside a GPU every core but one (Note [host threads beside a GPU] in host/adamw.h) unless --threads says.
  virtual int host_threads() const = 0;
  // timing: the event can measure elapsed time (elapsed_ms_since); slightly more costly on GPUs.
  virtual std::unique_ptr<Event> create_event(bool timing = false) = 0;
  virtual memory::DevicePool& pool() = 0;
  // Host memory the copy engines read and write at full speed (memory/host_pool.h: pinned slabs on the GPU's NUMA
  // node; plain, or mlocked on request, on the CPU backend), counted in the stats.
  virtual memory::HostPool& host_pool() = 0;
  Result<void*> allocate_host(size_t bytes, TensorClass cls, const std::string& tag = "host") {
    return host_pool().allocate(bytes, cls, tag);
  }
  void free_host(void* ptr) { host_pool().free(ptr); }
  // Host memory no copy engine touches, only the host (the CPU optimizer's moments, and its master where nothing
  // copies it: Note [pinned and pageable host memory] in plan/inventory.h): plain pages on the pinned pool's NUMA
  // node, never pinned, counted under Tier::kHost.
  virtual memory::HostPool& pageable_pool() = 0;
  virtual memory::MemoryStats& stats() = 0;
  // Unified (managed) memory (memory/um.h, issue 20): nullptr where this backend has none.
  virtual memory::UmDriver* um() { return nullptr; }
  // Diagnostic counters of which paths ops took, e.g. {"cublaslt_gelu_bias_gemms": 120}; empty by default.
  virtual std::map<std::string, int64_t> counters() const { return {}; }
  // Blocks until every stream is idle.
  Status synchronize_all();

  // --- copies: host memory must stay valid until the stream has run the copy ---
  virtual void copy_h2d(const Tensor& dst, const void* src, Stream& stream) = 0;
  virtual void copy_d2h(void* dst, const Tensor& src, Stream& stream) = 0;
  virtual void copy_d2d(const Tensor& dst, const Tensor& src, Stream& stream) = 0;
  virtual void fill_zero(const Tensor& t, Stream& stream) = 0;
  // dst = src converted to dst's dtype (same element count); on the compute stream. A backend supports at least the
  // conversions between its master and compute dtypes.
  virtual void convert(const Tensor& dst, const Tensor& src) = 0;

  // --- model ops, on the compute stream ---
  // out[B,T,C] = wte[tokens[b,t]] + wpe[t]. wte's rows may be a slice of the vocabulary, the tokens from vocab_begin
  // on (Note [tensor parallel] in model/gpt.h): a token outside it contributes 0; wpe may be undefined (not added).
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                 int64_t vocab_begin = 0) = 0;
  // dwte[tokens[b,t] - vocab_begin] += dout[b,t] for the tokens in wte's rows (always added: the LM head writes
  // d(wte) first); dwpe[t] = or += (as `pe` says) sum_b dout[b,t] (dwpe may be undefined).
  // As embedding_forward (without a vocabulary slice), row i's position read from positions[i] when the op runs
  // instead of being its index along T (Note [KV cache]).
  virtual void embedding_at(const Tensor& out, const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                            const Tensor& wpe) = 0;
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                  GradWrite pe, int64_t vocab_begin = 0) = 0;
  // Rows of inp [N, C]: out = (x - mean) * rstd * w + b, eps 1e-5; saves mean[N], rstd[N].
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                 const Tensor& w, const Tensor& b) = 0;
  // dinp += d(inp) (the residual stream's gradient adds up); dw, db written as gw says.
  virtual void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                  const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                                  GradWrite gw) = 0;
  // out[N, OC] = inp[N, C] @ w[OC, C]^T + bias[OC] (bias may be undefined).
  virtual void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias) = 0;
  // dinp = dout @ w (OVERWRITES dinp: no zeroing first); dw (+)= dout^T @ inp and dbias (+)= column sums of dout,
  // as gw says (dinp, dw and dbias may each be undefined).
  virtual void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                               const Tensor& inp, const Tensor& w, GradWrite gw) = 0;
  // Fused MLP halves (on a GPU, GEMM epilogues): pre = inp @ w^T + bias, out = gelu(pre); and its backward through
  // the next Linear: dpre = (dout @ w) * gelu'(pre) (OVERWRITES dpre), dw (+)= dout^T @ inp, dbias (+)= column sums
  // (as gw says).
  virtual void matmul_gelu_forward(const Tensor& pre, const Tensor& out, const Tensor& inp, const Tensor& w,
                                   const Tensor& bias) = 0;
  virtual void matmul_backward_gelu(const Tensor& dpre, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                                    const Tensor& inp, const Tensor& w, const Tensor& pre, GradWrite gw) = 0;
  // RMSNorm over rows of inp [N, C]: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); saves rstd[N] (master
  // dtype).
  virtual void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                               float eps) = 0;
  // res = a + b, then the RMSNorm of res (as rmsnorm_forward), in one pass over the rows where the backend can: the
  // same bits as residual_forward then rmsnorm_forward (the norm reads the sum as rounded and stored).
  virtual void residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a,
                                        const Tensor& b, const Tensor& w, float eps) = 0;
  // dinp += d(inp) (the residual stream's gradient adds up); dw written as gw says.
  virtual void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp,
                                const Tensor& w, const Tensor& rstd, GradWrite gw) = 0;
  // Rotary position embedding, in place, of the q and k heads of qkv [B, T, (H + 2 KV) hs] (attention's layout): each
  // head's pairs (i, i + hs/2) turned by the angles of position p, table [positions, hs] holding cos then sin of the
  // hs/2 frequencies (master dtype). p is the row's t, or with positions ([B] i32, read when the op runs; qkv then
  // [B, Cq]) positions[b]. inverse turns back: the backward of the rotation (its transpose).
  virtual void rope(const Tensor& qkv, const Tensor& table, const Tensor& positions, int heads, int kv_heads,
                    bool inverse) = 0;
  // SwiGLU over rows of inp [N, 2F] = [gate | up]: out [N, F] = silu(gate) * up; the backward OVERWRITES dinp [N, 2F],
  // which may be inp itself (every implementation reads an element's gate and up before writing their gradients).
  virtual void swiglu_forward(const Tensor& out, const Tensor& inp) = 0;
  virtual void swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  // Causal attention, multi-head or grouped-query: qkv[B,T,Cq] holds [q (C) | k (KV hs) | v (KV hs)] per token for
  // `heads` query heads of hs = C / heads channels and the KV key/value heads the width leaves (KV divides heads;
  // query head h reads key/value head h / (heads / KV)). Saves only lse[B,H,T] (master dtype): the
  // natural-log sum of exp of each query row's scaled scores; the backward rebuilds the probabilities from it, so
  // nothing of size T x T outlives a call (flash attention's recomputation).
  virtual void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int heads) = 0;
  // dqkv = d(qkv), from dout, the forward's inputs, its output `out` and lse. OVERWRITES dqkv: every element is
  // written (cuDNN's fused backward writes dq, dk, dv and cannot add; docs/design/cudnn-attention.md §5.4).
  virtual void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, int heads) = 0;
  // Note [KV cache]: one new query per sequence. cache[B, Tmax, Cq] holds each sequence's positions so far; sequence
  // b's new row qkv[b] (its q, k and v) is written into cache[b, pos[b]], then out[b] = the attention of its query
  // over cache rows 0..pos[b] (row pos[b] of attention_forward on the cache, up to rounding). pos: [B] i32, read
  // when the op runs (so that one recorded step serves every position: capture()).
  virtual void attention_decode(const Tensor& out, const Tensor& cache, const Tensor& qkv, const Tensor& pos,
                                int heads) = 0;
  // tanh-approximated GELU.
  virtual void gelu_forward(const Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  virtual void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // res = a + b, then the LayerNorm of res (as layernorm_forward), in one pass over the rows.
  virtual void residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                                          const Tensor& bias) = 0;
  // Per row of logits[N, Vp]: probs = softmax over the first `vocab` columns (columns from `vocab` on are padding
  // and get probability 0; probs may alias logits), losses[n] = -log probs[target].
  virtual void softmax_xent_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                    const Tensor& targets, int vocab) = 0;
  // dlogits = (probs - onehot(targets)) * dloss, 0 in the padding columns; overwrites; dlogits may alias probs.
  virtual void softmax_xent_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets, float dloss,
                                     int vocab) = 0;
  // Both in one pass, for training: losses as softmax_xent_forward, dlogits as softmax_xent_backward of its
  // probabilities, which are never stored; dlogits may alias logits.
  virtual void softmax_xent_fused(const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                  const Tensor& targets, float dloss, int vocab) = 0;
  // Note [vocabulary-parallel cross-entropy] (model/gpt.h): the same over logits [N, Vl] that are this rank's columns
  // [vocab_begin, vocab_begin + Vl) of the padded vocabulary (those at or past `vocab` are padding), in three steps
  // around two sums over the ranks. stats [3, N] (master dtype): row 0 the rows' maxima, row 1 their sums of
  // exp(x - max), row 2 the target's logit.
  //   xent_local_max: stats[0] = each row's maximum over its local columns (-inf where it has none)
  //   (stats[0] becomes the maximum over the ranks)
  //   xent_local_sums: stats[1] = sum of exp(x - stats[0]) over the local columns, stats[2] = the target's logit
  //   where this rank holds the target's column, else 0
  //   (stats[1] and stats[2] become their sums over the ranks)
  //   xent_finish: losses = log(stats[1]) + stats[0] - stats[2]; and when dlogits is defined (it may alias logits)
  //   dlogits = (exp(x - stats[0]) / stats[1] - onehot(target)) * dloss, 0 in the padding columns.
  virtual void xent_local_max(const Tensor& stats, const Tensor& logits, int64_t vocab_begin, int vocab) = 0;
  virtual void xent_local_sums(const Tensor& stats, const Tensor& logits, const Tensor& targets,
                               int64_t vocab_begin, int vocab) = 0;
  virtual void xent_finish(const Tensor& losses, const Tensor& dlogits, const Tensor& logits, const Tensor& stats,
                           const Tensor& targets, float dloss, int64_t vocab_begin, int vocab) = 0;

  // --- optimizer ---
  // out[0] = sum of squares of x (accumulated in double, deterministic for a fixed thread count).
  virtual void sum_squares(const Tensor& out, const Tensor& x) = 0;
  // The same on `stream`, one of this backend's other than the compute stream, with scratch of its own: it may run
  // beside the compute stream's kernels (the gradient norm's parts during the backward: Note [norm beside the
  // backward] in plan/schedule.cc). The same bits as sum_squares.
  virtual void sum_squares_on(Stream& stream, const Tensor& out, const Tensor& x) = 0;
  // out[0] = the sum of parts[0..n) added in index order in double, rounded once (the global gradient norm from
  // per-segment sums of squares: the same bits however the segments were produced).
  virtual void sum_in_order(const Tensor& out, const Tensor& parts) = 0;
  // One AdamW step on a parameter tensor (or on several laid out one after the other: args.pieces); grad_norm_sq[0]
  // (device) feeds the clipping factor. copy_out, when not empty, receives the new parameters in its dtype in the same
  // pass (the bf16 compute copy, without a second pass over the master): f32 as they are, bf16 their high halves
  // (nearest, ties away from zero: Note [master in two halves] in core/bf16.h). With args.split_master, param and
  // copy_out are the master's two halves.
  virtual void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                            const Tensor& grad_norm_sq, const AdamWArgs& args, const Tensor& copy_out) = 0;
};

}  // namespace tt
