// Data-movement kernels: permuted copy (Transpose), Concat, Split, Pad (and Enlarge),
// Gather, GatherElements. Each is templated on the element size only (bits are copied, not values).
#include <cstring>
#include <string>

#include "common.h"
#include "kernels.h"
#include "launch.cuh"

namespace taso {
namespace cuda {
namespace {


template <typename T>
__global__ void permute_kernel(PermuteIndex idx, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = idx.rank - 1; d >= 0; --d) {
      int64_t c = rest % idx.out_dims[d];
      rest /= idx.out_dims[d];
      off += c * idx.in_strides[d];
    }
    y[i] = x[off];
  }
}

// Tiled 2-D transpose for the common "swap the last two dims" (batched) case.
template <typename T>
__global__ void transpose_tile_kernel(const T* x, T* y, int64_t batch, int64_t rows, int64_t cols) {
  __shared__ T tile[32][33];
  int64_t b = blockIdx.z;
  const T* xb = x + b * rows * cols;
  T* yb = y + b * rows * cols;
  int64_t c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int j = threadIdx.y; j < 32; j += blockDim.y) {
    int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = xb[r * cols + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < 32; j += blockDim.y) {
    int64_t c = c0 + j, r = r0 + threadIdx.x;
    if (r < rows && c < cols) yb[c * rows + r] = tile[threadIdx.x][j];
  }
}

template <typename T>
__global__ void concat_kernel(const void* const* ptrs, const int64_t* offsets, int pieces, T* out, int64_t outer,
                              int64_t row_len) {
  int64_t n = outer * row_len;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t row = i / row_len, col = i % row_len;
    int p = 0;
    while (p + 1 < pieces && col >= offsets[p + 1]) ++p;
    int64_t width = offsets[p + 1] - offsets[p];
    out[i] = static_cast<const T*>(ptrs[p])[row * width + (col - offsets[p])];
  }
}

template <typename T>
__global__ void split_kernel(const T* x, void* const* ptrs, const int64_t* offsets, int pieces, int64_t outer,
                             int64_t row_len) {
  int64_t n = outer * row_len;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t row = i / row_len, col = i % row_len;
    int p = 0;
    while (p + 1 < pieces && col >= offsets[p + 1]) ++p;
    int64_t width = offsets[p + 1] - offsets[p];
    static_cast<T*>(ptrs[p])[row * width + (col - offsets[p])] = x[i];
  }
}

template <typename T>
__global__ void pad_kernel(PadIndex idx, const T* x, T* y, T value, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rest = i, off = 0, stride = 1;
    bool inside = true;
    for (int d = idx.rank - 1; d >= 0; --d) {
      int64_t c = rest % idx.out_dims[d] - idx.begins[d];
      rest /= idx.out_dims[d];
      inside = inside && c >= 0 && c < idx.in_dims[d];
      off += c * stride;
      stride *= idx.in_dims[d];
    }
    y[i] = inside ? x[off] : value;
  }
}

template <typename T, typename I>
__global__ void gather_kernel(const T* data, const I* indices, T* out, int64_t outer, int64_t axis_dim,
                              int64_t n_idx, int64_t inner) {
  int64_t n = outer * n_idx * inner;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t in = i % inner, rest = i / inner;
    int64_t j = rest % n_idx, o = rest / n_idx;
    int64_t k = static_cast<int64_t>(indices[j]);
    if (k < 0) k += axis_dim;
    k = k < 0 ? 0 : (k >= axis_dim ? axis_dim - 1 : k);
    out[i] = data[(o * axis_dim + k) * inner + in];
  }
}

template <typename T, typename I>
__global__ void gather_elements_kernel(GatherElementsIndex idx, const T* data, const I* indices, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t k = static_cast<int64_t>(indices[i]);
    if (k < 0) k += idx.axis_dim;
    k = k < 0 ? 0 : (k >= idx.axis_dim ? idx.axis_dim - 1 : k);
    int64_t rest = i, off = 0;
    for (int d = idx.rank - 1; d >= 0; --d) {
      int64_t c = rest % idx.out_dims[d];
      rest /= idx.out_dims[d];
      off += (d == idx.axis ? k : c) * idx.data_strides[d];
    }
    out[i] = data[off];
  }
}

}  // namespace

