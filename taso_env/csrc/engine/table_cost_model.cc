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

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

int64_t parse_int(const std::string& s, const std::string& signature) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size()) throw ValueError("op signature '" + signature + "': '" + s + "' is not an integer");
  return v;
}

// "float32[1,2],int64[3]" -> the types (commas inside brackets belong to the shapes).
std::vector<std::string> split_types(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    } else if (s[i] == '[') {
      ++depth;
    } else if (s[i] == ']') {
      --depth;
    }
  }
  return parts;
}

// "float32[1,64,56,56]" (append_type's format; "float32[]" is a scalar).
TensorType parse_type(const std::string& s, const std::string& signature) {
  size_t open = s.find('[');
  if (open == std::string::npos || s.back() != ']')
    throw ValueError("op signature '" + signature + "': '" + s + "' is not a tensor type");
  TensorType t;
  const std::string dtype = s.substr(0, open);
  t.dtype = -1;
  for (int code : {kFloat32, kUInt8, kInt8, kInt32, kInt64, kBool, kFloat16, kFloat64})
    if (dtype_name(code) == dtype) t.dtype = code;
  if (t.dtype < 0) throw ValueError("op signature '" + signature + "': unknown dtype '" + dtype + "'");
  const std::string dims = s.substr(open + 1, s.size() - open - 2);
  if (!dims.empty())
    for (const std::string& d : split(dims, ',')) t.shape.push_back(parse_int(d, signature));
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 1.0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A finer scale family than the op type where ops of one type run on kernels of very
// different efficiency: convolutions by grouping (on the H100 table dense ones measure
// ~1x their roofline, grouped ones 2-5x). "" = the op type is the family.
std::string scale_family(const Op& op, const std::vector<TensorType>& input_types) {
  if (op.type != OpType::kConv2D || input_types.empty() || input_types[0].shape.size() < 2) return "";
  const int64_t group = op.attrs.get_int("group"), channels = input_types[0].shape[1];
  return group <= 1 ? "Conv2D/dense" : group == channels ? "Conv2D/depthwise" : "Conv2D/grouped";
}

// The op family (scale_family, else the op type) and the tensors an op reads first and
// writes, from its signature: entries with the same key run the same kind of kernel over
// the same data (convolutions over one activation whatever their kernel, a GEMM's
// activation whatever its weight), so their measured / analytic ratio predicts a miss's
// better than the family's median. "" for a signature that does not read that way.
std::string neighbour_key(const std::string& signature, const std::string& family) {
  std::vector<std::string> parts = split(signature, '|');
  if (parts.size() != 4) return "";
  size_t end = parts[2].find(']');
  return (family.empty() ? parts[0] : family) + "|" + parts[2].substr(0, end == std::string::npos ? end : end + 1) +
         "|" + parts[3];
}

// Element-wise ops whose every input is output-shaped or one element run as a flat map
// over the output's elements: their cost depends on the element count, not the shape
// (a Div before or after a Transpose is the same kernel). Such signatures name the
// count ("Div||float32[98304],float32[]|float32[98304]"), so layouts share one entry and
// no rewrite gains from the noise between two measurements of the same kernel.
bool is_flat_elementwise(const Op& op, const std::vector<TensorType>& input_types) {
  if (op_schema(op.type).elementwise == ElementwiseClass::kNone) return false;  // taso/op_table.def
  if (op.outputs.size() != 1 || op.outputs[0].num_elements() <= 1) return false;
  for (const TensorType& t : input_types)
    if (t.shape != op.outputs[0].shape && t.num_elements() != 1) return false;
  return true;
}

TensorType flat(const TensorType& t, bool scalar) {
  TensorType out;
  out.dtype = t.dtype;
  if (!scalar) out.shape = {t.num_elements()};
  return out;
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
  const bool flat_map = is_flat_elementwise(op, input_types);
  const TensorType& result = op.outputs.empty() ? TensorType{} : op.outputs[0];
  std::vector<std::string> inputs(input_types.size());
  for (size_t i = 0; i < input_types.size(); ++i)
    append_type(inputs[i], flat_map ? flat(input_types[i], input_types[i].shape != result.shape) : input_types[i]);
  // Add and Mul cost the same either way round (the executor runs both orders as one
  // kernel): one entry, inputs in sorted order, so no rewrite gains from commuting them.
  if ((op.type == OpType::kAdd || op.type == OpType::kMul) && inputs.size() == 2 && inputs[1] < inputs[0])
    std::swap(inputs[0], inputs[1]);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) out += ',';
    out += inputs[i];
  }
  out += '|';
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    if (i) out += ',';
    append_type(out, flat_map ? flat(op.outputs[i], false) : op.outputs[i]);
  }
  return out;
}

