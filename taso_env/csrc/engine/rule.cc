// RuleSet: compiles the rule specs, lists candidates (rule, location, cost delta) and
// applies one, rebuilding the graph in topological order. Matching and planning are in
// rule_match.cc; the compiled form of a rule is in rule_internal.h.
#include <cstdio>
#include <functional>
#include <tuple>
#include <unordered_map>

#include "rule_internal.h"

namespace taso {

using namespace rule_detail;

namespace {

// A text that is equal for two source patterns exactly when they match the same way.
void write_expr(std::string& out, const Expr& e) {
  out += "(" + std::to_string(e.kind) + ":" + e.name + ":";
  for (int64_t v : e.ints) out += std::to_string(v) + ",";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", e.number);
  out += buf;
  for (const Expr& a : e.args) write_expr(out, a);
  out += ")";
}

std::string source_key(const Pattern& p) {
  std::string out;
  for (const PatternOp& op : p.ops) {
    out += op.name + "=" + op.type + "(";
    for (const std::string& in : op.inputs) out += in + ",";
    out += "){";
    for (const auto& kv : op.attrs) {
      out += kv.first + ":";
      write_expr(out, kv.second);
    }
    out += "};";
  }
  for (const std::string& o : p.outputs) out += o + ",";
  return out;
}

}  // namespace


static_assert(kNumOpTypes <= 64, "RuleSet::source_types_ holds a bit per op type");

RuleSet::RuleSet(std::vector<RuleSpec> specs) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].id != static_cast<int>(i))
      throw ValueError("rule '" + specs[i].name + "' has id " + std::to_string(specs[i].id) + ", expected " +
                       std::to_string(i) + " (ids are the action indices: 0..n-1 in order)");
    rules_.push_back(std::make_unique<Compiled>(std::move(specs[i])));
  }
  std::map<std::string, int> first_with_source;
  for (int r = 0; r < size(); ++r)
    match_group_.push_back(first_with_source.emplace(source_key(rules_[r]->spec.source), r).first->second);
  rules_by_anchor_.resize(kNumOpTypes);
  for (int r = 0; r < size(); ++r)
    rules_by_anchor_[static_cast<int>(rules_[r]->source[rules_[r]->order[0]].type)].push_back(r);
  for (int r = 0; r < size(); ++r) {
    std::set<OpType> types;
    uint64_t type_bits = 0;
    for (const auto& op : rules_[r]->source) {
      types.insert(op.type);
      type_bits |= uint64_t{1} << static_cast<int>(op.type);
    }
    rebindable_.push_back(types.size() < rules_[r]->source.size());
    source_types_.push_back(type_bits);
    near_radius_.push_back(anchor_reach(*rules_[r]));
    max_near_radius_ = std::max(max_near_radius_, near_radius(r));
  }
}

RuleSet::~RuleSet() = default;
RuleSet::RuleSet(RuleSet&&) noexcept = default;

int RuleSet::size() const { return static_cast<int>(rules_.size()); }

const RuleSpec& RuleSet::spec(int id) const {
  if (id < 0 || id >= size()) throw IndexError("rule id " + std::to_string(id) + " out of range");
  return rules_[id]->spec;
}

std::vector<Candidate> RuleSet::candidates(const Graph& graph, const CostModel& model, int rule_id,
                                          bool child_hashes) const {
  if (rule_id >= size()) throw IndexError("rule id " + std::to_string(rule_id) + " out of range");
  GraphFacts facts(graph, &model, child_hashes);
  return enumerate(facts, model, rule_id, nullptr);
}

