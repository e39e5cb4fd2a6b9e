// Substitution rules: a source pattern, a target pattern, constraints and an output
// mapping, given as data (taso_env/rules/*.json, parsed in Python) and applied here.
//
// Pattern references. Inside a pattern an input is a string:
//   "conv"   output 0 of the pattern op named conv     "split:1"  its output 1
//   "x"      a free variable: any tensor of the graph   "b?"       an optional trailing
//            input (the matched op may lack it). In the target, an input "b?" is dropped
//            when b is absent, an input "b" drops the whole op (and ops reading it).
// Expressions (attribute values, shape dims, constraints):
//   literal ints / floats; "$k" a value variable (bound on first use, compared after);
//   "_" matches anything; a call {"fn": [args]} with fn in: list, add, sub, mul,
//   floordiv, neg, sum, len, shape(t), dim(t, i), rank(t), present(t), compose_perm,
//   inverse_perm, is_identity_perm, eq, ne, lt, le, gt, ge, and, or, not.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "taso/cost_model.h"
#include "taso/graph.h"
#include "taso/weight_residency.h"

namespace taso {

struct Expr {
  enum Kind : int { kInts = 0, kFloat = 1, kValueVar = 2, kTensor = 3, kWildcard = 4, kCall = 5 };
  int kind = kInts;
  std::vector<int64_t> ints;  // kInts (a scalar is a list of one)
  double number = 0.0;        // kFloat
  std::string name;           // variable, tensor reference or function name
  std::vector<Expr> args;     // kCall
};

struct PatternOp {
  std::string name;
  std::string type;
  std::vector<std::string> inputs;
  std::map<std::string, Expr> attrs;
};

struct Pattern {
  std::vector<PatternOp> ops;
  std::vector<std::string> outputs;
};

struct RuleSpec {
  int id = -1;
  std::string name;
  Pattern source;
  Pattern target;
  std::map<std::string, std::vector<Expr>> shapes;  // tensor reference -> dim patterns
  std::vector<Expr> constraints;
};

// A place where a rule applies: the graph ops matched by the source pattern's ops, in
// pattern order, and the change of the graph cost if applied: exact, in cost units
// (kCostUnitMs), and in ms. `child_hash` is the applied graph's hash() when asked for.
// `footprint` (recorded by enumeration() and step()): the ops whose facts its cost delta
// was computed from (its ops, the ops it makes dead, the ops whose cost, constant-ness or
// fused-step verdict it changes or judges again, and their producers and readers),
// sorted. After another rewrite that changed none of them (RuleSet::step, successors),
// its cost delta stands. `planned` (recorded with the footprint): the target it was
// priced with, reused where a later rewrite prices it again (RuleSet::delta_at).
// Where the model prices weight residency (taso/weight_residency.h), the cost delta is
// `base_delta_units` (the change of the ops' own costs: what the footprint decides) plus
// the change of the graph's residency term that `weight_reads` (the GEMV reads the
// rewrite adds and removes) make, priced against the graph's reads each time a list of
// candidates is made: a rewrite elsewhere changes the term's price of the same reads.
namespace rule_detail {
struct PlannedTarget;
}
struct Candidate {
  int rule_id = -1;
  std::vector<int> location;
  double cost_delta = 0.0;
  int64_t cost_delta_units = 0;
  uint64_t child_hash = 0;
  std::vector<int> footprint;
  std::shared_ptr<const rule_detail::PlannedTarget> planned;
  int64_t base_delta_units = 0;
  std::vector<WeightRead> weight_reads;
};

// What one rewrite leads to, for looking one step ahead (RuleSet::successors): the
// successor graph's hash and the best (most negative) cost delta among its candidates.
struct Successor {
  uint64_t child_hash = 0;
  bool has_candidates = false;
  int64_t best_delta_units = 0;
  double best_delta = 0.0;  // ms
};

// Every valid candidate of a graph, listed as a full enumeration finds them, sorted by
// rule and location, with what it takes to list those of a graph one rewrite further
// without enumerating it whole (RuleSet::step, enumeration.cc): the bindings a full
// enumeration finds and rejects only because their rewrite would close a cycle (a
// rewrite elsewhere can open it). Cost deltas of cycle_rejected are unset.
namespace rule_detail {
struct GraphFacts;
struct Rewritten;
}

// `facts`: what step() and successors() need of the enumerated graph, kept from the
// enumeration or step that made it (they refer to that graph: it must outlive them).
struct Enumeration {
  std::vector<Candidate> candidates;
  std::vector<Candidate> cycle_rejected;
  std::shared_ptr<const rule_detail::GraphFacts> facts;
};

class RuleSet {
 public:
  // Checks every spec (op types, references, expressions); throws ValueError naming
  // the rule. Rule ids must be 0..n-1 in order (the id is the action index).
  explicit RuleSet(std::vector<RuleSpec> specs);
  ~RuleSet();
  RuleSet(RuleSet&&) noexcept;

