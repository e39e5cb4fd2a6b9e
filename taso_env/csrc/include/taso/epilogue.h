// Which ops the CUDA executor runs inside a convolution's epilogue: the one rule shared
// by the executor's fusion planner (taso_env/csrc/gpu/fusion.cc) and the cost models of
// that executor (the measured table), so that search is never credited for removing a
// kernel the executor never launches.
//
// A float32 Conv2D with one output and no fused activation, whose output is read by
// exactly one op and is not a graph output, absorbs that reader when it is
//   - an activation: Relu, Clip(min 0, max 6) (= ReLU6) or HardSwish; or
//   - an Add of a tensor of the convolution's output type (a residual), and then also
//     that Add's sole reader if it is such an activation (its output no graph output).
// Absorbed ops cost nothing: their work is the convolution's epilogue (cuDNN's
// conv + bias + residual + activation, or one epilogue kernel), measured with it.
#pragma once

#include <vector>

#include "taso/graph.h"

namespace taso {

enum class EpilogueActivation { kNone = -1, kRelu, kRelu6, kHardSwish };

// The activation `op` is when a convolution can run it as its epilogue, else kNone.
EpilogueActivation epilogue_activation(const Op& op);

// A convolution that can take an epilogue: float32 Conv2D, one output, no fused activation.
bool conv_takes_epilogue(const Op& op);

// What the rule needs to know of the op producing an input of a possible epilogue op.
struct EpilogueFeed {
  const Op* op = nullptr;     // the producer (null: none)
  bool constant = false;      // its value is known before run time
  int uses = 0;               // reads of its output 0, one per reading input slot
  bool graph_output = false;  // its output 0 is a graph output
  bool absorbed = false;      // it runs in a convolution's epilogue itself (an Add)
};

// Whether an op of type/attributes `x`, reading output 0 of `feeds[k]` at input k
// (types `input_types`), runs in a convolution's epilogue. Only the feeds of its first
// two inputs are read; an input not produced at output 0 must have a null feed op.
bool runs_in_conv_epilogue(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds);

// Per op of `graph`: 1 when it runs in a convolution's epilogue (given which ops are constant).
std::vector<char> conv_epilogue_ops(const Graph& graph, const std::vector<char>& constant);
// The same, with the graph's readers (Graph::consumers()) already at hand.
std::vector<char> conv_epilogue_ops(const Graph& graph, const std::vector<char>& constant,
                                    const std::vector<std::vector<std::vector<std::pair<int, int>>>>& consumers);

}  // namespace taso
