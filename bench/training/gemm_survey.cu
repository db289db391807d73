// The GEMMs of one transformer block (and the LayerNorm backward) at the shapes of a run, timed on the GPU: for each
// product the path the CUDA backend takes today (cuBLASLt's first heuristic algorithm for the forward's fused
// epilogues, cublasGemmEx's default for the backward's dinp and dW), then every algorithm cuBLASLt's heuristic offers
// for the same call (up to --candidates), each timed and checked bit for bit against today's output; for dW also the
// bias gradient in the GEMM's epilogue (kBiasGradA) against the separate column sums. What a tuned choice of algorithm
// would gain, and whether it would change a bit, before the backend is changed.
//
//   gemm_survey --tokens 16384 --width 4096 [--candidates 16] [--reps 10] [--json OUT.json]
//   gemm_survey --tokens 8192 --width 2048 --ffn 8192 --qkv 3072 --vocab 128256 ...   (a Llama: --ffn given)
//
// With --ffn, the products of a Llama block and its head instead (qkv C -> --qkv, attn.proj, mlp.gate_up C -> 2 F,
// mlp.down F -> C, lm_head C -> --vocab), none with a bias: forward, dinp and dW (fp32), each with beta 0 as a step of
// one micro-batch writes them (Note [gradients first written]), all on cublasGemmEx's default algorithm today.
// --dw-bf16 1 adds each dW with a bf16 output (PyTorch autocast's weight gradient before its cast to f32).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.cuh"
#include "bench_fill.cuh"
#include "backend/cuda/lt_gemm.cuh"

namespace {

using tt::cuda::Epilogue;
using tt::cuda::LtCall;
using tt::cuda::LtGemm;

using tt::bench::fill_kernel;

__global__ void count_diff_kernel(const uint32_t* a, const uint32_t* b, size_t words, unsigned long long* out) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    local += a[i] != b[i];
  if (local) atomicAdd(out, local);
}

struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t n) : bytes(n) { TT_CUDA_ASSERT(cudaMalloc(&p, n)); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

void fill(void* p, size_t bytes, uint32_t seed, float scale = 1.0f) {
  fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), bytes / 2, seed, scale);
  TT_CUDA_CHECK_LAUNCH();
}

unsigned long long differing_words(const void* a, const void* b, size_t bytes) {
  unsigned long long* d = nullptr;
  TT_CUDA_ASSERT(cudaMalloc(&d, sizeof(*d)));
  TT_CUDA_ASSERT(cudaMemset(d, 0, sizeof(*d)));
  count_diff_kernel<<<1024, 256>>>(static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), bytes / 4, d);
  unsigned long long h = 0;
  TT_CUDA_ASSERT(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
  cudaFree(d);
  return h;
}

// Mean milliseconds of one launch of fn over reps launches, after two warm-up launches.
template <typename F>
double time_ms(int reps, F&& fn) {
  fn();
  fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) fn();
  cudaEventRecord(b);
  TT_CUDA_ASSERT(cudaEventSynchronize(b));
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

struct Options {
  int tokens = 16384, width = 4096, candidates = 16, reps = 10;
  int ffn = 0, qkv = 0, vocab = 0;  // a Llama's (ffn > 0)
  bool dw_bf16 = false;              // with --ffn: each dW also with a bf16 output
  std::string json;
};

FILE* json_out = nullptr;
bool first_row = true;

void row(const char* gemm, const char* path, int algo, double ms, double flop, long long diff, const char* note) {
  std::printf("  %-22s %-26s %3d %9.3f ms %7.1f TFLOP/s  %s%s\n", gemm, path, algo, ms, flop / ms * 1e-9,
              diff < 0 ? "" : (diff == 0 ? "bit-identical" : "DIFFERS"), note);
  if (json_out) {
    std::fprintf(json_out, "%s\n  {\"gemm\": \"%s\", \"path\": \"%s\", \"algo\": %d, \"ms\": %.4f, \"tflops\": %.1f, "
                 "\"differing_words\": %lld}", first_row ? "" : ",", gemm, path, algo, ms,
                 flop / ms * 1e-9, diff);
    first_row = false;
  }
}

