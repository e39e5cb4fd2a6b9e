// Matching and evaluation of rule expressions.
#include <algorithm>
#include <numeric>

#include "rule_expr.h"
#include "taso/errors.h"

namespace taso {

bool match_value(const Expr& e, const Value& v, Bindings& bindings) {
  switch (e.kind) {
    case Expr::kWildcard: return true;
    case Expr::kInts: return !v.is_float && v.ints == e.ints;
    case Expr::kFloat: return v.is_float && static_cast<float>(v.number) == static_cast<float>(e.number);
    case Expr::kValueVar: {
      auto it = bindings.find(e.name);
      if (it == bindings.end()) {
        bindings[e.name] = v;
        return true;
      }
      return it->second == v;
    }
    case Expr::kCall:
      if (e.name == "list") {
        if (v.is_float || v.ints.size() != e.args.size()) return false;
        for (size_t i = 0; i < e.args.size(); ++i)
          if (!match_value(e.args[i], Value::of_ints({v.ints[i]}), bindings)) return false;
        return true;
      }
      break;
    default: break;
  }
  throw ValueError("pattern expression '" + e.name + "' cannot be matched against a value");
}

namespace {

struct Evaluator {
  const Bindings& b;
  const TensorResolver& tensors;
  const std::string& rule;

  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError("rule '" + rule + "': " + what);
  }

  const TensorType& tensor(const Expr& e, bool allow_absent = false) const {
    if (e.kind != Expr::kTensor) fail("'" + e.name + "' expects a tensor name");
    const TensorType* t = tensors.type(e.name);
    if (!t && !allow_absent) fail("tensor '" + e.name + "' is absent");
    return *t;
  }

  std::vector<int64_t> ints(const Expr& e) const {
    Value v = eval(e);
    if (v.is_float) fail("expected integers, got a float in '" + e.name + "'");
    return v.ints;
  }

  int64_t scalar(const Expr& e) const {
    std::vector<int64_t> v = ints(e);
    if (v.size() != 1) fail("expected one integer in '" + e.name + "'");
    return v[0];
  }

  // Element-wise arithmetic with scalar broadcasting.
  template <typename F>
  Value zip(const Expr& e, F f) const {
    if (e.args.size() != 2) fail("'" + e.name + "' takes 2 arguments");
    std::vector<int64_t> a = ints(e.args[0]), c = ints(e.args[1]);
    if (a.size() != c.size() && a.size() != 1 && c.size() != 1)
      fail("'" + e.name + "' on lists of different lengths");
    size_t n = std::max(a.size(), c.size());
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = f(a[a.size() == 1 ? 0 : i], c[c.size() == 1 ? 0 : i]);
    return Value::of_ints(out);
  }

  static Value boolean(bool x) { return Value::of_ints({x ? 1 : 0}); }

