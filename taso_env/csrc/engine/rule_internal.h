// Private to the rule engine: a compiled rule, a match, a planned target, and the
// matching/planning steps that rule.cc (RuleSet) drives. Matching lives in
// rule_match.cc; compilation of the JSON spec is the Compiled constructor below.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "rule_expr.h"
#include "taso/epilogue.h"
#include "taso/errors.h"
#include "taso/graph_hash.h"
#include "taso/rule.h"

namespace taso {
namespace rule_detail {

// A parsed pattern reference: a free variable, or output `index` of pattern op `op`.
struct Ref {
  bool is_var = false;
  int var = -1;
  int op = -1;
  int index = 0;
  bool optional = false;
};

struct CompiledOp {
  OpType type;
  std::vector<Ref> inputs;
  int required_inputs = 0;
};

// Per-call graph facts shared by all rules. With a model: each op's cost in integer
// units (cost_units); with hashes: each op's content and Merkle hash and the graph hash
// (taso/graph_hash.h), so that a rewrite's child hash can be computed without it. With a
// model that prices weight residency: the graph's GEMV reads (WeightResidency, whose
// term op_units leaves out) and, hashes or not, the constant ops' Merkle hashes (their
// values: what a rewrite's changes of the reads are told by).
struct GraphFacts {
  const Graph& graph;
  const CostModel* model;  // what the costs are priced with (may be null)
  std::vector<std::vector<std::vector<std::pair<int, int>>>> consumers;
  std::vector<char> is_output;  // per op: some output is a graph output
  std::set<TensorRef> output_tensors;
  std::vector<char> constant;
  std::vector<int64_t> raw_units;  // each op's cost priced alone (0 for constant and source ops)
  std::vector<int64_t> op_units;   // what it costs in the graph: 0 where it runs in another op's step
  std::vector<char> absorbed;      // per op: the Fused kind of the step it runs in (empty: the model fuses none)
  std::vector<std::vector<int>> ops_by_type;
  bool hashes = false;
  bool value_hashes = false;  // merkle holds the constant ops' hashes (all ops' with `hashes`; others 0)
  std::optional<WeightResidency> residency;
  std::vector<uint64_t> local_hash, merkle;
  std::vector<uint64_t> output_name_hash;
  uint64_t graph_hash = 0;
  // Per-op marks that rewrite_effect reuses across calls (generation-stamped).
  struct Scratch {
    uint32_t generation = 0;
    std::vector<uint32_t> queued, changed, replaced;
    std::vector<uint64_t> hash;
    std::vector<char> constant;
    std::vector<uint32_t> recost;     // kept ops priced again (their fused-step verdict judged)
    std::vector<uint32_t> footprint;  // ops already in the footprint being recorded
    std::vector<char> absorbed;       // the child's verdict of those
  };
  mutable Scratch scratch;
  // Flat inputs (in_refs[in_start[i] .. in_start[i+1]]) and how each op's constant-ness
  // follows from its inputs: 0 never constant, 1 always, 2 when all inputs are.
  std::vector<int> in_start;
  std::vector<TensorRef> in_refs;
  // Flat readers of any output of each op (out_ops[out_start[i] .. out_start[i+1]]).
  std::vector<int> out_start;
  std::vector<int> out_ops;
  std::vector<uint8_t> constant_rule;

