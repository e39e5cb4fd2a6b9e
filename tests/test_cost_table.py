"""The measured cost table (HDF5) and the `table` cost model, on any machine: round
trips, typed errors for missing / corrupt / truncated files, hit and miss counting,
the scaled analytic fallback, and search running on the C++ table model."""

import math
import os

import h5py
import numpy as np
import pytest

import taso_env as te
from taso_env import _core, dtypes
from taso_env.engine.cost_model import CostModelError, make_cost_model
from taso_env.errors import UnknownOpError
from taso_env.gpu import cost_table
from taso_env.gpu.cost_models import TableCostModel
from taso_env.gpu.cost_table import CorruptCostTableError, CostTable, CostTableError, MissingTableError

DEVICE = "NVIDIA H100 80GB HBM3"


def _tiny() -> te.Graph:
    b = te.GraphBuilder("tiny", seed=0)
    x = b.input("x", [1, 8, 16, 16])
    y = b.conv2d(x, 8, 3, padding=1, name="a")
    z = b.conv2d(x, 8, 3, padding=1, name="b")
    b.output(b.op("Relu", [b.add(y, z)]), "out")
    return b.build()


def _signatures(g):
    return _core.op_signatures(g._core, _core.AnalyticModel("h100"))


def _table_for(g, factor=2.0, every=1) -> CostTable:
    t = CostTable(DEVICE, "fp32")
    for _, _, sig, analytic in _signatures(g)[::every]:
        t.set(sig, analytic * factor, analytic)
    return t


def test_signature_is_canonical_and_ignores_op_names():
    a = _signatures(_tiny())
    convs = [s for _, t, s, _ in a if t == "Conv2D"]
    assert len(convs) == 2 and convs[0] == convs[1]  # same configuration, different names
    assert convs[0].startswith("Conv2D|activation=0;dilations=1,1;group=1;pads=1,1,1,1;strides=1,1|")
    assert convs[0].endswith("|float32[1,8,16,16]")
    assert all(ms > 0 for *_, ms in a)


def test_every_shipped_signature_parses_back_to_its_op_configuration():
    # measure-costs --signatures-from rebuilds each op from its signature alone
    shipped = cost_table.load(os.path.join(os.path.dirname(__file__), "..", "data", "costs", "h100_fp32.h5"))
    assert len(shipped) > 1000
    for sig in shipped:
        op = _core.parse_op_signature(sig)
        assert op["type"] == sig.split("|")[0]
        assert len(op["outputs"]) == len(sig.split("|")[3].split("],")) and op["outputs"][0][0] in dtypes.NUMPY_BY_CODE
    conv = _core.parse_op_signature(
        "Conv2D|activation=0;dilations=1,1;group=1152;pads=1,1,1,1;strides=1,1|"
        "float32[1,1152,7,7],float32[1152,1,3,3],float32[1152]|float32[1,1152,7,7]")
    assert conv["ints"]["group"] == [1152] and conv["ints"]["pads"] == [1, 1, 1, 1]
    assert conv["inputs"] == [(1, (1, 1152, 7, 7)), (1, (1152, 1, 3, 3)), (1, (1152,))]
    gemm = _core.parse_op_signature("Gemm|trans_a=0;trans_b=1;alpha=1;beta=1|float32[1,8],float32[4,8],float32[4]|"
                                    "float32[1,4]")
    assert gemm["floats"] == {"alpha": 1.0, "beta": 1.0} and gemm["ints"]["trans_b"] == [1]
    assert _core.parse_op_signature("Div||float32[2],float32[]|float32[2]")["inputs"][1] == (1, ())
    with pytest.raises(ValueError, match="round-trip"):  # element-wise ops are named by element count
        _core.parse_op_signature("Div||float32[1,2],float32[]|float32[1,2]")


def test_shipped_tables_of_every_math_mode_cover_the_same_configurations():
    # one measure-costs --signatures-from run per math mode on the H100 (docs/gpu.md)
    costs = os.path.join(os.path.dirname(__file__), "..", "data", "costs")
    tables = {m: cost_table.load(os.path.join(costs, f"h100_{m}.h5")) for m in ("fp32", "tf32", "fp16")}
    assert {t.math for t in tables.values()} == {"fp32", "tf32", "fp16"}
    assert set(tables["tf32"]) == set(tables["fp32"]) == set(tables["fp16"])
    g = te.graphs.build("resnet50", seed=None)
    est = {m: TableCostModel(os.path.join(costs, f"h100_{m}.h5")).graph_cost(g) for m in tables}
    assert est["fp16"] < est["tf32"] < est["fp32"]  # tensor cores, then 16-bit storage


