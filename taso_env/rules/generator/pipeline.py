"""The generator run: enumerate -> pair -> prune -> verify (numpy draws, z3, the engine)
-> prune by subsumption -> emit `50_generated.json`.

    from taso_env.rules.generator.pipeline import generate
    stats = generate(work="runs/rules", out="taso_env/rules/50_generated.json")

Deterministic (same vocabulary, same output byte for byte) and resumable: each domain's
finished phases are saved under `work/` (candidates, verification results appended
line by line), so a killed run resumes where it stopped. Progress shows on tqdm bars;
`stats` (and `work/stats.json`) count candidates per phase and domain and time each
phase.

Each rule's provenance says what proved it (`formal_verification`): z3 for every shape
(element-wise rules), z3 on the example shapes (`axioms.prove_rule`), or the numeric
checks only. `restamp_formal_verification()` recomputes those fields of a rule file in
place, changing nothing else.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from taso_env.errors import TasoEnvError
from taso_env.rules import RULES_DIR, build_rule_set, load_rule_specs
from taso_env.rules.generator import axioms, emit, enumeration, pruning
from taso_env.rules.generator import terms as T
from taso_env.rules.generator.vocabulary import Domain, domains
from taso_env.rules.sets import renumbered
from taso_env.rules.verify import RuleVerificationError, instantiate, verify_rule

GENERATED_FILE = "50_generated.json"
FAMILY = "generated"
N_DRAWS = 4  # draw 0 fingerprints; draws 1..3 verify (all four are the rule's examples)
ENGINE_SEEDS = (0, 1, 2, 3)


def hand_specs() -> list[dict]:
    return [s for s in load_rule_specs(RULES_DIR) if s["family"] != FAMILY]


def _levels(domain: Domain) -> list[tuple]:
    if not domain.geometry:
        return [()]
    levels = [()]
    if "act" in domain.geometry:
        levels.append(("act",))
    levels.append(tuple(domain.geometry))
    return levels


def _draws(domain: Domain, level: tuple) -> list[dict]:
    d0 = domain.draw(0)
    out = []
    for k in range(N_DRAWS):
        d = domain.draw(k)
        d.update({g: d0[g] for g in level})
        out.append(d)
    return out


def _numeric_level(domain: Domain, cand, evaluators: dict):
    """The most general level at which source and target agree on every draw."""
    for level in _levels(domain):
        ok = True
        for k in range(1, N_DRAWS):
            key = (level, k)
            if key not in evaluators:
                evaluators[key] = enumeration.Evaluator(domain, _draws(domain, level)[k], seed=k)
            ev = evaluators[key]
            for s, t in zip(cand.source, cand.target):
                a, b = ev(s), ev(t)
                if a is None or b is None or a[0].shape != b[0].shape or \
                        not np.allclose(a[0], b[0], rtol=1e-6, atol=1e-9):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return level
    return None


def _atomic_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def _engine_check(spec: dict, hand) -> str:
    """'ok', 'redundant' (a hand rule does the same rewrite) or a failure message."""
    try:
        rs = build_rule_set(renumbered([spec]))
    except Exception as e:  # noqa: BLE001 - the compiler's message is the reason
        return f"rejected by the engine: {e}"
    try:  # every draw on several value seeds (ill-conditioned rules fail here)
        verify_rule(rs, 0, seeds=ENGINE_SEEDS)
    except (RuleVerificationError, TasoEnvError) as e:
        return f"failed: {e}"
    inst = instantiate(spec, spec["examples"][0], 0)
    g = inst.graph
    mine = [c for c in g.candidates(0, rules=rs) if set(c.location) == inst.source_ops]
    g2 = g.apply(mine[0], rules=rs)
    for c in g.candidates(rules=hand):
        if set(c.location) != inst.source_ops:
            continue
        try:
            if g.apply(c, rules=hand).hash() == g2.hash():
                return "redundant"
        except Exception:  # noqa: BLE001 - a hand rule's own failure is not ours
            continue
    return "ok"


def formal_verification(spec: dict, z3_pointwise: str) -> dict:
    """The z3 fields of a rule's provenance `verification`: `z3` is the element-wise
    proof for every shape ("proved", "unknown"; "not applicable" outside element-wise
    domains); where it is not "proved", `z3_on_example_shapes` is `axioms.prove_rule`'s
    verdict; `proved_by` says what proved the rule: "z3" (every shape),
    "z3_on_example_shapes" (all real values on the example shapes) or "numeric" (the
    numpy draws and the engine only)."""
    if z3_pointwise == "proved":
        return {"z3": z3_pointwise, "proved_by": "z3"}
    verdict = axioms.prove_rule(build_rule_set(renumbered([spec])), 0)
    by = "z3_on_example_shapes" if verdict == axioms.PROVED_ON_EXAMPLE_SHAPES else "numeric"
    return {"z3": z3_pointwise, "z3_on_example_shapes": verdict, "proved_by": by}


def restamp_formal_verification(path: str | Path = RULES_DIR / GENERATED_FILE, log=print) -> dict:
    """Recomputes `formal_verification` for every rule of a generated rule file and
    rewrites it; nothing but the provenance's z3 fields changes (ids, names, patterns
    and examples stay, so the rule set's hash does). Returns the counts of `proved_by`."""
    path = Path(path)
    data = json.loads(path.read_text())
    counts: dict = {}
    for r in tqdm(data["rules"], desc="z3", leave=False, mininterval=1.0):
        v = r["provenance"]["verification"]
        for key in ("z3_on_example_shapes", "proved_by"):
            v.pop(key, None)
        v.update(formal_verification(dict(r, family=FAMILY), v["z3"]))
        counts[v["proved_by"]] = counts.get(v["proved_by"], 0) + 1
    _atomic_json(path, data)
    log(f"{path}: proved_by {counts}")
    return counts


