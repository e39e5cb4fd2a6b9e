"""The CUDA backend's Python face: run graphs on the GPU, measure them end to end, and
measure op configurations for the `table` / `cuda` cost models.

    from taso_env.gpu import cuda_backend as cb
    if cb.available():
        out = cb.run(graph, feeds)                     # {output name: array}
        m = cb.measure(graph)                          # Measurement(median_ms=...)
        rows, skipped = cb.measure_op_costs(graph)     # per-op GPU times

Math mode is fixed per call and recorded with every measurement: "fp32" (strict, no
TF32 anywhere: cuBLAS default math, cuDNN FMA math) or "tf32". The backend is built
only where CUDA, cuDNN and cuBLAS are found (taso_env._cuda); elsewhere `available()`
is False and every call raises CudaUnavailableError. Nothing here imports TensorFlow.

Opaque ONNX ops cannot run on the GPU. With `opaque="error"` (default) a graph holding
one needed op raises UnsupportedGraphError naming it. With `opaque="host"`, the opaque
ops' outputs are computed on the host by the numpy reference executor and fed to the
GPU, which runs everything else (BERT's attention-mask preprocessing, say); for
measurement this is allowed only where the opaque ops depend on input preprocessing
alone (no heavy op upstream), and their host time is not part of the measured runtime.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from taso_env.errors import MissingFeedError, TasoEnvError, UnsupportedOpError
from taso_env.gpu.backend_settings import (  # noqa: F401  (re-exported: the backend's settings)
    ALGO_CACHE_ENV,
    CUDNN_FIND_ENV,
    FUSE_ENV,
    GEMM_ALGO_CACHE_ENV,
    TUNE_LOG_ENV,
    BackendSwitches,
    backend_switches,
    default_algo_cache,
    install_algo_caches,
    seed_algo_cache,
)

if TYPE_CHECKING:
    from taso_env.engine.graph import Graph

#: fp32: strict float32; tf32: TF32 tensor cores for convolutions and GEMMs; fp16 / bf16:
#: float32 tensors stored 16-bit on the device (weights and inputs cast when uploaded,
#: outputs returned as float32), float32 accumulation.
MATH_MODES = ("fp32", "tf32", "fp16", "bf16")
#: Op types allowed upstream of a host-evaluated opaque op when measuring.
_HOST_PREFIX_OPS = frozenset({"Input", "Weight", "Constant", "Opaque", "Cast", "Identity", "Reshape",
                              "Flatten", "Gather", "Where", "Add", "Sub", "Mul", "Div", "Transpose"})


class CudaBackendError(TasoEnvError):
    """A CUDA, cuDNN or cuBLAS call failed (the message names the call and the op)."""


class CudaUnavailableError(CudaBackendError):
    """The CUDA backend is not built here, or there is no GPU."""


class UnsupportedGraphError(CudaBackendError, UnsupportedOpError):
    """The graph holds an op the GPU backend cannot run (names the op)."""


#: Alignment of every device tensor (bytes); an executor's `arena_offset` is a multiple of it.
ARENA_ALIGN = 256


@functools.cache
def _module():
    install_algo_caches()
    try:
        from taso_env import _cuda
    except ImportError as err:
        return None, f"the CUDA backend is not built in this installation ({err})"
    if _cuda.num_devices() == 0:
        return None, "no CUDA device is visible"
    return _cuda, None


def available() -> bool:
    """True where the backend is built and a GPU is visible."""
    return _module()[0] is not None


def unavailable_reason() -> str | None:
    """Why `available()` is False (None when it is True)."""
    return _module()[1]


def require():
    """The compiled backend module; raises CudaUnavailableError saying why not."""
    mod, reason = _module()
    if mod is None:
        raise CudaUnavailableError(reason)
    return mod


def _check_math(math: str) -> str:
    if math not in MATH_MODES:
        raise ValueError(f"unknown math mode {math!r}; use one of {MATH_MODES}")
    return math


@functools.cache
def device_info() -> dict:
    """Device name, compute capability, memory, CUDA / cuDNN / cuBLAS versions."""
    return require().info()


def device_name() -> str:
    return device_info()["name"]


def memory_info() -> tuple[int, int]:
    """(free, total) bytes of GPU memory (cudaMemGetInfo)."""
    return require().mem_info()


@dataclass
class Measurement:
    """End-to-end runtime of a graph: median of `repeats` samples (ms)."""

    median_ms: float
    min_ms: float
    mean_ms: float
    repeats: int
    inner: int
    cuda_graph: bool
    math: str
    device: str
    samples_ms: list[float] = field(default_factory=list, repr=False)


@dataclass(frozen=True)
class PlannedStep:
    """One step of an executor's run (planning.h's build_step_plan).

    Attributes:
        op: the op whose output the step writes (steps run in op id order).
        call: "op" (the op's own kernel), "conv" (a convolution with its epilogue),
            "gemm" (a cuBLASLt GEMM with its folded ops), "chain" (element-wise ops in one
            kernel) or "strided_copy" (a view op that must run).
        constant: folded: run once before the first run, not per run.
        ops: every op whose work the step does, `op` included, in id order.
    """

    op: int
    call: str
    constant: bool
    ops: tuple[int, ...]


@dataclass(frozen=True)
class PlanningReport:
    """What each of the executor's planning passes decided (taso_env/csrc/gpu/planning.h).

    Attributes:
        needed: ops the graph outputs need (needed_ops), in id order.
        host_fed: ops whose outputs the host provides.
        arena_bytes: bytes of the device arena (plan_arena).
        aliases: Reshape-likes whose output is their input's buffer (plan_arena).
        offsets: {needed op: [byte offset in the arena per output]} as the steps use them
            (after place_views); None for an output not stored.
        folded: ops computed once, before the first run (plan_constant_folding).
        strided_views: views (Transposes, constant Gathers) that run no step: their
            readers read the data strided (fuse_steps).
        in_place_concats: Concats whose producers write into their slices (place_views).
        in_place_splits: Splits whose parts are slices of their input (place_views).
        fused_ops: ops that run no step of their own.
        steps: the steps, per run and folded, in the order they run (build_step_plan).
    """

    needed: tuple[int, ...]
    host_fed: tuple[int, ...]
    arena_bytes: int
    aliases: tuple[int, ...]
    offsets: dict[int, tuple[int | None, ...]]
    folded: tuple[int, ...]
    strided_views: tuple[int, ...]
    in_place_concats: tuple[int, ...]
    in_place_splits: tuple[int, ...]
    fused_ops: int
    steps: tuple[PlannedStep, ...]

    @classmethod
    def from_backend(cls, raw: Mapping[str, Any]) -> PlanningReport:
        """The report from the compiled module's dict (GpuExecutor.planning_report)."""
        steps = tuple(PlannedStep(s["op"], s["call"], bool(s["constant"]), tuple(s["ops"])) for s in raw["steps"])
        return cls(needed=tuple(raw["needed"]), host_fed=tuple(raw["host_fed"]), arena_bytes=int(raw["arena_bytes"]),
                   aliases=tuple(raw["aliases"]), offsets={k: tuple(v) for k, v in raw["offsets"].items()},
                   folded=tuple(raw["folded"]), strided_views=tuple(raw["strided_views"]),
                   in_place_concats=tuple(raw["in_place_concats"]), in_place_splits=tuple(raw["in_place_splits"]),
                   fused_ops=int(raw["fused_ops"]), steps=steps)

    def step_of(self, op: int) -> PlannedStep | None:
        """The step that does op `op`'s work (None: a source, host-fed op, alias, view,
        in-place Concat or Split, or an op no output needs)."""
        return next((s for s in self.steps if op in s.ops), None)


def _opaque_ops(graph: Graph) -> list[int]:
    needed, stack = set(), [r.op for r in graph.outputs]
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            stack.extend(r.op for r in graph.ops[i].inputs)
    return sorted(i for i in needed if graph.ops[i].type == "Opaque")


def _check_host_prefix(graph: Graph, opaque_ids: list[int]) -> None:
    """Measurement with host opaque ops: only input preprocessing may feed them."""
    stack, seen = list(opaque_ids), set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        op = graph.ops[i]
        if op.type not in _HOST_PREFIX_OPS:
            raise UnsupportedGraphError(
                f"opaque op {graph.ops[opaque_ids[0]].name!r} depends on {op.type} op {op.name!r}; only input "
                "preprocessing may feed a host-evaluated opaque op when measuring")
        stack.extend(r.op for r in op.inputs)


def _known_scalars(graph: Graph, weights: Mapping[str, np.ndarray]) -> dict[int, float]:
    """{Weight op id: value} of the one-element weights with data that index a Gather,
    multiply (Mul) or divide (Div's divisor) a MatMul operand: the executor builds them
    into its plan (a Gather of a known index is a view of its data, a known factor folds
    into the GEMM; csrc/gpu/views.h, gemm_fusion.h)."""
    pinned = {r.op for op in graph.ops if op.type == "Mul" for r in op.inputs}
    pinned |= {op.inputs[1].op for op in graph.ops if op.type == "Div"}  # x / c: c folds as 1 / c
    pinned |= {op.inputs[1].op for op in graph.ops if op.type == "Gather"}
    out = {}
    for i in sorted(pinned):
        op = graph.ops[i]
        value = weights.get(op.name) if op.type == "Weight" else None
        if value is not None and np.asarray(value).size == 1:
            out[i] = float(np.asarray(value).reshape(-1)[0])
    return out


class Executor:
    """A graph planned on the GPU: buffers allocated once, weights uploaded once.

    Args:
        graph: the graph to run.
        math: "fp32" (strict) or "tf32".
        weights: weight data by name, over `graph.weights`; weights with no data get
            deterministic random data on the device.
        opaque: "error" or "host" (see the module docstring).
        seed: seed of the device-side random data.
        plan: the implementation choices per op (taso_env.tuning, docs/tuning.md):
            "auto" (default) runs the tuned plan stored for this graph, device and math
            mode if there is one (taso_env.gpu.plan_store), else the executor's own
            choices; None always the executor's own; or a {op id: {knob: value}} dict.
        arena_offset: bytes (a multiple of ARENA_ALIGN) every tensor is shifted by in the
            executor's device arena: where tensors lie moves the runtime slightly
            (`interleaved_measurement` samples it).
        fuse, cudnn_find, tune_log: the backend's switches (BackendSwitches); None takes
            each from its environment variable (`backend_switches`).

    Raises:
        CudaUnavailableError, UnsupportedGraphError, CudaBackendError.
    """

    def __init__(self, graph: Graph, *, math: str = "fp32", weights: Mapping[str, np.ndarray] | None = None,
                 opaque: str = "error", seed: int = 0, plan: str | Mapping[int, Mapping[str, int]] | None = "auto",
                 arena_offset: int = 0, fuse: bool | None = None, cudnn_find: bool | None = None,
                 tune_log: bool | None = None):
        if opaque not in ("error", "host"):
            raise ValueError(f"opaque must be 'error' or 'host', got {opaque!r}")
        mod = require()
        self.graph = graph
        self.math = _check_math(math)
        self.opaque_ids = _opaque_ops(graph) if opaque == "host" else []
        self._weights = {**graph.weights, **(weights or {})}
        self._op_types = [op.type for op in graph.ops]
        if isinstance(plan, str):
            if plan != "auto":
                raise ValueError(f"plan must be 'auto', None or a {{op id: choices}} mapping, got {plan!r}")
            from taso_env.gpu import plan_store

            plan = plan_store.lookup(graph, self.math)
        #: the tuning plan this executor runs ({} = the executor's own choices)
        self.plan = {int(k): dict(v) for k, v in (plan or {}).items()}
        if arena_offset < 0:  # (the executor refuses a misaligned one)
            raise ValueError(f"arena_offset must be a non-negative multiple of {ARENA_ALIGN} bytes, got {arena_offset}")
        #: the switches this executor was built with
        self.switches = backend_switches(fuse, cudnn_find, tune_log)
        self._ex = mod.GpuExecutor(graph.core, self.math, self.opaque_ids, seed, self.plan,
                                   _known_scalars(graph, self._weights), arena_offset, self.switches.fuse,
                                   self.switches.cudnn_find, self.switches.tune_log)
        for name, value in self._weights.items():
            self._ex.set_source(name, np.asarray(value))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs once on `feeds` (every graph input by name); returns {output name: array}.

        Raises:
            MissingFeedError: a graph input has no feed.
        """
        for op in self.graph.inputs:
            if op.name not in feeds:
                info = op.outputs[0]
                raise MissingFeedError(f"no value for Input {op.name!r} (expected shape {info.shape}, "
                                       f"dtype {info.np_dtype})")
            self._ex.set_source(op.name, np.asarray(feeds[op.name], dtype=op.outputs[0].np_dtype))
        if self.opaque_ids:
            from taso_env.engine import reference

            refs = [(i, k) for i in self.opaque_ids for k in range(len(self.graph.ops[i].outputs))]
            from taso_env.engine.graph import TensorRef

            host = reference.run(self.graph, {**self._weights, **feeds}, outputs=[TensorRef(*r) for r in refs])
            for (i, k), ref in zip(refs, host):
                self._ex.set_host_fed(i, k, host[ref])
        self._ex.run()
        return {name: self._ex.output(i, self.graph.tensor(ref).np_dtype)
                for i, (name, ref) in enumerate(zip(self.graph.output_names, self.graph.outputs))}

    def measure(self, warmup: int = 10, repeats: int = 50, inner: int = 0) -> Measurement:
        """Times the graph by CUDA-graph replay: warm-up, then the median of `repeats`
        samples (each `inner` replays; 0 picks about 0.5 ms per sample)."""
        if self.opaque_ids:
            _check_host_prefix(self.graph, self.opaque_ids)
        m = self._ex.measure(warmup, repeats, inner)
        return Measurement(m["median_ms"], m["min_ms"], m["mean_ms"], m["repeats"], m["inner"], m["cuda_graph"],
                           self.math, device_name(), m["samples_ms"])

    @property
    def num_steps(self) -> int:
        """Ops run per execution (constant ops are folded once, before the first run)."""
        return self._ex.num_steps

    @property
    def arena_bytes(self) -> int:
        """Device memory of the executor's tensors (sources, constants and activations;
        a constant that computes what another computes is stored once)."""
        return self._ex.arena_bytes

    @property
    def fused_ops(self) -> int:
        """Ops that run no step of their own (epilogues, chains, views, in-place Concats)."""
        return self._ex.fused_ops

    @property
    def conv_epilogue_ops(self) -> list[int]:
        """Op ids run in a convolution's epilogue (the activation or Add whose step the
        convolution runs, and a residual Add before such an activation), in id order: ops
        the table cost model prices at nothing (taso/epilogue.h) unless a tuning plan keeps
        their convolution unfused."""
        steps = self.fused_steps
        out = {s[0] for s in steps if s and s[1] == "conv"}  # the steps' own ops
        out |= {i for i, s in enumerate(steps) if s and s[1] == "conv" and s[0] != i and
                self._op_types[i] != "Conv2D"}
        return sorted(out)

    @property
    def in_place_concats(self) -> list[int]:
        """The Concat op ids that run no kernel: their producers write straight into their
        slices of its buffer (the table cost model's in-place-Concat verdict prices them at
        nothing, taso/epilogue.h)."""
        return self._ex.in_place_concats

    @property
    def fused_steps(self) -> list[tuple[int, str] | None]:
        """Per op: (the op whose step computes it, "conv" / "gemm" / "chain" / "view")
        where the executor runs it in another op's step (a view: in no step), else None;
        what the table cost model's fused-step rules (taso/epilogue.h) price."""
        return self._ex.fused_steps

    def planning_report(self) -> PlanningReport:
        """What each planning pass decided for this executor: needed ops, arena, folded
        constants, strided views, in-place Concats and Splits, and the steps with the ops
        each computes."""
        return PlanningReport.from_backend(self._ex.planning_report())

    def conv_choices(self) -> dict[int, dict[str, int]]:
        """{Conv2D op id: {conv_algo, conv_math, conv_fused_call, fuse}}: what each
        convolution step runs."""
        return self._ex.conv_choices()

    def close(self) -> None:
        """Frees the device memory now (also done when the object is collected)."""
        self._ex.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def planning_report(graph: Graph, *, math: str = "fp32", weights: Mapping[str, np.ndarray] | None = None,
                    opaque: str = "error", plan: Mapping[int, Mapping[str, int]] | None = None, arena_offset: int = 0,
                    fuse: bool | None = None) -> PlanningReport:
    """What an `Executor` of `graph` with these arguments plans, pass by pass, computed on
    the host: it needs the compiled backend, not a GPU.

    Raises:
        CudaUnavailableError: the backend is not built here.
    """
    if opaque not in ("error", "host"):
        raise ValueError(f"opaque must be 'error' or 'host', got {opaque!r}")
    try:
        from taso_env import _cuda
    except ImportError as err:
        raise CudaUnavailableError(f"the CUDA backend is not built in this installation ({err})") from err
    known = _known_scalars(graph, {**graph.weights, **(weights or {})})
    host_fed = _opaque_ops(graph) if opaque == "host" else []
    raw = _cuda.plan_graph(graph.core, _check_math(math), host_fed, {int(k): dict(v) for k, v in (plan or {}).items()},
                           known, arena_offset, backend_switches(fuse=fuse).fuse)
    return PlanningReport.from_backend(raw)