  // With `known`, an op whose entry is >= 0 and whose constant-ness is `known_constant`'s
  // takes its cost units priced alone (raw_units) from there instead of the model (a
  // successor's unchanged ops).
  GraphFacts(const Graph& g, const CostModel* model, bool with_hashes = false,
             const std::vector<int64_t>* known = nullptr, const std::vector<char>* known_constant = nullptr)
      : graph(g), model(model), hashes(with_hashes) {
    consumers = g.consumers();
    is_output.assign(g.num_ops(), 0);
    for (const TensorRef& t : g.outputs()) {
      is_output[t.op] = 1;
      output_tensors.insert(t);
    }
    constant = constant_ops(g);
    if (model) {
      raw_units.resize(g.num_ops());
      for (int i = 0; i < g.num_ops(); ++i)
        raw_units[i] = known && (*known)[i] >= 0 && (*known_constant)[i] == constant[i]
                           ? (*known)[i]
                           : cost_units(model->op_cost_ms(g, i, constant));
      op_units = raw_units;
      if (model->runs_fused_steps()) {
        absorbed = fused_step_ops(g, constant, consumers);
        for (int i = 0; i < g.num_ops(); ++i)
          op_units[i] = fused_step_units(absorbed[i], op_units[i]);
      }
    }
    ops_by_type.resize(kNumOpTypes);
    for (int i = 0; i < g.num_ops(); ++i) ops_by_type[static_cast<int>(g.op(i).type)].push_back(i);
    in_start.reserve(g.num_ops() + 1);
    constant_rule.resize(g.num_ops());
    for (int i = 0; i < g.num_ops(); ++i) {
      const Op& op = g.ops()[i];
      in_start.push_back(static_cast<int>(in_refs.size()));
      in_refs.insert(in_refs.end(), op.inputs.begin(), op.inputs.end());
      bool has = !op.inputs.empty();
      constant_rule[i] = is_constant_op(op.type, has, true) ? (is_constant_op(op.type, has, false) ? 1 : 2) : 0;
    }
    in_start.push_back(static_cast<int>(in_refs.size()));
    out_start.reserve(g.num_ops() + 1);
    for (int i = 0; i < g.num_ops(); ++i) {
      out_start.push_back(static_cast<int>(out_ops.size()));
      for (const auto& uses : consumers[i])
        for (const auto& use : uses) out_ops.push_back(use.first);
    }
    out_start.push_back(static_cast<int>(out_ops.size()));
    if (with_hashes) {
      local_hash.resize(g.num_ops());
      merkle.resize(g.num_ops());
      for (int i = 0; i < g.num_ops(); ++i) {
        local_hash[i] = graph_hash::op_local_hash(g.op(i));
        merkle[i] = graph_hash::merkle_hash(local_hash[i], g.op(i).inputs, merkle);
        graph_hash += graph_hash::op_term(merkle[i]);
      }
      for (size_t i = 0; i < g.outputs().size(); ++i) {
        output_name_hash.push_back(graph_hash::hash_string(0, g.output_names()[i]));
        graph_hash += graph_hash::output_term(output_name_hash.back(), merkle[g.outputs()[i].op],
                                              g.outputs()[i].index);
      }
    }
    if (model && model->prices_weight_residency()) {
      if (!with_hashes) {
        merkle.assign(g.num_ops(), 0);
        for (int i = 0; i < g.num_ops(); ++i)  // (a constant op reads constants only)
          if (constant[i])
            merkle[i] = graph_hash::merkle_hash(graph_hash::op_local_hash(g.op(i)), g.op(i).inputs, merkle);
      }
      value_hashes = true;
      residency.emplace(g, constant, merkle);
    }
  }
};

// A target op, planned against a match: where its inputs come from and its types.
struct PlannedOp {
  bool present = true;
  Op op;
  std::vector<Ref> inputs;  // present inputs only
  bool constant = false;
};

// A rule's target planned against a match (plan_target): its ops, each one's input
// types and, where the graph's facts have a cost model, each one's cost priced alone
// (cost units; 0 where constant). It reads only the types of the matched ops and of the
// tensors they read, the values bound to the source's attributes and which of those
// tensors are constant, so a match whose ops keep their inputs plans the same target
// while that constant-ness holds (RuleSet::delta_at reuses it).
struct PlannedTarget {
  std::vector<PlannedOp> ops;
  std::vector<std::vector<TensorType>> input_types;  // per op (its present inputs)
  std::vector<int64_t> units;                         // per op, priced by `model`
  const CostModel* model = nullptr;                   // null: not priced
};

struct Plan {
  std::shared_ptr<const PlannedTarget> target;
  std::vector<Ref> outputs;  // per source output
  std::set<int> dead;        // graph ops that become dead
  const std::vector<PlannedOp>& ops() const { return target->ops; }
};



}  // namespace rule_detail

struct RuleSet::Compiled {
  using Ref = rule_detail::Ref;
  using CompiledOp = rule_detail::CompiledOp;

  RuleSpec spec;
  std::vector<std::string> var_names;
  std::vector<CompiledOp> source;
  std::vector<int> order;                   // source ops in matching order
  std::vector<std::pair<int, int>> source_outputs;  // (pattern op, output index)
  std::vector<std::vector<Ref>> target_inputs;
  std::vector<OpType> target_types;
  std::vector<Ref> target_outputs;

  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError("rule " + std::to_string(spec.id) + " '" + spec.name + "': " + what);
  }

