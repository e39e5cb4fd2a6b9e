// The analytic cost model: roofline arithmetic and "no op is free".
#include "check.h"
#include "helpers.h"
#include "taso/cost_model.h"
#include "taso/epilogue.h"
#include "taso/errors.h"
#include "taso/table_cost_model.h"

using namespace taso;
using namespace testing_helpers;

TEST(conv_flops_and_bytes) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 64, 56, 56});
  auto w = source(g, "Weight", "w", {64, 64, 3, 3});
  auto y = add(g, "Conv2D", {x, w}, ints({{"pads", {1, 1, 1, 1}}}));
  OpWork work = g.op_work(y.op);
  double out = 64.0 * 56 * 56;
  CHECK_NEAR(work.flops, out * 2 * 64 * 9, 1.0);
  CHECK_NEAR(work.bytes_read, (64.0 * 56 * 56 + 64.0 * 64 * 9) * 4, 1.0);
  CHECK_NEAR(work.bytes_written, out * 4, 1.0);
}

TEST(roofline_takes_the_larger_of_compute_and_memory) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 1024, 1024});
  auto t = add(g, "Transpose", {x}, ints({{"perm", {0, 2, 1}}}));
  auto w = source(g, "Weight", "w", {1024, 1024});
  auto m = add(g, "MatMul", {x, w});
  DeviceProfile p = device_profile("h100");
  AnalyticCostModel model(p);
  double bytes = 2.0 * 1024 * 1024 * 4;
  double expect_t = (p.launch_overhead_us + p.kernel_latency_us) * 1e-3 +
                    bytes / (p.memory_bandwidth * p.memory_efficiency) * 1e3;
  CHECK_NEAR(model.op_costs_ms(g)[t.op], expect_t, 1e-9);
  double flops = 2.0 * 1024 * 1024 * 1024;
  double expect_m = (p.launch_overhead_us + p.library_latency_us) * 1e-3 +
                    flops / (p.peak_flops * p.gemm_efficiency) * 1e3;
  // a tiny op costs about the launch plus the kernel latency
  auto s = source(g, "Input", "s", {4});
  auto tiny = add(g, "Relu", {s});
  CHECK_NEAR(model.op_costs_ms(g)[tiny.op], (p.launch_overhead_us + p.kernel_latency_us) * 1e-3, 1e-6);
  CHECK_NEAR(model.op_costs_ms(g)[m.op], expect_m, 1e-9);
}

TEST(no_computing_op_is_free_and_sources_cost_nothing) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 16});
  auto r = add(g, "Reshape", {x}, ints({{"shape", {4, 4}}}));
  auto i = add(g, "Identity", {r});
  AnalyticCostModel model(device_profile("h100"));
  auto costs = model.op_costs_ms(g);
  CHECK(costs[r.op] > 0);
  CHECK(costs[i.op] > 0);
  CHECK_EQ(costs[x.op], 0.0);
  CHECK_NEAR(model.graph_cost_ms(g), costs[0] + costs[1] + costs[2], 1e-12);
}

TEST(tf32_profile_is_faster_for_big_matmuls_and_unknown_profile_is_an_error) {
  Graph g;
  auto a = source(g, "Input", "a", {4096, 4096});
  auto m = add(g, "MatMul", {a, a});
  double fp32 = AnalyticCostModel(device_profile("h100")).op_costs_ms(g)[m.op];
  double tf32 = AnalyticCostModel(device_profile("h100-tf32")).op_costs_ms(g)[m.op];
  CHECK(tf32 < fp32);
  CHECK_THROWS(device_profile("tpu"), ValueError, "unknown device profile 'tpu'");
}

TEST(ops_on_weights_only_are_folded_and_free) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 8, 4, 4});
  auto w = source(g, "Weight", "w", {8, 8, 1, 1});
  auto big = add(g, "Enlarge", {w}, ints({{"kernel", {3, 3}}}));
  taso::OpSpec cs;
  cs.type = "Constant";
  cs.attrs.floats["value"] = 2.0;
  int c = g.add_op(cs);
  auto scaled = add(g, "Mul", {big, {c, 0}});
  auto y = add(g, "Conv2D", {x, scaled}, ints({{"pads", {1, 1, 1, 1}}}));
  AnalyticCostModel model(device_profile("h100"));
  auto costs = model.op_costs_ms(g);
  CHECK_EQ(costs[big.op], 0.0);
  CHECK_EQ(costs[scaled.op], 0.0);
  CHECK(costs[y.op] > 0);
  CHECK_NEAR(model.graph_cost_ms(g), costs[y.op], 1e-12);
  auto constant = constant_ops(g);
  CHECK(!constant[x.op] && constant[w.op] && constant[c] && constant[scaled.op] && !constant[y.op]);
}

TEST(ops_a_convolution_runs_in_its_epilogue_cost_nothing_in_the_table_model) {
  // conv -> Add(residual) -> Relu: both run in the convolution's call; a second
  // convolution read twice keeps its Relu, which joins the element-wise chain of the Add
  // reading it; the analytic model prices every op.
  Graph g;
  auto x = source(g, "Input", "x", {1, 8, 14, 14});
  auto w = source(g, "Weight", "w", {8, 8, 3, 3});
  auto c = add(g, "Conv2D", {x, w}, ints({{"pads", {1, 1, 1, 1}}}));
  auto sum = add(g, "Add", {c, x});
  auto r = add(g, "Relu", {sum});
  auto c2 = add(g, "Conv2D", {r, w}, ints({{"pads", {1, 1, 1, 1}}}));
  auto r2 = add(g, "Relu", {c2});
  auto both = add(g, "Add", {r2, c2});
  g.add_output(both, "y");
  std::vector<char> fused = fused_step_ops(g, constant_ops(g));
  CHECK(fused[sum.op] == static_cast<char>(Fused::kConvEpilogue) && fused[r.op] == static_cast<char>(Fused::kConvEpilogue));
  CHECK(fused[r2.op] == static_cast<char>(Fused::kChain));
  CHECK(!fused[c.op] && !fused[both.op] && !fused[c2.op]);
  TableCostModel table(device_profile("h100"));
  AnalyticCostModel analytic(device_profile("h100"));
  auto priced = table.op_costs_ms(g), alone = analytic.op_costs_ms(g);
  CHECK_EQ(priced[sum.op], 0.0);
  CHECK_EQ(priced[r.op], 0.0);
  CHECK(priced[r2.op] > 0 && alone[sum.op] > 0 && alone[r.op] > 0);
  table.set_fused_epilogues(false);
  const double r2_alone = table.op_costs_ms(g)[r2.op];
  table.set_fused_epilogues(true);
  CHECK_NEAR(priced[r2.op], kChainShare * r2_alone, 1e-9);
  table.set_fused_epilogues(false);
  CHECK(table.op_costs_ms(g)[r.op] > 0);
}

TEST_MAIN()
