// Output-type inference of the data-movement ops: Concat, Split, Transpose, Reshape,
// Flatten, Pad, Gather, Where, Cast, CumSum, Equal, GatherElements.
#include <algorithm>
#include <numeric>
#include <set>

#include "shape_checker.h"

namespace taso {
namespace shape_detail {

std::vector<TensorType> infer_concat(Checker& c) {
  size_t rank = c.input(0).shape.size();
  if (rank == 0) c.shape_fail("cannot concatenate scalars");
  int64_t axis = c.normalise_axis("axis", rank);
  std::vector<int64_t> out = c.input(0).shape;
  out[axis] = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const auto& s = c.input(i).shape;
    if (s.size() != rank || c.input(i).dtype != c.input(0).dtype)
      c.shape_fail("input " + std::to_string(i) + " " + type_str(c.input(i)) + " does not match input 0 " +
                   type_str(c.input(0)));
    for (size_t d = 0; d < rank; ++d)
      if (static_cast<int64_t>(d) != axis && s[d] != c.input(0).shape[d])
        c.shape_fail("input " + std::to_string(i) + " " + shape_str(s) + " differs from input 0 " +
                     shape_str(c.input(0).shape) + " outside axis " + std::to_string(axis));
    out[axis] += s[axis];
  }
  return {{out, c.input(0).dtype}};
}

std::vector<TensorType> infer_split(Checker& c) {
  const auto& x = c.input(0);
  if (x.shape.empty()) c.shape_fail("cannot split a scalar");
  int64_t axis = c.normalise_axis("axis", x.shape.size());
  const auto& sizes = c.ints_attr("split");
  if (sizes.empty()) c.attr_fail("attribute 'split' must not be empty");
  c.expect_positive("split");
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  if (total != x.shape[axis])
    c.shape_fail("split sizes " + shape_str(sizes) + " sum to " + std::to_string(total) + ", axis " +
                 std::to_string(axis) + " of " + shape_str(x.shape) + " has " + std::to_string(x.shape[axis]));
  std::vector<TensorType> outs;
  for (int64_t s : sizes) {
    TensorType t = x;
    t.shape[axis] = s;
    outs.push_back(t);
  }
  return outs;
}

std::vector<TensorType> infer_transpose(Checker& c) {
  const auto& x = c.input(0);
  size_t rank = x.shape.size();
  if (!c.attrs().ints.count("perm")) {
    std::vector<int64_t> rev(rank);
    for (size_t i = 0; i < rank; ++i) rev[i] = static_cast<int64_t>(rank - 1 - i);
    c.attrs().ints["perm"] = rev;
  }
  const auto& perm = c.ints_attr("perm");
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted.size() != rank || sorted[i] != static_cast<int64_t>(i))
      c.attr_fail("perm " + shape_str(perm) + " is not a permutation of " + std::to_string(rank) + " axes");
  TensorType out = x;
  for (size_t i = 0; i < rank; ++i) out.shape[i] = x.shape[perm[i]];
  return {out};
}

std::vector<TensorType> infer_reshape(Checker& c) {
  const auto& x = c.input(0);
  std::vector<int64_t> shape = c.ints_attr("shape");
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      if (i >= x.shape.size()) c.attr_fail("shape " + shape_str(c.ints_attr("shape")) + ": 0 at axis " +
                                           std::to_string(i) + " beyond input rank");
      shape[i] = x.shape[i];
    }
    if (shape[i] == -1) {
      if (infer_at >= 0) c.attr_fail("shape " + shape_str(c.ints_attr("shape")) + " has more than one -1");
      infer_at = static_cast<int>(i);
    } else if (shape[i] < 0) {
      c.attr_fail("shape " + shape_str(c.ints_attr("shape")) + " has a negative dimension");
    } else {
      known *= shape[i];
    }
  }
  int64_t n = x.num_elements();
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0)
      c.shape_fail("cannot reshape " + shape_str(x.shape) + " to " + shape_str(c.ints_attr("shape")));
    shape[infer_at] = n / known;
  } else if (known != n) {
    c.shape_fail("cannot reshape " + shape_str(x.shape) + " (" + std::to_string(n) + " elements) to " +
                 shape_str(shape));
  }
  c.attrs().ints["shape"] = shape;
  return {{shape, x.dtype}};
}

