// Rule compilation, pattern matching, target planning and application.
//
// Matching is a small backtracking search over the source pattern's ops, each new op
// reached from those already matched (the producer of a matched input, or a consumer
// of a bound tensor), so it touches only the neighbourhood of each anchor op. A match
// is offered only if replacing it is sound: internal tensors are not used elsewhere,
// the target builds with the same output types, and no cycle is created.
#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include "rule_expr.h"
#include "taso/errors.h"
#include "taso/rule.h"

namespace taso {

namespace {

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

// Per-call graph facts shared by all rules.
struct GraphFacts {
  const Graph& graph;
  std::vector<std::vector<std::vector<std::pair<int, int>>>> consumers;
  std::vector<char> is_output;  // per op: some output is a graph output
  std::set<TensorRef> output_tensors;
  std::vector<char> constant;
  std::vector<double> op_costs;
  std::vector<std::vector<int>> ops_by_type;

  GraphFacts(const Graph& g, const CostModel* model) : graph(g) {
    consumers = g.consumers();
    is_output.assign(g.num_ops(), 0);
    for (const TensorRef& t : g.outputs()) {
      is_output[t.op] = 1;
      output_tensors.insert(t);
    }
    constant = constant_ops(g);
    if (model) {
      op_costs.resize(g.num_ops());
      for (int i = 0; i < g.num_ops(); ++i) op_costs[i] = model->op_cost_ms(g, i, constant);
    }
    ops_by_type.resize(kNumOpTypes);
    for (int i = 0; i < g.num_ops(); ++i) ops_by_type[static_cast<int>(g.op(i).type)].push_back(i);
  }
};

// A target op, planned against a match: where its inputs come from and its types.
struct PlannedOp {
  bool present = true;
  Op op;
  std::vector<Ref> inputs;  // present inputs only
  bool constant = false;
};

struct Plan {
  std::vector<PlannedOp> ops;
  std::vector<Ref> outputs;  // per source output
  std::set<int> dead;        // graph ops that become dead
};

}  // namespace

struct RuleSet::Compiled {
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

namespace {

using Compiled = RuleSet::Compiled;

struct Match {
  std::vector<int> ops;
  std::vector<TensorRef> vars;  // op -2: unbound; op -1: absent optional
  Bindings values;
};

TensorRef graph_tensor(const Compiled& rule, const Match& m, const Ref& r) {
  if (r.is_var) return m.vars[r.var];
  return {m.ops[r.op], r.index};
}

// Resolves tensor names in expressions to graph tensors (absent -> op -1).
struct MatchTensors : TensorResolver {
  const Compiled& rule;
  const Match& m;
  const Graph& g;
  MatchTensors(const Compiled& r, const Match& mm, const Graph& gg) : rule(r), m(mm), g(gg) {}
  const TensorType* type(const std::string& name) const override {
    TensorRef t = graph_tensor(rule, m, rule.resolve_tensor(name));
    if (t.op < 0) return nullptr;
    return &g.tensor_type(t);
  }
};

bool match_attrs(const Compiled& rule, const PatternOp& p, const Op& op, Bindings& values) {
  for (const auto& kv : p.attrs) {
    auto ints = op.attrs.ints.find(kv.first);
    if (ints != op.attrs.ints.end()) {
      if (!match_value(kv.second, Value::of_ints(ints->second), values)) return false;
      continue;
    }
    auto f = op.attrs.floats.find(kv.first);
    if (f != op.attrs.floats.end()) {
      if (!match_value(kv.second, Value::of_float(f->second), values)) return false;
      continue;
    }
    rule.fail("source op '" + p.name + "' constrains attribute '" + kv.first + "', which " +
              op_type_name(op.type) + " ops do not have");
  }
  return true;
}

// Tries to bind pattern op `p` to graph op `id`.
bool bind_op(const Compiled& rule, const GraphFacts& f, int p, int id, Match& m) {
  const Op& op = f.graph.op(id);
  const CompiledOp& c = rule.source[p];
  if (op.type != c.type) return false;
  if (std::find(m.ops.begin(), m.ops.end(), id) != m.ops.end()) return false;
  int n = static_cast<int>(op.inputs.size());
  if (n < c.required_inputs || n > static_cast<int>(c.inputs.size())) return false;
  for (size_t slot = 0; slot < c.inputs.size(); ++slot) {
    const Ref& r = c.inputs[slot];
    if (static_cast<int>(slot) >= n) {  // an absent optional input
      if (m.vars[r.var].op == -2) m.vars[r.var] = {-1, 0};
      else if (m.vars[r.var].op != -1) return false;
      continue;
    }
    const TensorRef& actual = op.inputs[slot];
    if (r.is_var) {
      TensorRef& bound = m.vars[r.var];
      if (bound.op == -2) bound = actual;
      else if (!(bound == actual)) return false;
    } else if (m.ops[r.op] >= 0 && !(TensorRef{m.ops[r.op], r.index} == actual)) {
      return false;
    }
  }
  // Pattern ops already matched that read this op's outputs must read the right ones.
  for (size_t q = 0; q < rule.source.size(); ++q) {
    if (m.ops[q] < 0) continue;
    const Op& other = f.graph.op(m.ops[q]);
    const auto& ins = rule.source[q].inputs;
    for (size_t slot = 0; slot < ins.size() && slot < other.inputs.size(); ++slot)
      if (!ins[slot].is_var && ins[slot].op == p && !(other.inputs[slot] == TensorRef{id, ins[slot].index}))
        return false;
  }
  m.ops[p] = id;
  return match_attrs(rule, rule.spec.source.ops[p], op, m.values);
}

// Graph ops that could match pattern op `p` given what is matched so far.
std::vector<int> op_choices(const Compiled& rule, const GraphFacts& f, int p, const Match& m) {
  // The producer of a matched op's input.
  for (size_t q = 0; q < rule.source.size(); ++q) {
    if (m.ops[q] < 0) continue;
    const Op& other = f.graph.op(m.ops[q]);
    const auto& ins = rule.source[q].inputs;
    for (size_t slot = 0; slot < ins.size() && slot < other.inputs.size(); ++slot)
      if (!ins[slot].is_var && ins[slot].op == p) return {other.inputs[slot].op};
  }
  // A consumer of a bound tensor.
  const auto& ins = rule.source[p].inputs;
  for (size_t slot = 0; slot < ins.size(); ++slot) {
    TensorRef t{-2, 0};
    if (ins[slot].is_var) t = m.vars[ins[slot].var];
    else if (m.ops[ins[slot].op] >= 0) t = {m.ops[ins[slot].op], ins[slot].index};
    if (t.op < 0) continue;
    std::vector<int> out;
    for (const auto& [consumer, cslot] : f.consumers[t.op][t.index])
      if (cslot == static_cast<int>(slot)) out.push_back(consumer);
    return out;
  }
  return f.ops_by_type[static_cast<int>(rule.source[p].type)];
}

void search_matches(const Compiled& rule, const GraphFacts& f, size_t step, Match& m,
                    const std::vector<int>* fixed, const std::function<void(const Match&)>& found) {
  if (step == rule.order.size()) {
    found(m);
    return;
  }
  int p = rule.order[step];
  std::vector<int> choices = fixed ? std::vector<int>{(*fixed)[p]} : op_choices(rule, f, p, m);
  for (int id : choices) {
    if (id < 0 || id >= f.graph.num_ops()) continue;
    Match next = m;
    if (bind_op(rule, f, p, id, next)) search_matches(rule, f, step + 1, next, fixed, found);
  }
}

bool check_shapes_and_constraints(const Compiled& rule, const GraphFacts& f, Match& m) {
  MatchTensors tensors(rule, m, f.graph);
  for (const auto& kv : rule.spec.shapes) {
    const TensorType* t = tensors.type(kv.first);
    if (!t || t->shape.size() != kv.second.size()) return false;
    for (size_t d = 0; d < kv.second.size(); ++d)
      if (!match_value(kv.second[d], Value::of_ints({t->shape[d]}), m.values)) return false;
  }
  for (const Expr& c : rule.spec.constraints) {
    Value v = evaluate(c, m.values, tensors, rule.spec.name);
    if (v.is_float ? v.number == 0.0 : (v.ints.empty() || v.ints[0] == 0)) return false;
  }
  return true;
}

// Internal tensors of the match must not be read outside it (or be graph outputs).
bool internal_tensors_private(const Compiled& rule, const GraphFacts& f, const Match& m) {
  for (size_t p = 0; p < rule.source.size(); ++p) {
    int id = m.ops[p];
    for (size_t k = 0; k < f.graph.op(id).outputs.size(); ++k) {
      bool is_source_output = std::find(rule.source_outputs.begin(), rule.source_outputs.end(),
                                        std::make_pair(static_cast<int>(p), static_cast<int>(k))) !=
                              rule.source_outputs.end();
      if (is_source_output) continue;
      if (f.output_tensors.count({id, static_cast<int>(k)})) return false;
      for (const auto& use : f.consumers[id][k])
        if (std::find(m.ops.begin(), m.ops.end(), use.first) == m.ops.end()) return false;
    }
  }
  return true;
}

// Builds the target against the match; false if it is invalid (shape or type errors).
bool plan_target(const Compiled& rule, const GraphFacts& f, const Match& m, Plan& plan) {
  MatchTensors tensors(rule, m, f.graph);
  const auto& tops = rule.spec.target.ops;
  plan.ops.resize(tops.size());
  for (size_t i = 0; i < tops.size(); ++i) {
    PlannedOp& po = plan.ops[i];
    po.op.type = rule.target_types[i];
    po.op.name = rule.spec.name + "." + tops[i].name;
    std::vector<TensorType> in_types;
    bool all_constant = true;
    for (const Ref& r : rule.target_inputs[i]) {
      bool absent = r.is_var ? m.vars[r.var].op < 0 : !plan.ops[r.op].present;
      if (absent) {
        if (r.optional) continue;  // "name?": drop the input
        po.present = false;        // "name": drop the op
        break;
      }
      if (r.is_var) {
        TensorRef t = m.vars[r.var];
        in_types.push_back(f.graph.tensor_type(t));
        all_constant = all_constant && f.constant[t.op];
      } else {
        const auto& outs = plan.ops[r.op].op.outputs;
        if (r.index >= static_cast<int>(outs.size())) return false;
        in_types.push_back(outs[r.index]);
        all_constant = all_constant && plan.ops[r.op].constant;
      }
      po.inputs.push_back(r);
    }
    if (!po.present) continue;
    for (const auto& kv : tops[i].attrs) {
      Value v = evaluate(kv.second, m.values, tensors, rule.spec.name);
      if (v.is_float) po.op.attrs.floats[kv.first] = v.number;
      else po.op.attrs.ints[kv.first] = v.ints;
    }
    try {
      po.op.outputs = infer_output_types(po.op.type, po.op.name, in_types, po.op.attrs);
    } catch (const Error&) {
      return false;
    }
    po.constant = po.op.type == OpType::kConstant || (all_constant && !po.inputs.empty());
  }
  plan.outputs = rule.target_outputs;
  for (size_t i = 0; i < rule.source_outputs.size(); ++i) {
    const auto& [sop, sidx] = rule.source_outputs[i];
    const TensorType& want = f.graph.op(m.ops[sop]).outputs[sidx];
    const Ref& r = plan.outputs[i];
    if (r.is_var) {
      TensorRef t = m.vars[r.var];
      if (t.op < 0 || !(f.graph.tensor_type(t) == want)) return false;
    } else if (!plan.ops[r.op].present || r.index >= static_cast<int>(plan.ops[r.op].op.outputs.size()) ||
               !(plan.ops[r.op].op.outputs[r.index] == want)) {
      return false;
    }
  }
  return true;
}

// No free-variable tensor that the target reads may depend on a matched op.
bool creates_no_cycle(const Compiled& rule, const GraphFacts& f, const Match& m, const Plan& plan) {
  int first = *std::min_element(m.ops.begin(), m.ops.end());
  std::set<int> watch;
  auto consider = [&](const Ref& r) {
    if (r.is_var && m.vars[r.var].op > first) watch.insert(m.vars[r.var].op);
  };
  for (const PlannedOp& po : plan.ops)
    if (po.present)
      for (const Ref& r : po.inputs) consider(r);
  for (const Ref& r : plan.outputs) consider(r);
  if (watch.empty()) return true;
  int last = *watch.rbegin();
  std::vector<char> reached(f.graph.num_ops(), 0);
  std::vector<int> stack(m.ops.begin(), m.ops.end());
  for (int id : m.ops) reached[id] = 1;
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    for (const auto& outs : f.consumers[id])
      for (const auto& use : outs) {
        if (use.first > last || reached[use.first]) continue;
        if (watch.count(use.first)) return false;
        reached[use.first] = 1;
        stack.push_back(use.first);
      }
  }
  return true;
}

// Producers that lose all their readers when the match is replaced.
void find_dead_ops(const Compiled& rule, const GraphFacts& f, const Match& m, Plan& plan) {
  std::set<int> removed(m.ops.begin(), m.ops.end());
  std::set<int> kept_by_target;
  for (const PlannedOp& po : plan.ops)
    if (po.present)
      for (const Ref& r : po.inputs)
        if (r.is_var) kept_by_target.insert(m.vars[r.var].op);
  for (const Ref& r : plan.outputs)
    if (r.is_var) kept_by_target.insert(m.vars[r.var].op);
  std::vector<int> work;
  for (int id : m.ops)
    for (const TensorRef& t : f.graph.op(id).inputs) work.push_back(t.op);
  while (!work.empty()) {
    int id = work.back();
    work.pop_back();
    if (removed.count(id) || kept_by_target.count(id) || f.is_output[id]) continue;
    if (f.graph.op(id).type == OpType::kInput) continue;
    bool all_gone = true;
    for (const auto& outs : f.consumers[id])
      for (const auto& use : outs) all_gone = all_gone && removed.count(use.first);
    if (!all_gone) continue;
    removed.insert(id);
    plan.dead.insert(id);
    for (const TensorRef& t : f.graph.op(id).inputs) work.push_back(t.op);
  }
}

bool validate(const Compiled& rule, const GraphFacts& f, Match& m, Plan& plan) {
  return check_shapes_and_constraints(rule, f, m) && internal_tensors_private(rule, f, m) &&
         plan_target(rule, f, m, plan) && creates_no_cycle(rule, f, m, plan);
}

double cost_delta(const Compiled& rule, const GraphFacts& f, const Match& m, const Plan& plan,
                  const CostModel& model) {
  double delta = 0;
  for (int id : m.ops) delta -= f.op_costs[id];
  for (int id : plan.dead) delta -= f.op_costs[id];
  for (const PlannedOp& po : plan.ops) {
    if (!po.present || po.constant) continue;
    std::vector<TensorType> in;
    for (const Ref& r : po.inputs)
      in.push_back(r.is_var ? f.graph.tensor_type(m.vars[r.var]) : plan.ops[r.op].op.outputs[r.index]);
    delta += model.compute_cost_ms(po.op, in);
  }
  (void)rule;
  return delta;
}

Match empty_match(const Compiled& rule) {
  Match m;
  m.ops.assign(rule.source.size(), -1);
  m.vars.assign(rule.var_names.size(), TensorRef{-2, 0});
  return m;
}

}  // namespace

RuleSet::RuleSet(std::vector<RuleSpec> specs) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].id != static_cast<int>(i))
      throw ValueError("rule '" + specs[i].name + "' has id " + std::to_string(specs[i].id) + ", expected " +
                       std::to_string(i) + " (ids are the action indices: 0..n-1 in order)");
    rules_.push_back(std::make_unique<Compiled>(std::move(specs[i])));
  }
}

