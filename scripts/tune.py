#!/usr/bin/env python
"""`rlflow tune` as a script: `python scripts/tune.py -m benchmark -c configs/tune.json`.

The stage lives in the package (rlflow.commands.tune); this file is only its face.
"""

import sys

from rlflow.cli import script_main

if __name__ == "__main__":
    sys.exit(script_main("tune"))
