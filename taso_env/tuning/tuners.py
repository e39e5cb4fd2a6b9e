"""Tuners over a TuningSpace, one interface (AutoTVM style):

    tuner = GATuner(space, seed=0)
    while trials < budget:
        batch = tuner.next_batch(8)           # configs not proposed before
        tuner.update(batch, measure(batch))   # costs in ms (inf = failed)

`RandomTuner`, `GridTuner`, `GATuner` (AutoTVM GATuner: elitism, fitness-proportional
parents, here two-point crossover and per-gene mutation) and `XGBTuner` (an XGBoost
cost model ranks mutated / random candidates). GA-DQN lives on the learning side
(`tuner_agents.gadqn`, TensorFlow) and is registered here (`register_tuner`).
No tuner here imports TensorFlow; `XGBTuner` imports xgboost when built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import numpy as np

from taso_env.errors import TuningError
from taso_env.tuning.space import TuningSpace

Config = tuple[int, ...]


class Tuner:
    """Proposes configs (`next_batch`) and learns from their measured costs (`update`).
    Never proposes a config twice; `best_config` / `best_cost` track the best seen."""

    name = "tuner"

    def __init__(self, space: TuningSpace, seed: int = 0):
        if len(space) == 0:
            raise TuningError(f"the space of {space.graph!r} has no knobs to tune")
        self.space = space
        self.card = space.cardinalities
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.visited: set[Config] = set()
        self.best_config: Config | None = None
        self.best_cost = float("inf")
        self.history: list[tuple[Config, float]] = []

    def has_next(self) -> bool:
        return len(self.visited) < min(float(np.prod(self.card.astype(float))), 1e18)

    def next_batch(self, n: int) -> list[Config]:
        raise NotImplementedError

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        for c, cost in zip(configs, costs):
            c = tuple(int(x) for x in c)
            self.history.append((c, float(cost)))
            if cost < self.best_cost:
                self.best_cost, self.best_config = float(cost), c

    # -- helpers ---------------------------------------------------------------------
    def _random(self) -> Config:
        return tuple(int(x) for x in (self.rng.random(len(self.card)) * self.card).astype(np.int64))

    def _claim(self, c: Config) -> bool:
        if c in self.visited:
            return False
        self.visited.add(c)
        return True

    def _fresh_random(self, tries: int = 100) -> Config | None:
        for _ in range(tries):
            c = self._random()
            if self._claim(c):
                return c
        return None


class RandomTuner(Tuner):
    """Uniformly random configs, without repeats."""

    name = "random"

    def next_batch(self, n: int) -> list[Config]:
        out = []
        while len(out) < n and self.has_next():
            c = self._fresh_random()
            if c is None:
                break
            out.append(c)
        return out


class GridTuner(Tuner):
    """Configs in mixed-radix order of their gene indices (the last gene fastest)."""

    name = "grid"

    def __init__(self, space: TuningSpace, seed: int = 0):
        super().__init__(space, seed)
        self._counter = [0] * len(self.card)
        self._done = False

    def next_batch(self, n: int) -> list[Config]:
        out = []
        while len(out) < n and not self._done:
            c = tuple(self._counter)
            self._claim(c)
            out.append(c)
            for i in reversed(range(len(self._counter))):
                self._counter[i] += 1
                if self._counter[i] < self.card[i]:
                    break
                self._counter[i] = 0
            else:
                self._done = True
        return out


class GATuner(Tuner):
    """AutoTVM's GATuner behaviour: a population of `pop_size`; each generation keeps the
    `elite_num` best (elitism) and fills the rest with children of parents drawn with
    probability proportional to fitness (1 / cost), two-point crossover, then each gene
    mutated with probability `mutation_prob` (default: AutoTVM's 0.1, capped at 2 / genes so
    a child of a 200-gene space is not re-randomised). Children already measured are redrawn.

    Subclasses choose the crossover points and the mutations by overriding
    `crossover_points` and `mutate` (GA-DQN)."""

    name = "ga"

    def __init__(self, space: TuningSpace, seed: int = 0, pop_size: int = 16, elite_num: int = 3,
                 mutation_prob: float | None = None, init: Sequence[Sequence[int]] = ()):
        super().__init__(space, seed)
        if mutation_prob is None:  # AutoTVM's 0.1, but about 2 genes per child in large spaces
            mutation_prob = min(0.1, 2.0 / len(self.card))
        if pop_size < 2 or not 0 <= elite_num < pop_size:
            raise TuningError(f"GA needs pop_size >= 2 and 0 <= elite_num < pop_size, got {pop_size}, {elite_num}")
        if not 0.0 <= mutation_prob <= 1.0:
            raise TuningError(f"mutation_prob must be in [0, 1], got {mutation_prob}")
        self.pop_size, self.elite_num, self.mutation_prob = pop_size, elite_num, mutation_prob
        self.population: list[Config] = []  # the current generation (measured)
        self.scores: list[float] = []
        self.pending: list[Config] = []  # proposed, not yet returned by next_batch
        self.measured: dict[Config, float] = {}
        self.children_meta: dict[Config, dict] = {}  # how each child was made (for GA-DQN)
        self.generation = 0
        # The first population: `init` configs (e.g. the executor's default plan), then
        # mutants of them if any were given (live tuning starts near the default), else
        # random configs.
        for c in init:
            c = space.validate(c)
            if self._claim(c):
                self.pending.append(c)
        seeds = list(self.pending)
        while len(self.pending) < pop_size:
            if seeds:
                c = list(seeds[int(self.rng.integers(len(seeds)))])
                for g in self.rng.choice(len(self.card), size=min(len(self.card), int(self.rng.integers(1, 4))),
                                         replace=False):
                    c[g] = int(self.rng.integers(self.card[g]))
                c = tuple(c)
                if not self._claim(c):
                    continue
            else:
                c = self._fresh_random()
                if c is None:
                    break
            self.pending.append(c)

    def next_batch(self, n: int) -> list[Config]:
        out = []
        while len(out) < n:
            if not self.pending:
                if not self._next_generation():
                    break
            out.append(self.pending.pop(0))
        return out

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        super().update(configs, costs)
        for c, cost in zip(configs, costs):
            self.measured[tuple(c)] = float(cost)

    # -- generation ------------------------------------------------------------------
    def _next_generation(self) -> bool:
        """Selection over everything measured so far (AutoTVM keeps the measured genes
        of the last generation; here the best pop_size of all measured configs)."""
        if not self.measured:
            c = self._fresh_random()
            if c is None:
                return False
            self.pending.append(c)
            return True
        ranked = sorted(self.measured.items(), key=lambda kv: kv[1])[: self.pop_size]
        self.population = [c for c, _ in ranked]
        costs = np.array([s for _, s in ranked])
        fit = np.where(np.isfinite(costs), 1.0 / np.maximum(costs, 1e-12), 0.0)
        probs = fit / fit.sum() if fit.sum() > 0 else np.full(len(fit), 1.0 / len(fit))
        self.scores = costs.tolist()
        self.generation += 1
        self.elites = self.population[: self.elite_num]  # kept: already measured, never re-proposed
        children: list[Config] = []
        attempts = 0
        while len(children) < self.pop_size - self.elite_num and attempts < 50 * self.pop_size:
            attempts += 1
            i, j = self.rng.choice(len(self.population), size=2, p=probs)
            p1, p2 = self.population[i], self.population[j]
            self._extra: dict = {}  # what the hooks want remembered about this child (GA-DQN)
            a, b = self.crossover_points(p1, p2)
            child = list(p1[:a]) + list(p2[a:b]) + list(p1[b:])
            muts = self.mutate(child)
            for g, v in muts:
                child[g] = v
            genes = [g for g, _ in muts]
            child_t = tuple(child)
            if self._claim(child_t):
                children.append(child_t)
                self.children_meta[child_t] = {"parents": (p1, p2), "points": (a, b), "genes": list(genes),
                                               "parent_costs": (self.measured[p1], self.measured[p2]),
                                               **self._extra}
        if not children:
            c = self._fresh_random()
            if c is None:
                return False
            children.append(c)
        self.pending.extend(children)
        return True

    def crossover_points(self, p1: Config, p2: Config) -> tuple[int, int]:
        """Two cut points 0 <= a <= b <= genes: the child takes p2's genes in [a, b)."""
        a, b = sorted(int(x) for x in self.rng.integers(0, len(self.card) + 1, size=2))
        return a, b

    def mutation_genes(self, child: Sequence[int]) -> list[int]:
        """Genes to re-draw: each with probability mutation_prob."""
        return [int(g) for g in np.flatnonzero(self.rng.random(len(self.card)) < self.mutation_prob)]

    def mutate(self, child: Sequence[int]) -> list[tuple[int, int]]:
        """(gene, new value) pairs: the mutation_genes, each given a random value."""
        return [(g, int(self.rng.integers(self.card[g]))) for g in self.mutation_genes(child)]


