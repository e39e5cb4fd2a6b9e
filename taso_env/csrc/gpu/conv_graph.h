// Convolutions through cuDNN's graph (backend) API: the engines cuDNN's heuristics offer
// for the operation, each timed as the executor runs it (time_calls_ms), the fastest
// kept. The 16-bit modes run their convolutions here: cuDNN's legacy
// cudnnConvolutionForward has no fast 16-bit engines (a 512-channel 3x3 stride-2
// convolution took 0.20 ms in fp16 there, 0.028 ms through the graph API, as PyTorch
// runs it). Tensors keep the graph's NCHW layout (given to cuDNN as strides).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common.h"

namespace taso {
namespace cuda {

struct GraphConvShape {
  std::vector<int64_t> x, w, y;  // NCHW input (already padded where pads are asymmetric), [K, C/g, R, S], NCHW output
  std::vector<int64_t> strides{1, 1}, pads{0, 0}, dilations{1, 1};  // pads: symmetric (top, left)
  MathMode math = MathMode::kFP16;  // tensors stored as float_storage(math); float32 accumulation
  bool log = false;                 // print each engine's time to stderr (AlgoSearch::log)
};

class GraphConv {
 public:
  // Builds the operation graph and chooses an engine (cached per shape and math mode for
  // the process). Throws UnsupportedGraphError when no engine runs the convolution.
  explicit GraphConv(const GraphConvShape& shape);
  ~GraphConv();
  GraphConv(const GraphConv&) = delete;
  GraphConv& operator=(const GraphConv&) = delete;

  size_t workspace_bytes() const { return workspace_; }
  float ms() const { return ms_; }  // our timing of the chosen engine
  // y = conv(x, w); `workspace` holds workspace_bytes().
  cudnnStatus_t enqueue(const void* x, const void* w, void* y, void* workspace, cudaStream_t s) const;

 private:
  struct Descriptors;
  std::unique_ptr<Descriptors> d_;
  size_t workspace_ = 0;
  float ms_ = 0;
};

}  // namespace cuda
}  // namespace taso
