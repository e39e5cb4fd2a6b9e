// The child graph of a rewrite as the fused-step rules see it, without building it
// (used by rewrite_effect.cc): which step each target op and each kept op near the
// rewrite runs in once the rewrite is applied, judged with the same rules as a whole
// graph (taso/epilogue.h: producer-side verdicts until none changes, then the
// reader-side ones, then the in-place Concats).
#pragma once

#include <algorithm>
#include <vector>

#include "rule_internal.h"

namespace taso {
namespace rule_detail {

// A tensor as the child sees it: its producer's Merkle hash, output index, constant-ness.
struct TensorKey {
  uint64_t hash = 0;
  int index = 0;
  bool constant = false;
};

// Whether kept op `id` is constant in the child (its constant-ness is propagated in this
// generation's scratch marks where it changed).
inline bool constant_in_child(const GraphFacts& f, int id, uint32_t gen) {
  return f.scratch.changed[id] == gen ? f.scratch.constant[id] : f.constant[id];
}

// The child graph as the fused-step rules see it, without building it: a tensor is an
// output of a kept op or of a target op. judge() decides, for the target ops and for
// the kept ops whose verdict can change (added to `recost`), which step they run in in
// the child (target_absorbed; the scratch's absorbed marks).
struct FusedStepChild {
  struct Tensor {
    bool target;
    int op;
    int index;
    bool operator==(const Tensor& o) const { return target == o.target && op == o.op && index == o.index; }
  };

  const Graph& g;
  const GraphFacts& f;
  const Match& m;
  const Plan& plan;
  const std::vector<std::pair<TensorRef, TensorKey>>& replaced;
  const std::vector<Ref>& replaced_by;
  const std::vector<int>& removed;  // sorted
  uint32_t gen;
  const std::vector<std::vector<TensorType>>& target_types;
  std::vector<char>& target_absorbed;
  std::vector<int>* judged_by_readers = nullptr;  // with a footprint: the kept ops judge_by_readers read
  mutable std::vector<TensorType> input_types_;  // describe_*()'s scratch (a kept op's input types are the child's)

  bool removed_op(int id) const { return std::binary_search(removed.begin(), removed.end(), id); }
  Tensor of_ref(const Ref& r) const {
    if (!r.is_var) return {true, r.op, r.index};
    return {false, m.vars[r.var].op, m.vars[r.var].index};
  }
  // What a kept op's input reads in the child.
  Tensor resolve(const TensorRef& t) const {
    if (f.scratch.replaced[t.op] == gen)
      for (size_t j = 0; j < replaced.size(); ++j)
        if (replaced[j].first == t) return of_ref(replaced_by[j]);
    return {false, t.op, t.index};
  }
  int kept_uses(const TensorRef& t) const {
    int n = 0;
    for (const auto& use : f.consumers[t.op][t.index]) n += !removed_op(use.first);
    return n;
  }
  bool graph_output(const Tensor& t) const {
    bool out = !t.target && f.output_tensors.count(TensorRef{t.op, t.index}) > 0;
    for (size_t j = 0; j < replaced.size(); ++j)
      out = out || (of_ref(replaced_by[j]) == t && f.output_tensors.count(replaced[j].first) > 0);
    return out;
  }
  // A kept op's verdict in the child as far as judged (the parent's where not judged).
  Fused kept_verdict(int id) const {
    return static_cast<Fused>(f.scratch.recost[id] == gen ? f.scratch.absorbed[id] : f.absorbed[id]);
  }
  // The producer-side rules read only producer-side verdicts (fused_step_ops judges the
  // reader-side ones last).
  static Fused producer_side(Fused v) {
    return v == Fused::kView || v == Fused::kGemmScale || v == Fused::kChain || v == Fused::kInPlaceConcat
               ? Fused::kNone
               : v;
  }
  static Fused producer_side(char v) { return producer_side(static_cast<Fused>(v)); }

  // Reads of tensor `t` in the child, one per reading input slot.
  int uses_in_child(const Tensor& t) const {
    int n = t.target ? 0 : kept_uses(TensorRef{t.op, t.index});
    for (size_t j = 0; j < replaced.size(); ++j)  // kept readers now reading it instead
      if (of_ref(replaced_by[j]) == t) n += kept_uses(replaced[j].first);
    for (const PlannedOp& po : plan.ops())
      if (po.present)
        for (const Ref& r : po.inputs) n += of_ref(r) == t;
    return n;
  }

