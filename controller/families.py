"""Model families of the evaluation graphs, for splitting train and held-out graphs so
that generalisation is measured on families never seen in training.

    family("resnet50") == family("resnet18.onnx") == "resnet"
"""

from __future__ import annotations

import os
import re

# Prefix of a graph name (builder or shipped ONNX file stem) -> its family.
_FAMILIES = (
    ("resnext", "resnet"), ("resnet", "resnet"), ("squeezenet", "squeezenet"), ("inception", "inception"),
    ("mobilenet", "mobilenet"), ("efficientnet", "efficientnet"), ("densenet", "densenet"),
    ("convnext", "convnext"), ("vit", "vit"), ("bert", "bert"), ("nasbench", "nasbench"),
    ("nasnet", "nasnet"), ("nasrnn", "nasrnn"),
)


def family(graph: str) -> str:
    """The family of a graph spec (a name, a path or an ONNX file); unknown names are
    their own family (the name without size suffixes)."""
    name = os.path.basename(str(graph)).lower()
    name = name[:-5] if name.endswith(".onnx") else name
    for prefix, fam in _FAMILIES:
        if name.startswith(prefix):
            return fam
    return re.sub(r"[_\d]+.*$", "", name) or name


def split(graphs, train_graphs) -> dict[str, str]:
    """{graph: "train" | "held-out"}: a graph is held out when no training graph is of
    its family."""
    seen = {family(g) for g in train_graphs}
    return {g: ("train" if family(g) in seen else "held-out") for g in graphs}
