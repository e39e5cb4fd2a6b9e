// Fused element-wise chain kernels (see kernels_fused.h): the program interpreter, the
// flat and strided element-wise kernels, and the softmax variants (one warp per row,
// one block per row). Every kernel is instantiated per storage type T (float, __half,
// __nv_bfloat16: float_storage.cuh); the program itself always computes in float.
#include "kernels_fused.h"

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "common.h"
#include "float_storage.cuh"
#include "launch.cuh"

namespace taso {
namespace cuda {
namespace {

// Block sizes: the element-wise kernels are compiled to run any block size a tuning plan
// may choose (launch bounds 1024, at most 64 registers); the softmax kernels keep a row's
// values in registers (up to 32 per lane), more than a 1024-thread block can hold, so
// they run at most 256 threads per block (a plan's larger choice is capped).
constexpr int kMaxThreads = 1024;
constexpr int kMaxSoftmaxThreads = 256;

// ---- index arithmetic: 32-bit through FastDivisor, 64-bit plain --------------------------

__device__ __forceinline__ uint32_t div_by(uint32_t n, int64_t, const FastDivisor& f) {
  return (__umulhi(n, f.magic) + n) >> f.shift;
}
__device__ __forceinline__ int64_t div_by(int64_t n, int64_t d, const FastDivisor&) { return n / d; }

template <typename Index>
__device__ __forceinline__ Index mod_by(Index n, int64_t d, const FastDivisor& f) {
  return n - div_by(n, d, f) * static_cast<Index>(d);
}

// ---- the program ---------------------------------------------------------------------------

template <int W, typename F>
__device__ __forceinline__ void each(float (&r)[W], const float (&a)[W], const float (&b)[W], F f) {
#pragma unroll
  for (int w = 0; w < W; ++w) r[w] = f(a[w], b[w]);
}

// r = ins(a, b) on every lane of the tile. The formulas are those of unary_apply<float>
// in kernels_elementwise.cu; the binary ops use the _rn intrinsics, which the compiler
// never contracts into an FMA with a neighbouring instruction, so a fused Mul + Add
// rounds twice, exactly as the separate kernels do.
template <int W>
__device__ __forceinline__ void apply(const FusedInstr& ins, const float (&a)[W], const float (&b)[W],
                                      float (&r)[W]) {
  const float p = ins.a, q = ins.b;
  switch (ins.op) {
    case FusedOp::kCopy: each(r, a, b, [](float x, float) { return x; }); break;
    case FusedOp::kAdd: each(r, a, b, [](float x, float y) { return __fadd_rn(x, y); }); break;
    case FusedOp::kSub: each(r, a, b, [](float x, float y) { return __fsub_rn(x, y); }); break;
    case FusedOp::kMul: each(r, a, b, [](float x, float y) { return __fmul_rn(x, y); }); break;
    case FusedOp::kDiv: each(r, a, b, [](float x, float y) { return __fdiv_rn(x, y); }); break;
    case FusedOp::kRelu: each(r, a, b, [](float x, float) { return fmaxf(x, 0.f); }); break;
    case FusedOp::kSigmoid: each(r, a, b, [](float x, float) { return 1.f / (1.f + expf(-x)); }); break;
    case FusedOp::kTanh: each(r, a, b, [](float x, float) { return tanhf(x); }); break;
    case FusedOp::kErf: each(r, a, b, [](float x, float) { return erff(x); }); break;
    case FusedOp::kGelu:
      each(r, a, b, [](float x, float) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752440f)); });
      break;
    case FusedOp::kSqrt: each(r, a, b, [](float x, float) { return sqrtf(x); }); break;
    case FusedOp::kExp: each(r, a, b, [](float x, float) { return expf(x); }); break;
    case FusedOp::kClip: each(r, a, b, [p, q](float x, float) { return fminf(fmaxf(x, p), q); }); break;
    case FusedOp::kHardSigmoid:
      each(r, a, b, [p, q](float x, float) { return fminf(fmaxf(p * x + q, 0.f), 1.f); });
      break;
    case FusedOp::kHardSwish:
      each(r, a, b, [](float x, float) { return x * fminf(fmaxf(x / 6.f + 0.5f, 0.f), 1.f); });
      break;
  }
}

// Operand values of the tile. A saved slot is picked by selects over the few slots (the
// slot index is the same for every thread). They are written as selects of values, not
// as conditional copies, which the compiler may merge into one dynamically indexed copy
// and so move the slots to local memory.
template <int W, typename Tile>
__device__ __forceinline__ void fetch(FusedOperand kind, int index, const float (&acc)[W],
                                      const float (&saved)[kMaxSavedValues][W], const Tile& tile,
                                      float (&v)[W]) {
  switch (kind) {
    case FusedOperand::kPrevious:
#pragma unroll
      for (int w = 0; w < W; ++w) v[w] = acc[w];
      break;
    case FusedOperand::kInput: tile.load(index, v); break;
    case FusedOperand::kSaved:
#pragma unroll
      for (int s = 0; s < kMaxSavedValues; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) v[w] = index == s ? saved[s][w] : v[w];
      break;
    case FusedOperand::kNone: break;
  }
}

