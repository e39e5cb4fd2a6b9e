// Following a graph's candidates through a rewrite without enumerating it whole.
//
// A full enumeration (RuleSet::enumeration) lists every valid (rule, location), sorted
// by rule and location, and keeps the bindings it rejected only because their rewrite
// would close a cycle. After a rewrite (RuleSet::step) the new graph's list is:
//   - matches holding an op the rewrite changed: enumerated afresh (successor.cc says
//     which anchors that search starts from, and why the others stand);
//   - the others, carried over from the old list (op ids mapped): their ops, inputs and
//     readers are the old ones, so only whether their rewrite closes a cycle can differ
//     (a path through the change). One whose inputs are all made before its first op
//     cannot close one; the others are checked again at their place. Those whose
//     footprint (the ops their cost delta was computed from) the rewrite changed are
//     priced again too (successor.cc). The rejected bindings are checked again the same
//     way: one may have become valid. Where the model prices weight residency, every
//     candidate's cost delta is then priced against the new graph's GEMV reads.
//   - Where a rule can bind one set of ops in more than one way (two source ops of one
//     type), which binding a full enumeration keeps is the first valid one in its search
//     order (anchors in id order, then readers in id order). Where that order or the
//     validity of one of the bindings may have changed (the rewrite reordered some of
//     those ops, or a binding turned valid or invalid, or the set is also near the
//     change), the set is bound again from scratch (kept_binding).
// The result equals a full enumeration of the new graph (tests/test_enumeration.py
// checks this along random walks of many models).
#include "rule_internal.h"

