// Element-wise chain planning and the host side of the fused kernel (see
// elementwise_fusion.h and kernels_fused.h): which ops form each chain, and the program
// (instructions, input access modes, launch variant) that one step runs.
#include "elementwise_fusion.h"

#include "taso/epilogue.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels_fused.h"
#include "taso/types.h"

namespace taso {
namespace cuda {
namespace {

constexpr int64_t kIndex32Limit = int64_t{1} << 31;

using Ref = std::pair<int, int>;  // a TensorRef as a set key: (op, output index)

Ref key(const TensorRef& r) { return {r.op, r.index}; }

std::string label(const Op& op) { return op_type_name(op.type) + " op '" + op.name + "'"; }

// The instruction an element-wise op type runs as; false for every other type.
bool instruction_of(OpType type, FusedOp* code) {
  switch (type) {
    case OpType::kAdd: *code = FusedOp::kAdd; return true;
    case OpType::kSub: *code = FusedOp::kSub; return true;
    case OpType::kMul: *code = FusedOp::kMul; return true;
    case OpType::kDiv: *code = FusedOp::kDiv; return true;
    case OpType::kRelu: *code = FusedOp::kRelu; return true;
    case OpType::kSigmoid: *code = FusedOp::kSigmoid; return true;
    case OpType::kTanh: *code = FusedOp::kTanh; return true;
    case OpType::kErf: *code = FusedOp::kErf; return true;
    case OpType::kGelu: *code = FusedOp::kGelu; return true;
    case OpType::kSqrt: *code = FusedOp::kSqrt; return true;
    case OpType::kExp: *code = FusedOp::kExp; return true;
    case OpType::kClip: *code = FusedOp::kClip; return true;
    case OpType::kHardSigmoid: *code = FusedOp::kHardSigmoid; return true;
    case OpType::kHardSwish: *code = FusedOp::kHardSwish; return true;
    default: return false;
  }
}

// The element-wise ops and softmaxes a chain can evaluate: the pricing's rule
// (taso/epilogue.h).
std::vector<TensorType> input_types(const Graph& graph, int id) {
  std::vector<TensorType> in;
  for (const TensorRef& r : graph.op(id).inputs) in.push_back(graph.tensor_type(r));
  return in;
}
bool chain_op(const Graph& graph, int id) {
  FusedOp code;
  return instruction_of(graph.op(id).type, &code) && chain_elementwise(graph.op(id), input_types(graph, id));
}
bool last_axis_softmax(const Graph& graph, int id) {
  return taso::last_axis_softmax(graph.op(id), input_types(graph, id));
}

// The order the kernel evaluates a chain's ops in: depth-first from the chain's result,
// each op right after the operands it reads from the chain (in input order). It is a
// topological order, and for tree-shaped chains it keeps the fewest values waiting for a
// later reader (id order would compute every branch of x * a + x * b + ... first).
// `ops` in id order; its last op is the chain's result, which every op feeds.
std::vector<int> program_order(const Graph& graph, const std::vector<int>& ops) {
  const std::set<int> members(ops.begin(), ops.end());
  std::set<int> visited;
  std::vector<int> order;
  std::function<void(int)> visit = [&](int id) {
    if (!visited.insert(id).second) return;
    for (const TensorRef& r : graph.op(id).inputs)
      if (r.index == 0 && members.count(r.op)) visit(r.op);
    order.push_back(id);
  };
  if (!ops.empty()) visit(ops.back());
  return order;
}

// Lowers a chain's SSA values onto the kernel's registers: instruction k + 1 reads value
// k from the accumulator; a value read by any later instruction is also kept in a saved
// slot ((*slot)[k], -1 for none), which is free again once its last reader has run (an
// instruction reads its operands before it saves its result). `order` is the program
// order. Returns the number of slots used.
int assign_saved_slots(const Graph& graph, const std::vector<int>& order, std::vector<int>* slot) {
  const int n = static_cast<int>(order.size());
  std::map<int, int> position;
  for (int k = 0; k < n; ++k) position[order[k]] = k;
  std::vector<int> last_reader(n, -1);  // the last reader that needs the saved copy
  for (int k = 0; k < n; ++k)
    for (const TensorRef& r : graph.op(order[k]).inputs) {
      auto it = position.find(r.op);
      if (r.index == 0 && it != position.end() && it->second < k - 1)
        last_reader[it->second] = std::max(last_reader[it->second], k);
    }
  slot->assign(n, -1);
  std::vector<int> busy_until;  // per slot: the last reader of the value it holds
  for (int k = 0; k < n; ++k) {
    if (last_reader[k] < 0) continue;
    size_t s = 0;
    while (s < busy_until.size() && busy_until[s] > k) ++s;
    if (s == busy_until.size()) busy_until.push_back(0);
    busy_until[s] = last_reader[k];
    (*slot)[k] = static_cast<int>(s);
  }
  return static_cast<int>(busy_until.size());
}

// A chain while planning (ops are added from the last backwards).
struct Draft {
  std::vector<int> ops;
  int softmax = -1;
  int last = -1;
  std::vector<int64_t> shape;  // every op's output shape
  std::set<Ref> inputs;        // what the ops read from outside the chain
};

// Whether op `id` (whose readers are all in `d`) can join `d` within the kernel's
// limits; if so, the chain's inputs with it are left in `inputs`.
bool fits(const Graph& graph, const Draft& d, int id, std::set<Ref>* inputs) {
  if (static_cast<int>(d.ops.size()) + 1 > kMaxChainOps) return false;
  std::set<Ref> in = d.inputs;
  in.erase({id, 0});
  for (const TensorRef& r : graph.op(id).inputs) in.insert(key(r));
  if (static_cast<int>(in.size()) > kMaxChainInputs) return false;
  std::vector<int> ops = d.ops;
  ops.push_back(id);
  std::sort(ops.begin(), ops.end());
  std::vector<int> slot;
  if (assign_saved_slots(graph, program_order(graph, ops), &slot) > kMaxSavedValues) return false;
  *inputs = std::move(in);
  return true;
}

}  // namespace

ChainPlan plan_elementwise_chains(const Graph& graph, const std::vector<char>& usable) {
  const int n = graph.num_ops();
  if (static_cast<int>(usable.size()) != n)
    throw std::logic_error("plan_elementwise_chains: usable has " + std::to_string(usable.size()) +
                           " entries, the graph " + std::to_string(n) + " ops");
  ChainPlan plan;
  plan.at.assign(n, -1);
  plan.skip.assign(n, 0);
  std::set<Ref> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert(key(r));
  const auto consumers = graph.consumers();
  std::vector<int> chain_of(n, -1);
  std::vector<Draft> drafts;
  // Backwards, so that every reader of an op has its chain when the op is decided.
  for (int id = n - 1; id >= 0; --id) {
    if (!usable[id]) continue;
    const Op& op = graph.op(id);
    if (last_axis_softmax(graph, id)) {
      Draft d;
      d.softmax = d.last = id;
      d.shape = op.outputs[0].shape;
      d.inputs.insert(key(op.inputs[0]));
      chain_of[id] = static_cast<int>(drafts.size());
      drafts.push_back(std::move(d));
      continue;
    }
    if (!chain_op(graph, id)) continue;
    // The result may stay inside a chain only if it is no graph output and all its
    // readers are in that one chain.
    int c = -1;
    const auto& readers = consumers[id][0];
    if (!outputs.count({id, 0}) && !readers.empty()) {
      c = chain_of[readers[0].first];
      for (const auto& reader : readers)
        if (chain_of[reader.first] != c) c = -1;
    }
    std::set<Ref> inputs;
    if (c >= 0 && drafts[c].shape == op.outputs[0].shape && fits(graph, drafts[c], id, &inputs)) {
      drafts[c].ops.push_back(id);
      drafts[c].inputs = std::move(inputs);
      chain_of[id] = c;
      continue;
    }
    Draft d;
    d.ops.push_back(id);
    d.last = id;
    d.shape = op.outputs[0].shape;
    for (const TensorRef& r : op.inputs) d.inputs.insert(key(r));
    chain_of[id] = static_cast<int>(drafts.size());
    drafts.push_back(std::move(d));
  }

  // Drafts were started in decreasing order of their last op: emit them the other way.
  for (auto d = drafts.rbegin(); d != drafts.rend(); ++d) {
    ElementwiseChain chain;
    chain.ops.assign(d->ops.rbegin(), d->ops.rend());  // added backwards: now in id order
    chain.softmax = d->softmax;
    const std::set<int> members(chain.ops.begin(), chain.ops.end());
    for (int id : chain.ops)
      for (const TensorRef& r : graph.op(id).inputs) {
        const bool inside = r.index == 0 && members.count(r.op);
        if (!inside && std::find(chain.inputs.begin(), chain.inputs.end(), r) == chain.inputs.end())
          chain.inputs.push_back(r);
      }
    if (chain.ops.empty()) chain.inputs.push_back(graph.op(chain.softmax).inputs[0]);
    const int index = static_cast<int>(plan.chains.size());
    plan.at[chain.last()] = index;
    for (int id : chain.ops)
      if (id != chain.last()) plan.skip[id] = 1;
    plan.fused_ops += static_cast<int>(chain.ops.size()) + (chain.softmax >= 0 ? 1 : 0) - 1;
    plan.chains.push_back(std::move(chain));
  }
  return plan;
}

namespace {

// An input's element strides over the output dims (outermost first, 0 on broadcast
// dims); false when its view does not broadcast to `shape`.
bool broadcast_strides(const StridedView& v, const std::vector<int64_t>& shape, std::vector<int64_t>* st) {
  const int rank = static_cast<int>(shape.size()), vrank = static_cast<int>(v.shape.size());
  if (vrank > rank || v.strides.size() != v.shape.size()) return false;
  st->assign(rank, 0);
  for (int d = rank - vrank; d < rank; ++d) {
    const int sd = d - (rank - vrank);
    if (v.shape[sd] == shape[d]) (*st)[d] = shape[d] == 1 ? 0 : v.strides[sd];
    else if (v.shape[sd] != 1) return false;
  }
  return true;
}

// The access mode of an input with strides `st` over the output dims.
void classify(const std::vector<int64_t>& st, const std::vector<int64_t>& shape, FusedInput* in) {
  const std::vector<int64_t> cs = contiguous_strides(shape);
  bool same = true, scalar = true;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    same = same && st[d] == cs[d];
    scalar = scalar && st[d] == 0;
  }
  if (scalar || same) {
    in->mode = scalar ? FusedAccess::kScalar : FusedAccess::kSame;
    return;
  }
  // A vector repeated around a run of dims: the non-broadcast dims are one run laid out
  // row-major with unit innermost stride (a bias row, a [1, 1, S, S] mask, a per-channel
  // scale).
  int d0 = -1, d1 = -1;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    if (shape[d] != 1 && st[d] != 0) {
      if (d0 < 0) d0 = d;
      d1 = d + 1;
    }
  int64_t expect = 1;
  for (int d = d1 - 1; d >= d0; --d) {
    if (shape[d] == 1) continue;
    if (st[d] != expect) {
      in->mode = FusedAccess::kStrided;
      return;
    }
    expect *= shape[d];
  }
  in->len = expect;
  in->inner = 1;
  for (int d = d1; d < static_cast<int>(shape.size()); ++d) in->inner *= shape[d];
  in->mode = in->inner == 1 ? FusedAccess::kRow : FusedAccess::kChannel;
}

// Whether every run of 4 output elements, stored as `elem_size`-byte values, is one
// aligned vector load of each input (or one value of it) and one aligned vector store
// (16 bytes for float, 8 for a 16-bit dtype).
bool vectorisable(const FusedProgram& p, const void* output, int elem_size) {
  auto aligned = [&](const void* q) { return reinterpret_cast<uintptr_t>(q) % (4 * elem_size) == 0; };
  if (p.strided || p.n % 4 != 0 || !aligned(output)) return false;
  for (int j = 0; j < p.num_inputs; ++j) {
    const FusedInput& in = p.inputs[j];
    if (in.mode == FusedAccess::kSame && !aligned(in.data)) return false;
    if (in.mode == FusedAccess::kRow && (in.len % 4 != 0 || !aligned(in.data))) return false;
    if (in.mode == FusedAccess::kChannel && in.inner % 4 != 0) return false;
  }
  return true;
}

void set_attributes(const Op& op, FusedInstr* ins) {
  if (op.type == OpType::kClip) {
    ins->a = static_cast<float>(op.attrs.get_float("min"));
    ins->b = static_cast<float>(op.attrs.get_float("max"));
  } else if (op.type == OpType::kHardSigmoid) {
    ins->a = static_cast<float>(op.attrs.get_float("alpha"));
    ins->b = static_cast<float>(op.attrs.get_float("beta"));
  }
}

}  // namespace

Step compile_elementwise_chain(const Graph& graph, const ElementwiseChain& chain, const ViewResolver& resolve,
                               void* output, StepResources& res) {
  if (chain.ops.empty() && chain.softmax < 0) throw std::logic_error("element-wise chain without ops");
  const Op& last = graph.op(chain.last());
  auto malformed = [&](const std::string& why) {
    throw std::logic_error("element-wise chain ending at " + label(last) + ": " + why);
  };
  const std::vector<int64_t>& shape = last.outputs.at(0).shape;
  const int rank = static_cast<int>(shape.size());
  if (rank > kMaxRank)
    throw UnsupportedGraphError(label(last) + ": rank " + std::to_string(rank) +
                                " exceeds the backend's maximum " + std::to_string(kMaxRank));
  if (chain.inputs.size() > static_cast<size_t>(kMaxChainInputs) ||
      chain.ops.size() > static_cast<size_t>(kMaxChainOps))
    malformed("more inputs or ops than the kernel takes");
  if (chain.softmax >= 0) {
    const TensorRef& x = graph.op(chain.softmax).inputs[0];
    const TensorRef& result = chain.ops.empty() ? chain.inputs.at(0) : TensorRef{chain.ops.back(), 0};
    if (!last_axis_softmax(graph, chain.softmax) || !(x == result))
      malformed("the softmax is not a float32 softmax over the last axis of the chain's result");
  }

  FusedProgram p;
  p.rank = rank;
  p.n = 1;
  for (int d = 0; d < rank; ++d) {
    p.dims[d] = shape[rank - 1 - d];
    p.n *= shape[d];
  }
  p.softmax = chain.softmax >= 0;
  p.num_inputs = static_cast<int>(chain.inputs.size());
  if (p.n == 0) return [](cudaStream_t) {};

  // Inputs: their strides over the output dims and access mode; 32-bit index arithmetic
  // only if no offset reaches 2^31.
  p.index32 = p.n < kIndex32Limit;
  for (int j = 0; j < p.num_inputs; ++j) {
    const TensorRef& ref = chain.inputs[j];
    const StridedView v = resolve(ref);
    std::vector<int64_t> st;
    if (graph.tensor_type(ref).dtype != kFloat32 || !broadcast_strides(v, shape, &st))
      malformed("input " + std::to_string(j) + " is not float32 or does not broadcast to the output");
    FusedInput& in = p.inputs[j];
    in.data = v.data;
    classify(st, shape, &in);
    int64_t reach = 0;
    for (int d = 0; d < rank; ++d) {
      in.strides[d] = st[rank - 1 - d];
      reach += (shape[d] - 1) * st[d];
    }
    p.index32 = p.index32 && reach < kIndex32Limit;
    p.strided = p.strided || in.mode == FusedAccess::kStrided;
  }
  p.vector4 = vectorisable(p, output, dtype_size(res.float_dtype));
  if (p.index32) {
    for (int d = 0; d < rank; ++d) p.dims_div[d] = make_fast_divisor(static_cast<uint32_t>(p.dims[d]));
    for (int j = 0; j < p.num_inputs; ++j) {
      FusedInput& in = p.inputs[j];
      in.len_div = make_fast_divisor(static_cast<uint32_t>(in.len));
      in.inner_div = make_fast_divisor(static_cast<uint32_t>(in.inner));
    }
  }

  // Instructions: instruction k computes value k, op order[k] of the chain; an operand
  // is the previous value, a saved one, or an input.
  const std::vector<int> order = program_order(graph, chain.ops);
  if (order.size() != chain.ops.size()) malformed("some op does not feed the chain's result");
  std::map<int, int> position;
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = static_cast<int>(k);
  std::vector<int> slot;
  if (assign_saved_slots(graph, order, &slot) > kMaxSavedValues)
    malformed("more values kept for later readers than the kernel has slots");
  for (int k = 0; k < static_cast<int>(order.size()); ++k) {
    const Op& op = graph.op(order[k]);
    FusedInstr& ins = p.instrs[k];
    if (!instruction_of(op.type, &ins.op) || op.inputs.size() > 2 || op.outputs[0].shape != shape)
      malformed(label(op) + " is not an element-wise op of the chain's shape");
    for (size_t m = 0; m < op.inputs.size(); ++m) {
      const TensorRef& r = op.inputs[m];
      auto it = position.find(r.op);
      if (r.index == 0 && it != position.end() && it->second < k) {
        ins.kind[m] = it->second == k - 1 ? FusedOperand::kPrevious : FusedOperand::kSaved;
        ins.index[m] = it->second == k - 1 ? 0 : slot[it->second];
        continue;
      }
      auto input = std::find(chain.inputs.begin(), chain.inputs.end(), r);
      if (input == chain.inputs.end())
        malformed(label(op) + " reads a tensor the chain neither has nor computes");
      ins.kind[m] = FusedOperand::kInput;
      ins.index[m] = static_cast<int>(input - chain.inputs.begin());
    }
    set_attributes(op, &ins);
    ins.save = slot[k];
  }
  p.num_instrs = static_cast<int>(order.size());
  if (order.empty()) {  // softmax alone: the program passes its input through
    p.instrs[0].op = FusedOp::kCopy;
    p.instrs[0].kind[0] = FusedOperand::kInput;
    p.num_instrs = 1;
  }

  auto program = std::make_shared<const FusedProgram>(p);
  const int dtype = res.float_dtype;
  return [program, dtype, output](cudaStream_t s) { launch_fused_chain(*program, dtype, output, s); };
}

}  // namespace cuda
}  // namespace taso