@pytest.mark.parametrize("bad, error", [
    ("Relu|float32[1]|float32[1]", ValueError),                      # three parts
    ("NoSuchOp||float32[1]|float32[1]", UnknownOpError),
    ("Relu|alpha=1|float32[1]|float32[1]", ValueError),              # Relu has no attribute alpha
    ("Conv2D|group=x|float32[1]|float32[1]", ValueError),            # not an integer
    ("Relu||floaty[1]|float32[1]", ValueError),                      # unknown dtype
    ("Relu||float32(1)|float32[1]", ValueError),                     # not a tensor type
    ("Gemm|alpha=1;trans_a=0|float32[1,1],float32[1,1]|float32[1,1]", ValueError),  # not canonical
])
def test_malformed_signatures_are_typed_errors(bad, error):
    with pytest.raises(error):
        _core.parse_op_signature(bad)


def test_round_trip_keeps_every_entry(tmp_path):
    t = _table_for(te.graphs.build("squeezenet", seed=None))
    t.notes = "unit test"
    path = tmp_path / "costs.h5"
    cost_table.save(t, path)
    back = cost_table.load(path)
    assert (back.device, back.math, back.notes) == (DEVICE, "fp32", "unit test")
    assert back.items() == t.items()
    assert back.op_types()["Conv2D"] > 0


def test_save_merges_tables_of_several_devices_and_math_modes(tmp_path):
    path = tmp_path / "costs.h5"
    g = _tiny()
    cost_table.save(_table_for(g), path)
    tf32 = CostTable(DEVICE, "tf32", {s: (1.0, 0.0) for _, _, s, _ in _signatures(g)})
    cost_table.save(tf32, path)
    assert sorted(t.math for t in cost_table.load_all(path)) == ["fp32", "tf32"]
    assert cost_table.load(path, DEVICE, "tf32").items()[0][1] == 1.0
    with pytest.raises(MissingTableError, match="several tables"):
        cost_table.load(path)
    with pytest.raises(MissingTableError, match="no table for device 'A100'"):
        cost_table.load(path, "A100")
    # Merging the same (device, math) keeps old entries and lets new ones win.
    extra = CostTable(DEVICE, "fp32", {"Relu||float32[7]|float32[7]": (0.5, 0.1)})
    first = cost_table.load(path, math_mode="fp32").items()[0]
    extra.set(first[0], 9.0, first[2])
    cost_table.save(extra, path)
    merged = cost_table.load(path, math_mode="fp32")
    assert merged.get(first[0]) == 9.0 and "Relu||float32[7]|float32[7]" in merged
    assert len(merged) == len(_table_for(g)) + 1


def test_merge_refuses_other_devices():
    with pytest.raises(CostTableError, match="cannot merge"):
        CostTable("a", "fp32").merge(CostTable("b", "fp32"))


@pytest.mark.parametrize("bad", [float("nan"), -1.0, math.inf])
def test_invalid_costs_are_refused(bad):
    with pytest.raises(CostTableError, match="invalid cost"):
        CostTable(DEVICE).set("Relu||float32[1]|float32[1]", bad)
    with pytest.raises(CostTableError, match="malformed"):
        CostTable(DEVICE).set("no separators", 1.0)


def test_missing_file_is_a_typed_error(tmp_path):
    with pytest.raises(CostTableError, match="does not exist"):
        cost_table.load(tmp_path / "nope.h5")


def test_garbage_file_is_corrupt(tmp_path):
    path = tmp_path / "garbage.h5"
    path.write_bytes(b"this is not HDF5" * 100)
    with pytest.raises(CorruptCostTableError, match="garbage.h5"):
        cost_table.load(path)


def test_truncated_file_is_corrupt(tmp_path):
    path = tmp_path / "costs.h5"
    cost_table.save(_table_for(te.graphs.build("resnet18", seed=None)), path)
    data = path.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(CorruptCostTableError, match="cut.h5"):
        cost_table.load(cut)


