// The op schemas (names, input counts, attribute schemas, element-wise class), built from
// the operator table taso/op_table.def. docs/operators.md is the prose version of it.
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

#define TASO_UNPARENTHESISE(...) __VA_ARGS__

std::vector<OpSchema> build_schemas() {
  std::vector<OpSchema> s = {
#define TASO_OP(name, min_inputs, max_inputs, declared_outputs, elementwise, flops, attrs)          \
  {OpType::k##name, #name, min_inputs, max_inputs, declared_outputs, ElementwiseClass::k##elementwise, \
   flops, {TASO_UNPARENTHESISE attrs}},
#include "taso/op_table.def"
  };
  return s;
}

#undef TASO_UNPARENTHESISE

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
