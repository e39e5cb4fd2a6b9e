"""GraphRewriteEnv: graph rewriting as a Gymnasium environment.

    env = gymnasium.make("taso_env/GraphRewrite-v0", graph="nasrnn")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(np.array([xfer, location]))

- Observation: the current graph as padded graph-net arrays (taso_env/env/features.py).
- Action: `(xfer, location)`. `xfer` in [0, n_rules) is a rule id (te.rules.names());
  `xfer == n_rules` is **stop**. `location` indexes that rule's candidates sorted by
  location (op ids; at most `max_locations` per rule). A step enumerates the new graph's
  candidates only near the rewrite (`search.step`; the same list as a full enumeration).
  `info["xfer_mask"]` [n_rules + 1] and `info["location_mask"]` [n_rules + 1,
  max_locations] say which actions are valid (stop always is). A rule's candidates past
  `max_locations` cannot be addressed: `info["candidates_dropped"]` counts them (0 when
  nothing is cut; raise `max_locations` to offer them). `info["top_rewards"]` and
  `info["top_locations"]` [n_rules + 1, top_locations] give each rule's most rewarding
  candidates (their rewards, from the enumeration's cost deltas, and locations).
- Invalid action (masked out): with `invalid_action="penalty"` (default) the graph is
  unchanged, the reward is `invalid_penalty`, `info["invalid_action"]` is True and the
  step counts toward the horizon; with `invalid_action="raise"` it raises
  InvalidActionError. Either way nothing crashes.
- Reward: `100 * (RT_{t-1} - RT_t) / RT_0`, RT = estimated runtime under the env's
  cost model (so the episode's return is the percentage of runtime saved).
- Episode end: terminated on stop or when no candidate is left; truncated at the
  horizon, or when a rewrite would exceed the observation's maxima
  (`info["truncated_reason"]`).

`FlatCandidateActions` gives the same env one `Discrete` action per offered candidate
(plus stop), an `action_masks()` method and a `candidates` observation field that says
what each action means: the form standard RL libraries (stable-baselines3, sb3-contrib's
MaskablePPO, CleanRL) train on. docs/env.md explains both forms for such a user.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import gymnasium
import numpy as np
from gymnasium import spaces

from taso_env import graphs
from taso_env import rules as rules_module
from taso_env.engine import real_work, search
from taso_env.engine.cost_model import make_cost_model
from taso_env.engine.graph import Graph
from taso_env.engine.search import Candidate
from taso_env.env import features
from taso_env.errors import ConfigError, TasoEnvError


class InvalidActionError(TasoEnvError, ValueError):
    """An action that the masks rule out (raised with invalid_action="raise")."""


@dataclass(frozen=True)
class EnvConfig:
    """Settings of GraphRewriteEnv.

    Attributes:
        graphs: built-in network names or ONNX paths; reset samples one uniformly.
        horizon: steps before truncation. The default, 400, lets greedy search run to
            its end on every built-in and shipped graph (nasnet_a takes 384 improving
            rewrites under the analytic H100 model, nasbench 146, nasrnn 56).
        max_nodes / max_edges: observation maxima (None: the largest start graph plus
            room to grow, `min(4 * horizon, max(largest, 256))` nodes and
            `min(6 * horizon, max(largest, 256))` edges; greedy grows a graph by at most
            3.2 nodes and 3.6 edges a rewrite on the built-in graphs). A rewrite past
            them truncates the episode (`info["truncated_reason"]`).
        max_locations: candidates offered per rule (the rest are counted in
            `info["candidates_dropped"]`).
        cost_model: "analytic[:profile]" (or a measured model when available).
        invalid_action: "penalty" or "raise".
        invalid_penalty: reward of an invalid action under "penalty".
        lazy_observations: observations are `features.LazyObservation`s, computed when
            first read (a Mapping, not a dict: outside gymnasium's passive checker), for
            agents that read few of them.
        top_locations: L of `info["top_rewards"]` / `info["top_locations"]`, each rule's
            L most rewarding locations (what the dream-trained controller chooses among).
    """

    graphs: tuple[str, ...] = ("squeezenet",)
    horizon: int = 400
    max_nodes: int | None = None
    max_edges: int | None = None
    max_locations: int = 128
    cost_model: str = "analytic:h100"
    invalid_action: str = "penalty"
    invalid_penalty: float = -1.0
    graph_kwargs: dict = field(default_factory=dict)
    lazy_observations: bool = False
    top_locations: int = 4

    def __post_init__(self):
        if not self.graphs:
            raise ConfigError("EnvConfig.graphs must name at least one graph")
        if self.horizon < 1:
            raise ConfigError(f"horizon must be >= 1, got {self.horizon}")
        if self.max_locations < 1:
            raise ConfigError(f"max_locations must be >= 1, got {self.max_locations}")
        if self.top_locations < 1:
            raise ConfigError(f"top_locations must be >= 1, got {self.top_locations}")
        if self.invalid_action not in ("penalty", "raise"):
            raise ConfigError(f"invalid_action must be 'penalty' or 'raise', got {self.invalid_action!r}")


def load_graph(spec: str | Graph, **kwargs) -> Graph:
    """A built-in network name, an ONNX path, a shipped model, or a Graph as is
    (taso_env.graphs.load)."""
    return graphs.load(spec, **kwargs)


class GraphRewriteEnv(gymnasium.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, graph: str | Graph | Sequence[str | Graph] | None = None, *,
                 config: EnvConfig | None = None, rules=None, **overrides):
        real_work.record("env_init")  # counted, and refused inside real_work.forbidden()
        if graph is None:
            graph = list(config.graphs) if config is not None else "squeezenet"
        specs = [graph] if isinstance(graph, (str, Graph)) else list(graph)
        if config is None:
            config = EnvConfig(graphs=tuple(s if isinstance(s, str) else s.name for s in specs), **overrides)
        elif overrides:
            raise ValueError("pass either config or keyword overrides, not both")
        self.config = config
        self.rules = rules if rules is not None else rules_module.default()
        self.n_rules = len(self.rules)
        self.cost_model = make_cost_model(config.cost_model)
        # each graph prices itself (and what rewriting makes of it) by the env's model
        self._graphs = [load_graph(s, **config.graph_kwargs).with_cost_model(self.cost_model) for s in specs]
        sizes = [features.graph_size(g) for g in self._graphs]
        largest_n, largest_e = max(n for n, _ in sizes), max(e for _, e in sizes)
        self.max_nodes = config.max_nodes or largest_n + min(4 * config.horizon, max(largest_n, 256))
        self.max_edges = config.max_edges or largest_e + min(6 * config.horizon, max(largest_e, 256))
        for g, (n, e) in zip(self._graphs, sizes):
            if n > self.max_nodes or e > self.max_edges:
                raise features.ObservationLimitError(
                    f"graph {g.name!r} needs {n} nodes / {e} edges; max_nodes={self.max_nodes}, "
                    f"max_edges={self.max_edges}")
        self.observation_space = features.observation_space(self.max_nodes, self.max_edges)
        self.action_space = spaces.MultiDiscrete([self.n_rules + 1, config.max_locations])
        self.graph: Graph | None = None
        self.real_steps = 0  # env steps taken since construction (for accounting)

    # -- helpers -----------------------------------------------------------------------
    @property
    def graph_names(self) -> list[str]:
        return [g.name for g in self._graphs]

    def _refresh(self, enum: search.Enumeration) -> None:
        """Makes `enum`'s graph the current one: its candidates grouped by rule (sorted by
        location), what an action indexes, and its costs."""
        self._enum, self.graph = enum, enum.graph
        self._stepped: dict[int, search.Enumeration] = {}  # successor enumerations built so far
        self._cands = cands = enum.candidates
        self._by_rule: dict[int, list[Candidate]] = {}  # rules with candidates only
        self._index_by_rule: dict[int, range] = {}
        self._dropped = 0  # candidates past max_locations
        rule_ids = [c.rule_id for c in cands]  # (sorted: an enumeration's candidates are by rule, then location)
        start = 0
        while start < len(rule_ids):
            rule = rule_ids[start]
            end = bisect.bisect_right(rule_ids, rule, start)
            kept = min(end, start + self.config.max_locations)
            self._by_rule[rule] = cands[start:kept]
            self._index_by_rule[rule] = range(start, kept)
            self._dropped += end - kept
            start = end
        self._op_costs = enum.op_costs()  # enumerated under self.cost_model
        self._cost = float(self._op_costs.sum())
        self._top = None  # (top_rewards, top_locations), computed on the first info

    @property
    def cost(self) -> float:
        """Estimated runtime (ms) of the current graph under the env's cost model."""
        return self._cost

    def enumeration(self) -> search.Enumeration:
        """The current graph's candidates, as `search.step` can carry through a rewrite."""
        return self._enum

    def successor_enumeration(self, index: int) -> search.Enumeration:
        """The enumeration that `enumeration().candidates[index]` leads to (`search.step`),
        built once per graph: a look-ahead's successor is reused by the step that takes it."""
        if index not in self._stepped:
            self._stepped[index] = search.step(self._enum, index)
        return self._stepped[index]

    def candidate_index(self, xfer: int, location: int) -> int:
        """Where candidate (xfer, location) is in `enumeration().candidates`."""
        return self._index_by_rule[xfer][location]

    def _masks(self) -> tuple[np.ndarray, np.ndarray]:
        xfer = np.zeros(self.n_rules + 1, bool)
        loc = np.zeros((self.n_rules + 1, self.config.max_locations), bool)
        for r, cs in self._by_rule.items():
            xfer[r] = True
            loc[r, :len(cs)] = True
        xfer[self.n_rules] = True
        loc[self.n_rules, 0] = True
        return xfer, loc

    def _observation(self) -> dict[str, np.ndarray] | features.LazyObservation:
        compute = functools.partial(features.graph_features, self.graph, op_costs=self._op_costs,
                                    initial_cost=self._initial_cost, step=self._step, horizon=self.config.horizon,
                                    max_nodes=self.max_nodes, max_edges=self.max_edges)
        return features.LazyObservation(compute) if self.config.lazy_observations else compute()

    def _top_candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """Each rule's `top_locations` most rewarding candidates, best first: their rewards
        [n_rules + 1, L] float32 (% of the start cost saved; -inf where a rule has fewer,
        not NaN, so that two infos of the same state compare equal) and locations
        [n_rules + 1, L] int32 (-1 there). From the enumeration's cost deltas: no further
        engine work."""
        if self._top is None:
            width = self.config.top_locations
            rewards = np.full((self.n_rules + 1, width), -np.inf, np.float32)
            locations = np.full((self.n_rules + 1, width), -1, np.int32)
            scale = -100.0 / self._initial_cost
            for rule, cs in self._by_rule.items():
                deltas = np.fromiter((c.cost_delta for c in cs), np.float64, len(cs))
                best = np.argsort(deltas, kind="stable")[:width]
                rewards[rule, :len(best)] = deltas[best] * scale
                locations[rule, :len(best)] = best
            self._top = (rewards, locations)
        return self._top

    def _info(self, **extra) -> dict:
        xfer, loc = self._masks()
        top_rewards, top_locations = self._top_candidates()
        return {"xfer_mask": xfer, "location_mask": loc, "top_rewards": top_rewards.copy(),
                "top_locations": top_locations.copy(), "cost": self._cost,
                "initial_cost": self._initial_cost, "step": self._step, "graph": self.graph.name,
                "num_candidates": len(self._cands), "candidates_dropped": self._dropped,
                "invalid_action": False, **extra}

    def candidates(self, xfer: int) -> list[Candidate]:
        """The candidates `location` indexes for rule `xfer` in the current graph."""
        return list(self._by_rule.get(xfer, []))

    # -- gymnasium API -----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        real_work.record("env_reset")
        super().reset(seed=seed)
        options = options or {}
        if "graph" in options:
            names = self.graph_names
            if options["graph"] not in names:
                raise ValueError(f"unknown graph {options['graph']!r}; this env has {names}")
            self.graph = self._graphs[names.index(options["graph"])]
        else:
            self.graph = self._graphs[int(self.np_random.integers(len(self._graphs)))]
        self._step = 0
        self._initial_cost = None
        self._refresh(search.enumeration(self.graph, rules=self.rules, model=self.cost_model))
        self._initial_cost = self._cost
        return self._observation(), self._info()

    def step(self, action):
        if self.graph is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        action = np.asarray(action).reshape(-1)
        if action.shape != (2,):
            raise InvalidActionError(f"an action is (xfer, location); got shape {action.shape}")
        xfer, location = int(action[0]), int(action[1])
        real_work.record("env_step")
        self._step += 1
        self.real_steps += 1
        truncated_reason = None
        if xfer == self.n_rules:
            reward, terminated, invalid = 0.0, True, False
        elif 0 <= location < len(self._by_rule.get(xfer, [])):
            previous_cost = self._cost
            after = self.successor_enumeration(self._index_by_rule[xfer][location])
            n, e = features.graph_size(after.graph)
            if n > self.max_nodes or e > self.max_edges:
                truncated_reason = "observation limit"
                reward, terminated, invalid = 0.0, False, False
            else:
                self._refresh(after)
                real_work.record("step_entered")  # its search.step is no look-up (real_work.successor_lookups)
                reward = 100.0 * (previous_cost - self._cost) / self._initial_cost
                terminated, invalid = not self._cands, False
        else:
            if self.config.invalid_action == "raise":
                raise InvalidActionError(
                    f"action ({xfer}, {location}) is not valid: xfer must be a rule with candidates "
                    f"(0..{self.n_rules - 1}) or {self.n_rules} (stop), location < that rule's "
                    f"{len(self._by_rule.get(xfer, []))} candidates")
            reward, terminated, invalid = self.config.invalid_penalty, False, True
        truncated = truncated_reason is not None or (not terminated and self._step >= self.config.horizon)
        if truncated and truncated_reason is None:
            truncated_reason = "horizon"
        extra = {"invalid_action": invalid}
        if truncated:
            extra["truncated_reason"] = truncated_reason
        return self._observation(), float(reward), bool(terminated), bool(truncated), self._info(**extra)


