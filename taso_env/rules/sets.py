"""Named rule sets, for benchmarks and experiments that compare rule sets.

    from taso_env.rules.sets import rule_set
    rule_set("all")            # every rule shipped in taso_env/rules/*.json (= rules.default())
    rule_set("hand")           # only the hand-written rules (no generated provenance)
    rule_set("replicated:500") # the hand rules repeated up to 500 rules (candidate speed)
    rule_set("/path/to/dir")   # the rules of the *.json files in a directory

A subset keeps its rules' order; ids are renumbered 0..n-1 (the action index) when the
subset leaves gaps, so its ids match the full set's only where no rule was dropped.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from taso_env.rules import RuleFormatError, RuleSet, build_rule_set, default, load_rule_specs

NAMES = ("hand", "all", "replicated:N", "a directory of rule JSON files")


def is_generated(spec: dict) -> bool:
    """A rule came from the generator: its provenance or its file's family says so."""
    marks = json.dumps(spec.get("provenance", "")).lower() + " " + str(spec.get("family", "")).lower()
    return "generated" in marks


def renumbered(specs: list[dict], suffix=None) -> list[dict]:
    """Copies of `specs` with ids 0..n-1 in order (a rule set needs them so), optionally renamed."""
    out = []
    for i, s in enumerate(specs):
        name = s["name"] if suffix is None else suffix(i, s)
        out.append(dict(s, id=i, name=name))
    return out


@functools.cache
def rule_set(name: str) -> RuleSet:
    """The rule set called `name` (see the module doc).

    Raises:
        RuleFormatError: unknown name, bad N, or a directory without valid rule files.
    """
    if name == "all":
        return default()
    if name == "hand":
        return build_rule_set(renumbered([s for s in default().specs if not is_generated(s)]))
    if name.startswith("replicated:"):
        try:
            n = int(name.split(":", 1)[1])
        except ValueError:
            raise RuleFormatError(f"rule set {name!r}: N in 'replicated:N' must be an integer") from None
        hand = list(rule_set("hand").specs)
        if n < 1:
            raise RuleFormatError(f"rule set {name!r}: N must be at least 1")
        specs = [hand[i % len(hand)] for i in range(n)]
        return build_rule_set(renumbered(specs, lambda i, s: s["name"] if i < len(hand) else
                                          f"{s['name']}#{i // len(hand)}"))
    path = Path(name)
    if path.is_dir():
        return build_rule_set(load_rule_specs(path))
    raise RuleFormatError(f"unknown rule set {name!r}; use one of: {', '.join(NAMES)}")
