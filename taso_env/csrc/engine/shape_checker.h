// Internal to the shape inference sources: the attribute/shape checker of one op and
// the inference functions of the data-movement ops (shape_inference_data.cc).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "taso/errors.h"
#include "taso/graph.h"

namespace taso {
namespace shape_detail {

class Checker {
 public:
  Checker(OpType type, const std::string& name, const std::vector<TensorType>& in, Attrs& attrs)
      : type_(type), name_(name), in_(in), attrs_(attrs) {}

  [[noreturn]] void shape_fail(const std::string& what) const {
    throw ShapeError(where() + ": " + what);
  }
  [[noreturn]] void attr_fail(const std::string& what) const {
    throw AttributeError(where() + ": " + what);
  }
  std::string where() const { return op_type_name(type_) + " op '" + name_ + "'"; }

  const TensorType& input(size_t i) const { return in_[i]; }
  size_t num_inputs() const { return in_.size(); }

  void expect_rank(size_t i, size_t rank, const char* what) const {
    if (in_[i].shape.size() != rank)
      shape_fail(std::string(what) + " must have rank " + std::to_string(rank) + ", got " +
                 type_str(in_[i]));
  }
  void expect_float(size_t i, const char* what) const {
    int d = in_[i].dtype;
    if (d != kFloat32 && d != kFloat16 && d != kFloat64)
      shape_fail(std::string(what) + " must be a floating-point tensor, got " + type_str(in_[i]));
  }
  void expect_same_dtype(size_t i, size_t j) const {
    if (in_[i].dtype != in_[j].dtype)
      shape_fail("inputs " + std::to_string(i) + " and " + std::to_string(j) +
                 " have different dtypes: " + type_str(in_[i]) + " vs " + type_str(in_[j]));
  }

  int64_t int_attr(const char* n) const { return attrs_.get_int(n); }
  const std::vector<int64_t>& ints_attr(const char* n) const { return attrs_.get_ints(n); }
  void expect_len(const char* n, size_t len) const {
    if (ints_attr(n).size() != len)
      attr_fail(std::string("attribute '") + n + "' must have " + std::to_string(len) +
                " values, got " + shape_str(ints_attr(n)));
  }
  void expect_positive(const char* n) const {
    for (int64_t v : ints_attr(n))
      if (v <= 0) attr_fail(std::string("attribute '") + n + "' must be positive, got " + shape_str(ints_attr(n)));
  }
  void expect_non_negative(const char* n) const {
    for (int64_t v : ints_attr(n))
      if (v < 0) attr_fail(std::string("attribute '") + n + "' must be >= 0, got " + shape_str(ints_attr(n)));
  }
  // Normalises a (possibly negative) scalar axis attribute against `rank` and stores it.
  int64_t normalise_axis(const char* n, size_t rank) {
    int64_t axis = int_attr(n);
    int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r)
      attr_fail(std::string("attribute '") + n + "' = " + std::to_string(axis) +
                " out of range for rank " + std::to_string(rank));
    if (axis < 0) axis += r;
    attrs_.ints[n] = {axis};
    return axis;
  }
  Attrs& attrs() { return attrs_; }

 private:
  OpType type_;
  const std::string& name_;
  const std::vector<TensorType>& in_;
  Attrs& attrs_;
};

inline std::vector<int64_t> broadcast(const Checker& c, const std::vector<int64_t>& a,
                               const std::vector<int64_t>& b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      c.shape_fail("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<TensorType> infer_concat(Checker& c);
std::vector<TensorType> infer_split(Checker& c);
std::vector<TensorType> infer_transpose(Checker& c);
std::vector<TensorType> infer_reshape(Checker& c);
std::vector<TensorType> infer_flatten(Checker& c);
std::vector<TensorType> infer_pad(Checker& c);
std::vector<TensorType> infer_gather(Checker& c);
std::vector<TensorType> infer_where(Checker& c);
std::vector<TensorType> infer_cast(Checker& c);
std::vector<TensorType> infer_cumsum(Checker& c);
std::vector<TensorType> infer_equal(Checker& c);
std::vector<TensorType> infer_gather_elements(Checker& c);

}  // namespace shape_detail
}  // namespace taso
