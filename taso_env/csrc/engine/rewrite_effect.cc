// What a rewrite does to the graph cost and hash, computed from the match and the
// planned target without building the child graph.
//
// The child graph is the parent minus the matched and dead ops plus the present target
// ops, with each source output replaced by its target tensor. Kept ops keep their
// attributes and input types (the target's outputs have the source's types), so their
// costs change only where their constant-ness changes, and their Merkle hashes only
// where an input's hash changes. Both are propagated from the replaced tensors through
// their consumers in op-id (= topological) order, touching only the affected ops.
//
// Where the model prices fused steps (taso/epilogue.h), whether an op runs in another
// op's step depends on its producers, on how many ops read them and on their own
// verdicts, so a kept op near the rewrite can start or stop costing nothing: the kept
// ops that read a replaced tensor, a tensor a removed or target op read, or an op whose
// constant-ness changed, and then the readers of every op whose verdict changed, are
// judged again as the child will have them (FusedStepChild), with the same rule as a
// whole graph, until no verdict changes.
//
// Where the model prices weight residency (taso/weight_residency.h), the GEMV reads the
// rewrite changes are listed: those of the removed GEMVs, of the target's, and of the
// kept GEMMs the propagation reaches whose weight's value or constant-ness changes. A
// weight's value is its producer's Merkle hash, so the hashes of constant ops are
// propagated too (all ops' where the facts carry hashes): the propagation stops at the
// first op that is not constant, whose value is not a weight's.
#include <algorithm>
#include <functional>

#include "fused_step_child.h"
#include "rule_internal.h"