  EpilogueFeed feed(const Tensor& t) const {
    EpilogueFeed out;
    if (t.index != 0 || t.op < 0) return out;
    out.uses = uses_in_child(t);
    out.graph_output = graph_output(t);
    if (t.target) {
      out.op = &plan.ops()[t.op].op;
      out.constant = plan.ops()[t.op].constant;
      out.fused = producer_side(static_cast<Fused>(target_absorbed[t.op]));
      describe_kernel(&out, target_types[t.op]);
    } else {
      out.op = &g.ops()[t.op];
      out.constant = constant_in_child(f, t.op, gen);
      out.fused = producer_side(kept_verdict(t.op));
      describe_kernel(&out, g, &input_types_);
    }
    return out;
  }

  void add(int id, std::vector<int>& recost) const {
    if (id < 0 || removed_op(id) || f.scratch.recost[id] == gen || !may_run_fused(g.ops()[id])) return;
    f.scratch.recost[id] = gen;
    f.scratch.absorbed[id] = f.absorbed[id];
    recost.push_back(id);
  }
  void add_readers(const TensorRef& t, std::vector<int>& recost) const {
    if (t.op < 0) return;
    for (const auto& use : f.consumers[t.op][t.index]) add(use.first, recost);
  }
  void add_readers_of(int id, std::vector<int>& recost) const {
    for (int k = f.out_start[id]; k < f.out_start[id + 1]; ++k) add(f.out_ops[k], recost);
  }

  void judge(std::vector<int>& recost) const {
    for (int id : recost) {  // the ops whose constant-ness changed, priced again anyway
      f.scratch.recost[id] = gen;
      f.scratch.absorbed[id] = f.absorbed[id];
    }
    for (size_t k = 0, n = recost.size(); k < n; ++k) add_readers_of(recost[k], recost);
    for (const auto& rep : replaced) add_readers(rep.first, recost);  // their producer changes
    for (int r : removed)  // their producers lose a reader
      for (const TensorRef& t : g.ops()[r].inputs)
        if (!removed_op(t.op)) add_readers(t, recost);
    for (const PlannedOp& po : plan.ops())  // their producers gain one
      if (po.present)
        for (const Ref& r : po.inputs)
          if (r.is_var) add_readers(m.vars[r.var], recost);
    // A verdict depends on the producers' verdicts: judge again until none changes (the
    // graph is acyclic, so this ends with the verdicts of a topological pass), adding the
    // readers of every kept op whose verdict is no longer the parent's.
    std::vector<int> expanded;
    EpilogueFeed feeds[2];
    std::vector<TensorType> in;
    for (bool again = true; again;) {
      again = false;
      for (size_t i = 0; i < plan.ops().size(); ++i) {
        const PlannedOp& po = plan.ops()[i];
        if (!po.present || po.constant) continue;
        feeds[0] = feeds[1] = EpilogueFeed{};
        for (size_t k = 0; k < po.inputs.size() && k < 2; ++k) feeds[k] = feed(of_ref(po.inputs[k]));
        const char v = static_cast<char>(fused_step_of(po.op, target_types[i], feeds));
        again = again || producer_side(v) != producer_side(target_absorbed[i]);
        target_absorbed[i] = v;
      }
      for (size_t k = 0; k < recost.size(); ++k) {
        const int id = recost[k];
        const Op& op = g.ops()[id];
        char v = 0;
        if (!constant_in_child(f, id, gen)) {
          feeds[0] = feeds[1] = EpilogueFeed{};
          in.clear();
          for (size_t j = 0; j < op.inputs.size(); ++j) {
            in.push_back(g.tensor_type(op.inputs[j]));
            if (j < 2) feeds[j] = feed(resolve(op.inputs[j]));
          }
          v = static_cast<char>(fused_step_of(op, in, feeds));
        }
        again = again || producer_side(v) != producer_side(f.scratch.absorbed[id]);
        f.scratch.absorbed[id] = v;
      }
      const size_t judged = recost.size();
      for (size_t k = 0; k < judged; ++k) {
        const int id = recost[k];
        if (producer_side(f.scratch.absorbed[id]) == producer_side(f.absorbed[id]) ||
            std::find(expanded.begin(), expanded.end(), id) != expanded.end())
          continue;
        expanded.push_back(id);
        add_readers_of(id, recost);
      }
      again = again || recost.size() > judged;
    }
    judge_by_readers(recost);
    judge_concats(recost);
  }

