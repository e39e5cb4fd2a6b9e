// The structural graph hash, built so that a rewrite can update it without building
// the rewritten graph.
//
// Each op has a Merkle hash: its own content (type, attributes, output types, and the
// name of inputs and weights) mixed with the hashes of the tensors it reads. A graph's
// hash is the SUM (mod 2^64) of a finaliser of every op's Merkle hash plus one term per
// graph output. The sum is order-independent, so equal graphs hash equal whatever
// their op order, and a child's hash is the parent's minus the terms of ops that go or
// change plus the terms of ops that come or change (rewrite_effect.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "taso/op.h"

namespace taso {
namespace graph_hash {

// splitmix64-based mixing: good avalanche, cheap, deterministic across runs.
inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t hash_string(uint64_t h, const std::string& s);

// The op's own content, without its inputs.
uint64_t op_local_hash(const Op& op);
// Adds one input (the producer's Merkle hash and the output index) to an op hash.
inline uint64_t add_input(uint64_t v, uint64_t producer_hash, int index) {
  return mix(mix(v, producer_hash), static_cast<uint64_t>(index));
}
// An op's Merkle hash: `local` (op_local_hash) with each input added, `merkle` holding
// the producers' Merkle hashes by op id.
inline uint64_t merkle_hash(uint64_t local, const std::vector<TensorRef>& inputs,
                            const std::vector<uint64_t>& merkle) {
  for (const TensorRef& r : inputs) local = add_input(local, merkle[r.op], r.index);
  return local;
}
// The term an op contributes to the graph hash.
inline uint64_t op_term(uint64_t merkle) { return mix(0x3c6ef372fe94f82bULL, merkle); }
// The term a graph output contributes (`name_hash` = hash_string(0, name)).
inline uint64_t output_term(uint64_t name_hash, uint64_t producer_hash, int index) {
  return mix(mix(name_hash, producer_hash), static_cast<uint64_t>(index) + 0x51ULL);
}

}  // namespace graph_hash
}  // namespace taso