def run_domain(domain: Domain, work: Path, hand, stats: dict) -> list[dict]:
    """All phases for one domain; returns its verified, pruned rule specs (no ids)."""
    dwork = work / domain.name
    dwork.mkdir(parents=True, exist_ok=True)
    st = stats.setdefault(domain.name, {"time_s": {}})
    cand_file = dwork / "candidates.pkl"
    if cand_file.exists():
        cands, st_saved = pickle.loads(cand_file.read_bytes())
        st.update(st_saved)
    else:
        t0 = time.perf_counter()
        with tqdm(total=1, desc=f"enumerate {domain.name}", leave=False) as bar:
            en = enumeration.enumerate_domain(domain, bar)
            bar.update()
        cands = enumeration.candidates(domain, en)
        cse = [c for c in cands if c.kind == "cse"]
        cands = [c for c in cands if c.kind != "cse"]
        st["graphs"] = sum(en.counts.values())
        st["classes"] = len(en.classes)
        st["candidates"] = len(cands)
        st["time_s"]["enumerate"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        cands, st["pruned_renaming"] = pruning.by_renaming(cands)
        cands, st["pruned_commutation"] = pruning.by_commutation(domain, cands)
        cands, st["pruned_common_subgraph"] = pruning.by_common_subgraph(cands)
        cands, st["pruned_degenerate"] = pruning.by_degeneracy(
            domain, cands, enumeration.Evaluator(domain, domain.draw(0)))
        st["time_s"]["prune"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        evaluators: dict = {}
        verified = []
        cands = cands + cse  # well typed on every draw, or dropped
        for c in tqdm(cands, desc=f"numeric {domain.name}", leave=False, mininterval=1.0):
            level = _numeric_level(domain, c, evaluators)
            if level is not None:
                verified.append((c, level))
        st["failed_numeric"] = len(cands) - len(verified)
        cse = [c for c, _ in verified if c.kind == "cse"]
        verified = [(c, lv) for c, lv in verified if c.kind != "cse"]
        st["time_s"]["verify_numeric"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        z3_status = {}
        if domain.pointwise:
            keep = []
            for c, level in tqdm(verified, desc=f"z3 {domain.name}", leave=False, mininterval=1.0):
                r = axioms.prove(c.source[0], c.target[0])
                if r != "refuted":
                    keep.append((c, level))
                    z3_status[(c.source, c.target)] = r
            st["refuted_z3"] = len(verified) - len(keep)
            st["proved_z3"] = sum(v == "proved" for v in z3_status.values())
            verified = keep
        st["time_s"]["z3"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        plain = [c for c, _ in verified]
        levels = {(c.source, c.target): lv for c, lv in verified}
        kept, st["pruned_subsumption"] = pruning.by_subsumption(plain)
        kept += cse  # verified by the engine below
        levels.update({(c.source, c.target): () for c in cse})
        st["cse_candidates"] = len(cse)
        st["time_s"]["subsumption"] = round(time.perf_counter() - t0, 2)
        cands = [(c, levels[(c.source, c.target)], z3_status.get((c.source, c.target), "not applicable"))
                 for c in kept]
        cand_file.write_bytes(pickle.dumps((cands, {k: v for k, v in st.items()})))
    # engine verification, resumable line by line
    done_file = dwork / "engine.jsonl"
    done = {}
    if done_file.exists():
        for line in done_file.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            done[rec["key"]] = rec
    t0 = time.perf_counter()
    specs = []
    with open(done_file, "a") as log:
        for c, level, z3r in tqdm(cands, desc=f"engine {domain.name}", leave=False, mininterval=1.0):
            key = pruning.canonical(c.source, c.target)
            spec = emit.to_spec(domain, c, level, _draws(domain, level))
            if key not in done:
                result = "unemittable" if spec is None else _engine_check(spec, hand)
                done[key] = {"key": key, "result": result}
                log.write(json.dumps(done[key]) + "\n")
                log.flush()
            if done[key]["result"] == "ok":
                if "formal" not in done[key]:  # logged on a line of its own (resumable)
                    done[key] = dict(done[key], formal=formal_verification(spec, z3r))
                    log.write(json.dumps(done[key]) + "\n")
                    log.flush()
                spec["provenance"] = {
                    "generated": True, "domain": domain.name, "kind": c.kind,
                    "size": [T.roots_size(c.source), T.roots_size(c.target)],
                    "verification": {"numeric_draws": N_DRAWS, "engine_draws": N_DRAWS,
                                     "engine_seeds": len(ENGINE_SEEDS), **done[key]["formal"]},
                    "specialised": list(level)}
                specs.append(spec)
    st["time_s"]["verify_engine"] = round(st["time_s"].get("verify_engine", 0) + time.perf_counter() - t0, 2)
    results = [done[pruning.canonical(c.source, c.target)]["result"] for c, _, _ in cands]
    st["unemittable"] = results.count("unemittable")
    st["redundant_with_hand"] = results.count("redundant")
    st["failed_engine"] = sum(r.startswith(("failed", "rejected")) for r in results)
    # two candidates may emit the same rule (same JSON body): keep the first
    seen, unique = set(), []
    for s in specs:
        if s["name"] not in seen:
            seen.add(s["name"])
            unique.append(s)
    st["duplicate_json"] = len(specs) - len(unique)
    st["rules"] = len(unique)
    return unique


def _same_rewrite(spec: dict, others: list[dict]) -> bool:
    """Whether one of `others` rewrites `spec`'s own source pattern into the same graph."""
    rs = build_rule_set(renumbered(others))
    mine = build_rule_set(renumbered([spec]))
    inst = instantiate(spec, spec["examples"][0], 0)
    g = inst.graph
    want = g.apply([c for c in g.candidates(0, rules=mine) if set(c.location) == inst.source_ops][0],
                   rules=mine).hash()
    for c in g.candidates(rules=rs):
        if set(c.location) == inst.source_ops:
            try:
                if g.apply(c, rules=rs).hash() == want:
                    return True
            except Exception:  # noqa: BLE001
                continue
    return False


def _drop_engine_duplicates(specs: list[dict]) -> tuple[list[dict], int]:
    """Drops a rule when an earlier kept one (any domain) does the same rewrite on its
    source pattern (the same substitution found in two domains, or an instance of a
    more general rule)."""
    kept, buckets = [], {}
    for s in tqdm(specs, desc="dedupe", leave=False, mininterval=1.0):
        key = (tuple(sorted(o["type"] for o in s["source"]["ops"])),
               tuple(sorted(o["type"] for o in s["target"]["ops"])), len(s["source"]["outputs"]))
        prev = buckets.setdefault(key, [])
        if prev and _same_rewrite(s, prev):
            continue
        prev.append(s)
        kept.append(s)
    return kept, len(specs) - len(kept)


def assign_ids(specs: list[dict], hand_list: list[dict], previous: list[dict]) -> None:
    """Sets each generated spec's id. Rules of the previous file (the shipped one by
    default) keep theirs, so a rerun renumbers nothing; new ones take the lowest ids
    that no rule holds (hand rules written after a generation have ids past the
    generated ones). A run into a new file has no previous rules and numbers its rules
    in generation order from the first free id: the shipped file is the id registry."""
    prev_ids = {r["name"]: r["id"] for r in previous}
    taken = {s["id"] for s in hand_list} | set(prev_ids.values())
    free = (i for i in itertools.count() if i not in taken)
    for s in specs:
        s["id"] = prev_ids[s["name"]] if s["name"] in prev_ids else next(free)


def generate(work: str | Path = "runs/rules", out: str | Path | None = None, domain_names=None,
             log=print) -> dict:
    """Runs every phase for the domains and writes the rule file; returns the stats."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(out) if out else RULES_DIR / GENERATED_FILE
    hand_list = hand_specs()
    hand = build_rule_set(renumbered(hand_list))  # for matching only
    stats: dict = {}
    all_specs = []
    for d in domains(domain_names):
        specs = run_domain(d, work, hand, stats)
        specs.sort(key=lambda s: (sum(s["provenance"]["size"]), s["name"]))
        all_specs.extend(specs)
        st = stats[d.name]
        log(f"{d.name}: {st['candidates']} candidates -> {st['rules']} rules  ({st['time_s']})")
    log(f"{len(all_specs)} rules before dropping duplicates across domains")
    t0 = time.perf_counter()
    all_specs, dropped = _drop_engine_duplicates(all_specs)
    stats["_all"] = {"duplicate_across_domains": dropped, "rules": len(all_specs),
                     "time_s": {"dedupe": round(time.perf_counter() - t0, 2)}}
    # ids never change meaning: rules of the existing file keep their ids (and stay, even
    # if this vocabulary no longer produces them); new rules append
    previous = []
    if out.exists():
        try:
            previous = json.loads(out.read_text()).get("rules", [])
        except json.JSONDecodeError:
            previous = []
    fresh = {s["name"]: s for s in all_specs}
    prev_names = {r["name"] for r in previous}
    stats["_all"]["kept_from_previous_file"] = sum(r["name"] not in fresh for r in previous)
    stats["_all"]["new"] = sum(s["name"] not in prev_names for s in all_specs)
    all_specs = [fresh.get(r["name"], r) for r in sorted(previous, key=lambda r: r["id"])] + \
        [s for s in all_specs if s["name"] not in prev_names]
    stats["_all"]["rules"] = len(all_specs)
    assign_ids(all_specs, hand_list, previous)
    rules = [{k: s[k] for k in ("id", "name", "doc", "source", "target", "shapes", "examples", "provenance")
              if k in s} for s in all_specs]
    _atomic_json(out, {"family": FAMILY,
                       "doc": "Generated by `rlflow rules generate` (taso_env/rules/generator); do not edit.",
                       "rules": rules})
    _atomic_json(work / "stats.json", stats)
    return stats