  // What runs_in_place() needs of the producer of `t` in the child.
  ConcatFeed concat_feed(const Tensor& t) const {
    ConcatFeed c;
    if (t.op < 0) return c;
    if (t.target) {
      const PlannedOp& po = plan.ops()[t.op];
      c.op = &po.op;
      c.constant = po.constant;
      c.alias = !target_types[t.op].empty() && is_alias(po.op, target_types[t.op][0]);
      c.view = static_cast<Fused>(target_absorbed[t.op]) == Fused::kView;
    } else {
      const Op& p = g.ops()[t.op];
      c.op = &p;
      c.constant = constant_in_child(f, t.op, gen);
      c.alias = !p.inputs.empty() && is_alias(p, g.tensor_type(p.inputs[0]));
      c.view = kept_verdict(t.op) == Fused::kView;
    }
    c.uses = uses_in_child(t);
    c.graph_output = graph_output(t);
    return c;
  }

  // The Concats that run no kernel (judged last, as in fused_step_ops): the target ones,
  // and the kept ones reading a tensor whose producer, readers or producer's verdict or
  // constant-ness may have changed (added to `recost` where their verdict is no longer
  // the parent's).
  void judge_concats(std::vector<int>& recost) const {
    std::vector<ConcatFeed> inputs;
    for (size_t i = 0; i < plan.ops().size(); ++i) {
      const PlannedOp& po = plan.ops()[i];
      if (!po.present || po.constant || po.op.type != OpType::kConcat) continue;
      inputs.clear();
      for (const Ref& r : po.inputs) inputs.push_back(concat_feed(of_ref(r)));
      target_absorbed[i] = runs_in_place(po.op, target_types[i], inputs) ? static_cast<char>(Fused::kInPlaceConcat) : 0;
    }
    std::vector<int> cands;
    auto consider_readers = [&](const TensorRef& t) {
      if (t.op < 0) return;
      for (const auto& use : f.consumers[t.op][t.index])
        if (!removed_op(use.first) && g.ops()[use.first].type == OpType::kConcat) cands.push_back(use.first);
    };
    auto consider_readers_of = [&](int id) {
      for (int k = f.out_start[id]; k < f.out_start[id + 1]; ++k)
        if (!removed_op(f.out_ops[k]) && g.ops()[f.out_ops[k]].type == OpType::kConcat) cands.push_back(f.out_ops[k]);
    };
    for (int id : recost) {
      if (g.ops()[id].type == OpType::kConcat) cands.push_back(id);
      consider_readers_of(id);
    }
    for (const auto& rep : replaced) consider_readers(rep.first);
    for (int r : removed)
      for (const TensorRef& t : g.ops()[r].inputs)
        if (!removed_op(t.op)) consider_readers(t);
    for (const PlannedOp& po : plan.ops())
      if (po.present)
        for (const Ref& r : po.inputs)
          if (r.is_var) consider_readers(m.vars[r.var]);
    settle(cands);
    std::vector<TensorType> in;
    for (int id : cands) {
      const Op& op = g.ops()[id];
      char v = 0;
      if (!constant_in_child(f, id, gen)) {
        in.clear();
        inputs.clear();
        for (const TensorRef& t : op.inputs) {
          in.push_back(g.tensor_type(t));
          inputs.push_back(concat_feed(resolve(t)));
        }
        v = runs_in_place(op, in, inputs) ? static_cast<char>(Fused::kInPlaceConcat) : 0;
      }
      if (f.scratch.recost[id] != gen) {
        if (v == f.absorbed[id]) continue;
        f.scratch.recost[id] = gen;
        recost.push_back(id);
      }
      f.scratch.absorbed[id] = v;
    }
  }

  // Sorts the kept ops about to be judged again, drops repeats and, with a footprint,
  // records them as read.
  void settle(std::vector<int>& cands) const {
    std::sort(cands.begin(), cands.end());
    cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
    if (judged_by_readers) judged_by_readers->insert(judged_by_readers->end(), cands.begin(), cands.end());
  }

