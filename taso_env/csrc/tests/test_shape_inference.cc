// Shape inference and attribute validation, op by op.
#include "check.h"
#include "helpers.h"
#include "taso/errors.h"

using namespace taso;
using namespace testing_helpers;

TEST(conv_output_shape_with_stride_padding_and_groups) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 32, 56, 56});
  auto w = source(g, "Weight", "w", {64, 8, 3, 3});
  auto b = source(g, "Weight", "b", {64});
  auto y = add(g, "Conv2D", {x, w, b}, ints({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}, {"group", {4}}}));
  CHECK(g.tensor_type(y).shape == (std::vector<int64_t>{1, 64, 28, 28}));
  // defaults are filled in
  CHECK(g.op(y.op).attrs.get_ints("dilations") == (std::vector<int64_t>{1, 1}));
  CHECK_EQ(g.op(y.op).attrs.get_int("activation"), 0);
}

TEST(conv_channel_mismatch_names_the_op) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 3, 8, 8});
  auto w = source(g, "Weight", "w", {4, 5, 3, 3});
  CHECK_THROWS(add(g, "Conv2D", {x, w}, {}, "conv_bad"), ShapeError, "conv_bad");
  auto bias = source(g, "Weight", "bias", {5});
  auto w2 = source(g, "Weight", "w2", {4, 3, 3, 3});
  CHECK_THROWS(add(g, "Conv2D", {x, w2, bias}, {}, "conv_bias"), ShapeError, "bias must be [4]");
}

TEST(matmul_broadcasts_batch_dims) {
  Graph g;
  auto a = source(g, "Input", "a", {2, 1, 3, 4});
  auto b = source(g, "Weight", "b", {5, 4, 6});
  auto y = add(g, "MatMul", {a, b});
  CHECK(g.tensor_type(y).shape == (std::vector<int64_t>{2, 5, 3, 6}));
  auto v = source(g, "Weight", "v", {4});
  auto y2 = add(g, "MatMul", {a, v});
  CHECK(g.tensor_type(y2).shape == (std::vector<int64_t>{2, 1, 3}));
  auto bad = source(g, "Weight", "bad", {5, 6});
  CHECK_THROWS(add(g, "MatMul", {a, bad}, {}, "mm"), ShapeError, "inner dimensions");
}

TEST(gemm_respects_transposes) {
  Graph g;
  auto a = source(g, "Input", "a", {1, 2048});
  auto w = source(g, "Weight", "w", {1000, 2048});
  auto c = source(g, "Weight", "c", {1000});
  Attrs at = ints({{"trans_b", {1}}});
  auto y = add(g, "Gemm", {a, w, c}, at);
  CHECK(g.tensor_type(y).shape == (std::vector<int64_t>{1, 1000}));
  CHECK_THROWS(add(g, "Gemm", {a, w, c}, {}, "gemm_nt"), ShapeError, "gemm_nt");
}

TEST(concat_split_roundtrip_shapes) {
  Graph g;
  auto a = source(g, "Input", "a", {1, 16, 7, 7});
  auto b = source(g, "Input", "b", {1, 48, 7, 7});
  auto c = add(g, "Concat", {a, b}, ints({{"axis", {-3}}}));
  CHECK(g.tensor_type(c).shape == (std::vector<int64_t>{1, 64, 7, 7}));
  CHECK_EQ(g.op(c.op).attrs.get_int("axis"), 1);  // normalised
  OpSpec s;
  s.type = "Split";
  s.inputs = {c};
  s.attrs = ints({{"axis", {1}}, {"split", {16, 48}}});
  int id = g.add_op(s);
  CHECK_EQ(g.op(id).outputs.size(), 2u);
  CHECK(g.op(id).outputs[1].shape == (std::vector<int64_t>{1, 48, 7, 7}));
  s.attrs = ints({{"axis", {1}}, {"split", {16, 40}}});
  CHECK_THROWS(g.add_op(s), ShapeError, "sum to 56");
  auto odd = source(g, "Input", "odd", {1, 16, 6, 7});
  CHECK_THROWS(add(g, "Concat", {a, odd}, ints({{"axis", {1}}})), ShapeError, "outside axis 1");
}

TEST(reshape_resolves_minus_one_and_zero) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 128, 768});
  auto y = add(g, "Reshape", {x}, ints({{"shape", {0, 0, 12, -1}}}));
  CHECK(g.tensor_type(y).shape == (std::vector<int64_t>{1, 128, 12, 64}));
  CHECK(g.op(y.op).attrs.get_ints("shape") == (std::vector<int64_t>{1, 128, 12, 64}));
  CHECK_THROWS(add(g, "Reshape", {x}, ints({{"shape", {7, -1}}})), ShapeError, "cannot reshape");
  CHECK_THROWS(add(g, "Reshape", {x}, ints({{"shape", {-1, -1}}})), AttributeError, "more than one -1");
}

TEST(transpose_defaults_to_reversed_axes) {
  Graph g;
  auto x = source(g, "Input", "x", {2, 3, 4});
  auto y = add(g, "Transpose", {x});
  CHECK(g.tensor_type(y).shape == (std::vector<int64_t>{4, 3, 2}));
  CHECK_THROWS(add(g, "Transpose", {x}, ints({{"perm", {0, 0, 1}}})), AttributeError, "not a permutation");
}

