// Shared helpers of the tests that link the executor (tt_exec): a GPT placed by an executor, and test_util.h.
#pragma once

#include <memory>
#include <utility>

#include "exec/executor.h"
#include "test_util.h"

namespace tt::testing {

// A GPT placed by an executor: all resident with the optimizer on the device unless `spec` says otherwise (its
// model, batch and dtype are set here).
inline Result<std::unique_ptr<Executor>> make_gpt(Backend& be, const ModelConfig& cfg, int batch, DType dtype,
                                                  ExecSpec spec = {}) {
  spec.model = cfg;
  spec.batch = batch;
  spec.compute = dtype;
  return Executor::create(be, std::move(spec));
}

}  // namespace tt::testing