  Value eval(const Expr& e) const {
    switch (e.kind) {
      case Expr::kInts: return Value::of_ints(e.ints);
      case Expr::kFloat: return Value::of_float(e.number);
      case Expr::kValueVar: {
        auto it = b.find(e.name);
        if (it == b.end()) fail("variable '" + e.name + "' is not bound by the source pattern");
        return it->second;
      }
      case Expr::kTensor: fail("tensor '" + e.name + "' used as a value (use shape/dim/rank)");
      case Expr::kWildcard: fail("'_' can only be matched, not evaluated");
      case Expr::kCall: break;
    }
    const std::string& fn = e.name;
    const auto& a = e.args;
    if (fn == "list") {
      std::vector<int64_t> out;
      for (const Expr& x : a) {
        std::vector<int64_t> v = ints(x);
        out.insert(out.end(), v.begin(), v.end());
      }
      return Value::of_ints(out);
    }
    if (fn == "add") return zip(e, [](int64_t x, int64_t y) { return x + y; });
    if (fn == "sub") return zip(e, [](int64_t x, int64_t y) { return x - y; });
    if (fn == "mul") return zip(e, [](int64_t x, int64_t y) { return x * y; });
    if (fn == "floordiv")
      return zip(e, [this](int64_t x, int64_t y) {
        if (y == 0) fail("division by zero");
        return x / y;
      });
    if (fn == "eq") return boolean(a.size() == 2 && eval(a[0]) == eval(a[1]));
    if (fn == "ne") return boolean(a.size() == 2 && !(eval(a[0]) == eval(a[1])));
    if (fn == "lt") return boolean(scalar(a.at(0)) < scalar(a.at(1)));
    if (fn == "le") return boolean(scalar(a.at(0)) <= scalar(a.at(1)));
    if (fn == "gt") return boolean(scalar(a.at(0)) > scalar(a.at(1)));
    if (fn == "ge") return boolean(scalar(a.at(0)) >= scalar(a.at(1)));
    if (fn == "and") {
      for (const Expr& x : a)
        if (!scalar(x)) return boolean(false);
      return boolean(true);
    }
    if (fn == "or") {
      for (const Expr& x : a)
        if (scalar(x)) return boolean(true);
      return boolean(false);
    }
    if (fn == "not") return boolean(!scalar(a.at(0)));
    if (fn == "neg") {
      std::vector<int64_t> v = ints(a.at(0));
      for (int64_t& x : v) x = -x;
      return Value::of_ints(v);
    }
    if (fn == "sum") {
      std::vector<int64_t> v = ints(a.at(0));
      return Value::of_ints({std::accumulate(v.begin(), v.end(), int64_t{0})});
    }
    if (fn == "len") return Value::of_ints({static_cast<int64_t>(ints(a.at(0)).size())});
    if (fn == "shape") return Value::of_ints(tensor(a.at(0)).shape);
    if (fn == "rank") return Value::of_ints({static_cast<int64_t>(tensor(a.at(0)).shape.size())});
    if (fn == "dim") {
      const auto& s = tensor(a.at(0)).shape;
      int64_t i = scalar(a.at(1));
      if (i < 0) i += static_cast<int64_t>(s.size());
      if (i < 0 || i >= static_cast<int64_t>(s.size())) fail("dim index out of range");
      return Value::of_ints({s[i]});
    }
    if (fn == "present") {
      if (a.size() != 1 || a[0].kind != Expr::kTensor) fail("'present' takes one tensor name");
      return boolean(tensors.type(a[0].name) != nullptr);
    }
    if (fn == "compose_perm") {
      std::vector<int64_t> p1 = ints(a.at(0)), p2 = ints(a.at(1)), out(p2.size());
      if (p1.size() != p2.size()) fail("compose_perm of permutations of different sizes");
      for (size_t i = 0; i < p2.size(); ++i) {
        if (p2[i] < 0 || p2[i] >= static_cast<int64_t>(p1.size())) fail("compose_perm: bad permutation");
        out[i] = p1[p2[i]];
      }
      return Value::of_ints(out);
    }
    if (fn == "inverse_perm") {
      std::vector<int64_t> p = ints(a.at(0)), out(p.size());
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] < 0 || p[i] >= static_cast<int64_t>(p.size())) fail("inverse_perm: bad permutation");
        out[p[i]] = static_cast<int64_t>(i);
      }
      return Value::of_ints(out);
    }
    if (fn == "is_identity_perm") {
      std::vector<int64_t> p = ints(a.at(0));
      for (size_t i = 0; i < p.size(); ++i)
        if (p[i] != static_cast<int64_t>(i)) return boolean(false);
      return boolean(true);
    }
    fail("unknown function '" + fn + "'");
  }
};

}  // namespace

Value evaluate(const Expr& e, const Bindings& bindings, const TensorResolver& tensors,
               const std::string& rule) {
  return Evaluator{bindings, tensors, rule}.eval(e);
}

}  // namespace taso