class XGBTuner(Tuner):
    """AutoTVM-style model-based tuner: an XGBoost regressor of log cost over the genes
    (refitted on everything measured every `plan_size` new measurements; random configs
    until the first fit) ranks `n_candidates` candidates — mutations of the 16 best
    measured configs and random ones — and the best-ranked unseen ones are proposed; an
    `epsilon` share of each batch is random (exploration)."""

    name = "xgb"

    def __init__(self, space: TuningSpace, seed: int = 0, n_candidates: int = 256, epsilon: float = 0.1,
                 plan_size: int = 32, num_rounds: int = 40):
        super().__init__(space, seed)
        import xgboost  # noqa: F401 - fail early with ImportError where it is missing

        self.n_candidates, self.epsilon, self.plan_size, self.num_rounds = n_candidates, epsilon, plan_size, num_rounds
        self.model = None
        self.xs: list[Config] = []
        self.ys: list[float] = []
        self._trained_on = 0  # the model is refitted every plan_size new measurements

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        super().update(configs, costs)
        for c, cost in zip(configs, costs):
            if np.isfinite(cost):
                self.xs.append(tuple(c))
                self.ys.append(float(cost))
        if len(self.xs) >= self.plan_size and len(self.xs) - self._trained_on >= self.plan_size:
            import xgboost as xgb

            self._trained_on = len(self.xs)

            data = xgb.DMatrix(np.array(self.xs, dtype=np.float32), label=np.log(np.array(self.ys)))
            params = {"max_depth": 6, "eta": 0.3, "objective": "reg:squarederror", "seed": self.seed,
                      "nthread": 1, "verbosity": 0}
            self.model = xgb.train(params, data, num_boost_round=self.num_rounds)

    def next_batch(self, n: int) -> list[Config]:
        if self.model is None:
            return RandomTuner.next_batch(self, n)  # type: ignore[arg-type]
        n_eps = int(round(n * self.epsilon))
        cands: set[Config] = set()
        top = [c for c, _ in sorted(zip(self.xs, self.ys), key=lambda t: t[1])[:16]]
        for _ in range(self.n_candidates):
            if top and self.rng.random() < 0.8:
                c = list(top[int(self.rng.integers(len(top)))])
                for g in self.rng.choice(len(self.card), size=int(self.rng.integers(1, 4)), replace=False):
                    c[g] = int(self.rng.integers(self.card[g]))
                c = tuple(c)
            else:
                c = self._random()
            if c not in self.visited:
                cands.add(c)
        ordered = sorted(cands)
        out: list[Config] = []
        if ordered:
            import xgboost as xgb

            pred = self.model.predict(xgb.DMatrix(np.array(ordered, dtype=np.float32)))
            for k in np.argsort(pred, kind="stable"):
                if len(out) >= n - n_eps:
                    break
                if self._claim(ordered[k]):
                    out.append(ordered[k])
        while len(out) < n:
            c = self._fresh_random()
            if c is None:
                break
            out.append(c)
        return out