TEST(pooling_with_ceil_mode) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 64, 112, 112});
  auto y = add(g, "MaxPool2D", {x}, ints({{"kernel", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}));
  CHECK(g.tensor_type(y).shape == (std::vector<int64_t>{1, 64, 56, 56}));
  auto x2 = source(g, "Input", "x2", {1, 64, 111, 111});
  auto y2 = add(g, "MaxPool2D", {x2}, ints({{"kernel", {3, 3}}, {"strides", {2, 2}}, {"ceil_mode", {1}}}));
  CHECK(g.tensor_type(y2).shape == (std::vector<int64_t>{1, 64, 55, 55}));
  auto x3 = source(g, "Input", "x3", {1, 96, 54, 54});
  auto y3 = add(g, "MaxPool2D", {x3}, ints({{"kernel", {3, 3}}, {"strides", {2, 2}}, {"ceil_mode", {1}}}));
  CHECK(g.tensor_type(y3).shape == (std::vector<int64_t>{1, 96, 27, 27}));
  CHECK_THROWS(add(g, "MaxPool2D", {x}, ints({{"kernel", {3, 3}}, {"pads", {3, 0, 0, 0}}})), AttributeError,
               "smaller than the kernel");
}

TEST(reduce_layernorm_gather_where_cast) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 128, 768});
  auto m = add(g, "ReduceMean", {x}, ints({{"axes", {-1}}, {"keepdims", {0}}}));
  CHECK(g.tensor_type(m).shape == (std::vector<int64_t>{1, 128}));
  auto s = source(g, "Weight", "ln.scale", {768});
  auto ln = add(g, "LayerNorm", {x, s});
  CHECK(g.tensor_type(ln).shape == (std::vector<int64_t>{1, 128, 768}));
  auto table = source(g, "Weight", "emb", {30522, 768});
  auto ids = source(g, "Input", "ids", {1, 128}, kInt64);
  auto e = add(g, "Gather", {table, ids});
  CHECK(g.tensor_type(e).shape == (std::vector<int64_t>{1, 128, 768}));
  CHECK_THROWS(add(g, "Gather", {table, x}), ShapeError, "indices must be");
  auto c = add(g, "Cast", {ids}, ints({{"to", {kBool}}}));
  CHECK_EQ(g.tensor_type(c).dtype, kBool);
  auto w = add(g, "Where", {c, ids, ids});
  CHECK_EQ(g.tensor_type(w).dtype, kInt64);
  CHECK_THROWS(add(g, "Cast", {ids}, ints({{"to", {99}}})), AttributeError, "dtype code");
}

TEST(enlarge_pad_batchnorm) {
  Graph g;
  auto w = source(g, "Weight", "w", {64, 32, 1, 1});
  auto e = add(g, "Enlarge", {w}, ints({{"kernel", {3, 3}}}));
  CHECK(g.tensor_type(e).shape == (std::vector<int64_t>{64, 32, 3, 3}));
  CHECK_THROWS(add(g, "Enlarge", {w}, ints({{"kernel", {2, 2}}})), AttributeError, "even difference");
  auto x = source(g, "Input", "x", {1, 3, 4, 5});
  auto p = add(g, "Pad", {x}, ints({{"pads", {0, 0, 1, 2, 0, 0, 3, 4}}}));
  CHECK(g.tensor_type(p).shape == (std::vector<int64_t>{1, 3, 8, 11}));
  auto c = source(g, "Weight", "c", {3});
  auto bn = add(g, "BatchNorm", {x, c, c, c, c});
  CHECK_NEAR(g.op(bn.op).attrs.get_float("epsilon"), 1e-5, 1e-12);
  auto c4 = source(g, "Weight", "c4", {4});
  CHECK_THROWS(add(g, "BatchNorm", {x, c, c4, c, c}), ShapeError, "must be [3]");
}

TEST(attribute_validation) {
  Graph g;
  auto x = source(g, "Input", "x", {1, 3, 8, 8});
  CHECK_THROWS(add(g, "Relu", {x}, ints({{"bogus", {1}}}), "r"), AttributeError, "unknown attribute 'bogus'");
  CHECK_THROWS(add(g, "Concat", {x, x}, {}, "cat"), AttributeError, "missing required attribute 'axis'");
  CHECK_THROWS(add(g, "Softmax", {x}, ints({{"axis", {1, 2}}}), "sm"), AttributeError, "single integer");
  CHECK_THROWS(add(g, "NoSuchOp", {x}), UnknownOpError, "NoSuchOp");
  CHECK_THROWS(add(g, "Add", {x}, {}, "add1"), GraphError, "takes 2 inputs");
  Attrs bad_act = ints({{"activation", {7}}});
  auto w = source(g, "Weight", "w", {4, 3, 1, 1});
  CHECK_THROWS(add(g, "Conv2D", {x, w}, bad_act, "c"), AttributeError, "activation");
}

TEST_MAIN()
