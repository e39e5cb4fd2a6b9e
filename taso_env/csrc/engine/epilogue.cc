// The rules of which ops run in another op's step (see taso/epilogue.h).
#include "taso/epilogue.h"

#include "taso/cost_model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

namespace taso {

EpilogueActivation epilogue_activation(const Op& op) {
  switch (op.type) {
    case OpType::kRelu: return EpilogueActivation::kRelu;
    case OpType::kHardSwish: return EpilogueActivation::kHardSwish;
    case OpType::kClip:
      return op.attrs.get_float("min") == 0.0 && op.attrs.get_float("max") == 6.0 ? EpilogueActivation::kRelu6
                                                                                 : EpilogueActivation::kNone;
    default: return EpilogueActivation::kNone;
  }
}

bool conv_takes_epilogue(const Op& op) {
  return op.type == OpType::kConv2D && op.outputs.size() == 1 && op.outputs[0].dtype == kFloat32 &&
         op.attrs.get_int("activation") == kActNone;
}

namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// The product of the dims before the last two.
int64_t batch_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) n *= shape[i];
  return n;
}

// The dims before the last two, right-aligned to `rank` - 2 dims (missing dims are 1).
std::vector<int64_t> batch_dims(const std::vector<int64_t>& shape, size_t rank) {
  std::vector<int64_t> b(rank - 2, 1);
  for (size_t i = 0; i + 2 < shape.size(); ++i) b[rank - shape.size() + i] = shape[i];
  return b;
}

bool all_float32(const Op& op, const std::vector<TensorType>& input_types) {
  if (op.outputs.size() != 1 || op.outputs[0].dtype != kFloat32) return false;
  for (const TensorType& t : input_types)
    if (t.dtype != kFloat32) return false;
  return true;
}

// The element-wise op types the fused chain kernel has an instruction for (taso/op_table.def).
bool chain_op_type(OpType type) { return op_schema(type).elementwise == ElementwiseClass::kChain; }

// The feed's output 0 goes to the one op that reads it, and nowhere else.
bool sole_reader(const EpilogueFeed& f) {
  return f.op && f.op->outputs.size() == 1 && f.uses == 1 && !f.graph_output && !f.constant;
}

Fused conv_epilogue_of(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds) {
  if (epilogue_activation(x) != EpilogueActivation::kNone) {
    const EpilogueFeed& f = feeds[0];
    if (sole_reader(f) && (conv_takes_epilogue(*f.op) || (f.op->type == OpType::kAdd && f.fused == Fused::kConvEpilogue)))
      return Fused::kConvEpilogue;
    return Fused::kNone;
  }
  if (x.type != OpType::kAdd || input_types.size() != 2 || x.outputs.size() != 1) return Fused::kNone;
  for (int slot = 0; slot < 2; ++slot) {
    const EpilogueFeed& f = feeds[slot];
    if (!sole_reader(f) || !conv_takes_epilogue(*f.op)) continue;
    const TensorType& y = f.op->outputs[0];
    if (input_types[1 - slot] == y && x.outputs[0] == y) return Fused::kConvEpilogue;
  }
  return Fused::kNone;
}

Fused gemm_epilogue_of(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds) {
  if (x.outputs.size() != 1) return Fused::kNone;
  if (x.type == OpType::kTranspose) {
    const EpilogueFeed& f = feeds[0];
    if (sole_reader(f) && (f.gemm & kGemmWritesTransposed) && !input_types.empty() &&
        !moves_unit_dims_only(x, input_types[0]))
      return Fused::kGemmOutTranspose;
    return Fused::kNone;
  }
  if (x.type != OpType::kAdd || input_types.size() != 2) return Fused::kNone;
  for (int slot = 0; slot < 2; ++slot) {
    const EpilogueFeed& f = feeds[slot];
    if (!sole_reader(f)) continue;
    const TensorType& other = input_types[1 - slot];
    const TensorType& y = f.op->outputs[0];
    if (other.dtype != kFloat32 || !(x.outputs[0] == y)) continue;
    const bool residual = other.shape == y.shape;
    if (f.gemm & kGemmTakesEpilogue) {
      if (is_row_vector(other.shape, y.shape.empty() ? 0 : y.shape.back())) return Fused::kGemmBias;
      if (residual) return Fused::kGemmResidual;
    } else if (f.op->type == OpType::kAdd && f.fused == Fused::kGemmBias && residual) {
      return Fused::kGemmResidual;
    }
  }
  return Fused::kNone;
}

}  // namespace