  // The ops that read output 0 of `t` in the child, with what the reader rules need.
  void readers_of(const Tensor& t, std::vector<ReaderFeed>& out) const {
    out.clear();
    auto kept_reader = [&](int id) {
      ReaderFeed r{&g.ops()[id], producer_side(kept_verdict(id))};
      describe_reader(&r, g, &input_types_);
      out.push_back(r);
    };
    auto kept_readers = [&](const TensorRef& ref) {
      for (const auto& use : f.consumers[ref.op][ref.index])
        if (!removed_op(use.first)) kept_reader(use.first);
    };
    if (!t.target) kept_readers(TensorRef{t.op, t.index});
    for (size_t j = 0; j < replaced.size(); ++j)
      if (of_ref(replaced_by[j]) == t) kept_readers(replaced[j].first);
    for (size_t i = 0; i < plan.ops().size(); ++i) {
      const PlannedOp& po = plan.ops()[i];
      if (!po.present) continue;
      for (const Ref& r : po.inputs)
        if (of_ref(r) == t) {
          ReaderFeed rf{&po.op, producer_side(target_absorbed[i])};
          describe_reader(&rf, target_types[i]);
          out.push_back(rf);
        }
    }
  }
  bool constant_scalar(const Tensor& t, const TensorType& type) const {
    if (t.op < 0) return false;
    return is_constant_scalar(t.target ? plan.ops()[t.op].op : g.ops()[t.op], type);
  }

  // The ops judged by their readers (taso/epilogue.h), once every producer-side verdict
  // is known: the target ops, and the kept ops whose readers or whose readers' verdicts
  // may have changed (added to `recost` where their verdict is no longer the parent's).
  void judge_by_readers(std::vector<int>& recost) const {
    std::vector<ReaderFeed> readers;
    for (size_t i = 0; i < plan.ops().size(); ++i) {
      const PlannedOp& po = plan.ops()[i];
      if (!po.present || po.constant || target_absorbed[i] || !may_run_in_reader(po.op)) continue;
      bool scalar[2] = {false, false};
      for (size_t k = 0; k < po.inputs.size() && k < 2; ++k)
        scalar[k] = constant_scalar(of_ref(po.inputs[k]), target_types[i][k]);
      const Tensor self{true, static_cast<int>(i), 0};
      readers_of(self, readers);
      target_absorbed[i] = static_cast<char>(fused_by_readers(po.op, target_types[i], scalar, graph_output(self), readers));
    }
    std::vector<int> cands;
    auto consider = [&](int id) {
      if (id >= 0 && !removed_op(id) && may_run_in_reader(g.ops()[id])) cands.push_back(id);
    };
    for (int id : recost) {
      consider(id);
      for (const TensorRef& t : g.ops()[id].inputs) {  // their readers' verdicts may have changed
        const Tensor p = resolve(t);
        if (!p.target) consider(p.op);
      }
    }
    for (const auto& rep : replaced)  // an input changes (a scale's factor may no longer be known)
      for (const auto& use : f.consumers[rep.first.op][rep.first.index]) consider(use.first);
    for (int r : removed)  // they lose a reader
      for (const TensorRef& t : g.ops()[r].inputs) consider(t.op);
    for (const PlannedOp& po : plan.ops())  // they gain one
      if (po.present)
        for (const Ref& r : po.inputs)
          if (r.is_var) consider(m.vars[r.var].op);
    settle(cands);
    std::vector<TensorType> in;
    for (int id : cands) {
      const Op& op = g.ops()[id];
      if (op.outputs.size() != 1 || constant_in_child(f, id, gen)) continue;
      if (producer_side(kept_verdict(id)) != Fused::kNone) continue;  // a producer-side step
      in.clear();
      bool scalar[2] = {false, false};
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        in.push_back(g.tensor_type(op.inputs[k]));
        if (k < 2) scalar[k] = constant_scalar(resolve(op.inputs[k]), in.back());
      }
      const Tensor self{false, id, 0};
      readers_of(self, readers);
      const char v = static_cast<char>(fused_by_readers(op, in, scalar, graph_output(self), readers));
      if (f.scratch.recost[id] != gen) {
        if (v == f.absorbed[id]) continue;
        f.scratch.recost[id] = gen;
        recost.push_back(id);
      }
      f.scratch.absorbed[id] = v;
    }
  }
};

}  // namespace rule_detail
}  // namespace taso
