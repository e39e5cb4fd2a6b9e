// Attribute validation and output-type inference for every op type. Errors name the
// op and say what was expected.
#include <algorithm>
#include <numeric>
#include <set>

#include "taso/errors.h"
#include "taso/graph.h"

namespace taso {
namespace {

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

}  // namespace

void validate_op_attrs(OpType type, const std::string& name, Attrs& attrs) {
  const OpSchema& schema = op_schema(type);
  auto fail = [&](const std::string& what) {
    throw AttributeError(schema.name + " op '" + name + "': " + what);
  };
  std::set<std::string> known;
  for (const AttrSpec& a : schema.attrs) {
    known.insert(a.name);
    bool in_ints = attrs.ints.count(a.name) > 0;
    bool in_floats = attrs.floats.count(a.name) > 0;
    bool in_strings = attrs.strings.count(a.name) > 0;
    switch (a.kind) {
      case AttrKind::kInt:
      case AttrKind::kInts:
        if (in_floats || in_strings) fail("attribute '" + a.name + "' must be integer");
        if (!in_ints) {
          if (a.required) fail("missing required attribute '" + a.name + "'");
          if (a.has_default) attrs.ints[a.name] = a.default_ints;
        } else if (a.kind == AttrKind::kInt && attrs.ints[a.name].size() != 1) {
          fail("attribute '" + a.name + "' must be a single integer, got " + shape_str(attrs.ints[a.name]));
        }
        break;
      case AttrKind::kFloat:
        if (in_ints && !in_floats) {  // accept an integer for a float attribute
          const auto& v = attrs.ints[a.name];
          if (v.size() != 1) fail("attribute '" + a.name + "' must be a single number");
          attrs.floats[a.name] = static_cast<double>(v[0]);
          attrs.ints.erase(a.name);
          in_floats = true;
        }
        if (in_strings) fail("attribute '" + a.name + "' must be a number");
        if (!in_floats) {
          if (a.required) fail("missing required attribute '" + a.name + "'");
          attrs.floats[a.name] = a.default_float;
        }
        // Float attributes have float32 precision (as in ONNX), so a value survives an
        // ONNX round trip bit for bit and hashes the same.
        attrs.floats[a.name] = static_cast<double>(static_cast<float>(attrs.floats[a.name]));
        break;
      case AttrKind::kString:
        if (in_ints || in_floats) fail("attribute '" + a.name + "' must be a string");
        if (!in_strings && a.required) fail("missing required attribute '" + a.name + "'");
        break;
    }
  }
  auto check_unknown = [&](const auto& map) {
    for (const auto& kv : map)
      if (!known.count(kv.first)) fail("unknown attribute '" + kv.first + "'");
  };
  check_unknown(attrs.ints);
  check_unknown(attrs.floats);
  check_unknown(attrs.strings);
}

namespace {

std::vector<int64_t> broadcast(const Checker& c, const std::vector<int64_t>& a,
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

void check_activation(Checker& c) {
  int64_t act = c.int_attr("activation");
  if (act < kActNone || act > kActTanh)
    c.attr_fail("attribute 'activation' must be 0 (none), 1 (relu), 2 (sigmoid) or 3 (tanh), got " +
                std::to_string(act));
}

int64_t pooled_size(const Checker& c, int64_t in, int64_t kernel, int64_t stride, int64_t pad_begin,
                    int64_t pad_end, int64_t dilation, bool ceil_mode) {
  int64_t span = dilation * (kernel - 1) + 1;
  int64_t padded = in + pad_begin + pad_end;
  if (padded < span)
    c.shape_fail("window of " + std::to_string(span) + " does not fit input size " + std::to_string(in) +
                 " with padding " + std::to_string(pad_begin) + "+" + std::to_string(pad_end));
  int64_t out = ceil_mode ? (padded - span + stride - 1) / stride + 1 : (padded - span) / stride + 1;
  // ONNX: the last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

std::vector<TensorType> infer_conv(Checker& c) {
  c.expect_rank(0, 4, "input x");
  c.expect_rank(1, 4, "weight w");
  c.expect_float(0, "input x");
  c.expect_same_dtype(0, 1);
  c.expect_len("strides", 2);
  c.expect_len("pads", 4);
  c.expect_len("dilations", 2);
  c.expect_positive("strides");
  c.expect_positive("dilations");
  c.expect_non_negative("pads");
  check_activation(c);
  const auto& x = c.input(0).shape;
  const auto& w = c.input(1).shape;
  int64_t group = c.int_attr("group");
  if (group <= 0) c.attr_fail("attribute 'group' must be positive");
  if (x[1] % group != 0 || w[0] % group != 0)
    c.shape_fail("channels in " + std::to_string(x[1]) + " and out " + std::to_string(w[0]) +
                 " must both divide by group " + std::to_string(group));
  if (w[1] * group != x[1])
    c.shape_fail("weight " + shape_str(w) + " expects " + std::to_string(w[1] * group) +
                 " input channels (group " + std::to_string(group) + "), input x is " + shape_str(x));
  if (c.num_inputs() == 3) {
    const auto& b = c.input(2).shape;
    if (b.size() != 1 || b[0] != w[0])
      c.shape_fail("bias must be [" + std::to_string(w[0]) + "], got " + shape_str(b));
    c.expect_same_dtype(0, 2);
  }
  const auto& s = c.ints_attr("strides");
  const auto& p = c.ints_attr("pads");
  const auto& d = c.ints_attr("dilations");
  int64_t h = pooled_size(c, x[2], w[2], s[0], p[0], p[2], d[0], false);
  int64_t wo = pooled_size(c, x[3], w[3], s[1], p[1], p[3], d[1], false);
  return {{{x[0], w[0], h, wo}, c.input(0).dtype}};
}

std::vector<TensorType> infer_matmul(Checker& c) {
  check_activation(c);
  c.expect_same_dtype(0, 1);
  std::vector<int64_t> a = c.input(0).shape, b = c.input(1).shape;
  if (a.empty() || b.empty()) c.shape_fail("MatMul inputs must have rank >= 1");
  bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), k2 = b[b.size() - 2], n = b.back();
  if (k != k2)
    c.shape_fail("inner dimensions differ: " + shape_str(c.input(0).shape) + " x " + shape_str(c.input(1).shape));
  std::vector<int64_t> batch = broadcast(c, std::vector<int64_t>(a.begin(), a.end() - 2),
                                         std::vector<int64_t>(b.begin(), b.end() - 2));
  if (!a_vec) batch.push_back(m);
  if (!b_vec) batch.push_back(n);
  return {{batch, c.input(0).dtype}};
}

std::vector<TensorType> infer_gemm(Checker& c) {
  c.expect_rank(0, 2, "input a");
  c.expect_rank(1, 2, "input b");
  c.expect_same_dtype(0, 1);
  const auto& a = c.input(0).shape;
  const auto& b = c.input(1).shape;
  bool ta = c.int_attr("trans_a") != 0, tb = c.int_attr("trans_b") != 0;
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t k2 = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k != k2) c.shape_fail("inner dimensions differ: " + shape_str(a) + " x " + shape_str(b) +
                            " (trans_a " + std::to_string(ta) + ", trans_b " + std::to_string(tb) + ")");
  std::vector<int64_t> out = {m, n};
  if (c.num_inputs() == 3) {
    if (broadcast(c, c.input(2).shape, out) != out)
      c.shape_fail("c " + shape_str(c.input(2).shape) + " does not broadcast to " + shape_str(out));
  }
  return {{out, c.input(0).dtype}};
}

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

std::vector<TensorType> infer_pool(Checker& c) {
  c.expect_rank(0, 4, "input x");
  c.expect_len("kernel", 2);
  c.expect_len("strides", 2);
  c.expect_len("pads", 4);
  c.expect_positive("kernel");
  c.expect_positive("strides");
  c.expect_non_negative("pads");
  const auto& x = c.input(0).shape;
  const auto& k = c.ints_attr("kernel");
  const auto& s = c.ints_attr("strides");
  const auto& p = c.ints_attr("pads");
  if (p[0] >= k[0] || p[2] >= k[0] || p[1] >= k[1] || p[3] >= k[1])
    c.attr_fail("pads " + shape_str(p) + " must be smaller than the kernel " + shape_str(k));
  bool ceil_mode = c.int_attr("ceil_mode") != 0;
  int64_t h = pooled_size(c, x[2], k[0], s[0], p[0], p[2], 1, ceil_mode);
  int64_t w = pooled_size(c, x[3], k[1], s[1], p[1], p[3], 1, ceil_mode);
  return {{{x[0], x[1], h, w}, c.input(0).dtype}};
}

std::vector<TensorType> infer_batchnorm(Checker& c) {
  const auto& x = c.input(0);
  if (x.shape.size() < 2) c.shape_fail("input x must have rank >= 2, got " + type_str(x));
  for (size_t i = 1; i < 5; ++i) {
    if (c.input(i).shape != std::vector<int64_t>{x.shape[1]})
      c.shape_fail("parameter input " + std::to_string(i) + " must be [" + std::to_string(x.shape[1]) +
                   "], got " + shape_str(c.input(i).shape));
  }
  return {x};
}

std::vector<TensorType> infer_enlarge(Checker& c) {
  c.expect_rank(0, 4, "weight w");
  c.expect_len("kernel", 2);
  const auto& w = c.input(0).shape;
  const auto& k = c.ints_attr("kernel");
  for (int i = 0; i < 2; ++i)
    if (k[i] < w[2 + i] || (k[i] - w[2 + i]) % 2 != 0)
      c.attr_fail("kernel " + shape_str(k) + " must be >= the weight's " + shape_str({w[2], w[3]}) +
                  " with an even difference");
  return {{{w[0], w[1], k[0], k[1]}, c.input(0).dtype}};
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

std::vector<TensorType> infer_reduce(Checker& c) {
  const auto& x = c.input(0);
  size_t rank = x.shape.size();
  if (!c.attrs().ints.count("axes")) {
    std::vector<int64_t> all(rank);
    std::iota(all.begin(), all.end(), 0);
    c.attrs().ints["axes"] = all;
  }
  std::vector<int64_t> axes = c.ints_attr("axes");
  for (int64_t& a : axes) {
    if (a < -static_cast<int64_t>(rank) || a >= static_cast<int64_t>(rank))
      c.attr_fail("axes " + shape_str(c.ints_attr("axes")) + " out of range for rank " + std::to_string(rank));
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    c.attr_fail("axes " + shape_str(c.ints_attr("axes")) + " repeat an axis");
  c.attrs().ints["axes"] = axes;
  bool keep = c.int_attr("keepdims") != 0;
  std::vector<int64_t> out;
  for (size_t i = 0; i < rank; ++i) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(i));
    if (!reduced) out.push_back(x.shape[i]);
    else if (keep) out.push_back(1);
  }
  return {{out, x.dtype}};
}

std::vector<TensorType> infer_layernorm(Checker& c) {
  const auto& x = c.input(0);
  c.expect_float(0, "input x");
  int64_t axis = c.normalise_axis("axis", x.shape.size());
  std::vector<int64_t> norm_shape(x.shape.begin() + axis, x.shape.end());
  for (size_t i = 1; i < c.num_inputs(); ++i)
    if (broadcast(c, c.input(i).shape, norm_shape) != norm_shape)
      c.shape_fail("parameter input " + std::to_string(i) + " " + shape_str(c.input(i).shape) +
                   " does not broadcast to the normalised shape " + shape_str(norm_shape));
  return {x};
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

}  // namespace

std::vector<TensorType> infer_output_types(OpType type, const std::string& op_name,
                                           const std::vector<TensorType>& inputs, Attrs& attrs) {
  const OpSchema& schema = op_schema(type);
  validate_op_attrs(type, op_name, attrs);
  int n = static_cast<int>(inputs.size());
  if (n < schema.min_inputs || (schema.max_inputs >= 0 && n > schema.max_inputs)) {
    std::string expected = schema.max_inputs < 0
                               ? "at least " + std::to_string(schema.min_inputs)
                               : schema.min_inputs == schema.max_inputs
                                     ? std::to_string(schema.min_inputs)
                                     : std::to_string(schema.min_inputs) + " to " + std::to_string(schema.max_inputs);
    throw GraphError(schema.name + " op '" + op_name + "' takes " + expected + " inputs, got " + std::to_string(n));
  }
  Checker c(type, op_name, inputs, attrs);
  switch (type) {
    case OpType::kConv2D: return infer_conv(c);
    case OpType::kMatMul: return infer_matmul(c);
    case OpType::kGemm: return infer_gemm(c);
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
      c.expect_same_dtype(0, 1);
      return {{broadcast(c, inputs[0].shape, inputs[1].shape), inputs[0].dtype}};
    case OpType::kRelu:
    case OpType::kIdentity:
      return {inputs[0]};
    case OpType::kSigmoid:
    case OpType::kTanh:
    case OpType::kErf:
    case OpType::kGelu:
    case OpType::kSqrt:
    case OpType::kExp:
      c.expect_float(0, "input x");
      return {inputs[0]};
    case OpType::kConcat: return infer_concat(c);
    case OpType::kSplit: return infer_split(c);
    case OpType::kTranspose: return infer_transpose(c);
    case OpType::kReshape: return infer_reshape(c);
    case OpType::kFlatten: return infer_flatten(c);
    case OpType::kMaxPool2D:
    case OpType::kAvgPool2D: return infer_pool(c);
    case OpType::kGlobalAvgPool:
      c.expect_rank(0, 4, "input x");
      return {{{inputs[0].shape[0], inputs[0].shape[1], 1, 1}, inputs[0].dtype}};
    case OpType::kBatchNorm: return infer_batchnorm(c);
    case OpType::kEnlarge: return infer_enlarge(c);
    case OpType::kSoftmax:
      c.expect_float(0, "input x");
      c.normalise_axis("axis", inputs[0].shape.size());
      return {inputs[0]};
    case OpType::kPad: return infer_pad(c);
    case OpType::kReduceMean:
    case OpType::kReduceSum: return infer_reduce(c);
    case OpType::kLayerNorm: return infer_layernorm(c);
    case OpType::kGather: return infer_gather(c);
    case OpType::kWhere: return infer_where(c);
    case OpType::kCast: return infer_cast(c);
    case OpType::kConstant: {
      c.expect_non_negative("shape");
      int64_t dtype = c.int_attr("dtype");
      try {
        dtype_size(static_cast<int>(dtype));
      } catch (const ValueError&) {
        c.attr_fail("attribute 'dtype' = " + std::to_string(dtype) + " is not a supported dtype code");
      }
      return {{c.ints_attr("shape"), static_cast<int>(dtype)}};
    }
    case OpType::kInput:
    case OpType::kWeight:
    case OpType::kOpaque:
    case OpType::kNumOpTypes:
      break;
  }
  throw GraphError(schema.name + " op '" + op_name + "' has declared outputs; nothing to infer");
}

}  // namespace taso