namespace taso {
namespace rule_detail {

Effect rewrite_effect(const Compiled& rule, const GraphFacts& f, const Match& m, const Plan& plan,
                      const CostModel& model, std::vector<int>* footprint) {
  const Graph& g = f.graph;
  Effect e;
  e.child_hash = f.graph_hash;
  std::vector<int> removed(m.ops.begin(), m.ops.end());
  removed.insert(removed.end(), plan.dead.begin(), plan.dead.end());
  std::sort(removed.begin(), removed.end());
  auto is_removed = [&](int id) { return std::binary_search(removed.begin(), removed.end(), id); };
  for (int id : removed) {
    e.cost_units -= f.op_units[id];
    if (f.hashes) e.child_hash -= graph_hash::op_term(f.merkle[id]);
    if (const WeightRead* r = f.residency ? f.residency->read_of(id) : nullptr)
      e.weight_reads.push_back({r->value, r->bytes, -1});
  }
  // The GEMV read of a MatMul / Gemm of the child whose first two inputs are `a` and `b`,
  // of types `types` (count 0: none).
  auto gemv_read = [](const Op& op, const std::vector<TensorType>& types, const TensorKey& a,
                      const TensorKey& b) {
    const int w = gemv_weight_operand(op, types, a.constant, b.constant);
    if (w < 0) return WeightRead{};
    const TensorKey& weight = w == 0 ? a : b;
    return WeightRead{weight_value(weight.hash, weight.index), types[w].num_bytes(), 1};
  };
  auto is_gemm = [](const Op& op) { return op.type == OpType::kMatMul || op.type == OpType::kGemm; };

  // Target ops (their input types and costs alone are the plan's).
  const PlannedTarget& target = *plan.target;
  const std::vector<PlannedOp>& planned = target.ops;
  std::vector<uint64_t> target_hash(planned.size(), 0);
  std::vector<int64_t> target_units(planned.size(), 0);
  auto target_input = [&](const Ref& r) -> TensorKey {  // (hashes: as far as the facts carry them)
    if (!r.is_var) return {target_hash[r.op], r.index, planned[r.op].constant};
    const TensorRef& t = m.vars[r.var];
    return {f.merkle.empty() ? 0 : f.merkle[t.op], t.index, static_cast<bool>(f.constant[t.op])};
  };
  for (size_t i = 0; i < planned.size(); ++i) {
    const PlannedOp& po = planned[i];
    if (!po.present) continue;
    if (f.hashes || (f.value_hashes && po.constant)) {
      uint64_t v = graph_hash::op_local_hash(po.op);
      for (const Ref& r : po.inputs) {
        const TensorKey in = target_input(r);
        v = graph_hash::add_input(v, in.hash, in.index);
      }
      target_hash[i] = v;
      if (f.hashes) e.child_hash += graph_hash::op_term(v);
    }
    if (po.constant) continue;
    const bool priced = target.model == &model;  // (plan_target priced it under the facts' model)
    target_units[i] = priced ? target.units[i] : cost_units(model.compute_cost_ms(po.op, target.input_types[i]));
    if (f.residency && is_gemm(po.op) && po.inputs.size() >= 2) {
      const WeightRead read =
          gemv_read(po.op, target.input_types[i], target_input(po.inputs[0]), target_input(po.inputs[1]));
      if (read.count) e.weight_reads.push_back(read);
    }
  }
  const std::vector<std::vector<TensorType>>& target_types = target.input_types;

  // Replaced tensors: source output -> what the child reads instead.
  std::vector<std::pair<TensorRef, TensorKey>> replaced;
  std::vector<Ref> replaced_by;  // per replaced tensor: the var or target tensor read instead
  for (size_t i = 0; i < rule.source_outputs.size(); ++i) {
    const auto& [sop, sidx] = rule.source_outputs[i];
    const Ref& r = plan.outputs[i];
    TensorKey k;
    k = target_input(r);
    replaced.push_back({TensorRef{m.ops[sop], sidx}, k});
    replaced_by.push_back(r);
  }

  // Downstream ops, in topological order, while something about them changes.
  // Scratch marks in the facts, valid for this generation only: no per-call clearing.
  GraphFacts::Scratch& s = f.scratch;
  const size_t n = g.ops().size();
  if (s.queued.size() != n) {
    s.queued.assign(n, 0);
    s.changed.assign(n, 0);
    s.replaced.assign(n, 0);
    s.hash.assign(n, 0);
    s.constant.assign(n, 0);
    s.recost.assign(n, 0);
    s.footprint.assign(n, 0);
    s.absorbed.assign(n, 0);
  }
  const uint32_t gen = ++s.generation;
  for (const auto& rep : replaced) s.replaced[rep.first.op] = gen;
  auto key_of = [&](const TensorRef& t) -> TensorKey {
    if (s.replaced[t.op] == gen)
      for (const auto& [from, to] : replaced)
        if (from == t) return to;
    if (s.changed[t.op] == gen) return {s.hash[t.op], t.index, static_cast<bool>(s.constant[t.op])};
    return {f.merkle.empty() ? 0 : f.merkle[t.op], t.index, static_cast<bool>(f.constant[t.op])};
  };
  // Ops to revisit are marked; a forward scan over op ids (a topological order) visits
  // them after everything they read, and stops once none is pending.
  int first = static_cast<int>(n), pending = 0;
  std::vector<int> read;  // with a footprint: the kept ops looked at below
  auto mark = [&](int id) {
    if (s.queued[id] != gen && !is_removed(id)) {
      if (footprint) read.push_back(id);
      s.queued[id] = gen;
      first = std::min(first, id);
      ++pending;
    }
  };
  for (const auto& rep : replaced)
    for (const auto& use : f.consumers[rep.first.op][rep.first.index]) mark(use.first);
  std::vector<int> recost;  // kept ops to price again (each once)
  for (int id = first; pending > 0 && id < static_cast<int>(n); ++id) {
    if (s.queued[id] != gen) continue;
    --pending;
    bool all_constant = true;
    for (int k = f.in_start[id]; k < f.in_start[id + 1]; ++k)
      all_constant = all_constant && key_of(f.in_refs[k]).constant;
    bool constant = f.constant_rule[id] == 1 || (f.constant_rule[id] == 2 && all_constant);
    uint64_t v = 0;  // its hash in the child, as far as the facts carry hashes
    if (f.hashes || (f.value_hashes && constant)) {
      v = f.hashes ? f.local_hash[id] : graph_hash::op_local_hash(g.ops()[id]);
      for (int k = f.in_start[id]; k < f.in_start[id + 1]; ++k) {
        const TensorKey key = key_of(f.in_refs[k]);
        v = graph_hash::add_input(v, key.hash, key.index);
      }
    }
    if (f.residency && is_gemm(g.ops()[id]) && f.in_start[id + 1] - f.in_start[id] >= 2) {  // its GEMV read
      const WeightRead* before = f.residency->read_of(id);
      WeightRead after;
      if (!constant) {
        std::vector<TensorType> types;
        for (const TensorRef& t : g.ops()[id].inputs) types.push_back(g.tensor_type(t));
        const int a = f.in_start[id];
        after = gemv_read(g.ops()[id], types, key_of(f.in_refs[a]), key_of(f.in_refs[a + 1]));
      }
      if (!before || !after.count || before->value != after.value) {
        if (before) e.weight_reads.push_back({before->value, before->bytes, -1});
        if (after.count) e.weight_reads.push_back(after);
      }
    }
    bool hash_changed = v != (f.merkle.empty() ? 0 : f.merkle[id]);
    bool constant_changed = constant != static_cast<bool>(f.constant[id]);
    if (!hash_changed && !constant_changed) continue;
    s.changed[id] = gen;
    s.hash[id] = v;
    s.constant[id] = constant;
    if (hash_changed && f.hashes) e.child_hash += graph_hash::op_term(v) - graph_hash::op_term(f.merkle[id]);
    if (constant_changed) recost.push_back(id);
    for (int k = f.out_start[id]; k < f.out_start[id + 1]; ++k) mark(f.out_ops[k]);
  }

  // Costs of the target ops and of the kept ops whose cost can change.
  std::vector<char> target_absorbed(planned.size(), 0);
  if (!f.absorbed.empty()) {
    FusedStepChild child{g, f, m, plan, replaced, replaced_by, removed, gen, target_types, target_absorbed};
    if (footprint) child.judged_by_readers = &read;
    child.judge(recost);
  }
  // The ops read, their producers and their readers (whose verdicts and uses were read):
  // with the removed ops' producers, those whose readers decide which ops die. Not the
  // readers of a source or constant op (readers_decide_nothing): only sole_reader() and
  // runs_in_place() read how many ops read a producer, and both refuse a constant one and
  // one running no kernel of the types they take (an input or weight); and such an op
  // dying under the rewrite costs nothing (weight reads are kept apart: weight_reads).
  if (footprint) {
    read.insert(read.end(), recost.begin(), recost.end());
    read.insert(read.end(), removed.begin(), removed.end());
    for (const TensorRef& t : m.vars)
      if (t.op >= 0) read.push_back(t.op);
    std::vector<int>& fp = *footprint;
    fp.clear();
    auto note = [&](int id) {  // each op once
      if (id >= 0 && s.footprint[id] != gen) {
        s.footprint[id] = gen;
        fp.push_back(id);
      }
    };
    for (int id : read) note(id);
    for (size_t k = 0, read_ops = fp.size(); k < read_ops; ++k) {
      const int id = fp[k];
      for (int j = f.in_start[id]; j < f.in_start[id + 1]; ++j) note(f.in_refs[j].op);
      if (readers_decide_nothing(f, id) && constant_in_child(f, id, gen) == static_cast<bool>(f.constant[id]))
        continue;
      for (int j = f.out_start[id]; j < f.out_start[id + 1]; ++j) note(f.out_ops[j]);
    }
    std::sort(fp.begin(), fp.end());
  }
  for (size_t i = 0; i < planned.size(); ++i)
    if (planned[i].present) e.cost_units += fused_step_units(target_absorbed[i], target_units[i]);
  for (int id : recost) {
    const Op& op = g.ops()[id];
    const bool constant = constant_in_child(f, id, gen);
    int64_t now = f.raw_units[id];
    if (constant != static_cast<bool>(f.constant[id])) {
      now = 0;
      if (!constant && !is_source_op(op.type)) {
        std::vector<TensorType> in;
        for (const TensorRef& t : op.inputs) in.push_back(g.tensor_type(t));
        now = cost_units(model.compute_cost_ms(op, in));
      }
    }
    e.cost_units += (f.absorbed.empty() ? now : fused_step_units(s.absorbed[id], now)) - f.op_units[id];
  }

  // Graph outputs whose tensor was replaced or whose producer's hash changed.
  if (f.hashes) {
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const TensorRef& t = g.outputs()[i];
      TensorKey k = key_of(t);
      if (k.hash == f.merkle[t.op] && k.index == t.index) continue;
      e.child_hash += graph_hash::output_term(f.output_name_hash[i], k.hash, k.index) -
                      graph_hash::output_term(f.output_name_hash[i], f.merkle[t.op], t.index);
    }
  }
  return e;
}

}  // namespace rule_detail
}  // namespace taso
