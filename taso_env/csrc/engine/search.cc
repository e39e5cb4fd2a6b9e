// Search baselines.
#include <queue>
#include <unordered_set>

#include "taso/errors.h"
#include "taso/search.h"

namespace taso {

namespace {

struct State {
  Graph graph;
  double cost;
  std::vector<int> applied;
};

}  // namespace

SearchResult greedy_search(const Graph& graph, const RuleSet& rules, const CostModel& model, int max_steps,
                           double min_gain) {
  SearchResult r{graph, model.graph_cost_ms(graph), 0, 0, 0, {}, false};
  r.final_cost = r.initial_cost;
  for (int step = 0; step < max_steps; ++step) {
    std::vector<Candidate> cands = rules.candidates(r.graph, model);
    ++r.expansions;
    const Candidate* best = nullptr;
    for (const Candidate& c : cands)
      if (!best || c.cost_delta < best->cost_delta) best = &c;
    if (!best || best->cost_delta > -min_gain) {
      r.complete = true;
      break;
    }
    Graph next = rules.apply(r.graph, best->rule_id, best->location);
    double cost = model.graph_cost_ms(next);
    ++r.graphs_seen;
    if (cost >= r.final_cost - min_gain) {  // the estimate was optimistic: stop
      r.complete = true;
      break;
    }
    r.graph = std::move(next);
    r.final_cost = cost;
    r.applied.push_back(best->rule_id);
  }
  return r;
}

SearchResult backtracking_search(const Graph& graph, const RuleSet& rules, const CostModel& model, double alpha,
                                 int budget) {
  if (alpha < 1.0) throw ValueError("alpha must be >= 1, got " + std::to_string(alpha));
  if (budget < 0) throw ValueError("budget must be >= 0, got " + std::to_string(budget));
  // Queued graphs are not kept: an entry is its parent (an expanded graph, which is
  // kept) plus the candidate that derives it, and is materialised again when popped.
  // Memory then grows with the budget, not with the number of graphs generated.
  struct Entry {
    double cost;
    int parent;  // index into `expanded`, -1 for the start graph
    Candidate candidate;
    bool operator<(const Entry& o) const { return cost > o.cost; }  // min-heap on cost
  };
  std::vector<std::shared_ptr<State>> expanded;
  const double initial = model.graph_cost_ms(graph);
  std::shared_ptr<State> best = std::make_shared<State>(State{graph, initial, {}});
  std::priority_queue<Entry> queue;
  std::unordered_set<uint64_t> seen{graph.hash()};
  queue.push({initial, -1, {}});
  SearchResult r{graph, initial, initial, 0, 1, {}, false};
  while (!queue.empty() && r.expansions < budget) {
    Entry e = queue.top();
    queue.pop();
    std::shared_ptr<State> cur;
    if (e.parent < 0) {
      cur = std::make_shared<State>(State{graph, initial, {}});
    } else {
      const State& parent = *expanded[e.parent];
      cur = std::make_shared<State>(
          State{rules.apply(parent.graph, e.candidate.rule_id, e.candidate.location), e.cost, parent.applied});
      cur->applied.push_back(e.candidate.rule_id);
    }
    expanded.push_back(cur);
    int index = static_cast<int>(expanded.size()) - 1;
    ++r.expansions;
    for (const Candidate& c : rules.candidates(cur->graph, model)) {
      if (cur->cost + c.cost_delta >= alpha * best->cost) continue;
      Graph next = rules.apply(cur->graph, c.rule_id, c.location);
      if (!seen.insert(next.hash()).second) continue;
      ++r.graphs_seen;
      double cost = model.graph_cost_ms(next);
      if (cost < best->cost) {
        best = std::make_shared<State>(State{std::move(next), cost, cur->applied});
        best->applied.push_back(c.rule_id);
      }
      if (cost < alpha * best->cost) queue.push({cost, index, c});
    }
  }
  r.complete = queue.empty();
  r.graph = best->graph;
  r.final_cost = best->cost;
  r.applied = best->applied;
  return r;
}

SearchResult exhaustive_search(const Graph& graph, const RuleSet& rules, const CostModel& model, int max_ops,
                               int max_states) {
  if (graph.num_compute_ops() > max_ops)
    throw ValueError("exhaustive search refused: the graph has " + std::to_string(graph.num_compute_ops()) +
                     " computing ops, the limit is " + std::to_string(max_ops) +
                     " (use backtracking for larger graphs)");
  auto start = std::make_shared<State>(State{graph, model.graph_cost_ms(graph), {}});
  std::shared_ptr<State> best = start;
  std::vector<std::shared_ptr<State>> stack{start};
  std::unordered_set<uint64_t> seen{graph.hash()};
  SearchResult r{graph, start->cost, start->cost, 0, 1, {}, false};
  while (!stack.empty()) {
    std::shared_ptr<State> cur = stack.back();
    stack.pop_back();
    ++r.expansions;
    for (const Candidate& c : rules.candidates(cur->graph, model)) {
      Graph next = rules.apply(cur->graph, c.rule_id, c.location);
      if (!seen.insert(next.hash()).second) continue;
      if (++r.graphs_seen > max_states)
        throw ValueError("exhaustive search stopped: more than " + std::to_string(max_states) +
                         " distinct graphs are reachable (raise max_states or use backtracking)");
      auto s = std::make_shared<State>(State{std::move(next), 0.0, cur->applied});
      s->cost = model.graph_cost_ms(s->graph);
      s->applied.push_back(c.rule_id);
      if (s->cost < best->cost) best = s;
      stack.push_back(s);
    }
  }
  r.complete = true;
  r.graph = best->graph;
  r.final_cost = best->cost;
  r.applied = best->applied;
  return r;
}

}  // namespace taso
