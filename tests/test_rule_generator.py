"""The rule generator: enumeration, z3 proofs, pruning, determinism, resuming, and the
shipped generated rule file (its rules are verified in test_rules_verified.py)."""

import json

import taso_env as te
from taso_env.rules.generator import axioms, enumeration, pruning
from taso_env.rules.generator import terms as T
from taso_env.rules.generator.pipeline import FAMILY, assign_ids, generate
from taso_env.rules.generator.vocabulary import domains

a, b, c = T.var("a"), T.var("b"), T.var("c")


def test_z3_proves_refutes_and_leaves_undecided():
    assert axioms.prove(("Add", ("Add", a, b), c), ("Add", a, ("Add", b, c))) == "proved"
    assert axioms.prove(("Mul", ("Add", a, b), c), ("Add", ("Mul", a, c), ("Mul", b, c))) == "proved"
    assert axioms.prove(("Relu", ("Relu", a)), ("Relu", a)) == "proved"
    # a -> (a * b) / b is wrong where b == 0: refuted; the other direction holds
    assert axioms.prove(a, ("Div", ("Mul", a, b), b)) == "refuted"
    assert axioms.prove(("Div", ("Mul", a, b), b), a) == "proved"
    assert axioms.prove(("Add", a, b), ("Sub", a, b)) == "refuted"
    assert axioms.prove(("Tanh", ("Sub", a, b)), ("Sub", T.var("z"), ("Tanh", ("Sub", b, a)))) != "proved"


def test_enumeration_finds_the_classic_identities():
    ew = domains(["ew"])[0]
    en = enumeration.enumerate_domain(ew)
    cands = enumeration.candidates(ew, en)
    texts = {pruning.canonical(x.source, x.target) for x in cands}
    assert any(t.startswith("Add(Add(v0, v1), v2) => Add(Add(v") for t in texts)  # re-association
    assert en.counts[3] > en.counts[2] > en.counts[1] > 0


def test_pruning_by_renaming_context_and_subsumption():
    Cand = enumeration.Candidate
    r1 = Cand("ew", (("Relu", ("Relu", a)),), (("Relu", a),), "single")
    r2 = Cand("ew", (("Relu", ("Relu", b)),), (("Relu", b),), "single")
    kept, dropped = pruning.by_renaming([r1, r2])
    assert kept == [r1] and dropped == 1
    ctx = Cand("ew", (("Add", ("Relu", ("Relu", a)), b),), (("Add", ("Relu", a), b),), "single")
    assert pruning.by_common_subgraph([ctx]) == ([], 1)
    general = Cand("ew", (("Add", ("Add", a, b), c),), (("Add", a, ("Add", b, c)),), "single")
    inst = Cand("ew", (("Add", ("Add", a, b), a),), (("Add", a, ("Add", b, a)),), "single")
    assert pruning.by_subsumption([inst, general]) == ([general], 1)


def test_generation_is_deterministic_and_resumes(tmp_path):
    out1, out2 = tmp_path / "one.json", tmp_path / "two.json"
    generate(tmp_path / "w1", out1, ["mm"], log=lambda *_: None)
    # a killed run: the engine log cut in the middle of a line, then rerun
    log = tmp_path / "w1" / "mm" / "engine.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[: len(lines) // 2]) + "\n" + lines[len(lines) // 2][:7])
    generate(tmp_path / "w1", out2, ["mm"], log=lambda *_: None)
    assert out1.read_bytes() == out2.read_bytes()
    rules = json.loads(out1.read_text())["rules"]
    shipped = {r["name"] for r in te.rules.default().specs if r.get("provenance", {}).get("domain") == "mm"}
    assert shipped and shipped <= {r["name"] for r in rules}  # the shipped file is what the generator makes


def test_shipped_generated_rules_append_after_hand_rules_with_provenance():
    specs = te.rules.default().specs
    gen = [r for r in specs if r["family"] == FAMILY]
    hand = [r for r in specs if r["family"] != FAMILY]
    assert len(gen) >= 500
    # the 82 hand rules written before the generator, then the generated ones, then hand
    # rules written since (ids never change meaning)
    assert min(r["id"] for r in gen) == 82 == sum(r["id"] < 82 for r in hand)
    assert all(r["id"] < 82 or r["id"] > max(g["id"] for g in gen) for r in hand)
    for r in gen:
        p = r["provenance"]
        assert p["generated"] and p["verification"]["engine_draws"] >= 3 and len(p["size"]) == 2
    assert sum(r["provenance"]["verification"]["z3"] == "proved" for r in gen) > 100


def test_generated_ids_keep_their_meaning_around_later_hand_rules():
    hand = [{"name": f"h{i}", "id": i} for i in range(3)] + [{"name": "late_hand", "id": 6}]
    fresh = [{"name": n} for n in ("g0", "g1", "g2", "g3")]
    assign_ids(fresh, hand, previous=[])  # from scratch: the gap below the late hand rule first
    assert [s["id"] for s in fresh] == [3, 4, 5, 7]
    again = [{"name": n} for n in ("g0", "gnew", "g1", "g2", "g3")]
    assign_ids(again, hand, previous=fresh)  # rerun with the file: old ids kept, new appended
    assert {s["name"]: s["id"] for s in again} == {"g0": 3, "g1": 4, "g2": 5, "g3": 7, "gnew": 8}
