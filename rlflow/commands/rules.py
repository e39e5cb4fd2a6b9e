"""Rules: generate the verified rule set, list rules, and show which fire on which models.

    rlflow rules generate [--work runs/rules] [--out taso_env/rules/50_generated.json] [--domains ew cat]
    rlflow rules fires [--graphs bert_base data/models/bert_base.onnx ...] [--generated-only]
    rlflow rules list

`generate` enumerates operator graphs per domain, fingerprints them, pairs equal ones,
prunes redundant candidates, verifies the rest (numpy draws, z3 for element-wise rules,
the engine's matcher and applier with the reference executor) and writes the rule file
(deterministic; killed and rerun, it resumes from --work). `fires` counts the
candidates of each rule on the unmodified graphs.
"""

from __future__ import annotations

import argparse
import json

DEFAULT_GRAPHS = ["bert_base", "vit_base", "resnet50", "inception_v3", "squeezenet", "nasnet_a", "nasrnn",
                  "nasbench", "resnet18", "resnext50"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    g = sub.add_parser("generate", help="generate and verify rules, write the rule file")
    g.add_argument("--work", default="runs/rules", help="folder for resumable intermediate results")
    g.add_argument("--out", help="rule file to write (default: the shipped 50_generated.json)")
    g.add_argument("--domains", nargs="*", help="domains to run (default: all)")
    g.add_argument("--restart", action="store_true", help="discard --work and start over")
    f = sub.add_parser("fires", help="which rules have candidates on which graphs")
    f.add_argument("--graphs", nargs="*", help="graphs (default: the builder graphs and data/models/*.onnx)")
    f.add_argument("--generated-only", action="store_true", help="only rules of the generated file")
    f.add_argument("--json", help="also write the rows as JSON here")
    sub.add_parser("list", help="list the rules (id, family, name, doc)")


def run(args: argparse.Namespace) -> int:
    import taso_env as te

    if args.action == "list":
        for r in te.rules.default().specs:
            print(f"{r['id']:4d}  {r['family']:26s} {r['name']:32s} {r.get('doc', '')}")
        return 0
    if args.action == "generate":
        import shutil
        from pathlib import Path

        from taso_env.rules.generator.pipeline import generate
        if args.restart:
            shutil.rmtree(Path(args.work), ignore_errors=True)
        stats = generate(args.work, args.out, args.domains)
        print(json.dumps({"rules": stats["_all"]["rules"], "domains": stats}))
        return 0
    from taso_env import shipped_data
    from taso_env.rules.generator.firing import fires
    from taso_env.rules.generator.pipeline import FAMILY
    graphs = args.graphs or DEFAULT_GRAPHS + [str(p) for p in shipped_data.models().values()]
    rules = te.rules.default()
    first = min((r["id"] for r in rules.specs if r["family"] == FAMILY), default=len(rules)) \
        if args.generated_only else 0
    rows = fires(((spec, te.graphs.load(spec, seed=None)) for spec in graphs), rules, first)
    per_graph: dict = {}
    for r in rows:
        per_graph.setdefault(r["graph"], []).append(r)
    print("| graph | rules firing | generated rules firing | candidates |")
    print("|---|---|---|---|")
    for gname in graphs:
        rs = per_graph.get(gname, [])
        gen = [r for r in rs if rules.specs[r["rule"]]["family"] == FAMILY]
        print(f"| {gname} | {len(rs)} | {len(gen)} | {sum(r['count'] for r in rs)} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0
