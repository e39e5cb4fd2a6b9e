// The fused element-wise kernel: one launch evaluates a whole chain of element-wise ops
// (elementwise_fusion.h), optionally followed by a softmax over the last axis.
//
// The chain arrives as a FusedProgram, passed by value as the kernel parameter (nothing
// is uploaded per run). Each thread evaluates the program on a tile of W elements (W = 4
// with one vector load per operand where every operand allows it, else 1): instruction k
// reads its operands from the previous instruction's result (an accumulator), from an
// external input loaded at that point, or from one of a few saved registers, and leaves
// its result in the accumulator. elementwise_fusion.cc lowers the chain's SSA form to
// this accumulator form (which results to keep, in which slot), so no value is ever
// indexed dynamically: everything stays in registers.
//
// Kept free of executor.h so that the .cu files stay light.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"  // kMaxRank

namespace taso {
namespace cuda {

constexpr int kMaxChainInputs = 8;   // external inputs of one chain
constexpr int kMaxChainOps = 16;     // instructions of one chain
constexpr int kMaxSavedValues = 4;   // results kept for a later, non-adjacent reader

// Instruction codes: kCopy, then FusedOp::kName for each op of element-wise class Chain in
// the operator table (taso/op_table.def), in its order; the maths is that of launch_unary /
// launch_binary (kernels.h). kCopy passes its operand through (a softmax-only chain's
// program); kClip is min(max(x, a), b), kHardSigmoid max(0, min(1, a * x + b)).
#define TASO_FUSED_OP_None(name)
#define TASO_FUSED_OP_Flat(name)
#define TASO_FUSED_OP_Chain(name) k##name,
enum class FusedOp : int {
  kCopy,
#define TASO_OP(name, min_inputs, max_inputs, declared_outputs, elementwise, flops, attrs) \
  TASO_FUSED_OP_##elementwise(name)
#include "taso/op_table.def"
};
#undef TASO_FUSED_OP_None
#undef TASO_FUSED_OP_Flat
#undef TASO_FUSED_OP_Chain

// Where an instruction operand comes from.
enum class FusedOperand : int {
  kNone,      // unary op: no second operand
  kPrevious,  // the previous instruction's result
  kInput,     // external input `index`, loaded for this operand
  kSaved,     // saved slot `index`
};

// How element i (row-major over the output) of an external input is addressed.
enum class FusedAccess : int {
  kSame,     // laid out like the output: data[i]
  kScalar,   // one value: data[0]
  kRow,      // repeated over the leading dims: data[i % len]
  kChannel,  // repeated around a run of dims: data[(i / inner) % len] (a [C, 1, 1] scale)
  kStrided,  // anything else: sum of coordinate * strides
};

// Division by a divisor fixed at plan time, for 32-bit indices: n / d ==
// (umulhi(n, magic) + n) >> shift for every n < 2^31 (Granlund-Montgomery, as
// PyTorch's IntDivider). d must be in [1, 2^31).
struct FastDivisor {
  uint32_t divisor = 1;
  uint32_t magic = 1;
  uint32_t shift = 0;
};

inline FastDivisor make_fast_divisor(uint32_t d) {
  FastDivisor f;
  f.divisor = d;
  while (f.shift < 32 && (uint64_t{1} << f.shift) < d) ++f.shift;
  f.magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d)) / d + 1);
  return f;
}

struct FusedInput {
  const void* data = nullptr;  // stored as the chain's dtype (launch_fused_chain)
  FusedAccess mode = FusedAccess::kSame;
  int64_t len = 1, inner = 1;  // kRow (inner 1) and kChannel
  FastDivisor len_div, inner_div;  // the same, for 32-bit indices
  // Element strides over the output dims, innermost first (0 on broadcast dims). Every
  // mode has them: the strided and softmax kernels address all inputs through them.
  int64_t strides[kMaxRank] = {};
};

struct FusedInstr {
  FusedOp op = FusedOp::kCopy;
  FusedOperand kind[2] = {FusedOperand::kNone, FusedOperand::kNone};
  int index[2] = {0, 0};  // input (kInput) or saved slot (kSaved) of each operand
  int save = -1;          // slot the result is also kept in, or -1
  float a = 0.f, b = 0.f; // attributes (kClip: min, max; kHardSigmoid: alpha, beta)
};

struct FusedProgram {
  int num_inputs = 0;
  int num_instrs = 0;
  int rank = 0;                    // of the output
  int64_t dims[kMaxRank] = {};     // output dims, innermost first
  FastDivisor dims_div[kMaxRank];  // the same, for 32-bit indices
  int64_t n = 0;                   // output elements
  bool index32 = false;  // n and every input offset < 2^31: 32-bit index arithmetic
  // Tiles of 4 elements: n % 4 == 0, the output and every input aligned to 4 elements (16
  // bytes for float, 8 for a 16-bit dtype; one vector load or store each), no kStrided.
  bool vector4 = false;
  bool strided = false;  // some input is kStrided
  bool softmax = false;  // the output is softmax(result) over the last dim
  FusedInput inputs[kMaxChainInputs];
  FusedInstr instrs[kMaxChainOps];
};

// Kernel parameters must stay within 4 KB.
static_assert(sizeof(FusedProgram) <= 4096, "FusedProgram exceeds the kernel parameter limit");

// Evaluates `p` into y (contiguous, p.n values): inputs and output stored as `dtype`
// (kFloat32, kFloat16 or kBFloat16; float_storage.cuh), arithmetic in float32.
// Element-wise (grid-stride, 4-element tiles where p.vector4), or softmax rows (one warp
// per row up to 1024 elements, else one block per row). Launch geometry from
// launch_params() (launch.cuh), the softmax kernels capped at 256 threads per block;
// enqueues on `s` only, never synchronises.
void launch_fused_chain(const FusedProgram& p, int dtype, void* y, cudaStream_t s);

}  // namespace cuda
}  // namespace taso
