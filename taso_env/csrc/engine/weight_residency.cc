// The weight-residency term of the table cost model (see taso/weight_residency.h).
#include "taso/weight_residency.h"

#include <algorithm>

#include "taso/cost_model.h"
#include "taso/errors.h"
#include "taso/graph_hash.h"

namespace taso {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Cold-minus-hot time of one GEMV (weight MiB, extra us), measured on the H100 with the
// weight evicted from L2 between runs against it kept hot
// (docs/measured/2026-11-27_h100_gemm_weight_in_l2.json; nasrnn's
// GEMVs per step, docs/measured/2026-11-27_h100_nasrnn_kernels_per_step.json, run
// that much slower once its weights pass kMissFromBytes). Sorted by size.
constexpr double kColdExtra[][2] = {{1.0, 0.41}, {2.25, 1.25}, {3.0, 0.82},
                                    {6.75, 1.51}, {8.0, 1.64}, {9.0, 1.94}};

// The dim of `t` that operand `operand` (0: A, 1: B) of a GEMM contracts.
int64_t contracted_dim(const TensorType& t, int operand, bool transposed) {
  const auto& s = t.shape;
  if (s.size() < 2) return s.empty() ? 1 : s[0];
  const bool last = (operand == 0) != transposed;  // A contracts its last dim, B its second to last
  return last ? s[s.size() - 1] : s[s.size() - 2];
}

}  // namespace

double cold_read_extra_ms(int64_t bytes) {
  const double mib = static_cast<double>(bytes) / kMiB;
  constexpr size_t n = sizeof kColdExtra / sizeof kColdExtra[0];
  if (mib <= kColdExtra[0][0]) return kColdExtra[0][1] * 1e-3;
  for (size_t i = 1; i < n; ++i)
    if (mib <= kColdExtra[i][0]) {
      const double f = (mib - kColdExtra[i - 1][0]) / (kColdExtra[i][0] - kColdExtra[i - 1][0]);
      return (kColdExtra[i - 1][1] + f * (kColdExtra[i][1] - kColdExtra[i - 1][1])) * 1e-3;
    }
  return kColdExtra[n - 1][1] * 1e-3;
}

double weight_miss_fraction(int64_t distinct_bytes) {
  const double f = static_cast<double>(distinct_bytes - kMissFromBytes) /
                   static_cast<double>(kMissFullBytes - kMissFromBytes);
  return std::min(1.0, std::max(0.0, f));
}

int64_t cold_read_units(int64_t distinct_bytes, int64_t bytes) {
  const double miss = weight_miss_fraction(distinct_bytes);
  return miss > 0 ? cost_units(miss * cold_read_extra_ms(bytes)) : 0;
}

int gemv_weight_operand(const Op& op, const std::vector<TensorType>& input_types, bool a_constant,
                        bool b_constant) {
  if ((op.type != OpType::kMatMul && op.type != OpType::kGemm) || a_constant == b_constant ||
      input_types.size() < 2)
    return -1;
  for (const TensorType& t : input_types)
    if (t.dtype != kFloat32) return -1;
  const int weight = a_constant ? 0 : 1, other = 1 - weight;
  const bool gemm = op.type == OpType::kGemm;
  const bool transposed = gemm && op.attrs.get_int(other == 0 ? "trans_a" : "trans_b") != 0;
  const int64_t k = contracted_dim(input_types[other], other, transposed);
  if (k <= 0) return -1;
  return input_types[other].num_elements() / k <= kGemvRows ? weight : -1;
}

uint64_t weight_value(uint64_t producer_hash, int index) {
  return graph_hash::mix(producer_hash, static_cast<uint64_t>(index) + 0x77ULL);
}

WeightResidency::WeightResidency(const Graph& graph, const std::vector<char>& constant,
                                 const std::vector<uint64_t>& hashes)
    : read_index_(graph.num_ops(), -1) {
  std::vector<TensorType> in;
  for (int id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    const bool gemm = op.type == OpType::kMatMul || op.type == OpType::kGemm;
    if (!gemm || constant[id] || op.inputs.size() < 2) continue;
    in.clear();
    for (const TensorRef& r : op.inputs) in.push_back(graph.tensor_type(r));
    const int w = gemv_weight_operand(op, in, constant[op.inputs[0].op], constant[op.inputs[1].op]);
    if (w < 0) continue;
    const TensorRef& t = op.inputs[w];
    read_index_[id] = static_cast<int>(reads_.size());
    reads_.push_back({weight_value(hashes[t.op], t.index), in[w].num_bytes(), 1});
    if (readers_[reads_.back().value]++ == 0) distinct_bytes_ += reads_.back().bytes;
    ++reads_by_bytes_[reads_.back().bytes];
  }
  for (const auto& [bytes, reads] : reads_by_bytes_)
    term_units_ += reads * cold_read_units(distinct_bytes_, bytes);
}

const WeightRead* WeightResidency::read_of(int id) const {
  return read_index_[id] < 0 ? nullptr : &reads_[read_index_[id]];
}

int64_t WeightResidency::op_units(int id) const {
  const WeightRead* r = read_of(id);
  return r ? cold_read_units(distinct_bytes_, r->bytes) : 0;
}

int64_t WeightResidency::delta_units(const std::vector<WeightRead>& changes) const {
  if (changes.empty()) return 0;
  // Net change per value (a rewrite changes a few reads: a linear scan is enough).
  std::vector<WeightRead> net;
  for (const WeightRead& c : changes) {
    auto at = std::find_if(net.begin(), net.end(), [&](const WeightRead& r) { return r.value == c.value; });
    if (at == net.end()) net.push_back(c);
    else at->count += c.count;
  }
  int64_t distinct = distinct_bytes_;
  std::map<int64_t, int64_t> by_bytes_change;
  for (const WeightRead& c : net) {
    if (c.count == 0) continue;
    auto it = readers_.find(c.value);
    const int before = it == readers_.end() ? 0 : it->second, after = before + c.count;
    if (after < 0)
      throw ValueError("weight residency: the changes remove more reads of a weight than the graph has");
    if (before == 0) distinct += c.bytes;
    if (after == 0) distinct -= c.bytes;
    by_bytes_change[c.bytes] += c.count;
  }
  int64_t delta = 0;
  if (weight_miss_fraction(distinct) == weight_miss_fraction(distinct_bytes_)) {
    for (const auto& [bytes, count] : by_bytes_change) delta += count * cold_read_units(distinct, bytes);
    return delta;
  }
  for (const auto& [bytes, reads] : reads_by_bytes_) {  // every read is priced again at the new miss fraction
    auto change = by_bytes_change.find(bytes);
    const int64_t after = reads + (change == by_bytes_change.end() ? 0 : change->second);
    delta += after * cold_read_units(distinct, bytes);
  }
  for (const auto& [bytes, count] : by_bytes_change)
    if (!reads_by_bytes_.count(bytes)) delta += count * cold_read_units(distinct, bytes);
  return delta - term_units_;
}

}  // namespace taso
