// Compiles each op type of docs/operators.md into a GPU step (library_ops for
// convolutions, pooling, batch norm and GEMMs; kernels.h for the rest).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>

#include "executor.h"
#include "kernels.h"
#include "library_ops.h"
#include "library_util.h"
#include "tuning.h"
#include "taso/errors.h"

namespace taso {
namespace cuda {
namespace {

std::string label(const Op& op) { return op_type_name(op.type) + " op '" + op.name + "'"; }

[[noreturn]] void unsupported(const Op& op, const std::string& why) {
  throw UnsupportedGraphError(label(op) + ": " + why);
}

void require_float32(const Op& op, const std::vector<TensorType>& in, size_t count) {
  for (size_t i = 0; i < std::min(count, in.size()); ++i)
    if (in[i].dtype != kFloat32)
      unsupported(op, "input " + std::to_string(i) + " is " + type_str(in[i]) + "; this op runs in float32 only");
}

void check_rank(const Op& op, const std::vector<int64_t>& shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    unsupported(op, "rank " + std::to_string(shape.size()) + " exceeds the backend's maximum " +
                        std::to_string(kMaxRank));
}

// Copies `host` into a new device array owned by `res`.
template <typename T>
T* upload(StepResources& res, const std::vector<T>& host) {
  res.params.emplace_back(host.size() * sizeof(T));
  copy_to_device(res.params.back().get(), host.data(), host.size() * sizeof(T));
  return res.params.back().as<T>();
}

Step copy_step(const void* x, void* y, size_t bytes) {
  return [=](cudaStream_t s) {
    if (bytes && x != y) RLFLOW_CUDA(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s));
  };
}

uint64_t value_bits(int dtype, double value) {
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof v); };
  switch (dtype) {
    case kFloat32: put(static_cast<float>(value)); break;
    case kFloat16: put(__float2half_rn(static_cast<float>(value))); break;
    case kBFloat16: put(__float2bfloat16_rn(static_cast<float>(value))); break;
    case kFloat64: put(value); break;
    case kInt32: put(static_cast<int32_t>(value)); break;
    case kInt64: put(static_cast<int64_t>(value)); break;
    case kInt8: put(static_cast<int8_t>(value)); break;
    case kUInt8: put(static_cast<uint8_t>(value)); break;
    case kBool: put(static_cast<uint8_t>(value != 0.0)); break;
    default: throw UnsupportedGraphError("pad value for dtype " + dtype_name(dtype) + " is not supported");
  }
  return bits;
}

Step compile_conv(const Graph& graph, int op_id, const std::vector<void*>& x, void* y, const void* residual,
                  int activation, MathMode math, StepResources& res) {
  const Op& op = graph.op(op_id);
  std::vector<TensorType> in;
  for (const TensorRef& r : op.inputs) in.push_back(graph.tensor_type(r));
  ConvConfig cfg = make_conv_config(op, in, residual != nullptr, activation, math);
  cfg.search = res.algo_search;
  if (res.plan) {
    auto it = res.plan->find(op_id);
    if (it != res.plan->end() && it->second.conv_algo >= 0) {
      cfg.forced_algo = it->second.conv_algo;
      cfg.forced_math = it->second.conv_math >= 0 ? it->second.conv_math
                                                   : (math == MathMode::kFP32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH);
      cfg.forced_fused = it->second.conv_fused_call != 0;
    }
  }
  auto conv = std::make_shared<ConvOp>(cfg);
  OpPlan& chosen = res.chosen[op_id];
  chosen.conv_algo = static_cast<int>(conv->algo().algo);
  chosen.conv_math = static_cast<int>(conv->algo().math);
  chosen.conv_fused_call = conv->algo().fused ? 1 : 0;
  chosen.fuse = residual != nullptr || activation != static_cast<int>(op.attrs.get_int("activation")) ? 1 : 0;
  res.workspace_bytes = std::max(res.workspace_bytes, conv->workspace_bytes());
  res.scratch_bytes = std::max(res.scratch_bytes, conv->scratch_bytes());
  const void *xp = x[0], *wp = x[1], *bp = cfg.bias ? x[2] : nullptr, *zp = residual;
  void* yp = y;
  conv->bind(xp, wp, yp);
  StepResources* r = &res;
  return [=](cudaStream_t s) { conv->run(xp, wp, bp, zp, yp, r->workspace.get(), r->scratch.get(), s); };
}

