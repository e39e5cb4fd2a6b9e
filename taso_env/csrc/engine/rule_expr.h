// Values and expressions of rule patterns (private to the rule engine).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "taso/rule.h"

namespace taso {

struct Value {
  bool is_float = false;
  std::vector<int64_t> ints;
  double number = 0.0;
  static Value of_ints(std::vector<int64_t> v) {
    Value x;
    x.ints = std::move(v);
    return x;
  }
  static Value of_float(double f) {
    Value x;
    x.is_float = true;
    x.number = f;
    return x;
  }
  bool operator==(const Value& o) const {
    return is_float == o.is_float && (is_float ? number == o.number : ints == o.ints);
  }
};

using Bindings = std::map<std::string, Value>;

// Looks up the type of a tensor named in an expression (nullptr: an absent optional).
struct TensorResolver {
  virtual ~TensorResolver() = default;
  virtual const TensorType* type(const std::string& name) const = 0;
};

// Matches a source-side expression (literal, "$var", "_", or list(...) of those) against
// a value, binding variables. Returns false on mismatch.
bool match_value(const Expr& e, const Value& v, Bindings& bindings);

// Evaluates an expression; throws ValueError naming `rule` for unbound variables and
// unknown functions.
Value evaluate(const Expr& e, const Bindings& bindings, const TensorResolver& tensors,
               const std::string& rule);

}  // namespace taso
