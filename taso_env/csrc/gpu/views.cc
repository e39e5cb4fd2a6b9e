// Strided views of tensors (see views.h).
#include "views.h"

#include "taso/epilogue.h"

#include <set>
#include <stdexcept>

#include "library_util.h"

namespace taso {
namespace cuda {

bool StridedView::contiguous() const { return strides == contiguous_strides(shape); }

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

bool reshape_strides(const StridedView& v, const std::vector<int64_t>& shape, std::vector<int64_t>* strides) {
  strides->assign(shape.size(), 1);
  if (prod(v.shape) == 0 || v.shape.empty()) {
    *strides = contiguous_strides(shape);
    return true;
  }
  // Walk both shapes from the innermost dim. The old dims split into chunks that are
  // contiguous with each other (stride[d] = stride[d + 1] * size[d + 1]); each chunk
  // must be covered exactly by a run of new dims, which then step through it.
  int nd = static_cast<int>(shape.size()) - 1;
  int64_t base = v.strides.back(), chunk = 1, covered = 1;
  for (int d = static_cast<int>(v.shape.size()) - 1; d >= 0; --d) {
    chunk *= v.shape[d];
    bool chunk_ends = d == 0 || (v.shape[d - 1] != 1 && v.strides[d - 1] != chunk * base);
    if (!chunk_ends) continue;
    while (nd >= 0 && (covered < chunk || shape[nd] == 1)) {
      (*strides)[nd] = covered * base;
      covered *= shape[nd];
      --nd;
    }
    if (covered != chunk) return false;
    if (d > 0) {
      base = v.strides[d - 1];
      chunk = covered = 1;
    }
  }
  return nd < 0;
}

bool is_reshape_like(const Graph& graph, int id) {
  const Op& op = graph.op(id);
  if (op.inputs.size() != 1 || op.outputs.size() != 1) return false;
  if (op.type == OpType::kReshape || op.type == OpType::kFlatten || op.type == OpType::kIdentity) return true;
  return op.type == OpType::kTranspose && moves_unit_dims_only(op, graph.tensor_type(op.inputs[0]));
}

std::vector<int64_t> transpose_perm(const Op& op, size_t rank) {
  std::vector<int64_t> perm = op.attrs.ints.count("perm") ? op.attrs.get_ints("perm") : std::vector<int64_t>{};
  if (perm.empty())
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) perm.push_back(d);
  return perm;
}

StridedView permuted(const StridedView& v, const std::vector<int64_t>& perm) {
  StridedView p{v.data, {}, {}};
  for (int64_t d : perm) {
    p.shape.push_back(v.shape[d]);
    p.strides.push_back(v.strides[d]);
  }
  return p;
}

ViewPlan::ViewPlan(const Graph& graph, const std::vector<char>& viewable, const std::vector<char>& alias,
                   const std::map<int, double>& known_scalars, int float_dtype)
    : graph_(graph),
      viewable_(viewable),
      alias_(alias),
      known_(known_scalars),
      float_dtype_(float_dtype),
      skip_(graph.num_ops(), 0) {}

bool ViewPlan::is_constant_gather(const Graph& graph, int id, const std::map<int, double>& known_scalars) {
  const Op& op = graph.op(id);
  if (op.type != OpType::kGather || op.inputs.size() != 2 || op.inputs[1].index != 0) return false;
  auto it = known_scalars.find(op.inputs[1].op);
  const TensorType& idx = graph.tensor_type(op.inputs[1]);
  if (it == known_scalars.end() || idx.num_elements() != 1 || (idx.dtype != kInt64 && idx.dtype != kInt32))
    return false;
  const auto& ds = graph.tensor_type(op.inputs[0]).shape;
  int64_t axis = op.attrs.get_int("axis");
  if (axis < 0) axis += static_cast<int64_t>(ds.size());
  if (axis < 0 || axis >= static_cast<int64_t>(ds.size())) return false;
  const int64_t k0 = static_cast<int64_t>(it->second), k = k0 < 0 ? k0 + ds[axis] : k0;
  return k >= 0 && k < ds[axis];
}

int ViewPlan::num_skipped() const {
  int k = 0;
  for (char c : skip_) k += c != 0;
  return k;
}

void ViewPlan::apply(int id, const StridedView& in, StridedView* out, int64_t* offset) const {
  const Op& op = graph_.op(id);
  if (op.type == OpType::kTranspose) {
    *out = permuted(in, transpose_perm(op, in.shape.size()));
    return;
  }
  // A Gather of index k along `axis`: the slice k, with the index's own (size-1) dims.
  int64_t axis = op.attrs.get_int("axis");
  if (axis < 0) axis += static_cast<int64_t>(in.shape.size());
  int64_t k = static_cast<int64_t>(known_.at(op.inputs[1].op));
  if (k < 0) k += in.shape[axis];
  *offset += k * in.strides[axis];
  out->data = in.data;
  out->shape = op.outputs[0].shape;
  out->strides.clear();
  for (int64_t d = 0; d < axis; ++d) out->strides.push_back(in.strides[d]);
  for (size_t d = 0; d < graph_.tensor_type(op.inputs[1]).shape.size(); ++d) out->strides.push_back(0);
  for (size_t d = axis + 1; d < in.shape.size(); ++d) out->strides.push_back(in.strides[d]);
}

bool ViewPlan::layout(const TensorRef& t, StridedView* v, int64_t* offset) const {
  const Op& op = graph_.op(t.op);
  const TensorType& type = graph_.tensor_type(t);
  if (!through(t)) {
    v->data = nullptr;
    v->shape = type.shape;
    v->strides = contiguous_strides(type.shape);
    return true;
  }
  StridedView in;
  if (!layout(op.inputs[0], &in, offset)) return false;
  if (skip_[t.op]) {
    apply(t.op, in, v, offset);
    return true;
  }
  v->data = in.data;
  v->shape = type.shape;
  return reshape_strides(in, type.shape, &v->strides);
}

void ViewPlan::decide(const std::vector<char>& view_reader) {
  const int n = graph_.num_ops();
  std::set<int> outputs;
  for (const TensorRef& r : graph_.outputs()) outputs.insert(r.op);
  const auto consumers = graph_.consumers();
  for (int id = 0; id < n; ++id) {
    if (!viewable_[id] || skip_[id]) continue;
    // Tentatively skip it, with every viewable op after it through Reshape-likes, and
    // check that all of them can stay views.
    std::vector<int> closure{id}, tentative{id};
    skip_[id] = 1;
    bool ok = true;
    for (size_t i = 0; ok && i < closure.size(); ++i) {
      int v = closure[i];
      StridedView probe;
      int64_t offset = 0;
      if (outputs.count(v) || !layout({v, 0}, &probe, &offset)) {
        ok = false;
        break;
      }
      for (const auto& [reader, slot] : consumers[v][0]) {
        if (alias_[reader]) {
          closure.push_back(reader);
        } else if (viewable_[reader] && slot == 0) {
          if (!skip_[reader]) {
            skip_[reader] = 1;
            tentative.push_back(reader);
          }
          closure.push_back(reader);
        } else if (!view_reader[reader]) {
          ok = false;
        }
      }
    }
    if (!ok)
      for (int t : tentative) skip_[t] = 0;
  }
}

StridedView ViewPlan::resolve(const TensorRef& t, const std::function<void*(const TensorRef&)>& ptr) const {
  // Find the materialised tensor under the views, then lay the view over its pointer.
  TensorRef base = t;
  while (through(base)) base = graph_.op(base.op).inputs[0];
  StridedView v;
  int64_t offset = 0;
  if (!layout(t, &v, &offset))  // decide() only skips what lays out; Reshapes of copies always do
    throw std::logic_error("strided view of op '" + graph_.op(t.op).name + "' has no layout");
  v.data = static_cast<const char*>(ptr(base)) +
           offset * dtype_size(stored_dtype(graph_.tensor_type(base).dtype, float_dtype_));
  return v;
}

StridedView ViewPlan::op_view(int id, const std::function<void*(const TensorRef&)>& ptr) const {
  StridedView in = resolve(graph_.op(id).inputs[0], ptr), out;
  int64_t offset = 0;
  apply(id, in, &out, &offset);
  const int dtype = stored_dtype(graph_.tensor_type(graph_.op(id).inputs[0]).dtype, float_dtype_);
  out.data = static_cast<const char*>(in.data) + offset * dtype_size(dtype);
  return out;
}

}  // namespace cuda
}  // namespace taso
