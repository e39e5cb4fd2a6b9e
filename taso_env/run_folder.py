"""The run folder: the one place that says what `runs/<name>/` holds and how it is written.

    runs/<name>/config.json             one section per stage: {"collect": ..., "vae": ...,
                                        "mdnrnn": ..., "controller": ..., "pipeline": ...}
    runs/<name>/rollouts.h5             rollouts (index) + rollouts.h5.episodes/
                                        (taso_env.env.rollouts)
    runs/<name>/<stage>/config.json     the stage's configs {"model": ..., "training": ...}
    runs/<name>/<stage>/                checkpoints and metrics.json of vae/, mdnrnn/,
                                        controller/ (worldmodel.checkpoints, controller.training)
    runs/<name>/tb/<stage>/             TensorBoard logs of each stage
    runs/<name>/eval/                   evaluation results (controller.evaluation)

Every JSON file is written atomically (a temporary file, then a rename), so a killed run
leaves the old file or the new one. A stage resumed with settings other than those it
was started with is refused with ConfigMismatchError naming each differing field, unless
the field is one the stage may change on resume (a step budget, say) or `restart` is set.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from taso_env.errors import TasoEnvError

CONFIG_FILE = "config.json"
ROLLOUTS_FILE = "rollouts.h5"
TENSORBOARD_DIR = "tb"
EVAL_DIR = "eval"


class ConfigMismatchError(TasoEnvError, ValueError):
    """Resuming a stage with settings other than those it was started with."""

    def __init__(self, path: str | os.PathLike, differences: Mapping[str, tuple[Any, Any]]):
        self.path, self.differences = str(path), dict(differences)
        listed = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in self.differences.items())
        super().__init__(f"{path}: the run was started with other settings ({listed}); "
                         "rerun with the same settings or with --restart")


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Writes `data` as indented JSON, atomically (creating the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> Any:
    """The JSON at `path`.

    Raises:
        FileNotFoundError: no such file.
        RunFolderError: the file is not valid JSON (names the file).
    """
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise RunFolderError(f"{path}: not valid JSON ({err})") from None


class RunFolderError(TasoEnvError, ValueError):
    """A run folder's file is corrupt."""


def as_json(value: Any) -> Any:
    """A config (dataclass, mapping, tuple...) as the plain JSON value it is saved as."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=str))


def differences(saved: Mapping[str, Any], now: Mapping[str, Any], *, prefix: str = "",
                ignore: Iterable[str] = ()) -> dict[str, tuple[Any, Any]]:
    """{field: (saved, now)} for every field of `now` whose saved value differs; nested
    mappings are compared field by field ("section.field"); names in `ignore` (at any
    level, with or without the prefix) are skipped."""
    ignore = set(ignore)
    out: dict[str, tuple[Any, Any]] = {}
    for key, value in now.items():
        name = f"{prefix}{key}"
        if key in ignore or name in ignore:
            continue
        old = saved.get(key) if isinstance(saved, Mapping) else None
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            out.update(differences(old, value, prefix=f"{name}.", ignore=ignore))
        elif old != value:
            out[name] = (old, value)
    return out


class RunFolder:
    """runs/<name>/: paths, config sections, resume checks.

    Args:
        path: the run folder (created on first write).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- paths ---------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def rollouts_path(self) -> Path:
        return self.path / ROLLOUTS_FILE

    @property
    def eval_dir(self) -> Path:
        return self.path / EVAL_DIR

    def stage_dir(self, stage: str) -> Path:
        return self.path / stage

    def tensorboard_dir(self, stage: str) -> Path:
        return self.path / TENSORBOARD_DIR / stage

    # -- config.json sections ------------------------------------------------------------
    def sections(self) -> dict[str, Any]:
        """runs/<name>/config.json as a dict ({} when absent)."""
        return read_json(self.config_path) if self.config_path.exists() else {}

    def section(self, stage: str) -> Any | None:
        """The saved `stage` section of config.json, or None."""
        return self.sections().get(stage)

    def save_section(self, stage: str, data: Any) -> None:
        """Writes `data` as the `stage` section of config.json (other sections kept)."""
        sections = self.sections()
        sections[stage] = as_json(data)
        write_json(self.config_path, sections)

    def check_section(self, stage: str, now: Any, *, resumable: Iterable[str] = ()) -> None:
        """Refuses to resume `stage` when config.json's section differs from `now`.

        Raises:
            ConfigMismatchError: naming every differing field outside `resumable`.
        """
        saved = self.section(stage)
        if saved is None:
            return
        diff = differences(saved, as_json(now), ignore=resumable)
        if diff:
            raise ConfigMismatchError(self.config_path, diff)

    # -- stage folders -------------------------------------------------------------------
    def stage_config(self, stage: str) -> dict | None:
        """runs/<name>/<stage>/config.json, or None when the stage has not started."""
        path = self.stage_dir(stage) / CONFIG_FILE
        return read_json(path) if path.exists() else None

    def prepare_stage(self, stage: str, configs: Mapping[str, Any], *, restart: bool = False,
                      resumable: Iterable[str] = ()) -> dict:
        """Readies runs/<name>/<stage>/ for training and saves its configs.

        With `restart` the stage folder and its TensorBoard logs are deleted; otherwise a
        saved stage config must match `configs` except for fields (or whole sections) in
        `resumable`, e.g. a step budget that may grow. The configs are then saved as
        runs/<name>/<stage>/config.json and as the stage's section of config.json.

        Returns:
            The saved configs as JSON values.

        Raises:
            ConfigMismatchError: resuming with other settings.
        """
        now = {name: as_json(cfg) for name, cfg in configs.items()}
        stage_config = self.stage_dir(stage) / CONFIG_FILE
        if restart:
            self.clear_stage(stage)
        elif stage_config.exists():
            diff = differences(read_json(stage_config), now, ignore=resumable)
            if diff:
                raise ConfigMismatchError(stage_config, diff)
        write_json(stage_config, now)
        self.save_section(stage, now)
        return now

    def clear_stage(self, stage: str) -> None:
        """Deletes a stage's folder and TensorBoard logs."""
        for folder in (self.stage_dir(stage), self.tensorboard_dir(stage)):
            shutil.rmtree(folder, ignore_errors=True)