// Runs the program on one tile; the result is left in `acc`. The instruction loop is not
// unrolled: nothing in it is indexed by the instruction number but the instruction
// itself (kernel parameter memory), so one copy of the interpreter serves every length.
template <int W, typename Tile>
__device__ __forceinline__ void run_program(const FusedProgram& p, const Tile& tile, float (&acc)[W]) {
  float saved[kMaxSavedValues][W];
#pragma unroll
  for (int w = 0; w < W; ++w) {
    acc[w] = 0.f;
#pragma unroll
    for (int s = 0; s < kMaxSavedValues; ++s) saved[s][w] = 0.f;
  }
  for (int k = 0; k < p.num_instrs; ++k) {
    const FusedInstr& ins = p.instrs[k];
    float a[W] = {}, b[W] = {};
    fetch(ins.kind[0], ins.index[0], acc, saved, tile, a);
    fetch(ins.kind[1], ins.index[1], acc, saved, tile, b);
    apply(ins, a, b, acc);
    if (ins.save < 0) continue;
#pragma unroll
    for (int s = 0; s < kMaxSavedValues; ++s)
#pragma unroll
      for (int w = 0; w < W; ++w) saved[s][w] = ins.save == s ? acc[w] : saved[s][w];
  }
}

// ---- tiles: where a thread's elements of each input are --------------------------------

// Four 16-bit values moved as one 8-byte word (written through one member, read through
// the other, which nvcc defines): a vectorised tile's load or store is then a single
// 64-bit access, as a float tile's is one float4.
template <typename T>
union Pack4 {
  uint2 word;
  T v[4];
};

