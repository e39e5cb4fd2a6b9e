"""Every core op with its facets, in one registry: what the C++ operator table
(taso/op_table.def) says of it, its numpy reference kernel, the ONNX op types that load
as it and its ONNX emitter; and the check that no op lacks a facet.

The facets themselves live where their layer dispatches on them:

    op type, arity, attributes, element-wise class   taso_env/csrc/include/taso/op_table.def
    reference kernel                                 engine/reference_ops.py  OP_REGISTRY
    ONNX import                                      onnx/converters.py       CONVERTERS
    ONNX export                                      onnx/op_exporters.py     EXPORTERS

`operators()` joins them by op type; `missing_facets` and `stray_entries` are the checks
(tests/test_operator_facets.py runs them with the C++-only facets added). docs/operators.md,
"How to add an operator", lists every place in order.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from taso_env import _core
from taso_env.engine.reference_ops import OP_REGISTRY, OpFn
from taso_env.onnx.converters import CONVERTERS
from taso_env.onnx.op_exporters import EXPORTERS, Emitter

#: Facet names of the registry's Python-side tables.
REFERENCE_KERNEL = "reference kernel (engine/reference_ops.py OP_REGISTRY)"
ONNX_IMPORT = "ONNX import (onnx/converters.py CONVERTERS)"
ONNX_EXPORT = "ONNX export (onnx/op_exporters.py EXPORTERS)"


@dataclass(frozen=True)
class Operator:
    """One core op type and its facets (None / empty where it has none)."""

    name: str
    code: int  # the op-type code: OpType's value, the observation's one-hot column
    schema: Mapping[str, Any]  # _core.op_type_schema: inputs, attributes, element-wise class
    reference: OpFn | None
    onnx_imports: tuple[str, ...]  # ONNX op types that load as this op
    onnx_export: Emitter | None


@dataclass(frozen=True)
class MissingFacet:
    """An op type without a facet it should have."""

    op_type: str
    facet: str

    def __str__(self) -> str:
        return f"op {self.op_type!r} has no {self.facet}"


@dataclass(frozen=True)
class StrayEntry:
    """An entry of a facet table naming an op type that does not exist."""

    facet: str
    op_type: str

    def __str__(self) -> str:
        return f"{self.facet} names op {self.op_type!r}, which is no op type"


@functools.cache
def operators() -> Mapping[str, Operator]:
    """Every op type of the core, in op-type code order, with its facets. Read-only."""
    imports: dict[str, list[str]] = {}
    for onnx_type, rule in CONVERTERS.items():
        imports.setdefault(rule.core_op_type, []).append(onnx_type)
    return MappingProxyType({
        name: Operator(name=name, code=code, schema=MappingProxyType(_core.op_type_schema(name)),
                       reference=OP_REGISTRY.get(name), onnx_imports=tuple(imports.get(name, ())),
                       onnx_export=EXPORTERS.get(name))
        for code, name in enumerate(_core.list_op_types())})


def python_facets() -> dict[str, frozenset[str]]:
    """The registry's Python-side facet tables: facet name -> op types listed in it."""
    return {
        REFERENCE_KERNEL: frozenset(OP_REGISTRY),
        ONNX_IMPORT: frozenset(rule.core_op_type for rule in CONVERTERS.values()),
        ONNX_EXPORT: frozenset(EXPORTERS),
    }


def missing_facets(op_types: Sequence[str], facets: Mapping[str, Collection[str]],
                   exempt: Mapping[str, Collection[str]]) -> list[MissingFacet]:
    """Each (op type, facet) where the op is neither in the facet's table nor exempt.

    Args:
        op_types: every op type (the C++ table's, or a test's with a dummy op added).
        facets: facet name -> the op types that have it.
        exempt: facet name -> op types without that facet on purpose (Input and Weight
            have no reference kernel: they are fed).

    Returns:
        The missing facets, by op type then facet, in the orders given.
    """
    return [MissingFacet(op, facet) for op in op_types for facet, have in facets.items()
            if op not in have and op not in exempt.get(facet, ())]


def stray_entries(op_types: Collection[str], facets: Mapping[str, Collection[str]]) -> list[StrayEntry]:
    """Each facet-table entry (or exemption) naming an op type not in `op_types`."""
    known = set(op_types)
    return [StrayEntry(facet, op) for facet, have in facets.items() for op in sorted(set(have) - known)]


__all__ = ["ONNX_EXPORT", "ONNX_IMPORT", "REFERENCE_KERNEL", "MissingFacet", "Operator", "StrayEntry",
           "missing_facets", "operators", "python_facets", "stray_entries"]
