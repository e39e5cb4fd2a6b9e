// Roofline cost model over device profiles.
#include <algorithm>

#include "taso/cost_model.h"
#include "taso/errors.h"

namespace taso {

// Efficiencies are calibrated so that ResNet-50 (batch 1, strict fp32) lands near the
// 2.2 ms that cuDNN reaches on an H100 in a CUDA-graph replay (shared/GPU.md): batch-1
// convolutions fill a small part of the machine.
DeviceProfile device_profile(const std::string& name) {
  if (name == "h100") return {"h100", 67e12, 3.35e12, 1.2, 0.06, 0.6};
  if (name == "h100-tf32") return {"h100-tf32", 495e12, 3.35e12, 1.2, 0.02, 0.6};
  if (name == "a100") return {"a100", 19.5e12, 2.0e12, 1.5, 0.1, 0.6};
  if (name == "cpu") return {"cpu", 1e11, 2e10, 0.5, 0.5, 0.5};
  std::string known;
  for (const std::string& n : device_profile_names()) known += (known.empty() ? "" : ", ") + n;
  throw ValueError("unknown device profile '" + name + "' (known: " + known + ")");
}

std::vector<std::string> device_profile_names() { return {"h100", "h100-tf32", "a100", "cpu"}; }

double AnalyticCostModel::op_cost_ms(const Graph& graph, int op_id) const {
  const Op& op = graph.op(op_id);
  if (is_source_op(op.type)) return 0.0;
  OpWork w = graph.op_work(op_id);
  double compute_s = w.flops / (profile_.peak_flops * profile_.compute_efficiency);
  double memory_s = (w.bytes_read + w.bytes_written) / (profile_.memory_bandwidth * profile_.memory_efficiency);
  return profile_.launch_overhead_us * 1e-3 + std::max(compute_s, memory_s) * 1e3;
}

std::vector<double> AnalyticCostModel::op_costs_ms(const Graph& graph) const {
  std::vector<double> costs(graph.num_ops());
  for (int i = 0; i < graph.num_ops(); ++i) costs[i] = op_cost_ms(graph, i);
  return costs;
}

double AnalyticCostModel::graph_cost_ms(const Graph& graph) const {
  double total = 0;
  for (int i = 0; i < graph.num_ops(); ++i) total += op_cost_ms(graph, i);
  return total;
}

}  // namespace taso