  // Parses "name", "name:i", "name?" against the source ops (and target ops when
  // `target_names` is given).
  Ref parse_ref(const std::string& text, const std::vector<PatternOp>& ops, bool define_vars) {
    Ref r;
    std::string name = text;
    if (!name.empty() && name.back() == '?') {
      r.optional = true;
      name.pop_back();
    }
    size_t colon = name.find(':');
    std::string base = name.substr(0, colon);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].name == base) {
        r.op = static_cast<int>(i);
        r.index = colon == std::string::npos ? 0 : std::stoi(name.substr(colon + 1));
        if (r.optional) fail("'" + text + "': only free variables can be optional");
        return r;
      }
    if (colon != std::string::npos) fail("'" + text + "' refers to an unknown pattern op");
    auto it = std::find(var_names.begin(), var_names.end(), base);
    if (it == var_names.end()) {
      if (!define_vars) fail("'" + text + "' is neither a target op nor a free variable of the source");
      var_names.push_back(base);
      it = var_names.end() - 1;
    }
    r.is_var = true;
    r.var = static_cast<int>(it - var_names.begin());
    r.optional = r.optional || optional_vars.count(base);
    if (r.optional) optional_vars.insert(base);
    return r;
  }
  std::set<std::string> optional_vars;

  explicit Compiled(RuleSpec s) : spec(std::move(s)) {
    if (spec.source.ops.empty()) fail("empty source pattern");
    std::set<std::string> names;
    for (const PatternOp& p : spec.source.ops)
      if (!names.insert(p.name).second) fail("duplicate source op name '" + p.name + "'");
    for (const PatternOp& p : spec.source.ops) {
      CompiledOp c;
      try {
        c.type = op_type_from_name(p.type);
      } catch (const UnknownOpError&) {
        fail("unknown op type '" + p.type + "' in source op '" + p.name + "'");
      }
      bool seen_optional = false;
      for (const std::string& in : p.inputs) {
        Ref r = parse_ref(in, spec.source.ops, true);
        if (seen_optional && !r.optional) fail("optional inputs must come last in '" + p.name + "'");
        seen_optional = seen_optional || r.optional;
        c.required_inputs += r.optional ? 0 : 1;
        c.inputs.push_back(r);
      }
      source.push_back(c);
    }
    for (const std::string& out : spec.source.outputs) {
      Ref r = parse_ref(out, spec.source.ops, false);
      if (r.is_var) fail("source output '" + out + "' must be a source op output");
      source_outputs.emplace_back(r.op, r.index);
    }
    if (source_outputs.empty()) fail("the source pattern has no outputs");
    // Matching order: start at the last op (usually the most specific), then grow
    // through producers and shared tensors.
    std::vector<char> placed(source.size(), 0);
    order.push_back(static_cast<int>(source.size()) - 1);
    placed.back() = 1;
    while (order.size() < source.size()) {
      int next = -1;
      for (size_t i = 0; i < source.size() && next < 0; ++i) {
        if (placed[i]) continue;
        bool connected = false;
        for (int j : order) {
          for (const Ref& r : source[j].inputs) connected = connected || (!r.is_var && r.op == static_cast<int>(i));
          for (const Ref& r : source[i].inputs) {
            if (!r.is_var && r.op == j) connected = true;
            if (r.is_var && !r.optional)
              for (const Ref& q : source[j].inputs) connected = connected || (q.is_var && q.var == r.var);
          }
        }
        if (connected) next = static_cast<int>(i);
      }
      if (next < 0) fail("the source pattern is not connected");
      placed[next] = 1;
      order.push_back(next);
    }
    // Target.
    std::set<std::string> tnames;
    for (const PatternOp& p : spec.target.ops) {
      if (!tnames.insert(p.name).second) fail("duplicate target op name '" + p.name + "'");
      try {
        target_types.push_back(op_type_from_name(p.type));
      } catch (const UnknownOpError&) {
        fail("unknown op type '" + p.type + "' in target op '" + p.name + "'");
      }
      std::vector<Ref> ins;
      for (const std::string& in : p.inputs) {
        Ref r = parse_target_ref(in, static_cast<int>(target_inputs.size()));
        ins.push_back(r);
      }
      target_inputs.push_back(ins);
    }
    for (const std::string& out : spec.target.outputs)
      target_outputs.push_back(parse_target_ref(out, static_cast<int>(spec.target.ops.size())));
    if (target_outputs.size() != source_outputs.size())
      fail("the target has " + std::to_string(target_outputs.size()) + " outputs, the source " +
           std::to_string(source_outputs.size()));
    for (const auto& kv : spec.shapes) resolve_tensor(kv.first);
  }

  // Target refs: target op outputs (ops before `limit`) or source free variables.
  Ref parse_target_ref(const std::string& text, int limit) {
    std::string name = text;
    bool optional = !name.empty() && name.back() == '?';
    if (optional) name.pop_back();
    size_t colon = name.find(':');
    std::string base = name.substr(0, colon);
    for (int i = 0; i < static_cast<int>(spec.target.ops.size()); ++i)
      if (spec.target.ops[i].name == base) {
        if (i >= limit) fail("target op '" + base + "' is used before it is defined");
        Ref r;
        r.op = i;
        r.index = colon == std::string::npos ? 0 : std::stoi(name.substr(colon + 1));
        r.optional = optional;
        return r;
      }
    auto it = std::find(var_names.begin(), var_names.end(), base);
    if (it == var_names.end() || colon != std::string::npos)
      fail("target reference '" + text + "' is neither a target op nor a free variable of the source");
    Ref r;
    r.is_var = true;
    r.var = static_cast<int>(it - var_names.begin());
    r.optional = optional;
    return r;
  }

  // A tensor named in an expression or a shape pattern: a free variable or a source
  // op output. Returns {is_var, index, output}.
  Ref resolve_tensor(const std::string& text) const {
    std::string name = text;
    if (!name.empty() && name.back() == '?') name.pop_back();
    size_t colon = name.find(':');
    std::string base = name.substr(0, colon);
    Ref r;
    for (size_t i = 0; i < spec.source.ops.size(); ++i)
      if (spec.source.ops[i].name == base) {
        r.op = static_cast<int>(i);
        r.index = colon == std::string::npos ? 0 : std::stoi(name.substr(colon + 1));
        return r;
      }
    auto it = std::find(var_names.begin(), var_names.end(), base);
    if (it == var_names.end()) fail("'" + text + "' names no tensor of the source pattern");
    r.is_var = true;
    r.var = static_cast<int>(it - var_names.begin());
    return r;
  }
};