def test_hdf5_without_the_layout_is_corrupt(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(CorruptCostTableError, match="not an rlflow cost table"):
        cost_table.load(path)


def test_mismatched_dataset_lengths_are_corrupt(tmp_path):
    path = tmp_path / "costs.h5"
    cost_table.save(_table_for(_tiny()), path)
    with h5py.File(path, "a") as f:
        group = f["tables"][next(iter(f["tables"]))]
        del group["ms"]
        group["ms"] = np.array([1.0])
    with pytest.raises(CorruptCostTableError, match="different lengths"):
        cost_table.load(path)


def test_table_model_replays_entries_and_counts_hits():
    g = te.graphs.build("resnet18", seed=None)
    model = TableCostModel(_table_for(g, factor=3.0), fused_epilogues=False)  # every op priced, as analytic
    analytic = te.AnalyticCostModel("h100")
    assert model.graph_cost(g) == pytest.approx(3.0 * analytic.graph_cost(g))
    assert model.misses == 0 and model.hits == g.num_ops
    assert np.allclose(g.op_costs(model), 3.0 * g.op_costs(analytic))


def test_misses_fall_back_to_the_scaled_analytic_model_and_are_counted():
    g = te.graphs.build("resnet18", seed=None)
    rows = _signatures(g)
    model = TableCostModel(_table_for(g, factor=2.0, every=2), fused_epilogues=False)  # half the configurations
    cost = model.graph_cost(g)
    assert model.misses > 0 and model.hits > 0
    assert model.hits + model.misses == g.num_ops
    assert set(model.missed_signatures()) <= {s for _, _, s, _ in rows}
    # Every entry is 2x analytic, so misses are scaled by the same median ratio.
    assert cost == pytest.approx(2.0 * te.AnalyticCostModel("h100").graph_cost(g))
    model.reset_counters()
    assert (model.hits, model.misses, model.missed_signatures()) == (0, 0, [])


def test_a_missing_grouped_convolution_is_scaled_like_the_grouped_ones():
    """Grouped convolutions run far below their roofline (on the H100 table 2-5x the
    analytic estimate, dense ones ~1x): a missing grouped configuration takes the
    grouped entries' scale, not all convolutions' (a miss scaled like dense convs once
    made a 5x5 grouped conv look 40% cheaper than the 3x3 it replaced)."""
    b = te.GraphBuilder("convs", seed=None)
    x = b.input("x", [1, 64, 14, 14])
    for k in (1, 3, 5):
        b.output(b.conv2d(x, 64, k, padding=k // 2, name=f"dense{k}"), f"d{k}")
        b.output(b.conv2d(x, 64, k, padding=k // 2, groups=8, name=f"grouped{k}"), f"g{k}")
    g = b.build()
    rows = [r for r in _signatures(g) if r[1] == "Conv2D"]
    table = CostTable(DEVICE, "fp32")
    for _, _, sig, analytic in rows:
        if "[64,64,5,5]" not in sig and "[64,8,5,5]" not in sig:  # the 5x5s are missing
            table.set(sig, analytic * (4.0 if "group=8" in sig else 1.0), analytic)
    model = TableCostModel(table)
    costs = model.op_costs(g)
    analytic = te.AnalyticCostModel("h100").op_costs(g)
    by_name = {op.name.rsplit("_", 1)[0]: i for i, op in enumerate(g.ops) if op.type == "Conv2D"}
    assert costs[by_name["grouped5"]] == pytest.approx(4.0 * analytic[by_name["grouped5"]])
    assert costs[by_name["dense5"]] == pytest.approx(analytic[by_name["dense5"]])
    assert model._model.scale_for("Conv2D/grouped") == pytest.approx(4.0)


def test_a_miss_takes_the_scale_of_entries_over_the_same_shapes():
    """A 3x3 convolution over a 1x1 image (what enlarge_conv_1x1_to_3x3 makes of an SE
    block's 1x1 convolution) missing from the table: scaled by all dense convolutions'
    median it looked 3x cheaper than its measured 1x1 sibling, and greedy enlarged five of
    them in mobilenet_v3_small (estimated 1.13x, measured 0.77x on the H100). Scaled by the
    entries of the same family over the same input and output shapes, it is not."""
    b = te.GraphBuilder("se", seed=None)
    x = b.input("x", [1, 576, 1, 1])
    y = b.input("y", [1, 64, 28, 28])
    b.output(b.conv2d(x, 144, 1, name="se1"), "a")
    b.output(b.conv2d(x, 144, 3, padding=1, name="se3"), "b")
    b.output(b.conv2d(y, 64, 1, name="big1"), "c")
    b.output(b.conv2d(y, 64, 3, padding=1, name="big3"), "d")
    g = b.build()
    rows = [r for r in _signatures(g) if r[1] == "Conv2D"]
    table = CostTable(DEVICE, "fp32")
    for _, _, sig, analytic in rows:
        if "[144,576,3,3]" in sig:
            continue  # the missing one
        table.set(sig, analytic * (10.0 if "[1,576,1,1]" in sig else 1.0), analytic)
    model = TableCostModel(table)
    costs, analytic = model.op_costs(g), te.AnalyticCostModel("h100").op_costs(g)
    by_name = {op.name.rsplit("_", 1)[0]: i for i, op in enumerate(g.ops) if op.type == "Conv2D"}
    assert costs[by_name["se3"]] == pytest.approx(10.0 * analytic[by_name["se3"]])
    assert model.misses == 1
    # without a neighbour over its shapes a miss still takes its family's median
    del table._entries[next(s for s in table._entries if "[144,576,1,1]" in s)]
    model = TableCostModel(table)
    assert model.op_costs(g)[by_name["se3"]] == pytest.approx(analytic[by_name["se3"]])


def test_an_empty_table_is_the_analytic_model():
    g = _tiny()
    model = TableCostModel(CostTable(DEVICE), fused_epilogues=False)
    assert model.graph_cost(g) == pytest.approx(te.AnalyticCostModel("h100").graph_cost(g))
    assert model.misses == g.num_ops


def test_make_cost_model_reads_table_files(tmp_path):
    g = _tiny()
    path = tmp_path / "t.h5"
    cost_table.save(_table_for(g), path)
    model = make_cost_model(f"table:{path}")
    assert model.name == f"table:{path}" and len(model) == len(_table_for(g))
    assert g.cost(model) == pytest.approx(model.graph_cost(g))
    with pytest.raises(CostModelError, match="needs a file"):
        make_cost_model("table")
    with pytest.raises(CostTableError):
        make_cost_model(f"table:{tmp_path / 'missing.h5'}")


def test_search_and_candidates_run_on_the_table_model():
    g = _tiny()
    model = TableCostModel(_table_for(g))
    cands = g.candidates(model=model)
    assert cands and all(np.isfinite(c.cost_delta) for c in cands)
    result = te.search(g, "backtracking", budget=20, model=model)
    assert result.final_cost <= result.initial_cost
    assert result.initial_cost == pytest.approx(model.graph_cost(g))


def test_cuda_model_without_a_gpu_is_a_clear_error():
    from taso_env.gpu import cuda_backend

    if cuda_backend.available():
        pytest.skip("a GPU is available here")
    with pytest.raises(CostModelError, match="not available"):
        make_cost_model("cuda")


def test_greedy_path_descends_to_greedy_local_optimum_in_evenly_spaced_graphs():
    model = make_cost_model("table:data/costs/h100_fp32.h5")
    g = te.graphs.build("nasrnn", seed=None)
    full = cost_table.greedy_path(g, 10_000, model=model)
    costs = [model.graph_cost(x) for x in [g] + full]
    assert len(full) > 10 and all(b < a for a, b in zip(costs, costs[1:]))  # strictly down every step
    assert full[-1].cost(model) == pytest.approx(te.search(g, "greedy", model=model).final_cost, rel=1e-9)
    spaced = cost_table.greedy_path(g, 5, model=model)
    assert [x.hash() for x in spaced] == [full[round(i * (len(full) - 1) / 4)].hash() for i in range(5)]
    assert cost_table.greedy_path(full[-1], 5, model=model) == []  # at the optimum: nothing left


def test_commuted_adds_and_muls_share_one_entry_so_commuting_gains_nothing():
    b = te.GraphBuilder("bias", seed=0)
    x, bias = b.input("x", [1, 128, 768]), b.weight("bias", [768])
    b.output(b.add(x, bias), "y")
    b.output(b.add(bias, x), "z")
    b.output(b.mul(bias, x), "w")
    g = b.build()
    sigs = [s for _, _, s, _ in _signatures(g)]
    assert sigs[0] == sigs[1] == "Add||float32[1,128,768],float32[768]|float32[1,128,768]"
    assert sigs[2].startswith("Mul||float32[1,128,768],float32[768]|")
    # A table written with the other order (older files) still answers for both.
    model = TableCostModel(CostTable(DEVICE, "fp32", {"Add||float32[768],float32[1,128,768]|float32[1,128,768]":
                                                      (0.004, 0.003)}), device=DEVICE)
    adds = [i for i, op in enumerate(g.ops) if op.type == "Add"]
    assert [model.op_costs(g)[i] for i in adds] == pytest.approx([0.004, 0.004])
    # On the shipped table no commute rewrite of BERT changes the estimate.
    shipped = make_cost_model("table:data/costs/h100_fp32.h5")
    commuted = [c for c in te.graphs.build("bert_base", seed=None).candidates(model=shipped)
                if c.rule_name in ("commute_add", "commute_mul")]
    assert commuted and all(c.cost_delta == 0 for c in commuted)


def test_element_wise_ops_of_one_element_count_share_one_entry(tmp_path):
    # A flat map costs what its element count costs: the scale Div before or after K's
    # Transpose is one entry, so moving it gains nothing from measurement noise.
    b = te.GraphBuilder("scale", seed=0)
    k, s = b.input("k", [1, 12, 64, 128]), b.weight("s", [])
    b.output(b.op("Div", [k, s]), "a")
    b.output(b.op("Div", [b.transpose(k, [0, 1, 3, 2]), s]), "b")
    b.output(b.add(b.input("x", [1, 128, 768]), b.weight("bias", [768])), "c")  # a broadcast keeps its shapes
    sigs = [sig for _, t, sig, _ in _signatures(b.build()) if t in ("Div", "Add")]
    assert sigs[0] == sigs[1] == "Div||float32[98304],float32[]|float32[98304]"
    assert sigs[2] == "Add||float32[1,128,768],float32[768]|float32[1,128,768]"
    # A table written with shapes (older files) is read canonically: two shapes of one
    # configuration become one entry, their mean.
    path = tmp_path / "old.h5"
    cost_table.save(CostTable(DEVICE, "fp32", {"Relu||float32[1]|float32[1]": (1.0, 1.0),
                                               "Relu||float32[2]|float32[2]": (1.0, 1.0)}), path)
    with h5py.File(path, "a") as f:
        group = f["tables"][next(iter(f["tables"]))]
        for name, values in (("signature", ["Relu||float32[1,64,8,8]|float32[1,64,8,8]",
                                            "Relu||float32[1,16,16,16]|float32[1,16,16,16]"]),
                             ("ms", [0.002, 0.004]), ("analytic_ms", [0.001, 0.001])):
            del group[name]
            group[name] = np.array(values, dtype=h5py.string_dtype() if name == "signature" else np.float64)
    t = cost_table.load(path)
    assert t.items() == [("Relu||float32[4096]|float32[4096]", pytest.approx(0.003), pytest.approx(0.001))]
    assert "Relu||float32[1,4096]|float32[1,4096]" in t and t.get("Relu||float32[4096,1]|float32[4096,1]") == 0.003


def test_signature_kinds_pick_the_convolutions_the_executor_runs_on_its_own_paths():
    shipped = cost_table.load(os.path.join(os.path.dirname(__file__), "..", "data", "costs", "h100_fp32.h5"))
    pointwise = {s for s in shipped if cost_table.signature_is(s, "pointwise-conv")}
    depthwise = {s for s in shipped if cost_table.signature_is(s, "depthwise-conv")}
    convs = {s for s in shipped if cost_table.signature_is(s, "Conv2D")}
    assert pointwise and depthwise and not pointwise & depthwise and pointwise | depthwise < convs
    assert len(convs) == shipped.op_types()["Conv2D"]
    for sig in pointwise:
        op = _core.parse_op_signature(sig)
        assert op["inputs"][1][1][2:] == (1, 1) and op["ints"]["group"] == [1] and op["ints"]["strides"] == [1, 1]
    stem = ("Conv2D|activation=0;dilations=1,1;group=1;pads=0,0,0,0;strides=2,2|"
            "float32[1,64,56,56],float32[128,64,1,1],float32[128]|float32[1,128,28,28]")
    assert not cost_table.signature_is(stem, "pointwise-conv")  # strided: not a GEMM over the pixels
    grouped = ("Conv2D|activation=0;dilations=1,1;group=32;pads=1,1,1,1;strides=1,1|"
               "float32[1,128,28,28],float32[128,4,3,3],float32[128]|float32[1,128,28,28]")
    assert not cost_table.signature_is(grouped, "depthwise-conv")  # ResNeXt: 4 channels a group
    assert not cost_table.signature_is("Relu||float32[4]|float32[4]", "pointwise-conv")
    with pytest.raises(ValueError):
        cost_table.signature_is("Conv2D|garbage", "pointwise-conv")


def test_measure_costs_only_refuses_what_it_cannot_select(tmp_path):
    from rlflow.cli import main

    out = str(tmp_path / "t.h5")
    with pytest.raises(SystemExit, match="--signatures-from"):
        main(["measure-costs", "--graphs", "squeezenet", "--only", "pointwise-conv", "--out", out])
    shipped = os.path.join(os.path.dirname(__file__), "..", "data", "costs", "h100_fp32.h5")
    with pytest.raises(SystemExit, match="depthwise-conv"):
        main(["measure-costs", "--signatures-from", shipped, "--only", "Convolution", "--out", out])
    assert not os.path.exists(out)