namespace {

// Whether `found` fails validation only because its rewrite would close a cycle.
bool closes_only_a_cycle(const RuleSet::Compiled& rule, const GraphFacts& facts, const Match& found) {
  Match m = found;
  Plan plan;
  return validate_but_cycle(rule, facts, m, plan);  // (called where validate() failed)
}

// The first match the search finds (only at `fixed`, or only from the anchors `first`)
// that `wanted` accepts (all, if empty) and that is valid, with its plan; false if none.
// With `cycle_rejected`, the accepted ones it rejected before, only for closing a cycle.
bool first_valid_match(const RuleSet::Compiled& rule, const GraphFacts& facts, const std::vector<int>* fixed,
                       const std::vector<int>* first, const std::function<bool(const Match&)>& wanted, Match& m,
                       Plan& plan, std::vector<Match>* cycle_rejected = nullptr) {
  bool ok = false;
  Match start = empty_match(rule);
  search_matches(rule, facts, 0, start, fixed, [&](const Match& found) {
    if (ok || (wanted && !wanted(found))) return;
    Match mm = found;
    Plan p;
    if (validate(rule, facts, mm, p)) {
      m = std::move(mm);
      plan = std::move(p);
      ok = true;
    } else if (cycle_rejected && closes_only_a_cycle(rule, facts, found)) {
      cycle_rejected->push_back(found);
    }
  }, first);
  return ok;
}

// Accepts the bindings of exactly the ops `key` (sorted).
std::function<bool(const Match&)> binds_ops(const std::vector<int>& key) {
  return [&key](const Match& found) {
    std::vector<int> ops(found.ops);
    std::sort(ops.begin(), ops.end());
    return ops == key;
  };
}

}  // namespace

bool RuleSet::kept_binding(const GraphFacts& facts, const CostModel& model, int rule_id, const std::vector<int>& key,
                           Candidate* kept, std::vector<Candidate>* rejected) const {
  const Compiled& rule = *rules_[rule_id];
  const OpType type = rule.source[rule.order[0]].type;
  for (int first : key) {  // anchors in id order, each searched as a full enumeration does
    if (facts.graph.op(first).type != type) continue;
    const std::vector<int> from{first};
    Match m;
    Plan plan;
    std::vector<Match> refused;
    const bool ok = first_valid_match(rule, facts, nullptr, &from, binds_ops(key), m, plan, &refused);
    for (const Match& r : refused) rejected->push_back({rule_id, r.ops});
    if (!ok) continue;
    find_dead_ops(rule, facts, m, plan);
    std::vector<int> footprint;
    Effect e = rewrite_effect(rule, facts, m, plan, model, &footprint);
    *kept = priced_candidate(facts, rule_id, m.ops, std::move(e), std::move(footprint), plan.target);
    return true;
  }
  return false;
}

std::vector<Candidate> RuleSet::enumerate(const GraphFacts& facts, const CostModel& model, int rule_id,
                                          const Rewritten* change, std::vector<Candidate>* rejected,
                                          bool footprints) const {
  // With `change`: per op type, its ops within reach of a changed op (in id order, as in a
  // full enumeration: of two matches of the same ops the first found is kept).
  const std::vector<int>* near = change ? &change->near : nullptr;
  std::vector<std::vector<int>> near_by_type;
  if (near) {
    near_by_type.resize(kNumOpTypes);
    for (int i = 0; i < facts.graph.num_ops(); ++i)
      if ((*near)[i] >= 0) near_by_type[static_cast<int>(facts.graph.op(i).type)].push_back(i);
  }
  std::vector<int> ids;  // rules anchored on an op type the graph (or the change) has, in id order
  if (rule_id >= 0) {
    ids.push_back(rule_id);
  } else {
    const auto& present = near ? near_by_type : facts.ops_by_type;
    for (int t = 0; t < kNumOpTypes; ++t)
      if (!present[t].empty()) ids.insert(ids.end(), rules_by_anchor_[t].begin(), rules_by_anchor_[t].end());
    std::sort(ids.begin(), ids.end());
  }
  // (anchor type, reach, the changed ops' types the source has) -> anchors
  std::map<std::tuple<int, int, uint64_t>, std::vector<int>> near_anchors;
  uint64_t changed_types = 0;
  if (change)
    for (const auto& by_type : change->near_by_changed_type)
      changed_types |= uint64_t{1} << static_cast<int>(by_type.first);
  std::vector<Candidate> out;
  std::set<std::vector<int>> seen;
  std::vector<char> searched(rules_.size(), 0);     // per source-pattern group (its first rule id)
  std::map<int, std::vector<Match>> group_matches;  // the groups searched that have matches -> those
  for (int r : ids) {
    const Compiled& rule = *rules_[r];
    seen.clear();
    const int g = match_group_[r];
    if (!searched[g]) {
      searched[g] = 1;
      const std::vector<int>* anchors = nullptr;
      if (change) {  // the ops of the anchor's type within the rule's reach of a changed op of a type
                     // the source has (listed once per anchor type, reach and those types)
        const auto& by_type = change->near_by_changed_type;
        const uint64_t kinds = source_types_[r] & changed_types;
        const int type = static_cast<int>(rule.source[rule.order[0]].type), radius = near_radius(r);
        auto [at, fresh] = near_anchors.try_emplace({type, radius, kinds});
        auto near_kind = [&](int id) {
          for (const auto& [changed_type, hops] : by_type)
            if ((kinds >> static_cast<int>(changed_type) & 1) && hops[id] >= 0 && hops[id] <= radius) return true;
          return false;
        };
        if (fresh)
          for (int id : near_by_type[type])
            if (near_kind(id)) at->second.push_back(id);
        if (at->second.empty()) continue;  // no anchor within reach: nothing to search
        anchors = &at->second;
      }
      std::vector<Match> found_all;  // with `change`, those holding a changed op (the others are carried over)
      Match m = empty_match(rule);
      search_matches(rule, facts, 0, m, nullptr, [&](const Match& found) {
        if (!near || touches_change(*near, found.ops)) found_all.push_back(found);
      }, anchors);
      if (!found_all.empty()) group_matches.emplace(g, std::move(found_all));
    }
    auto group = group_matches.find(g);
    if (group == group_matches.end()) continue;
    for (const Match& found : group->second) {
      std::vector<int> key = found.ops;
      std::sort(key.begin(), key.end());
      if (seen.count(key)) continue;
      Match mm = found;
      Plan plan;
      if (!validate(rule, facts, mm, plan)) {  // (each binding of these ops is found, in full-search order)
        if (rejected && closes_only_a_cycle(rule, facts, found)) rejected->push_back({r, found.ops});
        continue;
      }
      seen.insert(key);
      find_dead_ops(rule, facts, mm, plan);
      std::vector<int> footprint;
      Effect e = rewrite_effect(rule, facts, mm, plan, model, footprints ? &footprint : nullptr);
      out.push_back(priced_candidate(facts, r, mm.ops, std::move(e), std::move(footprint),
                                     footprints ? plan.target : nullptr));
    }
  }
  return out;
}

