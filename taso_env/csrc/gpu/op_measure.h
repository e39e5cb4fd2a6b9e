// Per-op measurement: the GPU time of one op configuration (op type, attributes, input
// and output types) run in isolation, ~100 back-to-back copies replayed from a CUDA
// graph, median of repeats; cached per (signature, math mode) for the process.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "taso/graph.h"
#include "taso/table_cost_model.h"

namespace taso {
namespace cuda {

struct OpMeasureOptions {
  int copies = 100;  // back-to-back copies of the op in the captured graph
  int warmup = 2;    // graph replays before timing
  int repeats = 5;   // timed replays (median)
  // Launch parameters of our own kernels (0: the default 256 threads, 1 element each).
  int threads = 0;
  int items_per_thread = 0;
  // The executor's fusions (ExecutorOptions::fuse; a one-op graph fuses only a Transpose
  // into a strided copy) and algorithm search (ExecutorOptions::algo_search).
  bool fuse = true;
  AlgoSearch algo_search;
};

// Milliseconds of one execution of `op` with inputs of `input_types`. Throws
// UnsupportedGraphError for ops the backend cannot run (opaque ops).
double measure_op_ms(const Op& op, const std::vector<TensorType>& input_types, MathMode math,
                     const OpMeasureOptions& options = {});

// Measures every computing, non-constant op of `graph` (each distinct signature once);
// returns (signature, ms, analytic ms) triples. Unsupported ops are skipped and their
// signatures returned in `skipped` when given.
struct OpCost {
  std::string signature;
  std::string op_type;
  double ms = 0;
  double analytic_ms = 0;
};
std::vector<OpCost> measure_graph_ops(const Graph& graph, MathMode math, std::vector<std::string>* skipped = nullptr,
                                      const OpMeasureOptions& options = {});

// Number of cached per-op measurements.
size_t op_cache_size();

// Makes `model` measure its misses on this GPU (the `cuda` cost model) with `options`.
void install_cuda_measurer(TableCostModel& model, MathMode math, const OpMeasureOptions& options = {});

}  // namespace cuda
}  // namespace taso
