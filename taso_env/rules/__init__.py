"""The substitution rules: data files in this folder (format: README.md here).

    te.rules.names()          # rule names in id order (the id is the action index)
    te.rules.default()        # the RuleSet of all shipped rules
    te.rules.default().hash   # identifies the rule set (stored with rollouts)
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from taso_env import _core
from taso_env.engine import real_work
from taso_env.errors import TasoEnvError

RULES_DIR = Path(__file__).resolve().parent
_RULE_KEYS = {"id", "name", "doc", "source", "target", "shapes", "constraints", "examples", "provenance"}
_PATTERN_KEYS = {"ops", "outputs"}
_OP_KEYS = {"name", "type", "inputs", "attrs"}


class RuleFormatError(TasoEnvError, ValueError):
    """A rule file is malformed (names the file, the rule and the field)."""


def _check_pattern(p, where: str, need_ops: bool) -> None:
    if not isinstance(p, dict) or set(p) - _PATTERN_KEYS:
        raise RuleFormatError(f"{where}: must be an object with keys {sorted(_PATTERN_KEYS)}")
    ops = p.get("ops", [])
    if not isinstance(ops, list):
        raise RuleFormatError(f"{where}: 'ops' must be a list")
    if need_ops and not ops:
        raise RuleFormatError(f"{where}: needs at least one op")
    for o in ops:
        if not isinstance(o, dict) or set(o) - _OP_KEYS or not {"name", "type"} <= set(o):
            raise RuleFormatError(f"{where}: op {o!r} must have 'name' and 'type' (and 'inputs', 'attrs')")
        if not isinstance(o["name"], str) or not isinstance(o["type"], str):
            raise RuleFormatError(f"{where}: op {o['name']!r}: 'name' and 'type' must be strings")
        inputs = o.get("inputs", [])
        if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
            raise RuleFormatError(f"{where}: op {o['name']!r} inputs must be a list of strings")
        if not isinstance(o.get("attrs", {}), dict):
            raise RuleFormatError(f"{where}: op {o['name']!r} 'attrs' must be an object")
    outputs = p.get("outputs")
    if not outputs or not isinstance(outputs, list) or not all(isinstance(t, str) for t in outputs):
        raise RuleFormatError(f"{where}: needs 'outputs', a non-empty list of strings")


def _check_rule(r, path: Path) -> None:
    where = f"{path.name}: rule {r.get('id')!r} {r.get('name')!r}" if isinstance(r, dict) else f"{path.name}"
    if not isinstance(r, dict):
        raise RuleFormatError(f"{where}: each rule must be an object")
    missing = {"id", "name", "source", "target"} - set(r)
    if missing:
        raise RuleFormatError(f"{where}: missing {sorted(missing)}")
    if set(r) - _RULE_KEYS:
        raise RuleFormatError(f"{where}: unknown keys {sorted(set(r) - _RULE_KEYS)}")
    if not isinstance(r["id"], int) or isinstance(r["id"], bool) or r["id"] < 0:
        raise RuleFormatError(f"{where}: 'id' must be a non-negative integer")
    if not isinstance(r["name"], str):
        raise RuleFormatError(f"{where}: 'name' must be a string")
    for key, kind in (("shapes", dict), ("constraints", list), ("examples", list)):
        if key in r and not isinstance(r[key], kind):
            raise RuleFormatError(f"{where}: {key!r} must be a{'n object' if kind is dict else ' list'}")
    _check_pattern(r["source"], where + " source", True)
    _check_pattern(r["target"], where + " target", False)


def load_rule_specs(directory: str | Path = RULES_DIR) -> list[dict]:
    """All rules of the JSON files in `directory`, sorted by id, checked for format,
    unique names and ids 0..n-1.

    Raises:
        RuleFormatError: naming the file and rule at fault.
    """
    specs = []
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise RuleFormatError(f"no rule files (*.json) in {directory}")
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RuleFormatError(f"{path.name}: not valid JSON ({type(e).__name__}: {e})") from None
        except RecursionError:
            raise RuleFormatError(f"{path.name}: JSON nested too deeply") from None
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            raise RuleFormatError(f"{path.name}: must be an object with a 'rules' list")
        if not isinstance(data.get("family", path.stem), str):
            raise RuleFormatError(f"{path.name}: 'family' must be a string")
        for r in data["rules"]:
            _check_rule(r, path)
            specs.append(dict(r, family=data.get("family", path.stem)))
    specs.sort(key=lambda r: r["id"])
    for expected, r in enumerate(specs):
        if r["id"] != expected:
            raise RuleFormatError(f"rule ids must be 0..{len(specs) - 1} without gaps or repeats; "
                                  f"found {r['id']} ({r['name']!r}) where {expected} was expected")
    names = [r["name"] for r in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RuleFormatError(f"duplicate rule names: {dupes}")
    return specs


class LedgeredCoreRuleSet(_core.CoreRuleSet):
    """The C++ rule set with its candidate pricing on the real-work ledger: a
    `candidates` or `candidate_effects` call (what Graph.candidates makes, or a caller of
    the core directly) is counted as a cost query, and refused inside
    `real_work.forbidden()`. Enumerations, steps, look-aheads and searches are counted by
    taso_env.engine.search, which makes them."""

    def candidates(self, graph, model, rule_id=-1, as_type=tuple):
        real_work.record("candidates")
        return super().candidates(graph, model, rule_id, as_type)

    def candidate_effects(self, graph, model, rule_id=-1):
        real_work.record("candidates")
        return super().candidate_effects(graph, model, rule_id)


@dataclass(frozen=True)
class RuleSet:
    """Compiled rules (C++) with their specs; `hash` identifies the set's content."""

    specs: tuple
    core: _core.CoreRuleSet
    hash: str

    def __len__(self) -> int:
        return len(self.specs)

    def names(self) -> list[str]:
        return [r["name"] for r in self.specs]

    def id_of(self, name: str) -> int:
        for r in self.specs:
            if r["name"] == name:
                return r["id"]
        raise KeyError(f"no rule named {name!r}")


def build_rule_set(specs: list[dict]) -> RuleSet:
    """Compiles rule specs (checked again by the C++ engine: op types, references,
    expressions)."""
    canonical = json.dumps([{k: v for k, v in r.items() if k not in ("doc", "examples", "family", "provenance")}
                            for r in specs], sort_keys=True)
    try:
        core = LedgeredCoreRuleSet([{k: v for k, v in r.items() if k not in ("examples", "provenance")}
                                 for r in specs])
    except RuleFormatError:
        raise
    except (ValueError, KeyError) as e:
        raise RuleFormatError(str(e)) from None
    except (TypeError, IndexError, OverflowError, RecursionError) as e:  # a field of the wrong type or size
        raise RuleFormatError(f"a rule field has the wrong type or size ({type(e).__name__}: {e})") from None
    return RuleSet(tuple(specs), core, hashlib.sha256(canonical.encode()).hexdigest()[:16])


@functools.cache
def default() -> RuleSet:
    """The shipped rule set."""
    return build_rule_set(load_rule_specs())


def names() -> list[str]:
    """Rule names in id order (id = action index)."""
    return default().names()
