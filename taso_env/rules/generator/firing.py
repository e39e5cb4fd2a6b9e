"""Which rules fire (have at least one candidate) on which graphs.

    loaded = ((spec, te.graphs.load(spec, seed=None)) for spec in specs)
    rows = fires(loaded)        # [{graph, rule, name, count}]

The rules sit in the engine layer, below the graph loaders, so the caller loads the
graphs (`rlflow rules fires` does).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tqdm import tqdm

from taso_env import rules as rules_module
from taso_env.engine.graph import Graph


def fires(graphs: Iterable[tuple[str, Graph]], rules=None, first_id: int = 0) -> list[dict]:
    """One row per (graph, rule) with candidates on the unmodified graph, for rules with
    id >= first_id.

    Args:
        graphs: (label, graph) pairs; the label is the row's "graph".
        rules: the RuleSet (default: every shipped rule).
        first_id: the smallest rule id reported.
    """
    rules = rules or rules_module.default()
    rows = []
    for spec, g in tqdm(graphs, desc="fires", leave=False):
        counts = Counter(c.rule_id for c in g.candidates(rules=rules))
        for rid in sorted(counts):
            if rid >= first_id:
                rows.append({"graph": spec, "rule": rid, "name": rules.specs[rid]["name"],
                             "count": counts[rid]})
    return rows