def run(graph: Graph, feeds: Mapping[str, np.ndarray], **kwargs) -> dict[str, np.ndarray]:
    """Runs `graph` once on the GPU; keyword arguments as for `Executor`."""
    with Executor(graph, **kwargs) as ex:
        return ex.run(feeds)


def measure(graph: Graph, *, warmup: int = 10, repeats: int = 50, **kwargs) -> Measurement:
    """Measured end-to-end runtime of `graph` (all buffers allocated once, warm-up,
    CUDA-graph replay, median of repeats); keyword arguments as for `Executor`."""
    with Executor(graph, **kwargs) as ex:
        return ex.measure(warmup, repeats)


def measure_op_costs(graph: Graph, math: str = "fp32") -> tuple[list[tuple[str, str, float, float]], list[str]]:
    """GPU time of every op configuration of `graph` in isolation (~100 back-to-back
    copies in a CUDA graph, median; cached per signature for the process).

    Returns:
        (rows, skipped): rows are (signature, op type, ms, analytic ms); skipped lists
        the signatures of ops the GPU cannot run (opaque ops).
    """
    return require().measure_ops(graph.core, _check_math(math))


def measure_op(graph: Graph, op_id: int, math: str = "fp32") -> float:
    """GPU time (ms) of op `op_id` of `graph` in isolation."""
    return require().measure_op(graph.core, op_id, _check_math(math))