std::vector<TensorType> infer_flatten(Checker& c) {
  const auto& x = c.input(0);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t axis = c.int_attr("axis");
  if (axis < -rank || axis > rank) c.attr_fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  c.attrs().ints["axis"] = {axis};
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= x.shape[i];
  return {{{outer, inner}, x.dtype}};
}

std::vector<TensorType> infer_pad(Checker& c) {
  const auto& x = c.input(0);
  c.expect_len("pads", 2 * x.shape.size());
  c.expect_non_negative("pads");
  const auto& p = c.ints_attr("pads");
  TensorType out = x;
  for (size_t i = 0; i < x.shape.size(); ++i) out.shape[i] += p[i] + p[i + x.shape.size()];
  return {out};
}

std::vector<TensorType> infer_gather(Checker& c) {
  const auto& data = c.input(0);
  const auto& idx = c.input(1);
  if (idx.dtype != kInt64 && idx.dtype != kInt32) c.shape_fail("indices must be int32 or int64, got " + type_str(idx));
  if (data.shape.empty()) c.shape_fail("data must have rank >= 1");
  int64_t axis = c.normalise_axis("axis", data.shape.size());
  std::vector<int64_t> out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  return {{out, data.dtype}};
}

std::vector<TensorType> infer_where(Checker& c) {
  if (c.input(0).dtype != kBool) c.shape_fail("condition must be bool, got " + type_str(c.input(0)));
  c.expect_same_dtype(1, 2);
  auto s = broadcast(c, broadcast(c, c.input(0).shape, c.input(1).shape), c.input(2).shape);
  return {{s, c.input(1).dtype}};
}

std::vector<TensorType> infer_cast(Checker& c) {
  int64_t to = c.int_attr("to");
  try {
    dtype_size(static_cast<int>(to));
  } catch (const ValueError&) {
    c.attr_fail("attribute 'to' = " + std::to_string(to) + " is not a supported dtype code");
  }
  return {{c.input(0).shape, static_cast<int>(to)}};
}

std::vector<TensorType> infer_cumsum(Checker& c) {
  const auto& x = c.input(0);
  if (x.dtype == kBool) c.shape_fail("cannot sum bools, got " + type_str(x));
  if (x.shape.empty()) c.shape_fail("x must have rank >= 1");
  c.normalise_axis("axis", x.shape.size());
  return {x};
}

std::vector<TensorType> infer_equal(Checker& c) {
  c.expect_same_dtype(0, 1);
  return {{broadcast(c, c.input(0).shape, c.input(1).shape), kBool}};
}

std::vector<TensorType> infer_gather_elements(Checker& c) {
  const auto& data = c.input(0);
  const auto& idx = c.input(1);
  if (idx.dtype != kInt64 && idx.dtype != kInt32) c.shape_fail("indices must be int32 or int64, got " + type_str(idx));
  if (data.shape.empty()) c.shape_fail("data must have rank >= 1");
  if (idx.shape.size() != data.shape.size())
    c.shape_fail("indices " + shape_str(idx.shape) + " must have the rank of data " + shape_str(data.shape));
  int64_t axis = c.normalise_axis("axis", data.shape.size());
  for (size_t d = 0; d < data.shape.size(); ++d)
    if (static_cast<int64_t>(d) != axis && idx.shape[d] > data.shape[d])
      c.shape_fail("indices " + shape_str(idx.shape) + " exceed data " + shape_str(data.shape) + " at axis " +
                   std::to_string(d));
  return {{idx.shape, data.dtype}};
}

}  // namespace shape_detail
}  // namespace taso
