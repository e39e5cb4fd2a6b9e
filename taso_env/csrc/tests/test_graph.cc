// Graph construction, references, topological order, cycle detection and hashing.
#include "check.h"
#include "helpers.h"
#include "taso/errors.h"

using namespace taso;
using namespace testing_helpers;

namespace {

// Builds x -> conv(w1) -> relu -> add(conv(w2)) in the given op order.
Graph small_graph(bool swap_branches) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 8, 16, 16});
  TensorRef a, b;
  auto branch = [&](const std::string& wname, const std::string& name) {
    auto w = source(g, "Weight", wname, {8, 8, 3, 3});
    return add(g, "Conv2D", {x, w}, ints({{"pads", {1, 1, 1, 1}}}), name);
  };
  if (swap_branches) {
    b = branch("w2", "conv_b");
    a = branch("w1", "conv_a");
  } else {
    a = branch("w1", "conv_a");
    b = branch("w2", "conv_b");
  }
  auto r = add(g, "Relu", {a});
  auto y = add(g, "Add", {r, b});
  g.add_output(y, "y");
  return g;
}

}  // namespace

TEST(hash_ignores_construction_order_and_op_names) {
  Graph g1 = small_graph(false), g2 = small_graph(true);
  CHECK_EQ(g1.hash(), g2.hash());
  CHECK_EQ(g1.num_ops(), 7);
  CHECK_EQ(g1.num_compute_ops(), 4);
}

TEST(hash_changes_with_structure_attrs_and_weights) {
  Graph g1 = small_graph(false);
  Graph g2;
  auto x = source(g2, "Input", "x", {1, 8, 16, 16});
  auto w1 = source(g2, "Weight", "w1", {8, 8, 3, 3});
  auto w2 = source(g2, "Weight", "w2", {8, 8, 3, 3});
  auto a = add(g2, "Conv2D", {x, w1}, ints({{"pads", {1, 1, 1, 1}}}));
  auto b = add(g2, "Conv2D", {x, w2}, ints({{"pads", {1, 1, 1, 1}}}));
  auto r = add(g2, "Relu", {b});  // relu on the other branch
  auto y = add(g2, "Add", {a, r});
  g2.add_output(y, "y");
  CHECK(g1.hash() != g2.hash());
}

TEST(bad_references_are_graph_errors) {
  Graph g;
  auto x = source(g, "Input", "x", {4});
  CHECK_THROWS(add(g, "Relu", {{5, 0}}, {}, "r"), GraphError, "does not exist yet");
  CHECK_THROWS(add(g, "Relu", {{x.op, 1}}, {}, "r"), GraphError, "has 1 outputs");
  CHECK_THROWS(g.add_output({9, 0}, "out"), GraphError, "does not exist");
  g.add_output(x, "out");
  CHECK_THROWS(g.add_output(x, "out"), GraphError, "duplicate graph output");
  CHECK_THROWS(source(g, "Weight", "x", {4}), GraphError, "duplicate input/weight name 'x'");
  CHECK_THROWS(g.op(42), IndexError, "out of range");
}

TEST(consumers_and_topological_order) {
  Graph g = small_graph(false);
  auto cons = g.consumers();
  CHECK_EQ(cons[0][0].size(), 2u);  // x feeds both convs
  std::vector<int> order = g.topological_order();
  CHECK_EQ(order.size(), static_cast<size_t>(g.num_ops()));
  std::vector<int> pos(order.size());
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
  for (int i = 0; i < g.num_ops(); ++i)
    for (const TensorRef& r : g.op(i).inputs) CHECK(pos[r.op] < pos[i]);
}

TEST(topological_sort_reorders_and_detects_cycles) {
  // 0 <- 2 <- 1 : given order 0,1,2 with 1 depending on 2
  std::vector<int> order = topological_sort({{}, {2}, {0}}, {"a", "b", "c"});
  CHECK(order == (std::vector<int>{0, 2, 1}));
  CHECK_THROWS(topological_sort({{}, {2}, {1}}, {"a", "b", "c"}), CycleError, "'b'");
  CHECK_THROWS(topological_sort({{7}}, {"a"}), GraphError, "does not exist");
}

TEST(declared_outputs_are_checked) {
  Graph g;
  OpSpec s;
  s.type = "Input";
  s.name = "x";
  CHECK_THROWS(g.add_op(s), GraphError, "needs declared output types");
  s.declared_outputs = {{{1, -3}, kFloat32}};
  CHECK_THROWS(g.add_op(s), ShapeError, "negative dimension");
  s.declared_outputs = {{{1, 3}, 42}};
  CHECK_THROWS(g.add_op(s), ValueError, "dtype code 42");
  OpSpec opaque;
  opaque.type = "Opaque";
  opaque.name = "nms";
  opaque.declared_outputs = {{{10, 3}, kInt64}};
  CHECK_THROWS(g.add_op(opaque), AttributeError, "onnx_op_type");
  opaque.attrs.strings["onnx_op_type"] = "NonMaxSuppression";
  int id = g.add_op(opaque);
  CHECK(g.op(id).outputs[0].shape == (std::vector<int64_t>{10, 3}));
}

TEST_MAIN()
