// The incremental search machinery: rewrite effects (cost delta and child hash computed
// without building the child) equal what building the child gives; the additive hash
// is order-independent; incremental backtracking finds exactly what the reference
// (every child built) finds, also when its bounded graph store evicts and rebuilds.
#include <random>

#include "check.h"
#include "helpers.h"
#include "taso/cost_model.h"
#include "taso/rule.h"
#include "taso/search.h"

using namespace taso;
using namespace testing_helpers;

namespace {

PatternOp pop(const std::string& name, const std::string& type, std::vector<std::string> inputs) {
  PatternOp p;
  p.name = name;
  p.type = type;
  p.inputs = std::move(inputs);
  return p;
}

RuleSpec rule(int id, const std::string& name, std::vector<PatternOp> src, std::vector<std::string> src_out,
              std::vector<PatternOp> dst, std::vector<std::string> dst_out) {
  RuleSpec r;
  r.id = id;
  r.name = name;
  r.source.ops = std::move(src);
  r.source.outputs = std::move(src_out);
  r.target.ops = std::move(dst);
  r.target.outputs = std::move(dst_out);
  return r;
}

// Mechanics-only rules (the engine does not check semantics; these test bookkeeping):
// a relu pair collapses, adds commute (a space with many equal-cost graphs), and an
// add of an input and a weight becomes a relu of the weight, which makes everything
// downstream constant (the constant-ness propagation of rewrite_effect).
RuleSet test_rules() {
  std::vector<RuleSpec> specs;
  specs.push_back(rule(0, "relu_relu", {pop("a", "Relu", {"x"}), pop("b", "Relu", {"a"})}, {"b"},
                       {pop("r", "Relu", {"x"})}, {"r"}));
  specs.push_back(rule(1, "add_commute", {pop("a", "Add", {"x", "y"})}, {"a"}, {pop("r", "Add", {"y", "x"})}, {"r"}));
  specs.push_back(rule(2, "add_to_relu_of_second", {pop("a", "Add", {"x", "w"})}, {"a"},
                       {pop("r", "Relu", {"w"})}, {"r"}));
  specs.push_back(rule(3, "relu_to_relu_relu", {pop("a", "Relu", {"x"})}, {"a"},
                       {pop("r", "Relu", {"x"}), pop("s", "Relu", {"r"})}, {"s"}));
  return RuleSet(std::move(specs));
}

Graph test_graph(bool reversed_branches = false) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 8, 16, 16});
  auto w = source(g, "Weight", "w", {1, 8, 16, 16});
  TensorRef left, right;
  auto build_left = [&] { left = add(g, "Relu", {add(g, "Relu", {add(g, "Add", {x, w})})}); };
  auto build_right = [&] { right = add(g, "Relu", {add(g, "Add", {w, x})}); };
  if (reversed_branches) {
    build_right();
    build_left();
  } else {
    build_left();
    build_right();
  }
  auto y = add(g, "Add", {left, right});
  auto z = add(g, "Relu", {add(g, "Relu", {y})});
  g.add_output(z, "z");
  g.add_output(left, "left");
  return g;
}

}  // namespace

TEST(additive_hash_is_independent_of_op_order) {
  CHECK(test_graph(false).hash() == test_graph(true).hash());
  Graph other = test_graph(false);
  add(other, "Relu", {TensorRef{2, 0}});  // a dead op still changes the graph
  CHECK(other.hash() != test_graph(false).hash());
}

