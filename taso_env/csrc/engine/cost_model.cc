// The cost-model interface (constant folding, sums) and the roofline model.
#include <algorithm>

#include "taso/cost_model.h"
#include "taso/errors.h"
#include "taso/epilogue.h"
#include "taso/weight_residency.h"

namespace taso {

bool is_constant_op(OpType type, bool has_inputs, bool all_inputs_constant) {
  if (is_constant_source(type)) return true;
  if (is_source_op(type) || !has_inputs || type == OpType::kOpaque) return false;
  return all_inputs_constant;
}

std::vector<char> constant_ops(const Graph& graph) {
  std::vector<char> constant(graph.num_ops(), 0);
  for (int i = 0; i < graph.num_ops(); ++i) {
    const Op& op = graph.op(i);
    bool all = true;
    for (const TensorRef& r : op.inputs) all = all && constant[r.op];
    constant[i] = is_constant_op(op.type, !op.inputs.empty(), all);
  }
  return constant;
}

double CostModel::op_cost_ms(const Graph& graph, int op_id, const std::vector<char>& constant) const {
  const Op& op = graph.op(op_id);
  if (is_source_op(op.type) || constant[op_id]) return 0.0;
  std::vector<TensorType> in;
  in.reserve(op.inputs.size());
  for (const TensorRef& r : op.inputs) in.push_back(graph.tensor_type(r));
  return compute_cost_ms(op, in);
}

std::vector<double> CostModel::op_costs_ms(const Graph& graph) const {
  std::vector<char> constant = constant_ops(graph);
  std::vector<char> absorbed;
  if (runs_fused_steps()) absorbed = fused_step_ops(graph, constant);
  std::vector<double> costs(graph.num_ops());
  for (int i = 0; i < graph.num_ops(); ++i)
    costs[i] = absorbed.empty() ? op_cost_ms(graph, i, constant)
                                : fused_step_units(absorbed[i], cost_units(op_cost_ms(graph, i, constant))) * kCostUnitMs;
  if (prices_weight_residency()) {  // each GEMV's share, in cost units as search sums it
    const WeightResidency residency(graph, constant, graph.op_hashes());
    for (int i = 0; i < graph.num_ops(); ++i)
      if (const int64_t cold = residency.op_units(i)) costs[i] = (cost_units(costs[i]) + cold) * kCostUnitMs;
  }
  return costs;
}

double CostModel::graph_cost_ms(const Graph& graph) const {
  double total = 0;
  for (double c : op_costs_ms(graph)) total += c;
  return total;
}

int64_t CostModel::graph_cost_units(const Graph& graph) const {
  int64_t total = 0;
  for (double c : op_costs_ms(graph)) total += cost_units(c);
  return total;
}

// Launch overhead and kernel latency are the H100 figures of docs/gpu.md (1.2 us per
// kernel in a CUDA graph; small element-wise kernels run 1-2 us). The efficiencies are
// calibrated against PyTorch on an H100 (batch 1, strict fp32): ResNet-50 near its
// 2.20 ms CUDA-graph replay (batch-1 convolutions fill a small part of the machine) and
// BERT-base near its 2.85 ms of kernel time (GEMMs do better).
DeviceProfile device_profile(const std::string& name) {
  if (name == "h100") return {"h100", 67e12, 3.35e12, 1.2, 1.5, 3.0, 0.072, 0.24, 0.6};
  if (name == "h100-tf32") return {"h100-tf32", 495e12, 3.35e12, 1.2, 1.5, 3.0, 0.02, 0.06, 0.6};
  if (name == "a100") return {"a100", 19.5e12, 2.0e12, 1.5, 2.0, 4.0, 0.1, 0.3, 0.6};
  if (name == "cpu") return {"cpu", 1e11, 2e10, 0.5, 0.0, 0.0, 0.5, 0.5, 0.5};
  std::string known;
  for (const std::string& n : device_profile_names()) known += (known.empty() ? "" : ", ") + n;
  throw ValueError("unknown device profile '" + name + "' (known: " + known + ")");
}

std::vector<std::string> device_profile_names() { return {"h100", "h100-tf32", "a100", "cpu"}; }

double AnalyticCostModel::compute_cost_ms(const Op& op, const std::vector<TensorType>& input_types) const {
  OpWork w = compute_op_work(op, input_types);
  bool gemm = op.type == OpType::kMatMul || op.type == OpType::kGemm;
  bool library = gemm || op.type == OpType::kConv2D;
  double efficiency = gemm ? profile_.gemm_efficiency : profile_.compute_efficiency;
  double compute_s = w.flops / (profile_.peak_flops * efficiency);
  double memory_s = (w.bytes_read + w.bytes_written) / (profile_.memory_bandwidth * profile_.memory_efficiency);
  double fixed_us = profile_.launch_overhead_us + (library ? profile_.library_latency_us : profile_.kernel_latency_us);
  return (fixed_us + std::max(compute_s, memory_s) * 1e6) * 1e-3;
}

}  // namespace taso