// Elements x[0 .. W - 1] in float; W = 4 needs x aligned to 4 elements.
template <int W, typename T>
__device__ __forceinline__ void load_run(const T* x, float (&v)[W]) {
  if constexpr (W == 4 && std::is_same_v<T, float>) {
    float4 q = __ldg(reinterpret_cast<const float4*>(x));
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else if constexpr (W == 4) {
    Pack4<T> q;
    q.word = __ldg(reinterpret_cast<const uint2*>(x));
#pragma unroll
    for (int w = 0; w < W; ++w) v[w] = load_float(q.v[w]);
  } else {
#pragma unroll
    for (int w = 0; w < W; ++w) v[w] = load_float(__ldg(x + w));
  }
}

// y[0 .. W - 1] = r stored as T; W = 4 needs y aligned to 4 elements.
template <int W, typename T>
__device__ __forceinline__ void store_run(T* y, const float (&r)[W]) {
  if constexpr (W == 4 && std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(y) = make_float4(r[0], r[1], r[2], r[3]);
  } else if constexpr (W == 4) {
    Pack4<T> q;
#pragma unroll
    for (int w = 0; w < W; ++w) q.v[w] = from_float<T>(r[w]);
    *reinterpret_cast<uint2*>(y) = q.word;
  } else {
#pragma unroll
    for (int w = 0; w < W; ++w) y[w] = from_float<T>(r[w]);
  }
}

template <int W>
__device__ __forceinline__ void fill(float (&v)[W], float x) {
#pragma unroll
  for (int w = 0; w < W; ++w) v[w] = x;
}

// An input's values as T. Called at each use rather than kept in a local at the top of a
// load: the pointer's parameter load then stays where it is needed (hoisting it changes
// the float kernels' code and costs a softmax kernel registers).
template <typename T>
__device__ __forceinline__ const T* values(const FusedInput& in) {
  return static_cast<const T*>(in.data);
}

// Elements i .. i + W - 1 with every input in a flat mode (W = 4 only where the host
// found every run aligned to 4 elements and every kChannel's inner a multiple of 4).
template <typename T, int W, typename Index>
struct FlatTile {
  const FusedProgram& p;
  Index i;

  __device__ __forceinline__ void load(int j, float (&v)[W]) const {
    const FusedInput& in = p.inputs[j];
    switch (in.mode) {
      case FusedAccess::kSame: load_run<W>(values<T>(in) + i, v); break;
      case FusedAccess::kScalar: fill(v, load_float(__ldg(values<T>(in)))); break;
      case FusedAccess::kRow: load_run<W>(values<T>(in) + mod_by(i, in.len, in.len_div), v); break;
      default:
        fill(v, load_float(__ldg(values<T>(in) +
                                 mod_by(div_by(i, in.inner, in.inner_div), in.len, in.len_div))));
        break;
    }
  }
};

// One element with some input strided: the output coordinates are found once per
// element and every strided input is addressed through them.
template <typename T, typename Index>
struct StridedTile {
  const FusedProgram& p;
  Index i;
  Index coord[kMaxRank];  // innermost first

  __device__ __forceinline__ StridedTile(const FusedProgram& prog, Index index) : p(prog), i(index) {
    Index rest = index;
#pragma unroll
    for (int d = 0; d < kMaxRank; ++d) {
      coord[d] = 0;
      if (d < p.rank) {
        Index q = div_by(rest, p.dims[d], p.dims_div[d]);
        coord[d] = rest - q * static_cast<Index>(p.dims[d]);
        rest = q;
      }
    }
  }

  __device__ __forceinline__ void load(int j, float (&v)[1]) const {
    const FusedInput& in = p.inputs[j];
    if (in.mode == FusedAccess::kSame) {
      v[0] = load_float(__ldg(values<T>(in) + i));
    } else if (in.mode == FusedAccess::kScalar) {
      v[0] = load_float(__ldg(values<T>(in)));
    } else {
      Index off = 0;
#pragma unroll
      for (int d = 0; d < kMaxRank; ++d)
        if (d < p.rank) off += coord[d] * static_cast<Index>(in.strides[d]);
      v[0] = load_float(__ldg(values<T>(in) + off));
    }
  }
};

// Coordinates of softmax row `row` over the output dims but the last (rc[d] for d >= 1,
// innermost first; rc[0] = 0).
__device__ __forceinline__ void row_coords(const FusedProgram& p, int64_t row, int64_t (&rc)[kMaxRank]) {
  rc[0] = 0;
  uint32_t rest32 = static_cast<uint32_t>(row);
#pragma unroll
  for (int d = 1; d < kMaxRank; ++d) {
    rc[d] = 0;
    if (d >= p.rank) continue;
    if (p.index32) {
      uint32_t q = div_by(rest32, p.dims[d], p.dims_div[d]);
      rc[d] = rest32 - q * static_cast<uint32_t>(p.dims[d]);
      rest32 = q;
    } else {
      rc[d] = row % p.dims[d];
      row /= p.dims[d];
    }
  }
}

// Elements j0 + w * step (w < W) of one softmax row; those past the row's end read 0.
template <typename T, int W>
struct RowTile {
  const FusedProgram& p;
  const int64_t (&rc)[kMaxRank];
  int64_t j0, step, len;

  __device__ __forceinline__ void load(int j, float (&v)[W]) const {
    const FusedInput& in = p.inputs[j];
    int64_t base = 0;
#pragma unroll
    for (int d = 1; d < kMaxRank; ++d)
      if (d < p.rank) base += rc[d] * in.strides[d];
#pragma unroll
    for (int w = 0; w < W; ++w) {
      int64_t jj = j0 + w * step;
      v[w] = jj < len ? load_float(__ldg(values<T>(in) + base + jj * in.strides[0])) : 0.f;
    }
  }
};

// ---- kernels ---------------------------------------------------------------------------------

template <typename T, int W, typename Index>
__global__ void __launch_bounds__(kMaxThreads) fused_flat_kernel(FusedProgram p, T* y, Index tiles) {
  for (Index t = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; t < tiles;
       t += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index i = t * W;
    float r[W];
    run_program<W>(p, FlatTile<T, W, Index>{p, i}, r);
    store_run<W>(y + i, r);
  }
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kMaxThreads) fused_strided_kernel(FusedProgram p, T* y, Index n) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    float r[1];
    run_program<1>(p, StridedTile<T, Index>(p, i), r);
    y[i] = from_float<T>(r[0]);
  }
}

// Softmax rows of len <= 32 * kPerLane, one warp per row: lane l holds elements l, l + 32,
// ..., computed once by the program, kept in registers through the max and the sum
// (warp shuffles). Numerics as launch_softmax: subtract the row max, expf, times 1 / sum.
template <typename T, int kPerLane>
__global__ void fused_softmax_warp_kernel(FusedProgram p, T* y, int64_t rows) {
  constexpr int W = kPerLane < 4 ? kPerLane : 4;
  const int64_t len = p.dims[0];
  const int lane = threadIdx.x % 32;
  const int64_t warps = blockDim.x / 32;
  for (int64_t row = blockIdx.x * warps + threadIdx.x / 32; row < rows; row += gridDim.x * warps) {
    int64_t rc[kMaxRank];
    row_coords(p, row, rc);
    float v[kPerLane];
#pragma unroll
    for (int t = 0; t < kPerLane; t += W) {
      float r[W];
      fill(r, 0.f);
      if (lane + 32 * t < len) run_program<W>(p, RowTile<T, W>{p, rc, lane + 32 * t, 32, len}, r);
#pragma unroll
      for (int w = 0; w < W; ++w) v[t + w] = r[w];
    }
    float m = -FLT_MAX;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t)
      if (lane + 32 * t < len) m = fmaxf(m, v[t]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t)
      if (lane + 32 * t < len) {
        v[t] = expf(v[t] - m);
        s += v[t];
      }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.f / s;
    T* yr = y + row * len;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t)
      if (lane + 32 * t < len) yr[lane + 32 * t] = from_float<T>(v[t] * inv);
  }
}