namespace {

// The op configuration a signature names, without checking that it is canonical.
Op parse_signature(const std::string& signature, std::vector<TensorType>* input_types) {
  const std::vector<std::string> parts = split(signature, '|');
  if (parts.size() != 4)
    throw ValueError("op signature '" + signature + "' does not have the four parts type|attributes|inputs|outputs");
  Op op;
  op.type = op_type_from_name(parts[0]);
  const OpSchema& schema = op_schema(op.type);
  if (!parts[1].empty()) {
    for (const std::string& kv : split(parts[1], ';')) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos)
        throw ValueError("op signature '" + signature + "': attribute '" + kv + "' has no value");
      const std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
      auto spec = std::find_if(schema.attrs.begin(), schema.attrs.end(),
                               [&](const AttrSpec& a) { return a.name == name; });
      if (spec == schema.attrs.end())
        throw ValueError("op signature '" + signature + "': " + parts[0] + " has no attribute '" + name + "'");
      switch (spec->kind) {
        case AttrKind::kInt:
        case AttrKind::kInts: {
          std::vector<int64_t>& ints = op.attrs.ints[name];
          if (!value.empty())
            for (const std::string& v : split(value, ',')) ints.push_back(parse_int(v, signature));
          break;
        }
        case AttrKind::kFloat: {
          size_t used = 0;
          try {
            op.attrs.floats[name] = std::stod(value, &used);
          } catch (const std::exception&) {
            used = 0;
          }
          if (value.empty() || used != value.size())
            throw ValueError("op signature '" + signature + "': attribute '" + name + "' is not a number");
          break;
        }
        case AttrKind::kString: op.attrs.strings[name] = value; break;
      }
    }
  }
  input_types->clear();
  if (!parts[2].empty())
    for (const std::string& t : split_types(parts[2])) input_types->push_back(parse_type(t, signature));
  if (!parts[3].empty())
    for (const std::string& t : split_types(parts[3])) op.outputs.push_back(parse_type(t, signature));
  return op;
}

}  // namespace

Op op_from_signature(const std::string& signature, std::vector<TensorType>* input_types) {
  Op op = parse_signature(signature, input_types);
  if (op_signature(op, *input_types) != signature)
    throw ValueError("op signature '" + signature + "' does not round-trip (it reads as '" +
                     op_signature(op, *input_types) + "')");
  return op;
}

std::string canonical_signature(const std::string& signature) {
  try {
    std::vector<TensorType> in;
    const Op op = parse_signature(signature, &in);
    return op_signature(op, in);
  } catch (const std::exception&) {
    return signature;  // an op type or attribute this version does not know: kept as written
  }
}

TableCostModel::TableCostModel(DeviceProfile fallback_profile) : analytic_(std::move(fallback_profile)) {}

void TableCostModel::set(const std::string& signature, double ms, double analytic_ms) {
  if (signature.empty() || signature.find('|') == std::string::npos)
    throw ValueError("cost table: malformed op signature '" + signature + "'");
  if (!(ms >= 0)) throw ValueError("cost table: negative or NaN cost for '" + signature + "'");
  table_[canonical_signature(signature)] = CostEntry{ms, analytic_ms};
  scales_dirty_ = true;
}

bool TableCostModel::contains(const std::string& signature) const {
  return table_.count(canonical_signature(signature)) > 0;
}

double TableCostModel::get(const std::string& signature) const {
  auto it = table_.find(canonical_signature(signature));
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
  std::map<std::string, std::vector<double>> ratios, neighbours;
  for (const auto& kv : table_) {
    if (kv.second.analytic_ms <= 0 || kv.second.ms <= 0) continue;
    double r = kv.second.ms / kv.second.analytic_ms;
    ratios[type_of_signature(kv.first)].push_back(r);
    ratios[""].push_back(r);
    std::string family;
    if (type_of_signature(kv.first) == "Conv2D") {
      try {
        std::vector<TensorType> in;
        Op op = op_from_signature(kv.first, &in);
        family = scale_family(op, in);
        ratios[family].push_back(r);
      } catch (const std::exception&) {
        continue;  // an entry of an older table that no longer parses: its type's scale only
      }
    }
    std::string key = neighbour_key(kv.first, family);
    if (!key.empty()) neighbours[key].push_back(r);
  }
  scales_.clear();
  for (auto& kv : ratios)
    if (kv.second.size() >= 2 || kv.first.find('/') == std::string::npos) scales_[kv.first] = median(kv.second);
  neighbour_scales_.clear();
  for (auto& kv : neighbours) neighbour_scales_[kv.first] = median(kv.second);
  fallbacks_.clear();
  scales_dirty_ = false;
}

double TableCostModel::scale_for(const std::string& op_type) const {
  refresh_scales();
  auto it = scales_.find(op_type);
  if (it != scales_.end()) return it->second;
  it = scales_.find("");
  return it != scales_.end() ? it->second : 1.0;
}

double TableCostModel::fallback_ms(const Op& op, const std::vector<TensorType>& input_types,
                                   const std::string& signature) const {
  refresh_scales();
  auto cached = fallbacks_.find(signature);  // search costs the same missing op many times
  if (cached != fallbacks_.end()) return cached->second;
  const std::string family = scale_family(op, input_types);
  const double analytic = analytic_.compute_cost_ms(op, input_types);
  auto near = neighbour_scales_.find(neighbour_key(signature, family));
  const bool known = !family.empty() && scales_.count(family);
  const double ms = analytic * (near != neighbour_scales_.end() ? near->second
                                                                : scale_for(known ? family : op_type_name(op.type)));
  fallbacks_.emplace(signature, ms);
  return ms;
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
  return fallback_ms(op, input_types, sig);
}

}  // namespace taso