RuleSet::~RuleSet() = default;
RuleSet::RuleSet(RuleSet&&) noexcept = default;

int RuleSet::size() const { return static_cast<int>(rules_.size()); }

const RuleSpec& RuleSet::spec(int id) const {
  if (id < 0 || id >= size()) throw IndexError("rule id " + std::to_string(id) + " out of range");
  return rules_[id]->spec;
}

std::vector<Candidate> RuleSet::candidates(const Graph& graph, const CostModel& model, int rule_id) const {
  GraphFacts facts(graph, &model);
  std::vector<Candidate> out;
  for (int r = 0; r < size(); ++r) {
    if (rule_id >= 0 && r != rule_id) continue;
    const Compiled& rule = *rules_[r];
    std::set<std::vector<int>> seen;
    Match m = empty_match(rule);
    search_matches(rule, facts, 0, m, nullptr, [&](const Match& found) {
      std::vector<int> key = found.ops;
      std::sort(key.begin(), key.end());
      if (seen.count(key)) return;
      Match mm = found;
      Plan plan;
      if (!validate(rule, facts, mm, plan)) return;
      seen.insert(key);
      find_dead_ops(rule, facts, mm, plan);
      out.push_back({r, found.ops, cost_delta(rule, facts, mm, plan, model)});
    });
  }
  return out;
}

