// Our cuDNN declarations (backend/cuda/cudnn_api.h) against cuDNN's own header: every constant we pass to the
// library equals the header's enumerator. Built only where CMake finds cudnn_graph.h (the GPU machine's cuDNN wheel);
// the checks are at compile time, the test binary only reports the header's version.
#include <cudnn_graph.h>
#include <cudnn_version.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "backend/cuda/cudnn_api.h"

namespace tt::cudnn {
namespace {

// Our declarations are of cuDNN 9 (the loader takes 9.x only); another major version's header is not compared.
#if CUDNN_MAJOR == 9
static_assert(static_cast<int>(kPointwiseDescriptor) == static_cast<int>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR), "kPointwiseDescriptor");
static_assert(static_cast<int>(kEngineDescriptor) == static_cast<int>(CUDNN_BACKEND_ENGINE_DESCRIPTOR), "kEngineDescriptor");
static_assert(static_cast<int>(kEngineCfgDescriptor) == static_cast<int>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR), "kEngineCfgDescriptor");
static_assert(static_cast<int>(kEngineHeurDescriptor) == static_cast<int>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), "kEngineHeurDescriptor");
static_assert(static_cast<int>(kExecutionPlanDescriptor) == static_cast<int>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), "kExecutionPlanDescriptor");
static_assert(static_cast<int>(kOperationPointwiseDescriptor) == static_cast<int>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR), "kOperationPointwiseDescriptor");
static_assert(static_cast<int>(kOperationGraphDescriptor) == static_cast<int>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR), "kOperationGraphDescriptor");
static_assert(static_cast<int>(kVariantPackDescriptor) == static_cast<int>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR), "kVariantPackDescriptor");
static_assert(static_cast<int>(kTensorDescriptor) == static_cast<int>(CUDNN_BACKEND_TENSOR_DESCRIPTOR), "kTensorDescriptor");
static_assert(static_cast<int>(kMatmulDescriptor) == static_cast<int>(CUDNN_BACKEND_MATMUL_DESCRIPTOR), "kMatmulDescriptor");
static_assert(static_cast<int>(kOperationMatmulDescriptor) == static_cast<int>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR), "kOperationMatmulDescriptor");
static_assert(static_cast<int>(kReductionDescriptor) == static_cast<int>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR), "kReductionDescriptor");
static_assert(static_cast<int>(kOperationReductionDescriptor) == static_cast<int>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR), "kOperationReductionDescriptor");
static_assert(static_cast<int>(kOperationReshapeDescriptor) == static_cast<int>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR), "kOperationReshapeDescriptor");
static_assert(static_cast<int>(kTypeHandle) == static_cast<int>(CUDNN_TYPE_HANDLE), "kTypeHandle");
static_assert(static_cast<int>(kTypeDataType) == static_cast<int>(CUDNN_TYPE_DATA_TYPE), "kTypeDataType");
static_assert(static_cast<int>(kTypeBoolean) == static_cast<int>(CUDNN_TYPE_BOOLEAN), "kTypeBoolean");
static_assert(static_cast<int>(kTypeInt64) == static_cast<int>(CUDNN_TYPE_INT64), "kTypeInt64");
static_assert(static_cast<int>(kTypeFloat) == static_cast<int>(CUDNN_TYPE_FLOAT), "kTypeFloat");
static_assert(static_cast<int>(kTypeVoidPtr) == static_cast<int>(CUDNN_TYPE_VOID_PTR), "kTypeVoidPtr");
static_assert(static_cast<int>(kTypeHeurMode) == static_cast<int>(CUDNN_TYPE_HEUR_MODE), "kTypeHeurMode");
static_assert(static_cast<int>(kTypePointwiseMode) == static_cast<int>(CUDNN_TYPE_POINTWISE_MODE), "kTypePointwiseMode");
static_assert(static_cast<int>(kTypeBackendDescriptor) == static_cast<int>(CUDNN_TYPE_BACKEND_DESCRIPTOR), "kTypeBackendDescriptor");
static_assert(static_cast<int>(kTypeReductionOperator) == static_cast<int>(CUDNN_TYPE_REDUCTION_OPERATOR_TYPE), "kTypeReductionOperator");
static_assert(static_cast<int>(kPointwiseMode) == static_cast<int>(CUDNN_ATTR_POINTWISE_MODE), "kPointwiseMode");
static_assert(static_cast<int>(kPointwiseMathPrec) == static_cast<int>(CUDNN_ATTR_POINTWISE_MATH_PREC), "kPointwiseMathPrec");
static_assert(static_cast<int>(kPointwiseAxis) == static_cast<int>(CUDNN_ATTR_POINTWISE_AXIS), "kPointwiseAxis");
static_assert(static_cast<int>(kEngineHeurMode) == static_cast<int>(CUDNN_ATTR_ENGINEHEUR_MODE), "kEngineHeurMode");
static_assert(static_cast<int>(kEngineHeurOperationGraph) == static_cast<int>(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), "kEngineHeurOperationGraph");
static_assert(static_cast<int>(kEngineHeurResults) == static_cast<int>(CUDNN_ATTR_ENGINEHEUR_RESULTS), "kEngineHeurResults");
static_assert(static_cast<int>(kEngineCfgEngine) == static_cast<int>(CUDNN_ATTR_ENGINECFG_ENGINE), "kEngineCfgEngine");
static_assert(static_cast<int>(kExecutionPlanHandle) == static_cast<int>(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), "kExecutionPlanHandle");
static_assert(static_cast<int>(kExecutionPlanEngineConfig) == static_cast<int>(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), "kExecutionPlanEngineConfig");
static_assert(static_cast<int>(kExecutionPlanWorkspaceSize) == static_cast<int>(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE), "kExecutionPlanWorkspaceSize");
static_assert(static_cast<int>(kOperationPointwisePwDescriptor) == static_cast<int>(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), "kOperationPointwisePwDescriptor");
static_assert(static_cast<int>(kOperationPointwiseXDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), "kOperationPointwiseXDesc");
static_assert(static_cast<int>(kOperationPointwiseBDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_POINTWISE_BDESC), "kOperationPointwiseBDesc");
static_assert(static_cast<int>(kOperationPointwiseYDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_POINTWISE_YDESC), "kOperationPointwiseYDesc");
static_assert(static_cast<int>(kOperationPointwiseTDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), "kOperationPointwiseTDesc");
static_assert(static_cast<int>(kOperationGraphHandle) == static_cast<int>(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), "kOperationGraphHandle");
static_assert(static_cast<int>(kOperationGraphOps) == static_cast<int>(CUDNN_ATTR_OPERATIONGRAPH_OPS), "kOperationGraphOps");
static_assert(static_cast<int>(kTensorByteAlignment) == static_cast<int>(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), "kTensorByteAlignment");
static_assert(static_cast<int>(kTensorDataType) == static_cast<int>(CUDNN_ATTR_TENSOR_DATA_TYPE), "kTensorDataType");
static_assert(static_cast<int>(kTensorDimensions) == static_cast<int>(CUDNN_ATTR_TENSOR_DIMENSIONS), "kTensorDimensions");
static_assert(static_cast<int>(kTensorStrides) == static_cast<int>(CUDNN_ATTR_TENSOR_STRIDES), "kTensorStrides");
static_assert(static_cast<int>(kTensorUniqueId) == static_cast<int>(CUDNN_ATTR_TENSOR_UNIQUE_ID), "kTensorUniqueId");
static_assert(static_cast<int>(kTensorIsVirtual) == static_cast<int>(CUDNN_ATTR_TENSOR_IS_VIRTUAL), "kTensorIsVirtual");
static_assert(static_cast<int>(kTensorIsByValue) == static_cast<int>(CUDNN_ATTR_TENSOR_IS_BY_VALUE), "kTensorIsByValue");
static_assert(static_cast<int>(kVariantPackUniqueIds) == static_cast<int>(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), "kVariantPackUniqueIds");
static_assert(static_cast<int>(kVariantPackDataPointers) == static_cast<int>(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), "kVariantPackDataPointers");
static_assert(static_cast<int>(kVariantPackWorkspace) == static_cast<int>(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), "kVariantPackWorkspace");
static_assert(static_cast<int>(kEngineGlobalIndex) == static_cast<int>(CUDNN_ATTR_ENGINE_GLOBAL_INDEX), "kEngineGlobalIndex");
static_assert(static_cast<int>(kMatmulCompType) == static_cast<int>(CUDNN_ATTR_MATMUL_COMP_TYPE), "kMatmulCompType");
static_assert(static_cast<int>(kOperationMatmulADesc) == static_cast<int>(CUDNN_ATTR_OPERATION_MATMUL_ADESC), "kOperationMatmulADesc");
static_assert(static_cast<int>(kOperationMatmulBDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_MATMUL_BDESC), "kOperationMatmulBDesc");
static_assert(static_cast<int>(kOperationMatmulCDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_MATMUL_CDESC), "kOperationMatmulCDesc");
static_assert(static_cast<int>(kOperationMatmulDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_MATMUL_DESC), "kOperationMatmulDesc");
static_assert(static_cast<int>(kReductionOperator) == static_cast<int>(CUDNN_ATTR_REDUCTION_OPERATOR), "kReductionOperator");
static_assert(static_cast<int>(kReductionCompType) == static_cast<int>(CUDNN_ATTR_REDUCTION_COMP_TYPE), "kReductionCompType");
static_assert(static_cast<int>(kOperationReductionXDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), "kOperationReductionXDesc");
static_assert(static_cast<int>(kOperationReductionYDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_REDUCTION_YDESC), "kOperationReductionYDesc");
static_assert(static_cast<int>(kOperationReductionDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_REDUCTION_DESC), "kOperationReductionDesc");
static_assert(static_cast<int>(kOperationReshapeXDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_RESHAPE_XDESC), "kOperationReshapeXDesc");
static_assert(static_cast<int>(kOperationReshapeYDesc) == static_cast<int>(CUDNN_ATTR_OPERATION_RESHAPE_YDESC), "kOperationReshapeYDesc");
static_assert(static_cast<int>(kFloat) == static_cast<int>(CUDNN_DATA_FLOAT), "kFloat");
static_assert(static_cast<int>(kInt32) == static_cast<int>(CUDNN_DATA_INT32), "kInt32");
static_assert(static_cast<int>(kBf16) == static_cast<int>(CUDNN_DATA_BFLOAT16), "kBf16");
static_assert(static_cast<int>(kBoolean) == static_cast<int>(CUDNN_DATA_BOOLEAN), "kBoolean");
static_assert(static_cast<int>(kPwAdd) == static_cast<int>(CUDNN_POINTWISE_ADD), "kPwAdd");
static_assert(static_cast<int>(kPwMul) == static_cast<int>(CUDNN_POINTWISE_MUL), "kPwMul");
static_assert(static_cast<int>(kPwDiv) == static_cast<int>(CUDNN_POINTWISE_DIV), "kPwDiv");
static_assert(static_cast<int>(kPwSub) == static_cast<int>(CUDNN_POINTWISE_SUB), "kPwSub");
static_assert(static_cast<int>(kPwExp) == static_cast<int>(CUDNN_POINTWISE_EXP), "kPwExp");
static_assert(static_cast<int>(kPwLog) == static_cast<int>(CUDNN_POINTWISE_LOG), "kPwLog");
static_assert(static_cast<int>(kPwIdentity) == static_cast<int>(CUDNN_POINTWISE_IDENTITY), "kPwIdentity");
static_assert(static_cast<int>(kPwCmpGe) == static_cast<int>(CUDNN_POINTWISE_CMP_GE), "kPwCmpGe");
static_assert(static_cast<int>(kPwGenIndex) == static_cast<int>(CUDNN_POINTWISE_GEN_INDEX), "kPwGenIndex");
static_assert(static_cast<int>(kPwBinarySelect) == static_cast<int>(CUDNN_POINTWISE_BINARY_SELECT), "kPwBinarySelect");
static_assert(static_cast<int>(kReduceAdd) == static_cast<int>(CUDNN_REDUCE_TENSOR_ADD), "kReduceAdd");
static_assert(static_cast<int>(kReduceMax) == static_cast<int>(CUDNN_REDUCE_TENSOR_MAX), "kReduceMax");
static_assert(static_cast<int>(kHeurModeA) == static_cast<int>(CUDNN_HEUR_MODE_A), "kHeurModeA");
static_assert(static_cast<int>(kSuccess) == static_cast<int>(CUDNN_STATUS_SUCCESS), "kSuccess");
static_assert(sizeof(cudnnStatus_t) == sizeof(Code) && sizeof(cudnnBackendAttributeName_t) == sizeof(int) &&
                  sizeof(cudnnBackendDescriptor_t) == sizeof(Desc) && sizeof(cudnnHandle_t) == sizeof(Handle),
              "the C enums and handles are int- and pointer-sized");

#endif  // CUDNN_MAJOR == 9

TEST(CudnnHeader, DeclarationsMatchTheHeader) {
  std::printf("checked against cudnn_graph.h of cuDNN %d.%d.%d\n", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  if (CUDNN_MAJOR != 9) GTEST_SKIP() << "a cuDNN " << CUDNN_MAJOR << " header: our declarations are of cuDNN 9";
}

}  // namespace
}  // namespace tt::cudnn
