// Per-op content hashes and the additive graph hash (see taso/graph_hash.h).
#include "taso/graph_hash.h"

#include <cstring>

#include "taso/graph.h"

namespace taso {
namespace graph_hash {
namespace {

uint64_t hash_type(uint64_t h, const TensorType& t) {
  h = mix(h, static_cast<uint64_t>(t.dtype));
  h = mix(h, t.shape.size());
  for (int64_t d : t.shape) h = mix(h, static_cast<uint64_t>(d));
  return h;
}

uint64_t hash_attrs(uint64_t h, const Attrs& a) {
  for (const auto& kv : a.ints) {
    h = hash_string(h, kv.first);
    h = mix(h, kv.second.size());
    for (int64_t v : kv.second) h = mix(h, static_cast<uint64_t>(v));
  }
  for (const auto& kv : a.floats) {
    h = hash_string(h, kv.first);
    uint64_t bits;
    std::memcpy(&bits, &kv.second, sizeof bits);
    h = mix(h, bits);
  }
  for (const auto& kv : a.strings) h = hash_string(hash_string(h, kv.first), kv.second);
  return h;
}

}  // namespace

uint64_t hash_string(uint64_t h, const std::string& s) {
  uint64_t fnv = 1469598103934665603ULL;
  for (unsigned char ch : s) fnv = (fnv ^ ch) * 1099511628211ULL;
  return mix(mix(h, fnv), s.size());
}

uint64_t op_local_hash(const Op& op) {
  uint64_t v = mix(0x7a5f0c1d2e3b4a59ULL, static_cast<uint64_t>(op.type));
  if (is_source_op(op.type)) v = hash_string(v, op.name);
  v = hash_attrs(v, op.attrs);
  for (const TensorType& t : op.outputs) v = hash_type(v, t);
  return v;
}

}  // namespace graph_hash

std::vector<uint64_t> Graph::op_hashes() const {
  std::vector<uint64_t> h(ops_.size());
  for (size_t i = 0; i < ops_.size(); ++i)
    h[i] = graph_hash::merkle_hash(graph_hash::op_local_hash(ops_[i]), ops_[i].inputs, h);
  return h;
}

uint64_t Graph::hash() const {
  std::vector<uint64_t> h = op_hashes();
  uint64_t v = 0;
  for (uint64_t x : h) v += graph_hash::op_term(x);
  for (size_t i = 0; i < outputs_.size(); ++i)
    v += graph_hash::output_term(graph_hash::hash_string(0, output_names_[i]), h[outputs_[i].op],
                                 outputs_[i].index);
  return v;
}

}  // namespace taso
