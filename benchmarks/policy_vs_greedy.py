"""Each agent of an evaluation against greedy: summed gain, its share of greedy's, and
the graphs at, above and below greedy, over all graphs, each split (train / held-out
families) and the valley graphs of data/valley_graphs.json (controller.versus_greedy).

    rlflow evaluate --run RUN --out OUT --graphs ... --agents controller ... greedy \
        --cost-model table:data/costs/h100_fp32.h5
    python benchmarks/policy_vs_greedy.py --eval OUT [--valley data/valley_graphs.json]

Prints one JSON line, then the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import emit  # noqa: E402

from controller import versus_greedy  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def valley_labels(path: str) -> set[str]:
    """The evaluation labels (controller.evaluation.graph_label) of the valley graphs."""
    with open(path) as f:
        rows = json.load(f)["graphs"]
    return {os.path.basename(r["graph"]) if r["graph"].endswith(".onnx") else r["graph"]
            for r in rows if r["is_valley"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eval", required=True, help="an evaluation's output folder (its results.json)")
    p.add_argument("--valley", default=os.path.join(ROOT, "data", "valley_graphs.json"),
                   help="valley graph list (benchmarks/find_valley_graphs.py); '' for none")
    args = p.parse_args(argv)
    with open(os.path.join(args.eval, "results.json")) as f:
        rows = json.load(f)
    groups = {"valley": valley_labels(args.valley)} if args.valley else {}
    out = versus_greedy.summary(rows, groups)
    emit("policy_vs_greedy", out, ["agent", "group", "graphs", "gain", "share_of_greedy", "at_greedy",
                                   "above_greedy", "below_greedy"], eval=os.path.abspath(args.eval))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
