"""greedy_random_detours: the work-matched baseline a learned agent must beat to claim it
beats greedy by more than taking extra steps.

On the real environment it plays greedy (the best improving rewrite) to greedy's local
optimum, then, while the episode has steps left under its cap, alternates one uniformly
random non-improving rewrite (a random detour: any of the rewrites the env offers, none
of which improves at a local optimum) with greedy's improving rewrites wherever one
exists; it stops at the cap, or where no rewrite is left. The evaluation keeps the
cheapest graph the episode visited (controller.evaluation.episode_graph), so it never
ends worse than greedy.

The cap is the step count of the agent it is matched to (the `controller` row's steps on
the same graph: its actions, the stop included), or, without one, `default_cap` of
greedy's own steps. Greedy's phase always runs to its local optimum, so an episode is
max(cap, greedy's rewrites + 1) actions long at most (`StepCap.effective`).

    policy = GreedyRandomDetours(env, cap=StepCap(matched=42))
    best, taken, best_step = episode_graph(env, policy, seed)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from taso_env.env.policies import GreedyPolicy

CAP_FACTOR = 1.2  # without a matched agent: 1.2 x greedy's steps + CAP_EXTRA
CAP_EXTRA = 5
GREEDY_PHASE_LIMIT = 10000  # the env's horizon for this agent: greedy's phase is never cut (te.search's max_steps)


def default_cap(greedy_steps: int) -> int:
    """The cap without a matched agent: 1.2 x greedy's rewrites + 5."""
    return int(math.ceil(CAP_FACTOR * greedy_steps + CAP_EXTRA))


@dataclass
class StepCap:
    """The episode's step cap. `matched`: the matched agent's steps on the graph (None:
    `default_cap` of greedy's steps, known once greedy's phase ends)."""

    matched: int | None = None
    greedy_steps: int | None = None  # greedy's rewrites before its local optimum (set by the episode)

    @property
    def source(self) -> str:
        return "greedy" if self.matched is None else "matched"

    @property
    def requested(self) -> int | None:
        """The cap as asked for (None until greedy's phase ends where no agent is matched)."""
        if self.matched is not None:
            return self.matched
        return None if self.greedy_steps is None else default_cap(self.greedy_steps)

    @property
    def effective(self) -> int | None:
        """The most actions the episode takes: the cap, or greedy's rewrites and its stop."""
        if self.greedy_steps is None:
            return None
        return max(self.requested, self.greedy_steps + 1)


class GreedyRandomDetours:
    """The policy `policy(obs, info, rng) -> (xfer, location)`; `rng` (the episode's,
    seeded) draws the detours. Resets its phase at step 0."""

    def __init__(self, env, cap: StepCap):
        if cap.matched is not None and (isinstance(cap.matched, bool) or cap.matched < 0):
            raise ValueError(f"greedy_random_detours: the step cap must be >= 0, got {cap.matched!r}")
        self.env = env.unwrapped
        self.cap = cap
        self._greedy = GreedyPolicy(env)
        self.detours = 0

    def __call__(self, obs, info: dict, rng: np.random.Generator) -> np.ndarray:
        step = int(info["step"])
        if step == 0:
            self.cap.greedy_steps, self.detours = None, 0
        improving = self._greedy(obs, info, rng)  # stop where no rewrite improves
        stop = np.array([len(info["xfer_mask"]) - 1, 0])
        in_greedy_phase = self.cap.greedy_steps is None
        if int(improving[0]) != len(info["xfer_mask"]) - 1:
            if in_greedy_phase or step + 1 < self.cap.effective:  # room for this rewrite and a stop
                return improving
            return stop
        if in_greedy_phase:
            self.cap.greedy_steps = step  # greedy's local optimum
        if step + 1 >= self.cap.effective:
            return stop
        return self._random_detour(info, rng, stop)

    def _random_detour(self, info: dict, rng: np.random.Generator, stop: np.ndarray) -> np.ndarray:
        """A uniformly random rewrite among those the env offers (none improves here)."""
        offered = np.argwhere(info["location_mask"][:-1])  # (xfer, location) of every addressable candidate
        if len(offered) == 0:
            return stop
        self.detours += 1
        return offered[int(rng.integers(len(offered)))].astype(np.int64)
