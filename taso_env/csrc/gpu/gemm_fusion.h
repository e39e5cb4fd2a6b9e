// GEMM epilogue fusion, the executor's decision (invisible to the graph; the table cost
// model prices it by taso/epilogue.h, whose eligibility rule this planner uses):
// a float32 MatMul or Gemm runs as one cuBLASLt call (gemm_lt.h) that
//  - reads its operands through strided views (views.h): the Transposes and Reshapes
//    that split attention heads need no copy;
//  - adds a bias vector: the MatMul's only reader is an Add of a [N] (or [1, .., N])
//    tensor, or the Gemm's C is such a vector (beta 1);
//  - adds a residual: the result's only reader (through Reshape-likes) is an Add of a
//    tensor of the same shape, or the Gemm's C is [M, N] (beta 1);
//  - or writes its output through a Transpose that is its only reader (the attention
//    output's head merge), which then needs no copy;
//  - applies the MatMul's own fused ReLU;
//  - folds a known factor into alpha: an operand that is Mul(x, c) or Div(x, c), read only by the
//    MatMul, with c a one-element Weight of known value (ExecutorOptions::known_scalars;
//    torchvision's attention scales q and k before their product).
// Nothing that is a graph output or has a second reader is fused away.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "executor.h"
#include "views.h"

namespace taso {
namespace cuda {

struct GemmFusion {
  int gemm = -1;           // the MatMul or Gemm op
  TensorRef a, b;          // the operands read (x of a folded Mul / Div by c, else the op's inputs)
  double scale = 1.0;      // product of the folded factors
  int at = -1;             // the op whose position and output buffer the step takes
  bool has_bias = false;
  TensorRef bias;
  bool has_residual = false;
  TensorRef residual;
  int out_transpose = -1;  // the Transpose the GEMM writes through (then at == it)
  std::vector<int> folded;  // ops whose work the step does (all but `at` skipped by the executor)
};

struct GemmPlan {
  std::vector<GemmFusion> fusions;
  std::vector<int> at;     // per op: index into fusions of the step that runs at this op, else -1
  std::vector<char> skip;  // per op: done by a GEMM step elsewhere
  int fused_ops = 0;       // Adds, Muls and Transposes folded away
};

// usable[id]: the op may be fused (needed, not host-fed, not constant, not taken by
// another fusion); alias[id]: a Reshape-like whose output is its input's buffer. With
// `enabled` false every usable MatMul / Gemm still runs through cuBLASLt, with only its
// own bias / C and ReLU.
GemmPlan plan_gemm_fusions(const Graph& graph, const std::vector<char>& usable, const std::vector<char>& alias,
                           const std::map<int, double>& known_scalars, bool enabled);

// The step of fusion `f`: operands and epilogue inputs read through `resolve` (operands
// cuBLASLt cannot read as they lie are first copied into a private contiguous buffer),
// output written to `output` (the buffer of op f.at). Throws UnsupportedGraphError
// naming the op for what cuBLASLt cannot run.
Step compile_gemm(const Graph& graph, const GemmFusion& f, const ViewResolver& resolve, void* output,
                  MathMode math, StepResources& res);

}  // namespace cuda
}  // namespace taso
