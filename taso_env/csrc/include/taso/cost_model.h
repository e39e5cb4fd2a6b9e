// Analytic (roofline) cost model: each op costs a launch overhead plus the larger of
// its compute time and its memory time on a device profile. No computing op is free.
#pragma once

#include <string>
#include <vector>

#include "taso/graph.h"

namespace taso {

struct DeviceProfile {
  std::string name;
  double peak_flops;          // FLOP/s of the math mode in use
  double memory_bandwidth;    // bytes/s
  double launch_overhead_us;  // per op, as in a CUDA-graph replay
  double compute_efficiency;  // fraction of peak that real kernels reach
  double memory_efficiency;   // fraction of bandwidth that real kernels reach
};

// Built-in profiles: "h100" (default, strict fp32), "h100-tf32", "a100", "cpu".
DeviceProfile device_profile(const std::string& name);
std::vector<std::string> device_profile_names();

class AnalyticCostModel {
 public:
  explicit AnalyticCostModel(DeviceProfile profile) : profile_(std::move(profile)) {}
  const DeviceProfile& profile() const { return profile_; }
  // Estimated runtime of one op in milliseconds (0 for Input / Weight).
  double op_cost_ms(const Graph& graph, int op_id) const;
  // Per-op estimated runtimes (ms), indexed by op id.
  std::vector<double> op_costs_ms(const Graph& graph) const;
  // Sum of op costs (ms).
  double graph_cost_ms(const Graph& graph) const;

 private:
  DeviceProfile profile_;
};

}  // namespace taso