Step compile_pool(const Op& op, const std::vector<TensorType>& in, const std::vector<void*>& x,
                  const std::vector<void*>& y, MathMode math) {
  require_float32(op, in, 1);
  PoolConfig cfg;
  cfg.x = in[0].shape;
  cfg.y = op.outputs[0].shape;
  cfg.kernel = op.attrs.get_ints("kernel");
  cfg.strides = op.attrs.get_ints("strides");
  cfg.pads = op.attrs.get_ints("pads");
  cfg.max = op.type == OpType::kMaxPool2D;
  cfg.count_include_pad = !cfg.max && op.attrs.get_int("count_include_pad") != 0;
  cfg.math = math;
  auto pool = std::make_shared<PoolOp>(cfg);
  const void* xp = x[0];
  void* yp = y[0];
  return [=](cudaStream_t s) { pool->run(xp, yp, s); };
}

Step compile_reduce(const Op& op, const std::vector<TensorType>& in, const std::vector<int64_t>& axes,
                    bool mean, const std::vector<void*>& x, const std::vector<void*>& y, int dtype) {
  require_float32(op, in, 1);
  const auto& shape = in[0].shape;
  check_rank(op, shape);
  ReduceIndex idx;
  const std::vector<int64_t> strides = contiguous_strides(shape);
  int64_t n_out = 1, n_red = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (reduced) {
      idx.red_dims[idx.red_rank] = shape[d];
      idx.red_strides[idx.red_rank++] = strides[d];
      n_red *= shape[d];
    } else {
      idx.kept_dims[idx.kept_rank] = shape[d];
      idx.kept_strides[idx.kept_rank++] = strides[d];
      n_out *= shape[d];
    }
  }
  const void* xp = x[0];
  void* yp = y[0];
  return [=](cudaStream_t s) { launch_reduce(dtype, xp, yp, idx, n_out, n_red, mean, s); };
}

ParamIndex param_index(const Op& op, const std::vector<int64_t>& param, const std::vector<int64_t>& norm) {
  ParamIndex p;
  int64_t n = prod(norm), pn = prod(param);
  if (pn == n && (param.size() <= norm.size())) {
    p.mode = 0;  // same elements in the same order (leading 1s only)
    return p;
  }
  if (pn == 1) {
    p.mode = 1;
    return p;
  }
  check_rank(op, norm);
  BroadcastIndex b = make_broadcast(norm, {param});
  p.mode = 2;
  p.rank = b.rank;
  for (int d = 0; d < b.rank; ++d) {
    p.dims[d] = b.dims[d];
    p.strides[d] = b.strides[0][d];
  }
  return p;
}

}  // namespace

ConvConfig make_conv_config(const Op& op, const std::vector<TensorType>& in, bool residual, int activation,
                            MathMode math) {
  require_float32(op, in, in.size());
  ConvConfig cfg;
  cfg.x = in[0].shape;
  cfg.w = in[1].shape;
  cfg.y = op.outputs[0].shape;
  cfg.strides = op.attrs.get_ints("strides");
  cfg.pads = op.attrs.get_ints("pads");
  cfg.dilations = op.attrs.get_ints("dilations");
  cfg.group = op.attrs.get_int("group");
  cfg.activation = activation;
  cfg.bias = in.size() > 2;
  cfg.residual = residual;
  cfg.math = math;
  return cfg;
}

Step compile_strided_copy(const StridedView& from, int elem_size, void* to) {
  if (from.shape.size() > static_cast<size_t>(kMaxRank))
    throw UnsupportedGraphError("strided copy of rank " + std::to_string(from.shape.size()) + " exceeds the backend's " +
                                std::to_string(kMaxRank));
  PermuteIndex idx;
  idx.rank = static_cast<int>(from.shape.size());
  int64_t n = 1;
  for (int d = 0; d < idx.rank; ++d) {
    idx.out_dims[d] = from.shape[d];
    idx.in_strides[d] = from.strides[d];
    n *= from.shape[d];
  }
  const void* x = from.data;
  return [=](cudaStream_t s) { launch_permute(x, to, elem_size, idx, n, s); };
}

Step compile_fused_conv(const Graph& graph, int conv_id, const std::vector<void*>& inputs, const void* residual,
                        void* output, int activation, MathMode math, StepResources& res) {
  return compile_conv(graph, conv_id, inputs, output, residual, activation, math, res);
}

