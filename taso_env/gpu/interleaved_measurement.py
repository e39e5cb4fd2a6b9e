"""Measuring several graphs so that their runtimes can be compared and ranked.

    from taso_env.gpu import interleaved_measurement as im
    runs = im.measure_interleaved([g0, g1, g2], rounds=8)   # runs[i][r]: graph i, round r (ms)
    ms = [im.middle(r) for r in runs]
    ms = im.measure_side_by_side([original, optimised])      # the same, ROUNDS rounds

Rewrites of a transformer move its runtime by a few tenths of a percent, and two things
move a measurement by as much without the graph changing:

- when it is taken: the GPU's clocks and temperature drift over a run, so measuring one
  graph's executors back to back and then the next graph's gives each graph the time
  slot it happened to get;
- where its tensors lie: an executor keeps every tensor in one arena laid out by the
  graph, and which cache slices and memory channels serve a tensor follow its address
  bits. A freed arena's memory is handed to the next executor of the same size, so
  fresh executors of one graph built one after another share one placement, and a
  graph keeps the luck of it for the whole process.

So each round builds a fresh executor for every graph, visits the graphs in a new
random order, and (placements="random") shifts each executor's arena by a random
multiple of 256 bytes below 4 MiB; a graph's runtime is the middle of its rounds'
medians. order="sequential" and placements="fixed" measure the old way, for comparison
(benchmarks/bench_cuda.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from taso_env.gpu import cuda_backend

if TYPE_CHECKING:
    from taso_env.engine.graph import Graph

ORDERS = ("interleaved", "sequential")
PLACEMENTS = ("random", "fixed")
#: Arena shifts are drawn below this many bytes (a few cache-hash and DRAM page periods).
PLACEMENT_SPAN = 4 << 20
#: Rounds (fresh executors per graph) unless asked otherwise.
ROUNDS = 5


def middle(values: Sequence[float]) -> float:
    """The middle value (the upper of the two middle ones of an even count)."""
    if not values:
        raise ValueError("no values")
    return sorted(values)[len(values) // 2]


def measure_interleaved(graphs: Sequence[Graph], *, rounds: int = ROUNDS, warmup: int = 10, repeats: int = 50,
                        order: str = "interleaved", placements: str = "random", seed: int = 0,
                        on_measured: Callable[[int, int, float], None] | None = None,
                        **executor_kwargs) -> list[list[float]]:
    """Per graph, per round: the median replay time (ms) of a fresh executor.

    Args:
        graphs: the graphs to compare.
        rounds: fresh executors per graph.
        warmup / repeats: replays before timing / timed samples per executor.
        order: "interleaved" (every round visits all graphs, in a new random order) or
            "sequential" (all rounds of one graph, then the next).
        placements: "random" (each executor's arena shifted at random) or "fixed".
        seed: seeds the visiting orders and the shifts.
        on_measured: called with (graph index, round, ms) after each measurement.
        executor_kwargs: passed to `cuda_backend.Executor` (math, opaque, ...).

    Raises:
        ValueError: an unknown order or placement, or rounds < 1.
    """
    runs: list[list[float]] = [[0.0] * rounds for _ in graphs]
    for i, r, offset in schedule(len(graphs), rounds, order=order, placements=placements, seed=seed):
        with cuda_backend.Executor(graphs[i], arena_offset=offset, **executor_kwargs) as ex:
            runs[i][r] = ex.measure(warmup, repeats).median_ms
        if on_measured is not None:
            on_measured(i, r, runs[i][r])
    return runs


def measure_side_by_side(graphs: Sequence[Graph], **kwargs) -> list[float]:
    """Per graph: its runtime (ms), the middle of its rounds (`measure_interleaved`, same
    arguments)."""
    return [middle(each) for each in measure_interleaved(graphs, **kwargs)]


def schedule(num_graphs: int, rounds: int, *, order: str = "interleaved", placements: str = "random",
             seed: int = 0) -> list[tuple[int, int, int]]:
    """The measurements `measure_interleaved` takes, in order: (graph index, round, arena
    offset in bytes), each (graph, round) once.

    Raises:
        ValueError: an unknown order or placement, or rounds < 1.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if placements not in PLACEMENTS:
        raise ValueError(f"placements must be one of {PLACEMENTS}, got {placements!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    rng = random.Random(seed)
    if order == "sequential":
        visits = [(i, r) for i in range(num_graphs) for r in range(rounds)]
    else:
        visits = []
        for r in range(rounds):
            visiting = list(range(num_graphs))
            rng.shuffle(visiting)
            visits.extend((i, r) for i in visiting)
    slots = PLACEMENT_SPAN // cuda_backend.ARENA_ALIGN
    return [(i, r, rng.randrange(slots) * cuda_backend.ARENA_ALIGN if placements == "random" else 0)
            for i, r in visits]
