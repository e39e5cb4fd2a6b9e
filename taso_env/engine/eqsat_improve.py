"""The final local pass of equality saturation: the real engine's greedy search on the
extracted graph (rewrites whose pay-off the e-graph's extraction cannot see, such as
those that were cut off by the node or time limit)."""

from __future__ import annotations

from taso_env.engine.graph import Graph


def polish(graph: Graph, rule_set, model, max_steps: int = 10000):
    """(graph after greedy rewriting, its SearchResult)."""
    from taso_env.engine.search import search

    result = search(graph, "greedy", rules=rule_set, model=model, max_steps=max_steps)
    return result.graph, result
