// Which ops the CUDA executor runs inside another op's step: the rules shared by the
// executor's planners (taso_env/csrc/gpu/fusion.cc, gemm_fusion.cc, elementwise_fusion.cc)
// and the cost model of that executor (the measured table), so that search is neither
// credited for removing a kernel the executor never launches nor blind to a kernel a
// rewrite makes it launch again.
//
// An op reading output 0 of a producer that no other op reads (and that is no graph
// output) runs in the producer's step when
//  - convolution epilogue: the producer is a float32 Conv2D with one output and no fused
//    activation, and the op is an activation (Relu, Clip(0, 6) = ReLU6, HardSwish) or an
//    Add of a tensor of the convolution's output type (a residual), or the op is such an
//    activation and the producer such an Add (cuDNN's conv + bias + residual + ReLU);
//  - GEMM epilogue: the producer is a MatMul / Gemm that cuBLASLt runs with epilogues
//    (float32, no fused activation, no C input), and the op is an Add of a [N] or
//    [1, .., N] tensor (a bias), an Add of a tensor of the result's shape (a residual;
//    also after a bias Add), or a Transpose the GEMM writes its result through;
// and, judged by its readers, an op no rule above fuses runs in its reader's step when
//  - element-wise chain: it is a float32 element-wise op the fused chain kernel
//    evaluates, no graph output, read only by one op (in any number of its inputs) that
//    is such an op or a softmax over the last axis, of the same output shape, and runs in
//    no epilogue (the executor's chain planner, without its kernel-size limits);
//  - GEMM scale: it is a Mul by (or a Div by) a one-element float32 constant of the
//    op's output type, read only by a MatMul that cuBLASLt runs (the factor goes into
//    alpha);
//  - view: it is a Transpose (one that moves dims of size > 1), no graph output, whose
//    every reader reads strided memory: cuBLASLt GEMMs, element-wise chain ops and
//    softmaxes outside convolution epilogues, and Transposes outside GEMM epilogues.
// Ops in an epilogue or a view cost nothing: their work is that step's, which the table
// measures as its op. An op that joins its reader's chain costs kChainShare of its cost
// alone (the chain's last op pays in full). The chains are the executor's where each
// value has one reader, without its kernel's limits (a value read by two ops of one
// chain runs in it there, but ends a chain here; a chain of more than 16 ops or 8 inputs
// is several kernels there, one here); the GEMM epilogues are its epilogues without the
// Reshape-likes it looks through.
#pragma once

#include <cstdint>
#include <vector>

#include "taso/graph.h"