// One product: today's path (ref, run once into D from the saved initial D, kept as the reference), then the
// heuristic's candidates through `lt`.
template <typename Ref>
void survey(LtGemm& lt, const Options& o, const char* name, LtCall call, size_t d_bytes, Ref&& ref) {
  const double flop = 2.0 * call.m * call.n * call.k;
  Buffer saved(d_bytes), reference(d_bytes);
  TT_CUDA_ASSERT(cudaMemcpy(saved.p, call.d, d_bytes, cudaMemcpyDeviceToDevice));
  ref();
  TT_CUDA_ASSERT(cudaMemcpy(reference.p, call.d, d_bytes, cudaMemcpyDeviceToDevice));
  const double ref_ms = time_ms(o.reps, ref);
  row(name, "today", -1, ref_ms, flop, -1, "");
  const auto algos = lt.algorithms(call, o.candidates);
  for (size_t i = 0; i < algos.size(); ++i) {
    TT_CUDA_ASSERT(cudaMemcpy(call.d, saved.p, d_bytes, cudaMemcpyDeviceToDevice));
    lt.run(nullptr, call, algos[i]);
    const long long diff = static_cast<long long>(differing_words(call.d, reference.p, d_bytes));
    const double ms = time_ms(o.reps, [&] { lt.run(nullptr, call, algos[i]); });
    char note[64];
    std::snprintf(note, sizeof note, "  (workspace %zu KiB)", algos[i].workspace_bytes >> 10);
    row(name, "cublasLt heuristic", static_cast<int>(i), ms, flop, diff, note);
  }
  // Today's path once more: how far the card's clocks moved the times while the candidates ran.
  row(name, "today, again", -1, time_ms(o.reps, ref), flop, -1, "");
  TT_CUDA_ASSERT(cudaMemcpy(call.d, saved.p, d_bytes, cudaMemcpyDeviceToDevice));
}

