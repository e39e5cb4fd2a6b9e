"""Every shipped rule is verified numerically (property tests on random shapes drawn
from its examples), and the rule set is well formed."""

import pytest

import taso_env as te
from taso_env.rules import RuleFormatError, build_rule_set, load_rule_specs
from taso_env.rules.verify import verify_rule

RULES = te.rules.default()


GENERATED = [r["id"] for r in RULES.specs if r["family"] == "generated"]


@pytest.mark.parametrize("rule_id", range(len(RULES)), ids=RULES.names())
def test_rule_is_verified_numerically(rule_id):
    # generated rules: every shape draw (example) once; more seeds on a sample below
    seeds = (0,) if RULES.specs[rule_id]["family"] == "generated" else (0, 1, 2)
    assert verify_rule(RULES, rule_id, seeds=seeds) >= 3


@pytest.mark.parametrize("rule_id", GENERATED[::25])
def test_generated_rule_sample_on_more_seeds(rule_id):
    assert verify_rule(RULES, rule_id, seeds=(1, 2, 3)) >= 9


def test_rule_set_size_ids_and_families():
    assert len(RULES) >= 80
    assert [r["id"] for r in RULES.specs] == list(range(len(RULES)))
    families = {r["family"] for r in RULES.specs}
    assert {"activation_fusion", "folding", "merging", "kernel_enlargement", "split_concat",
            "elementwise_split_concat", "transpose_reshape", "algebra"} <= families
    assert te.rules.names()[0] == "fuse_conv_relu"  # ids never change meaning


def test_rule_set_hash_is_stable_and_content_based():
    again = build_rule_set(load_rule_specs())
    assert again.hash == RULES.hash
    changed = [dict(r) for r in RULES.specs]
    changed[0] = dict(changed[0], name="renamed")
    assert build_rule_set(changed).hash != RULES.hash


def test_malformed_rule_files_are_rejected_with_the_file_and_rule(tmp_path):
    (tmp_path / "a.json").write_text('{"rules": [{"id": 0, "name": "x"}]}')
    with pytest.raises(RuleFormatError, match=r"a.json: rule 0 'x': missing"):
        load_rule_specs(tmp_path)
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(RuleFormatError, match="a.json: not valid JSON"):
        load_rule_specs(tmp_path)
    good = {"id": 1, "name": "y", "source": {"ops": [{"name": "r", "type": "Relu", "inputs": ["x"]}],
                                             "outputs": ["r"]}, "target": {"outputs": ["x"]}}
    import json
    (tmp_path / "a.json").write_text(json.dumps({"rules": [good]}))
    with pytest.raises(RuleFormatError, match="ids must be 0..0"):
        load_rule_specs(tmp_path)
    bad_type = dict(good, id=0, source={"ops": [{"name": "r", "type": "Frob", "inputs": ["x"]}], "outputs": ["r"]})
    with pytest.raises(RuleFormatError, match="unknown op type 'Frob'"):
        build_rule_set([bad_type])
    bad_ref = dict(good, id=0, target={"outputs": ["nowhere"]})
    with pytest.raises(RuleFormatError, match="'nowhere'"):
        build_rule_set([bad_ref])
