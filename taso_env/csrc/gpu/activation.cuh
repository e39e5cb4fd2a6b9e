// The epilogue activations of the executor's kernels, computed in float: codes as
// launch_bias_activation documents them (kernels.h).
#pragma once

#include <cuda_runtime.h>

#include "kernels.h"

namespace taso {
namespace cuda {

__device__ inline float activate(float v, int act) {
  switch (act) {
    case 1: return fmaxf(v, 0.f);
    case 2: return 1.f / (1.f + expf(-v));
    case 3: return tanhf(v);
    case kEpilogueRelu6: return fminf(fmaxf(v, 0.f), 6.f);
    case kEpilogueHardSwish: return v * fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f);
    default: return v;
  }
}

}  // namespace cuda
}  // namespace taso
