"""Each agent of an evaluation against greedy on the same graphs: the parity and
beyond-greedy figures (what the learned rows must show, greedy being what one step of
real work per rewrite buys without learning).

    summary(rows)                        -> [{"agent", "group", "graphs", "gain", "share_of_greedy",
                                              "at_greedy", "above_greedy", "below_greedy"}, ...]
    summary(rows, groups={"valley": {...}})   extra groups of graph labels

Per agent and group (all graphs, each split, and any extra group):
    gain             sum over graphs of (speedup - 1)
    share_of_greedy  gain / greedy's gain on the same graphs
    at_greedy        graphs where speedup >= greedy's x (1 - TOLERANCE)
    above_greedy     graphs where speedup >  greedy's x (1 + MARGIN)
    below_greedy     graphs where speedup <  greedy's x (1 - TOLERANCE)
Rows are dicts (results.json) or evaluation Rows; graphs without a greedy row are left out.
"""

from __future__ import annotations

TOLERANCE = 0.001  # "at greedy": within 0.1% below it, or above
MARGIN = 0.003  # "above greedy": more than 0.3% above it


def _get(row, key):
    return row[key] if isinstance(row, dict) else getattr(row, key)


def summary(rows, groups: dict[str, set[str]] | None = None) -> list[dict]:
    """See the module docstring."""
    greedy = {_get(r, "graph"): float(_get(r, "speedup")) for r in rows if _get(r, "agent") == "greedy"}
    split = {_get(r, "graph"): _get(r, "split") for r in rows}
    named = {"all": set(greedy)}
    for s in sorted(set(split.values())):
        named[s] = {g for g in greedy if split[g] == s}
    for name, members in (groups or {}).items():
        named[name] = set(members) & set(greedy)
    agents = list(dict.fromkeys(_get(r, "agent") for r in rows))
    out = []
    for agent in agents:
        speedup = {_get(r, "graph"): float(_get(r, "speedup")) for r in rows if _get(r, "agent") == agent}
        for group, members in named.items():
            graphs = sorted(members & set(speedup))
            if not graphs:
                continue
            gain = sum(speedup[g] - 1.0 for g in graphs)
            greedy_gain = sum(greedy[g] - 1.0 for g in graphs)
            out.append({
                "agent": agent, "group": group, "graphs": len(graphs), "gain": round(gain, 6),
                "share_of_greedy": round(gain / greedy_gain, 6) if greedy_gain > 0 else None,
                "at_greedy": sum(speedup[g] >= greedy[g] * (1 - TOLERANCE) for g in graphs),
                "above_greedy": sum(speedup[g] > greedy[g] * (1 + MARGIN) for g in graphs),
                "below_greedy": sum(speedup[g] < greedy[g] * (1 - TOLERANCE) for g in graphs),
            })
    return out


def markdown(summary_rows: list[dict]) -> str:
    """The summary as a markdown table."""
    lines = ["| agent | graphs | sum of (speedup - 1) | share of greedy's | at greedy (>= -0.1%) | "
             "above greedy (> +0.3%) | below greedy |", "|---|---|---|---|---|---|---|"]
    for r in summary_rows:
        share = "–" if r["share_of_greedy"] is None else f"{100 * r['share_of_greedy']:.1f}%"
        lines.append(f"| {r['agent']} ({r['group']}) | {r['graphs']} | {r['gain']:.4f} | {share} | "
                     f"{r['at_greedy']} | {r['above_greedy']} | {r['below_greedy']} |")
    return "\n".join(lines)


__all__ = ["MARGIN", "TOLERANCE", "markdown", "summary"]
