"""The tuning driver's JSON config (`rlflow tune -c config.json`), validated with typed
errors (TuningError naming the key). Every key is optional except `graphs`:

    {"graphs": ["resnet50", "inception_v3", "mobilenet_v2", "bert_base"],
     "math": "tf32", "records_dir": "data/tuning", "out_dir": "runs/tune",
     "tuners": ["random", "grid", "ga", "xgb", "gadqn"],
     "tuner_params": {"ga": {"pop_size": 16}, "gadqn": {"epsilon_decay_trials": 300}},
     "budgets": [50, 100, 200, 500], "seeds": [0, 1, 2, 3, 4], "batch": 8, "workers": 1,
     "target_pct": 2.0, "start": "random", "live": false, "live_trials": 64,
     "record": {"samples_uniform": 30, "samples_local": 30},
     "experiment": {"tuner": "gadqn", "variants": {"both": {}, "crossover_only": {"dqn_mutation": false}}}}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from taso_env.errors import TuningError

MODES = ("record", "tune", "benchmark", "experiment")
TUNERS = ("random", "grid", "ga", "xgb", "gadqn")
DEFAULT_VARIANTS = {
    "both": {},
    "crossover_only": {"dqn_mutation": False},
    "mutation_only": {"dqn_crossover": False},
    "neither": {"dqn_crossover": False, "dqn_mutation": False},
    "lr_1e-2": {"learning_rate": 1e-2},
    "gamma_0.5": {"gamma": 0.5},
    "epsilon_decay_100": {"epsilon_decay_trials": 100},
}


@dataclass
class TuneConfig:
    graphs: list[str]
    math: str = "tf32"
    records_dir: str = "data/tuning"
    out_dir: str = "runs/tune"
    tuners: list[str] = field(default_factory=lambda: list(TUNERS))
    tuner_params: dict[str, dict] = field(default_factory=dict)
    budgets: list[int] = field(default_factory=lambda: [50, 100, 200, 500])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    batch: int = 8
    workers: int = 1  # benchmark / experiment runs in parallel processes
    target_pct: float = 2.0
    start: str = "random"
    live: bool = False
    live_trials: int = 64
    live_tuner: str = "ga"
    record: dict = field(default_factory=lambda: {"samples_uniform": 30, "samples_local": 30})
    experiment: dict = field(default_factory=lambda: {"tuner": "gadqn", "variants": dict(DEFAULT_VARIANTS)})

    @property
    def max_budget(self) -> int:
        return max(self.budgets)

    def records_path(self, graph: str) -> str:
        """records_dir/<graph>_<math>.h5; when records_dir is the default and holds no such
        file (an installed rlflow run elsewhere), the shipped records."""
        name = f"{graph_name(graph)}_{self.math}.h5"
        path = os.path.join(self.records_dir, name)
        if not os.path.exists(path) and self.records_dir == "data/tuning":
            from taso_env import shipped_data

            root = shipped_data.root()
            if root is not None and (root / "tuning" / name).exists():
                return str(root / "tuning" / name)
        return path


def graph_name(spec: str) -> str:
    base = os.path.basename(spec)
    return base[:-5] if base.endswith(".onnx") else base


def resolve_graph(spec: str) -> str:
    """A shipped model's name ("resnet50") -> its ONNX file; anything else as given."""
    if os.path.isfile(spec):
        return spec
    from taso_env import shipped_data

    path = shipped_data.models().get(spec)
    return str(path) if path else spec


def _check_type(key: str, value, kind, what: str):
    if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, float, (int, float)):
        raise TuningError(f"config key {key!r} must be {what}, got {value!r}")
    return value


def from_dict(data: dict) -> TuneConfig:
    if not isinstance(data, dict):
        raise TuningError(f"a tuning config is a JSON object, got {type(data).__name__}")
    known = {f.name for f in fields(TuneConfig)} | {"mode"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise TuningError(f"unknown config keys {unknown}; known: {sorted(known)}")
    if "graphs" not in data:
        raise TuningError("config key 'graphs' is required (a list of model names or ONNX files)")
    d = {k: v for k, v in data.items() if k != "mode"}
    graphs = _check_type("graphs", d["graphs"], list, "a non-empty list of strings")
    if not graphs or not all(isinstance(g, str) for g in graphs):
        raise TuningError(f"config key 'graphs' must be a non-empty list of strings, got {graphs!r}")
    if d.get("math", "tf32") not in ("fp32", "tf32"):
        raise TuningError(f"config key 'math' must be 'fp32' or 'tf32', got {d['math']!r}")
    for key in ("records_dir", "out_dir", "live_tuner"):
        if key in d:
            _check_type(key, d[key], str, "a string")
    tuners = d.get("tuners", list(TUNERS))
    if not isinstance(tuners, list) or not tuners or any(t not in TUNERS for t in tuners):
        raise TuningError(f"config key 'tuners' must be a non-empty list from {list(TUNERS)}, got {tuners!r}")
    if d.get("live_tuner", "ga") not in TUNERS:
        raise TuningError(f"config key 'live_tuner' must be one of {list(TUNERS)}, got {d['live_tuner']!r}")
    params = d.get("tuner_params", {})
    if not isinstance(params, dict) or any(k not in TUNERS or not isinstance(v, dict) for k, v in params.items()):
        raise TuningError(f"config key 'tuner_params' must map tuner names {list(TUNERS)} to objects, got {params!r}")
    for key in ("budgets", "seeds"):
        if key in d:
            v = d[key]
            if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise TuningError(f"config key {key!r} must be a non-empty list of ints, got {v!r}")
    if any(b < 1 for b in d.get("budgets", [1])):
        raise TuningError(f"config key 'budgets' must hold positive trial counts, got {d['budgets']!r}")
    for key in ("batch", "live_trials", "workers"):
        if key in d and (_check_type(key, d[key], int, "a positive int") < 1):
            raise TuningError(f"config key {key!r} must be a positive int, got {d[key]!r}")
    if "target_pct" in d and _check_type("target_pct", d["target_pct"], (int, float), "a number") < 0:
        raise TuningError(f"config key 'target_pct' must be >= 0, got {d['target_pct']!r}")
    if "live" in d:
        _check_type("live", d["live"], bool, "true or false")
    if d.get("start", "random") not in ("random", "default"):
        raise TuningError(f"config key 'start' must be 'random' (cold, AutoTVM style) or 'default' (the first "
                          f"trial is the executor's default plan), got {d['start']!r}")
    for key in ("record", "experiment"):
        if key in d:
            _check_type(key, d[key], dict, "an object")
    exp = d.get("experiment", {})
    if "variants" in exp and not (isinstance(exp["variants"], dict)
                                  and all(isinstance(v, dict) for v in exp["variants"].values())):
        raise TuningError("config key 'experiment.variants' must map variant names to GA-DQN parameter objects")
    cfg = TuneConfig(**d)
    cfg.experiment = {"tuner": "gadqn", "variants": dict(DEFAULT_VARIANTS), **cfg.experiment}
    cfg.record = {"samples_uniform": 30, "samples_local": 30, **cfg.record}
    return cfg


def load(path: str | os.PathLike) -> tuple[TuneConfig, str | None]:
    """(config, its "mode" key or None) from a JSON file."""
    p = Path(path)
    if not p.is_file():
        raise TuningError(f"no tuning config at {p}")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise TuningError(f"{p}: not valid JSON ({err})") from err
    mode = data.get("mode") if isinstance(data, dict) else None
    if mode is not None and mode not in MODES:
        raise TuningError(f"{p}: 'mode' must be one of {list(MODES)}, got {mode!r}")
    return from_dict(data), mode
