// Search baselines.
#include <algorithm>
#include <limits>
#include <tuple>
#include <memory>
#include <unordered_map>
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

namespace {

// Expanded graphs are recorded as (parent, rewrite); the graphs themselves are kept in
// a bounded store and rebuilt from the nearest stored ancestor when evicted. Eviction
// drops first a graph with no queued child, else the one whose cheapest queued child
// is the most expensive (the last to be popped, best-first).
class GraphStore {
 public:
  struct Node {
    int parent;  // -1: the start graph
    int rule_id;
    std::vector<int> location;
    int depth = 0;                                          // rewrites from the start graph
    int queued = 0;                                         // children in the queue
    int64_t cheapest = std::numeric_limits<int64_t>::max();  // cost of the cheapest one
  };

  GraphStore(const Graph& start, const RuleSet& rules, size_t capacity)
      : start_(std::make_shared<const Graph>(start)), rules_(rules), capacity_(capacity) {
    nodes_.push_back({-1, -1, {}});
  }

  int add(int parent, const Candidate& c) {
    nodes_.push_back({parent, c.rule_id, c.location, nodes_[parent].depth + 1});
    return static_cast<int>(nodes_.size()) - 1;
  }
  void queued_child(int parent, int64_t cost) {
    ++nodes_[parent].queued;
    nodes_[parent].cheapest = std::min(nodes_[parent].cheapest, cost);
  }
  void popped_child(int parent) { --nodes_[parent].queued; }

  // The graph of node `id`, built if needed (and then stored).
  std::shared_ptr<const Graph> get(int id) {
    if (id == 0) return start_;
    auto it = stored_.find(id);
    if (it != stored_.end()) return it->second;
    std::vector<int> chain;  // from `id` up to (not including) a stored ancestor
    int a = id;
    while (a != 0 && !stored_.count(a)) {
      chain.push_back(a);
      a = nodes_[a].parent;
    }
    std::shared_ptr<const Graph> g = a == 0 ? start_ : stored_[a];
    for (auto c = chain.rbegin(); c != chain.rend(); ++c) {
      g = std::make_shared<const Graph>(rules_.apply(*g, nodes_[*c].rule_id, nodes_[*c].location));
      ++built;
      // Keep the graph itself, and checkpoints whose other children are still queued.
      if (*c == id || (nodes_[*c].queued > 0 && nodes_[*c].depth % kCheckpoint == 0)) {
        if (stored_.size() >= capacity_) evict(id);
        stored_[*c] = g;
        peak = std::max(peak, static_cast<int>(stored_.size()) + 1);  // + the start graph
      }
    }
    return g;
  }

  // The graph reached by applying `c` to node `parent`, not stored.
  Graph child(int parent, const Candidate& c) {
    ++built;
    return rules_.apply(*get(parent), c.rule_id, c.location);
  }

  std::vector<int> applied(int id) const {
    std::vector<int> out;
    for (int a = id; a > 0; a = nodes_[a].parent) out.push_back(nodes_[a].rule_id);
    return {out.rbegin(), out.rend()};
  }

  int built = 0;
  int peak = 1;

 private:
  // Eviction order: graphs without queued children, then non-checkpoints, then the one
  // whose cheapest queued child is the most expensive. Checkpoints (every kCheckpoint
  // rewrites deep) bound the rewrites replayed to rebuild an evicted graph.
  static constexpr int kCheckpoint = 8;
  std::tuple<bool, bool, int64_t, int> evict_rank(int id) const {  // larger: evict first
    const Node& n = nodes_[id];
    return {n.queued == 0, n.depth % kCheckpoint != 0, n.cheapest, -id};
  }
  void evict(int keep) {
    int victim = -1;
    for (const auto& kv : stored_)
      if (kv.first != keep && (victim < 0 || evict_rank(kv.first) > evict_rank(victim))) victim = kv.first;
    if (victim >= 0) stored_.erase(victim);
  }

  std::shared_ptr<const Graph> start_;
  const RuleSet& rules_;
  size_t capacity_;
  std::vector<Node> nodes_;
  std::unordered_map<int, std::shared_ptr<const Graph>> stored_;
};

}  // namespace

