// Which ops the CUDA executor runs inside a convolution's or a GEMM's epilogue: the one
// rule shared by the executor's fusion planners (taso_env/csrc/gpu/fusion.cc,
// gemm_fusion.cc) and the cost models of that executor (the measured table), so that
// search is never credited for removing a kernel the executor never launches.
//
// A float32 Conv2D with one output and no fused activation, whose output is read by
// exactly one op and is not a graph output, absorbs that reader when it is
//   - an activation: Relu, Clip(min 0, max 6) (= ReLU6) or HardSwish; or
//   - an Add of a tensor of the convolution's output type (a residual), and then also
//     that Add's sole reader if it is such an activation (its output no graph output).
// A float32 MatMul without a fused activation that cuBLASLt runs (gemm_takes_epilogue),
// read the same way by exactly one op, absorbs it when it is an Add of a bias vector
// ([N] or [1, .., 1, N] along the result's last dim): the attention and MLP projections'
// biases. (The executor also folds residual Adds, output Transposes and known scale
// factors into GEMMs, and chains element-wise ops; the table still prices those alone.)
// Absorbed ops cost nothing: their work is the convolution's or GEMM's epilogue
// (cuDNN's conv + bias + residual + activation, or one epilogue kernel; cuBLASLt's bias
// epilogue), measured with it.
#pragma once

#include <vector>

#include "taso/graph.h"

namespace taso {

enum class EpilogueActivation { kNone = -1, kRelu, kRelu6, kHardSwish };

// The activation `op` is when a convolution can run it as its epilogue, else kNone.
EpilogueActivation epilogue_activation(const Op& op);

// A convolution that can take an epilogue: float32 Conv2D, one output, no fused activation.
bool conv_takes_epilogue(const Op& op);

// A MatMul that cuBLASLt runs with a bias epilogue: float32 operands and result of rank
// >= 2, no fused activation, `a` batched like the result (or no batch), `b` batched like
// it or shared (input_types: its operands' types).
bool gemm_takes_epilogue(const Op& op, const std::vector<TensorType>& input_types);

// A [N] or [1, ..., 1, N] shape: a bias along the last dim of a [..., N] result.
bool is_row_vector(const std::vector<int64_t>& shape, int64_t n);

// How an op runs in an epilogue (EpilogueFeed::absorbed, epilogue_ops' entries).
enum EpilogueKind : char { kNotAbsorbed = 0, kConvEpilogue = 1, kGemmBias = 2 };

// What the rule needs to know of the op producing an input of a possible epilogue op.
struct EpilogueFeed {
  const Op* op = nullptr;     // the producer (null: none)
  const std::vector<TensorType>* op_inputs = nullptr;  // its input types
  bool constant = false;      // its value is known before run time
  int uses = 0;               // reads of its output 0, one per reading input slot
  bool graph_output = false;  // its output 0 is a graph output
  char absorbed = kNotAbsorbed;  // how it runs in an epilogue itself (an Add)
};

// How an op of type/attributes `x`, reading output 0 of `feeds[k]` at input k (types
// `input_types`), runs in an epilogue (an EpilogueKind). Only the feeds of its first two
// inputs are read; an input not produced at output 0 must have a null feed op.
char runs_in_epilogue(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds);

// Per op of `graph`: its EpilogueKind (given which ops are constant).
std::vector<char> epilogue_ops(const Graph& graph, const std::vector<char>& constant);

}  // namespace taso