namespace taso {

enum class EpilogueActivation { kNone = -1, kRelu, kRelu6, kHardSwish };

// The activation `op` is when a convolution can run it as its epilogue, else kNone.
EpilogueActivation epilogue_activation(const Op& op);

// A convolution that can take an epilogue: float32 Conv2D, one output, no fused activation.
bool conv_takes_epilogue(const Op& op);

// MatMul / Gemm configurations the executor runs through cuBLASLt: float32, operands of
// rank >= 2, `a` batched like the output (or no batch), `b` batched like it or shared;
// a Gemm's C (beta 1) a row vector or of the result's shape; a MatMul's fused activation
// none or ReLU.
bool gemm_runs_on_lt(const Op& op, const std::vector<TensorType>& input_types);

// What a cuBLASLt GEMM can fold after it (bit flags of gemm_epilogues()).
enum GemmEpilogue : uint8_t { kGemmTakesEpilogue = 1, kGemmWritesTransposed = 2 };
uint8_t gemm_epilogues(const Op& op, const std::vector<TensorType>& input_types);

// A [N] or [1, ..., 1, N] shape: a bias along the last dim of a [..., N] result.
bool is_row_vector(const std::vector<int64_t>& shape, int64_t n);

// A float32 element-wise op (every input float32) the fused chain kernel evaluates.
bool chain_elementwise(const Op& op, const std::vector<TensorType>& input_types);
// A float32 Softmax over the last axis (it can end a chain).
bool last_axis_softmax(const Op& op, const std::vector<TensorType>& input_types);
// A Transpose that only moves dims of size 1 (the executor's alias of its input).
bool moves_unit_dims_only(const Op& transpose, const TensorType& input);

// The step an op runs in, when not its own.
enum class Fused : char {
  kNone = 0,
  kConvEpilogue,
  kGemmBias,
  kGemmResidual,
  kGemmOutTranspose,
  kChain,      // judged by the readers: see fused_by_readers()
  kGemmScale,
  kView,
  kInPlaceConcat,  // a Concat its producers write into: its inputs are slices of its buffer
};

// What the producer-side rules need to know of the op producing an input of a possible
// epilogue op.
struct EpilogueFeed {
  const Op* op = nullptr;     // the producer (null: none)
  bool constant = false;      // its value is known before run time
  int uses = 0;               // reads of its output 0, one per reading input slot
  bool graph_output = false;  // its output 0 is a graph output
  Fused fused = Fused::kNone;  // the epilogue it runs in itself
  uint8_t gemm = 0;           // gemm_epilogues() of the producer
};

// Fills `feed`'s gemm from its producer and that producer's input types; the second
// form reads them from `graph` (into `scratch`) only for a producer whose rules need them.
void describe_kernel(EpilogueFeed* feed, const std::vector<TensorType>& producer_input_types);
void describe_kernel(EpilogueFeed* feed, const Graph& graph, std::vector<TensorType>* scratch);

// The epilogue an op of type/attributes `x`, reading output 0 of `feeds[k]` at input k
// (types `input_types`), runs in (the producer-side rules). Only the feeds of its first
// two inputs are read; an input not produced at output 0 must have a null feed op.
Fused fused_step_of(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds);

// A one-element float32 constant source (a weight of known value: the executor folds it).
bool is_constant_scalar(const Op& producer, const TensorType& t);

// What the reader-side rules need to know of an op reading a possible chain op, GEMM
// scale or view.
struct ReaderFeed {
  const Op* op = nullptr;
  Fused fused = Fused::kNone;  // the epilogue it runs in itself (a producer-side verdict)
  bool lt_gemm = false;        // gemm_runs_on_lt()
  bool chain = false;          // chain_elementwise() or last_axis_softmax()
};
void describe_reader(ReaderFeed* reader, const std::vector<TensorType>& reader_input_types);
void describe_reader(ReaderFeed* reader, const Graph& graph, std::vector<TensorType>* scratch);

// `op`'s input types in `graph`, in `scratch` (cleared first).
const std::vector<TensorType>& input_types_of(const Graph& graph, const Op& op, std::vector<TensorType>* scratch);

// The step an op that no producer-side rule fuses (fused_step_of() said kNone) runs in,
// judged by its readers (the reader-side rules; nothing reads their verdicts): `readers`
// has one entry per reading input slot; `scalar[k]` (k < 2): input k is a one-element
// float32 constant source; `graph_output`: its output 0 is a graph output.
Fused fused_by_readers(const Op& x, const std::vector<TensorType>& input_types, const bool* scalar,
                       bool graph_output, const std::vector<ReaderFeed>& readers);
// Whether fused_by_readers() may say anything but kNone of an op of this type.
bool may_run_in_reader(const Op& op);

// What the in-place-Concat rule needs to know of the op producing one of a Concat's inputs.
struct ConcatFeed {
  const Op* op = nullptr;     // the producer
  bool constant = false;      // its value is known before run time
  bool alias = false;         // is_alias(): no buffer of its own
  bool view = false;          // it runs as a strided view (its verdict is kView)
  int uses = 0;               // reads of the tensor, one per reading input slot
  bool graph_output = false;  // the tensor is a graph output
};
// Whether the executor makes `op` (with input 0 of type `input`) an alias of its input's
// buffer: a Reshape, Flatten or Identity, or a Transpose that moves only dims of size 1.
bool is_alias(const Op& op, const TensorType& input);
// Whether Concat `x` runs no kernel (executor.cc, in_place_concat_inputs): along an axis
// with every dim before it 1, every input written by a step of its own (not a source,
// constant, alias, view or Split; one output) that only the Concat reads and that is no
// graph output, each slice starting 256-byte aligned (float32 storage). Judged after
// every other verdict; no rule reads it (it is kNone wherever one does).
bool runs_in_place(const Op& x, const std::vector<TensorType>& input_types, const std::vector<ConcatFeed>& inputs);

// Whether an op of this type can run in another op's step at all (the ops fused_step_of
// may say anything but kNone of).
bool may_run_fused(const Op& op);

// An element-wise op that joins its reader's chain costs this share of its cost alone.
// Fitted on the H100 (2026-11-26, nasrnn and two of its greedy graphs, profiled: 15, 21
// and 27 chain kernels of 110, 118 and 150 ops took 56.9, 66.1 and 84.7 us, 0.36-0.39 of
// what those ops take alone; the kernel also has limits this rule does not see).
constexpr double kChainShare = 0.4;

// What an op that runs in a step of kind `kind` costs, given its cost priced alone (in
// integer cost units, taso/cost_model.h): nothing in a convolution's or GEMM's epilogue
// or as a view, kChainShare of it in an element-wise chain that another op ends.
int64_t fused_step_units(char kind, int64_t alone_units);

// Per op of `graph`: the Fused kind of the step it runs in (given which ops are constant).
std::vector<char> fused_step_ops(const Graph& graph, const std::vector<char>& constant);
// The same, with the graph's readers (Graph::consumers()) already at hand.
std::vector<char> fused_step_ops(const Graph& graph, const std::vector<char>& constant,
                                 const std::vector<std::vector<std::vector<std::pair<int, int>>>>& consumers);

}  // namespace taso