def measure_signature(signature: str, math: str = "fp32") -> float:
    """GPU time (ms) of the op configuration a cost-table signature names, in isolation
    (the measurement measure_op makes; ValueError for a malformed signature)."""
    return require().measure_signature(signature, _check_math(math))


def install_measurer(core_table_model, math: str = "fp32") -> None:
    """Makes a C++ table model (taso_env._core.TableModel) measure its misses here."""
    require().install_measurer(core_table_model, _check_math(math))


def measure_op_launch(graph: Graph, op_id: int, threads: int, items_per_thread: int, math: str = "fp32") -> float:
    """GPU time (ms) of op `op_id` in isolation with our kernels launched with `threads`
    per block and `items_per_thread` elements per thread."""
    return require().measure_op(graph.core, op_id, _check_math(math), threads=threads,
                                items_per_thread=items_per_thread)


def fusion_sites(graph: Graph, host_fed_ops=()) -> list[dict]:
    """The convolutions whose epilogue the executor fuses by default: [{conv, last, mid,
    residual, activation}] (op ids; mid -1 when none)."""
    return require().graph_fusion_sites(graph.core, list(host_fed_ops))


def conv_choice_space(graph: Graph, conv_id: int, fused_epilogue: bool, host_fed_ops=(),
                      math: str = "fp32") -> list[dict]:
    """Every cuDNN choice cuDNN runs for Conv2D `conv_id` (epilogue fused or not), and for
    a pointwise convolution the cuBLASLt GEMM path (conv_algo 100), for a depthwise one
    our own kernel (conv_algo 101), each timed as the executor runs it:
    [{conv_algo, conv_math, conv_fused_call, workspace, ms}]."""
    return require().conv_choice_space(graph.core, conv_id, fused_epilogue, list(host_fed_ops), _check_math(math))
