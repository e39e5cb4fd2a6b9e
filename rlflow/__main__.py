"""`python -m rlflow <command>`: the same as the `rlflow` console command."""

import sys

from rlflow.cli import main

sys.exit(main())