namespace {

// The valid match of `rule` at `location` (one graph op per source op) with its plan and
// dead ops; false if the rule does not apply there.
bool match_at(const RuleSet::Compiled& rule, const GraphFacts& facts, const std::vector<int>& location, Match& m,
              Plan& plan) {
  if (!first_valid_match(rule, facts, &location, nullptr, {}, m, plan)) return false;
  find_dead_ops(rule, facts, m, plan);
  return true;
}

}  // namespace

bool RuleSet::delta_at(const GraphFacts& facts, const CostModel& model, const Candidate& c,
                       const std::vector<int>& location, Candidate* priced, bool record) const {
  const Compiled& rule = *rules_.at(c.rule_id);
  if (location.size() != rule.source.size()) return false;
  Match m;
  Plan plan;
  const PlannedTarget* before = c.planned.get();
  bool reuse = before && before->model == &model;
  if (reuse) {
    m = match_of(rule, facts.graph, location);
    for (const PlannedOp& po : before->ops)
      reuse = reuse && (!po.present || po.constant == planned_constant(po, before->ops, facts, m));
  }
  if (reuse) {
    plan.target = c.planned;
    plan.outputs = rule.target_outputs;
    if (!creates_no_cycle(rule, facts, m, plan)) return false;
    find_dead_ops(rule, facts, m, plan);
  } else if (!match_at(rule, facts, location, m, plan)) {
    return false;
  }
  std::vector<int> footprint;
  Effect e = rewrite_effect(rule, facts, m, plan, model, record ? &footprint : nullptr);
  priced->base_delta_units = e.cost_units;
  priced->weight_reads = std::move(e.weight_reads);
  price(facts, *priced);
  if (record) {
    priced->footprint = std::move(footprint);
    priced->planned = plan.target;
  }
  return true;
}

Graph RuleSet::apply(const Graph& graph, int rule_id, const std::vector<int>& location) const {
  GraphFacts facts(graph, nullptr);
  return apply_to(facts, rule_id, location, nullptr, nullptr);
}

