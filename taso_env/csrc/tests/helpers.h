// Small graph-building helpers shared by the C++ tests.
#pragma once

#include "taso/graph.h"

namespace testing_helpers {

inline taso::TensorRef add(taso::Graph& g, const std::string& type, std::vector<taso::TensorRef> inputs,
                           taso::Attrs attrs = {}, const std::string& name = "") {
  taso::OpSpec s;
  s.type = type;
  s.name = name;
  s.inputs = std::move(inputs);
  s.attrs = std::move(attrs);
  return {g.add_op(s), 0};
}

inline taso::TensorRef source(taso::Graph& g, const std::string& type, const std::string& name,
                              std::vector<int64_t> shape, int dtype = taso::kFloat32) {
  taso::OpSpec s;
  s.type = type;
  s.name = name;
  s.declared_outputs = {{std::move(shape), dtype}};
  return {g.add_op(s), 0};
}

inline taso::Attrs ints(std::initializer_list<std::pair<const std::string, std::vector<int64_t>>> kv) {
  taso::Attrs a;
  a.ints = kv;
  return a;
}

}  // namespace testing_helpers
