"""GA-DQN: the genetic algorithm of `GATuner` where two deep Q-networks (TensorFlow)
choose the crossover point and the genes to mutate (docs/tuning.md).

- Crossover DQN. State: per gene, whether the two parents differ, plus both parents'
  costs relative to the best seen. Action: the first cut point (genes bucketed into at
  most `max_actions` positions); the second cut is drawn uniformly after it.
- Mutation DQN. State: per gene, its value scaled to [0, 1] and whether it equals the
  best config's. Action: a (gene, new value) pair (one output per option of every
  gene, the current values masked); k = max(1, Binomial(genes, mutation_prob)) pairs
  are picked one after another (epsilon-greedy each, one per gene).
- Reward of both: the child's relative improvement over the mean of its parents' costs
  times `reward_scale` (1000: 0.1% is 1), clipped to [-1, 1] (a failed measurement: -1). Transitions go into a replay
  buffer; after each measured batch `train_steps` minibatch updates of
  r + gamma * max_a' Q_target(s', a') (s' = the child's own state); the target network
  is synced every `target_sync` updates; epsilon decays linearly from `epsilon_start`
  to `epsilon_end` over `epsilon_decay_trials` trials.

`dqn_crossover=False` / `dqn_mutation=False` fall back to the GA's random choice (the
ablations of `rlflow tune -m experiment`). Deterministic for a seed (numpy Generator
for sampling, initial weights drawn from a seeded numpy Generator, no TensorFlow
random ops; the process-wide op-determinism switch is left alone, as it would make
every other TensorFlow user in the process refuse unseeded random ops).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from taso_env.errors import TuningError
from taso_env.tuning.space import TuningSpace
from taso_env.tuning.tuners import Config, GATuner


class DQN:
    """A small MLP Q-network with a target copy, a replay buffer and Adam (raw
    tf.Variables, no Keras: identical across Keras versions)."""

    def __init__(self, state_dim: int, n_actions: int, *, hidden: int = 64, learning_rate: float = 1e-3,
                 gamma: float = 0.5, buffer_size: int = 4096, batch_size: int = 32, target_sync: int = 25,
                 seed: int = 0):
        self.state_dim, self.n_actions = state_dim, n_actions
        self.gamma, self.batch_size, self.target_sync = gamma, batch_size, target_sync
        init = np.random.default_rng(seed)

        def layer(n_in, n_out):
            w = init.normal(0.0, np.sqrt(2.0 / (n_in + n_out)), size=(n_in, n_out)).astype(np.float32)
            return [tf.Variable(w), tf.Variable(np.zeros(n_out, np.float32))]

        self.params = layer(state_dim, hidden) + layer(hidden, hidden) + layer(hidden, n_actions)
        self.target = [tf.Variable(p.numpy()) for p in self.params]
        self.buffer: deque = deque(maxlen=buffer_size)
        self.lr = learning_rate
        self._m = [tf.Variable(tf.zeros_like(p)) for p in self.params]
        self._v = [tf.Variable(tf.zeros_like(p)) for p in self.params]
        self._t = tf.Variable(0.0)
        self.updates = 0
        self.last_loss = float("nan")

    @staticmethod
    def _forward(params, x):
        h = tf.nn.relu(tf.matmul(x, params[0]) + params[1])
        h = tf.nn.relu(tf.matmul(h, params[2]) + params[3])
        return tf.matmul(h, params[4]) + params[5]

    def q_values(self, states: np.ndarray) -> np.ndarray:
        return self._forward(self.params, tf.constant(np.atleast_2d(states), tf.float32)).numpy()

    def remember(self, state, action: int, reward: float, next_state) -> None:
        self.buffer.append((np.asarray(state, np.float32), int(action), float(reward),
                            np.asarray(next_state, np.float32)))

    @tf.function(reduce_retracing=True)
    def _train(self, s, a, r, s2):
        q_next = tf.reduce_max(self._forward(self.target, s2), axis=1)
        y = r + self.gamma * q_next
        with tf.GradientTape() as tape:
            q = tf.reduce_sum(self._forward(self.params, s) * tf.one_hot(a, self.n_actions), axis=1)
            loss = tf.reduce_mean(tf.square(y - q))
        grads = tape.gradient(loss, self.params)
        self._t.assign_add(1.0)
        b1, b2 = 0.9, 0.999
        for p, g, m, v in zip(self.params, grads, self._m, self._v):
            m.assign(b1 * m + (1 - b1) * g)
            v.assign(b2 * v + (1 - b2) * g * g)
            mh = m / (1 - b1 ** self._t)
            vh = v / (1 - b2 ** self._t)
            p.assign_sub(self.lr * mh / (tf.sqrt(vh) + 1e-8))
        return loss

    def train(self, rng: np.random.Generator, steps: int) -> None:
        if len(self.buffer) < self.batch_size:
            return
        for _ in range(steps):
            idx = rng.integers(len(self.buffer), size=self.batch_size)
            batch = [self.buffer[i] for i in idx]
            s = tf.constant(np.stack([b[0] for b in batch]))
            a = tf.constant(np.array([b[1] for b in batch], np.int32))
            r = tf.constant(np.array([b[2] for b in batch], np.float32))
            s2 = tf.constant(np.stack([b[3] for b in batch]))
            self.last_loss = float(self._train(s, a, r, s2))
            self.updates += 1
            if self.updates % self.target_sync == 0:
                for t, p in zip(self.target, self.params):
                    t.assign(p)


class GADQNTuner(GATuner):
    """GA-DQN (see the module docstring); GA parameters as GATuner."""

    name = "gadqn"

    def __init__(self, space: TuningSpace, seed: int = 0, pop_size: int = 16, elite_num: int = 3,
                 mutation_prob: float | None = None, init: Sequence[Sequence[int]] = (), *, dqn_crossover: bool = True,
                 dqn_mutation: bool = True, hidden: int = 64, learning_rate: float = 1e-3, gamma: float = 0.5,
                 epsilon_start: float = 1.0, epsilon_end: float = 0.05, epsilon_decay_trials: int = 300,
                 buffer_size: int = 4096, batch_size: int = 32, train_steps: int = 4, target_sync: int = 25,
                 max_actions: int = 64, reward_scale: float = 1000.0):
        if not 0 <= epsilon_end <= epsilon_start <= 1:
            raise TuningError(f"GA-DQN needs 0 <= epsilon_end <= epsilon_start <= 1, got {epsilon_end}, "
                              f"{epsilon_start}")
        if epsilon_decay_trials < 1 or train_steps < 0 or max_actions < 1:
            raise TuningError("GA-DQN needs epsilon_decay_trials >= 1, train_steps >= 0 and max_actions >= 1")
        super().__init__(space, seed, pop_size, elite_num, mutation_prob, init)
        g = len(self.card)
        self.dqn_crossover, self.dqn_mutation = dqn_crossover, dqn_mutation
        self.eps = (epsilon_start, epsilon_end, epsilon_decay_trials)
        self.train_steps = train_steps
        self.reward_scale = reward_scale
        self.n_cut = min(g + 1, max_actions)  # cut-point buckets
        kw = dict(hidden=hidden, learning_rate=learning_rate, gamma=gamma, buffer_size=buffer_size,
                  batch_size=batch_size, target_sync=target_sync)
        self.cross_net = DQN(g + 2, self.n_cut, seed=seed * 2 + 1, **kw) if dqn_crossover else None
        self.offsets = np.concatenate([[0], np.cumsum(self.card)]).astype(np.int64)  # (gene, value) -> action
        self.mut_net = DQN(2 * g, int(self.offsets[-1]), seed=seed * 2 + 2, **kw) if dqn_mutation else None
        self.rewards: list[float] = []

    # -- helpers ---------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        start, end, trials = self.eps
        frac = min(1.0, len(self.history) / trials)
        return start + (end - start) * frac

    def _rel(self, cost: float) -> float:
        if not np.isfinite(cost) or not np.isfinite(self.best_cost) or self.best_cost <= 0:
            return 2.0
        return float(min(cost / self.best_cost, 2.0))

    def _cross_state(self, p1: Config, p2: Config) -> np.ndarray:
        differ = (np.array(p1) != np.array(p2)).astype(np.float32)
        return np.concatenate([differ, [self._rel(self.measured[p1]) - 1, self._rel(self.measured[p2]) - 1]])

    def _mut_state(self, child: Sequence[int]) -> np.ndarray:
        c = np.asarray(child, np.float32)
        scaled = c / np.maximum(self.card - 1, 1)
        best = np.asarray(self.best_config if self.best_config is not None else child)
        return np.concatenate([scaled, (c == best).astype(np.float32)]).astype(np.float32)

    # -- GA hooks --------------------------------------------------------------------
    def crossover_points(self, p1: Config, p2: Config) -> tuple[int, int]:
        if self.cross_net is None:
            return super().crossover_points(p1, p2)
        g = len(self.card)
        state = self._cross_state(p1, p2)
        if self.rng.random() < self.epsilon:
            action = int(self.rng.integers(self.n_cut))
        else:
            action = int(np.argmax(self.cross_net.q_values(state)[0]))
        a = int(round(action * g / max(self.n_cut - 1, 1))) if self.n_cut <= g else action
        a = min(a, g)
        b = int(self.rng.integers(a, g + 1))
        self._extra["cross"] = (state, action)
        return a, b

    def mutate(self, child: Sequence[int]) -> list[tuple[int, int]]:
        if self.mut_net is None:
            return super().mutate(child)
        g = len(self.card)
        k = min(g, max(1, int(self.rng.binomial(g, self.mutation_prob))))
        state = self._mut_state(child)
        q = self.mut_net.q_values(state)[0].astype(np.float64)
        q[self.offsets[:-1] + np.asarray(child)] = -np.inf  # "mutating" to the current value
        muts: list[tuple[int, int]] = []
        actions: list[int] = []
        for _ in range(k):
            if self.rng.random() < self.epsilon:
                gene = int(self.rng.integers(g))
                value = int(self.rng.integers(self.card[gene]))
                action = int(self.offsets[gene] + value)
            else:
                action = int(np.argmax(q))
                if not np.isfinite(q[action]):
                    break
                gene = int(np.searchsorted(self.offsets, action, side="right") - 1)
                value = action - int(self.offsets[gene])
            if any(m[0] == gene for m in muts):
                continue
            muts.append((gene, value))
            actions.append(action)
            q[self.offsets[gene]:self.offsets[gene + 1]] = -np.inf  # one value per gene
        self._extra["mut"] = (state, actions)
        return muts

    # -- learning --------------------------------------------------------------------
    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        super().update(configs, costs)
        for c, cost in zip(configs, costs):
            meta = self.children_meta.get(tuple(c))
            if not meta:
                continue
            ref = float(np.mean(meta["parent_costs"]))
            reward = -1.0 if not np.isfinite(cost) else float(np.clip(self.reward_scale * (ref - cost) / ref, -1, 1))
            self.rewards.append(reward)
            if self.cross_net is not None and "cross" in meta:
                state, action = meta["cross"]
                self.cross_net.remember(state, action, reward, self._cross_state(tuple(c), tuple(c)))
            if self.mut_net is not None and "mut" in meta:
                state, actions = meta["mut"]
                nxt = self._mut_state(c)
                for action in actions:
                    self.mut_net.remember(state, action, reward, nxt)
        for net in (self.cross_net, self.mut_net):
            if net is not None:
                net.train(self.rng, self.train_steps)
