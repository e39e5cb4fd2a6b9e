"""The table cost model prices the ops the CUDA executor runs in a convolution's
epilogue (taso/epilogue.h) at nothing, as the executor runs them: every case of the
rule, exact cost deltas for rewrites that change which ops fuse, and search no longer
credited for fusing what the executor fuses anyway (tests/test_cuda_fusion.py checks
that the executor fuses exactly these ops)."""

import random

import pytest
from graph_fixtures import CONV_EPILOGUE_OPS, CONV_EPILOGUE_PATTERNS, conv_epilogue_graph, epilogue_free_ops

import taso_env as te
from taso_env import shipped_data
from taso_env.engine.cost_model import TableCostModel

TABLE = shipped_data.cost_tables()["h100_fp32"]


@pytest.fixture(scope="module")
def models():
    return TableCostModel(TABLE), TableCostModel(TABLE, fused_epilogues=False)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pattern", CONV_EPILOGUE_PATTERNS)
def test_the_ops_a_convolution_runs_in_its_epilogue_cost_nothing(pattern, bias, models):
    g = conv_epilogue_graph(pattern, bias)
    free, fused, alone = epilogue_free_ops(g, *models)
    assert sorted(g.ops[i].type for i in free) == sorted(CONV_EPILOGUE_OPS[pattern])
    assert all(fused[i] == alone[i] for i in range(g.num_ops) if i not in free)
    assert models[0].graph_cost(g) == pytest.approx(sum(fused))
    assert models[0].name.endswith(".h5") and models[1].name.endswith("+unfused")


def test_fusing_what_the_executor_fuses_anyway_saves_nothing(models):
    g = te.load_onnx(str(shipped_data.models()["resnet18"]))
    fused, alone = models
    cands = {m: [c for c in g.candidates(model=m) if c.rule_name == "fuse_conv_relu"] for m in models}
    assert cands[fused] and len(cands[fused]) == len(cands[alone])
    relu_ms = min(-c.cost_delta for c in cands[alone])
    assert relu_ms > 1e-3  # priced alone, each fusion saves a Relu kernel
    # run by the executor, the Relu was the convolution's epilogue already: what remains is
    # the measured difference of the two convolution kernels, a fraction of that
    assert all(abs(c.cost_delta) < 0.5 * relu_ms for c in cands[fused])
    assert te.search(g, "greedy", model=fused).speedup < 1.005 < te.search(g, "greedy", model=alone).speedup


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v3_large", "squeezenet1_1"])
def test_cost_deltas_stay_exact_where_rewrites_change_what_fuses(name, models):
    """A rewrite can make a kept op start or stop running in an epilogue (a merged
    convolution's readers, a reader removed or added): the candidates' deltas must still
    be the child's cost less the parent's, to the unit."""
    fused, alone = models
    g = te.load_onnx(str(shipped_data.models()[name]))
    rng = random.Random(0)
    differ = 0
    for _ in range(8):
        cands = g.candidates(model=fused)
        if not cands:
            break
        base = fused._model.graph_cost_units(g._core)
        by_place = {(c.rule_id, c.location): c.cost_delta for c in g.candidates(model=alone)}
        for c in rng.sample(cands, min(30, len(cands))):
            child = g.apply(c)
            assert fused._model.graph_cost_units(child._core) - base == round(c.cost_delta / 1e-12), c.rule_name
            differ += abs(by_place[(c.rule_id, c.location)] - c.cost_delta) > 1e-9
        g = g.apply(rng.choice(cands))
    assert differ >= 5  # the walk did exercise rewrites whose cost the fusion changes
