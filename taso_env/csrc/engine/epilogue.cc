// The convolution epilogue rule (see taso/epilogue.h).
#include "taso/epilogue.h"

#include <set>
#include <utility>

namespace taso {

EpilogueActivation epilogue_activation(const Op& op) {
  switch (op.type) {
    case OpType::kRelu: return EpilogueActivation::kRelu;
    case OpType::kHardSwish: return EpilogueActivation::kHardSwish;
    case OpType::kClip:
      return op.attrs.get_float("min") == 0.0 && op.attrs.get_float("max") == 6.0 ? EpilogueActivation::kRelu6
                                                                                 : EpilogueActivation::kNone;
    default: return EpilogueActivation::kNone;
  }
}

bool conv_takes_epilogue(const Op& op) {
  return op.type == OpType::kConv2D && op.outputs.size() == 1 && op.outputs[0].dtype == kFloat32 &&
         op.attrs.get_int("activation") == kActNone;
}

namespace {

// The feed's output 0 goes to the one op that reads it, and nowhere else.
bool sole_reader(const EpilogueFeed& f) {
  return f.op && f.op->outputs.size() == 1 && f.uses == 1 && !f.graph_output && !f.constant;
}

}  // namespace

bool runs_in_conv_epilogue(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds) {
  if (x.inputs.empty() && input_types.empty()) return false;
  if (epilogue_activation(x) != EpilogueActivation::kNone) {
    const EpilogueFeed& f = feeds[0];
    if (!sole_reader(f)) return false;
    return conv_takes_epilogue(*f.op) || (f.op->type == OpType::kAdd && f.absorbed);
  }
  if (x.type != OpType::kAdd || input_types.size() != 2 || x.outputs.size() != 1) return false;
  for (int slot = 0; slot < 2; ++slot) {
    const EpilogueFeed& f = feeds[slot];
    if (!sole_reader(f) || !conv_takes_epilogue(*f.op)) continue;
    const TensorType& y = f.op->outputs[0];
    if (input_types[1 - slot] == y && x.outputs[0] == y) return true;
  }
  return false;
}

std::vector<char> conv_epilogue_ops(const Graph& graph, const std::vector<char>& constant) {
  return conv_epilogue_ops(graph, constant, graph.consumers());
}

std::vector<char> conv_epilogue_ops(const Graph& graph, const std::vector<char>& constant,
                                    const std::vector<std::vector<std::vector<std::pair<int, int>>>>& consumers) {
  const int n = graph.num_ops();
  std::vector<char> absorbed(n, 0);
  std::set<std::pair<int, int>> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert({r.op, r.index});
  std::vector<TensorType> in;
  for (int id = 0; id < n; ++id) {  // op ids are a topological order: an Add before its readers
    const Op& x = graph.op(id);
    if (constant[id] || (x.type != OpType::kAdd && epilogue_activation(x) == EpilogueActivation::kNone)) continue;
    EpilogueFeed feeds[2];
    in.clear();
    for (size_t k = 0; k < x.inputs.size(); ++k) {
      const TensorRef& t = x.inputs[k];
      in.push_back(graph.tensor_type(t));
      if (k >= 2 || t.index != 0) continue;
      feeds[k] = {&graph.op(t.op), static_cast<bool>(constant[t.op]), static_cast<int>(consumers[t.op][0].size()),
                  outputs.count({t.op, 0}) > 0, static_cast<bool>(absorbed[t.op])};
    }
    absorbed[id] = runs_in_conv_epilogue(x, in, feeds);
  }
  return absorbed;
}

}  // namespace taso
