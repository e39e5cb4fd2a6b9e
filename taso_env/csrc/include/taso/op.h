// Operators of the graph IR: the op-type enum, each type's schema (inputs and
// attributes), the Op record stored in a Graph, and per-op work counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "taso/types.h"

namespace taso {

enum class OpType : int {
  kInput = 0,
  kWeight,
  kConv2D,
  kMatMul,
  kGemm,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kRelu,
  kSigmoid,
  kTanh,
  kErf,
  kGelu,
  kSqrt,
  kExp,
  kIdentity,
  kConcat,
  kSplit,
  kTranspose,
  kReshape,
  kFlatten,
  kMaxPool2D,
  kAvgPool2D,
  kGlobalAvgPool,
  kBatchNorm,
  kEnlarge,
  kSoftmax,
  kPad,
  kReduceMean,
  kReduceSum,
  kLayerNorm,
  kGather,
  kWhere,
  kCast,
  kConstant,
  kOpaque,
  // Added after Opaque so that the codes above stay stable.
  kClip,
  kHardSigmoid,
  kHardSwish,
  kNumOpTypes,  // keep last
};

constexpr int kNumOpTypes = static_cast<int>(OpType::kNumOpTypes);

enum class AttrKind : int { kInt = 0, kInts = 1, kFloat = 2, kString = 3 };

struct AttrSpec {
  std::string name;
  AttrKind kind;
  bool required;
  std::vector<int64_t> default_ints;  // kInt / kInts
  double default_float = 0.0;         // kFloat
  bool has_default = true;            // false: required, or derived from the input shapes
};

struct OpSchema {
  OpType type;
  std::string name;
  int min_inputs;
  int max_inputs;  // -1: variadic
  bool declared_outputs;  // output types given by the caller (Input, Weight, Opaque)
  std::vector<AttrSpec> attrs;
};

// Schema lookup. op_type_from_name throws UnknownOpError for an unknown name.
const OpSchema& op_schema(OpType type);
OpType op_type_from_name(const std::string& name);
const std::string& op_type_name(OpType type);
std::vector<std::string> op_type_names();
// True for ops that compute nothing at run time (graph inputs and weights).
bool is_source_op(OpType type);
// True for ops whose value is known before run time (Weight, Constant); ops computed
// only from such ops are constant too and are folded before deployment.
bool is_constant_source(OpType type);

struct Op {
  OpType type;
  std::string name;
  std::vector<TensorRef> inputs;
  Attrs attrs;
  std::vector<TensorType> outputs;
};

// Work an op does, used by every cost model.
struct OpWork {
  double flops = 0;         // floating-point operations (a multiply-add counts 2)
  double bytes_read = 0;    // bytes of all inputs
  double bytes_written = 0; // bytes of all outputs
};

}  // namespace taso