bool gemm_runs_on_lt(const Op& op, const std::vector<TensorType>& input_types) {
  if (!all_float32(op, input_types)) return false;
  const auto& y = op.outputs[0].shape;
  if (op.type == OpType::kGemm) {
    if (input_types.size() < 3) return true;
    if (op.attrs.get_float("beta") != 1.0 || y.size() != 2) return false;
    const auto& c = input_types[2].shape;
    return is_row_vector(c, y[1]) || c == y;
  }
  if (op.type != OpType::kMatMul || input_types.size() != 2) return false;
  int64_t act = op.attrs.get_int("activation");
  if (act != kActNone && act != kActRelu) return false;
  const auto& a = input_types[0].shape;
  const auto& b = input_types[1].shape;
  if (a.size() < 2 || b.size() < 2 || y.size() < 2) return false;
  std::vector<int64_t> ob = batch_dims(y, y.size()), ab = batch_dims(a, y.size()), bb = batch_dims(b, y.size());
  return (ab == ob || product(ob) == 1) && (bb == ob || product(bb) == 1);
}

uint8_t gemm_epilogues(const Op& op, const std::vector<TensorType>& input_types) {
  if (!gemm_runs_on_lt(op, input_types)) return 0;
  if (op.type == OpType::kGemm) return input_types.size() > 2 ? 0 : kGemmTakesEpilogue | kGemmWritesTransposed;
  if (op.attrs.get_int("activation") != kActNone) return 0;
  const auto& y = op.outputs[0].shape;
  const bool b_batched = batch_count(input_types[1].shape) == batch_count(y);
  return kGemmTakesEpilogue | (b_batched ? kGemmWritesTransposed : 0);
}

bool is_row_vector(const std::vector<int64_t>& s, int64_t n) {
  if (s.empty() || s.back() != n) return false;
  return product(s) == n;
}

bool chain_elementwise(const Op& op, const std::vector<TensorType>& input_types) {
  return chain_op_type(op.type) && all_float32(op, input_types);
}

bool last_axis_softmax(const Op& op, const std::vector<TensorType>& input_types) {
  if (op.type != OpType::kSoftmax || input_types.size() != 1 || !all_float32(op, input_types)) return false;
  const auto& y = op.outputs[0].shape;
  if (y.empty()) return false;
  const int64_t rank = static_cast<int64_t>(y.size());
  int64_t axis = op.attrs.get_int("axis");
  if (axis < 0) axis += rank;
  return axis == rank - 1;
}

bool moves_unit_dims_only(const Op& transpose, const TensorType& input) {
  const auto& xs = input.shape;
  std::vector<int64_t> perm =
      transpose.attrs.ints.count("perm") ? transpose.attrs.get_ints("perm") : std::vector<int64_t>{};
  if (perm.empty())
    for (int64_t d = static_cast<int64_t>(xs.size()) - 1; d >= 0; --d) perm.push_back(d);
  int64_t prev = -1;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(xs.size())) return false;
    if (xs[p] == 1) continue;
    if (p < prev) return false;
    prev = p;
  }
  return true;
}

bool is_constant_scalar(const Op& producer, const TensorType& t) {
  return is_constant_source(producer.type) && t.dtype == kFloat32 && t.num_elements() == 1;
}

namespace {

bool is_gemm(OpType type) { return type == OpType::kMatMul || type == OpType::kGemm; }

// Whether the rules read the input types of `op` as a producer / as a reader (only
// GEMMs' and chain ops' are: the types are built for those alone, on search's hot path).
bool typed_producer(const Op& op) { return is_gemm(op.type); }
bool typed_reader(const Op& op) {
  return is_gemm(op.type) || chain_op_type(op.type) || op.type == OpType::kSoftmax;
}

}  // namespace

void describe_kernel(EpilogueFeed* feed, const std::vector<TensorType>& producer_input_types) {
  const Op& op = *feed->op;
  feed->gemm = is_gemm(op.type) ? gemm_epilogues(op, producer_input_types) : 0;
}

void describe_kernel(EpilogueFeed* feed, const Graph& graph, std::vector<TensorType>* scratch) {
  feed->gemm = 0;
  if (typed_producer(*feed->op)) describe_kernel(feed, input_types_of(graph, *feed->op, scratch));
}

