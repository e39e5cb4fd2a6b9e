// Whether the weights a graph's GEMVs read stay in the GPU's L2: a graph-level term of
// the measured (table) cost model.
//
// The table prices each op alone, its weight hot in L2 from the measurement's earlier
// runs. On the H100 a GEMV-like GEMM (a MatMul / Gemm with one constant operand, the
// other of at most kGemvRows rows) runs with its weight cold once the distinct constant
// bytes that such GEMMs read per run pass about half the L2 (25 MiB: each of the two L2
// partitions holds 25 MB), and every such GEMV then takes longer by what reading its
// weight from memory costs (docs/gpu.md, "Per kernel, the error is L2 after all";
// docs/measured/2026-11-27_h100_gemm_weight_in_l2.json,
// docs/measured/2026-11-27_h100_nasrnn_kernels_per_step.json). Merging parallel
// MatMuls folds a Concat of their weights into a new constant, so merges grow what a run
// reads (nasrnn: 16 MiB, 20-63 MiB after random merges).
//
// The term: miss(T) * cold_read_extra(bytes of its weight) for each GEMV read, where T is
// the distinct bytes of the constants those GEMVs read (distinct by value: structurally
// equal constant cones, equal Merkle hashes, count once, as the executor stores equal
// constants once: csrc/gpu/constant_sharing.h) and miss(T) rises from 0 to 1 between
// kMissFromBytes and kMissFullBytes. It is charged to the GEMV ops, each rounded to cost
// units on its own, so a graph's term is the sum of its ops' and the op costs still sum
// to the graph cost. It is global (a rewrite anywhere changes T and so every GEMV's
// price): a candidate's cost delta is the engine's local delta plus the change of this
// term, which WeightResidency computes from the reads the rewrite adds and removes.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "taso/graph.h"

namespace taso {

// A GEMM runs as a GEMV reading its weight once per run when its other operand has at
// most this many rows (the measured kernels: batch-1 RNN cells, x[1, 512] @ W[512, N]).
constexpr int64_t kGemvRows = 16;
// miss(T): 0 up to kMissFromBytes of distinct weights, 1 from kMissFullBytes, linear
// between (the offline fit that ranks nasrnn's measured rewrites best: 0.916 / 0.935
// Spearman against 0.833 / 0.800 for the table alone, other models unchanged).
constexpr int64_t kMissFromBytes = int64_t{22} << 20;
constexpr int64_t kMissFullBytes = int64_t{30} << 20;

// What one GEMV read of a cold weight of `bytes` costs more than of a hot one (ms): the
// H100's measured cold-minus-hot times, linear in bytes between them, flat beyond.
double cold_read_extra_ms(int64_t bytes);
// The fraction of GEMV reads that miss L2 when they read `distinct_bytes` of weights.
double weight_miss_fraction(int64_t distinct_bytes);
// One GEMV read's share of the term (cost units) at `distinct_bytes`.
int64_t cold_read_units(int64_t distinct_bytes, int64_t bytes);

// Which operand (0 or 1) a MatMul / Gemm reads as its weight when the executor runs it
// as a GEMV (float32, exactly one of its first two operands constant, the other with at
// most kGemvRows rows: its elements over the dim it contracts, so x[M, K] @ W[K, N]
// has M rows and a batched x[B, M, K] B * M); -1 for any other op.
int gemv_weight_operand(const Op& op, const std::vector<TensorType>& input_types, bool a_constant,
                        bool b_constant);
// The value a constant tensor holds, by its producer's Merkle hash (taso/graph_hash.h) and
// output index: equal for structurally equal constants.
uint64_t weight_value(uint64_t producer_hash, int index);

// A change of a graph's GEMV reads: `count` reads (+ added, - removed) of the constant of
// value `value`, of `bytes` bytes.
struct WeightRead {
  uint64_t value = 0;
  int64_t bytes = 0;
  int count = 0;
};

// A graph's GEMV reads and what they cost cold: its term, each op's share, and how a
// rewrite's changes of the reads change the term.
class WeightResidency {
 public:
  // `constant` as constant_ops(graph); `hashes[i]` op i's Merkle hash (Graph::op_hashes),
  // read for constant ops only.
  WeightResidency(const Graph& graph, const std::vector<char>& constant, const std::vector<uint64_t>& hashes);

  // Op `id`'s GEMV read (count 1), or null.
  const WeightRead* read_of(int id) const;
  // Op `id`'s share of the term (cost units; 0 but for GEMVs).
  int64_t op_units(int id) const;
  // The graph's term: the sum of op_units.
  int64_t term_units() const { return term_units_; }
  int64_t distinct_bytes() const { return distinct_bytes_; }
  // The change of term_units() when the reads change by `changes` (exact: the term of the
  // graph with those reads minus this one's).
  int64_t delta_units(const std::vector<WeightRead>& changes) const;

 private:
  std::vector<int> read_index_;                   // per op: its entry in reads_, or -1
  std::vector<WeightRead> reads_;                 // the GEMV reads, one per op
  std::unordered_map<uint64_t, int> readers_;     // value -> GEMVs reading it
  std::map<int64_t, int64_t> reads_by_bytes_;     // weight bytes -> GEMVs reading such a weight
  int64_t distinct_bytes_ = 0;
  int64_t term_units_ = 0;
};

}  // namespace taso