// A Llama's products (no bias), each today's path (cublasGemmEx's default algorithm) against cuBLASLt's candidates.
void survey_llama(LtGemm& lt, cublasHandle_t cublas, const Options& o) {
  const int N = o.tokens, C = o.width;
  struct Layer {
    const char* name;
    int in, out;
  };
  const Layer layers[] = {{"qkv", C, o.qkv > 0 ? o.qkv : 3 * C}, {"attn.proj", C, C}, {"mlp.gate_up", C, 2 * o.ffn},
                          {"mlp.down", o.ffn, C}, {"lm_head", C, o.vocab > 0 ? o.vocab : 128256}};
  uint32_t seed = 1;
  for (const Layer& l : layers) {
    const size_t in_bytes = size_t(N) * l.in * 2, out_bytes = size_t(N) * l.out * 2, w_bytes = size_t(l.out) * l.in * 2;
    Buffer inp(in_bytes), w(w_bytes), out(out_bytes), dout(out_bytes), dinp(in_bytes), dw(size_t(l.out) * l.in * 4);
    fill(inp.p, in_bytes, seed++);
    fill(w.p, w_bytes, seed++, 0.02f);
    fill(dout.p, out_bytes, seed++, 0.01f);
    TT_CUDA_ASSERT(cudaMemset(out.p, 0, out_bytes));
    TT_CUDA_ASSERT(cudaMemset(dinp.p, 0, in_bytes));
    TT_CUDA_ASSERT(cudaMemset(dw.p, 0, dw.bytes));
    std::printf("%s: [%d, %d] x [%d, %d]^T\n", l.name, N, l.in, l.out, l.in);
    LtCall f;  // out = inp w^T
    f.trans_b = true;
    f.m = N, f.n = l.out, f.k = l.in;
    f.a = inp.p, f.lda = l.in, f.b = w.p, f.ldb = l.in, f.d = out.p, f.ldd = l.out;
    survey(lt, o, (std::string(l.name) + " forward").c_str(), f, out_bytes, [&] {
      tt::cuda::gemm_rm(cublas, false, true, N, l.out, l.in, 1.0f, inp.p, CUDA_R_16BF, l.in, w.p, l.in, 0.0f, out.p,
                        CUDA_R_16BF, l.out);
    });
    LtCall g;  // dinp = dout w
    g.m = N, g.n = l.in, g.k = l.out;
    g.a = dout.p, g.lda = l.out, g.b = w.p, g.ldb = l.in, g.d = dinp.p, g.ldd = l.in;
    survey(lt, o, (std::string(l.name) + " dinp").c_str(), g, in_bytes, [&] {
      tt::cuda::gemm_rm(cublas, false, false, N, l.in, l.out, 1.0f, dout.p, CUDA_R_16BF, l.out, w.p, l.in, 0.0f,
                        dinp.p, CUDA_R_16BF, l.in);
    });
    LtCall d;  // dW = dout^T inp, fp32
    d.trans_a = true;
    d.m = l.out, d.n = l.in, d.k = N;
    d.a = dout.p, d.lda = l.out, d.b = inp.p, d.ldb = l.in, d.d = dw.p, d.ldd = l.in;
    d.d_type = CUDA_R_32F;
    survey(lt, o, (std::string(l.name) + " dW").c_str(), d, dw.bytes, [&] {
      tt::cuda::gemm_rm(cublas, true, false, l.out, l.in, N, 1.0f, dout.p, CUDA_R_16BF, l.out, inp.p, l.in, 0.0f,
                        dw.p, CUDA_R_32F, l.in);
    });
    if (!o.dw_bf16) continue;
    // --dw-bf16: the same dW written in bf16, as PyTorch's autocast backward computes it (torch.mm of bf16
    // operands; autocast then casts the result to the f32 parameter's gradient): what gradients kept in bf16 would
    // cost against the f32 output above.
    Buffer dwb(size_t(l.out) * l.in * 2);
    TT_CUDA_ASSERT(cudaMemset(dwb.p, 0, dwb.bytes));
    LtCall db = d;
    db.d = dwb.p;
    db.d_type = CUDA_R_16BF;
    survey(lt, o, (std::string(l.name) + " dW bf16").c_str(), db, dwb.bytes, [&] {
      tt::cuda::gemm_rm(cublas, true, false, l.out, l.in, N, 1.0f, dout.p, CUDA_R_16BF, l.out, inp.p, l.in, 0.0f,
                        dwb.p, CUDA_R_16BF, l.in);
    });
  }
}

int parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--tokens") o.tokens = std::atoi(argv[i + 1]);
    else if (k == "--width") o.width = std::atoi(argv[i + 1]);
    else if (k == "--candidates") o.candidates = std::atoi(argv[i + 1]);
    else if (k == "--reps") o.reps = std::atoi(argv[i + 1]);
    else if (k == "--ffn") o.ffn = std::atoi(argv[i + 1]);
    else if (k == "--qkv") o.qkv = std::atoi(argv[i + 1]);
    else if (k == "--vocab") o.vocab = std::atoi(argv[i + 1]);
    else if (k == "--json") o.json = argv[i + 1];
    else if (k == "--dw-bf16") o.dw_bf16 = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "gemm_survey: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int rc = parse(argc, argv, o)) return rc;
  if (!o.json.empty()) {
    json_out = std::fopen(o.json.c_str(), "w");
    if (!json_out) {
      std::fprintf(stderr, "gemm_survey: cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::fprintf(json_out, "{\"tokens\": %d, \"width\": %d, \"rows\": [", o.tokens, o.width);
  }
  const int N = o.tokens, C = o.width;
  constexpr size_t kWorkspace = size_t(32) << 20;  // the backend's cuBLAS workspace (kCublasWorkspaceBytes)
  Buffer ws(kWorkspace);
  LtGemm lt;
  if (!lt.init(ws.p, kWorkspace).is_ok()) return 1;
  cublasHandle_t cublas = nullptr;
  TT_CUBLAS_ASSERT(cublasCreate(&cublas));
  TT_CUBLAS_ASSERT(cublasSetWorkspace(cublas, ws.p, kWorkspace));
  const size_t scratch_bytes = size_t(64) << 20;
  Buffer scratch_buf(scratch_bytes);
  const tt::cuda::Scratch scratch{scratch_buf.p, scratch_bytes};
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gemm_survey: %s, N %d, C %d, %d candidates, %d reps\n", prop.name, N, C, o.candidates, o.reps);
  if (o.ffn > 0) {
    survey_llama(lt, cublas, o);
    if (json_out) {
      std::fprintf(json_out, "\n]}\n");
      std::fclose(json_out);
    }
    cublasDestroy(cublas);
    return 0;
  }

  // The four Linear layers of a block: (name, in, out); fc's output goes through GELU.
  struct Layer {
    const char* name;
    int in, out;
    bool gelu;
  };
  const Layer layers[] = {{"qkv", C, 3 * C, false}, {"attn.proj", C, C, false}, {"fc", C, 4 * C, true},
                          {"proj", 4 * C, C, false}};
  uint32_t seed = 1;
  for (const Layer& l : layers) {
    const size_t in_bytes = size_t(N) * l.in * 2, out_bytes = size_t(N) * l.out * 2, w_bytes = size_t(l.out) * l.in * 2;
    Buffer inp(in_bytes), w(w_bytes), bias(size_t(l.out) * 2), out(out_bytes), aux(out_bytes), dout(out_bytes),
        dinp(in_bytes), dw(size_t(l.out) * l.in * 4), dbias(size_t(l.out) * 4), dbias_sum(size_t(l.out) * 4);
    fill(inp.p, in_bytes, seed++);
    fill(w.p, w_bytes, seed++, 0.02f);
    fill(bias.p, bias.bytes, seed++, 0.02f);
    fill(dout.p, out_bytes, seed++, 0.01f);
    fill(dinp.p, in_bytes, seed++, 0.01f);
    TT_CUDA_ASSERT(cudaMemset(dw.p, 0, dw.bytes));
    std::printf("%s: [%d, %d] x [%d, %d]^T\n", l.name, N, l.in, l.out, l.in);

    // Forward: out = inp w^T + bias (GELU with the pre-activation in aux for fc), cuBLASLt's epilogue today.
    LtCall f;
    f.trans_b = true;
    f.m = N, f.n = l.out, f.k = l.in;
    f.a = inp.p, f.lda = l.in, f.b = w.p, f.ldb = l.in, f.d = out.p, f.ldd = l.out;
    f.epilogue = l.gelu ? Epilogue::kGeluAuxBias : Epilogue::kBias;
    f.bias = bias.p;
    if (l.gelu) f.aux = aux.p, f.ld_aux = l.out;
    std::string fname = std::string(l.name) + " forward";
    survey(lt, o, fname.c_str(), f, out_bytes, [&] { lt.matmul(nullptr, f); });

    // Backward, dinp += dout w (cublasGemmEx today), or for proj (whose input is GELU's output) dpre = (dout w) *
    // gelu'(pre) in cuBLASLt's DGELU epilogue.
    if (std::strcmp(l.name, "proj") == 0) {
      LtCall g;
      g.m = N, g.n = l.in, g.k = l.out;
      g.a = dout.p, g.lda = l.out, g.b = w.p, g.ldb = l.in, g.d = dinp.p, g.ldd = l.in;
      g.epilogue = Epilogue::kDGelu;
      Buffer pre(in_bytes);
      fill(pre.p, in_bytes, seed++);
      g.aux = pre.p, g.ld_aux = l.in;
      survey(lt, o, "proj dgelu", g, in_bytes, [&] { lt.matmul(nullptr, g); });
      // fc's bias gradient (the column sums of dpre) in the same epilogue, and the column sums it would replace.
      Buffer fc_dbias(size_t(l.in) * 4);
      const double sums_ms = time_ms(o.reps, [&] {
        tt::cuda::column_sums<__nv_bfloat16>(nullptr, scratch, static_cast<float*>(fc_dbias.p),
                                             static_cast<const __nv_bfloat16*>(dinp.p), N, l.in, true);
      });
      row("fc dbias (of dpre)", "column_sums today", -1, sums_ms, 0.0, -1, "");
      for (const cudaDataType_t bt : {CUDA_R_32F, CUDA_R_16BF}) {
        LtCall gb = g;
        gb.epilogue = Epilogue::kDGeluBiasGrad;
        gb.bias = fc_dbias.p;
        gb.bias_type = bt;
        const auto algos = lt.algorithms(gb, o.candidates);
        const char* path = bt == CUDA_R_32F ? "DGELU_BGRAD, f32 bias" : "DGELU_BGRAD, bf16 bias";
        if (algos.empty()) std::printf("  proj dgelu: no cuBLASLt algorithm for %s\n", path);
        for (size_t i = 0; i < algos.size(); ++i)
          row("proj dgelu+fc dbias", path, static_cast<int>(i),
              time_ms(o.reps, [&] { lt.run(nullptr, gb, algos[i]); }), 2.0 * g.m * g.n * g.k, -1, "");
      }
    } else {
      LtCall g;
      g.m = N, g.n = l.in, g.k = l.out;
      g.a = dout.p, g.lda = l.out, g.b = w.p, g.ldb = l.in, g.d = dinp.p, g.ldd = l.in, g.beta = 1.0f;
      std::string gname = std::string(l.name) + " dinp";
      survey(lt, o, gname.c_str(), g, in_bytes, [&] {
        tt::cuda::gemm_rm(cublas, false, false, N, l.in, l.out, 1.0f, dout.p, CUDA_R_16BF, l.out, w.p, l.in, 1.0f,
                          dinp.p, CUDA_R_16BF, l.in);
      });
    }
    // dW += dout^T inp in fp32 (cublasGemmEx today), then dbias += column sums of dout (our kernel).
    LtCall g;
    g.trans_a = true;
    g.m = l.out, g.n = l.in, g.k = N;
    g.a = dout.p, g.lda = l.out, g.b = inp.p, g.ldb = l.in, g.d = dw.p, g.ldd = l.in, g.beta = 1.0f;
    g.d_type = CUDA_R_32F;
    std::string wname = std::string(l.name) + " dW";
    survey(lt, o, wname.c_str(), g, dw.bytes, [&] {
      tt::cuda::gemm_rm(cublas, true, false, l.out, l.in, N, 1.0f, dout.p, CUDA_R_16BF, l.out, inp.p, l.in, 1.0f,
                        dw.p, CUDA_R_32F, l.in);
    });
    const double sums_ms = time_ms(o.reps, [&] {
      tt::cuda::column_sums<__nv_bfloat16>(nullptr, scratch, static_cast<float*>(dbias_sum.p),
                                           static_cast<const __nv_bfloat16*>(dout.p), N, l.out, true);
    });
    row((std::string(l.name) + " dbias").c_str(), "column_sums today", -1, sums_ms, 0.0, -1, "");
    // The same dW with the bias gradient in the epilogue (written to dbias; f32).
    g.epilogue = Epilogue::kBiasGradA;
    g.bias = dbias.p;
    g.bias_type = CUDA_R_32F;
    const auto algos = lt.algorithms(g, o.candidates);
    if (algos.empty()) std::printf("  %s: no cuBLASLt algorithm with the bias gradient in the epilogue\n", l.name);
    for (size_t i = 0; i < algos.size(); ++i) {
      const double ms = time_ms(o.reps, [&] { lt.run(nullptr, g, algos[i]); });
      row((std::string(l.name) + " dW+dbias").c_str(), "cublasLt BGRAD epilogue", static_cast<int>(i), ms,
          2.0 * g.m * g.n * g.k, -1, "");
    }
    if (!algos.empty()) {
      // The epilogue's bias gradient against the column sums, once (both from the same dout; not bitwise: another
      // order of summation).
      TT_CUDA_ASSERT(cudaMemset(dbias_sum.p, 0, dbias_sum.bytes));
      tt::cuda::column_sums<__nv_bfloat16>(nullptr, scratch, static_cast<float*>(dbias_sum.p),
                                           static_cast<const __nv_bfloat16*>(dout.p), N, l.out, true);
      lt.run(nullptr, g, algos[0]);
      std::vector<float> x(l.out), y(l.out);
      TT_CUDA_ASSERT(cudaMemcpy(x.data(), dbias.p, dbias.bytes, cudaMemcpyDeviceToHost));
      TT_CUDA_ASSERT(cudaMemcpy(y.data(), dbias_sum.p, dbias_sum.bytes, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int i = 0; i < l.out; ++i) worst = std::max(worst, double(std::abs(x[i] - y[i])) / (std::abs(y[i]) + 1e-3));
      std::printf("  %s dbias: epilogue against column sums, worst relative difference %.3g\n", l.name, worst);
    }
  }

  // The LayerNorm backward at [N, C]: the two-pass kernels against the one-pass kernel (Note [one-pass LayerNorm
  // backward] in src/backend/cuda/kernels_layernorm.cu), times and the largest differences of their results.
  {
    using tt::cuda::bf16;
    const size_t bytes = size_t(N) * C * 2;
    Buffer dinp0(bytes), dinp(bytes), dout(bytes), inp(bytes), w(size_t(C) * 2), mean(size_t(N) * 4),
        rstd(size_t(N) * 4), dw(size_t(C) * 4), db(size_t(C) * 4), dw1(size_t(C) * 4), db1(size_t(C) * 4), out(bytes),
        b(size_t(C) * 2);
    fill(dout.p, bytes, seed++, 0.01f);
    fill(inp.p, bytes, seed++);
    fill(w.p, w.bytes, seed++);
    fill(b.p, b.bytes, seed++);
    fill(dinp0.p, bytes, seed++, 0.01f);
    tt::cuda::layernorm_forward<bf16>(nullptr, static_cast<bf16*>(out.p), static_cast<float*>(mean.p),
                                      static_cast<float*>(rstd.p), static_cast<const bf16*>(inp.p),
                                      static_cast<const bf16*>(w.p), static_cast<const bf16*>(b.p), N, C);
    const auto two_pass = [&](void* di, void* dwp, void* dbp) {
      tt::cuda::layernorm_backward_two_pass<bf16>(
          nullptr, scratch, static_cast<bf16*>(di), static_cast<float*>(dwp), static_cast<float*>(dbp),
          static_cast<const bf16*>(dout.p), static_cast<const bf16*>(inp.p), static_cast<const bf16*>(w.p),
          static_cast<const float*>(mean.p), static_cast<const float*>(rstd.p), N, C, true);
    };
    const auto one_pass = [&](void* di, void* dwp, void* dbp) {
      tt::cuda::layernorm_backward<bf16>(nullptr, scratch, static_cast<bf16*>(di), static_cast<float*>(dwp),
                                         static_cast<float*>(dbp), static_cast<const bf16*>(dout.p),
                                         static_cast<const bf16*>(inp.p), static_cast<const bf16*>(w.p),
                                         static_cast<const float*>(mean.p), static_cast<const float*>(rstd.p), N, C,
                                         true);
    };
    // Results once from the same state.
    TT_CUDA_ASSERT(cudaMemcpy(dinp.p, dinp0.p, bytes, cudaMemcpyDeviceToDevice));
    TT_CUDA_ASSERT(cudaMemset(dw.p, 0, dw.bytes));
    TT_CUDA_ASSERT(cudaMemset(db.p, 0, db.bytes));
    two_pass(dinp.p, dw.p, db.p);
    std::vector<bf16> x(size_t(N) * C), y(size_t(N) * C);
    TT_CUDA_ASSERT(cudaMemcpy(x.data(), dinp.p, bytes, cudaMemcpyDeviceToHost));
    TT_CUDA_ASSERT(cudaMemcpy(dinp.p, dinp0.p, bytes, cudaMemcpyDeviceToDevice));
    TT_CUDA_ASSERT(cudaMemset(dw1.p, 0, dw1.bytes));
    TT_CUDA_ASSERT(cudaMemset(db1.p, 0, db1.bytes));
    one_pass(dinp.p, dw1.p, db1.p);
    TT_CUDA_ASSERT(cudaMemcpy(y.data(), dinp.p, bytes, cudaMemcpyDeviceToHost));
    double worst_dinp = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double a = __bfloat162float(x[i]), c = __bfloat162float(y[i]);
      worst_dinp = std::max(worst_dinp, std::abs(a - c));
      scale = std::max(scale, std::abs(a));
    }
    std::vector<float> w0(C), w1(C), b0(C), b1(C);
    TT_CUDA_ASSERT(cudaMemcpy(w0.data(), dw.p, dw.bytes, cudaMemcpyDeviceToHost));
    TT_CUDA_ASSERT(cudaMemcpy(w1.data(), dw1.p, dw.bytes, cudaMemcpyDeviceToHost));
    TT_CUDA_ASSERT(cudaMemcpy(b0.data(), db.p, db.bytes, cudaMemcpyDeviceToHost));
    TT_CUDA_ASSERT(cudaMemcpy(b1.data(), db1.p, db.bytes, cudaMemcpyDeviceToHost));
    double worst_w = 0, worst_b = 0;
    for (int i = 0; i < C; ++i) {
      worst_w = std::max(worst_w, double(std::abs(w0[i] - w1[i])) / (std::abs(w0[i]) + 1e-3));
      worst_b = std::max(worst_b, double(std::abs(b0[i] - b1[i])) / (std::abs(b0[i]) + 1e-3));
    }
    const double ms2 = time_ms(o.reps, [&] { two_pass(dinp.p, dw.p, db.p); });
    const double ms1 = time_ms(o.reps, [&] { one_pass(dinp.p, dw.p, db.p); });
    // Bytes it must move at least: dout and inp read, dinp read and written.
    const double must = 4.0 * bytes;
    std::printf("layernorm_backward [%d, %d]: two-pass %.3f ms (%.0f GB/s of the 8 bytes an element it must move), "
                "one-pass %.3f ms (%.0f GB/s); dinp differs by at most %.3g (largest |dinp| %.3g), dw by %.3g, db by "
                "%.3g relative\n",
                N, C, ms2, must / (ms2 * 1e-3) * 1e-9, ms1, must / (ms1 * 1e-3) * 1e-9, worst_dinp, scale, worst_w,
                worst_b);
    if (json_out)
      std::fprintf(json_out,
                   ",\n  {\"gemm\": \"layernorm_backward\", \"two_pass_ms\": %.4f, \"one_pass_ms\": %.4f, "
                   "\"dinp_max_abs_diff\": %.4g, \"dw_max_rel_diff\": %.4g, \"db_max_rel_diff\": %.4g}",
                   ms2, ms1, worst_dinp, worst_w, worst_b);
  }
  if (json_out) {
    std::fprintf(json_out, "\n]}\n");
    std::fclose(json_out);
  }
  cublasDestroy(cublas);
  return 0;
}