namespace taso {

using namespace rule_detail;

namespace {

bool by_rule_and_location(const Candidate& a, const Candidate& b) {
  return a.rule_id != b.rule_id ? a.rule_id < b.rule_id : a.location < b.location;
}

std::vector<int> sorted_ops(const std::vector<int>& ops) {
  std::vector<int> key(ops);
  std::sort(key.begin(), key.end());
  return key;
}

// True when no input of `location`'s ops is made after its first op: its rewrite reads
// nothing that could depend on its outputs, so it closes no cycle.
bool surely_acyclic(const GraphFacts& f, const std::vector<int>& location) {
  int first = *std::min_element(location.begin(), location.end());
  for (int id : location)
    for (const TensorRef& t : f.graph.op(id).inputs)
      if (t.op > first && std::find(location.begin(), location.end(), t.op) == location.end()) return false;
  return true;
}

// True when the parent op ids `ids` (in increasing order), read through `id_of`, keep
// their order in the child.
template <typename Ids, typename IdOf>
bool order_kept(const std::vector<int>& new_id, const Ids& ids, IdOf id_of) {
  int last = -1;
  for (const auto& entry : ids) {
    const int id = new_id[id_of(entry)];
    if (id < 0) continue;
    if (id < last) return false;
    last = id;
  }
  return true;
}

// Whether a full enumeration's search meets the ops `key` (parent ids, sorted) and the
// readers of their inputs in the same order in the child as in the parent (a tensor's
// readers are listed in id order: Graph::consumers).
bool search_order_kept(const GraphFacts& parent, const std::vector<int>& new_id, const std::vector<int>& key) {
  if (!order_kept(new_id, key, [](int id) { return id; })) return false;
  for (int id : key)
    for (const TensorRef& t : parent.graph.op(id).inputs)
      if (!order_kept(new_id, parent.consumers[t.op][t.index],
                      [](const std::pair<int, int>& use) { return use.first; }))
        return false;
  return true;
}

}  // namespace

Enumeration RuleSet::enumeration(const Graph& graph, const CostModel& model) const {
  auto facts = std::make_shared<const GraphFacts>(graph, &model);
  Enumeration out;
  out.candidates = enumerate(*facts, model, -1, nullptr, &out.cycle_rejected, true);
  out.facts = std::move(facts);
  std::sort(out.candidates.begin(), out.candidates.end(), by_rule_and_location);
  std::sort(out.cycle_rejected.begin(), out.cycle_rejected.end(), by_rule_and_location);
  return out;
}

std::vector<double> RuleSet::op_costs_ms(const Graph& graph, const CostModel& model, const Enumeration& current) {
  const GraphFacts* f = current.facts.get();
  if (!f || &f->graph != &graph || f->model != &model || !model.runs_fused_steps()) return model.op_costs_ms(graph);
  std::vector<double> costs(f->op_units.size());
  for (size_t i = 0; i < costs.size(); ++i) {
    const int64_t cold = f->residency ? f->residency->op_units(static_cast<int>(i)) : 0;  // (its GEMV read)
    costs[i] = static_cast<double>(f->op_units[i] + cold) * kCostUnitMs;
  }
  return costs;
}

std::unique_ptr<Graph> RuleSet::step(const Graph& graph, const CostModel& model, const Enumeration& current,
                                     int which, Enumeration* next) const {
  if (which < 0 || which >= static_cast<int>(current.candidates.size()))
    throw IndexError("candidate " + std::to_string(which) + " out of range (" +
                     std::to_string(current.candidates.size()) + ")");
  check_candidates_of(graph, current.candidates);
  check_candidates_of(graph, current.cycle_rejected);
  const std::shared_ptr<const GraphFacts> parent_facts = facts_of(graph, model, current);
  const GraphFacts& parent = *parent_facts;
  Rewritten rw = rewrite(parent, model, current.candidates[which]);
  const GraphFacts& facts = *rw.facts;
  Enumeration out;
  std::vector<Candidate> fresh_rejected;
  std::vector<Candidate> fresh = enumerate(facts, model, -1, &rw, &fresh_rejected, true);

  // Carried-over entries of rules binding a set of ops one way only go straight to the
  // new lists; those of rebindable rules are gathered per set of ops first.
  struct Bindings {
    bool order_kept = true;                             // the search meets its ops as before
    bool unchanged = true;  // every entry valid, carried as is (cost delta unchanged) and surely acyclic
    std::vector<std::pair<Candidate, bool>> entries;  // (entry, was valid)
  };
  std::map<std::pair<int, std::vector<int>>, Bindings> sets;  // (rule, ops in the new graph, sorted) ->
  auto carry = [&](const Candidate& c, bool was_valid) {
    Candidate moved;  // c in the child: its fields, its location mapped, its footprint mapped or found again
    const Carried where = carried(rw, c, &moved.location);
    if (where == Carried::kRemoved || where == Carried::kNear) return;  // gone, or enumerated afresh
    moved.rule_id = c.rule_id;
    moved.cost_delta = c.cost_delta;
    moved.cost_delta_units = c.cost_delta_units;
    moved.child_hash = c.child_hash;
    moved.planned = c.planned;
    moved.base_delta_units = c.base_delta_units;  // (priced against the child below)
    moved.weight_reads = c.weight_reads;
    const bool as_is = was_valid && where == Carried::kFar && surely_acyclic(facts, moved.location);
    if (as_is) moved.footprint = moved_footprint(rw, c);
    if (rebindable_[c.rule_id]) {
      Bindings& b = sets[{c.rule_id, sorted_ops(moved.location)}];
      b.order_kept = b.order_kept && search_order_kept(parent, rw.new_id, sorted_ops(c.location));
      b.unchanged = b.unchanged && as_is;
      b.entries.push_back({std::move(moved), was_valid});
      return;
    }
    if (as_is) {
      out.candidates.push_back(std::move(moved));
      return;
    }
    if (delta_at(facts, model, c, moved.location, &moved, true)) {
      out.candidates.push_back(std::move(moved));
    } else {
      moved.footprint.clear();
      moved.planned.reset();
      // its ops and surroundings are the old ones: only a cycle can refuse it
      out.cycle_rejected.push_back(std::move(moved));
    }
  };
  for (const Candidate& c : current.candidates) carry(c, true);
  for (const Candidate& c : current.cycle_rejected) carry(c, false);

  std::set<std::pair<int, std::vector<int>>> fresh_sets, bind_again;
  for (const auto* list : {&fresh, &fresh_rejected})
    for (const Candidate& c : *list)
      if (rebindable_[c.rule_id]) fresh_sets.insert({c.rule_id, sorted_ops(c.location)});
  for (auto& [set, b] : sets) {
    bool again = fresh_sets.count(set) || !b.order_kept;
    if (!again && b.unchanged) {  // the same bindings, equally valid, with the same cost deltas
      for (auto& entry : b.entries) out.candidates.push_back(std::move(entry.first));
      continue;
    }
    std::vector<Candidate> valid, rejected;
    for (auto& [c, was_valid] : b.entries) {
      if (again) break;
      bool ok = delta_at(facts, model, c, c.location, &c, true);
      again = ok != was_valid;  // a binding turned valid or invalid: the kept one may change
      if (!ok) {
        c.footprint.clear();
        c.planned.reset();
      }
      (ok ? valid : rejected).push_back(std::move(c));
    }
    if (again) {
      bind_again.insert(set);
      continue;
    }
    out.candidates.insert(out.candidates.end(), valid.begin(), valid.end());
    out.cycle_rejected.insert(out.cycle_rejected.end(), rejected.begin(), rejected.end());
  }
  for (const auto* list : {&fresh, &fresh_rejected}) {
    auto& to = list == &fresh ? out.candidates : out.cycle_rejected;
    for (const Candidate& c : *list)
      if (!rebindable_[c.rule_id] || !bind_again.count({c.rule_id, sorted_ops(c.location)})) to.push_back(c);
  }
  for (const auto& [rule_id, key] : bind_again) {
    Candidate kept;
    if (kept_binding(facts, model, rule_id, key, &kept, &out.cycle_rejected)) out.candidates.push_back(kept);
  }
  // The residency term's price of each one's weight reads is the child's (a carried-over
  // one's reads are the parent's: its footprint's constants kept their values).
  for (Candidate& c : out.candidates) price(facts, c);
  std::sort(out.candidates.begin(), out.candidates.end(), by_rule_and_location);
  std::sort(out.cycle_rejected.begin(), out.cycle_rejected.end(), by_rule_and_location);
  out.facts = std::move(rw.facts);  // the child's, for its next step or look ahead
  *next = std::move(out);
  return std::move(rw.graph);
}

}  // namespace taso
