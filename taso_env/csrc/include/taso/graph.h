// The computation graph: ops in topological order (an op only reads earlier ops),
// named graph outputs, shape inference on construction and a canonical hash.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "taso/op.h"
#include "taso/types.h"

namespace taso {

// What a caller gives to add an op. `declared_outputs` is used only by op types whose
// schema says so (Input, Weight, Opaque); other ops infer their outputs.
struct OpSpec {
  std::string type;
  std::string name;
  std::vector<TensorRef> inputs;
  Attrs attrs;
  std::vector<TensorType> declared_outputs;
};

class Graph {
 public:
  Graph() = default;

  // Validates the spec against the op schema, fills default attributes, infers the
  // output types and appends the op. Returns its id. Throws UnknownOpError,
  // AttributeError, GraphError or ShapeError naming the op.
  int add_op(const OpSpec& spec);
  // Appends an op whose output types the caller has already inferred (rule
  // application); only its input references are checked. Returns its id.
  int add_typed_op(Op op);
  // Room for `n` ops (a graph about to be built op by op).
  void reserve(int n) { ops_.reserve(n); }
  // Marks a tensor as a graph output with the given (unique) name.
  void add_output(const TensorRef& tensor, const std::string& name);

  int num_ops() const { return static_cast<int>(ops_.size()); }
  // Ops that compute something (not Input / Weight).
  int num_compute_ops() const;
  const Op& op(int id) const;
  const std::vector<Op>& ops() const { return ops_; }
  const TensorType& tensor_type(const TensorRef& t) const;
  const std::vector<TensorRef>& outputs() const { return outputs_; }
  const std::vector<std::string>& output_names() const { return output_names_; }

  // consumers()[op][index] lists the (consumer op, input slot) pairs of each output, in
  // consumer id order (then slot order).
  std::vector<std::vector<std::vector<std::pair<int, int>>>> consumers() const;
  // Ops in a topological order (always valid for a Graph; kept for callers that
  // reorder or check).
  std::vector<int> topological_order() const;

  // Canonical structural hash: equal graphs hash equal whatever order their ops were
  // added in. Inputs and weights are identified by name and type.
  uint64_t hash() const;
  // Per-op structural hashes (the Merkle hash of each op's cone).
  std::vector<uint64_t> op_hashes() const;

  // Work per op (flops and bytes).
  OpWork op_work(int id) const;

 private:
  std::vector<Op> ops_;
  std::vector<TensorRef> outputs_;
  std::vector<std::string> output_names_;
};

// Checks attribute names and kinds against the op schema and fills defaults.
// Throws AttributeError naming the op.
void validate_op_attrs(OpType type, const std::string& op_name, Attrs& attrs);

// Infers output types of an op whose inputs have the given types; fills default
// attributes into `attrs`. Throws ShapeError / AttributeError naming `op_name`.
std::vector<TensorType> infer_output_types(OpType type, const std::string& op_name,
                                           const std::vector<TensorType>& inputs,
                                           Attrs& attrs);

// Work of one op given its input and output types.
OpWork compute_op_work(const Op& op, const std::vector<TensorType>& input_types);

// Topological order of a general dependency list (deps[i] = ops that op i reads).
// Throws CycleError naming the ops on a cycle. Ties keep the given order.
std::vector<int> topological_sort(const std::vector<std::vector<int>>& deps,
                                  const std::vector<std::string>& names);
// The same over flat dependencies (op i reads deps[dep_start[i] .. dep_start[i + 1]]),
// naming ops (in errors only) through `name_of`.
std::vector<int> topological_sort(const std::vector<int>& dep_start, const std::vector<int>& deps,
                                  const std::function<std::string(int)>& name_of);

}  // namespace taso
