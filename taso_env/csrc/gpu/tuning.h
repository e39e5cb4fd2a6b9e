// What the auto-tuner (taso_env/tuning, docs/tuning.md) asks of the executor: the
// fusion sites the executor would use, and the whole timed space of one convolution's
// cuDNN choices. Plans themselves go in through ExecutorOptions::plan (executor.h).
#pragma once

#include <map>
#include <vector>

#include "executor.h"  // OpPlan
#include "library_ops.h"
#include "taso/graph.h"

namespace taso {
namespace cuda {

// Checks a tuning plan against the graph (ops exist, knobs fit the op, values in range);
// throws IndexError / ValueError naming the op.
void validate_plan(const Graph& graph, const std::map<int, OpPlan>& plan);

// The ConvConfig of Conv2D `op` with inputs `in`, with the given executor epilogue.
ConvConfig make_conv_config(const Op& op, const std::vector<TensorType>& in, bool residual, int activation,
                            MathMode math);

// One convolution whose epilogue the executor fuses by default (fusion.h): `last` is the
// op whose output the fused step writes, `mid` the residual Add folded before an
// activation (-1 when none).
struct FusionSite {
  int conv = -1, last = -1, mid = -1;
  bool residual = false;
  int activation = 0;
};
// `fuse` false (ExecutorOptions::fuse): none.
std::vector<FusionSite> fusion_sites(const Graph& graph, const std::vector<int>& host_fed_ops, bool fuse = true);

// Every (algorithm, math type, fused call) cuDNN runs for Conv2D `conv_id`, timed as the
// executor runs it (8 calls in a CUDA graph, median of 5), with its epilogue fused
// (`fused_epilogue`, as the fusion site says) or not. The timed search of conv_op.cc
// with nothing cached.
// `search.log` prints each candidate's time.
std::vector<ConvAlgo> conv_candidates(const Graph& graph, int conv_id, bool fused_epilogue,
                                      const std::vector<int>& host_fed_ops, MathMode math,
                                      const AlgoSearch& search = {});

}  // namespace cuda
}  // namespace taso
