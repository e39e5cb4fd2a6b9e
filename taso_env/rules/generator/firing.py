"""Which rules fire (have at least one candidate) on which graphs.

    rows = fires(["bert_base", "data/models/bert_base.onnx"])   # [{graph, rule, name, count}]
"""

from __future__ import annotations

from collections import Counter

from tqdm import tqdm


def fires(graphs, rules=None, first_id: int = 0) -> list[dict]:
    """One row per (graph, rule) with candidates on the unmodified graph, for rules with
    id >= first_id."""
    import taso_env as te

    rules = rules or te.rules.default()
    rows = []
    for spec in tqdm(graphs, desc="fires", leave=False):
        g = te.graphs.load(spec, seed=None)
        counts = Counter(c.rule_id for c in g.candidates(rules=rules))
        for rid in sorted(counts):
            if rid >= first_id:
                rows.append({"graph": spec, "rule": rid, "name": rules.specs[rid]["name"],
                             "count": counts[rid]})
    return rows
