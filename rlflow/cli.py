"""The `rlflow` command: one subcommand per stage of the product.

    rlflow inspect data/models/squeezenet1_1.onnx
    rlflow optimize model.onnx -o out.onnx --method backtracking
    rlflow collect --graphs squeezenet nasrnn --episodes 120 --out runs/demo/rollouts.h5
    rlflow train-vae --run runs/demo
    rlflow pipeline                  # the main job on its small default

Each subcommand is a module of `rlflow.commands` with a docstring (its help),
`add_arguments(parser)` and `run(args) -> exit code`; `scripts/*.py` call the same
modules, so a flag is defined once. Only the chosen subcommand's module is imported
(`rlflow --help` starts fast, without TensorFlow).

A module that sets `USES_TENSORFLOW = True` gets TensorFlow imported quietly first.
Command-line manners: a typed error (`taso_env.errors.TasoEnvError`, a missing file)
prints one line `rlflow <command>: error: ...` and exits 2 without a traceback (set
RLFLOW_DEBUG=1 for the traceback); Ctrl-C exits 130 and keeps what was written (rerun
to resume); TensorFlow's start-up log lines are silenced unless RLFLOW_VERBOSE=1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

#: subcommand -> module of rlflow.commands, in the order `rlflow --help` lists them.
COMMANDS: dict[str, str] = {
    "inspect": "inspect",
    "optimize": "optimize",
    "collect": "collect",
    "train-vae": "train_vae",
    "train-mdnrnn": "train_mdnrnn",
    "train-controller": "train_controller",
    "train-model-free": "train_model_free",
    "evaluate": "evaluate",
    "pipeline": "pipeline",
    "measure": "measure",
    "measure-costs": "measure_costs",
    "tune": "tune",
    "rules": "rules",
}


def quiet_tensorflow() -> None:
    """Silences TensorFlow's start-up logs (CUDA driver, oneDNN, absl) unless
    RLFLOW_VERBOSE is set: the log level for this process and the stages it starts, and
    TensorFlow imported with the process's stderr closed, since absl writes its lines
    straight to file descriptor 2 before any log level applies."""
    if os.environ.get("RLFLOW_VERBOSE"):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _module(command: str):
    return importlib.import_module(f"rlflow.commands.{COMMANDS[command]}")


def _summary(module) -> str:
    return (module.__doc__ or "").strip().split("\n")[0]


def command_parser(command: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of one subcommand (also used by scripts/*.py)."""
    module = _module(command)
    parser = argparse.ArgumentParser(
        prog=prog or f"rlflow {command}", description=(module.__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(parser)
    return parser


def _top_parser() -> argparse.ArgumentParser:
    lines = []
    for name in COMMANDS:
        try:
            lines.append(f"  {name:<18} {_summary(_module(name))}")
        except ImportError:  # a command whose module is not installed here
            continue
    return argparse.ArgumentParser(
        prog="rlflow", usage="rlflow <command> [options]   (rlflow <command> --help for its options)",
        description=(__doc__ or "").strip().split("\n")[0] + "\n\ncommands:\n" + "\n".join(lines),
        formatter_class=argparse.RawDescriptionHelpFormatter)


def _error_types() -> tuple[type[BaseException], ...]:
    from taso_env.errors import TasoEnvError

    return TasoEnvError, FileNotFoundError, IsADirectoryError, PermissionError


def run_command(command: str, argv: Sequence[str], prog: str | None = None) -> int:
    """Parses `argv` for `command` and runs it; returns the exit code (see module doc)."""
    parser = command_parser(command, prog)  # TensorFlow-free: --help and usage errors end here
    args = parser.parse_args(list(argv))
    if getattr(_module(command), "USES_TENSORFLOW", False):
        quiet_tensorflow()
    from taso_env.engine.cost_model import get_cost_model, set_cost_model

    default_model = get_cost_model()  # a command may set the default; run in-process, it must not leak
    try:
        return int(_module(command).run(args) or 0)
    except _error_types() as err:
        if os.environ.get("RLFLOW_DEBUG"):
            raise
        message = str(err) if not isinstance(err, OSError) or not err.filename else \
            f"{err.filename}: {err.strerror or err}"
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"\n{parser.prog}: interrupted; what was written is kept: rerun the same command to resume",
              file=sys.stderr)
        return 130
    finally:
        set_cost_model(default_model)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `rlflow` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        if argv and argv[0] not in ("-h", "--help"):
            parser.error(f"unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}")
        parser.print_help()
        return 0 if argv else 2
    return run_command(argv[0], argv[1:])


def script_main(command: str) -> int:
    """What `scripts/<stage>.py` runs: the subcommand `command` with the script's argv."""
    return run_command(command, sys.argv[1:], prog=os.path.basename(sys.argv[0]))
