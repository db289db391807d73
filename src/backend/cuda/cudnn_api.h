// backend/cuda/cudnn_api: our own minimal declarations of the cuDNN 9 backend ("graph") C API, for a library loaded
// at run time (cudnn_loader.h). No cuDNN header is needed to build; the values below are the enumerators of
// cudnn_graph.h that we use, under our own names, and cudnn_header_test.cc static_asserts each against the header
// where CMake finds one (the GPU machine). Only major version 9 is accepted, so these values cannot move under us.
//
//   const cudnn::Api& api = lib->api;
//   cudnn::Desc d = nullptr;
//   api.create_descriptor(cudnn::kTensorDescriptor, &d);
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt::cudnn {

using Handle = void*;  // cudnnHandle_t
using Desc = void*;    // cudnnBackendDescriptor_t
using Code = int;      // cudnnStatus_t (a C enum: int-sized)
constexpr Code kSuccess = 0;

// cudnnBackendDescriptorType_t
enum DescType : int {
  kPointwiseDescriptor = 0,
  kEngineDescriptor = 2,
  kEngineCfgDescriptor = 3,
  kEngineHeurDescriptor = 4,
  kExecutionPlanDescriptor = 5,
  kOperationPointwiseDescriptor = 13,
  kOperationGraphDescriptor = 15,
  kVariantPackDescriptor = 16,
  kTensorDescriptor = 17,
  kMatmulDescriptor = 18,
  kOperationMatmulDescriptor = 19,
  kReductionDescriptor = 21,
  kOperationReductionDescriptor = 22,
  kOperationReshapeDescriptor = 31,
};

// cudnnBackendAttributeType_t
enum AttrType : int {
  kTypeHandle = 0,
  kTypeDataType = 1,
  kTypeBoolean = 2,
  kTypeInt64 = 3,
  kTypeFloat = 4,
  kTypeVoidPtr = 6,
  kTypeHeurMode = 8,
  kTypePointwiseMode = 14,
  kTypeBackendDescriptor = 15,
  kTypeReductionOperator = 18,
};

// cudnnBackendAttributeName_t
enum Attr : int {
  kPointwiseMode = 0,
  kPointwiseMathPrec = 1,
  kPointwiseAxis = 9,
  kEngineHeurMode = 200,
  kEngineHeurOperationGraph = 201,
  kEngineHeurResults = 202,
  kEngineCfgEngine = 300,
  kExecutionPlanHandle = 400,
  kExecutionPlanEngineConfig = 401,
  kExecutionPlanWorkspaceSize = 402,
  kOperationPointwisePwDescriptor = 750,
  kOperationPointwiseXDesc = 751,
  kOperationPointwiseBDesc = 752,
  kOperationPointwiseYDesc = 753,
  kOperationPointwiseTDesc = 758,
  kOperationGraphHandle = 800,
  kOperationGraphOps = 801,
  kTensorByteAlignment = 900,
  kTensorDataType = 901,
  kTensorDimensions = 902,
  kTensorStrides = 903,
  kTensorUniqueId = 906,
  kTensorIsVirtual = 907,
  kTensorIsByValue = 908,
  kVariantPackUniqueIds = 1000,
  kVariantPackDataPointers = 1001,
  kVariantPackWorkspace = 1003,
  kEngineGlobalIndex = 1301,
  kMatmulCompType = 1500,
  kOperationMatmulADesc = 1520,
  kOperationMatmulBDesc = 1521,
  kOperationMatmulCDesc = 1522,
  kOperationMatmulDesc = 1523,
  kReductionOperator = 1600,
  kReductionCompType = 1601,
  kOperationReductionXDesc = 1610,
  kOperationReductionYDesc = 1611,
  kOperationReductionDesc = 1612,
  kOperationReshapeXDesc = 2200,
  kOperationReshapeYDesc = 2201,
};

// cudnnDataType_t
enum DataType : int { kFloat = 0, kInt32 = 4, kBf16 = 9, kBoolean = 11 };

// cudnnPointwiseMode_t
enum PointwiseMode : int {
  kPwAdd = 0,
  kPwMul = 1,
  kPwDiv = 6,
  kPwSub = 9,
  kPwExp = 13,
  kPwLog = 15,
  kPwIdentity = 21,
  kPwCmpGe = 303,
  kPwGenIndex = 501,
  kPwBinarySelect = 601,
};

// cudnnReduceTensorOp_t
enum ReduceOp : int { kReduceAdd = 0, kReduceMax = 3 };

// cudnnBackendHeurMode_t
enum HeurMode : int { kHeurModeA = 3 };

// The functions we resolve with dlsym, with the C signatures of cudnn_graph.h (enums passed as int, cudaStream_t as
// void*).
struct Api {
  size_t (*get_version)();
  size_t (*get_cudart_version)();
  const char* (*get_error_string)(Code);
  void (*get_last_error_string)(char*, size_t);
  Code (*create)(Handle*);
  Code (*destroy)(Handle);
  Code (*set_stream)(Handle, void* stream);
  Code (*create_descriptor)(int type, Desc*);
  Code (*destroy_descriptor)(Desc);
  Code (*finalize)(Desc);
  Code (*set_attribute)(Desc, int name, int type, int64_t count, const void* values);
  Code (*get_attribute)(Desc, int name, int type, int64_t requested, int64_t* count, void* values);
  Code (*execute)(Handle, Desc plan, Desc variant_pack);
};

}  // namespace tt::cudnn
