"""Negative verification: every shape-preserving mutant of every rule's target
(taso_env/rules/mutation.py) through `verify_rule`, counted per rule family (each hand
rule file; generated rules per domain and kind): rejected / equivalent / survived (and
the candidates that break shapes, which test nothing). Also counts what proved the
generated rules (their provenance).

    python benchmarks/bench_rule_mutations.py [--families algebra generated/ew/single]
        [--listing benchmarks/results/rule_mutations_listing.json]

`--listing` writes every equivalent and surviving mutant (rule, change, the check
that decided), the list tests/test_rule_mutations.py holds equivalent mutants to.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections import Counter, defaultdict

from common import emit

import taso_env as te
from taso_env.rules import mutation


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--families", nargs="*", help="only these families (default: all)")
    p.add_argument("--listing", help="write the equivalent and surviving mutants here (JSON)")
    args = p.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # mutants compute NaNs (Sqrt of negatives)
    rules = te.rules.default()
    counts: dict[str, Counter] = defaultdict(Counter)
    listed = []
    start = time.perf_counter()
    for spec in rules.specs:
        family = mutation.family_of(spec)
        if args.families and family not in args.families:
            continue
        counts[family]["rules"] += 1
        for m in mutation.mutants(spec):
            result = mutation.judge(m)
            counts[family][result.verdict] += 1
            if result.verdict == mutation.REJECTED:
                counts[family][f"rejected_by_{result.decided_by}"] += 1
                counts[family][f"rejected_{m.kind}"] += 1
            if result.verdict in (mutation.EQUIVALENT, mutation.SURVIVED):
                listed.append({"key": m.key, "rule_id": m.rule_id, "family": family, "kind": m.kind,
                               "verdict": result.verdict, "decided_by": result.decided_by,
                               "detail": result.detail})
    rows = []
    for family in sorted(counts):
        c = counts[family]
        tested = c[mutation.REJECTED] + c[mutation.EQUIVALENT] + c[mutation.SURVIVED]
        rows.append({"family": family, "rules": c["rules"], "shape_preserving": tested,
                     "rejected": c[mutation.REJECTED], "equivalent": c[mutation.EQUIVALENT],
                     "survived": c[mutation.SURVIVED], "not_shape_preserving": c[mutation.NOT_SHAPE_PRESERVING],
                     **{f"rejected_{k}": c[f"rejected_{k}"] for k in ("op", "operand", "attribute", "output")},
                     "rejected_by_cost": c["rejected_by_cost"]})
    total = {k: sum(r[k] for r in rows) for k in ("rules", "shape_preserving", "rejected", "equivalent",
                                                  "survived", "not_shape_preserving")}
    proved_by = Counter(s["provenance"]["verification"].get("proved_by", "unstamped")
                        for s in rules.specs if s["family"] == "generated")
    kinds = ["rejected_op", "rejected_operand", "rejected_attribute", "rejected_output", "rejected_by_cost"]
    emit("rule_mutations", rows + [{"family": "all", **total, **{k: sum(r[k] for r in rows) for k in kinds}}],
         ["family", "rules", "shape_preserving", "rejected", "equivalent", "survived", "not_shape_preserving",
          *kinds],
         totals=total, generated_rules_proved_by=dict(sorted(proved_by.items())), rule_set_hash=rules.hash,
         seconds=round(time.perf_counter() - start, 1))
    if args.listing:
        with open(args.listing, "w") as f:
            json.dump({"rule_set_hash": rules.hash, "mutants": listed}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
