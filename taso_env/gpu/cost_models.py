"""The measured cost models, registered in the engine's cost-model registry on import:

- `table:<path.h5>` — measured op costs replayed from an HDF5 cost table
  (`taso_env.gpu.cost_table`), keyed by op signature; misses fall back to the analytic
  model (scaled per op type to the table) and are counted (`misses`). A shipped table
  can be named without its path ("table:h100_fp32").
- `table+residency:<path.h5>` — the same, with the weight-residency term.
- `cuda[:fp32|tf32][:<path.h5>]` — measures each op configuration on the GPU on first
  use (CUDA backend, `taso_env.gpu.cuda_backend`), caches it in its table and writes the
  table to `<path.h5>` on `save()`. Strict fp32 unless tf32 is named.

`import taso_env` imports this module, so `make_cost_model("table:...")` works wherever
the engine is used; the engine itself never imports the GPU layer.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from taso_env import _core, shipped_data
from taso_env.engine.cost_model import CostModel, CostModelError, register_cost_model
from taso_env.errors import TasoEnvError
from taso_env.gpu import cost_table

if TYPE_CHECKING:
    from taso_env.engine.graph import Graph

class TableCostModel(CostModel):
    """Measured op costs from a cost table; analytic fallback for misses (C++ model).

    Args:
        table: a `CostTable` or the path of an HDF5 cost table.
        device, math: which table of the file (optional where the file has one).
        profile: analytic profile of the fallback (default: h100, or h100-tf32 for tf32).
        fused_epilogues: the ops the CUDA executor runs in a convolution's epilogue
            (an activation or residual Add that is a convolution's only reader,
            taso/epilogue.h) cost nothing, as on the GPU; False prices every op alone
            (the executor with RLFLOW_FUSE=0).
        weight_residency: GEMVs (GEMMs of a constant weight and at most 16 rows) cost
            more once the distinct weights they read overflow the L2, as measured on
            the H100 in fp32 (taso/weight_residency.h; spec "table+residency:<path>").
            Off by default: it ranks graphs closer to their measured runtimes, but as a
            search objective it walls greedy descent and backtracking in at a local
            optimum (nasrnn: 175.0 us where they reach 116.8 without it).

    Raises:
        CostTableError: the file is missing, corrupt, or has no matching table.
    """

    def __init__(self, table, *, device: str | None = None, math: str | None = None,
                 profile: str | None = None, fused_epilogues: bool = True,
                 weight_residency: bool = False):
        if not isinstance(table, cost_table.CostTable):
            path = str(table)
            table = cost_table.load(path, device, math)
            self.name = f"table:{path}"
        else:
            self.name = f"table:{table.device}/{table.math}"
        self.device, self.math = table.device, table.math
        profile = profile or ("h100-tf32" if table.math == "tf32" else "h100")
        self._model = _core.TableModel(profile, fused_epilogues, weight_residency)
        if not fused_epilogues:
            self.name += "+unfused"
        if weight_residency:
            self.name += "+residency"
        for sig, ms, analytic in table.items():
            self._model.set(sig, ms, analytic)

    @property
    def core(self) -> _core.CoreCostModel:
        return self._model

    def op_costs(self, graph: Graph) -> list[float]:
        return self._model.op_costs(graph.core)

    def graph_cost(self, graph: Graph) -> float:
        return self._model.graph_cost(graph.core)

    @property
    def hits(self) -> int:
        """Op lookups answered by the table."""
        return self._model.hits

    @property
    def misses(self) -> int:
        """Op lookups that fell back to the analytic estimate."""
        return self._model.misses

    def missed_signatures(self) -> list[str]:
        """Distinct op signatures that missed (what a measuring run should add)."""
        return self._model.missed_signatures()

    def reset_counters(self) -> None:
        self._model.reset_counters()

    def __len__(self) -> int:
        return len(self._model)

    def to_table(self):
        """The model's entries (measured ones included) as a `CostTable`."""
        t = cost_table.CostTable(self.device, self.math)
        for sig, ms, analytic in self._model.entries():
            t.set(sig, ms, analytic)
        return t


class CudaCostModel(TableCostModel):
    """Measures each op configuration on this GPU on first use and keeps it in its
    table; `save()` writes the table (merged into `path`'s existing entries).

    Raises:
        CudaUnavailableError: no CUDA backend or no GPU here.
    """

    def __init__(self, math: str = "fp32", path: str | None = None):
        from taso_env.gpu import cuda_backend

        cuda_backend.require()
        device = cuda_backend.device_name()
        table = cost_table.CostTable(device, math)
        if path and os.path.exists(path):
            try:
                table = cost_table.load(path, device, math)
            except cost_table.MissingTableError:
                pass
        super().__init__(table)
        self.path = path
        self.name = f"cuda:{math}" + (f":{path}" if path else "")
        cuda_backend.install_measurer(self._model, math)

    @property
    def measured(self) -> int:
        """Op configurations measured on the GPU by this model."""
        return self._model.measured

    def save(self, path: str | None = None) -> str:
        """Writes the table to `path` (default: the model's path); returns the path."""
        path = path or self.path
        if not path:
            raise CostModelError("CudaCostModel.save needs a path")
        cost_table.save(self.to_table(), path)
        return path


def table_path(arg: str) -> str:
    """A cost table's file: the path as given where it exists, else a shipped table of
    that name ("table:h100_fp32", or "table:data/costs/h100_fp32.h5" outside a checkout)."""
    if os.path.exists(arg):
        return arg
    shipped = shipped_data.cost_tables()
    name = os.path.basename(arg)[:-3] if arg.endswith(".h5") else arg
    return str(shipped[name]) if name in shipped else arg  # a missing file: the table loader says so


def measured_table_spec(math: str = "fp32") -> str:
    """The cost model that prices graphs as the GPU runs them in `math` mode: the shipped
    H100 table measured in that mode ("table:h100_fp32", "table:h100_tf32",
    "table:h100_fp16"; bf16 is priced by the fp16 table, as the H100's tensor cores run
    both at one rate), or the analytic H100 profile of that mode where no table is shipped.
    `rlflow optimize`'s default: the analytic model is calibrated to PyTorch's kernels,
    not to rlflow's executor (it fuses every Conv + ReLU of mobilenet_v3_large, a graph
    that measures 4% slower than the original in fp32; the fp32 table's graph does not)."""
    name = f"h100_{'fp16' if math == 'bf16' else math}"
    if name in shipped_data.cost_tables():
        return f"table:{name}"
    return "analytic:h100-tf32" if math == "tf32" else "analytic:h100"


def _table_model(kind: str):
    def make(arg: str) -> TableCostModel:
        if not arg:
            raise CostModelError(f"cost model {kind!r} needs a file: '{kind}:<path.h5>'")
        return TableCostModel(table_path(arg), weight_residency=kind == "table+residency")

    return make


def _cuda_model(arg: str) -> CudaCostModel:
    from taso_env.gpu.cuda_backend import MATH_MODES

    math, _, path = arg.partition(":")
    if math and math not in MATH_MODES:  # "cuda:<path>" without a math mode
        math, path = "", arg
    try:
        return CudaCostModel(math or "fp32", path or None)
    except TasoEnvError as err:
        spec = f"cuda:{arg}" if arg else "cuda"
        raise CostModelError(f"cost model {spec!r} is not available here: {err}") from err


register_cost_model("table", _table_model("table"), "'table[+residency]:<path.h5>'")
register_cost_model("table+residency", _table_model("table+residency"))
register_cost_model("cuda", _cuda_model, "'cuda'")