void launch_permute(const void* x, void* y, int elem_size, const PermuteIndex& idx, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  // Swap of the last two dims with everything before in order: a tiled transpose.
  int r = idx.rank;
  bool tile = r >= 2 && idx.in_strides[r - 1] == idx.out_dims[r - 2] && idx.in_strides[r - 2] == 1;
  int64_t expect = idx.out_dims[r - 1] * idx.out_dims[r - 2];
  for (int d = r - 3; d >= 0 && tile; --d) {
    tile = idx.in_strides[d] == expect;
    expect *= idx.out_dims[d];
  }
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    if (tile && idx.out_dims[r - 1] > 1 && idx.out_dims[r - 2] > 1 &&
        n / (idx.out_dims[r - 1] * idx.out_dims[r - 2]) <= 65535) {
      int64_t rows = idx.out_dims[r - 1], cols = idx.out_dims[r - 2];  // x is [batch, rows, cols]
      int64_t batch = n / (rows * cols);
      dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32),
                static_cast<unsigned>(batch));
      transpose_tile_kernel<T><<<grid, dim3(32, 8), 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), batch,
                                                            rows, cols);
    } else {
      permute_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(idx, static_cast<const T*>(x), static_cast<T*>(y), n);
    }
  });
  check_launch("permute kernel");
}

void launch_concat(const void* const* ptrs, const int64_t* offsets, int pieces, void* out, int elem_size,
                   int64_t outer, int64_t row_len, cudaStream_t s) {
  int64_t n = outer * row_len;
  if (n == 0) return;
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    concat_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(ptrs, offsets, pieces, static_cast<T*>(out), outer, row_len);
  });
  check_launch("concat kernel");
}

void launch_split(const void* x, void* const* ptrs, const int64_t* offsets, int pieces, int elem_size,
                  int64_t outer, int64_t row_len, cudaStream_t s) {
  int64_t n = outer * row_len;
  if (n == 0) return;
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    split_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<const T*>(x), ptrs, offsets, pieces, outer,
                                                     row_len);
  });
  check_launch("split kernel");
}

void launch_pad(const void* x, void* y, int elem_size, const PadIndex& idx, uint64_t value_bits, int64_t n,
                cudaStream_t s) {
  if (n == 0) return;
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    T value;
    memcpy(&value, &value_bits, sizeof(T));
    pad_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(idx, static_cast<const T*>(x), static_cast<T*>(y), value, n);
  });
  check_launch("pad kernel");
}

void launch_gather(const void* data, const void* indices, bool indices64, void* out, int elem_size, int64_t outer,
                   int64_t axis_dim, int64_t n_idx, int64_t inner, cudaStream_t s) {
  int64_t n = outer * n_idx * inner;
  if (n == 0) return;
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    if (indices64)
      gather_kernel<T, int64_t><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<const T*>(data),
                                                                 static_cast<const int64_t*>(indices),
                                                                 static_cast<T*>(out), outer, axis_dim, n_idx, inner);
    else
      gather_kernel<T, int32_t><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<const T*>(data),
                                                                 static_cast<const int32_t*>(indices),
                                                                 static_cast<T*>(out), outer, axis_dim, n_idx, inner);
  });
  check_launch("gather kernel");
}

void launch_gather_elements(const void* data, const void* indices, bool indices64, void* out, int elem_size,
                            const GatherElementsIndex& idx, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    if (indices64)
      gather_elements_kernel<T, int64_t><<<grid_for(n), threads_per_block(), 0, s>>>(
          idx, static_cast<const T*>(data), static_cast<const int64_t*>(indices), static_cast<T*>(out), n);
    else
      gather_elements_kernel<T, int32_t><<<grid_for(n), threads_per_block(), 0, s>>>(
          idx, static_cast<const T*>(data), static_cast<const int32_t*>(indices), static_cast<T*>(out), n);
  });
  check_launch("gather elements kernel");
}

}  // namespace cuda
}  // namespace taso