void describe_reader(ReaderFeed* reader, const std::vector<TensorType>& reader_input_types) {
  const Op& op = *reader->op;
  reader->lt_gemm = is_gemm(op.type) && gemm_runs_on_lt(op, reader_input_types);
  reader->chain = chain_elementwise(op, reader_input_types) || last_axis_softmax(op, reader_input_types);
}

void describe_reader(ReaderFeed* reader, const Graph& graph, std::vector<TensorType>* scratch) {
  reader->lt_gemm = reader->chain = false;
  if (typed_reader(*reader->op)) describe_reader(reader, input_types_of(graph, *reader->op, scratch));
}

const std::vector<TensorType>& input_types_of(const Graph& graph, const Op& op, std::vector<TensorType>* scratch) {
  scratch->clear();
  for (const TensorRef& r : op.inputs) scratch->push_back(graph.tensor_type(r));
  return *scratch;
}

bool may_run_in_reader(const Op& op) { return op.type == OpType::kTranspose || chain_op_type(op.type); }

Fused fused_by_readers(const Op& x, const std::vector<TensorType>& input_types, const bool* scalar,
                       bool graph_output, const std::vector<ReaderFeed>& readers) {
  if (graph_output || readers.empty() || x.outputs.size() != 1) return Fused::kNone;
  if ((x.type == OpType::kMul || x.type == OpType::kDiv) && readers.size() == 1 &&
      readers[0].op->type == OpType::kMatMul && readers[0].lt_gemm && input_types.size() == 2) {
    for (int s = 0; s < (x.type == OpType::kDiv ? 1 : 2); ++s)  // a divisor only as the second input
      if (scalar[1 - s] && input_types[s] == x.outputs[0]) return Fused::kGemmScale;
    return Fused::kNone;
  }
  if (chain_elementwise(x, input_types)) {  // joins its reader's chain
    const ReaderFeed& r = readers[0];
    for (const ReaderFeed& other : readers)
      if (other.op != r.op) return Fused::kNone;
    const bool chained = r.chain && r.fused == Fused::kNone && r.op->outputs.size() == 1 &&
                         r.op->outputs[0].shape == x.outputs[0].shape;
    return chained ? Fused::kChain : Fused::kNone;
  }
  if (x.type != OpType::kTranspose || input_types.empty() || moves_unit_dims_only(x, input_types[0]))
    return Fused::kNone;
  for (const ReaderFeed& r : readers) {
    const bool gemm = is_gemm(r.op->type) && r.lt_gemm;
    // a Transpose reads its input through a view as well, whether it is a view itself or
    // runs as a strided copy
    const bool transpose = r.op->type == OpType::kTranspose && r.fused == Fused::kNone;
    if (!gemm && !transpose && !(r.chain && r.fused != Fused::kConvEpilogue)) return Fused::kNone;
  }
  return Fused::kView;
}

bool is_alias(const Op& op, const TensorType& input) {
  if (op.inputs.size() != 1) return false;
  return op.type == OpType::kReshape || op.type == OpType::kFlatten || op.type == OpType::kIdentity ||
         (op.type == OpType::kTranspose && moves_unit_dims_only(op, input));
}

bool runs_in_place(const Op& x, const std::vector<TensorType>& input_types, const std::vector<ConcatFeed>& inputs) {
  constexpr size_t kSliceAlign = 256;  // the executor's buffer alignment (executor.cc, kAlign)
  if (x.type != OpType::kConcat || x.outputs.size() != 1 || inputs.size() != input_types.size()) return false;
  const auto& shape = x.outputs[0].shape;
  const size_t axis = static_cast<size_t>(x.attrs.get_int("axis"));
  if (axis >= shape.size() || !std::all_of(shape.begin(), shape.begin() + axis, [](int64_t d) { return d == 1; }))
    return false;
  size_t at = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ConcatFeed& p = inputs[k];
    if (!p.op || is_source_op(p.op->type) || p.op->type == OpType::kSplit || p.op->outputs.size() != 1 ||
        p.constant || p.alias || p.view || p.uses != 1 || p.graph_output || at % kSliceAlign)
      return false;
    at += static_cast<size_t>(input_types[k].num_elements()) * 4;
  }
  return true;
}

