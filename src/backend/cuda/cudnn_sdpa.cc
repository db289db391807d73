#include "backend/cuda/cudnn_sdpa.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/units.h"

namespace tt::cudnn {

int64_t workspace_bytes_for(const SdpaDims& d, int64_t cap, bool deterministic) {
  const int64_t b = backward_chunk(d, cap, deterministic);
  return b == 0 ? 0 : sdpa_backward_workspace_bound({b, d.T, d.H, d.hs, d.KV}, deterministic);
}

bool sdpa_takes(int64_t version, int64_t T, int64_t hs) {
  return (hs == 64 || hs == 128) && T >= 2 && (version >= 91600 || T % 128 == 0);
}

int64_t backward_chunk(const SdpaDims& d, int64_t bytes, bool deterministic) {
  const int64_t B = d.B, T = d.T, H = d.H;
  // The largest divisor of B whose bound fits: every chunk then has the same shape and one plan. A chunk smaller
  // than the batch moves the lse and Dsum pointers by b*H*T floats, which must keep them 16-byte aligned (the plans
  // declare 16): b*H*T a multiple of 4.
  for (int64_t b = B; b >= 1; --b)
    if (B % b == 0 && (b == B || (b * H * T) % 4 == 0) &&
        sdpa_backward_workspace_bound({b, T, H, d.hs, d.KV}, deterministic) <= bytes)
      return b;
  return 0;
}

// One execution plan and every descriptor it was built from (kept alive with it), destroyed in reverse order.
struct CudnnSdpa::Plan {
  explicit Plan(const Api& api) : api(api) {}
  ~Plan() {
    if (plan) api.destroy_descriptor(plan);
    for (auto it = descs.rbegin(); it != descs.rend(); ++it) api.destroy_descriptor(*it);
  }
  const Api& api;
  std::vector<Desc> descs;
  Desc plan = nullptr;
  int64_t workspace = 0;
  int64_t engine = -1;  // the engine's global index, for the log
};

namespace {

Status fail(const Api& api, Code rc, const char* what) {
  char last[512] = {};
  api.get_last_error_string(last, sizeof(last));
  return make_status(StatusCode::kInternal, "cuDNN %s: %s (%d)%s%s", what, api.get_error_string(rc), rc,
                     last[0] ? ": " : "", last);
}

#define TT_CUDNN_TRY(api, expr)                         \
  do {                                                  \
    const ::tt::cudnn::Code rc_ = (expr);               \
    if (rc_ != ::tt::cudnn::kSuccess) return fail(api, rc_, #expr); \
  } while (0)

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

Result<std::unique_ptr<CudnnSdpa>> CudnnSdpa::create(const Library* lib, void* stream, void* workspace,
                                                     int64_t workspace_bytes, bool strict, bool deterministic) {
  // Note [non-deterministic backward]: before 9.6 the caller cleared the d(q) accumulator; we leave that form to 9.6+.
  TT_RETURN_IF(!deterministic && lib->version < 90600, kFailedPrecondition,
               "attention_deterministic=false needs cuDNN 9.6 or later (this one is %s)", lib->describe().c_str());
  const Api& api = lib->api;
  Handle h = nullptr;
  TT_CUDNN_TRY(api, api.create(&h));
  const Code rc = api.set_stream(h, stream);
  if (rc != kSuccess) {
    api.destroy(h);
    return fail(api, rc, "cudnnSetStream");
  }
  return std::unique_ptr<CudnnSdpa>(new CudnnSdpa(lib, h, workspace, workspace_bytes, strict, deterministic));
}

CudnnSdpa::~CudnnSdpa() {
  shapes_.clear();  // plans before the handle
  retired_.clear();
  if (handle_) lib_->api.destroy(handle_);
}

Result<std::shared_ptr<CudnnSdpa::Plan>> CudnnSdpa::build(const SdpaGraph& g, const char* what) {
  const Api& api = lib_->api;
  auto p = std::make_shared<Plan>(api);
  auto make = [&](DescType type) -> Result<Desc> {
    Desc d = nullptr;
    TT_CUDNN_TRY(api, api.create_descriptor(type, &d));
    p->descs.push_back(d);
    return d;
  };
  auto set = [&](Desc d, Attr a, AttrType t, int64_t n, const void* v) { return api.set_attribute(d, a, t, n, v); };
  std::map<int64_t, Desc> tensor;
  for (const SdpaTensor& t : g.tensors) {
    TT_ASSIGN_OR_RETURN(Desc d, make(kTensorDescriptor));
    const int dt = t.dtype;
    const int64_t align = 16;
    TT_CUDNN_TRY(api, set(d, kTensorDataType, kTypeDataType, 1, &dt));
    TT_CUDNN_TRY(api, set(d, kTensorDimensions, kTypeInt64, 4, t.dims.data()));
    TT_CUDNN_TRY(api, set(d, kTensorStrides, kTypeInt64, 4, t.strides.data()));
    TT_CUDNN_TRY(api, set(d, kTensorUniqueId, kTypeInt64, 1, &t.uid));
    TT_CUDNN_TRY(api, set(d, kTensorByteAlignment, kTypeInt64, 1, &align));
    const bool is_virtual = t.is_virtual, by_value = t.by_value;
    TT_CUDNN_TRY(api, set(d, kTensorIsVirtual, kTypeBoolean, 1, &is_virtual));
    if (by_value) TT_CUDNN_TRY(api, set(d, kTensorIsByValue, kTypeBoolean, 1, &by_value));
    TT_CUDNN_TRY(api, api.finalize(d));
    tensor[t.uid] = d;
  }
  std::vector<Desc> ops;
  for (const SdpaOp& op : g.ops) {
    Desc x = tensor.at(op.x), y = tensor.at(op.y);
    const int prec = op.prec;
    Desc o = nullptr;
    switch (op.kind) {
      case SdpaOpKind::kMatmul: {
        TT_ASSIGN_OR_RETURN(Desc m, make(kMatmulDescriptor));
        TT_CUDNN_TRY(api, set(m, kMatmulCompType, kTypeDataType, 1, &prec));
        TT_CUDNN_TRY(api, api.finalize(m));
        TT_ASSIGN_OR_RETURN(o, make(kOperationMatmulDescriptor));
        Desc b = tensor.at(op.b);
        TT_CUDNN_TRY(api, set(o, kOperationMatmulADesc, kTypeBackendDescriptor, 1, &x));
        TT_CUDNN_TRY(api, set(o, kOperationMatmulBDesc, kTypeBackendDescriptor, 1, &b));
        TT_CUDNN_TRY(api, set(o, kOperationMatmulCDesc, kTypeBackendDescriptor, 1, &y));
        TT_CUDNN_TRY(api, set(o, kOperationMatmulDesc, kTypeBackendDescriptor, 1, &m));
        break;
      }
      case SdpaOpKind::kPointwise: {
        TT_ASSIGN_OR_RETURN(Desc pw, make(kPointwiseDescriptor));
        const int mode = op.mode;
        TT_CUDNN_TRY(api, set(pw, kPointwiseMode, kTypePointwiseMode, 1, &mode));
        TT_CUDNN_TRY(api, set(pw, kPointwiseMathPrec, kTypeDataType, 1, &prec));
        if (op.mode == kPwGenIndex) TT_CUDNN_TRY(api, set(pw, kPointwiseAxis, kTypeInt64, 1, &op.axis));
        TT_CUDNN_TRY(api, api.finalize(pw));
        TT_ASSIGN_OR_RETURN(o, make(kOperationPointwiseDescriptor));
        TT_CUDNN_TRY(api, set(o, kOperationPointwisePwDescriptor, kTypeBackendDescriptor, 1, &pw));
        TT_CUDNN_TRY(api, set(o, kOperationPointwiseXDesc, kTypeBackendDescriptor, 1, &x));
        if (op.b != 0) {
          Desc b = tensor.at(op.b);
          TT_CUDNN_TRY(api, set(o, kOperationPointwiseBDesc, kTypeBackendDescriptor, 1, &b));
        }
        if (op.t != 0) {
          Desc t = tensor.at(op.t);
          TT_CUDNN_TRY(api, set(o, kOperationPointwiseTDesc, kTypeBackendDescriptor, 1, &t));
        }
        TT_CUDNN_TRY(api, set(o, kOperationPointwiseYDesc, kTypeBackendDescriptor, 1, &y));
        break;
      }
      case SdpaOpKind::kReduction: {
        TT_ASSIGN_OR_RETURN(Desc r, make(kReductionDescriptor));
        const int reduce = op.reduce;
        TT_CUDNN_TRY(api, set(r, kReductionOperator, kTypeReductionOperator, 1, &reduce));
        TT_CUDNN_TRY(api, set(r, kReductionCompType, kTypeDataType, 1, &prec));
        TT_CUDNN_TRY(api, api.finalize(r));
        TT_ASSIGN_OR_RETURN(o, make(kOperationReductionDescriptor));
        TT_CUDNN_TRY(api, set(o, kOperationReductionXDesc, kTypeBackendDescriptor, 1, &x));
        TT_CUDNN_TRY(api, set(o, kOperationReductionYDesc, kTypeBackendDescriptor, 1, &y));
        TT_CUDNN_TRY(api, set(o, kOperationReductionDesc, kTypeBackendDescriptor, 1, &r));
        break;
      }
      case SdpaOpKind::kReshape: {
        TT_ASSIGN_OR_RETURN(o, make(kOperationReshapeDescriptor));
        TT_CUDNN_TRY(api, set(o, kOperationReshapeXDesc, kTypeBackendDescriptor, 1, &x));
        TT_CUDNN_TRY(api, set(o, kOperationReshapeYDesc, kTypeBackendDescriptor, 1, &y));
        break;
      }
    }
    TT_CUDNN_TRY(api, api.finalize(o));
    ops.push_back(o);
  }
  TT_ASSIGN_OR_RETURN(Desc graph, make(kOperationGraphDescriptor));
  TT_CUDNN_TRY(api, set(graph, kOperationGraphHandle, kTypeHandle, 1, &handle_));
  TT_CUDNN_TRY(api, set(graph, kOperationGraphOps, kTypeBackendDescriptor, static_cast<int64_t>(ops.size()),
                        ops.data()));
  TT_CUDNN_TRY(api, api.finalize(graph));
  TT_ASSIGN_OR_RETURN(Desc heur, make(kEngineHeurDescriptor));
  const int mode = kHeurModeA;
  TT_CUDNN_TRY(api, set(heur, kEngineHeurOperationGraph, kTypeBackendDescriptor, 1, &graph));
  TT_CUDNN_TRY(api, set(heur, kEngineHeurMode, kTypeHeurMode, 1, &mode));
  TT_CUDNN_TRY(api, api.finalize(heur));
  int64_t count = 0;
  TT_CUDNN_TRY(api, api.get_attribute(heur, kEngineHeurResults, kTypeBackendDescriptor, 0, &count, nullptr));
  TT_RETURN_IF(count <= 0, kUnimplemented, "cuDNN: heuristics offer no engine for the %s graph", what);
  std::vector<Desc> cfgs;
  for (int64_t i = 0; i < count; ++i) {
    TT_ASSIGN_OR_RETURN(Desc c, make(kEngineCfgDescriptor));
    cfgs.push_back(c);
  }
  int64_t got = 0;
  TT_CUDNN_TRY(api, api.get_attribute(heur, kEngineHeurResults, kTypeBackendDescriptor, count, &got, cfgs.data()));
  std::string refused;
  for (int64_t i = 0; i < got; ++i) {
    Desc plan = nullptr;
    TT_CUDNN_TRY(api, api.create_descriptor(kExecutionPlanDescriptor, &plan));
    Code rc = set(plan, kExecutionPlanHandle, kTypeHandle, 1, &handle_);
    if (rc == kSuccess) rc = set(plan, kExecutionPlanEngineConfig, kTypeBackendDescriptor, 1, &cfgs[i]);
    if (rc == kSuccess) rc = api.finalize(plan);
    if (rc != kSuccess) {
      refused += str_format("%sconfig %lld: %s", refused.empty() ? "" : "; ", static_cast<long long>(i),
                            fail(api, rc, "plan").to_string().c_str());
      api.destroy_descriptor(plan);
      continue;
    }
    p->plan = plan;
    int64_t n = 0;
    TT_CUDNN_TRY(api, api.get_attribute(plan, kExecutionPlanWorkspaceSize, kTypeInt64, 1, &n, &p->workspace));
    // The engine's global index, for the log only: failures to read it are ignored.
    Desc engine = nullptr;
    if (api.create_descriptor(kEngineDescriptor, &engine) == kSuccess) {
      p->descs.push_back(engine);
      if (api.get_attribute(cfgs[i], kEngineCfgEngine, kTypeBackendDescriptor, 1, &n, &engine) == kSuccess)
        (void)api.get_attribute(engine, kEngineGlobalIndex, kTypeInt64, 1, &n, &p->engine);
    }
    TT_LOG(INFO, PERF, "cuDNN %s plan: heuristics config %lld of %lld, engine %lld, workspace %s", what,
           static_cast<long long>(i), static_cast<long long>(got), static_cast<long long>(p->engine),
           format_bytes(p->workspace).c_str());
    return p;
  }
  return make_status(StatusCode::kUnimplemented, "cuDNN: none of the %lld engine configs builds the %s graph: %s",
                     static_cast<long long>(got), what, refused.c_str());
}

const CudnnSdpa::Shape& CudnnSdpa::shape(const SdpaDims& d) {
  const auto key = std::make_tuple(d.B, d.T, d.H, d.hs, d.kv());
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return it->second;
  Shape& s = shapes_[key];
  const std::string name = str_format("B %lld T %lld H %lld KV %lld hs %lld", static_cast<long long>(d.B),
                                      static_cast<long long>(d.T), static_cast<long long>(d.H),
                                      static_cast<long long>(d.kv()), static_cast<long long>(d.hs));
  // What cuDNN takes at all (design note §5.3); outside it our kernels run, in strict mode too.
  if (!sdpa_takes(lib_->version, d.T, d.hs)) {
    TT_LOG(INFO, PERF, "attention %s: our kernels (cuDNN is used for head size 64, 128 and T >= 2 only)",
           name.c_str());
    return s;
  }
  auto refuse = [&](const std::string& why) -> const Shape& {
    TT_CHECK(!strict_, "attention_impl=cudnn: attention %s: %s", name.c_str(), why.c_str());
    TT_LOG(WARN, PERF, "attention %s runs on our kernels: %s", name.c_str(), why.c_str());
    s = Shape{};
    return s;
  };
  s.chunk = backward_chunk(d, ws_bytes_, deterministic_);
  if (s.chunk == 0)
    return refuse(str_format("the cuDNN workspace reserved (%s) holds not even one sequence's backward (%s); raise "
                             "attention_workspace",
                             format_bytes(ws_bytes_).c_str(),
                             format_bytes(sdpa_backward_workspace_bound({1, d.T, d.H, d.hs, d.KV}, deterministic_))
                                 .c_str()));
  const SdpaDims chunk{s.chunk, d.T, d.H, d.hs, d.KV};
  // Note [non-deterministic backward]: the d(q) accumulator first, cuDNN's own workspace after it.
  s.dq_acc = deterministic_ ? 0 : sdpa_dq_accumulator_bytes(chunk);
  auto fwd = build(sdpa_forward_graph(d), "forward");
  if (!fwd.is_ok()) return refuse(fwd.status().to_string());
  auto bwd = build(sdpa_backward_graph(chunk, deterministic_),
                   deterministic_ ? "backward" : "backward (non-deterministic)");
  if (!bwd.is_ok()) return refuse(bwd.status().to_string());
  if (fwd.value()->workspace > ws_bytes_ || s.dq_acc + bwd.value()->workspace > ws_bytes_)
    return refuse(str_format("the plans need %s and %s of workspace, %s is reserved",
                             format_bytes(fwd.value()->workspace).c_str(),
                             format_bytes(s.dq_acc + bwd.value()->workspace).c_str(), format_bytes(ws_bytes_).c_str()));
  s.fwd = fwd.value();
  s.bwd = bwd.value();
  s.usable = true;
  TT_LOG(INFO, PERF, "attention %s: %s, backward in chunks of %lld sequences%s", name.c_str(),
         lib_->describe().c_str(), static_cast<long long>(s.chunk),
         deterministic_ ? "" : ", non-deterministic (d(q) accumulated in fp32)");
  return s;
}

void CudnnSdpa::retire(const SdpaDims& d) {
  // The shape's plans may still run on the stream (chunks enqueued before the one that failed): kept until the
  // object goes, never destroyed under the GPU's feet.
  Shape& s = shapes_[std::make_tuple(d.B, d.T, d.H, d.hs, d.kv())];
  if (s.fwd) retired_.push_back(std::move(s.fwd));
  if (s.bwd) retired_.push_back(std::move(s.bwd));
  s = Shape{};
}

namespace {

Status execute(const Api& api, Handle h, Desc plan, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
               void* ws) {
  Desc pack = nullptr;
  TT_CUDNN_TRY(api, api.create_descriptor(kVariantPackDescriptor, &pack));
  Code rc = api.set_attribute(pack, kVariantPackUniqueIds, kTypeInt64, static_cast<int64_t>(uids.size()), uids.data());
  if (rc == kSuccess)
    rc = api.set_attribute(pack, kVariantPackDataPointers, kTypeVoidPtr, static_cast<int64_t>(ptrs.size()),
                           ptrs.data());
  if (rc == kSuccess) rc = api.set_attribute(pack, kVariantPackWorkspace, kTypeVoidPtr, 1, &ws);
  if (rc == kSuccess) rc = api.finalize(pack);
  if (rc == kSuccess) rc = api.execute(h, plan, pack);
  api.destroy_descriptor(pack);
  if (rc != kSuccess) return fail(api, rc, "execute");
  return Status::ok();
}

}  // namespace

bool CudnnSdpa::forward(const SdpaDims& d, void* out, float* lse, const void* qkv) {
  if (!aligned(out) || !aligned(lse) || !aligned(qkv) || d.C() % 8 != 0 || d.hs % 8 != 0) return false;
  const Shape& s = shape(d);
  if (!s.usable) return false;
  auto* q = static_cast<char*>(const_cast<void*>(qkv));
  // Byte offsets of k and v in a row of qkv (Note [sdpa layout]).
  const int64_t k_at = d.C() * 2, v_at = k_at + d.kv() * d.hs * 2;
  float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  float neg = lib_->version >= 91000 ? -std::numeric_limits<float>::infinity() : -FLT_MAX;
  const Status st = execute(lib_->api, handle_, s.fwd->plan,
                            {kUidQ, kUidK, kUidV, kUidO, kUidStats, kUidScale, kUidNegInf},
                            {q, q + k_at, q + v_at, out, lse, &scale, &neg}, ws_);
  if (!st.is_ok()) {
    TT_CHECK(!strict_, "attention_impl=cudnn: %s", st.to_string().c_str());
    TT_LOG(WARN, PERF, "attention forward falls back to our kernels: %s", st.to_string().c_str());
    retire(d);
    return false;
  }
  ++forward_calls_;
  return true;
}

bool CudnnSdpa::backward(const SdpaDims& d, void* dqkv, const void* dout, const void* qkv, const void* out,
                         const float* lse, float* dsum) {
  if (!aligned(dqkv) || !aligned(dout) || !aligned(qkv) || !aligned(out) || !aligned(lse) || !aligned(dsum) ||
      d.C() % 8 != 0 || d.hs % 8 != 0)
    return false;
  const Shape& s = shape(d);
  if (!s.usable) return false;
  const int64_t c = d.C() * 2, row = d.Cq() * 2;  // bytes of C bf16 values, of a row of qkv
  const int64_t k_at = c, v_at = c + d.kv() * d.hs * 2;
  float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  float neg = lib_->version >= 91000 ? -std::numeric_limits<float>::infinity() : -FLT_MAX;
  float one = 1.0f;
  for (int64_t b0 = 0; b0 < d.B; b0 += s.chunk) {
    auto* q = static_cast<char*>(const_cast<void*>(qkv)) + b0 * d.T * row;
    auto* g = static_cast<char*>(dqkv) + b0 * d.T * row;
    auto* o = static_cast<char*>(const_cast<void*>(out)) + b0 * d.T * c;
    auto* go = static_cast<char*>(const_cast<void*>(dout)) + b0 * d.T * c;
    auto* l = const_cast<float*>(lse) + b0 * d.H * d.T;
    float* ds = dsum + b0 * d.H * d.T;
    std::vector<int64_t> uids = {kUidQ,  kUidK,    kUidV,     kUidO,   kUidDO,   kUidStats, kUidDQ,
                                 kUidDK, kUidDV,   kUidDsum,  kUidScale, kUidOne, kUidNegInf};
    std::vector<void*> ptrs = {q, q + k_at, q + v_at, o, go, l, g, g + k_at, g + v_at, ds, &scale, &one, &neg};
    void* ws = ws_;
    if (s.dq_acc > 0) {  // Note [non-deterministic backward]
      uids.push_back(kUidDQAcc);
      ptrs.push_back(ws_);
      ws = static_cast<char*>(ws_) + s.dq_acc;
    }
    const Status st = execute(lib_->api, handle_, s.bwd->plan, uids, ptrs, ws);
    if (!st.is_ok()) {
      TT_CHECK(!strict_, "attention_impl=cudnn: %s", st.to_string().c_str());
      TT_LOG(WARN, PERF, "attention backward falls back to our kernels: %s", st.to_string().c_str());
      retire(d);
      return false;
    }
  }
  ++backward_calls_;
  return true;
}

}  // namespace tt::cudnn
