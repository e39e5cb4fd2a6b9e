// Attribute validation and output-type inference for every op type. Errors name the
// op and say what was expected.
#include <algorithm>
#include <numeric>
#include <set>

#include "shape_checker.h"
#include "taso/errors.h"
#include "taso/graph.h"

namespace taso {

using namespace shape_detail;  // Checker, broadcast, the data-movement inference functions

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
    case OpType::kClip:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish:
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
    case OpType::kCumSum: return infer_cumsum(c);
    case OpType::kEqual: return infer_equal(c);
    case OpType::kGatherElements: return infer_gather_elements(c);
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