TEST(rewrite_effects_equal_the_built_child) {
  RuleSet rules = test_rules();
  AnalyticCostModel model(device_profile("h100"));
  std::mt19937 rng(7);
  Graph g = test_graph();
  int checked_constant_change = 0;
  for (int step = 0; step < 12; ++step) {
    std::vector<Candidate> cands = rules.candidates(g, model, -1, true);
    CHECK(!cands.empty());
    if (cands.empty()) break;
    int64_t base = model.graph_cost_units(g);
    for (const Candidate& c : cands) {
      Graph child = rules.apply(g, c.rule_id, c.location);
      CHECK_EQ(model.graph_cost_units(child), base + c.cost_delta_units);
      CHECK(child.hash() == c.child_hash);
      CHECK_NEAR(c.cost_delta, c.cost_delta_units * kCostUnitMs, 1e-12);
      if (c.rule_id == 2) ++checked_constant_change;
    }
    // Without hashes the cost deltas are the same.
    std::vector<Candidate> plain = rules.candidates(g, model);
    CHECK_EQ(plain.size(), cands.size());
    for (size_t i = 0; i < plain.size() && i < cands.size(); ++i)
      CHECK_EQ(plain[i].cost_delta_units, cands[i].cost_delta_units);
    const Candidate& pick = cands[rng() % cands.size()];
    g = rules.apply(g, pick.rule_id, pick.location);
  }
  CHECK(checked_constant_change > 0);
}

TEST(incremental_backtracking_equals_the_reference) {
  RuleSet rules = test_rules();
  AnalyticCostModel model(device_profile("h100"));
  Graph g = test_graph();
  for (double alpha : {1.0, 1.05, 1.5}) {
    for (int budget : {1, 10, 60}) {
      SearchResult fast = backtracking_search(g, rules, model, alpha, budget, true);
      SearchResult ref = backtracking_search(g, rules, model, alpha, budget, false);
      CHECK(fast.graph.hash() == ref.graph.hash());
      CHECK_EQ(model.graph_cost_units(fast.graph), model.graph_cost_units(ref.graph));
      CHECK(fast.applied == ref.applied);
      CHECK_EQ(fast.expansions, ref.expansions);
      CHECK_EQ(fast.graphs_seen, ref.graphs_seen);
      CHECK(fast.complete == ref.complete);
      CHECK(fast.graphs_built <= ref.graphs_built);
      CHECK_NEAR(fast.final_cost, model.graph_cost_ms(fast.graph), 1e-12);
    }
  }
}

TEST(backtracking_first_walks_greedys_path_so_it_never_ends_below_greedy) {
  RuleSet rules = test_rules();
  AnalyticCostModel model(device_profile("h100"));
  Graph g = test_graph();
  SearchResult greedy = greedy_search(g, rules, model, 10000, 0.0);
  int steps = static_cast<int>(greedy.applied.size());
  CHECK(steps > 1);
  for (double alpha : {1.0, 1.05, 1.5}) {
    for (int budget : {steps + 1, steps + 10, 60}) {
      SearchResult back = backtracking_search(g, rules, model, alpha, budget, true);
      CHECK(model.graph_cost_units(back.graph) <= model.graph_cost_units(greedy.graph));
    }
    // with exactly greedy's steps plus one, it ends where greedy ends
    SearchResult walk = backtracking_search(g, rules, model, alpha, steps + 1, true);
    CHECK(walk.applied == greedy.applied);
  }
}

TEST(bounded_store_evicts_rebuilds_and_still_equals_the_reference) {
  RuleSet rules = test_rules();
  AnalyticCostModel model(device_profile("h100"));
  Graph g = test_graph();
  // store_ops 1 -> the minimum of 4 stored graphs, far fewer than the expansions.
  SearchResult small = backtracking_search(g, rules, model, 1.5, 80, true, 1);
  SearchResult ref = backtracking_search(g, rules, model, 1.5, 80, false);
  CHECK(small.peak_graphs_stored <= 5);
  CHECK(small.expansions > 20);
  CHECK(small.graphs_built > small.expansions);  // evicted graphs were rebuilt
  CHECK(small.graph.hash() == ref.graph.hash());
  CHECK(small.applied == ref.applied);
  CHECK_EQ(small.graphs_seen, ref.graphs_seen);
}

TEST_MAIN()
