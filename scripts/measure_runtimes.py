#!/usr/bin/env python
"""`rlflow measure` as a script: `python scripts/measure_runtimes.py --help` shows its options.

The stage lives in the package (rlflow.commands); this file is only its face.
"""

import sys

from rlflow.cli import script_main

if __name__ == "__main__":
    sys.exit(script_main("measure"))
