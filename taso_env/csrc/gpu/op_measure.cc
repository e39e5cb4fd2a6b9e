// Per-op measurement on the GPU (see op_measure.h).
#include "op_measure.h"

#include <map>
#include <mutex>
#include <set>

#include "elementwise_fusion.h"
#include "executor.h"
#include "taso/cost_model.h"
#include "taso/errors.h"

namespace taso {
namespace cuda {
namespace {

std::map<std::string, double>& cache() {
  static std::map<std::string, double> c;
  return c;
}
std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

TensorRef add_input(Graph& g, const std::string& name, const TensorType& t) {
  OpSpec spec;
  spec.type = "Input";
  spec.name = name;
  spec.declared_outputs = {t};
  return {g.add_op(spec), 0};
}

// A graph of Inputs feeding one copy of `op`, whose outputs are the graph outputs.
Graph isolated_graph(const Op& op, const std::vector<TensorType>& input_types) {
  Graph g;
  Op copy = op;
  copy.inputs.clear();
  for (size_t i = 0; i < input_types.size(); ++i)
    copy.inputs.push_back(add_input(g, "in" + std::to_string(i), input_types[i]));
  int id = g.add_typed_op(copy);
  for (size_t k = 0; k < op.outputs.size(); ++k) g.add_output({id, static_cast<int>(k)}, "out" + std::to_string(k));
  return g;
}

// Median ms of one run of `g`, `options.copies` copies back to back in one CUDA graph.
double time_graph(const Graph& g, MathMode math, const OpMeasureOptions& options, int plan_op) {
  ExecutorOptions eo;
  eo.math = math;
  eo.replicas = options.copies;
  if (options.threads || options.items_per_thread) {
    OpPlan& p = eo.plan[plan_op];
    p.threads = options.threads;
    p.items_per_thread = options.items_per_thread;
  }
  Executor ex(g, eo);
  return ex.measure(options.warmup, options.repeats, 1).median_ms;
}

// What `op` adds to the element-wise chain it runs in, or -1 when the executor would not
// chain it. The executor runs every float32 element-wise op inside a chain
// (elementwise_fusion.h) and reads a Transpose in place when a chain reads it (views.h):
// there the op costs no launch of its own, only its extra inputs and arithmetic. Measured
// alone it would cost a whole launch (~1-2 us, most of its isolated time), and a cost
// table of isolated times ranks rewrites that merely remove fused element-wise ops far
// above what they save. So the entry of such an op is its cost after a Relu it chains
// with (an element-wise op), or before one (a Transpose), less that Relu alone.
double chained_ms(const Op& op, const std::vector<TensorType>& input_types, MathMode math,
                  const OpMeasureOptions& options) {
  if (op.outputs.size() != 1 || op.outputs[0].dtype != kFloat32) return -1;
  const TensorType& y = op.outputs[0];
  auto relu = [&](Graph& g, const TensorRef& x) {
    Op r;
    r.type = OpType::kRelu;
    r.name = "chained_relu";
    r.inputs = {x};
    r.outputs = {y};
    return TensorRef{g.add_typed_op(r), 0};
  };
  Graph both;
  Op copy = op;
  copy.inputs.clear();
  if (op.type == OpType::kTranspose && input_types.size() == 1) {  // Input -> Transpose -> Relu
    copy.inputs.push_back(add_input(both, "in0", input_types[0]));
    both.add_output(relu(both, {both.add_typed_op(copy), 0}), "out0");
  } else {  // Inputs -> Relu on the one shaped like the output -> op
    size_t lead = 0;
    while (lead < input_types.size() && !(input_types[lead] == y)) ++lead;
    if (lead == input_types.size()) return -1;
    for (size_t i = 0; i < input_types.size(); ++i) {
      TensorRef in = add_input(both, "in" + std::to_string(i), input_types[i]);
      copy.inputs.push_back(i == lead ? relu(both, in) : in);
    }
    const int id = both.add_typed_op(copy);
    if (!is_chain_op(both, id)) return -1;
    both.add_output({id, 0}, "out0");
  }
  Graph alone;  // Input -> Relu
  alone.add_output(relu(alone, add_input(alone, "in0", y)), "out0");
  // a tuning plan's launch parameters apply to a chain's last op
  const double ms = time_graph(both, math, options, both.num_ops() - 1) -
                    time_graph(alone, math, options, alone.num_ops() - 1);
  return std::max(0.0, ms);
}

}  // namespace

double measure_op_ms(const Op& op, const std::vector<TensorType>& input_types, MathMode math,
                     const OpMeasureOptions& options) {
  if (op.type == OpType::kOpaque || is_source_op(op.type))
    throw UnsupportedGraphError(op_type_name(op.type) + " op '" + op.name + "' cannot be measured on the GPU");
  std::string key = op_signature(op, input_types) + "#" + math_mode_name(math);
  if (options.threads || options.items_per_thread)
    key += "#t" + std::to_string(options.threads) + "x" + std::to_string(options.items_per_thread);
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  double ms = chained_ms(op, input_types, math, options);
  if (ms < 0)  // the op follows its Inputs
    ms = time_graph(isolated_graph(op, input_types), math, options, static_cast<int>(input_types.size()));
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache()[key] = ms;
  return ms;
}

std::vector<OpCost> measure_graph_ops(const Graph& graph, MathMode math, std::vector<std::string>* skipped) {
  std::vector<char> constant = constant_ops(graph);
  AnalyticCostModel analytic(device_profile(math == MathMode::kFP32 ? "h100" : "h100-tf32"));  // tensor cores
  std::vector<OpCost> out;
  std::set<std::string> seen;
  for (int id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (is_source_op(op.type) || constant[id]) continue;
    std::vector<TensorType> in;
    for (const TensorRef& r : op.inputs) in.push_back(graph.tensor_type(r));
    std::string sig = op_signature(op, in);
    if (!seen.insert(sig).second) continue;
    try {
      out.push_back({sig, op_type_name(op.type), measure_op_ms(op, in, math), analytic.compute_cost_ms(op, in)});
    } catch (const UnsupportedGraphError&) {
      if (skipped) skipped->push_back(sig);
    }
  }
  return out;
}

size_t op_cache_size() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return cache().size();
}

void install_cuda_measurer(TableCostModel& model, MathMode math) {
  model.set_measurer([math](const Op& op, const std::vector<TensorType>& in) -> double {
    try {
      return measure_op_ms(op, in, math);
    } catch (const UnsupportedGraphError&) {
      return -1.0;  // falls back to the analytic estimate and counts as a miss
    }
  });
}

}  // namespace cuda
}  // namespace taso
