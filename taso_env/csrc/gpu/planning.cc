// The executor's planning passes (see planning.h).
#include "planning.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "constant_sharing.h"
#include "taso/cost_model.h"  // constant_ops
#include "taso/errors.h"
#include "tuning.h"  // validate_plan

namespace taso {
namespace cuda {
namespace {

// What the buffer-slicing decisions below read: per op, as the earlier passes decided it.
struct SliceFacts {
  const Graph& graph;
  const std::vector<char>& needed;
  const std::vector<char>& host_fed;
  const std::vector<char>& constant;
  const std::vector<char>& alias;  // Reshape-likes: their input's buffer
  const StepPlan& plan;
  const TensorBytes& bytes;  // stored bytes of a tensor

  // A Split or Concat that runs per run (needed, computed per run, not host-fed, not
  // taken by a fusion) along an axis with every dim before it 1 (`shape`: the whole
  // tensor): its pieces are contiguous slices of the whole.
  bool sliceable(int id, const std::vector<int64_t>& shape) const {
    if (!needed[id] || host_fed[id] || constant[id] || plan.skipped(id)) return false;
    const size_t axis = static_cast<size_t>(graph.op(id).attrs.get_int("axis"));
    return axis < shape.size() && std::all_of(shape.begin(), shape.begin() + axis, [](int64_t d) { return d == 1; });
  }
  // Byte offsets of consecutive pieces, or empty when one would start unaligned.
  std::vector<size_t> aligned_starts(const std::vector<TensorType>& pieces) const {
    std::vector<size_t> starts;
    size_t at = 0;
    for (const TensorType& t : pieces) {
      if (at % kArenaAlign) return {};
      starts.push_back(at);
      at += bytes(t);
    }
    return starts;
  }
};

// Splits that run no kernel (a batch-1 RNN's gates after merged GEMMs, a channel split
// after merged convolutions): each part is its slice of the input's buffer. Only where
// the input is written by a step (not a view the plan skips, not a tensor inside a fused
// step). Returns the parts' byte offsets from the input's start, per such Split (empty
// for the others).
std::vector<std::vector<size_t>> contiguous_split_parts(const SliceFacts& f) {
  const Graph& graph = f.graph;
  std::vector<std::vector<size_t>> parts(graph.num_ops());
  auto written = [&](TensorRef t) {
    while (f.alias[t.op]) t = graph.op(t.op).inputs[0];
    return !f.plan.skipped(t.op);
  };
  for (int id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.type == OpType::kSplit && f.sliceable(id, graph.tensor_type(op.inputs[0]).shape) && written(op.inputs[0]))
      parts[id] = f.aligned_starts(op.outputs);
  }
  return parts;
}

// Concats that run no kernel (a channel concat of a branching block): each input is
// written by a step of its own (not a source, constant, host-fed or skipped op, not a
// Reshape-like alias or a Split, one output; an inner in-place Concat counts) whose only
// reader is this Concat and which is no graph output; such a producer writes straight
// into its slice of the Concat's buffer. Returns the inputs' byte offsets from the
// Concat's start, per such Concat (empty for the others).
std::vector<std::vector<size_t>> in_place_concat_inputs(const SliceFacts& f) {
  const Graph& graph = f.graph;
  std::vector<std::vector<size_t>> slots(graph.num_ops());
  std::set<std::pair<int, int>> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert({r.op, r.index});
  const auto consumers = graph.consumers();
  auto own_step = [&](const TensorRef& t) {
    const Op& p = graph.op(t.op);
    return !is_source_op(p.type) && p.type != OpType::kSplit && p.outputs.size() == 1 && f.needed[t.op] &&
           !f.host_fed[t.op] && !f.constant[t.op] && !f.alias[t.op] && !f.plan.skipped(t.op) &&
           !outputs.count({t.op, t.index}) && consumers[t.op][t.index].size() == 1;
  };
  for (int id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.type != OpType::kConcat || !f.sliceable(id, op.outputs[0].shape) ||
        !std::all_of(op.inputs.begin(), op.inputs.end(), own_step))
      continue;
    std::vector<TensorType> pieces;
    for (const TensorRef& t : op.inputs) pieces.push_back(graph.tensor_type(t));
    slots[id] = f.aligned_starts(pieces);
  }
  return slots;
}

}  // namespace

TensorBytes stored_tensor_bytes(int float_dtype) {
  return [float_dtype](const TensorType& t) {
    return static_cast<size_t>(t.num_elements()) * dtype_size(stored_dtype(t.dtype, float_dtype));
  };
}

