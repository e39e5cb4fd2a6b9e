"""python -m taso_env.rules : list the shipped rules (id, family, name, doc)."""

from taso_env.rules import default

rules = default()
print(f"{len(rules)} rules, rule-set hash {rules.hash}")
for r in rules.specs:
    print(f"{r['id']:3d}  {r['family']:26s} {r['name']:36s} {r.get('doc', '')}")
