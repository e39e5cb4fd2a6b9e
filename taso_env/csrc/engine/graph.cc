// Graph construction (validation + shape inference), structure queries and the
// canonical hash (the hash itself is in graph_hash.cc).
#include <algorithm>
#include <deque>
#include <unordered_set>

#include "taso/errors.h"
#include "taso/graph.h"

namespace taso {

int Graph::add_op(const OpSpec& spec) {
  OpType type = op_type_from_name(spec.type);
  const OpSchema& schema = op_schema(type);
  std::string name = spec.name.empty() ? spec.type + "_" + std::to_string(ops_.size()) : spec.name;
  std::vector<TensorType> input_types;
  input_types.reserve(spec.inputs.size());
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorRef& r = spec.inputs[i];
    if (r.op < 0 || r.op >= num_ops())
      throw GraphError(spec.type + " op '" + name + "': input " + std::to_string(i) + " refers to op " +
                       std::to_string(r.op) + ", which does not exist yet (graph has " +
                       std::to_string(num_ops()) + " ops)");
    const Op& producer = ops_[r.op];
    if (r.index < 0 || r.index >= static_cast<int>(producer.outputs.size()))
      throw GraphError(spec.type + " op '" + name + "': input " + std::to_string(i) + " refers to output " +
                       std::to_string(r.index) + " of op '" + producer.name + "', which has " +
                       std::to_string(producer.outputs.size()) + " outputs");
    input_types.push_back(producer.outputs[r.index]);
  }
  Op op{type, name, spec.inputs, spec.attrs, {}};
  if (schema.declared_outputs) {
    if (spec.declared_outputs.empty())
      throw GraphError(spec.type + " op '" + name + "' needs declared output types");
    if (type != OpType::kOpaque && (spec.declared_outputs.size() != 1 || !spec.inputs.empty()))
      throw GraphError(spec.type + " op '" + name + "' has no inputs and exactly one output");
    for (const TensorType& t : spec.declared_outputs) {
      dtype_size(t.dtype);  // validates the dtype code
      for (int64_t d : t.shape)
        if (d < 0) throw ShapeError(spec.type + " op '" + name + "': declared shape " + shape_str(t.shape) +
                                    " has a negative dimension");
    }
    validate_op_attrs(type, name, op.attrs);
    op.outputs = spec.declared_outputs;
    if (is_source_op(type)) {
      for (const Op& other : ops_)
        if (is_source_op(other.type) && other.name == name)
          throw GraphError("duplicate input/weight name '" + name + "'");
    }
  } else {
    op.outputs = infer_output_types(type, name, input_types, op.attrs);
  }
  ops_.push_back(std::move(op));
  return num_ops() - 1;
}

int Graph::add_typed_op(Op op) {
  for (const TensorRef& r : op.inputs)
    if (r.op < 0 || r.op >= num_ops() || r.index < 0 ||
        r.index >= static_cast<int>(ops_[r.op].outputs.size()))
      throw GraphError(op_type_name(op.type) + " op '" + op.name + "': bad input reference");
  ops_.push_back(std::move(op));
  return num_ops() - 1;
}

void Graph::add_output(const TensorRef& tensor, const std::string& name) {
  if (tensor.op < 0 || tensor.op >= num_ops() || tensor.index < 0 ||
      tensor.index >= static_cast<int>(ops_[tensor.op].outputs.size()))
    throw GraphError("graph output '" + name + "' refers to a tensor that does not exist (op " +
                     std::to_string(tensor.op) + ", output " + std::to_string(tensor.index) + ")");
  if (name.empty()) throw GraphError("graph output names must not be empty");
  if (std::find(output_names_.begin(), output_names_.end(), name) != output_names_.end())
    throw GraphError("duplicate graph output name '" + name + "'");
  outputs_.push_back(tensor);
  output_names_.push_back(name);
}

int Graph::num_compute_ops() const {
  int n = 0;
  for (const Op& op : ops_) n += is_source_op(op.type) ? 0 : 1;
  return n;
}

const Op& Graph::op(int id) const {
  if (id < 0 || id >= num_ops())
    throw IndexError("op id " + std::to_string(id) + " out of range [0, " + std::to_string(num_ops()) + ")");
  return ops_[id];
}