Graph RuleSet::apply(const Graph& graph, int rule_id, const std::vector<int>& location) const {
  const Compiled& rule = *rules_.at(spec(rule_id).id);
  if (location.size() != rule.source.size())
    throw ValueError("rule '" + rule.spec.name + "' matches " + std::to_string(rule.source.size()) +
                     " ops, the location has " + std::to_string(location.size()));
  GraphFacts facts(graph, nullptr);
  Match m = empty_match(rule);
  Plan plan;
  bool ok = false;
  search_matches(rule, facts, 0, m, &location, [&](const Match& found) {
    if (ok) return;
    Match mm = found;
    Plan p;
    if (validate(rule, facts, mm, p)) {
      m = mm;
      plan = std::move(p);
      ok = true;
    }
  });
  if (!ok) throw ValueError("rule '" + rule.spec.name + "' does not apply at this location of the graph");
  find_dead_ops(rule, facts, m, plan);

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
  int total = n + static_cast<int>(plan.ops.size());
  std::vector<std::vector<std::pair<int, int>>> node_inputs(total);
  std::vector<char> exists(total, 0);
  std::vector<std::string> names(total);
  for (int i = 0; i < n; ++i) {
    if (removed[i]) continue;
    exists[i] = 1;
    names[i] = graph.op(i).name;
    for (const TensorRef& t : graph.op(i).inputs) node_inputs[i].push_back(resolve(t));
  }
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    if (!plan.ops[i].present) continue;
    exists[n + i] = 1;
    names[n + i] = plan.ops[i].op.name;
    for (const Ref& r : plan.ops[i].inputs) node_inputs[n + i].push_back(target_node(r));
  }
  // Topological order over existing nodes (old order kept where possible).
  std::vector<int> nodes;
  std::vector<int> index_of(total, -1);
  for (int i = 0; i < total; ++i)
    if (exists[i]) {
      index_of[i] = static_cast<int>(nodes.size());
      nodes.push_back(i);
    }
  std::vector<std::vector<int>> deps(nodes.size());
  std::vector<std::string> dep_names(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) {
    dep_names[k] = names[nodes[k]];
    for (const auto& in : node_inputs[nodes[k]]) {
      if (index_of[in.first] < 0) throw GraphError("rule '" + rule.spec.name + "' left a dangling reference");
      deps[k].push_back(index_of[in.first]);
    }
  }
  std::vector<int> order = topological_sort(deps, dep_names);
  std::vector<int> new_id(total, -1);
  Graph out;
  for (int k : order) {
    int node = nodes[k];
    Op op = node < n ? graph.op(node) : plan.ops[node - n].op;
    if (node >= n) op.name = rule.spec.name + "." + rule.spec.target.ops[node - n].name + "." +
                             std::to_string(out.num_ops());
    op.inputs.clear();
    for (const auto& in : node_inputs[node]) op.inputs.push_back({new_id[in.first], in.second});
    new_id[node] = out.add_typed_op(std::move(op));
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    auto t = resolve(graph.outputs()[i]);
    out.add_output({new_id[t.first], t.second}, graph.output_names()[i]);
  }
  return out;
}

}  // namespace taso