int64_t fused_step_units(char kind, int64_t alone_units) {
  if (!kind) return alone_units;
  return static_cast<Fused>(kind) == Fused::kChain ? std::llround(static_cast<double>(alone_units) * kChainShare) : 0;
}

bool may_run_fused(const Op& op) {
  return op.type == OpType::kAdd || op.type == OpType::kTranspose || epilogue_activation(op) != EpilogueActivation::kNone;
}

// In the executor's order: convolution epilogues, then GEMM epilogues.
Fused fused_step_of(const Op& x, const std::vector<TensorType>& input_types, const EpilogueFeed* feeds) {
  if ((x.inputs.empty() && input_types.empty()) || !may_run_fused(x)) return Fused::kNone;
  Fused f = conv_epilogue_of(x, input_types, feeds);
  return f == Fused::kNone ? gemm_epilogue_of(x, input_types, feeds) : f;
}

std::vector<char> fused_step_ops(const Graph& graph, const std::vector<char>& constant) {
  return fused_step_ops(graph, constant, graph.consumers());
}

std::vector<char> fused_step_ops(const Graph& graph, const std::vector<char>& constant,
                                 const std::vector<std::vector<std::vector<std::pair<int, int>>>>& consumers) {
  const int n = graph.num_ops();
  std::vector<char> fused(n, 0);
  std::set<std::pair<int, int>> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert({r.op, r.index});
  std::vector<TensorType> in, producer_in;
  for (int id = 0; id < n; ++id) {  // op ids are a topological order: producers first
    const Op& x = graph.op(id);
    if (constant[id] || !may_run_fused(x)) continue;
    EpilogueFeed feeds[2];
    in.clear();
    for (size_t k = 0; k < x.inputs.size(); ++k) {
      const TensorRef& t = x.inputs[k];
      in.push_back(graph.tensor_type(t));
      if (k >= 2 || t.index != 0) continue;
      const Op& p = graph.op(t.op);
      feeds[k] = {&p, static_cast<bool>(constant[t.op]), static_cast<int>(consumers[t.op][0].size()),
                  outputs.count({t.op, 0}) > 0, static_cast<Fused>(fused[t.op])};
      describe_kernel(&feeds[k], graph, &producer_in);
    }
    fused[id] = static_cast<char>(fused_step_of(x, in, feeds));
  }
  // Then the ops judged by their readers (whose own verdicts are now known).
  std::vector<ReaderFeed> readers;
  for (int id = 0; id < n; ++id) {
    const Op& x = graph.op(id);
    if (constant[id] || fused[id] || !may_run_in_reader(x) || x.outputs.size() != 1) continue;
    in.clear();
    bool scalar[2] = {false, false};
    for (size_t k = 0; k < x.inputs.size(); ++k) {
      const TensorRef& t = x.inputs[k];
      in.push_back(graph.tensor_type(t));
      if (k < 2) scalar[k] = is_constant_scalar(graph.op(t.op), in.back());
    }
    readers.clear();
    for (const auto& use : consumers[id][0]) {
      ReaderFeed r{&graph.op(use.first), static_cast<Fused>(fused[use.first])};  // (a reader's own reader-side
                                                                                // verdict is not judged yet)
      describe_reader(&r, graph, &producer_in);
      readers.push_back(r);
    }
    fused[id] = static_cast<char>(fused_by_readers(x, in, scalar, outputs.count({id, 0}) > 0, readers));
  }
  // Last, the Concats that run no kernel (no rule above reads their verdict).
  std::vector<ConcatFeed> inputs;
  for (int id = 0; id < n; ++id) {
    const Op& x = graph.op(id);
    if (x.type != OpType::kConcat || constant[id]) continue;
    in.clear();
    inputs.clear();
    for (const TensorRef& t : x.inputs) {
      in.push_back(graph.tensor_type(t));
      const Op& p = graph.op(t.op);
      inputs.push_back({&p, static_cast<bool>(constant[t.op]),
                        !p.inputs.empty() && is_alias(p, graph.tensor_type(p.inputs[0])),
                        static_cast<Fused>(fused[t.op]) == Fused::kView,
                        static_cast<int>(consumers[t.op][t.index].size()), outputs.count({t.op, t.index}) > 0});
    }
    if (runs_in_place(x, in, inputs)) fused[id] = static_cast<char>(Fused::kInPlaceConcat);
  }
  return fused;
}

}  // namespace taso
