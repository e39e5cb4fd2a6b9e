// Pattern matching and target planning for compiled rules.
//
// Matching is a small backtracking search over the source pattern's ops, each new op
// reached from those already matched (the producer of a matched input, or a consumer
// of a bound tensor), so it touches only the neighbourhood of each anchor op. A match
// is offered only if replacing it is sound: internal tensors are not used elsewhere,
// the target builds with the same output types, and no cycle is created.
#include <deque>

#include "rule_internal.h"

namespace taso {
namespace rule_detail {


TensorRef graph_tensor(const Compiled& /*rule*/, const Match& m, const Ref& r) {
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
      if (kv.second.kind == Expr::kWildcard) continue;
      if (kv.second.kind == Expr::kInts) {  // a literal: compared as is, no copy of the value
        if (ints->second != kv.second.ints) return false;
        continue;
      }
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

// Graph ops that could match pattern op `p` given what is matched so far: a pointer to
// a list of the graph's facts, or `buffer` filled.
const std::vector<int>* op_choices(const Compiled& rule, const GraphFacts& f, int p, const Match& m,
                                   std::vector<int>& buffer) {
  buffer.clear();
  // The producer of a matched op's input.
  for (size_t q = 0; q < rule.source.size(); ++q) {
    if (m.ops[q] < 0) continue;
    const Op& other = f.graph.op(m.ops[q]);
    const auto& ins = rule.source[q].inputs;
    for (size_t slot = 0; slot < ins.size() && slot < other.inputs.size(); ++slot)
      if (!ins[slot].is_var && ins[slot].op == p) {
        buffer.push_back(other.inputs[slot].op);
        return &buffer;
      }
  }
  // A consumer of a bound tensor.
  const auto& ins = rule.source[p].inputs;
  for (size_t slot = 0; slot < ins.size(); ++slot) {
    TensorRef t{-2, 0};
    if (ins[slot].is_var) t = m.vars[ins[slot].var];
    else if (m.ops[ins[slot].op] >= 0) t = {m.ops[ins[slot].op], ins[slot].index};
    if (t.op < 0) continue;
    for (const auto& [consumer, cslot] : f.consumers[t.op][t.index])
      if (cslot == static_cast<int>(slot)) buffer.push_back(consumer);
    return &buffer;
  }
  return &f.ops_by_type[static_cast<int>(rule.source[p].type)];
}

namespace {

// Storage search_matches reuses from call to call: one choice list and one match per
// level of nesting (a level counts every active call, so a search started from inside
// another's callback gets levels of its own). Deques: growing keeps references valid.
struct SearchScratch {
  std::deque<std::vector<int>> choices;
  std::deque<Match> matches;
  size_t level = 0;
};
thread_local SearchScratch search_scratch;

struct ScratchLevel {  // the calling search's level, released however the call ends
  size_t at;
  ScratchLevel() : at(search_scratch.level++) {
    if (search_scratch.choices.size() <= at) {
      search_scratch.choices.emplace_back();
      search_scratch.matches.emplace_back();
    }
  }
  ~ScratchLevel() { --search_scratch.level; }
};

}  // namespace

void search_matches(const Compiled& rule, const GraphFacts& f, size_t step, Match& m,
                    const std::vector<int>* fixed, const std::function<void(const Match&)>& found,
                    const std::vector<int>* first) {
  if (step == rule.order.size()) {
    found(m);
    return;
  }
  int p = rule.order[step];
  ScratchLevel level;
  std::vector<int>& buffer = search_scratch.choices[level.at];
  const std::vector<int>* choices = nullptr;
  if (fixed) {
    buffer.assign(1, (*fixed)[p]);
    choices = &buffer;
  } else {
    choices = step == 0 && first ? first : op_choices(rule, f, p, m, buffer);
  }
  Match& next = search_scratch.matches[level.at];  // assigned again (its storage reused) per choice
  for (int id : *choices) {
    if (id < 0 || id >= f.graph.num_ops()) continue;
    if (f.graph.ops()[id].type != rule.source[p].type) continue;  // cheap test before copying the match
    next = m;
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
  // a free variable bound to a tensor made inside the match would dangle once the match
  // is replaced (Add(Div(a, c), b) with b the Div itself)
  for (const TensorRef& v : m.vars)
    if (v.op >= 0 && std::find(m.ops.begin(), m.ops.end(), v.op) != m.ops.end()) return false;
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

bool planned_constant(const PlannedOp& po, const std::vector<PlannedOp>& ops, const GraphFacts& f,
                      const Match& m) {
  bool all_constant = true;
  for (const Ref& r : po.inputs)
    all_constant = all_constant && (r.is_var ? f.constant[m.vars[r.var].op] : ops[r.op].constant);
  return is_constant_op(po.op.type, !po.inputs.empty(), all_constant);
}

// Builds the target against the match (priced by the facts' model, if any); false if it
// is invalid (shape or type errors).
bool plan_target(const Compiled& rule, const GraphFacts& f, const Match& m, Plan& plan) {
  MatchTensors tensors(rule, m, f.graph);
  const auto& tops = rule.spec.target.ops;
  auto target = std::make_shared<PlannedTarget>();
  std::vector<PlannedOp>& ops = target->ops;
  ops.resize(tops.size());
  target->input_types.resize(tops.size());
  for (size_t i = 0; i < tops.size(); ++i) {
    PlannedOp& po = ops[i];
    po.op.type = rule.target_types[i];
    po.op.name = rule.spec.name + "." + tops[i].name;
    std::vector<TensorType>& in_types = target->input_types[i];
    for (const Ref& r : rule.target_inputs[i]) {
      bool absent = r.is_var ? m.vars[r.var].op < 0 : !ops[r.op].present;
      if (absent) {
        if (r.optional) continue;  // "name?": drop the input
        po.present = false;        // "name": drop the op
        break;
      }
      if (r.is_var) {
        in_types.push_back(f.graph.tensor_type(m.vars[r.var]));
      } else {
        const auto& outs = ops[r.op].op.outputs;
        if (r.index >= static_cast<int>(outs.size())) return false;
        in_types.push_back(outs[r.index]);
      }
      po.inputs.push_back(r);
    }
    if (!po.present) {
      in_types.clear();
      continue;
    }
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
    po.constant = planned_constant(po, ops, f, m);
  }
  plan.outputs = rule.target_outputs;
  for (size_t i = 0; i < rule.source_outputs.size(); ++i) {
    const auto& [sop, sidx] = rule.source_outputs[i];
    const TensorType& want = f.graph.op(m.ops[sop]).outputs[sidx];
    const Ref& r = plan.outputs[i];
    if (r.is_var) {
      TensorRef t = m.vars[r.var];
      if (t.op < 0 || !(f.graph.tensor_type(t) == want)) return false;
    } else if (!ops[r.op].present || r.index >= static_cast<int>(ops[r.op].op.outputs.size()) ||
               !(ops[r.op].op.outputs[r.index] == want)) {
      return false;
    }
  }
  if (f.model) {
    target->model = f.model;
    target->units.assign(ops.size(), 0);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].present && !ops[i].constant)
        target->units[i] = cost_units(f.model->compute_cost_ms(ops[i].op, target->input_types[i]));
  }
  plan.target = std::move(target);
  return true;
}

// No free-variable tensor that the target reads may depend on a matched op.
bool creates_no_cycle(const Compiled& /*rule*/, const GraphFacts& f, const Match& m, const Plan& plan) {
  int first = *std::min_element(m.ops.begin(), m.ops.end());
  std::set<int> watch;
  bool reads_matched = false;  // a free variable bound to a matched op's output
  auto consider = [&](const Ref& r) {
    if (!r.is_var) return;
    int op = m.vars[r.var].op;
    if (std::find(m.ops.begin(), m.ops.end(), op) != m.ops.end()) reads_matched = true;
    if (op > first) watch.insert(op);
  };
  for (const PlannedOp& po : plan.ops())
    if (po.present)
      for (const Ref& r : po.inputs) consider(r);
  for (const Ref& r : plan.outputs) consider(r);
  if (reads_matched) return false;  // the target would read an op the rewrite removes
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
void find_dead_ops(const Compiled& /*rule*/, const GraphFacts& f, const Match& m, Plan& plan) {
  std::set<int> removed(m.ops.begin(), m.ops.end());
  std::set<int> kept_by_target;
  for (const PlannedOp& po : plan.ops())
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

bool validate_but_cycle(const Compiled& rule, const GraphFacts& f, Match& m, Plan& plan) {
  return check_shapes_and_constraints(rule, f, m) && internal_tensors_private(rule, f, m) &&
         plan_target(rule, f, m, plan);
}

bool validate(const Compiled& rule, const GraphFacts& f, Match& m, Plan& plan) {
  return validate_but_cycle(rule, f, m, plan) && creates_no_cycle(rule, f, m, plan);
}

Match empty_match(const Compiled& rule) {
  Match m;
  m.ops.assign(rule.source.size(), -1);
  m.vars.assign(rule.var_names.size(), TensorRef{-2, 0});
  return m;
}

Match match_of(const Compiled& rule, const Graph& g, const std::vector<int>& location) {
  Match m = empty_match(rule);
  m.ops = location;
  for (size_t p = 0; p < rule.source.size(); ++p) {
    const auto& inputs = g.op(location[p]).inputs;
    for (size_t slot = 0; slot < rule.source[p].inputs.size(); ++slot) {
      const Ref& r = rule.source[p].inputs[slot];
      if (!r.is_var) continue;
      if (slot < inputs.size()) m.vars[r.var] = inputs[slot];
      else if (m.vars[r.var].op == -2) m.vars[r.var] = {-1, 0};  // an absent optional input
    }
  }
  return m;
}


}  // namespace rule_detail
}  // namespace taso
