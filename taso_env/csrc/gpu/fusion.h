// Epilogue fusion, the executor's decision (invisible to the graph; its rule,
// taso/epilogue.h, is shared with the table cost model, which prices the fused ops at
// nothing): a float32 Conv2D without a fused activation whose only reader is an
// activation (Relu, Clip(0, 6) = ReLU6, HardSwish), an Add of a same-shaped float32
// tensor, or such an Add read only by such an activation, runs as one
// convolution call that writes the last op's output (cuDNN's conv + bias + residual +
// ReLU, or the convolution and one epilogue kernel). The intermediate tensors are then
// never written; nothing reads them (none is a graph output or has another reader).
#pragma once

#include <vector>

#include "taso/graph.h"

namespace taso {
namespace cuda {

struct ConvFusion {
  int conv = -1;        // the Conv2D op whose step runs at this op's position
  int activation = 0;   // kActRelu / kEpilogueRelu6 / kEpilogueHardSwish when folded in
  bool residual = false;
  TensorRef residual_ref;
};

struct FusionPlan {
  std::vector<ConvFusion> at;  // per op: the fusion whose step replaces this op's
  std::vector<char> skip;      // per op: its work is done by a fused step
  int fused_ops = 0;           // ops folded away
};

// `enabled` false (ExecutorOptions::fuse) plans no fusion (for comparison); convs marked
// in `no_fuse` (a tuning plan's choice; may be null) keep their epilogue ops separate,
// and no other conv folds those ops instead.
FusionPlan plan_conv_fusions(const Graph& graph, const std::vector<char>& needed, const std::vector<char>& host_fed,
                             const std::vector<char>& constant, bool enabled,
                             const std::vector<char>* no_fuse = nullptr);

}  // namespace cuda
}  // namespace taso