namespace rule_detail {

using Compiled = RuleSet::Compiled;

struct Match {
  std::vector<int> ops;
  std::vector<TensorRef> vars;  // op -2: unbound; op -1: absent optional
  Bindings values;
};

// Every binding of the rule's source pattern in the graph (or only at `fixed`, one
// graph op per pattern op; or only those whose first-matched op is one of `first`),
// each passed to `found`.
void search_matches(const Compiled& rule, const GraphFacts& f, size_t step, Match& m,
                    const std::vector<int>* fixed, const std::function<void(const Match&)>& found,
                    const std::vector<int>* first = nullptr);
// Shapes, constraints, private internals, a buildable target and no cycle.
bool validate(const Compiled& rule, const GraphFacts& f, Match& m, Plan& plan);
// Producers that lose all their readers when the match is replaced.
void find_dead_ops(const Compiled& rule, const GraphFacts& f, const Match& m, Plan& plan);
// What applying a validated match would do, computed without building the child graph
// (rewrite_effect.cc): the exact change of the ops' costs in cost units (removed ops,
// added ops, and ops downstream whose constant-ness changes), where the facts price
// weight residency the GEMV reads it adds and removes (removed and target GEMVs, kept
// ones whose weight or its constant-ness changes), and, when the facts carry hashes, the
// child's graph hash. With `footprint`, also the ops (sorted ids) whose facts the cost
// change was computed from (Candidate::footprint).
struct Effect {
  int64_t cost_units = 0;  // without the residency term (Candidate::base_delta_units)
  uint64_t child_hash = 0;
  std::vector<WeightRead> weight_reads;
};
Effect rewrite_effect(const Compiled& rule, const GraphFacts& f, const Match& m, const Plan& plan,
                      const CostModel& model, std::vector<int>* footprint = nullptr);
// `c`'s cost delta in the graph of `f`: its base delta plus the change of that graph's
// residency term that its weight reads make (the base delta where `f` prices none).
inline int64_t delta_in(const GraphFacts& f, const Candidate& c) {
  return c.base_delta_units + (f.residency ? f.residency->delta_units(c.weight_reads) : 0);
}
// Sets `c`'s cost delta (units and ms) to delta_in(f, c).
inline void price(const GraphFacts& f, Candidate& c) {
  c.cost_delta_units = delta_in(f, c);
  c.cost_delta = static_cast<double>(c.cost_delta_units) * kCostUnitMs;
}
// The candidate of `rule_id` at `location` with effect `e` (its hash and deltas, priced
// against `f`), footprint and planned target.
inline Candidate priced_candidate(const GraphFacts& f, int rule_id, const std::vector<int>& location,
                                  Effect e, std::vector<int> footprint,
                                  std::shared_ptr<const PlannedTarget> planned) {
  Candidate c;
  c.rule_id = rule_id;
  c.location = location;
  c.child_hash = e.child_hash;
  c.footprint = std::move(footprint);
  c.planned = std::move(planned);
  c.base_delta_units = e.cost_units;
  c.weight_reads = std::move(e.weight_reads);
  price(f, c);
  return c;
}
Match empty_match(const Compiled& rule);
// validate() but for the cycle check, and the cycle check alone (no op the target reads
// depends on the match's outputs).
bool validate_but_cycle(const Compiled& rule, const GraphFacts& f, Match& m, Plan& plan);
bool creates_no_cycle(const Compiled& rule, const GraphFacts& f, const Match& m, const Plan& plan);
// Whether the planned op `po` of `ops` is constant, its inputs read as `m` binds them in
// the graph of `f` (plan_target's rule; a planned target stays valid while it holds).
bool planned_constant(const PlannedOp& po, const std::vector<PlannedOp>& ops, const GraphFacts& f,
                      const Match& m);
// The binding of `rule` at `location` (one graph op per source op) known to be a match:
// its ops and free variables (no attribute values).
Match match_of(const Compiled& rule, const Graph& g, const std::vector<int>& location);

// A parent graph's rewrite (RuleSet::rewrite): the child, where each parent op went (-1:
// removed), the child's ops where something changed (built by the target, inputs or
// readers changed, fused-step verdict or constant-ness changed), the child's facts and
// each child op's hops from the changed ones (-1: beyond every rule's near radius).
struct Rewritten {
  std::unique_ptr<Graph> graph;  // (on the heap: `facts` refers to it)
  std::vector<int> new_id;
  std::vector<int> changed;
  std::vector<char> changed_mask;  // per child op: kChanged, kReadersChanged (only its readers did) or 0
  // Per child op, where the facts price weight residency: a kept constant whose value hash
  // changed (the weight reads a candidate recorded with it are stale).
  std::vector<char> value_changed;
  std::unique_ptr<GraphFacts> facts;
  std::vector<int> near;  // hops from `changed` up to every rule's near radius, else -1
  // Per op type of the changed ops: the hops (as `near`) from the changed ops of that
  // type. A match holding a changed op holds one of a type its source has, so
  // RuleSet::enumerate searches only from the anchors near those.
  std::vector<std::pair<OpType, std::vector<int>>> near_by_changed_type;
};
constexpr char kChanged = 1, kReadersChanged = 2;  // Rewritten::changed_mask
// Whether the readers of op `id` can move no cost delta: a source op (input or weight) or
// a constant one runs no kernel, so no verdict reads how many ops read it, and its dying
// costs nothing (rewrite_effect.cc).
inline bool readers_decide_nothing(const GraphFacts& f, int id) {
  return is_source_op(f.graph.op(id).type) || f.constant[id];
}
std::vector<int> hops_from(const GraphFacts& f, const std::vector<int>& seeds, int radius);
// The most hops (successor.cc) from a match's first-matched op to any other of its ops,
// along the links every match of `rule`'s source pattern has: at most its size - 1.
int anchor_reach(const Compiled& rule);
// Whether one of `ops` is an op a rewrite changed (hops 0 in `near`, Rewritten::near).
bool touches_change(const std::vector<int>& near, const std::vector<int>& ops);

}  // namespace rule_detail
}  // namespace taso
