"""Every op type has every facet: walks the C++ operator table (taso/op_table.def, through
`_core.list_op_types`) and fails naming the op and the facet that is missing, so that a
new op cannot be half added (docs/operators.md, "How to add an operator", lists the
places in order).

Facets come from three kinds of source:
- the Python registry (`taso_env.onnx.op_registry`): reference kernel, ONNX import, ONNX
  export;
- behaviour of the built core: shape inference and analytic FLOPs of every op of
  `graph_fixtures.all_ops_graph` (which must hold every op type), the element-wise
  FLOPs column of the table;
- C++ source read as text, for facets of the CUDA executor that cannot be introspected
  on a machine without a GPU (its module `_cuda` is absent there): the cases of
  `compile_op`'s switch in taso_env/csrc/gpu/op_steps.cc (the executor step), the
  OpType -> FusedOp mapping of elementwise_fusion.cc (chain instruction) and the
  `case FusedOp::k...` maths of kernels_fused.cu (chain kernel).

Ops without a facet on purpose are listed by name in `EXEMPT`, with the reason.
`test_a_dummy_op_without_facets_is_reported` shows the check naming a forgotten facet.
"""

import re
from pathlib import Path

import pytest
from graph_fixtures import all_ops_graph

from taso_env import _core
from taso_env.onnx import op_registry
from taso_env.rules import load_rule_specs
from taso_env.tuning.space import LAUNCH_OP_TYPES

ROOT = Path(__file__).resolve().parents[1]
GPU_SRC = ROOT / "taso_env" / "csrc" / "gpu"

# Op-type codes are observation columns, stored in rollout files and checkpoints: the
# table may only grow at its end.
CODES_IN_USE = (
    "Input", "Weight", "Conv2D", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh",
    "Erf", "Gelu", "Sqrt", "Exp", "Identity", "Concat", "Split", "Transpose", "Reshape", "Flatten",
    "MaxPool2D", "AvgPool2D", "GlobalAvgPool", "BatchNorm", "Enlarge", "Softmax", "Pad", "ReduceMean",
    "ReduceSum", "LayerNorm", "Gather", "Where", "Cast", "Constant", "Opaque", "Clip", "HardSigmoid",
    "HardSwish")

SHAPE_RULE = "shape rule (engine/shape_inference.cc: it builds in all_ops_graph)"
ALL_OPS_FIXTURE = "row in tests/graph_fixtures.py all_ops_graph"
ANALYTIC_FLOPS = "FLOPs in engine/op_work.cc (non-zero on all_ops_graph)"
ELEMENTWISE_FLOPS = "FLOPs per element in taso/op_table.def"
EXECUTOR_STEP = "executor step (case in compile_op, csrc/gpu/op_steps.cc)"
CHAIN_INSTRUCTION = "chain instruction (instruction_of, csrc/gpu/elementwise_fusion.cc)"
CHAIN_KERNEL = "chain kernel maths (case FusedOp::k..., csrc/gpu/kernels_fused.cu)"
DOCS_ROW = "row in docs/operators.md"

FED = {"Input", "Weight"}  # graph inputs and parameters: fed by name, never computed
# Ops that move data: bytes only, 0 FLOPs by design (docs/operators.md, "Work counts").
DATA_MOVEMENT = {"Transpose", "Reshape", "Flatten", "Concat", "Split", "Pad", "Gather", "Cast", "Identity",
                 "Enlarge", "Constant", "GatherElements"}

#: facet -> op types without it on purpose.
EXEMPT = {
    op_registry.REFERENCE_KERNEL: FED | {"Opaque"},  # Opaque: an ONNX op the core does not model
    op_registry.ONNX_IMPORT: FED | {  # fed ops load from graph inputs and initializers
        "Enlarge", "Constant",  # made by rules only (ONNX Constants fold into weights at import)
        "Opaque"},  # what an unconvertible node loads as
    op_registry.ONNX_EXPORT: FED,  # written as graph inputs and initializers
    SHAPE_RULE: FED | {"Opaque"},  # declared output types
    ALL_OPS_FIXTURE: {"Opaque"},  # has no numerics to compare
    ANALYTIC_FLOPS: FED | DATA_MOVEMENT | {"Opaque"},  # Opaque is not in the fixture
    EXECUTOR_STEP: FED | {"Opaque"},  # fed by the caller; Opaque cannot run on the GPU
}