TunerFactory = Callable[..., Tuner]
"""`factory(space, seed, **params)` -> a Tuner."""

_registered: dict[str, TunerFactory] = {}

# Tuners that live on the learning side and the package whose import registers them.
LEARNED_TUNERS = {"gadqn": "tuner_agents"}


def register_tuner(name: str, factory: TunerFactory) -> None:
    """Makes `make_tuner(name, ...)` call `factory(space, seed, **params)`: how the learned
    tuners (`tuner_agents`, TensorFlow) plug into this framework, which imports none."""
    _registered[name] = factory


def registering_modules() -> tuple[str, ...]:
    """The modules whose import registered this process's learned tuners: a worker process
    imports them (`import_registering_modules`) to make the same tuners."""
    return tuple(sorted({factory.__module__ for factory in _registered.values()}))


def import_registering_modules(modules: Sequence[str]) -> None:
    """Imports `modules` (registering_modules() of the parent): a process pool's initializer."""
    for module in modules:
        importlib.import_module(module)


def make_tuner(name: str, space: TuningSpace, seed: int = 0, **params) -> Tuner:
    """A tuner by name: random, grid, ga, xgb, or a registered one (gadqn, registered by
    `import tuner_agents`; needs TensorFlow).

    Raises:
        TuningError: an unknown name, or a learned tuner whose package was not imported.
    """
    if name == "random":
        return RandomTuner(space, seed)
    if name == "grid":
        return GridTuner(space, seed)
    if name == "ga":
        return GATuner(space, seed, **params)
    if name == "xgb":
        return XGBTuner(space, seed, **params)
    if name in _registered:
        return _registered[name](space, seed, **params)
    if name in LEARNED_TUNERS:
        raise TuningError(f"tuner {name!r} is a learned tuner: `import {LEARNED_TUNERS[name]}` registers it "
                          "(rlflow tune does)")
    known = ["random", "grid", "ga", "xgb", *_registered]
    raise TuningError(f"unknown tuner {name!r}; known: {', '.join(known)}")


def run_tuner(tuner: Tuner, measure, budget: int, batch: int = 8, on_batch=None) -> list[float]:
    """Runs `tuner` for `budget` trials with `measure(configs) -> costs`; returns the
    best cost after each trial. `on_batch(trials, best)` is called after each batch."""
    curve: list[float] = []
    best = float("inf")
    while len(curve) < budget:
        configs = tuner.next_batch(min(batch, budget - len(curve)))
        if not configs:
            break
        costs = measure(configs)
        tuner.update(configs, costs)
        for c in costs:
            best = min(best, c)
            curve.append(best)
        if on_batch:
            on_batch(len(curve), best)
    return curve
