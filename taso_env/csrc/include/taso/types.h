// Basic value types of the graph IR: dtypes, tensor types, tensor references,
// op attributes. Everything here is a plain value (copyable, comparable).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace taso {

// Element types use the ONNX TensorProto codes so no mapping table is needed at the
// ONNX boundary.
enum DType : int {
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kBFloat16 = 16,  // storage of the GPU executor's bf16 math mode only; graphs never hold it
};

// Size in bytes of one element; throws ValueError for an unknown code.
int dtype_size(int dtype);
std::string dtype_name(int dtype);

struct TensorType {
  std::vector<int64_t> shape;
  int dtype = kFloat32;

  int64_t num_elements() const;
  int64_t num_bytes() const;
  bool operator==(const TensorType& other) const {
    return shape == other.shape && dtype == other.dtype;
  }
};

std::string shape_str(const std::vector<int64_t>& shape);
std::string type_str(const TensorType& type);

// Output `index` of op `op` (op ids are positions in Graph::ops()).
struct TensorRef {
  int op = -1;
  int index = 0;
  bool operator==(const TensorRef& o) const { return op == o.op && index == o.index; }
  bool operator<(const TensorRef& o) const {
    return op < o.op || (op == o.op && index < o.index);
  }
};

// Typed attribute maps. Integer attributes are always stored as vectors; the op schema
// says which of them are scalars. Maps are ordered, which keeps hashing canonical.
struct Attrs {
  std::map<std::string, std::vector<int64_t>> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::string> strings;

  bool operator==(const Attrs& o) const {
    return ints == o.ints && floats == o.floats && strings == o.strings;
  }
  int64_t get_int(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  double get_float(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
};

// Activation fused into Conv2D / MatMul.
enum Activation : int {
  kActNone = 0,
  kActRelu = 1,
  kActSigmoid = 2,
  kActTanh = 3,
};

}  // namespace taso
