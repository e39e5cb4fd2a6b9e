// Element-wise chains, the executor's decision (invisible to the graph; the table cost
// model prices their common form by taso/epilogue.h, whose op rules this planner uses):
// float32 element-wise ops (Add, Sub, Mul, Div, Relu, Sigmoid, Tanh, Erf, Gelu, Sqrt,
// Exp, Clip, HardSigmoid, HardSwish) run as chains, each one launch of the fused kernel
// (kernels_fused.h) that computes every op of the chain in registers and writes only the
// chain's last output; a float32 Softmax over the last axis can end a chain (BERT's
// scale, mask and softmax: one kernel). Every usable such op is in exactly one chain, a
// single op being a chain of one, so each reads its inputs through strided views
// (views.h); element-wise ops of other dtypes and softmaxes over another axis are left to
// compile_op.
//
// A chain's ops all have the same output shape; inputs from outside it broadcast to that
// shape. An op's result stays inside the chain (never written) only when it is not a
// graph output and every reader of it is a later op of the same chain; a result read
// elsewhere ends its chain. A value computed inside a chain may be read by several later
// ops of the chain (the GELU input x read by Div and by the last Mul).
//
// Planning runs backwards over the graph: an op joins the chain of its readers when all
// of them are in one chain, its shape is the chain's and the chain stays within the
// kernel's limits (kMaxChainInputs inputs, kMaxChainOps instructions, kMaxSavedValues
// values kept for later readers); otherwise it starts a chain of its own (still correct).
#pragma once

#include <vector>

#include "executor.h"  // Step, StepResources, MathMode
#include "taso/graph.h"
#include "views.h"  // StridedView, ViewResolver

namespace taso {
namespace cuda {

struct ElementwiseChain {
  // The fused element-wise ops in topological (id) order; empty only when softmax >= 0.
  std::vector<int> ops;
  // The tensors the chain reads from outside itself, in first-use order (at most
  // kMaxChainInputs).
  std::vector<TensorRef> inputs;
  // A Softmax over the last axis evaluated in the same kernel, reading ops.back() (or
  // inputs[0] when ops is empty); -1 for none.
  int softmax = -1;
  // The op whose output the step writes.
  int last() const { return softmax >= 0 ? softmax : ops.back(); }
};

struct ChainPlan {
  std::vector<ElementwiseChain> chains;  // in order of last()
  // Per op id: index into chains of the chain whose step runs at this op (its last()),
  // else -1.
  std::vector<int> at;
  // Per op id: computed inside a chain whose step runs elsewhere (every chain op but
  // last()).
  std::vector<char> skip;
  int fused_ops = 0;  // ops folded away: the sum over chains of their size - 1, the softmax counted
};

// usable[id]: op id may join a chain (the executor sets it for ops that are needed, not
// host-fed, not constant and not taken by another fusion). Deterministic: depends on the
// graph alone.
ChainPlan plan_elementwise_chains(const Graph& graph, const std::vector<char>& usable);

// One step computing chain.last()'s output into `output` (contiguous, row-major); every
// input is read through resolve(ref), which may return strided / transposed / offset
// views (StridedView in views.h: data pointer, the tensor's own shape, element strides).
// The float32 tensors it reads and writes are stored as res.float_dtype (computed in
// float32). Everything the kernel needs travels in its parameter struct: nothing is
// uploaded, and `res` is left as it is. Throws UnsupportedGraphError naming the op for a
// rank above kMaxRank, std::logic_error for a chain the planner would not make.
Step compile_elementwise_chain(const Graph& graph, const ElementwiseChain& chain, const ViewResolver& resolve,
                               void* output, StepResources& res);

}  // namespace cuda
}  // namespace taso
