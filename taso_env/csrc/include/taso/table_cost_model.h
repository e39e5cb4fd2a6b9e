// The measured cost model: a table of op costs (ms) keyed by op signature, measured on
// a GPU (taso_env/csrc/gpu) and stored in HDF5 (taso_env/gpu/cost_table.py). Ops missing
// from the table fall back to the analytic roofline, scaled per op type by how the
// measured entries compare with it, and are counted. A "measurer" callback, when set,
// measures a missing op instead (the `cuda` cost model) and stores the result.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "taso/cost_model.h"

namespace taso {

// Canonical signature of an op configuration: op type, attributes (sorted by name; the
// serialized ONNX node of opaque ops is left out), input and output types. Op names
// and graph position do not enter it, so equal configurations share one table entry:
// Add / Mul inputs are ordered, and element-wise ops whose inputs are output-shaped or
// one element are named by element count ("Relu||float32[200704]|float32[200704]").
// Example: "Conv2D|activation=0;...|float32[1,64,56,56],float32[64,64,3,3]|float32[1,64,56,56]".
std::string op_signature(const Op& op, const std::vector<TensorType>& input_types);

// The op configuration a signature names (op_signature's inverse): the op (type,
// attributes with the kinds of its schema, output types; no name, no inputs) and, in
// `input_types`, its input types. Throws ValueError naming what is malformed,
// UnknownOpError for an unknown op type.
Op op_from_signature(const std::string& signature, std::vector<TensorType>* input_types);

// The signature `signature` is written as by this version of op_signature (tables
// written by earlier versions: Add / Mul inputs in either order, element-wise ops by
// shape instead of element count); unchanged where it does not parse.
std::string canonical_signature(const std::string& signature);

// One measured table entry.
struct CostEntry {
  double ms = 0;           // measured runtime
  double analytic_ms = 0;  // the analytic estimate of the same op (0: unknown)
};

class TableCostModel : public CostModel {
 public:
  using Measurer = std::function<double(const Op&, const std::vector<TensorType>&)>;

  explicit TableCostModel(DeviceProfile fallback_profile);

  double compute_cost_ms(const Op& op, const std::vector<TensorType>& input_types) const override;

  // The table holds the CUDA executor's costs, and that executor runs convolution and
  // GEMM epilogues and element-wise chains fused (taso/epilogue.h): on by default; off
  // prices every op alone (for comparison, as the executor with RLFLOW_FUSE=0).
  bool runs_fused_steps() const override { return fused_epilogues_; }
  void set_fused_epilogues(bool on) { fused_epilogues_ = on; }

  // The table's entries are measured with each op's weight hot in L2, which a run of
  // the whole graph keeps only while its GEMVs' weights fit (taso/weight_residency.h).
  // Off by default: as a search objective the term walls greedy descent and backtracking
  // in at a local optimum (docs/gpu.md, "The table prices weight residency").
  bool prices_weight_residency() const override { return weight_residency_; }
  void set_weight_residency(bool on) { weight_residency_ = on; }

  // Adds or replaces an entry; the op type is the signature's prefix.
  void set(const std::string& signature, double ms, double analytic_ms = 0);
  bool contains(const std::string& signature) const;
  // Throws IndexError naming the signature when it is absent.
  double get(const std::string& signature) const;
  std::vector<std::pair<std::string, CostEntry>> entries() const;
  size_t size() const { return table_.size(); }

  // Called on a miss instead of the fallback; its result is stored (not a miss). A
  // negative result means "cannot measure this op": it falls back and counts as a miss.
  void set_measurer(Measurer measurer) { measurer_ = std::move(measurer); }
  void clear_measurer() { measurer_ = nullptr; }
  bool has_measurer() const { return static_cast<bool>(measurer_); }

  // Lookups answered by the table, lookups that fell back (misses), and the distinct
  // signatures that missed (what a measuring run should fill in).
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t measured() const { return measured_; }
  const std::set<std::string>& missed_signatures() const { return missed_; }
  void reset_counters();

  // Fallback of a missing op: analytic estimate times the median measured / analytic
  // ratio of the entries of its family that read and write the same shapes (its first
  // input, its outputs: e.g. convolutions over the same activations with other kernels)
  // if the table has any, else of its whole family: convolutions by grouping
  // ("Conv2D/dense", "Conv2D/depthwise", "Conv2D/grouped", where the table has two such
  // entries), else the op type; over all entries when the type has none; 1 for an
  // empty table. (A 3x3 convolution over a 1x1 image scaled by all dense convolutions'
  // median looked 3x cheaper than its measured 1x1 sibling; on the H100 it is slower.)
  // `signature` is op_signature(op, input_types); results are kept until the table changes.
  double fallback_ms(const Op& op, const std::vector<TensorType>& input_types, const std::string& signature) const;
  double scale_for(const std::string& op_type) const;
  const AnalyticCostModel& analytic() const { return analytic_; }

 private:
  bool fused_epilogues_ = true;
  bool weight_residency_ = false;
  void refresh_scales() const;

  AnalyticCostModel analytic_;
  mutable std::unordered_map<std::string, CostEntry> table_;  // measurer results land here too
  Measurer measurer_;
  mutable std::map<std::string, double> scales_;  // family or op type -> scale ("" = all)
  mutable std::map<std::string, double> neighbour_scales_;  // family|first input|outputs -> scale
  mutable std::unordered_map<std::string, double> fallbacks_;  // missing signature -> fallback ms
  mutable bool scales_dirty_ = true;
  mutable int64_t hits_ = 0;
  mutable int64_t misses_ = 0;
  mutable int64_t measured_ = 0;
  mutable std::set<std::string> missed_;
};

}  // namespace taso
