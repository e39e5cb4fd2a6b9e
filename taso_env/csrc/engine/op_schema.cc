// The op-type table: names, input counts and attribute schemas of every operator.
// docs/operators.md is the prose version of this table.
#include <array>
#include <limits>
#include <unordered_map>

#include "taso/errors.h"
#include "taso/op.h"

namespace taso {
namespace {

AttrSpec Int(const std::string& name, int64_t def) {
  return {name, AttrKind::kInt, false, {def}, 0.0, true};
}
AttrSpec RequiredInt(const std::string& name) { return {name, AttrKind::kInt, true, {}, 0.0, false}; }
AttrSpec Ints(const std::string& name, std::vector<int64_t> def) {
  return {name, AttrKind::kInts, false, std::move(def), 0.0, true};
}
AttrSpec RequiredInts(const std::string& name) { return {name, AttrKind::kInts, true, {}, 0.0, false}; }
// An ints attribute whose default depends on the input shapes (filled by inference).
AttrSpec ShapeDependentInts(const std::string& name) {
  return {name, AttrKind::kInts, false, {}, 0.0, false};
}
AttrSpec Float(const std::string& name, double def) {
  return {name, AttrKind::kFloat, false, {}, def, true};
}
AttrSpec RequiredString(const std::string& name) {
  return {name, AttrKind::kString, true, {}, 0.0, false};
}
AttrSpec String(const std::string& name) { return {name, AttrKind::kString, false, {}, 0.0, false}; }

std::vector<OpSchema> build_schemas() {
  const std::vector<AttrSpec> none;
  const std::vector<AttrSpec> pool = {RequiredInts("kernel"), Ints("strides", {1, 1}),
                                      Ints("pads", {0, 0, 0, 0}), Int("ceil_mode", 0)};
  std::vector<AttrSpec> avg_pool = pool;
  avg_pool.push_back(Int("count_include_pad", 0));
  std::vector<OpSchema> s = {
      {OpType::kInput, "Input", 0, 0, true, none},
      {OpType::kWeight, "Weight", 0, 0, true, none},
      {OpType::kConv2D, "Conv2D", 2, 3, false,
       {Ints("strides", {1, 1}), Ints("pads", {0, 0, 0, 0}), Ints("dilations", {1, 1}),
        Int("group", 1), Int("activation", kActNone)}},
      {OpType::kMatMul, "MatMul", 2, 2, false, {Int("activation", kActNone)}},
      {OpType::kGemm, "Gemm", 2, 3, false,
       {Int("trans_a", 0), Int("trans_b", 0), Float("alpha", 1.0), Float("beta", 1.0)}},
      {OpType::kAdd, "Add", 2, 2, false, none},
      {OpType::kSub, "Sub", 2, 2, false, none},
      {OpType::kMul, "Mul", 2, 2, false, none},
      {OpType::kDiv, "Div", 2, 2, false, none},
      {OpType::kRelu, "Relu", 1, 1, false, none},
      {OpType::kSigmoid, "Sigmoid", 1, 1, false, none},
      {OpType::kTanh, "Tanh", 1, 1, false, none},
      {OpType::kErf, "Erf", 1, 1, false, none},
      {OpType::kGelu, "Gelu", 1, 1, false, none},
      {OpType::kSqrt, "Sqrt", 1, 1, false, none},
      {OpType::kExp, "Exp", 1, 1, false, none},
      {OpType::kIdentity, "Identity", 1, 1, false, none},
      {OpType::kConcat, "Concat", 1, -1, false, {RequiredInt("axis")}},
      {OpType::kSplit, "Split", 1, 1, false, {RequiredInt("axis"), RequiredInts("split")}},
      {OpType::kTranspose, "Transpose", 1, 1, false, {ShapeDependentInts("perm")}},
      {OpType::kReshape, "Reshape", 1, 1, false, {RequiredInts("shape")}},
      {OpType::kFlatten, "Flatten", 1, 1, false, {Int("axis", 1)}},
      {OpType::kMaxPool2D, "MaxPool2D", 1, 1, false, pool},
      {OpType::kAvgPool2D, "AvgPool2D", 1, 1, false, avg_pool},
      {OpType::kGlobalAvgPool, "GlobalAvgPool", 1, 1, false, none},
      {OpType::kBatchNorm, "BatchNorm", 5, 5, false, {Float("epsilon", 1e-5)}},
      {OpType::kEnlarge, "Enlarge", 1, 1, false, {RequiredInts("kernel")}},
      {OpType::kSoftmax, "Softmax", 1, 1, false, {Int("axis", -1)}},
      {OpType::kPad, "Pad", 1, 1, false, {RequiredInts("pads"), Float("value", 0.0)}},
      {OpType::kReduceMean, "ReduceMean", 1, 1, false,
       {ShapeDependentInts("axes"), Int("keepdims", 1)}},
      {OpType::kReduceSum, "ReduceSum", 1, 1, false,
       {ShapeDependentInts("axes"), Int("keepdims", 1)}},
      {OpType::kLayerNorm, "LayerNorm", 2, 3, false,
       {Int("axis", -1), Float("epsilon", 1e-5)}},
      {OpType::kGather, "Gather", 2, 2, false, {Int("axis", 0)}},
      {OpType::kWhere, "Where", 3, 3, false, none},
      {OpType::kCast, "Cast", 1, 1, false, {RequiredInt("to")}},
      {OpType::kConstant, "Constant", 0, 0, false,
       {Float("value", 0.0), Ints("shape", {}), Int("dtype", kFloat32)}},
      {OpType::kOpaque, "Opaque", 0, -1, true,
       {RequiredString("onnx_op_type"), String("onnx_node")}},
      {OpType::kClip, "Clip", 1, 1, false,
       {Float("min", std::numeric_limits<float>::lowest()), Float("max", std::numeric_limits<float>::max())}},
      {OpType::kHardSigmoid, "HardSigmoid", 1, 1, false, {Float("alpha", 0.2), Float("beta", 0.5)}},
      {OpType::kHardSwish, "HardSwish", 1, 1, false, none},
  };
  return s;
}

const std::vector<OpSchema>& schemas() {
  static const std::vector<OpSchema> table = [] {
    std::vector<OpSchema> t = build_schemas();
    if (static_cast<int>(t.size()) != kNumOpTypes) throw Error(kErrGeneric, "op schema table incomplete");
    for (int i = 0; i < kNumOpTypes; ++i)
      if (static_cast<int>(t[i].type) != i) throw Error(kErrGeneric, "op schema table out of order");
    return t;
  }();
  return table;
}

}  // namespace

const OpSchema& op_schema(OpType type) {
  int i = static_cast<int>(type);
  if (i < 0 || i >= kNumOpTypes) throw UnknownOpError("op type code " + std::to_string(i) + " out of range");
  return schemas()[i];
}

OpType op_type_from_name(const std::string& name) {
  static const std::unordered_map<std::string, OpType> by_name = [] {
    std::unordered_map<std::string, OpType> m;
    for (const OpSchema& s : schemas()) m.emplace(s.name, s.type);
    return m;
  }();
  auto it = by_name.find(name);
  if (it == by_name.end()) throw UnknownOpError("unknown op type '" + name + "'");
  return it->second;
}

const std::string& op_type_name(OpType type) { return op_schema(type).name; }

std::vector<std::string> op_type_names() {
  std::vector<std::string> names;
  for (const OpSchema& s : schemas()) names.push_back(s.name);
  return names;
}

bool is_source_op(OpType type) { return type == OpType::kInput || type == OpType::kWeight; }

bool is_constant_source(OpType type) { return type == OpType::kWeight || type == OpType::kConstant; }

}  // namespace taso
