// Equal constants stored once (see constant_sharing.h).
#include "constant_sharing.h"

#include <map>
#include <unordered_map>
#include <utility>

#include "taso/cost_model.h"  // constant_ops

namespace taso {
namespace cuda {

Graph share_equal_constants(const Graph& graph, const std::vector<int>& host_fed) {
  const int n = graph.num_ops();
  const std::vector<char> constant = constant_ops(graph);
  std::vector<char> keep(n, 0);
  for (int id : host_fed)
    if (id >= 0 && id < n) keep[id] = 1;
  const std::vector<uint64_t> hashes = graph.op_hashes();  // equal cones hash equal; checked below
  std::vector<int> same(n);                                // the op each op's readers read instead
  std::unordered_multimap<uint64_t, int> firsts;           // derived constants kept, by hash
  // A constant Concat is also known by its axis and the tensors it joins once the constant
  // Concats it reads along the same axis are opened (greedy's Concat(Concat(w0, w1), w2)
  // and a later step's Concat(w0, Concat(w1, w2)) are one value).
  std::vector<std::vector<TensorRef>> leaves(n);
  std::map<std::pair<int64_t, std::vector<TensorRef>>, int> concats;
  auto reads = [&](const Op& op) {
    std::vector<TensorRef> in = op.inputs;
    for (TensorRef& r : in) r.op = same[r.op];
    return in;
  };
  for (int id = 0; id < n; ++id) {
    same[id] = id;
    const Op& op = graph.op(id);
    if (!constant[id] || keep[id] || is_source_op(op.type)) continue;
    const std::vector<TensorRef> in = reads(op);
    if (op.type == OpType::kConcat && op.outputs.size() == 1) {
      const auto rank = static_cast<int64_t>(op.outputs[0].shape.size());
      const int64_t axis = (op.attrs.get_int("axis") + rank) % rank;
      for (const TensorRef& r : in) {
        const Op& from = graph.op(r.op);
        bool opened = from.type == OpType::kConcat && !leaves[r.op].empty() &&
                      (from.attrs.get_int("axis") + rank) % rank == axis;
        if (opened) leaves[id].insert(leaves[id].end(), leaves[r.op].begin(), leaves[r.op].end());
        else leaves[id].push_back(r);
      }
      auto [at, fresh] = concats.emplace(std::make_pair(axis, leaves[id]), id);
      if (!fresh && graph.op(at->second).outputs == op.outputs) {
        same[id] = at->second;
        continue;
      }
    }
    auto [lo, hi] = firsts.equal_range(hashes[id]);
    for (auto it = lo; it != hi; ++it) {
      const Op& first = graph.op(it->second);
      if (first.type == op.type && first.attrs == op.attrs && first.outputs == op.outputs && reads(first) == in) {
        same[id] = it->second;
        break;
      }
    }
    if (same[id] == id) firsts.emplace(hashes[id], id);
  }
  Graph out;
  out.reserve(n);
  for (int id = 0; id < n; ++id) {
    Op op = graph.op(id);
    op.inputs = reads(op);
    out.add_typed_op(std::move(op));
  }
  for (size_t k = 0; k < graph.outputs().size(); ++k) out.add_output(graph.outputs()[k], graph.output_names()[k]);
  return out;
}

}  // namespace cuda
}  // namespace taso
