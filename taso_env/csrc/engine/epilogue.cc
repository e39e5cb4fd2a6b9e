// The epilogue rule: what a convolution or GEMM runs in its epilogue (see taso/epilogue.h).
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

bool is_row_vector(const std::vector<int64_t>& shape, int64_t n) {
  if (shape.empty() || shape.back() != n) return false;
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  return total == n;
}

bool gemm_takes_epilogue(const Op& op, const std::vector<TensorType>& input_types) {
  if (op.type != OpType::kMatMul || op.outputs.size() != 1 || op.outputs[0].dtype != kFloat32 ||
      input_types.size() != 2 || op.attrs.get_int("activation") != kActNone)
    return false;
  for (const TensorType& t : input_types)
    if (t.dtype != kFloat32 || t.shape.size() < 2) return false;
  const auto& y = op.outputs[0].shape;
  if (y.size() < 2) return false;
  // the dims before the last two, right-aligned to the result's
  auto batch = [&](const std::vector<int64_t>& s) {
    std::vector<int64_t> b(y.size() - 2, 1);
    for (size_t i = 0; i + 2 < s.size(); ++i) b[y.size() - s.size() + i] = s[i];
    return b;
  };
  auto single = [](const std::vector<int64_t>& b) {
    for (int64_t d : b)
      if (d != 1) return false;
    return true;
  };
  const auto ob = batch(y), ab = batch(input_types[0].shape), bb = batch(input_types[1].shape);
  return (ab == ob || single(ob)) && (bb == ob || single(bb));
}

namespace {

// The feed's output 0 goes to the one op that reads it, and nowhere else.
bool sole_reader(const EpilogueFeed& f) {
  return f.op && f.op->outputs.size() == 1 && f.uses == 1 && !f.graph_output && !f.constant;
}

}  // namespace

char runs_in_epilogue(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds) {
  if (x.inputs.empty() && input_types.empty()) return kNotAbsorbed;
  if (epilogue_activation(x) != EpilogueActivation::kNone) {
    const EpilogueFeed& f = feeds[0];
    if (!sole_reader(f)) return kNotAbsorbed;
    return conv_takes_epilogue(*f.op) || (f.op->type == OpType::kAdd && f.absorbed == kConvEpilogue) ? kConvEpilogue
                                                                                                     : kNotAbsorbed;
  }
  if (x.type != OpType::kAdd || input_types.size() != 2 || x.outputs.size() != 1) return kNotAbsorbed;
  for (int slot = 0; slot < 2; ++slot) {
    const EpilogueFeed& f = feeds[slot];
    if (!sole_reader(f)) continue;
    const TensorType& y = f.op->outputs[0];
    if (!(x.outputs[0] == y)) continue;
    const TensorType& other = input_types[1 - slot];
    if (conv_takes_epilogue(*f.op) && other == y) return kConvEpilogue;
    if (f.op_inputs && gemm_takes_epilogue(*f.op, *f.op_inputs) && other.dtype == kFloat32 &&
        is_row_vector(other.shape, y.shape.back()))
      return kGemmBias;
  }
  return kNotAbsorbed;
}

std::vector<char> epilogue_ops(const Graph& graph, const std::vector<char>& constant) {
  const int n = graph.num_ops();
  std::vector<char> absorbed(n, 0);
  std::set<std::pair<int, int>> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert({r.op, r.index});
  const auto consumers = graph.consumers();
  std::vector<TensorType> in, feed_inputs[2];
  for (int id = 0; id < n; ++id) {  // op ids are a topological order: an Add before its readers
    const Op& x = graph.op(id);
    if (constant[id] || (x.type != OpType::kAdd && epilogue_activation(x) == EpilogueActivation::kNone)) continue;
    EpilogueFeed feeds[2];
    in.clear();
    for (size_t k = 0; k < x.inputs.size(); ++k) {
      const TensorRef& t = x.inputs[k];
      in.push_back(graph.tensor_type(t));
      if (k >= 2 || t.index != 0) continue;
      const Op& p = graph.op(t.op);
      feed_inputs[k].clear();
      for (const TensorRef& r : p.inputs) feed_inputs[k].push_back(graph.tensor_type(r));
      feeds[k] = {&p, &feed_inputs[k], static_cast<bool>(constant[t.op]),
                  static_cast<int>(consumers[t.op][0].size()), outputs.count({t.op, 0}) > 0, absorbed[t.op]};
    }
    absorbed[id] = runs_in_epilogue(x, in, feeds);
  }
  return absorbed;
}

}  // namespace taso
