"""The valley family: small generated CNNs (tens of ops) in which greedy stops at a local
optimum whose best continuation starts with a rewrite that costs runtime and pays back
one or two rewrites later. A training and held-out set of graphs for agents that must learn
when a losing rewrite is worth taking (the "dream-trained controller decides" issue).

    from taso_env.graphs import valley_family
    g = valley_family.build(3)                  # member 3 (shape-only graph by default)
    g = te.graphs.load("valley_3")              # the same by name, or "valley:3"
    valley_family.TRAIN_SEEDS, valley_family.HELD_OUT_SEEDS   # (0..7), (100..104)
    valley_family.members("held_out")           # ["valley_100", ..., "valley_104"]
    valley_family.layout(3)                     # what the member is made of

The valley is squeezenet's, made deeper: a **fire** block is a squeeze 1x1 conv, then an
expand 1x1 conv and an expand 3x3 conv on the squeeze, each followed by a GELU (which no
rule fuses into a conv), concatenated. Under the analytic H100 model, from greedy's
optimum: `enlarge_conv_1x1_to_3x3` on the expand 1x1 (+3.3-3.7 us, about +3% of the
graph), `merge_parallel_convs` (-1.0-1.3 us: still above the optimum), `gelu_after_split`
(below it), `concat_of_split` (about 5-7% below it in all). Greedy takes none of it;
the entry's undo (`shrink_enlarged_conv`) is what greedy would take next. Under the measured H100
fp32 table the entry costs runtime too (+2.5-2.8 us), `merge_parallel_convs` pays it back
the next rewrite, and backtracking goes on to 2-6% below greedy.

Each member (a seed) draws, deterministically (`random.Random(seed)`):
- the widths and spatial size (`SHAPES`), the input channels and a 3x3 stem conv;
- 2 or 3 blocks, each a **fire** (pays), a **wide fire** (the same block with the expand
  1x1 eight times the 3x3's width: enlarging it costs more than the merge saves) or a
  **bottleneck** (1x1 -> 3x3 -> 1x1); at least one fire, at most one wide fire;
- which blocks have their ReLUs as separate ops (greedy's work before it stops; the
  table prefers them separate, so there greedy unfuses the others) and, on bottlenecks,
  a distractor branch (a max pool of the block input, concatenated to its output).

The squeeze convs, the bottlenecks' 1x1s and the wide fires' expand 1x1s are places of
the entry's rule that do not pay; rewrites that lose less than the entry (unfusing a
ReLU, enlarging a 3x3 to 5x5; under the table re-fusing a ReLU) are there at every
optimum. At most 10 convs: the table's near-neutral fuse/unfuse moves multiply the
graphs that backtracking keeps within alpha. `tests/test_valley_family.py` checks all of
this with the real engine; `data/valley_graphs.json` has the members' greedy and
backtracking speedups on the table (`benchmarks/find_valley_graphs.py`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.graph import Graph

TRAIN_SEEDS: tuple[int, ...] = tuple(range(8))
HELD_OUT_SEEDS: tuple[int, ...] = tuple(range(100, 105))
ENTRY_RULE = "enlarge_conv_1x1_to_3x3"
# (squeeze, expand, spatial size): squeeze * expand * size^2 about 1e6, so that the entry
# (the expand 1x1 enlarged to 3x3) loses a little more than unfusing a ReLU does and
# less than 5% of the graph (backtracking's alpha 1.05)
SHAPES = ((16, 96, 26), (24, 64, 26), (24, 80, 24), (32, 48, 26), (32, 64, 22), (16, 80, 28))
_SPEC = re.compile(r"valley[_:](\d+)")


@dataclass(frozen=True)
class Block:
    kind: str  # "fire" (pays), "wide_fire" (the same rule does not pay), "bottleneck"
    squeeze: int  # the squeeze conv's width (a bottleneck's 1x1 and 3x3)
    expand: int  # fire: both expands; wide_fire: the 3x3's (the 1x1 has 8x); bottleneck: half its output
    separate_relu: bool  # ReLUs as their own ops (greedy fuses them under the analytic model)
    pool_branch: bool  # a distractor: max pool of the block input, concatenated to its output


@dataclass(frozen=True)
class Layout:
    seed: int
    channels: int
    size: int
    stem: int
    blocks: tuple[Block, ...]

    @property
    def paying_blocks(self) -> tuple[int, ...]:
        return tuple(i for i, blk in enumerate(self.blocks) if blk.kind == "fire")


def name(seed: int) -> str:
    """The graph name of member `seed` ("valley_<seed>")."""
    return f"valley_{int(seed)}"


def seed_of(spec) -> int | None:
    """The member seed of a spec "valley_<n>" or "valley:<n>"; None for any other."""
    m = _SPEC.fullmatch(str(spec))
    return int(m.group(1)) if m else None


def members(split: str = "all") -> list[str]:
    """Names of the "train", "held_out" or "all" members."""
    seeds = {"train": TRAIN_SEEDS, "held_out": HELD_OUT_SEEDS, "all": TRAIN_SEEDS + HELD_OUT_SEEDS}[split]
    return [name(s) for s in seeds]


def layout(seed: int) -> Layout:
    """What member `seed` is made of (deterministic in the seed)."""
    rng = random.Random(int(seed))
    squeeze, expand, size = rng.choice(SHAPES)
    channels = rng.choice([96, 128, 160])
    n_blocks = rng.choice([2, 3, 3])
    kinds = [rng.choice(["fire", "wide_fire", "bottleneck"]) for _ in range(n_blocks)]
    if "fire" not in kinds:
        kinds[rng.randrange(n_blocks)] = "fire"
    if kinds.count("wide_fire") > 1:  # two: too many near-neutral graphs for backtracking on the table
        kinds[kinds.index("wide_fire")] = "bottleneck"
    relu = [rng.random() < 0.4 for _ in kinds]
    if not any(relu):
        relu[rng.randrange(n_blocks)] = True
    pool = [kind == "bottleneck" and rng.random() < 0.5 for kind in kinds]
    blocks = tuple(Block(kind, squeeze, expand if kind != "wide_fire" else expand // 2, separate_relu=r,
                         pool_branch=p) for kind, r, p in zip(kinds, relu, pool))
    return Layout(int(seed), channels, size, 2 * expand, blocks)


def _conv(b: GraphBuilder, x: Tensor, out: int, kernel: int, separate_relu: bool, name: str) -> Tensor:
    y = b.conv2d(x, out, kernel, padding=kernel // 2, bias=True, activation=None if separate_relu else "relu",
                 name=name)
    return b.relu(y) if separate_relu else y


def build(seed: int, *, weight_seed: int | None = None) -> Graph:
    """Member `seed` of the family, batch 1; `weight_seed` None builds a shape-only graph."""
    lay = layout(seed)
    b = GraphBuilder(name(seed), seed=weight_seed)
    x = b.input("input", [1, lay.channels, lay.size, lay.size])
    x = _conv(b, x, lay.stem, 3, False, "stem")
    for i, blk in enumerate(lay.blocks):
        r = blk.separate_relu
        if blk.kind == "bottleneck":
            y = _conv(b, x, blk.squeeze, 1, r, f"b{i}.reduce")
            y = _conv(b, y, blk.squeeze, 3, r, f"b{i}.conv3x3")
            y = _conv(b, y, blk.expand * 2, 1, r, f"b{i}.restore")
        else:  # the expands' activation is a GELU, which no rule fuses into a conv
            e1 = blk.expand * 8 if blk.kind == "wide_fire" else blk.expand
            s = _conv(b, x, blk.squeeze, 1, r, f"b{i}.squeeze")
            y = b.concat([b.gelu(b.conv2d(s, e1, 1, name=f"b{i}.expand1x1")),
                          b.gelu(b.conv2d(s, blk.expand, 3, padding=1, name=f"b{i}.expand3x3"))], axis=1)
        x = b.concat([y, b.max_pool(x, 3, stride=1, padding=1)], axis=1) if blk.pool_branch else y
    b.output(x, "output")
    return b.build(metadata={"valley_family": {"seed": lay.seed, "paying_blocks": list(lay.paying_blocks)}})


def load(spec: str, seed: int | None = None) -> Graph | None:
    """The member a spec names ("valley_<n>" / "valley:<n>"), None when it names none;
    `seed` is the weight data's (taso_env.graphs.load's convention)."""
    member = seed_of(spec)
    return None if member is None else build(member, weight_seed=seed)