SearchResult backtracking_search(const Graph& graph, const RuleSet& rules, const CostModel& model, double alpha,
                                 int budget, bool incremental, int store_ops) {
  if (alpha < 1.0) throw ValueError("alpha must be >= 1, got " + std::to_string(alpha));
  if (budget < 0) throw ValueError("budget must be >= 0, got " + std::to_string(budget));
  // A queued graph is its parent (an expanded node) plus the candidate deriving it.
  // A strictly improving child of the graph just expanded is cheaper than everything
  // queued, so the search first walks greedy's path (greedy takes the first cheapest
  // candidate; so does this order within one expansion) and never ends below greedy.
  // Among equally cheap graphs the one queued first comes first: a plateau of
  // cost-neutral rewrites is explored breadth first instead of dived into (diving
  // spent the whole budget on nasrnn's plateau: 1.660 where breadth first finds 1.732).
  struct Entry {
    int64_t cost;
    int parent;  // node id in the store; -1 for the start graph
    Candidate candidate;
    int expansion;  // the expansion that queued it
    int index;      // its candidate's position in that expansion
    bool operator<(const Entry& o) const {  // max-heap order, top = first to expand: a total order
      if (cost != o.cost) return cost > o.cost;
      if (expansion != o.expansion) return expansion > o.expansion;
      return index > o.index;
    }
  };
  size_t capacity = std::max(4, store_ops / std::max(1, graph.num_ops()));
  GraphStore store(graph, rules, incremental ? capacity : static_cast<size_t>(budget) + 1);
  const int64_t initial = model.graph_cost_units(graph);
  const uint64_t initial_hash = graph.hash();
  struct Best {
    int64_t cost;
    int parent;  // -1: the start graph itself
    Candidate candidate;
  } best{initial, -1, {}};
  // A binary heap (std::push_heap / pop_heap, Entry::operator<): top = cheapest. Only
  // budget - expansions more entries can ever be popped, and the heap's order is total,
  // so entries beyond that many cheapest can never be expanded: the heap is cut back to
  // them when it grows past twice that (memory bounded by the budget; results unchanged).
  std::vector<Entry> queue;
  bool dropped = false;
  auto push = [&](Entry en) {
    queue.push_back(std::move(en));
    std::push_heap(queue.begin(), queue.end());
  };
  std::unordered_set<uint64_t> seen{initial_hash};
  push({initial, -1, {}, -1, 0});
  SearchResult r{graph, model.graph_cost_ms(graph), 0, 0, 1, {}, false, 0};
  struct Child {
    int64_t cost;
    uint64_t hash;
    const Candidate* candidate;
  };
  while (!queue.empty() && r.expansions < budget) {
    std::pop_heap(queue.begin(), queue.end());
    Entry e = std::move(queue.back());
    queue.pop_back();
    if (e.parent >= 0) store.popped_child(e.parent);
    int node = e.parent < 0 ? 0 : store.add(e.parent, e.candidate);
    std::shared_ptr<const Graph> cur = store.get(node);
    ++r.expansions;
    std::vector<Candidate> cands = rules.candidates(*cur, model, -1, incremental);
    std::vector<Child> children;
    for (const Candidate& c : cands) {
      Child ch{e.cost + c.cost_delta_units, c.child_hash, &c};
      if (!incremental) {
        Graph next = store.child(node, c);
        ch.cost = model.graph_cost_units(next);
        ch.hash = next.hash();
      }
      if (seen.count(ch.hash)) continue;
      children.push_back(ch);
    }
    // The cheapest of this expansion's children (the first of equals), then the queue.
    const Child* top = nullptr;
    for (const Child& ch : children)
      if (!top || ch.cost < top->cost) top = &ch;
    if (top && top->cost < best.cost) best = {top->cost, node, *top->candidate};
    for (const Child& ch : children) {
      if (!seen.insert(ch.hash).second) continue;  // two candidates leading to one graph
      ++r.graphs_seen;
      // (the best itself is kept too, so alpha 1 still searches on from it)
      if (ch.cost <= best.cost || static_cast<double>(ch.cost) < alpha * static_cast<double>(best.cost)) {
        push({ch.cost, node, *ch.candidate, r.expansions, static_cast<int>(ch.candidate - cands.data())});
        store.queued_child(node, ch.cost);
      }
    }
    size_t keep = static_cast<size_t>(budget - r.expansions);
    if (queue.size() > 2 * keep + 1024) {
      std::nth_element(queue.begin(), queue.begin() + keep, queue.end(),
                       [](const Entry& a, const Entry& b) { return b < a; });  // cheapest first
      for (size_t i = keep; i < queue.size(); ++i)
        if (queue[i].parent >= 0) store.popped_child(queue[i].parent);
      queue.resize(keep);
      std::make_heap(queue.begin(), queue.end());
      dropped = true;
    }
  }
  r.complete = queue.empty() && !dropped;
  if (best.parent >= 0) {
    r.graph = store.child(best.parent, best.candidate);
    r.applied = store.applied(best.parent);
    r.applied.push_back(best.candidate.rule_id);
  }
  r.final_cost = model.graph_cost_ms(r.graph);
  r.graphs_built = store.built;
  r.peak_graphs_stored = store.peak;
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
