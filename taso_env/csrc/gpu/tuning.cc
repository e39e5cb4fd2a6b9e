// The executor's side of the auto-tuner (see tuning.h).
#include "tuning.h"

#include "fusion.h"
#include "planning.h"
#include "taso/cost_model.h"
#include "taso/errors.h"

namespace taso {
namespace cuda {
namespace {

// The executor's view of the graph: which ops the outputs need, which are host-fed, which
// are constant (the executor's planning passes, planning.h).
struct GraphView {
  std::vector<char> needed, host_fed, constant;
};

GraphView view_of(const Graph& graph, const std::vector<int>& host_fed_ops) {
  for (int id : host_fed_ops)
    if (id < 0 || id >= graph.num_ops()) throw IndexError("host-fed op id " + std::to_string(id) + " out of range");
  GraphView v;
  v.host_fed = host_fed_mask(graph, host_fed_ops);
  v.needed = needed_ops(graph, v.host_fed);
  v.constant = constant_ops(graph);
  return v;
}

}  // namespace

void validate_plan(const Graph& graph, const std::map<int, OpPlan>& plan) {
  for (const auto& [id, p] : plan) {
    if (id < 0 || id >= graph.num_ops())
      throw IndexError("tuning plan names op id " + std::to_string(id) + ", the graph has " +
                       std::to_string(graph.num_ops()) + " ops");
    const Op& op = graph.op(id);
    bool conv = op.type == OpType::kConv2D;
    if (!conv && (p.conv_algo >= 0 || p.fuse == 0))
      throw ValueError("tuning plan: op '" + op.name + "' is a " + op_type_name(op.type) +
                       ", not a Conv2D: it has no convolution algorithm or epilogue fusion to choose");
    if (p.threads != 0 && (p.threads < 32 || p.threads > 1024 || p.threads % 32 != 0))
      throw ValueError("tuning plan: op '" + op.name + "': threads per block must be a multiple of 32 in [32, 1024], got " +
                       std::to_string(p.threads));
    if (p.items_per_thread < 0 || p.items_per_thread > 64)
      throw ValueError("tuning plan: op '" + op.name + "': elements per thread must be in [1, 64], got " +
                       std::to_string(p.items_per_thread));
  }
}

std::vector<FusionSite> fusion_sites(const Graph& graph, const std::vector<int>& host_fed_ops, bool fuse) {
  GraphView v = view_of(graph, host_fed_ops);
  FusionPlan plan = plan_conv_fusions(graph, v.needed, v.host_fed, v.constant, fuse);
  std::vector<FusionSite> sites;
  for (int id = 0; id < graph.num_ops(); ++id) {
    const ConvFusion& f = plan.at[id];
    if (f.conv < 0) continue;
    FusionSite s;
    s.conv = f.conv;
    s.last = id;
    s.residual = f.residual;
    s.activation = f.activation;
    // An Add folded before an activation: the residual Add reading the conv.
    if (f.residual && graph.op(id).type != OpType::kAdd) {
      for (const TensorRef& r : graph.op(id).inputs)
        if (graph.op(r.op).type == OpType::kAdd && plan.skip[r.op]) s.mid = r.op;
    }
    sites.push_back(s);
  }
  return sites;
}

std::vector<ConvAlgo> conv_candidates(const Graph& graph, int conv_id, bool fused_epilogue,
                                      const std::vector<int>& host_fed_ops, MathMode math,
                                      const AlgoSearch& search) {
  if (conv_id < 0 || conv_id >= graph.num_ops()) throw IndexError("op id " + std::to_string(conv_id) + " out of range");
  const Op& op = graph.op(conv_id);
  if (op.type != OpType::kConv2D)
    throw ValueError("op '" + op.name + "' is a " + op_type_name(op.type) + ", not a Conv2D");
  bool residual = false;
  int activation = static_cast<int>(op.attrs.get_int("activation"));
  if (fused_epilogue) {
    bool found = false;
    for (const FusionSite& s : fusion_sites(graph, host_fed_ops, true)) {
      if (s.conv != conv_id) continue;
      residual = s.residual;
      activation = s.activation;
      found = true;
    }
    if (!found) throw ValueError("Conv2D '" + op.name + "' has no epilogue the executor fuses");
  }
  std::vector<TensorType> in;
  for (const TensorRef& r : op.inputs) in.push_back(graph.tensor_type(r));
  ConvConfig cfg = make_conv_config(op, in, residual, activation, math);
  std::vector<ConvAlgo> out;
  cfg.timings = &out;
  cfg.search = search;
  ConvOp conv(cfg);
  return out;
}

}  // namespace cuda
}  // namespace taso
