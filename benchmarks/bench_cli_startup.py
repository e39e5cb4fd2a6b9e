#!/usr/bin/env python
"""How long `rlflow <command> --help` takes, and whether it imported TensorFlow.

    python benchmarks/bench_cli_startup.py [--repeats 3] [--commands train-vae evaluate ...]

Per command (default: all of rlflow.cli.COMMANDS): the median wall time of `--repeats`
fresh processes running `rlflow <command> --help` (the installed console script), and,
in one more process, whether building that command's parser imported TensorFlow.
Both run outside the source tree (in the temporary folder), so that they time the
installed package. Prints one JSON line and a markdown table.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

from rlflow.cli import COMMANDS  # noqa: E402

_PROBE = ("import sys\n"
          "from rlflow.cli import command_parser\n"
          "command_parser(sys.argv[1]).format_help()\n"
          "print('tensorflow' in sys.modules)\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=list(COMMANDS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows, outside = [], tempfile.gettempdir()
    for command in args.commands:
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run(["rlflow", command, "--help"], capture_output=True, check=True, timeout=300, cwd=outside)
            seconds.append(time.perf_counter() - start)
        probe = subprocess.run([sys.executable, "-c", _PROBE, command], capture_output=True, text=True, check=True,
                               timeout=300, cwd=outside)
        rows.append({"command": command, "help_s": statistics.median(seconds), "min_s": min(seconds),
                     "imports_tensorflow": probe.stdout.strip() == "True"})
    emit("cli_startup", rows, ["command", "help_s", "min_s", "imports_tensorflow"], repeats=args.repeats)


if __name__ == "__main__":
    main()