void validate_options(const Graph& graph, const ExecutorOptions& options) {
  const int n_ops = graph.num_ops();
  validate_plan(graph, options.plan);
  for (const auto& known : options.known_scalars) {
    const int id = known.first;
    if (id < 0 || id >= n_ops) throw IndexError("known scalar names op id " + std::to_string(id) + " out of range");
    const Op& op = graph.op(id);
    const int dt = op.outputs[0].dtype;
    if (op.type != OpType::kWeight || op.outputs[0].num_elements() != 1 ||
        (dt != kInt64 && dt != kInt32 && dt != kFloat32 && dt != kFloat64))
      throw ValueError("known scalar op '" + op.name + "' is not a one-element int32 / int64 / float Weight");
  }
  if (options.arena_offset % kArenaAlign)
    throw ValueError("arena offset must be a multiple of " + std::to_string(kArenaAlign) + " bytes, got " +
                     std::to_string(options.arena_offset));
  for (int id : options.host_fed_ops)
    if (id < 0 || id >= n_ops) throw IndexError("host-fed op id " + std::to_string(id) + " out of range");
}

std::vector<char> host_fed_mask(const Graph& graph, const std::vector<int>& host_fed_ops) {
  std::vector<char> host_fed(graph.num_ops(), 0);
  for (int id : host_fed_ops) host_fed.at(id) = 1;
  return host_fed;
}

std::vector<char> needed_ops(const Graph& graph, const std::vector<char>& host_fed) {
  std::vector<char> needed(graph.num_ops(), 0);
  std::vector<int> stack;
  for (const TensorRef& r : graph.outputs()) stack.push_back(r.op);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = 1;
    if (host_fed[id]) continue;
    for (const TensorRef& r : graph.op(id).inputs) stack.push_back(r.op);
  }
  return needed;
}

ArenaPlan plan_arena(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                     bool fuse, size_t arena_offset, const TensorBytes& bytes) {
  const int n_ops = graph.num_ops();
  ArenaPlan arena;
  arena.offsets.assign(n_ops, {});
  arena.alias.assign(n_ops, 0);
  size_t total = arena_offset;
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    arena.offsets[id].assign(op.outputs.size(), kNoOffset);
    if (!needed[id]) continue;
    bool view = op.type == OpType::kReshape || op.type == OpType::kFlatten || op.type == OpType::kIdentity ||
                (fuse && op.type == OpType::kTranspose && is_reshape_like(graph, id));
    if (view && !host_fed[id] && op.inputs.size() == 1) {
      size_t in = arena.offsets[op.inputs[0].op][op.inputs[0].index];
      if (in != kNoOffset) {
        arena.offsets[id][0] = in;
        arena.alias[id] = 1;
        continue;
      }
    }
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      arena.offsets[id][k] = total;
      total += (std::max<size_t>(bytes(op.outputs[k]), 1) + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    }
  }
  arena.bytes = std::max<size_t>(total, kArenaAlign);
  return arena;
}

ConstantFolding plan_constant_folding(const Graph& graph, const std::vector<char>& needed,
                                      const std::vector<char>& host_fed, const std::vector<char>& alias) {
  ConstantFolding folding;
  folding.constant = constant_ops(graph);
  for (int id = 0; id < graph.num_ops(); ++id)
    if (needed[id] && folding.constant[id] && !host_fed[id] && !alias[id] && !is_source_op(graph.op(id).type))
      folding.folded.push_back(id);
  return folding;
}

StepPlan fuse_steps(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                    const std::vector<char>& constant, const std::vector<char>& alias,
                    const std::vector<char>& no_fuse, const std::map<int, double>& known_scalars, bool fuse,
                    int float_dtype) {
  return plan_steps(graph, needed, host_fed, constant, alias, no_fuse, known_scalars, fuse, float_dtype);
}

InPlaceViews place_views(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                         const std::vector<char>& constant, const ArenaPlan& arena, const StepPlan& steps, bool fuse,
                         const TensorBytes& bytes) {
  const int n_ops = graph.num_ops();
  InPlaceViews v;
  v.split_parts.assign(n_ops, {});
  v.concat_slots.assign(n_ops, {});
  v.offsets = arena.offsets;
  if (fuse) {
    const SliceFacts facts{graph, needed, host_fed, constant, arena.alias, steps, bytes};
    v.concat_slots = in_place_concat_inputs(facts);
    v.split_parts = contiguous_split_parts(facts);
  }
  std::vector<std::vector<size_t>>& offsets = v.offsets;
  for (int id = n_ops - 1; id >= 0; --id) {  // an outer Concat places an inner one before it places its inputs
    const Op& op = graph.op(id);
    for (size_t k = 0; k < v.concat_slots[id].size(); ++k)
      offsets[op.inputs[k].op][op.inputs[k].index] = offsets[id][0] + v.concat_slots[id][k];
  }
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    if (!v.concat_slots[id].empty()) v.in_place_concats.push_back(id);
    if (!v.split_parts[id].empty()) {
      const size_t in = offsets[op.inputs[0].op][op.inputs[0].index];
      for (size_t k = 0; k < op.outputs.size(); ++k) offsets[id][k] = in + v.split_parts[id][k];
      v.in_place_splits.push_back(id);
    } else if (arena.alias[id]) {
      offsets[id][0] = offsets[op.inputs[0].op][op.inputs[0].index];
    }
  }
  return v;
}