Step compile_op(const Graph& graph, int op_id, const std::vector<void*>& x, const std::vector<void*>& y,
                MathMode math, StepResources& res) {
  const Op& op = graph.op(op_id);
  std::vector<TensorType> in;
  for (const TensorRef& r : op.inputs) in.push_back(graph.tensor_type(r));
  const TensorType& out = op.outputs.empty() ? in.at(0) : op.outputs[0];
  const int64_t n = out.num_elements();
  // Device dtypes: float32 tensors are stored as res.float_dtype (16-bit math modes).
  const int fdt = res.float_dtype;
  const int dtype = stored_dtype(out.dtype, fdt);
  const int esize = dtype_size(dtype);
  const size_t bytes = static_cast<size_t>(n) * esize;
  for (const TensorType& t : op.outputs) check_rank(op, t.shape);
  switch (op.type) {
    case OpType::kConv2D:
      return compile_conv(graph, op_id, x, y[0], nullptr, static_cast<int>(op.attrs.get_int("activation")), math,
                          res);
    case OpType::kMatMul: {
      require_float32(op, in, 2);
      auto mm = std::make_shared<MatMulOp>(in[0].shape, in[1].shape, out.shape,
                                           static_cast<int>(op.attrs.get_int("activation")), math, x[0], x[1],
                                           y[0]);
      return [=](cudaStream_t s) { mm->run(s); };
    }
    case OpType::kGemm: {
      require_float32(op, in, in.size());
      auto gemm = std::make_shared<GemmOp>(in[0].shape, in[1].shape, in.size() > 2 ? &in[2].shape : nullptr,
                                           op.attrs.get_int("trans_a") != 0, op.attrs.get_int("trans_b") != 0,
                                           static_cast<float>(op.attrs.get_float("alpha")),
                                           static_cast<float>(op.attrs.get_float("beta")), math);
      const void *a = x[0], *b = x[1], *c = in.size() > 2 ? x[2] : nullptr;
      void* yp = y[0];
      return [=](cudaStream_t s) { gemm->run(a, b, c, yp, s); };
    }
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv: {
      if (!binary_supported(dtype)) unsupported(op, "dtype " + dtype_name(dtype) + " is not supported");
      BinaryKind k = op.type == OpType::kAdd   ? BinaryKind::kAdd
                     : op.type == OpType::kSub ? BinaryKind::kSub
                     : op.type == OpType::kMul ? BinaryKind::kMul
                                               : BinaryKind::kDiv;
      BroadcastIndex idx = make_broadcast(out.shape, {in[0].shape, in[1].shape});
      const void *a = x[0], *b = x[1];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_binary(k, dtype, a, b, yp, idx, n, s); };
    }
    case OpType::kRelu:
    case OpType::kSigmoid:
    case OpType::kTanh:
    case OpType::kErf:
    case OpType::kGelu:
    case OpType::kSqrt:
    case OpType::kExp: {
      UnaryKind k = op.type == OpType::kRelu      ? UnaryKind::kRelu
                    : op.type == OpType::kSigmoid ? UnaryKind::kSigmoid
                    : op.type == OpType::kTanh    ? UnaryKind::kTanh
                    : op.type == OpType::kErf     ? UnaryKind::kErf
                    : op.type == OpType::kGelu    ? UnaryKind::kGelu
                    : op.type == OpType::kSqrt    ? UnaryKind::kSqrt
                                                  : UnaryKind::kExp;
      if (!unary_supported(k, dtype)) unsupported(op, "dtype " + dtype_name(dtype) + " is not supported");
      const void* xp = x[0];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_unary(k, dtype, xp, yp, n, s); };
    }
    case OpType::kIdentity:
    case OpType::kReshape:
    case OpType::kFlatten: return copy_step(x[0], y[0], bytes);
    case OpType::kConcat:
    case OpType::kSplit: {
      bool concat = op.type == OpType::kConcat;
      const std::vector<int64_t>& whole = concat ? out.shape : in[0].shape;
      size_t axis = static_cast<size_t>(op.attrs.get_int("axis"));
      int64_t outer = prod(whole, 0, axis), inner = prod(whole, axis + 1);
      size_t pieces = concat ? in.size() : op.outputs.size();
      std::vector<int64_t> offsets{0};
      for (size_t i = 0; i < pieces; ++i) {
        const auto& shape = concat ? in[i].shape : op.outputs[i].shape;
        offsets.push_back(offsets.back() + shape[axis] * inner);
      }
      int64_t row_len = offsets.back();
      if (pieces == 1) return copy_step(x[0], y[0], bytes);
      const int64_t* d_offsets = upload(res, offsets);
      int p = static_cast<int>(pieces);
      if (concat) {
        const void* const* ptrs = upload(res, std::vector<const void*>(x.begin(), x.end()));
        void* yp = y[0];
        return [=](cudaStream_t s) { launch_concat(ptrs, d_offsets, p, yp, esize, outer, row_len, s); };
      }
      void* const* ptrs = upload(res, std::vector<void*>(y.begin(), y.end()));
      const void* xp = x[0];
      return [=](cudaStream_t s) { launch_split(xp, ptrs, d_offsets, p, esize, outer, row_len, s); };
    }
    case OpType::kTranspose: {
      const auto& xs = in[0].shape;
      StridedView whole{x[0], xs, contiguous_strides(xs)};
      return compile_strided_copy(permuted(whole, transpose_perm(op, xs.size())), esize, y[0]);
    }
    case OpType::kMaxPool2D:
    case OpType::kAvgPool2D: return compile_pool(op, in, x, y, math);
    case OpType::kGlobalAvgPool: return compile_reduce(op, in, {2, 3}, true, x, y, fdt);
    case OpType::kReduceMean:
    case OpType::kReduceSum:
      return compile_reduce(op, in, op.attrs.get_ints("axes"), op.type == OpType::kReduceMean, x, y, fdt);
    case OpType::kBatchNorm: {
      require_float32(op, in, 5);
      auto bn = std::make_shared<BatchNormOp>(in[0].shape, op.attrs.get_float("epsilon"), math);
      const void *xp = x[0], *sc = x[1], *bi = x[2], *me = x[3], *va = x[4];
      void* yp = y[0];
      return [=](cudaStream_t s) { bn->run(xp, sc, bi, me, va, yp, s); };
    }
    case OpType::kEnlarge:
    case OpType::kPad: {
      PadIndex idx;
      const auto& xs = in[0].shape;
      idx.rank = static_cast<int>(xs.size());
      uint64_t bits = 0;
      if (op.type == OpType::kPad) {
        const auto& pads = op.attrs.get_ints("pads");
        for (int d = 0; d < idx.rank; ++d) idx.begins[d] = pads[d];
        bits = value_bits(dtype, op.attrs.get_float("value"));
      } else {
        idx.begins[2] = (out.shape[2] - xs[2]) / 2;
        idx.begins[3] = (out.shape[3] - xs[3]) / 2;
      }
      for (int d = 0; d < idx.rank; ++d) {
        idx.out_dims[d] = out.shape[d];
        idx.in_dims[d] = xs[d];
      }
      const void* xp = x[0];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_pad(xp, yp, esize, idx, bits, n, s); };
    }
    case OpType::kSoftmax: {
      require_float32(op, in, 1);
      size_t axis = static_cast<size_t>(op.attrs.get_int("axis"));
      const auto& xs = in[0].shape;
      int64_t outer = prod(xs, 0, axis), len = xs.empty() ? 1 : xs[axis], inner = prod(xs, axis + 1);
      const void* xp = x[0];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_softmax(fdt, xp, yp, outer, len, inner, s); };
    }
    case OpType::kLayerNorm: {
      require_float32(op, in, in.size());
      size_t axis = static_cast<size_t>(op.attrs.get_int("axis"));
      const auto& xs = in[0].shape;
      std::vector<int64_t> norm(xs.begin() + axis, xs.end());
      int64_t rows = prod(xs, 0, axis), len = prod(norm);
      ParamIndex si = param_index(op, in[1].shape, norm);
      ParamIndex bi = in.size() > 2 ? param_index(op, in[2].shape, norm) : ParamIndex{};
      const void *xp = x[0], *sp = x[1], *bp = in.size() > 2 ? x[2] : nullptr;
      void* yp = y[0];
      float eps = static_cast<float>(op.attrs.get_float("epsilon"));
      return [=](cudaStream_t s) { launch_layernorm(fdt, xp, sp, bp, yp, rows, len, si, bi, eps, s); };
    }
    case OpType::kGather: {
      size_t axis = static_cast<size_t>(op.attrs.get_int("axis"));
      const auto& ds = in[0].shape;
      int64_t outer = prod(ds, 0, axis), dim = ds[axis], inner = prod(ds, axis + 1);
      int64_t n_idx = in[1].num_elements();
      bool idx64 = in[1].dtype == kInt64;
      const void *dp = x[0], *ip = x[1];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_gather(dp, ip, idx64, yp, esize, outer, dim, n_idx, inner, s); };
    }
    case OpType::kGatherElements: {
      const auto& ds = in[0].shape;
      GatherElementsIndex idx;
      idx.rank = static_cast<int>(out.shape.size());
      idx.axis = static_cast<int>(op.attrs.get_int("axis"));
      idx.axis_dim = ds[idx.axis];
      int64_t stride = 1;
      for (int d = idx.rank - 1; d >= 0; --d) {
        idx.out_dims[d] = out.shape[d];
        idx.data_strides[d] = stride;
        stride *= ds[d];
      }
      bool idx64 = in[1].dtype == kInt64;
      const void *dp = x[0], *ip = x[1];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_gather_elements(dp, ip, idx64, yp, esize, idx, n, s); };
    }
    case OpType::kEqual: {
      int operand_dtype = stored_dtype(in[0].dtype, fdt);
      BroadcastIndex idx = make_broadcast(out.shape, {in[0].shape, in[1].shape});
      const void *a = x[0], *b = x[1];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_equal(operand_dtype, a, b, yp, idx, n, s); };
    }
    case OpType::kCumSum: {
      if (!cumsum_supported(dtype)) unsupported(op, "dtype " + dtype_name(dtype) + " is not supported");
      size_t axis = static_cast<size_t>(op.attrs.get_int("axis"));
      const auto& xs = in[0].shape;
      int64_t outer = prod(xs, 0, axis), len = xs[axis], inner = prod(xs, axis + 1);
      bool exclusive = op.attrs.get_int("exclusive") != 0, reverse = op.attrs.get_int("reverse") != 0;
      const void* xp = x[0];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_cumsum(dtype, xp, yp, outer, len, inner, exclusive, reverse, s); };
    }
    case OpType::kWhere: {
      BroadcastIndex idx = make_broadcast(out.shape, {in[0].shape, in[1].shape, in[2].shape});
      const void *c = x[0], *a = x[1], *b = x[2];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_where(c, a, b, yp, esize, idx, n, s); };
    }
    case OpType::kCast: {
      int from = stored_dtype(in[0].dtype, fdt), to = dtype;
      if (!cast_supported(from, to))
        unsupported(op, "cast from " + dtype_name(from) + " to " + dtype_name(to) + " is not supported");
      if (from == to) return copy_step(x[0], y[0], bytes);
      const void* xp = x[0];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_cast(from, to, xp, yp, n, s); };
    }
    case OpType::kConstant: {
      double value = op.attrs.get_float("value");
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_fill(dtype, value, yp, n, s); };
    }
    case OpType::kClip:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish: {
      UnaryKind k = op.type == OpType::kClip          ? UnaryKind::kClip
                    : op.type == OpType::kHardSigmoid ? UnaryKind::kHardSigmoid
                                                      : UnaryKind::kHardSwish;
      if (!unary_supported(k, dtype)) unsupported(op, "dtype " + dtype_name(dtype) + " is not supported");
      float a = 0.f, b = 0.f;
      if (op.type == OpType::kClip) {
        a = static_cast<float>(op.attrs.get_float("min"));
        b = static_cast<float>(op.attrs.get_float("max"));
      } else if (op.type == OpType::kHardSigmoid) {
        a = static_cast<float>(op.attrs.get_float("alpha"));
        b = static_cast<float>(op.attrs.get_float("beta"));
      }
      const void* xp = x[0];
      void* yp = y[0];
      return [=](cudaStream_t s) { launch_unary(k, dtype, xp, yp, n, s, a, b); };
    }
    case OpType::kOpaque: {
      auto it = op.attrs.strings.find("onnx_op_type");
      unsupported(op, "opaque ONNX op " + (it != op.attrs.strings.end() ? "'" + it->second + "' " : std::string()) +
                          "cannot run on the GPU backend (evaluate it on the host, or leave the model unoptimised)");
    }
    case OpType::kInput:
    case OpType::kWeight:
    case OpType::kNumOpTypes: break;
  }
  unsupported(op, "op type is not executable");
}

}  // namespace cuda
}  // namespace taso
