// Cost models estimate the runtime of each op. A graph's estimated cost is the sum of
// its op costs; ops whose value is known before run time (weights, constants and ops
// computed only from them) are folded before deployment and cost nothing.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "taso/graph.h"

namespace taso {

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Runtime (ms) of one computing op with the given input types.
  virtual double compute_cost_ms(const Op& op, const std::vector<TensorType>& input_types) const = 0;

  // Whether the ops the CUDA executor runs in another op's step (taso/epilogue.h:
  // convolution and GEMM epilogues, element-wise chains) cost nothing: true for the
  // costs of that executor, which fuses them whatever the graph says.
  virtual bool runs_fused_steps() const { return false; }

  // Whether the graph cost includes the weight-residency term (taso/weight_residency.h:
  // GEMVs read their weights cold once a run's weights overflow the L2), charged to the
  // GEMV ops: the table model's, where asked for (TableCostModel::set_weight_residency).
  virtual bool prices_weight_residency() const { return false; }

  // Cost of op `op_id` of `graph` given which ops are constant (0 for sources and
  // constant ops).
  double op_cost_ms(const Graph& graph, int op_id, const std::vector<char>& constant) const;
  // Per-op costs (ms), indexed by op id (0 for ops run in another op's step where
  // runs_fused_steps(); GEMVs with their share of the weight-residency term where
  // prices_weight_residency()).
  std::vector<double> op_costs_ms(const Graph& graph) const;
  double graph_cost_ms(const Graph& graph) const;
  // The graph cost in integer units of kCostUnitMs, summed op by op: exact and
  // order-independent, so that search can add and subtract op costs without drift.
  int64_t graph_cost_units(const Graph& graph) const;
};

// Search sums op costs as integers of this many ms (1 fs): exact, order-independent, and
// room for graphs of up to 9e6 ms.
constexpr double kCostUnitMs = 1e-12;
inline int64_t cost_units(double ms) { return std::llround(ms / kCostUnitMs); }

// Whether an op is constant (known before run time) given its type and whether all of
// its inputs are: the rule used by constant_ops, shared with rule planning.
bool is_constant_op(OpType type, bool has_inputs, bool all_inputs_constant);

// constant[i] is true when op i's value is known before run time.
std::vector<char> constant_ops(const Graph& graph);

struct DeviceProfile {
  std::string name;
  double peak_flops;          // FLOP/s of the math mode in use
  double memory_bandwidth;    // bytes/s
  double launch_overhead_us;  // per op, as in a CUDA-graph replay
  double kernel_latency_us;   // fixed time of any kernel (ramp-up and tail), added to its work
  double library_latency_us;  // the same for convolution / GEMM library kernels
  double compute_efficiency;  // fraction of peak that real kernels reach (convolutions, ...)
  double gemm_efficiency;     // the same for MatMul / Gemm (cuBLAS)
  double memory_efficiency;   // fraction of bandwidth that real kernels reach
};

// Built-in profiles: "h100" (default, strict fp32), "h100-tf32", "a100", "cpu".
DeviceProfile device_profile(const std::string& name);
std::vector<std::string> device_profile_names();

// Roofline with fixed costs: launch overhead + kernel latency + max(compute time,
// memory time). The fixed part is what fusing and merging ops saves.
class AnalyticCostModel : public CostModel {
 public:
  explicit AnalyticCostModel(DeviceProfile profile) : profile_(std::move(profile)) {}
  const DeviceProfile& profile() const { return profile_; }
  double compute_cost_ms(const Op& op, const std::vector<TensorType>& input_types) const override;

 private:
  DeviceProfile profile_;
};

}  // namespace taso
