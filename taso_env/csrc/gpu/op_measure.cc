// Per-op measurement on the GPU (see op_measure.h).
#include "op_measure.h"

#include <set>

#include "config_cache.h"
#include "executor.h"
#include "taso/cost_model.h"
#include "taso/errors.h"

namespace taso {
namespace cuda {
namespace {

ConfigCache<double>& cache() {
  static ConfigCache<double> c;
  return c;
}

// A graph of Inputs feeding one copy of `op`, whose outputs are the graph outputs.
Graph isolated_graph(const Op& op, const std::vector<TensorType>& input_types) {
  Graph g;
  Op copy = op;
  copy.inputs.clear();
  for (size_t i = 0; i < input_types.size(); ++i) {
    OpSpec spec;
    spec.type = "Input";
    spec.name = "in" + std::to_string(i);
    spec.declared_outputs = {input_types[i]};
    copy.inputs.push_back({g.add_op(spec), 0});
  }
  int id = g.add_typed_op(copy);
  for (size_t k = 0; k < op.outputs.size(); ++k) g.add_output({id, static_cast<int>(k)}, "out" + std::to_string(k));
  return g;
}

}  // namespace

double measure_op_ms(const Op& op, const std::vector<TensorType>& input_types, MathMode math,
                     const OpMeasureOptions& options) {
  if (op.type == OpType::kOpaque || is_source_op(op.type))
    throw UnsupportedGraphError(op_type_name(op.type) + " op '" + op.name + "' cannot be measured on the GPU");
  std::string key = op_signature(op, input_types) + "#" + math_mode_name(math);
  if (options.threads || options.items_per_thread)
    key += "#t" + std::to_string(options.threads) + "x" + std::to_string(options.items_per_thread);
  if (!options.fuse) key += "#unfused";
  if (auto cached = cache().find(key)) return *cached;
  ExecutorOptions eo;
  eo.math = math;
  eo.replicas = options.copies;
  eo.fuse = options.fuse;
  eo.algo_search = options.algo_search;
  if (options.threads || options.items_per_thread) {
    OpPlan& p = eo.plan[static_cast<int>(input_types.size())];  // the op follows its Inputs
    p.threads = options.threads;
    p.items_per_thread = options.items_per_thread;
  }
  double ms;
  {
    Executor ex(isolated_graph(op, input_types), eo);
    ms = ex.measure(options.warmup, options.repeats, 1).median_ms;
  }
  cache().put(key, ms);
  return ms;
}

std::vector<OpCost> measure_graph_ops(const Graph& graph, MathMode math, std::vector<std::string>* skipped,
                                      const OpMeasureOptions& options) {
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
      out.push_back(
          {sig, op_type_name(op.type), measure_op_ms(op, in, math, options), analytic.compute_cost_ms(op, in)});
    } catch (const UnsupportedGraphError&) {
      if (skipped) skipped->push_back(sig);
    }
  }
  return out;
}

size_t op_cache_size() { return cache().size(); }

void install_cuda_measurer(TableCostModel& model, MathMode math, const OpMeasureOptions& options) {
  model.set_measurer([math, options](const Op& op, const std::vector<TensorType>& in) -> double {
    try {
      return measure_op_ms(op, in, math, options);
    } catch (const UnsupportedGraphError&) {
      return -1.0;  // falls back to the analytic estimate and counts as a miss
    }
  });
}

}  // namespace cuda
}  // namespace taso