class FlatCandidateActions(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """One `Discrete` action per offered candidate rewrite, for standard RL libraries.

    Action k < max_candidates applies the k-th offered candidate; action `max_candidates`
    is stop. The candidates are every rule's (each rule's first `max_locations`, as the
    env offers them), in the order `order` names:
    - "cost_delta" (default): by estimated cost delta, best first (ties by rule, then
      location), so that action k keeps one meaning from step to step: the k-th best
      rewrite by the env's estimate;
    - "rule": by rule id, then location (the env's own order).
    The first `max_candidates` are offered; the rest (and those the env itself cuts) are
    counted in `info["candidates_dropped"]`.

    The observation is the env's plus `candidates` [max_candidates, CANDIDATE_DIM]: row k
    describes action k (features.py: valid, cost delta, rule, where, rank). `action_masks()`
    (what sb3-contrib's MaskablePPO calls) and `info["action_mask"]` mark the valid
    actions (stop always is); `info["candidates"][k]` is action k's `(xfer, location)` in
    the env's hierarchical form. An action outside the mask is handled as the env's
    `invalid_action` setting says (penalty by default).
    """

    def __init__(self, env: gymnasium.Env, max_candidates: int = 512, order: str = "cost_delta"):
        gymnasium.utils.RecordConstructorArgs.__init__(self, max_candidates=max_candidates, order=order)
        gymnasium.Wrapper.__init__(self, env)
        if max_candidates < 1:
            raise ConfigError(f"max_candidates must be >= 1, got {max_candidates}")
        if order not in ("cost_delta", "rule"):
            raise ConfigError(f"order must be 'cost_delta' or 'rule', got {order!r}")
        if not isinstance(env.unwrapped, GraphRewriteEnv):
            raise ConfigError(f"FlatCandidateActions wraps a GraphRewriteEnv, got {type(env.unwrapped).__name__}")
        self.max_candidates, self.order = max_candidates, order
        self.action_space = spaces.Discrete(max_candidates + 1)
        self.observation_space = spaces.Dict({**env.observation_space.spaces,
                                              "candidates": features.candidate_space(max_candidates)})
        self._flat_actions: list[tuple[int, int]] = []
        self._mask = np.zeros(max_candidates + 1, bool)

    def action_masks(self) -> np.ndarray:
        """[max_candidates + 1] bool: the valid actions now (stop, the last, always is)."""
        return self._mask.copy()

    def _flat(self, obs, info: dict) -> tuple[dict, dict]:
        base: GraphRewriteEnv = self.env.unwrapped
        offered = [(int(r), i, c) for r in np.flatnonzero(info["xfer_mask"][:-1])
                   for i, c in enumerate(base.candidates(int(r)))]
        if self.order == "cost_delta":
            offered.sort(key=lambda t: (t[2].cost_delta, t[0], t[1]))
        kept = offered[: self.max_candidates]
        self._flat_actions = [(r, i) for r, i, _ in kept]
        self._mask = np.zeros(self.max_candidates + 1, bool)
        self._mask[: len(kept)] = True
        self._mask[-1] = True
        candidate_rows = features.candidate_features(
            np.array([r for r, _, _ in kept], np.int64), np.array([c.location[0] for _, _, c in kept], np.int64),
            np.array([c.cost_delta for _, _, c in kept], np.float64), initial_cost=info["initial_cost"],
            n_rules=base.n_rules, max_nodes=base.max_nodes, max_candidates=self.max_candidates)
        obs = {**{name: obs[name] for name in features.FIELDS}, "candidates": candidate_rows}
        info = {**info, "action_mask": self._mask.copy(), "candidates": list(self._flat_actions),
                "candidate_features": candidate_rows,
                "candidates_dropped": info["candidates_dropped"] + len(offered) - len(kept)}
        return obs, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._flat(obs, info)

    def step(self, action):
        a = int(np.asarray(action).reshape(-1)[0]) if np.ndim(action) else int(action)
        base: GraphRewriteEnv = self.env.unwrapped
        if a == self.max_candidates:
            inner = (base.n_rules, 0)
        elif 0 <= a < len(self._flat_actions):
            inner = self._flat_actions[a]
        else:
            inner = (-1, -1)  # invalid: handled by the env as configured
        obs, reward, terminated, truncated, info = self.env.step(np.array(inner))
        obs, info = self._flat(obs, info)
        return obs, reward, terminated, truncated, info
