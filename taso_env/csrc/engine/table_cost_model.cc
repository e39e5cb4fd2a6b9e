// The measured (table) cost model and the canonical op signature.
#include "taso/table_cost_model.h"

#include <algorithm>
#include <cstdio>

#include "taso/errors.h"

namespace taso {
namespace {

std::string format_float(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Plain string building (no iostreams: they are slow here and their locale machinery
// is what breaks first when two C++ runtimes meet in one process).
void append_type(std::string& out, const TensorType& t) {
  out += dtype_name(t.dtype);
  out += '[';
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(t.shape[i]);
  }
  out += ']';
}

std::string type_of_signature(const std::string& signature) {
  return signature.substr(0, signature.find('|'));
}

double median(std::vector<double> v) {
  if (v.empty()) return 1.0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::string op_signature(const Op& op, const std::vector<TensorType>& input_types) {
  std::string out = op_type_name(op.type);
  out += '|';
  bool first = true;
  auto sep = [&]() {
    if (!first) out += ';';
    first = false;
  };
  for (const auto& kv : op.attrs.ints) {
    sep();
    out += kv.first;
    out += '=';
    for (size_t i = 0; i < kv.second.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(kv.second[i]);
    }
  }
  for (const auto& kv : op.attrs.floats) {
    sep();
    out += kv.first + "=" + format_float(kv.second);
  }
  for (const auto& kv : op.attrs.strings) {
    if (kv.first == "onnx_node") continue;  // serialized bytes; the op type says enough
    sep();
    out += kv.first + "=" + kv.second;
  }
  out += '|';
  for (size_t i = 0; i < input_types.size(); ++i) {
    if (i) out += ',';
    append_type(out, input_types[i]);
  }
  out += '|';
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    if (i) out += ',';
    append_type(out, op.outputs[i]);
  }
  return out;
}

TableCostModel::TableCostModel(DeviceProfile fallback_profile) : analytic_(std::move(fallback_profile)) {}

void TableCostModel::set(const std::string& signature, double ms, double analytic_ms) {
  if (signature.empty() || signature.find('|') == std::string::npos)
    throw ValueError("cost table: malformed op signature '" + signature + "'");
  if (!(ms >= 0)) throw ValueError("cost table: negative or NaN cost for '" + signature + "'");
  table_[signature] = CostEntry{ms, analytic_ms};
  scales_dirty_ = true;
}

bool TableCostModel::contains(const std::string& signature) const { return table_.count(signature) > 0; }

double TableCostModel::get(const std::string& signature) const {
  auto it = table_.find(signature);
  if (it == table_.end()) throw IndexError("cost table has no entry for '" + signature + "'");
  return it->second.ms;
}

std::vector<std::pair<std::string, CostEntry>> TableCostModel::entries() const {
  std::vector<std::pair<std::string, CostEntry>> out(table_.begin(), table_.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void TableCostModel::reset_counters() {
  hits_ = misses_ = measured_ = 0;
  missed_.clear();
}

void TableCostModel::refresh_scales() const {
  if (!scales_dirty_) return;
  std::map<std::string, std::vector<double>> ratios;
  for (const auto& kv : table_) {
    if (kv.second.analytic_ms <= 0 || kv.second.ms <= 0) continue;
    double r = kv.second.ms / kv.second.analytic_ms;
    ratios[type_of_signature(kv.first)].push_back(r);
    ratios[""].push_back(r);
  }
  scales_.clear();
  for (auto& kv : ratios) scales_[kv.first] = median(kv.second);
  scales_dirty_ = false;
}

double TableCostModel::scale_for(const std::string& op_type) const {
  refresh_scales();
  auto it = scales_.find(op_type);
  if (it != scales_.end()) return it->second;
  it = scales_.find("");
  return it != scales_.end() ? it->second : 1.0;
}

double TableCostModel::fallback_ms(const Op& op, const std::vector<TensorType>& input_types) const {
  return analytic_.compute_cost_ms(op, input_types) * scale_for(op_type_name(op.type));
}

double TableCostModel::compute_cost_ms(const Op& op, const std::vector<TensorType>& input_types) const {
  std::string sig = op_signature(op, input_types);
  auto it = table_.find(sig);
  if (it != table_.end()) {
    ++hits_;
    return it->second.ms;
  }
  if (measurer_) {
    double ms = measurer_(op, input_types);  // negative: this op cannot be measured
    if (ms >= 0) {
      table_[sig] = CostEntry{ms, analytic_.compute_cost_ms(op, input_types)};
      scales_dirty_ = true;
      ++measured_;
      return ms;
    }
  }
  ++misses_;
  missed_.insert(sig);
  return fallback_ms(op, input_types);
}

}  // namespace taso
