// The executor's fusion decisions (see step_plan.h).
#include "step_plan.h"

namespace taso {
namespace cuda {

StepPlan plan_steps(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                    const std::vector<char>& constant, const std::vector<char>& alias,
                    const std::vector<char>& no_fuse, const std::map<int, double>& known_scalars, bool fuse,
                    int float_dtype) {
  const int n = graph.num_ops();
  StepPlan plan;
  plan.convs = plan_conv_fusions(graph, needed, host_fed, constant, fuse, &no_fuse);
  // Ops a step computes that no earlier fusion took.
  std::vector<char> usable(n, 0);
  for (int id = 0; id < n; ++id)
    usable[id] = needed[id] && !host_fed[id] && !constant[id] && !is_source_op(graph.op(id).type) && !alias[id] &&
                 !plan.convs.skip[id] && plan.convs.at[id].conv < 0;
  plan.gemms = plan_gemm_fusions(graph, usable, alias, known_scalars, fuse);
  for (int id = 0; id < n; ++id) usable[id] = usable[id] && !plan.gemms.skip[id] && plan.gemms.at[id] < 0;
  if (fuse) {
    plan.chains = plan_elementwise_chains(graph, usable);
  } else {
    plan.chains.at.assign(n, -1);
    plan.chains.skip.assign(n, 0);
  }
  // Steps that read through views: GEMMs with their folded ops, element-wise chains, and
  // the view ops that run (strided copies).
  std::vector<char> view_reader(n, 0);
  for (const GemmFusion& f : plan.gemms.fusions) {
    view_reader[f.gemm] = 1;
    for (int k : f.folded) view_reader[k] = 1;
  }
  for (const ElementwiseChain& c : plan.chains.chains) {
    for (int k : c.ops) view_reader[k] = 1;
    if (c.softmax >= 0) view_reader[c.softmax] = 1;
  }
  plan.viewable.assign(n, 0);
  for (int id = 0; id < n; ++id) {
    usable[id] = usable[id] && !plan.chains.skip[id] && plan.chains.at[id] < 0;
    plan.viewable[id] = fuse && usable[id] &&
                        (graph.op(id).type == OpType::kTranspose ||
                         ViewPlan::is_constant_gather(graph, id, known_scalars));
    view_reader[id] = view_reader[id] || plan.viewable[id];
  }
  plan.views = std::make_unique<ViewPlan>(graph, plan.viewable, alias, known_scalars, float_dtype);
  plan.views->decide(view_reader);
  plan.fused_ops = plan.convs.fused_ops + plan.gemms.fused_ops + plan.chains.fused_ops + plan.views->num_skipped();
  return plan;
}

void record_fused_steps(const Graph& graph, const StepPlan& plan, std::vector<int>* into, std::vector<int>* kind) {
  const int n = graph.num_ops();
  into->assign(n, -1);
  kind->assign(n, kOwnStep);
  auto record = [&](int id, int step, int k) {
    if (id == step && k != kViewStep) return;  // the step's own op
    (*into)[id] = step;
    (*kind)[id] = k;
  };
  for (int id = 0; id < n; ++id)
    if (plan.convs.at[id].conv >= 0) {
      record(plan.convs.at[id].conv, id, kConvStep);
      for (const TensorRef& t : graph.op(id).inputs)  // a residual Add before the activation
        if (plan.convs.skip[t.op] && graph.op(t.op).type != OpType::kConv2D) record(t.op, id, kConvStep);
    }
  for (const GemmFusion& f : plan.gemms.fusions) {
    record(f.gemm, f.at, kGemmStep);
    for (int k : f.folded) record(k, f.at, kGemmStep);
  }
  for (const ElementwiseChain& c : plan.chains.chains)
    for (int id : c.ops) record(id, c.last(), kChainStep);
  for (int id = 0; id < n; ++id)
    if (plan.views->skipped(id)) record(id, id, kViewStep);
}

}  // namespace cuda
}  // namespace taso
