// The executor's planning, as passes (Executor::Executor runs them in this order, then
// allocates the arena and compiles the steps):
//   validate_options   the options against the graph (tuning plan, known scalars, ...)
//   needed_ops         the ops the graph outputs need (host-fed ops cut the walk)
//   plan_arena         one offset per needed tensor; Reshape-likes alias their input
//   plan_constant_folding  ops computed once, before the first run
//   fuse_steps         which step computes each op (step_plan.h: convolution epilogues,
//                      GEMMs, element-wise chains, strided views)
//   place_views        Concats whose producers write into their slices, Splits whose
//                      parts are slices of their input, and the final offsets
//   build_step_plan    the steps of a run, in order, each with the ops it computes
// Every pass reads only what it is given and returns its decisions; plan_executor()
// runs them all without a GPU, so tests and tools can inspect each one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "executor.h"
#include "step_plan.h"
#include "taso/graph.h"

namespace taso {
namespace cuda {

// The offset of a tensor the executor does not store (its op is not needed).
constexpr size_t kNoOffset = SIZE_MAX;
// Alignment of every tensor in the arena (bytes).
constexpr size_t kArenaAlign = 256;

// Device bytes of a tensor (float32 tensors stored as the math mode's float dtype).
using TensorBytes = std::function<size_t(const TensorType&)>;
TensorBytes stored_tensor_bytes(int float_dtype);

// Throws IndexError / ValueError naming the op for a tuning plan, a known scalar or a
// host-fed op that does not fit `graph`, or a misaligned arena offset.
void validate_options(const Graph& graph, const ExecutorOptions& options);

// Per op: 1 where the op is named in `host_fed_ops` (validated ids).
std::vector<char> host_fed_mask(const Graph& graph, const std::vector<int>& host_fed_ops);

// Per op: 1 where a graph output needs it; a host-fed op is needed, its inputs only
// when something else needs them.
std::vector<char> needed_ops(const Graph& graph, const std::vector<char>& host_fed);

struct ArenaPlan {
  // Per op, per output: byte offset in the arena (kNoOffset: not stored).
  std::vector<std::vector<size_t>> offsets;
  // Per op: a Reshape, Flatten or Identity (with fusion also a Transpose that only moves
  // dims of size 1) whose output is its input's buffer and runs no kernel.
  std::vector<char> alias;
  // Bytes of the arena's allocation (at least kArenaAlign), `arena_offset` included.
  size_t bytes = 0;
};

// One arena for every needed tensor (sources included), tensors laid out in op order
// from `arena_offset`, each padded to kArenaAlign. Tensors are written once, by their
// producer, so an alias never sees other data.
ArenaPlan plan_arena(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                     bool fuse, size_t arena_offset, const TensorBytes& bytes);

struct ConstantFolding {
  std::vector<char> constant;  // per op: its value is known before run time (constant_ops)
  std::vector<int> folded;     // the needed ops computed once before the first run, in id order
};

// Ops computed only from weights and constants run once, before the first run (and again
// after a weight changes), as deployment folds them. Aliases run nothing.
ConstantFolding plan_constant_folding(const Graph& graph, const std::vector<char>& needed,
                                      const std::vector<char>& host_fed, const std::vector<char>& alias);

// The executor's fusion decisions (step_plan.h's plan_steps): convolution epilogues
// (convs in `no_fuse` keep theirs), GEMMs with their epilogues, element-wise chains and
// strided views; with `fuse` false only what runs without fusion.
StepPlan fuse_steps(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                    const std::vector<char>& constant, const std::vector<char>& alias,
                    const std::vector<char>& no_fuse, const std::map<int, double>& known_scalars, bool fuse,
                    int float_dtype);

struct InPlaceViews {
  // Per Concat that runs no kernel: its inputs' byte offsets from its start (empty for
  // the others); its producers write straight into their slices.
  std::vector<std::vector<size_t>> concat_slots;
  // Per Split that runs no kernel: its parts' byte offsets from its input's start.
  std::vector<std::vector<size_t>> split_parts;
  std::vector<int> in_place_concats;  // id order
  std::vector<int> in_place_splits;   // id order
  // The arena's offsets with the slices and the aliases after them placed.
  std::vector<std::vector<size_t>> offsets;
};

// With `fuse`, Concats whose inputs can each write into its slice of the Concat's buffer
// (own steps, single readers, aligned slices) and Splits along a leading axis whose
// parts are aligned slices of a buffer a step writes run no kernel; the aliases of either
// (Reshapes after them) follow. Without `fuse` the offsets stay the arena's.
InPlaceViews place_views(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                         const std::vector<char>& constant, const ArenaPlan& arena, const StepPlan& steps, bool fuse,
                         const TensorBytes& bytes);

// How a step computes its op.
enum class StepCall : int {
  kOp = 0,           // the op's own kernel or library call (compile_op)
  kFusedConv = 1,    // a convolution with its epilogue (fusion.h)
  kGemm = 2,         // a cuBLASLt GEMM with its folded ops (gemm_fusion.h)
  kChain = 3,        // an element-wise chain in one kernel (elementwise_fusion.h)
  kStridedCopy = 4,  // a view op that runs: one strided copy of its data (views.h)
};

struct PlannedStep {
  int op = -1;        // the op whose output the step writes (steps run in op id order)
  StepCall call = StepCall::kOp;
  bool constant = false;  // folded: run once before the first run, not per run
  std::vector<int> ops;   // every op whose work the step does, `op` included, in id order
};

// The steps of the executor, in the order they are compiled and run: one per needed op
// that is not a source, host-fed, an alias, skipped by a fusion or a strided view, or an
// in-place Concat / Split. `fused_into` as record_fused_steps gives it.
std::vector<PlannedStep> build_step_plan(const Graph& graph, const std::vector<char>& needed,
                                         const std::vector<char>& host_fed, const std::vector<char>& alias,
                                         const std::vector<char>& constant, const StepPlan& steps,
                                         const InPlaceViews& in_place, const std::vector<int>& fused_into);

// Every pass's result, without the step plan's internals (graph-independent, copyable).
struct PlanningReport {
  std::vector<char> host_fed;
  std::vector<char> needed;  // needed_ops
  ArenaPlan arena;           // plan_arena
  ConstantFolding constants;
  // fuse_steps, per op: the op whose step computes it when that is another op's (for a
  // strided view, itself), else -1, and that step's kind (StepKind); ops that run no
  // step of their own (fused, views, in-place Concats and Splits).
  std::vector<int> fused_into, fused_kind;
  int fused_ops = 0;
  InPlaceViews in_place;            // place_views
  std::vector<PlannedStep> steps;   // build_step_plan (constant steps included)
};

// The passes' results and the step plan the compiler reads (which refers to `graph`).
struct ExecutorPlan {
  PlanningReport report;
  StepPlan fusion;
};

// Runs every planning pass on `graph` (the graph the executor runs: equal constants
// already shared, constant_sharing.h) with `options`, without touching the GPU.
ExecutorPlan plan_executor(const Graph& graph, const ExecutorOptions& options);

// What an executor of `graph` with `options` would plan (share_equal_constants, then
// plan_executor), without a GPU.
PlanningReport planning_report(const Graph& graph, const ExecutorOptions& options);

}  // namespace cuda
}  // namespace taso
