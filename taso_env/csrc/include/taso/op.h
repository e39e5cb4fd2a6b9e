// Operators of the graph IR: the op-type enum, each type's schema (inputs and
// attributes), the Op record stored in a Graph, and per-op work counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "taso/types.h"

namespace taso {

// Op-type codes, in the order of taso/op_table.def (observation columns, stored in
// rollout files and checkpoints: the table only ever grows at its end).
enum class OpType : int {
#define TASO_OP(name, min_inputs, max_inputs, declared_outputs, elementwise, flops, attrs) k##name,
#include "taso/op_table.def"
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

// How an op relates to element-wise fusion and pricing (taso/op_table.def says which op
// is which).
enum class ElementwiseClass : int {
  kNone = 0,   // not element-wise
  kFlat = 1,   // a one-to-one map over the output's elements, priced by element count
  kChain = 2,  // kFlat, and the fused element-wise kernel has an instruction for it
};

struct OpSchema {
  OpType type;
  std::string name;
  int min_inputs;
  int max_inputs;  // -1: variadic
  bool declared_outputs;  // output types given by the caller (Input, Weight, Opaque)
  ElementwiseClass elementwise;
  double elementwise_flops;  // FLOPs per output element of an element-wise op, else 0
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
