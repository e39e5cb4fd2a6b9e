// The weight-residency term (taso/weight_residency.h): its measured curve, which GEMMs
// are GEMVs, and that a change of the reads prices exactly what the changed graph costs.
#include "check.h"
#include "helpers.h"
#include "taso/errors.h"
#include "taso/table_cost_model.h"
#include "taso/weight_residency.h"

using namespace taso;
using namespace testing_helpers;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// x[1, 1024] read by a GEMV of each of `weights` 8 MiB weights ([1024, 2048]); the first
// weight read twice (by a second GEMV of x) when `twice`.
Graph gemvs(int weights, bool twice) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 1024});
  TensorRef sum{-1, 0};
  auto accumulate = [&](TensorRef t) { sum = sum.op < 0 ? t : add(g, "Add", {sum, t}); };
  for (int i = 0; i < weights; ++i) {
    auto w = source(g, "Weight", "w" + std::to_string(i), {1024, 2048});
    accumulate(add(g, "MatMul", {x, w}));
    if (twice && i == 0) accumulate(add(g, "MatMul", {add(g, "Relu", {x}), w}));
  }
  g.add_output(sum, "y");
  return g;
}

WeightResidency residency_of(const Graph& g) { return WeightResidency(g, constant_ops(g), g.op_hashes()); }

}  // namespace

TEST(cold_read_extra_follows_the_measured_points_and_is_flat_beyond_them) {
  CHECK_NEAR(cold_read_extra_ms(kMiB), 0.41e-3, 1e-12);
  CHECK_NEAR(cold_read_extra_ms(kMiB / 4), 0.41e-3, 1e-12);
  CHECK_NEAR(cold_read_extra_ms(9 * kMiB), 1.94e-3, 1e-12);
  CHECK_NEAR(cold_read_extra_ms(40 * kMiB), 1.94e-3, 1e-12);
  CHECK_NEAR(cold_read_extra_ms(21 * kMiB / 8), (1.25e-3 + 0.82e-3) / 2, 1e-12);  // between 2.25 and 3 MiB
  CHECK_EQ(weight_miss_fraction(22 * kMiB), 0.0);
  CHECK_NEAR(weight_miss_fraction(26 * kMiB), 0.5, 1e-12);
  CHECK_EQ(weight_miss_fraction(30 * kMiB), 1.0);
  CHECK_EQ(weight_miss_fraction(64 * kMiB), 1.0);
  CHECK_EQ(cold_read_units(20 * kMiB, 8 * kMiB), 0);
}

TEST(a_gemv_is_a_float_gemm_of_one_constant_operand_and_at_most_16_rows) {
  const TensorType w{{512, 1024}, kFloat32};
  Op matmul;
  matmul.type = OpType::kMatMul;
  CHECK_EQ(gemv_weight_operand(matmul, {{{1, 512}, kFloat32}, w}, false, true), 1);
  CHECK_EQ(gemv_weight_operand(matmul, {{{16, 512}, kFloat32}, w}, false, true), 1);
  CHECK_EQ(gemv_weight_operand(matmul, {{{17, 512}, kFloat32}, w}, false, true), -1);
  CHECK_EQ(gemv_weight_operand(matmul, {{{2, 8, 512}, kFloat32}, w}, false, true), 1);   // 16 rows in all
  CHECK_EQ(gemv_weight_operand(matmul, {{{4, 8, 512}, kFloat32}, w}, false, true), -1);  // 32
  CHECK_EQ(gemv_weight_operand(matmul, {{{512}, kFloat32}, w}, false, true), 1);
  // W @ x: x's 4 columns
  CHECK_EQ(gemv_weight_operand(matmul, {{{1024, 512}, kFloat32}, {{512, 4}, kFloat32}}, true, false), 0);
  CHECK_EQ(gemv_weight_operand(matmul, {{{1, 512}, kFloat32}, w}, true, true), -1);
  CHECK_EQ(gemv_weight_operand(matmul, {{{1, 512}, kFloat32}, w}, false, false), -1);
  CHECK_EQ(gemv_weight_operand(matmul, {{{1, 512}, kFloat64}, {{512, 1024}, kFloat64}}, false, true), -1);
  Op gemm;
  gemm.type = OpType::kGemm;
  gemm.attrs.ints["trans_a"] = {1};
  gemm.attrs.ints["trans_b"] = {0};
  CHECK_EQ(gemv_weight_operand(gemm, {{{512, 4}, kFloat32}, w}, false, true), 1);     // x^T: 4 rows
  CHECK_EQ(gemv_weight_operand(gemm, {{{512, 1024}, kFloat32}, w}, false, true), -1);  // 1024 rows
}

TEST(gemvs_are_charged_their_share_and_op_costs_sum_to_the_graph_cost) {
  const Graph g = gemvs(3, true);  // 24 MiB distinct, four reads: a quarter of each extra
  const WeightResidency r = residency_of(g);
  CHECK_EQ(r.distinct_bytes(), 24 * kMiB);
  const int64_t share = cost_units(0.25 * cold_read_extra_ms(8 * kMiB));
  CHECK_EQ(r.term_units(), 4 * share);
  TableCostModel table(device_profile("h100"));
  CHECK(!table.prices_weight_residency());  // off unless asked for (search's default)
  const std::vector<double> hot = table.op_costs_ms(g);
  const int64_t hot_units = table.graph_cost_units(g);
  table.set_weight_residency(true);
  const std::vector<double> cold = table.op_costs_ms(g);
  int gemvs_seen = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    CHECK_EQ(cost_units(cold[i]) - cost_units(hot[i]), r.op_units(i));
    gemvs_seen += r.read_of(i) != nullptr;
  }
  CHECK_EQ(gemvs_seen, 4);
  CHECK_EQ(table.graph_cost_units(g), hot_units + r.term_units());
  CHECK(!AnalyticCostModel(device_profile("h100")).prices_weight_residency());
}

TEST(a_change_of_the_reads_prices_what_the_changed_graph_costs) {
  const Graph twice = gemvs(3, true), once = gemvs(3, false), two = gemvs(2, false), four = gemvs(4, false);
  CHECK_EQ(residency_of(two).term_units(), 0);
  const WeightResidency r = residency_of(twice);
  const WeightRead first = *r.read_of(2);  // x @ w0
  // one read of w0 less: the same weights, three reads
  CHECK_EQ(r.delta_units({{first.value, first.bytes, -1}}), residency_of(once).term_units() - r.term_units());
  // w0 no longer read at all: 16 MiB, under the ramp
  CHECK_EQ(r.delta_units({{first.value, first.bytes, -1}, {first.value, first.bytes, -1}}),
           residency_of(two).term_units() - r.term_units());
  // a new weight read: 32 MiB, every read fully cold
  const WeightRead* added = residency_of(four).read_of(four.num_ops() - 2);
  CHECK(added != nullptr);
  CHECK_EQ(r.delta_units({{added->value, added->bytes, 1}, {first.value, first.bytes, -1}}),
           residency_of(four).term_units() - r.term_units());
  CHECK_EQ(r.delta_units({}), 0);
  CHECK_THROWS(r.delta_units({{first.value, first.bytes, -3}}), ValueError, "more reads of a weight");
}

TEST_MAIN()