Graph RuleSet::apply_to(const GraphFacts& facts, int rule_id, const std::vector<int>& location,
                        std::vector<int>* new_id_out, std::vector<int>* added) const {
  const Compiled& rule = *rules_.at(spec(rule_id).id);
  if (location.size() != rule.source.size())
    throw ValueError("rule '" + rule.spec.name + "' matches " + std::to_string(rule.source.size()) +
                     " ops, the location has " + std::to_string(location.size()));
  const Graph& graph = facts.graph;
  Match m;
  Plan plan;
  if (!match_at(rule, facts, location, m, plan))
    throw ValueError("rule '" + rule.spec.name + "' does not apply at this location of the graph");

  // Nodes of the new graph: kept old ops (ids 0..n-1) then planned target ops (n + i).
  int n = graph.num_ops();
  std::vector<char> removed(n, 0);
  for (int id : m.ops) removed[id] = 1;
  for (int id : plan.dead) removed[id] = 1;
  std::map<TensorRef, std::pair<int, int>> replaced;  // old source output -> node, index
  auto target_node = [&](const Ref& r) -> std::pair<int, int> {
    if (r.is_var) return {m.vars[r.var].op, m.vars[r.var].index};
    return {n + r.op, r.index};
  };
  for (size_t i = 0; i < rule.source_outputs.size(); ++i) {
    const auto& [sop, sidx] = rule.source_outputs[i];
    replaced[{m.ops[sop], sidx}] = target_node(plan.outputs[i]);
  }
  auto resolve = [&](const TensorRef& t) -> std::pair<int, int> {
    auto it = replaced.find(t);
    return it == replaced.end() ? std::make_pair(t.op, t.index) : it->second;
  };
  int total = n + static_cast<int>(plan.ops().size());
  // Existing nodes in id order (old ops, then the target's), with flat inputs:
  // node k reads (node, index) pairs inputs[start[k] .. start[k + 1]].
  std::vector<int> nodes, index_of(total, -1), start{0};
  std::vector<std::pair<int, int>> inputs;
  nodes.reserve(total);
  start.reserve(total + 1);
  inputs.reserve(graph.num_ops() * 2);
  auto add_node = [&](int node) {
    index_of[node] = static_cast<int>(nodes.size());
    nodes.push_back(node);
    start.push_back(static_cast<int>(inputs.size()));
  };
  for (int i = 0; i < n; ++i) {
    if (removed[i]) continue;
    for (const TensorRef& t : graph.op(i).inputs) inputs.push_back(resolve(t));
    add_node(i);
  }
  for (size_t i = 0; i < plan.ops().size(); ++i) {
    if (!plan.ops()[i].present) continue;
    for (const Ref& r : plan.ops()[i].inputs) inputs.push_back(target_node(r));
    add_node(n + static_cast<int>(i));
  }
  auto name_of = [&](int k) {
    return nodes[k] < n ? graph.op(nodes[k]).name : plan.ops()[nodes[k] - n].op.name;
  };
  // Topological order over existing nodes (old order kept where possible).
  std::vector<int> deps(inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    deps[j] = index_of[inputs[j].first];
    if (deps[j] < 0) throw GraphError("rule '" + rule.spec.name + "' left a dangling reference");
  }
  std::vector<int> order = topological_sort(start, deps, name_of);
  std::vector<int> new_id(total, -1);
  Graph out;
  out.reserve(static_cast<int>(nodes.size()));
  for (int k : order) {
    int node = nodes[k];
    const Op& from = node < n ? graph.op(node) : plan.ops()[node - n].op;
    Op op;  // a copy of all but the inputs
    op.type = from.type;
    op.name = node < n ? from.name
                       : rule.spec.name + "." + rule.spec.target.ops[node - n].name + "." + std::to_string(out.num_ops());
    op.attrs = from.attrs;
    op.outputs = from.outputs;
    op.inputs.reserve(start[k + 1] - start[k]);
    for (int j = start[k]; j < start[k + 1]; ++j) op.inputs.push_back({new_id[inputs[j].first], inputs[j].second});
    new_id[node] = out.add_typed_op(std::move(op));
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    auto t = resolve(graph.outputs()[i]);
    out.add_output({new_id[t.first], t.second}, graph.output_names()[i]);
  }
  if (new_id_out) new_id_out->assign(new_id.begin(), new_id.begin() + n);
  if (added) {
    added->clear();
    for (int node = n; node < total; ++node)
      if (new_id[node] >= 0) added->push_back(new_id[node]);
  }
  return out;
}

}  // namespace taso
