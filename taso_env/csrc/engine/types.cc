// Value types: dtype sizes, shape printing, attribute accessors, error classification.
#include <sstream>

#include "taso/errors.h"
#include "taso/types.h"

namespace taso {

int dtype_size(int dtype) {
  switch (dtype) {
    case kFloat32: return 4;
    case kUInt8: return 1;
    case kInt8: return 1;
    case kInt32: return 4;
    case kInt64: return 8;
    case kBool: return 1;
    case kFloat16: return 2;
    case kFloat64: return 8;
    case kBFloat16: return 2;
    default: throw ValueError("unsupported dtype code " + std::to_string(dtype));
  }
}

std::string dtype_name(int dtype) {
  switch (dtype) {
    case kFloat32: return "float32";
    case kUInt8: return "uint8";
    case kInt8: return "int8";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kBool: return "bool";
    case kFloat16: return "float16";
    case kFloat64: return "float64";
    case kBFloat16: return "bfloat16";
    default: return "dtype(" + std::to_string(dtype) + ")";
  }
}

int64_t TensorType::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorType::num_bytes() const { return num_elements() * dtype_size(dtype); }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::string type_str(const TensorType& type) {
  return dtype_name(type.dtype) + shape_str(type.shape);
}

int64_t Attrs::get_int(const std::string& name) const {
  const std::vector<int64_t>& v = get_ints(name);
  if (v.size() != 1) throw AttributeError("attribute '" + name + "' is not a scalar");
  return v[0];
}

const std::vector<int64_t>& Attrs::get_ints(const std::string& name) const {
  auto it = ints.find(name);
  if (it == ints.end()) throw AttributeError("missing integer attribute '" + name + "'");
  return it->second;
}

double Attrs::get_float(const std::string& name) const {
  auto it = floats.find(name);
  if (it == floats.end()) throw AttributeError("missing float attribute '" + name + "'");
  return it->second;
}

const std::string& Attrs::get_string(const std::string& name) const {
  auto it = strings.find(name);
  if (it == strings.end()) throw AttributeError("missing string attribute '" + name + "'");
  return it->second;
}

std::pair<int, std::string> classify_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  } catch (const std::bad_alloc&) {
    return {kErrGeneric, "out of memory"};
  } catch (const std::exception& e) {
    return {kErrGeneric, e.what()};
  } catch (...) {
    return {kErrGeneric, "unknown C++ exception"};
  }
}

}  // namespace taso
