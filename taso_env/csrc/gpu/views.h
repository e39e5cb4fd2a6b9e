// Strided views, the executor's decision (invisible to the graph; the table cost model
// prices the Transposes among them by taso/epilogue.h): a
// Transpose, a Gather of a known scalar index (a slice at a fixed offset), and the
// Reshape / Flatten / Identity ops around them, need not copy data when every reader of
// the result can read strided memory. GEMMs (gemm_fusion.h) read their
// operands and element-wise chains (elementwise_fusion.h) read their inputs through a
// StridedView of the buffer the data really lives in; such an op runs (a strided copy,
// itself read through the view of its input) only where some reader needs contiguous
// data or the tensor is a graph output.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "taso/graph.h"

namespace taso {
namespace cuda {

// Element (i0, i1, ...) of a tensor lives at data + sum(i_d * strides[d]) elements.
struct StridedView {
  const void* data = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements; never negative

  bool contiguous() const;
};

// The view of a tensor as its reader sees it (resolved by the executor).
using ViewResolver = std::function<StridedView(const TensorRef&)>;

// Row-major contiguous strides of `shape`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

// The strides that present `v`'s elements, in row-major order, as `shape`, if the
// reshape needs no copy (dims that are merged must be laid out like one dim); false
// otherwise.
bool reshape_strides(const StridedView& v, const std::vector<int64_t>& shape, std::vector<int64_t>* strides);

// The permutation of a Transpose op (its "perm", or reversed dims) and a view permuted
// by it.
std::vector<int64_t> transpose_perm(const Op& op, size_t rank);
StridedView permuted(const StridedView& v, const std::vector<int64_t>& perm);

// Reshape, Flatten, Identity, and a Transpose that only moves dims of size 1: the
// executor gives their output their input's buffer (no step).
bool is_reshape_like(const Graph& graph, int op);

// Which Transposes the executor computes as views, and how to resolve any tensor to the
// buffer that holds it. Built once per executor.
class ViewPlan {
 public:
  // viewable[op]: a Transpose, or a Gather of a known scalar index (`known_scalars`:
  // Weight op id -> value), that the executor may skip (computed by a step, not taken by
  // another fusion); alias[op]: a Reshape-like whose output is its input's buffer.
  // float_dtype: the device dtype of float32 tensors (common.h: float_storage).
  ViewPlan(const Graph& graph, const std::vector<char>& viewable, const std::vector<char>& alias,
           const std::map<int, double>& known_scalars, int float_dtype);

  // Whether `op` is a Gather whose index is a known scalar in range (a slice at a fixed
  // offset).
  static bool is_constant_gather(const Graph& graph, int op, const std::map<int, double>& known_scalars);

  // view_reader[op]: the op's step reads its inputs through resolve() (GEMMs, element-wise
  // chains, viewable ops that run). A viewable op is skipped when nothing else reads it or
  // the Reshape-likes and viewable ops after it, none of them is a graph output, and every
  // Reshape on the way can present the strided data without a copy.
  void decide(const std::vector<char>& view_reader);
  bool skipped(int op) const { return skip_[op] != 0; }
  int num_skipped() const;
  // The view of tensor `t` over materialised buffers (`ptr` gives the device pointer of
  // a materialised tensor): through skipped ops and aliases to the buffer that holds the
  // data.
  StridedView resolve(const TensorRef& t, const std::function<void*(const TensorRef&)>& ptr) const;
  // What viewable op `op` computes, as a view of its resolved input (for a viewable op
  // that runs: a strided copy of this).
  StridedView op_view(int op, const std::function<void*(const TensorRef&)>& ptr) const;

 private:
  // resolve() without pointers (data stays null; `offset` collects the element offset);
  // false when a Reshape cannot be a view.
  bool layout(const TensorRef& t, StridedView* v, int64_t* offset) const;
  // Applies viewable op `op` to the view of its input.
  void apply(int op, const StridedView& in, StridedView* out, int64_t* offset) const;
  bool through(const TensorRef& t) const { return t.index == 0 && (skip_[t.op] || alias_[t.op]); }

  const Graph& graph_;
  std::vector<char> viewable_, alias_;
  std::map<int, double> known_;
  int float_dtype_;
  std::vector<char> skip_;
};

}  // namespace cuda
}  // namespace taso
