// GEMM epilogue fusion and its cuBLASLt steps (see gemm_fusion.h).
#include "gemm_fusion.h"

#include <memory>
#include <set>
#include <string>

#include "gemm_lt.h"
#include "taso/epilogue.h"
#include "kernels.h"
#include "library_util.h"

namespace taso {
namespace cuda {
namespace {

// The dims before the last two, right-aligned to `rank` - 2 dims (missing dims are 1).
std::vector<int64_t> batch_dims(const std::vector<int64_t>& shape, size_t rank) {
  std::vector<int64_t> b(rank - 2, 1);
  for (size_t i = 0; i + 2 < shape.size(); ++i) b[rank - shape.size() + i] = shape[i];
  return b;
}

// The executor's eligibility rule is the pricing's (taso/epilogue.h).
bool eligible(const Graph& graph, const Op& op) {
  std::vector<TensorType> in;
  for (const TensorRef& r : op.inputs) in.push_back(graph.tensor_type(r));
  return gemm_runs_on_lt(op, in);
}

}  // namespace

GemmPlan plan_gemm_fusions(const Graph& graph, const std::vector<char>& usable, const std::vector<char>& alias,
                           const std::map<int, double>& known_scalars, bool enabled) {
  const int n = graph.num_ops();
  GemmPlan plan;
  plan.at.assign(n, -1);
  plan.skip.assign(n, 0);
  std::set<std::pair<int, int>> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert({r.op, r.index});
  const auto consumers = graph.consumers();
  std::vector<char> claimed(n, 0);
  auto free_op = [&](int id) { return id >= 0 && usable[id] && !claimed[id]; };
  // The only reader of op `id`'s output and its input slot, or {-1, -1}.
  auto sole_reader = [&](int id) -> std::pair<int, int> {
    if (graph.op(id).outputs.size() != 1 || outputs.count({id, 0}) || consumers[id][0].size() != 1) return {-1, -1};
    return consumers[id][0][0];
  };
  for (int id = 0; id < n; ++id) {
    const Op& g = graph.op(id);
    if ((g.type != OpType::kMatMul && g.type != OpType::kGemm) || !free_op(id) || !eligible(graph, g)) continue;
    GemmFusion f;
    f.gemm = f.at = id;
    f.a = g.inputs[0];
    f.b = g.inputs[1];
    claimed[id] = 1;
    // Operands scaled by a known factor (x * c, c * x or x / c): the factor goes into alpha.
    for (TensorRef* operand : {&f.a, &f.b}) {
      const int m = operand->op;
      if (!enabled || g.type != OpType::kMatMul || !free_op(m) || sole_reader(m).first != id) continue;
      const Op& scale = graph.op(m);
      const bool div = scale.type == OpType::kDiv;
      if (scale.type != OpType::kMul && !div) continue;
      for (int s = 0; s < (div ? 1 : 2); ++s) {  // a divisor only as the second input
        auto it = known_scalars.find(scale.inputs[1 - s].op);
        const TensorType& x = graph.tensor_type(scale.inputs[s]);
        const TensorType& c = graph.tensor_type(scale.inputs[1 - s]);
        if (it == known_scalars.end() || c.num_elements() != 1 || c.dtype != kFloat32 || !(x == scale.outputs[0]) ||
            (div && it->second == 0.0))
          continue;
        f.scale *= div ? 1.0 / it->second : it->second;
        *operand = scale.inputs[s];
        f.folded.push_back(m);
        break;
      }
    }
    const TensorType& y = g.outputs[0];
    const bool relu = g.type == OpType::kMatMul && g.attrs.get_int("activation") == kActRelu;
    bool gemm_c = g.type == OpType::kGemm && g.inputs.size() > 2;
    if (gemm_c) {
      const auto& c = graph.tensor_type(g.inputs[2]).shape;
      if (is_row_vector(c, y.shape.back())) {
        f.has_bias = true;
        f.bias = g.inputs[2];
      } else {
        f.has_residual = true;
        f.residual = g.inputs[2];
      }
    }
    if (enabled && !relu) {
      auto [reader, slot] = sole_reader(id);
      const bool b_batched = g.type == OpType::kGemm ||
                             prod(batch_dims(graph.tensor_type(g.inputs[1]).shape, y.shape.size())) ==
                                 prod(batch_dims(y.shape, y.shape.size()));
      if (!gemm_c && free_op(reader) && graph.op(reader).type == OpType::kAdd) {
        const Op& add = graph.op(reader);
        const TensorRef& other = add.inputs[1 - slot];
        const TensorType& ot = graph.tensor_type(other);
        if (ot.dtype == kFloat32 && add.outputs[0] == y && other.op != id && is_row_vector(ot.shape, y.shape.back())) {
          f.has_bias = true;
          f.bias = other;
          f.folded.push_back(reader);
          f.at = reader;
        }
      } else if (!gemm_c && free_op(reader) && graph.op(reader).type == OpType::kTranspose && b_batched) {
        // (a Transpose that only moves dims of size 1 is an alias, never free_op)
        f.out_transpose = reader;
        f.folded.push_back(reader);
        f.at = reader;
      }
      // A residual Add after the result (through Reshape-likes: the attention output
      // projection's [S, D] result added to the [1, S, D] stream).
      if (f.out_transpose < 0 && !f.has_residual) {
        int cur = f.at;
        std::vector<int> path;
        for (;;) {
          auto [r, s] = sole_reader(cur);
          if (r >= 0 && alias[r]) {
            path.push_back(r);
            cur = r;
            continue;
          }
          if (!free_op(r) || graph.op(r).type != OpType::kAdd) break;
          const Op& add = graph.op(r);
          const TensorRef& other = add.inputs[1 - s];
          const TensorType& ot = graph.tensor_type(other);
          if (ot.dtype != kFloat32 || ot.shape != add.outputs[0].shape || prod(ot.shape) != prod(y.shape) ||
              other.op == cur)
            break;
          f.has_residual = true;
          f.residual = other;
          for (int p : path) f.folded.push_back(p);
          f.folded.push_back(r);
          f.at = r;
          break;
        }
      }
    }
    for (int k : f.folded) {
      claimed[k] = 1;
      plan.skip[k] = k != f.at;
      if (!alias[k]) ++plan.fused_ops;
    }
    if (f.at != id) plan.skip[id] = 1;
    plan.at[f.at] = static_cast<int>(plan.fusions.size());
    plan.fusions.push_back(f);
  }
  return plan;
}

namespace {

// Copies a strided view of float tensor data into a new contiguous buffer owned by `res`
// (a step in `pre`).
StridedView materialise(const StridedView& v, StepResources& res, std::vector<Step>& pre) {
  const int esize = dtype_size(res.float_dtype);
  res.params.emplace_back(static_cast<size_t>(std::max<int64_t>(prod(v.shape), 1)) * esize);
  void* buf = res.params.back().get();
  pre.push_back(compile_strided_copy(v, esize, buf));
  return {buf, v.shape, contiguous_strides(v.shape)};
}

// The batch of a view's matrices collapsed to one (count, stride), the batch dims
// right-aligned to `ob` (absent or size-1 dims broadcast); false when the batch dims
// cannot be one stride.
bool batch_of(const StridedView& v, const std::vector<int64_t>& ob, int64_t* count, int64_t* stride) {
  const size_t r = ob.size() + 2;
  std::vector<int64_t> dims(ob.size(), 1), strides(ob.size(), 0);
  for (size_t i = 0; i + 2 < v.shape.size(); ++i) {
    dims[r - v.shape.size() + i] = v.shape[i];
    strides[r - v.shape.size() + i] = v.strides[i];
  }
  *count = 1;
  *stride = 0;
  int64_t expect = -1;  // stride the next outer non-1 dim must have
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (dims[d] == 1) continue;
    if (*count == 1) *stride = strides[d];
    else if (strides[d] != expect) return false;
    *count *= dims[d];
    expect = strides[d] * dims[d];
  }
  return true;
}

MatrixLayout matrix_of(const StridedView& v, int64_t batch_stride, bool transposed) {
  const size_t r = v.shape.size();
  MatrixLayout m;
  m.rows = v.shape[r - 2];
  m.cols = v.shape[r - 1];
  m.row_stride = v.strides[r - 2];
  m.col_stride = v.strides[r - 1];
  m.batch_stride = batch_stride;
  if (transposed) {
    std::swap(m.rows, m.cols);
    std::swap(m.row_stride, m.col_stride);
  }
  return m;
}

}  // namespace

Step compile_gemm(const Graph& graph, const GemmFusion& f, const ViewResolver& resolve, void* output,
                  MathMode math, StepResources& res) {
  const Op& g = graph.op(f.gemm);
  const auto& y = g.outputs[0].shape;
  const bool gemm = g.type == OpType::kGemm;
  const bool ta = gemm && g.attrs.get_int("trans_a") != 0, tb = gemm && g.attrs.get_int("trans_b") != 0;
  std::vector<Step> pre;
  StridedView a = resolve(f.a), b = resolve(f.b);
  if (a.shape.size() == 1 || b.shape.size() == 1)
    throw UnsupportedGraphError(op_type_name(g.type) + " op '" + g.name + "': rank-1 operands are not GEMM-fused");
  // D: the output buffer, or the Transpose's buffer read back through its permutation.
  StridedView d{output, y, contiguous_strides(y)};
  if (f.out_transpose >= 0) {
    const Op& t = graph.op(f.out_transpose);
    const auto& ts = t.outputs[0].shape;
    std::vector<int64_t> perm = transpose_perm(t, y.size()), cs = contiguous_strides(ts);
    for (size_t i = 0; i < perm.size(); ++i) d.strides[perm[i]] = cs[i];
  }
  StridedView c;
  if (f.has_residual) {
    c = resolve(f.residual);
    std::vector<int64_t> st;
    if (!reshape_strides(c, y, &st)) {
      c = materialise(c, res, pre);
      st = contiguous_strides(y);
    }
    c.shape = y;
    c.strides = st;
  }
  const void* bias = nullptr;
  if (f.has_bias) {
    StridedView bv = resolve(f.bias);
    if (!bv.contiguous()) bv = materialise(bv, res, pre);
    bias = bv.data;
  }
  const std::vector<int64_t> ob(y.begin(), y.end() - 2);
  int64_t batch = prod(ob);

  // Lays the operands out for cuBLASLt; false when a view cannot be read as it lies.
  LtGemmConfig cfg;
  auto configure = [&]() {
    int64_t na, sa, nb, sb, nd, sd, nc = batch, sc = 0;
    if (!batch_of(a, ob, &na, &sa) || !batch_of(b, ob, &nb, &sb) || !batch_of(d, ob, &nd, &sd)) return false;
    if (f.has_residual && !batch_of(c, ob, &nc, &sc)) return false;
    cfg = LtGemmConfig{};
    cfg.batch = batch;
    cfg.a = matrix_of(a, sa, ta);
    cfg.b = matrix_of(b, sb, tb);
    cfg.d = matrix_of(d, sd, false);
    if (f.has_residual) cfg.c = matrix_of(c, sc, false);
    if (batch > 1 && nb == 1) {  // shared B: the batch folds into A's rows
      bool rows = cfg.a.batch_stride == cfg.a.rows * cfg.a.row_stride && cfg.a.col_stride == 1 &&
                  cfg.d.batch_stride == cfg.d.rows * cfg.d.row_stride &&
                  (!f.has_residual || cfg.c.batch_stride == cfg.c.rows * cfg.c.row_stride);
      if (!rows || na != batch) return false;
      for (MatrixLayout* m : {&cfg.a, &cfg.d, &cfg.c}) {
        m->rows *= batch;
        m->batch_stride = 0;
      }
      cfg.batch = 1;
    } else if (batch > 1 && (na != batch || nb != batch || nd != batch || nc != batch)) {
      return false;
    }
    cfg.alpha = static_cast<float>((gemm ? g.attrs.get_float("alpha") : 1.0) * f.scale);
    cfg.bias = f.has_bias;
    cfg.residual = f.has_residual;
    cfg.math = math;
    return lt_gemm_supported(cfg);
  };
  std::vector<Step> post;
  if (!configure()) {
    if (!a.contiguous()) a = materialise(a, res, pre);
    if (!b.contiguous()) b = materialise(b, res, pre);
    if (f.has_residual && !c.contiguous()) c = materialise(c, res, pre);
    if (f.out_transpose >= 0 && !configure()) {
      // The heads cannot be written as one batch stride: GEMM into a private buffer,
      // then the Transpose's copy.
      const int esize = dtype_size(res.float_dtype);
      res.params.emplace_back(static_cast<size_t>(std::max<int64_t>(prod(y), 1)) * esize);
      d = {res.params.back().get(), y, contiguous_strides(y)};
      const Op& t = graph.op(f.out_transpose);
      post.push_back(compile_strided_copy(permuted(d, transpose_perm(t, y.size())), esize, output));
    }
    if (!configure())
      throw UnsupportedGraphError(op_type_name(g.type) + " op '" + g.name + "': cuBLASLt cannot run this GEMM");
  }
  LtGemmPointers p;
  p.a = a.data;
  p.b = b.data;
  p.bias = bias;
  p.c = f.has_residual ? c.data : nullptr;
  p.d = const_cast<void*>(d.data);
  cfg.relu = g.type == OpType::kMatMul && g.attrs.get_int("activation") == kActRelu;
  cfg.log = res.algo_search.log;
  auto lt = std::make_shared<LtGemm>(cfg, p);
  return [pre = std::move(pre), post = std::move(post), lt](cudaStream_t s) {
    for (const Step& step : pre) step(s);
    lt->run(s);
    for (const Step& step : post) step(s);
  };
}

}  // namespace cuda
}  // namespace taso
