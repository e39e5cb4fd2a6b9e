#!/usr/bin/env python
"""`rlflow train-model-free` as a script: `python scripts/train_model_free.py --help` shows its options.

The stage lives in the package (rlflow.commands); this file is only its face.
"""

import sys

from rlflow.cli import script_main

if __name__ == "__main__":
    sys.exit(script_main("train-model-free"))
