// Executor-side convolution epilogue fusion (see fusion.h).
#include "fusion.h"

#include "kernels.h"
#include "taso/epilogue.h"

#include <set>
#include <utility>

namespace taso {
namespace cuda {

namespace {

// The epilogue code of an activation op the convolution can absorb (taso/epilogue.h), or -1.
int epilogue_activation_code(const Op& op) {
  switch (epilogue_activation(op)) {
    case EpilogueActivation::kRelu: return kActRelu;
    case EpilogueActivation::kRelu6: return kEpilogueRelu6;
    case EpilogueActivation::kHardSwish: return kEpilogueHardSwish;
    default: return -1;
  }
}

}  // namespace

FusionPlan plan_conv_fusions(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                             const std::vector<char>& constant, bool enabled, const std::vector<char>* no_fuse) {
  const int n = graph.num_ops();
  FusionPlan plan;
  plan.at.assign(n, {});
  plan.skip.assign(n, 0);
  if (!enabled) return plan;
  std::set<std::pair<int, int>> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert({r.op, r.index});
  const auto consumers = graph.consumers();
  std::vector<char> claimed(n, 0);
  auto usable = [&](int id) { return id >= 0 && needed[id] && !host_fed[id] && !constant[id] && !claimed[id]; };
  // The one op reading output 0 of `id` (and its input slot), or {-1, -1}.
  auto sole_reader = [&](int id) -> std::pair<int, int> {
    const Op& op = graph.op(id);
    if (op.outputs.size() != 1 || outputs.count({id, 0}) || consumers[id][0].size() != 1) return {-1, -1};
    return consumers[id][0][0];
  };
  for (int id = 0; id < n; ++id) {
    const Op& conv = graph.op(id);
    if (!conv_takes_epilogue(conv) || !usable(id)) continue;
    const TensorType& y = conv.outputs[0];
    auto [reader, slot] = sole_reader(id);
    if (!usable(reader)) continue;
    const Op& r = graph.op(reader);
    ConvFusion f;
    f.conv = id;
    int last = -1, mid = -1;
    if (int act = epilogue_activation_code(r); act >= 0) {
      last = reader;
      f.activation = act;
    } else if (r.type == OpType::kAdd) {
      const TensorRef& other = r.inputs[1 - slot];
      if (other.op == id || !(graph.tensor_type(other) == y) || !(r.outputs[0] == y)) continue;
      f.residual = true;
      f.residual_ref = other;
      last = reader;
      auto [relu, relu_slot] = sole_reader(reader);
      (void)relu_slot;
      if (usable(relu) && epilogue_activation_code(graph.op(relu)) >= 0) {
        mid = reader;
        last = relu;
        f.activation = epilogue_activation_code(graph.op(relu));
      }
    } else {
      continue;
    }
    if (no_fuse && (*no_fuse)[id]) {
      // The plan keeps this epilogue separate: no other conv (the other operand of a
      // residual Add) may fold it either, so a plan's choices stay independent.
      claimed[last] = 1;
      if (mid >= 0) claimed[mid] = 1;
      continue;
    }
    claimed[id] = claimed[last] = 1;
    plan.skip[id] = 1;
    if (mid >= 0) {
      claimed[mid] = plan.skip[mid] = 1;
      ++plan.fused_ops;
    }
    plan.at[last] = f;
    ++plan.fused_ops;
  }
  return plan;
}

}  // namespace cuda
}  // namespace taso