  int size() const;
  const RuleSpec& spec(int id) const;

  // Every valid (rule, location) of `graph` (all rules, or only `rule_id`), each with its
  // exact cost delta under `model` and, with `child_hashes`, the hash of the graph it
  // leads to. No candidate graph is materialised. Rules are looked up by the op type of
  // their first-matched pattern op, so rules whose anchor type is absent cost nothing.
  std::vector<Candidate> candidates(const Graph& graph, const CostModel& model, int rule_id = -1,
                                    bool child_hashes = false) const;
  // Materialises one candidate. Throws ValueError if it does not apply to `graph`.
  Graph apply(const Graph& graph, int rule_id, const std::vector<int>& location) const;

  // For each candidate current.candidates[w], w in `which` (`current`: enumeration(graph,
  // model) or a step's), the graph it leads to and the best cost delta among that graph's
  // candidates, without enumerating the whole successor (successor.cc): matches holding
  // an op the rewrite changed are enumerated afresh, the rest are current's candidates carried
  // over: those whose footprint the rewrite changed priced again, of the others the best
  // checked again at its place in the successor.
  std::vector<Successor> successors(const Graph& graph, const CostModel& model, const Enumeration& current,
                                    const std::vector<int>& which) const;

  // The candidates of `graph` (as candidates() finds them, sorted by rule and location)
  // and its cycle-rejected bindings.
  Enumeration enumeration(const Graph& graph, const CostModel& model) const;
  // What model.op_costs_ms(graph) gives, read from `current`'s facts where they hold it
  // (`current` enumerated `graph` under `model`, a model with fused steps: every op priced
  // in cost units there, exactly as op_costs_ms prices it), else computed by the model.
  static std::vector<double> op_costs_ms(const Graph& graph, const CostModel& model, const Enumeration& current);
  // Applies current.candidates[which] to `graph` (whose enumeration `current` is) and
  // returns the graph it leads to; `next` becomes that graph's enumeration, equal to
  // enumeration(result, model), found by enumerating only the matches holding an op the
  // rewrite changed.
  std::unique_ptr<Graph> step(const Graph& graph, const CostModel& model, const Enumeration& current, int which,
                              Enumeration* next) const;

  struct Compiled;  // a checked, pre-processed rule (rule_internal.h)

