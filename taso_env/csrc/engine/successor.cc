// Looking one rewrite ahead without enumerating the whole successor graph.
//
// A rewrite changes the graph only around the ops it replaced. The changed ops are the
// ops the target built, the kept ops whose inputs changed, the producers that lost a
// reader, and the kept ops whose fused-step verdict or constant-ness changed: every op
// whose inputs or readers differ from the parent's is among them (an op the target
// reads, or a kept op now reads in place of a replaced tensor, is a producer of a
// replaced op's input). The successor's candidates are therefore of two kinds:
//   - matches holding a changed op (touches_change): enumerated afresh in the successor,
//     exactly;
//   - the others: each of their ops is kept with the parent's inputs and readers, so they
//     are bindings of the parent too, and every fact their validity reads but the cycle
//     check is the parent's: the types of their ops and of the tensors they read, the
//     readers of their ops' outputs and which of those are graph outputs (a tensor that
//     becomes a graph output replaces one that a changed op produced). So the parent's
//     candidates are carried over (op ids mapped into the successor).
// Where a carried-over match's cost delta can differ, its footprint says so: the ops its
// cost delta was computed from (Candidate::footprint; rewrite_effect): its ops and the
// ops it makes dead, with their producers (whose readers decide which of them die), and
// the kept ops whose constant-ness or fused-step verdict it changes or judges again,
// with their producers and readers (not the readers of a source or constant op, which
// decide nothing: readers_decide_nothing). One whose footprint holds an op the rewrite
// removed or changed (other than a source or constant op only losing or gaining readers)
// has the parent's ops but maybe not its cost delta, so it is priced again at
// its place (not searched for again: its ops are the parent's, and so is the target it
// plans while the tensors that target reads keep their constant-ness: RuleSet::delta_at);
// beyond that its cost delta is the parent's (where the model prices weight residency:
// its base delta and weight reads are, a footprint op that is a constant whose value a
// rewrite upstream of it changed counting as changed, and its cost delta is priced
// against the successor's reads, taso/weight_residency.h). Only whether it still
// creates no cycle can differ (a path through the change), so the best carried-over
// candidates are checked again at their place in the successor, best first, until one
// applies. What is not
// seen: a match the parent's cycle check rejected that the rewrite made valid (the
// parent's candidates hold valid matches only).
//
// Where the fresh matches are searched for: a hop goes from an op to the producer of one
// of its inputs, a reader of one of its outputs or another reader of one of its inputs
// (hops_from). Every match has some of those links between its ops: an op reading
// another's output, two ops reading one output of a pattern op, two ops reading one free
// variable that one of them requires (bound to a tensor then, which the other must read
// too: bind_op). The source pattern is connected through those (Compiled's matching
// order is built from them), and along them every pattern op lies within
// anchor_reach(rule) links of the first-matched one (at most the pattern's size - 1). So
// every op of a match lies within that many hops of its first-matched op (its anchor),
// and a match holding a changed op has its anchor within near_radius(rule) =
// anchor_reach(rule) hops of one, of a type the source has (Rewritten's
// near_by_changed_type): only those anchors are searched from, and of what they find
// only the matches holding a changed op are kept (the others are carried over).
// Where a rule can bind one set of ops in more than one way (two source ops of one
// type), a full enumeration keeps the first valid binding it finds, anchors in id order:
// every op that anchors some binding of a set holding a changed op lies within
// anchor_reach of that op too, so all of them are searched, in id order, and the same
// binding is kept.
#include <deque>
#include <iterator>

#include "rule_internal.h"

