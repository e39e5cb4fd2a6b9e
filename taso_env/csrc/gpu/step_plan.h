// Which step computes each op: the executor's fusion decisions in one place, made in
// order (each takes only ops no earlier one took): convolution epilogues (fusion.h),
// GEMMs with their epilogues (gemm_fusion.h), element-wise chains
// (elementwise_fusion.h), then strided views (views.h) for the Transposes and constant
// Gathers whose readers all read strided memory. Invisible to the graph; the table cost
// model prices these steps with the rules of taso/epilogue.h (which the planners share).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "elementwise_fusion.h"
#include "fusion.h"
#include "gemm_fusion.h"
#include "views.h"

namespace taso {
namespace cuda {

struct StepPlan {
  FusionPlan convs;
  GemmPlan gemms;
  ChainPlan chains;
  std::vector<char> viewable;  // Transposes / constant Gathers that are views or strided copies
  std::unique_ptr<ViewPlan> views;
  int fused_ops = 0;           // ops that run no step of their own

  // Op `id`'s work is done by another op's step (or by none: a view).
  bool skipped(int id) const {
    return convs.skip[id] || gemms.skip[id] || chains.skip[id] || views->skipped(id);
  }
};

// What record_fused_steps() says of an op.
enum StepKind { kOwnStep = 0, kConvStep = 1, kGemmStep = 2, kChainStep = 3, kViewStep = 4 };

// Per op of `graph`: the op whose step computes it when that is another op's (the last
// op of its convolution epilogue, GEMM fusion or element-wise chain; for a view, itself),
// else -1 (`into`); and that step's kind (`kind`): what the table cost model's rules
// (taso/epilogue.h) are checked against.
void record_fused_steps(const Graph& graph, const StepPlan& plan, std::vector<int>* into, std::vector<int>* kind);

// needed / host_fed / constant / alias: per op, as the executor decided them; no_fuse:
// convolutions a tuning plan keeps unfused; `fuse` false (ExecutorOptions::fuse) keeps
// only what runs without fusion (GEMMs through cuBLASLt with the op's own bias).
StepPlan plan_steps(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                    const std::vector<char>& constant, const std::vector<char>& alias,
                    const std::vector<char>& no_fuse, const std::map<int, double>& known_scalars, bool fuse,
                    int float_dtype);

}  // namespace cuda
}  // namespace taso