// Softmax rows longer than a warp holds, one block per row, in three passes (max, sum of
// exponentials, output) that each evaluate the program again: the chain's values are
// never stored, and the inputs are re-read from L2.
template <typename T>
__global__ void fused_softmax_block_kernel(FusedProgram p, T* y, int64_t rows) {
  constexpr int W = 4;
  __shared__ float shared[32];
  const int64_t len = p.dims[0], step = blockDim.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t rc[kMaxRank];
    row_coords(p, row, rc);
    float m = -FLT_MAX;
    for (int64_t j = threadIdx.x; j < len; j += W * step) {
      float r[W];
      run_program<W>(p, RowTile<T, W>{p, rc, j, step, len}, r);
#pragma unroll
      for (int w = 0; w < W; ++w)
        if (j + w * step < len) m = fmaxf(m, r[w]);
    }
    m = block_max(m, shared);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < len; j += W * step) {
      float r[W];
      run_program<W>(p, RowTile<T, W>{p, rc, j, step, len}, r);
#pragma unroll
      for (int w = 0; w < W; ++w)
        if (j + w * step < len) s += expf(r[w] - m);
    }
    const float inv = 1.f / block_sum(s, shared);
    T* yr = y + row * len;
    for (int64_t j = threadIdx.x; j < len; j += W * step) {
      float r[W];
      run_program<W>(p, RowTile<T, W>{p, rc, j, step, len}, r);
#pragma unroll
      for (int w = 0; w < W; ++w)
        if (j + w * step < len) yr[j + w * step] = from_float<T>(expf(r[w] - m) * inv);
    }
  }
}

template <typename Index, typename T>
void launch_elementwise(const FusedProgram& p, T* y, cudaStream_t s) {
  const int threads = threads_per_block();
  const Index n = static_cast<Index>(p.n);
  if (p.strided) {
    fused_strided_kernel<T, Index><<<grid_for(p.n), threads, 0, s>>>(p, y, n);
  } else if (p.vector4) {
    fused_flat_kernel<T, 4, Index><<<grid_for(p.n / 4), threads, 0, s>>>(p, y, n / 4);
  } else {
    fused_flat_kernel<T, 1, Index><<<grid_for(p.n), threads, 0, s>>>(p, y, n);
  }
}

template <typename T>
void launch_softmax_rows(const FusedProgram& p, T* y, cudaStream_t s) {
  LaunchScope capped(std::min(threads_per_block(), kMaxSoftmaxThreads), 0);  // grid_for sees the cap
  const int threads = threads_per_block();
  const int64_t len = p.dims[0], rows = p.n / len;
  if (len > 1024) {
    fused_softmax_block_kernel<T><<<grid_for(rows * threads), threads, 0, s>>>(p, y, rows);
    return;
  }
  // One warp per row; grid_for counts threads, so a plan's items per thread becomes rows
  // per warp.
  const unsigned grid = grid_for(rows * 32);
  auto go = [&](auto kernel) { kernel<<<grid, threads, 0, s>>>(p, y, rows); };
  if (len <= 32) go(fused_softmax_warp_kernel<T, 1>);
  else if (len <= 64) go(fused_softmax_warp_kernel<T, 2>);
  else if (len <= 128) go(fused_softmax_warp_kernel<T, 4>);
  else if (len <= 256) go(fused_softmax_warp_kernel<T, 8>);
  else if (len <= 512) go(fused_softmax_warp_kernel<T, 16>);
  else go(fused_softmax_warp_kernel<T, 32>);
}

}  // namespace

void launch_fused_chain(const FusedProgram& p, int dtype, void* y, cudaStream_t s) {
  if (p.n == 0) return;
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    T* out = static_cast<T*>(y);
    if (p.softmax) launch_softmax_rows(p, out, s);
    else if (p.index32) launch_elementwise<uint32_t>(p, out, s);
    else launch_elementwise<int64_t>(p, out, s);
  });
  check_launch("fused element-wise kernel");
}

}  // namespace cuda
}  // namespace taso
