// Search baselines over the rule set: greedy, TASO's cost-based backtracking, and
// exhaustive enumeration for small graphs (the true optimum, for optimality gaps).
#pragma once

#include <vector>

#include "taso/cost_model.h"
#include "taso/graph.h"
#include "taso/rule.h"

namespace taso {

// The incremental backtracking search keeps at most this many ops' worth of expanded
// graphs materialised (at least 4 graphs): memory stays bounded whatever the budget.
constexpr int kSearchStoreOps = 150000;

struct SearchResult {
  Graph graph;                   // the best graph found
  double initial_cost = 0;       // ms
  double final_cost = 0;         // ms
  int expansions = 0;            // graphs whose candidates were enumerated
  int graphs_seen = 0;           // distinct graphs generated
  std::vector<int> applied;      // rule ids applied, in order, to reach `graph`
  bool complete = false;         // the whole reachable space was explored
  int graphs_built = 0;          // graphs materialised (rule applications)
  int peak_graphs_stored = 0;    // most graphs held at once by the search
};

// Applies the best improving candidate until none improves by more than `min_gain` ms.
SearchResult greedy_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                           int max_steps = 10000, double min_gain = 1e-9);

// TASO's search: best-first over graphs by cost (ties by hash); each expansion lists the
// candidates of the graph popped, the best graph is updated with its children, and the
// unseen children whose cost is below alpha * best cost are queued. Stops after `budget`
// expansions or when the queue empties. Costs are exact integer sums (cost_units).
//
// With `incremental` (the default) a child is never built to be scored: its cost and
// hash come from the candidate (rewrite_effect.cc), and a graph is materialised only
// when it is popped, from its parent in a bounded store of recently expanded graphs
// (or by replaying rewrites from the nearest stored ancestor). Without it, every child
// is built, costed and hashed: the reference that the incremental search must equal.
SearchResult backtracking_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                                 double alpha = 1.05, int budget = 1000, bool incremental = true,
                                 int store_ops = kSearchStoreOps);

// Explores every graph reachable with the rules (up to `max_states`); refuses graphs
// with more than `max_ops` computing ops. Throws ValueError on either limit.
SearchResult exhaustive_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                               int max_ops = 40, int max_states = 20000);

}  // namespace taso
