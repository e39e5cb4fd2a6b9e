#!/usr/bin/env python
"""`rlflow rules` as a script: `python scripts/rules.py --help` shows its options.

The stage lives in the package (rlflow.commands); this file is only its face.
"""

import sys

from rlflow.cli import script_main

if __name__ == "__main__":
    sys.exit(script_main("rules"))
