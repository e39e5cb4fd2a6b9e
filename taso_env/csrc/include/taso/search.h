// Search baselines over the rule set: greedy, TASO's cost-based backtracking, and
// exhaustive enumeration for small graphs (the true optimum, for optimality gaps).
#pragma once

#include <vector>

#include "taso/cost_model.h"
#include "taso/graph.h"
#include "taso/rule.h"

namespace taso {

struct SearchResult {
  Graph graph;                   // the best graph found
  double initial_cost = 0;       // ms
  double final_cost = 0;         // ms
  int expansions = 0;            // graphs whose candidates were enumerated
  int graphs_seen = 0;           // distinct graphs generated
  std::vector<int> applied;      // rule ids applied, in order, to reach `graph`
  bool complete = false;         // the whole reachable space was explored
};

// Applies the best improving candidate until none improves by more than `min_gain` ms.
SearchResult greedy_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                           int max_steps = 10000, double min_gain = 1e-9);

// TASO's search: best-first over graphs by cost; a new graph is kept when its cost is
// below alpha * best cost; stops after `budget` expansions or when the queue empties.
SearchResult backtracking_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                                 double alpha = 1.05, int budget = 1000);

// Explores every graph reachable with the rules (up to `max_states`); refuses graphs
// with more than `max_ops` computing ops. Throws ValueError on either limit.
SearchResult exhaustive_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                               int max_ops = 40, int max_states = 20000);

}  // namespace taso
