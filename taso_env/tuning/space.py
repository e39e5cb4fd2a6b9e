"""The tuning space of a graph on the GPU executor: knobs per op, configs as genes.

Knobs (docs/tuning.md):
- `conv`, one per Conv2D: which cuDNN choice runs it, an option = (epilogue fused or
  not, cuDNN algorithm, cuDNN math type, cuDNN's fused bias/residual/ReLU call or our
  epilogue kernel). Where the executor can fold the conv's epilogue (fusion.h), the
  options hold both the fused and the unfused variants, so epilogue fusion is part of
  this gene. Options are exactly the choices cuDNN ran for that configuration when the
  space was recorded (validity by construction).
- `launch`, one per op run by our own grid-stride kernels: (threads per block, elements
  per thread) from LAUNCH_CHOICES. A launch knob of an epilogue op matters only while
  its convolution's gene keeps the epilogue separate (`absorbed_by`).

Not tuned (stated in docs/tuning.md): data layout (NHWC is not implemented by the
executor) and GEMM algorithms (cuBLAS picks its own).

A config is a tuple of ints, one gene per knob: the index of the chosen option.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from taso_env.errors import TuningError

#: (threads per block, elements per thread) of our own kernels; (256, 1) is the default.
LAUNCH_CHOICES: tuple[tuple[int, int], ...] = tuple((t, i) for t in (128, 256, 512, 1024) for i in (1, 2, 4))
DEFAULT_LAUNCH = (256, 1)
#: op types whose steps launch our grid-stride kernels (op_steps.cc)
LAUNCH_OP_TYPES = frozenset({
    "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Erf", "Gelu", "Sqrt", "Exp", "Concat", "Split",
    "Transpose", "Pad", "Enlarge", "Gather", "Where", "Cast", "Clip", "HardSigmoid", "HardSwish", "Softmax",
    "BatchNorm", "MaxPool2D", "AvgPool2D", "CumSum", "Equal", "GatherElements"})
CONV_KEYS = ("fuse", "conv_algo", "conv_math", "conv_fused_call")


@dataclass(frozen=True)
class Knob:
    """One gene: `options` are plan entries ({knob: value}) for op `op_id`."""

    kind: str  # "conv" | "launch"
    op_id: int
    name: str
    options: tuple[tuple[tuple[str, int], ...], ...]
    default: int = 0
    absorbed_by: int = -1  # launch knob of a fusable epilogue op: the conv knob's index

    @property
    def size(self) -> int:
        return len(self.options)

    def option(self, i: int) -> dict[str, int]:
        return dict(self.options[i])


@dataclass
class TuningSpace:
    """The knobs of one graph (`graph` names it) in one math mode."""

    graph: str
    math: str
    knobs: list[Knob] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i, k in enumerate(self.knobs):
            if k.kind not in ("conv", "launch"):
                raise TuningError(f"knob {i} ({k.name}): unknown kind {k.kind!r}")
            if not k.options:
                raise TuningError(f"knob {i} ({k.name}) has no options")
            if not 0 <= k.default < k.size:
                raise TuningError(f"knob {i} ({k.name}): default {k.default} outside its {k.size} options")
            if k.absorbed_by >= len(self.knobs) or (k.absorbed_by >= 0 and self.knobs[k.absorbed_by].kind != "conv"):
                raise TuningError(f"knob {i} ({k.name}): absorbed_by {k.absorbed_by} is not a conv knob")

    # -- genes -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.knobs)

    @property
    def cardinalities(self) -> np.ndarray:
        return np.array([k.size for k in self.knobs], dtype=np.int64)

    def log10_size(self) -> float:
        """log10 of the number of joint configs."""
        return float(np.sum(np.log10(self.cardinalities))) if self.knobs else 0.0

    def default_config(self) -> tuple[int, ...]:
        """The executor's own choices (what runs with no plan)."""
        return tuple(k.default for k in self.knobs)

    def random_config(self, rng: np.random.Generator) -> tuple[int, ...]:
        return tuple(int(rng.integers(k.size)) for k in self.knobs)

    def validate(self, config: Sequence[int]) -> tuple[int, ...]:
        """The config as a tuple; TuningError names the first bad gene."""
        if len(config) != len(self.knobs):
            raise TuningError(f"config has {len(config)} genes, the space of {self.graph!r} has {len(self.knobs)}")
        out = []
        for i, (g, k) in enumerate(zip(config, self.knobs)):
            if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)):
                raise TuningError(f"gene {i} ({k.name}) must be an int, got {g!r}")
            if not 0 <= int(g) < k.size:
                raise TuningError(f"gene {i} ({k.name}) = {int(g)} outside its {k.size} options")
            out.append(int(g))
        return tuple(out)

    def fused(self, config: Sequence[int], knob: int) -> bool:
        """Whether conv knob `knob`'s chosen option folds its epilogue."""
        return self.knobs[knob].option(config[knob]).get("fuse", -1) == 1

    def active(self, config: Sequence[int]) -> np.ndarray:
        """Per knob: whether its choice runs (an absorbed epilogue op's launch does not)."""
        return np.array([k.absorbed_by < 0 or not self.fused(config, k.absorbed_by) for k in self.knobs])

    # -- plans -----------------------------------------------------------------------
    def to_plan(self, config: Sequence[int]) -> dict[int, dict[str, int]]:
        """The executor plan ({op id: {knob: value}}) of a valid config; launch knobs at
        their default are left out."""
        config = self.validate(config)
        plan: dict[int, dict[str, int]] = {}
        for g, k in zip(config, self.knobs):
            opt = k.option(g)
            if k.kind == "launch":
                if (opt["threads"], opt["items_per_thread"]) == DEFAULT_LAUNCH:
                    continue
            elif opt.get("fuse", -1) < 0:
                opt.pop("fuse", None)
            plan.setdefault(k.op_id, {}).update(opt)
        return plan

    # -- serialisation ---------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"graph": self.graph, "math": self.math, "knobs": [
            {"kind": k.kind, "op_id": k.op_id, "name": k.name, "default": k.default, "absorbed_by": k.absorbed_by,
             "options": [dict(o) for o in k.options]} for k in self.knobs]})

    @classmethod
    def from_json(cls, text: str) -> TuningSpace:
        try:
            d = json.loads(text)
            knobs = [Knob(k["kind"], int(k["op_id"]), k["name"],
                          tuple(tuple(sorted((str(a), int(b)) for a, b in o.items())) for o in k["options"]),
                          int(k["default"]), int(k["absorbed_by"])) for k in d["knobs"]]
            return cls(d["graph"], d["math"], knobs)
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as err:
            if isinstance(err, TuningError):
                raise
            raise TuningError(f"malformed tuning space: {err}") from err


def make_option(**values: int) -> tuple[tuple[str, int], ...]:
    """An option as stored in a Knob (sorted key/value pairs)."""
    return tuple(sorted((k, int(v)) for k, v in values.items()))