const TensorType& Graph::tensor_type(const TensorRef& t) const {
  const Op& producer = op(t.op);
  if (t.index < 0 || t.index >= static_cast<int>(producer.outputs.size()))
    throw IndexError("op '" + producer.name + "' has no output " + std::to_string(t.index));
  return producer.outputs[t.index];
}

std::vector<std::vector<std::vector<std::pair<int, int>>>> Graph::consumers() const {
  std::vector<std::vector<std::vector<std::pair<int, int>>>> result(ops_.size());
  for (size_t i = 0; i < ops_.size(); ++i) result[i].resize(ops_[i].outputs.size());
  for (size_t i = 0; i < ops_.size(); ++i)
    for (size_t slot = 0; slot < ops_[i].inputs.size(); ++slot) {
      const TensorRef& r = ops_[i].inputs[slot];
      result[r.op][r.index].emplace_back(static_cast<int>(i), static_cast<int>(slot));
    }
  return result;
}

std::vector<int> Graph::topological_order() const {
  std::vector<int> dep_start{0}, deps;
  dep_start.reserve(ops_.size() + 1);
  for (const Op& op : ops_) {
    for (const TensorRef& r : op.inputs) deps.push_back(r.op);
    dep_start.push_back(static_cast<int>(deps.size()));
  }
  return topological_sort(dep_start, deps, [&](int i) { return ops_[i].name; });
}

OpWork Graph::op_work(int id) const {
  const Op& o = op(id);
  std::vector<TensorType> in;
  in.reserve(o.inputs.size());
  for (const TensorRef& r : o.inputs) in.push_back(tensor_type(r));
  return compute_op_work(o, in);
}

std::vector<int> topological_sort(const std::vector<int>& dep_start, const std::vector<int>& deps,
                                  const std::function<std::string(int)>& name_of) {
  const int n = static_cast<int>(dep_start.size()) - 1;
  std::vector<int> indegree(n, 0);
  std::vector<int> user_start(n + 1, 0);  // flat readers: users[user_start[d] .. user_start[d + 1]]
  for (int i = 0; i < n; ++i)
    for (int k = dep_start[i]; k < dep_start[i + 1]; ++k) {
      const int d = deps[k];
      if (d < 0 || d >= n)
        throw GraphError("op '" + name_of(i) + "' depends on op " + std::to_string(d) + ", which does not exist");
      ++user_start[d + 1];
      ++indegree[i];
    }
  for (int i = 0; i < n; ++i) user_start[i + 1] += user_start[i];
  std::vector<int> users(user_start[n]);
  std::vector<int> fill(user_start.begin(), user_start.end() - 1);
  for (int i = 0; i < n; ++i)
    for (int k = dep_start[i]; k < dep_start[i + 1]; ++k) users[fill[deps[k]]++] = i;
  // A min-heap on the index keeps the given order wherever it is already valid.
  std::vector<int> ready;
  for (int i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push_back(i);
  std::make_heap(ready.begin(), ready.end(), std::greater<int>());
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), std::greater<int>());
    int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (int k = user_start[i]; k < user_start[i + 1]; ++k)
      if (--indegree[users[k]] == 0) {
        ready.push_back(users[k]);
        std::push_heap(ready.begin(), ready.end(), std::greater<int>());
      }
  }
  if (static_cast<int>(order.size()) != n) {
    std::string on_cycle;
    int listed = 0;
    for (int i = 0; i < n && listed < 8; ++i)
      if (indegree[i] > 0) {
        on_cycle += (listed ? ", '" : "'") + name_of(i) + "'";
        ++listed;
      }
    throw CycleError("the graph has a cycle through ops " + on_cycle);
  }
  return order;
}

std::vector<int> topological_sort(const std::vector<std::vector<int>>& deps, const std::vector<std::string>& names) {
  std::vector<int> dep_start{0}, flat;
  for (const auto& d : deps) {
    flat.insert(flat.end(), d.begin(), d.end());
    dep_start.push_back(static_cast<int>(flat.size()));
  }
  return topological_sort(dep_start, flat, [&](int i) {
    return static_cast<size_t>(i) < names.size() ? names[i] : std::to_string(i);
  });
}

}  // namespace taso