namespace taso {

using namespace rule_detail;

// Hops from `seeds` of every op within `radius` of them (-1: farther).
std::vector<int> rule_detail::hops_from(const GraphFacts& f, const std::vector<int>& seeds, int radius) {
  int n = f.graph.num_ops();
  std::vector<int> dist(n, -1);
  std::deque<int> queue;
  auto reach = [&](int id, int d) {
    if (id >= 0 && id < n && dist[id] < 0) {
      dist[id] = d;
      queue.push_back(id);
    }
  };
  for (int s : seeds) reach(s, 0);
  while (!queue.empty()) {
    int id = queue.front();
    queue.pop_front();
    int d = dist[id] + 1;
    if (d > radius) continue;
    for (const TensorRef& t : f.graph.op(id).inputs) {
      reach(t.op, d);                                                          // its producer
      for (const auto& use : f.consumers[t.op][t.index]) reach(use.first, d);  // co-readers
    }
    for (int k = f.out_start[id]; k < f.out_start[id + 1]; ++k) reach(f.out_ops[k], d);  // its readers
  }
  return dist;
}

namespace {

// Ops of `child` where the rewrite of `parent` changed something: the ops the target
// built, kept ops whose inputs changed, kept producers of the removed ops' inputs (those
// whose readers alone changed also in `readers_only`).
std::vector<int> changed_ops(const Graph& parent, const Graph& child, const std::vector<int>& new_id,
                             const std::vector<int>& added, std::vector<int>* readers_only) {
  std::vector<int> out(added);
  for (int i = 0; i < parent.num_ops(); ++i) {
    const auto& ins = parent.op(i).inputs;
    if (new_id[i] < 0) {
      for (const TensorRef& t : ins)
        if (new_id[t.op] >= 0) readers_only->push_back(new_id[t.op]);
      continue;
    }
    const auto& now = child.op(new_id[i]).inputs;
    bool same = now.size() == ins.size();
    for (size_t k = 0; same && k < ins.size(); ++k)
      same = now[k].index == ins[k].index && now[k].op == new_id[ins[k].op];
    if (!same) out.push_back(new_id[i]);
  }
  return out;
}

}  // namespace

int rule_detail::anchor_reach(const Compiled& rule) {
  const int n = static_cast<int>(rule.source.size());
  auto reads = [&](int i, int j) {  // pattern op i reads an output of pattern op j
    for (const Ref& r : rule.source[i].inputs)
      if (!r.is_var && r.op == j) return true;
    return false;
  };
  // Both read one op output, or one free variable that one of them requires (bound to a
  // tensor then, which the other must read too: bind_op).
  auto read_one_tensor = [&](int i, int j) {
    for (const Ref& r : rule.source[i].inputs)
      for (const Ref& q : rule.source[j].inputs) {
        if (r.is_var != q.is_var) continue;
        const bool shared = r.is_var ? r.var == q.var && !(r.optional && q.optional)
                                     : r.op == q.op && r.index == q.index;
        if (shared) return true;
      }
    return false;
  };
  std::vector<int> dist(n, -1);
  std::vector<int> queue{rule.order[0]};
  dist[rule.order[0]] = 0;
  for (size_t k = 0; k < queue.size(); ++k) {
    const int i = queue[k];
    for (int j = 0; j < n; ++j)
      if (dist[j] < 0 && (reads(i, j) || reads(j, i) || read_one_tensor(i, j))) {
        dist[j] = dist[i] + 1;
        queue.push_back(j);
      }
  }
  int reach = 0;
  for (int d : dist) {
    if (d < 0) rule.fail("the source pattern is not connected");  // (Compiled checks this first)
    reach = std::max(reach, d);
  }
  return reach;
}

bool rule_detail::touches_change(const std::vector<int>& near, const std::vector<int>& ops) {
  for (int id : ops)
    if (near[id] == 0) return true;
  return false;
}

int RuleSet::near_radius(int rule_id) const { return near_radius_[rule_id]; }

int RuleSet::max_near_radius() const { return max_near_radius_; }

void RuleSet::check_candidates_of(const Graph& graph, const std::vector<Candidate>& cands) const {
  for (const Candidate& c : cands) {  // candidates of another graph or rule set are refused
    if (c.rule_id < 0 || c.rule_id >= size())
      throw ValueError("candidate of rule id " + std::to_string(c.rule_id) + ": no such rule in this rule set");
    bool fits = c.location.size() == rules_[c.rule_id]->source.size();
    for (int id : c.location) fits = fits && id >= 0 && id < graph.num_ops();
    if (!fits)
      throw ValueError("a candidate of rule '" + rules_[c.rule_id]->spec.name +
                       "' has a location that is not in this graph (candidates of another graph?)");
  }
}

Rewritten RuleSet::rewrite(const GraphFacts& parent, const CostModel& model, const Candidate& c) const {
  const Graph& graph = parent.graph;
  Rewritten r;
  std::vector<int> added;
  r.graph = std::make_unique<Graph>(apply_to(parent, c.rule_id, c.location, &r.new_id, &added));
  std::vector<int> readers_only;
  r.changed = changed_ops(graph, *r.graph, r.new_id, added, &readers_only);
  // the unchanged ops keep their costs (unless their constant-ness changed)
  std::vector<int64_t> known(r.graph->num_ops(), -1);
  std::vector<char> known_constant(r.graph->num_ops(), 0);
  for (int i = 0; i < graph.num_ops(); ++i)
    if (r.new_id[i] >= 0) {
      known[r.new_id[i]] = parent.raw_units[i];
      known_constant[r.new_id[i]] = parent.constant[i];
    }
  for (const std::vector<int>* ids : {&r.changed, &readers_only})
    for (int id : *ids) known[id] = -1;
  r.facts = std::make_unique<GraphFacts>(*r.graph, &model, false, &known, &known_constant);
  const GraphFacts& facts = *r.facts;
  for (int i = 0; i < graph.num_ops(); ++i) {  // kept ops that start or stop running in an epilogue, or being constant
    int id = r.new_id[i];
    if (id < 0) continue;
    if ((!parent.absorbed.empty() && parent.absorbed[i] != facts.absorbed[id]) || parent.constant[i] != facts.constant[id])
      r.changed.push_back(id);
  }
  r.changed_mask.assign(r.graph->num_ops(), 0);
  for (int id : r.changed) r.changed_mask[id] = kChanged;
  for (int id : readers_only)  // the producers whose readers alone changed, each once
    if (!r.changed_mask[id]) {
      r.changed_mask[id] = kReadersChanged;
      r.changed.push_back(id);
    }
  if (facts.value_hashes) {  // kept constants whose value changed (upstream of the rewrite)
    r.value_changed.assign(r.graph->num_ops(), 0);
    for (int i = 0; i < graph.num_ops(); ++i) {
      const int id = r.new_id[i];
      if (id >= 0 && facts.constant[id] && parent.constant[i] && facts.merkle[id] != parent.merkle[i])
        r.value_changed[id] = 1;
    }
  }
  std::vector<OpType> types;
  for (int id : r.changed) types.push_back(r.graph->op(id).type);
  std::sort(types.begin(), types.end());
  types.erase(std::unique(types.begin(), types.end()), types.end());
  for (OpType type : types) {
    std::vector<int> seeds;
    for (int id : r.changed)
      if (r.graph->op(id).type == type) seeds.push_back(id);
    r.near_by_changed_type.push_back({type, hops_from(facts, seeds, max_near_radius())});
  }
  // The hops from all changed ops: the fewest from those of any one type.
  r.near.assign(r.graph->num_ops(), -1);
  for (const auto& by_type : r.near_by_changed_type)
    for (size_t i = 0; i < r.near.size(); ++i) {
      const int hops = by_type.second[i];
      if (hops >= 0 && (r.near[i] < 0 || hops < r.near[i])) r.near[i] = hops;
    }
  return r;
}

RuleSet::Carried RuleSet::carried(const Rewritten& rw, const Candidate& c, std::vector<int>* at) const {
  at->clear();
  for (int id : c.location) {
    if (rw.new_id[id] < 0) return Carried::kRemoved;
    at->push_back(rw.new_id[id]);
  }
  if (touches_change(rw.near, *at)) return Carried::kNear;
  for (int id : c.footprint) {
    const int now = rw.new_id[id];
    if (now < 0 || (!rw.value_changed.empty() && rw.value_changed[now])) return Carried::kRepriced;
    // a constant or source op whose readers alone changed moves no cost delta (rewrite_effect.cc)
    if (rw.changed_mask[now] == kChanged ||
        (rw.changed_mask[now] == kReadersChanged && !readers_decide_nothing(*rw.facts, now)))
      return Carried::kRepriced;
  }
  return Carried::kFar;
}

std::vector<int> RuleSet::moved_footprint(const Rewritten& rw, const Candidate& c) {
  std::vector<int> out;
  out.reserve(c.footprint.size());
  for (int id : c.footprint) out.push_back(rw.new_id[id]);
  // (kept ops keep their order where the rewrite lets them: mostly sorted already)
  if (!std::is_sorted(out.begin(), out.end())) std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const GraphFacts> RuleSet::facts_of(const Graph& graph, const CostModel& model,
                                                    const Enumeration& current) {
  if (current.facts && &current.facts->graph == &graph && current.facts->model == &model) return current.facts;
  return std::make_shared<const GraphFacts>(graph, &model);
}

std::vector<Successor> RuleSet::successors(const Graph& graph, const CostModel& model, const Enumeration& current,
                                           const std::vector<int>& which) const {
  const std::shared_ptr<const GraphFacts> parent_facts = facts_of(graph, model, current);
  const GraphFacts& parent = *parent_facts;
  const std::vector<Candidate>& cands = current.candidates;
  check_candidates_of(graph, cands);
  // Carried-over candidates are tried best first. Those that change no weight reads cost
  // their base delta in every graph; the others, priced against each successor's reads,
  // are ordered per successor.
  std::vector<int> by_delta, reading;
  for (size_t i = 0; i < cands.size(); ++i)
    (cands[i].weight_reads.empty() ? by_delta : reading).push_back(static_cast<int>(i));
  std::stable_sort(by_delta.begin(), by_delta.end(),
                   [&](int a, int b) { return cands[a].base_delta_units < cands[b].base_delta_units; });
  std::vector<Successor> out;
  for (int w : which) {
    if (w < 0 || w >= static_cast<int>(cands.size()))
      throw IndexError("candidate " + std::to_string(w) + " out of range (" + std::to_string(cands.size()) + ")");
    Rewritten rw = rewrite(parent, model, cands[w]);
    const GraphFacts& facts = *rw.facts;
    Successor s;
    s.child_hash = rw.graph->hash();
    auto offer = [&](int64_t units) {
      if (!s.has_candidates || units < s.best_delta_units) {
        s.best_delta_units = units;
        s.has_candidates = true;
      }
    };
    // matches are searched for afresh only where the ops changed
    for (const Candidate& c : enumerate(facts, model, -1, &rw)) offer(c.cost_delta_units);
    // carried-over candidates: (re)placed in the successor; those whose footprint changed priced again
    std::vector<std::vector<int>> at(cands.size());
    std::vector<char> far(cands.size(), 0);
    Candidate priced;
    for (size_t k = 0; k < cands.size(); ++k) {
      Carried where = carried(rw, cands[k], &at[k]);
      if (where == Carried::kRepriced && delta_at(facts, model, cands[k], at[k], &priced))
        offer(priced.cost_delta_units);
      far[k] = where == Carried::kFar;
    }
    // The others' base deltas and weight reads stand: best first, until one applies (those
    // reading no weights in by_delta's order, merged with the others priced here).
    std::vector<std::pair<int64_t, int>> plain, priced_here, order;  // (cost delta in the successor, k)
    for (int k : by_delta)
      if (far[k]) plain.push_back({cands[k].base_delta_units, k});
    for (int k : reading)
      if (far[k]) priced_here.push_back({delta_in(facts, cands[k]), k});
    std::sort(priced_here.begin(), priced_here.end());
    std::merge(plain.begin(), plain.end(), priced_here.begin(), priced_here.end(), std::back_inserter(order));
    for (const auto& [units, k] : order) {
      if (s.has_candidates && units >= s.best_delta_units) break;
      if (delta_at(facts, model, cands[k], at[k], &priced)) offer(priced.cost_delta_units);  // false: a cycle
    }
    s.best_delta = static_cast<double>(s.best_delta_units) * kCostUnitMs;
    out.push_back(s);
  }
  return out;
}

}  // namespace taso