def _compile_op_cases(source: str) -> set[str]:
    """Op types with an executing case in op_steps.cc's compile_op: a `case OpType::kX:`
    of its switch whose code (shared with the labels falling through to it) returns a
    step, not one that breaks or throws."""
    body = source[source.index("Step compile_op("):]
    body = body[body.index("switch (op.type) {"):body.index('unsupported(op, "op type is not executable")')]
    parts = re.split(r"case OpType::k(\w+):", body)[1:]  # name, code, name, code, ...
    executing, waiting = set(), []
    for name, code in zip(parts[::2], parts[1::2], strict=True):
        waiting.append(name)
        if code.strip():  # the group's code: every label waiting shares it
            if "return" in code:
                executing.update(waiting)
            waiting = []
    return executing


def _chain_instructions(source: str) -> set[str]:
    """Op types mapped to their own FusedOp by elementwise_fusion.cc's instruction_of."""
    return {a for a, b in re.findall(r"case OpType::k(\w+): \*code = FusedOp::k(\w+);", source) if a == b}


def _documented_ops() -> set[str]:
    doc = (ROOT / "docs" / "operators.md").read_text()
    return {name for row in re.findall(r"^\| (`.*?) \|", doc, re.M) for name in re.findall(r"`(\w+)`", row)}


@pytest.fixture(scope="module")
def op_types() -> list[str]:
    return _core.list_op_types()


@pytest.fixture(scope="module")
def facets(op_types) -> dict[str, frozenset[str]]:
    """Facet name -> the op types that have it, from every source this test reads."""
    graph = all_ops_graph()
    return {
        **op_registry.python_facets(),
        ALL_OPS_FIXTURE: frozenset(o.type for o in graph.ops),
        SHAPE_RULE: frozenset(o.type for o in graph.ops if not _core.op_type_schema(o.type)["declared_outputs"]),
        ANALYTIC_FLOPS: frozenset(o.type for o in graph.ops if graph.op_work(o.id)[0] > 0),
        ELEMENTWISE_FLOPS: frozenset(t for t in op_types if _core.op_type_schema(t)["elementwise_flops"] > 0),
        EXECUTOR_STEP: frozenset(_compile_op_cases((GPU_SRC / "op_steps.cc").read_text())),
        CHAIN_INSTRUCTION: frozenset(_chain_instructions((GPU_SRC / "elementwise_fusion.cc").read_text())),
        # FusedOp::kCopy is the kernel's own instruction, no op type's.
        CHAIN_KERNEL: frozenset(re.findall(r"case FusedOp::k(\w+):", (GPU_SRC / "kernels_fused.cu").read_text()))
        - {"Copy"},
        DOCS_ROW: frozenset(_documented_ops()),
    }


@pytest.fixture(scope="module")
def exempt(op_types) -> dict[str, set[str]]:
    """EXEMPT, plus the facets that only element-wise chain ops have."""
    not_chain = {t for t in op_types if _core.op_type_schema(t)["elementwise"] != "chain"}
    not_computing_elementwise = {t for t in op_types if _core.op_type_schema(t)["elementwise"] == "none"}
    return {**EXEMPT, CHAIN_INSTRUCTION: not_chain, CHAIN_KERNEL: not_chain,
            ELEMENTWISE_FLOPS: not_computing_elementwise | {"Identity"}}  # Identity: data movement


def test_op_type_codes_only_grow_at_the_end(op_types):
    assert tuple(op_types[:len(CODES_IN_USE)]) == CODES_IN_USE
    assert [op.code for op in op_registry.operators().values()] == list(range(len(op_types)))


def test_every_op_type_has_every_facet(op_types, facets, exempt):
    missing = op_registry.missing_facets(op_types, facets, exempt)
    assert not missing, "\n".join(map(str, missing))


def test_facet_tables_and_exemptions_name_only_op_types(op_types, facets, exempt):
    stray = op_registry.stray_entries(op_types, facets) + op_registry.stray_entries(op_types, exempt)
    assert not stray, "\n".join(map(str, stray))


