// Equal constants stored once: the executor's decision (invisible to the graph and its
// op ids). Rewrites that merge parallel MatMuls fold a Concat of the weights they merge
// into a new constant; the same merge at every step of an unrolled RNN makes one such
// Concat per step, all computing the same value from the same weights (nasrnn's greedy
// graph: 72 MiB of constants where 24 MiB are distinct, more than an H100's 50 MB L2
// holds, so each GEMV streams its weight from memory: 4.7 us where the table's 3.3 us
// has it in L2).
#pragma once

#include <vector>

#include "taso/graph.h"

namespace taso {
namespace cuda {

// `graph` with every reader of a constant op that computes what an earlier constant op
// computes (same type, attributes and output types, reading the same tensors once equal
// constants are identified) reading the earlier op instead. Op ids, names and outputs are
// kept; the ops no longer read are left in place, where the executor, which computes only
// what the outputs need, never runs or stores them; graph outputs stay as they are. Ops
// named in `host_fed` (ids out of range are ignored: the executor refuses them) are
// never replaced.
Graph share_equal_constants(const Graph& graph, const std::vector<int>& host_fed);

}  // namespace cuda
}  // namespace taso