 private:
  // apply() on the graph of `facts`; with `new_id`, also says where each op went (-1:
  // removed) and, with `added`, which ops of the result the target built.
  Graph apply_to(const rule_detail::GraphFacts& facts, int rule_id, const std::vector<int>& location,
                 std::vector<int>* new_id, std::vector<int>* added) const;
  // The candidates of the graph of `facts` (all rules or `rule_id`); with `change` (the
  // rewrite that made that graph), only matches holding an op it changed
  // (touches_change), searched from the anchors within near_radius(rule) of a changed op
  // of a type the rule's source has, each as the binding of its ops a full enumeration
  // lists. With `rejected`, also the bindings
  // found and rejected only for closing a cycle. With `footprints`, each candidate's
  // footprint and planned target are recorded (for carrying it through a rewrite).
  std::vector<Candidate> enumerate(const rule_detail::GraphFacts& facts, const CostModel& model, int rule_id,
                                   const rule_detail::Rewritten* change, std::vector<Candidate>* rejected = nullptr,
                                   bool footprints = false) const;
  // `graph` with cands[w] applied, its facts (unchanged ops keep their costs), the ops
  // the rewrite changed and every op's hops from them (up to max_near_radius(); -1 farther).
  rule_detail::Rewritten rewrite(const rule_detail::GraphFacts& parent, const CostModel& model,
                                 const Candidate& c) const;
  // Where a candidate of the parent lands in `rw`'s child (its ops mapped into `at`):
  // the rewrite removed some of its ops, it is found afresh (it holds a changed op),
  // it is carried over but priced again (the rewrite changed an op of its footprint), or
  // carried as is.
  enum class Carried { kRemoved, kNear, kRepriced, kFar };
  Carried carried(const rule_detail::Rewritten& rw, const Candidate& c, std::vector<int>* at) const;
  // A carried-over candidate's footprint, as ids of `rw`'s child (sorted).
  static std::vector<int> moved_footprint(const rule_detail::Rewritten& rw, const Candidate& c);
  // The valid binding of the ops `key` (sorted) a full enumeration keeps, with its cost
  // delta, and (appended to `rejected`) the bindings of them it rejects before it for
  // closing a cycle; false if none is valid (rule.cc).
  bool kept_binding(const rule_detail::GraphFacts& facts, const CostModel& model, int rule_id,
                    const std::vector<int>& key, Candidate* kept, std::vector<Candidate>* rejected) const;
  // How far from a changed op a rule's match holding it can have its first-matched op
  // (successor.cc): anchor_reach of its source pattern.
  int near_radius(int rule_id) const;
  int max_near_radius() const;
  // The facts of `graph` under `model`: `current`'s where they are that graph's, else built.
  static std::shared_ptr<const rule_detail::GraphFacts> facts_of(const Graph& graph, const CostModel& model,
                                                                 const Enumeration& current);
  // Throws ValueError unless every candidate is of a rule of this set, at ops of `graph`.
  void check_candidates_of(const Graph& graph, const std::vector<Candidate>& cands) const;
  // The cost delta of `c`, a candidate of the parent graph carried over to `location` in
  // the graph of `facts` (successor.cc: its ops keep their inputs and readers), set in
  // `priced` (cost delta, base delta, weight reads; with `record`, also its footprint and
  // planned target; `priced` may be `c`), or false if its rewrite closes a cycle there.
  // Its binding and, but for the cycle check, its validity are the parent's, so where the
  // tensors its target reads keep their constant-ness its planned target is reused
  // instead of matched and planned again.
  bool delta_at(const rule_detail::GraphFacts& facts, const CostModel& model, const Candidate& c,
                const std::vector<int>& location, Candidate* priced, bool record = false) const;

  std::vector<std::unique_ptr<Compiled>> rules_;
  std::vector<std::vector<int>> rules_by_anchor_;  // op type -> rule ids anchored on it
  // Rules with the same source pattern share one match enumeration per candidates()
  // call: match_group_[r] is the first rule id with r's source pattern.
  std::vector<int> match_group_;
  // Per rule: some two of its source ops have one type, so one set of graph ops can be
  // bound to it in more than one way (which one is kept depends on the search order).
  std::vector<char> rebindable_;
  // Per rule: the op types of its source's ops (bit 1 << type; kNumOpTypes <= 64).
  std::vector<uint64_t> source_types_;
  std::vector<int> near_radius_;  // per rule (near_radius)
  int max_near_radius_ = 0;       // the largest near_radius of any rule
};

}  // namespace taso