def test_an_exempt_op_really_lacks_the_facet(facets):
    """An exemption that is no longer needed is removed, so that the list stays true."""
    stale = [(facet, op) for facet, ops in EXEMPT.items() for op in sorted(ops) if op in facets[facet]]
    assert not stale, f"exempt yet present: {stale}"


def test_a_dummy_op_without_facets_is_reported(op_types, facets, exempt):
    """A new op listed in the C++ table and nowhere else is reported for every facet
    that has no exemption for it, by name."""
    missing = op_registry.missing_facets([*op_types, "Dummy"], facets, exempt)
    reported = {m.facet for m in missing if m.op_type == "Dummy"}
    assert {m.op_type for m in missing} == {"Dummy"}
    assert reported == set(facets) - {f for f, ops in exempt.items() if "Dummy" in ops}
    assert "op 'Dummy' has no reference kernel (engine/reference_ops.py OP_REGISTRY)" in map(str, missing)


def test_a_dummy_op_given_one_facet_is_reported_for_the_others(op_types, facets, exempt):
    with_export = {**facets, op_registry.ONNX_EXPORT: facets[op_registry.ONNX_EXPORT] | {"Dummy"}}
    missing = op_registry.missing_facets([*op_types, "Dummy"], with_export, exempt)
    assert op_registry.MissingFacet("Dummy", op_registry.ONNX_EXPORT) not in missing
    assert op_registry.MissingFacet("Dummy", op_registry.REFERENCE_KERNEL) in missing
    assert op_registry.MissingFacet("Dummy", DOCS_ROW) in missing


def test_a_misspelt_table_entry_is_reported(op_types, facets):
    typo = {op_registry.ONNX_EXPORT: facets[op_registry.ONNX_EXPORT] | {"HardSigmiod"}}
    assert op_registry.stray_entries(op_types, typo) == [op_registry.StrayEntry(op_registry.ONNX_EXPORT,
                                                                                "HardSigmiod")]


def test_registry_joins_the_facets_of_each_op():
    ops = op_registry.operators()
    hard_sigmoid = ops["HardSigmoid"]
    assert hard_sigmoid.onnx_imports == ("HardSigmoid",)
    assert hard_sigmoid.reference is not None and hard_sigmoid.onnx_export is not None
    assert hard_sigmoid.schema["elementwise"] == "chain" and hard_sigmoid.schema["elementwise_flops"] == 3
    assert set(ops["Reshape"].onnx_imports) == {"Reshape", "Squeeze", "Unsqueeze"}
    assert ops["Identity"].schema["elementwise"] == "flat"
    assert ops["Where"].schema["elementwise"] == "none"
    assert ops["Input"].reference is None and ops["Input"].onnx_export is None


def test_executor_step_reader_sees_the_switch():
    """The source reader finds compile_op's executing cases (guards the parsing itself)."""
    cases = _compile_op_cases((GPU_SRC / "op_steps.cc").read_text())
    assert {"Conv2D", "HardSwish", "Constant", "Softmax"} <= cases
    assert not cases & {"Input", "Weight", "NumOpTypes"}


def test_ops_named_by_rules_and_the_tuner_exist(op_types):
    in_rules = {op["type"] for spec in load_rule_specs() for side in ("source", "target")
                for op in spec[side]["ops"]}
    assert in_rules <= set(op_types), in_rules - set(op_types)
    assert LAUNCH_OP_TYPES <= set(op_types) - FED - {"Opaque"}, LAUNCH_OP_TYPES - set(op_types)


def test_each_onnx_op_loads_as_the_core_op_its_import_row_names(tmp_path):
    """Exported and loaded again, each node of all_ops_graph whose ONNX type has a
    CONVERTERS row loads as that row's core op (the registry's import facet is true)."""
    from taso_env import load_onnx
    from taso_env.onnx.converters import CONVERTERS

    path = tmp_path / "all_ops.onnx"
    model = all_ops_graph().export_onnx(path)
    loaded = {o.name: o.type for o in load_onnx(str(path)).ops}
    checked = {node.op_type for node in model.graph.node if node.op_type in CONVERTERS}
    wrong = [(node.name, node.op_type, loaded.get(node.name)) for node in model.graph.node
             if node.op_type in CONVERTERS and loaded.get(node.name) != CONVERTERS[node.op_type].core_op_type]
    assert not wrong, wrong
    assert len(checked) >= 30