std::vector<PlannedStep> build_step_plan(const Graph& graph, const std::vector<char>& needed,
                                         const std::vector<char>& host_fed, const std::vector<char>& alias,
                                         const std::vector<char>& constant, const StepPlan& steps,
                                         const InPlaceViews& in_place, const std::vector<int>& fused_into) {
  const int n_ops = graph.num_ops();
  std::vector<PlannedStep> out;
  std::vector<int> at(n_ops, -1);  // op -> index into out of the step it writes
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    if (!needed[id] || is_source_op(op.type) || host_fed[id]) continue;
    if (alias[id] || steps.skipped(id) || !in_place.split_parts[id].empty() || !in_place.concat_slots[id].empty())
      continue;
    PlannedStep step;
    step.op = id;
    if (steps.convs.at[id].conv >= 0) {
      step.call = StepCall::kFusedConv;
    } else if (steps.gemms.at[id] >= 0) {
      step.call = StepCall::kGemm;
    } else if (steps.chains.at[id] >= 0) {
      step.call = StepCall::kChain;
    } else if (steps.viewable[id]) {
      step.call = StepCall::kStridedCopy;
    }
    // Convolution and GEMM steps run per run; the others fold when their op is constant.
    step.constant = step.call != StepCall::kFusedConv && step.call != StepCall::kGemm && constant[id];
    at[id] = static_cast<int>(out.size());
    out.push_back(std::move(step));
  }
  for (int id = 0; id < n_ops; ++id) {
    if (at[id] >= 0) {
      out[at[id]].ops.push_back(id);
    } else if (fused_into[id] >= 0 && fused_into[id] != id && at[fused_into[id]] >= 0) {
      out[at[fused_into[id]]].ops.push_back(id);  // an op whose work another op's step does
    }
  }
  for (PlannedStep& s : out) std::sort(s.ops.begin(), s.ops.end());
  return out;
}

ExecutorPlan plan_executor(const Graph& graph, const ExecutorOptions& options) {
  const int n_ops = graph.num_ops();
  validate_options(graph, options);
  const int float_dtype = float_storage(options.math);
  const TensorBytes bytes = stored_tensor_bytes(float_dtype);
  std::vector<char> no_fuse(n_ops, 0);
  for (const auto& [id, p] : options.plan) no_fuse[id] = p.fuse == 0;
  ExecutorPlan plan;
  PlanningReport& r = plan.report;
  r.host_fed = host_fed_mask(graph, options.host_fed_ops);
  r.needed = needed_ops(graph, r.host_fed);
  r.arena = plan_arena(graph, r.needed, r.host_fed, options.fuse, options.arena_offset, bytes);
  r.constants = plan_constant_folding(graph, r.needed, r.host_fed, r.arena.alias);
  plan.fusion = fuse_steps(graph, r.needed, r.host_fed, r.constants.constant, r.arena.alias, no_fuse,
                           options.known_scalars, options.fuse, float_dtype);
  record_fused_steps(graph, plan.fusion, &r.fused_into, &r.fused_kind);
  r.in_place = place_views(graph, r.needed, r.host_fed, r.constants.constant, r.arena, plan.fusion, options.fuse,
                           bytes);
  r.fused_ops = plan.fusion.fused_ops + static_cast<int>(r.in_place.in_place_concats.size()) +
                static_cast<int>(r.in_place.in_place_splits.size());
  r.steps = build_step_plan(graph, r.needed, r.host_fed, r.arena.alias, r.constants.constant, plan.fusion,
                            r.in_place, r.fused_into);
  return plan;
}

PlanningReport planning_report(const Graph& graph, const ExecutorOptions& options) {
  const Graph shared = share_equal_constants(graph, options.host_fed_ops);
  return plan_executor(shared, options).report;
}

}  // namespace cuda
}  // namespace taso
