"""GA-DQN: a genetic algorithm whose crossover segment and mutations are chosen by two
deep Q-networks (TensorFlow) (docs/tuning.md).

Each generation keeps the GA's elites and selection (`GATuner`: the best `pop_size`
measured configs, parents drawn with probability proportional to 1 / cost). Every new
child is made one of two ways, so that its measured cost rewards exactly the choice that
made it:

- **Crossover child** (probability `crossover_rate`): parent p1 with the genes of
  parent p2 in a segment [a, b). The crossover DQN picks the segment among the
  n(n + 1)/2 segments of `max_actions` = n gene buckets. State: per bucket, the share of
  genes in which the parents differ and the mutation DQN's estimate of what taking p2's
  values there gains (below), plus both parents' costs relative to the best.
- **Mutant child**: p1 with up to k = max(1, Binomial(genes, mutation_prob)) genes
  switched. The mutation DQN picks the (gene, new value) pairs, one per gene,
  epsilon-greedy each, and stops early when no further switch is predicted to save
  anything; a count-based bonus (`exploration_bonus` / sqrt(1 + times tried)) keeps
  untried options in play. Its Q-network (`SwitchCostNet`) gives every option a cost
  score y(s)[g, v] and values switching gene g from its current value u to v as
  y[g, u] - y[g, v] (what the switch saves). A mutant's Q is the sum over its switches,
  so one measured child trains every switch it made with the right share; a crossover
  child is also relabelled as the switches that turn either parent into it, so every
  child trains the mutation DQN.

Reward (both DQNs): what the child saves over its reference — p1 (the child is p1 plus
the segment or the switches) — relative to the best cost when it was made, times
`reward_scale` (10: 1% is 0.1), clipped to +-`reward_clip` (a failed measurement: the
negative clip). Transitions go into a replay buffer of the `buffer_size` most recent
(the early, large rewards would otherwise dominate the loss late in the run); after each
measured batch `train_steps` minibatch updates (squared error) towards
r + gamma * max Q_target(s'), with
s' the child's own state (for the mutation DQN, max over single switches, at least 0:
"switch nothing"); the target network is synced every `target_sync` updates; epsilon
decays linearly from `epsilon_start` to `epsilon_end` over `epsilon_decay_trials`.

`dqn_crossover=False` / `dqn_mutation=False` replace a DQN by the GA's random choice
(random segment; random genes, random values) in the same scheme — the ablations of
`rlflow tune -m experiment`. Deterministic for a seed (numpy Generator for sampling,
initial weights from a seeded numpy Generator, no TensorFlow random ops; the
process-wide op-determinism switch is left alone, as it would make every other
TensorFlow user in the process refuse unseeded random ops).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from taso_env.errors import TuningError
from taso_env.tuning.space import TuningSpace
from taso_env.tuning.tuners import Config, GATuner


def option_features(space: TuningSpace) -> np.ndarray:
    """One row per (gene, option): the knob's kind and every option field (cuDNN
    algorithm, math type, fused call, epilogue fusion, threads, items per thread) one-hot
    over the values it takes in the space."""
    kinds = sorted({k.kind for k in space.knobs})
    values: dict[str, list[int]] = {}
    for k in space.knobs:
        for o in range(k.size):
            for key, v in k.options[o]:
                values.setdefault(key, [])
                if v not in values[key]:
                    values[key].append(v)
    columns = [("kind", kd) for kd in kinds] + [(key, v) for key in sorted(values) for v in sorted(values[key])]
    index = {c: i for i, c in enumerate(columns)}
    rows = []
    for k in space.knobs:
        for o in range(k.size):
            x = np.zeros(len(columns), np.float32)
            x[index[("kind", k.kind)]] = 1.0
            for key, v in k.options[o]:
                x[index[(key, v)]] = 1.0
            rows.append(x)
    return np.stack(rows)


def _layer(init: np.random.Generator, n_in: int, n_out: int, scale: float = 1.0) -> list[tf.Variable]:
    w = init.normal(0.0, scale * np.sqrt(2.0 / (n_in + n_out)), size=(n_in, n_out)).astype(np.float32)
    return [tf.Variable(w), tf.Variable(np.zeros(n_out, np.float32))]


def _mlp(params, x):
    h = tf.nn.relu(tf.matmul(x, params[0]) + params[1])
    h = tf.nn.relu(tf.matmul(h, params[2]) + params[3])
    return tf.matmul(h, params[4]) + params[5]


class StateMLP:
    """Q-network of the crossover DQN: an MLP over the state, one output per action;
    the value of a next state is its best action's."""

    def __init__(self, state_dim: int, n_actions: int, hidden: int, init: np.random.Generator):
        self.n_out = n_actions
        self.max_action_size = 1
        self.params = (_layer(init, state_dim, hidden) + _layer(init, hidden, hidden)
                       + _layer(init, hidden, n_actions, 0.1))

    def forward(self, params, states):
        return _mlp(params, states)

    def penalty(self, params):
        return 0.0

    def next_value(self, y, states):
        return tf.reduce_max(y, axis=1)


class SwitchCostNet:
    """Q-network of the mutation DQN. The state is a config as the output index of each
    gene's current value (the gene's offset + its value); the network gives every option
    a cost score y(s)[g, v] and the Q of switching gene g from its current value u to v
    is y[g, u] - y[g, v].

    y is built the way the executor spends time: base[g, v] = a shared MLP over the
    option's features (option_features) and a learned embedding of its gene, times a
    learned scale per gene, plus a residual per option (L2-penalised, so options seen in
    few transitions lean on the shared part); a conv option that does not fold its epilogue also pays the
    epilogue ops' current base scores, and an epilogue op's own scores count only while
    its conv does not fold it (space.active). So a switch's Q is exact for any space
    whose cost is the executor's (records.py) once the base scores are learned. The
    value of a next state is its best single switch, at least 0 (switch nothing)."""

    def __init__(self, space: TuningSpace, hidden: int, init: np.random.Generator, gene_dim: int = 4,
                 residual_l2: float = 0.0):
        card = space.cardinalities
        self.n_out = int(card.sum())
        self.n_genes = len(card)
        self.max_action_size = 2 * self.n_genes  # a switch of every gene
        self.gene_of = tf.constant(np.repeat(np.arange(self.n_genes), card).astype(np.int32))
        self.features = tf.constant(option_features(space))
        fuse = np.concatenate([[k.option(o).get("fuse", -1) == 1 for o in range(k.size)] for k in space.knobs])
        is_conv = np.concatenate([[k.kind == "conv"] * k.size for k in space.knobs])
        self.fuse = tf.constant(fuse.astype(np.float32))
        self.pays_epilogue = tf.constant((is_conv & ~fuse).astype(np.float32))
        absorb = np.zeros((self.n_genes, self.n_genes), np.float32)  # [epilogue gene, its conv gene]
        for i, k in enumerate(space.knobs):
            if k.absorbed_by >= 0:
                absorb[i, k.absorbed_by] = 1.0
        self.absorb = tf.constant(absorb)
        d = int(self.features.shape[1]) + gene_dim
        self.params = (_layer(init, d, hidden) + _layer(init, hidden, hidden) + _layer(init, hidden, 1, 0.1)
                       + [tf.Variable(np.zeros(self.n_genes, np.float32)),
                          tf.Variable(init.normal(0, 0.1, (self.n_genes, gene_dim)).astype(np.float32)),
                          tf.Variable(np.zeros(self.n_out, np.float32))])
        self.residual_l2 = residual_l2

    def forward(self, params, states):
        x = tf.concat([self.features, tf.gather(params[7], self.gene_of)], axis=1)
        base = tf.exp(tf.gather(params[6], self.gene_of)) * _mlp(params, x)[:, 0] + params[8]
        current = tf.gather(base, states)  # base score of each gene's current value
        folded = tf.matmul(tf.gather(self.fuse, states), self.absorb, transpose_b=True)
        active = 1.0 - folded  # an epilogue op counts unless its conv folds it
        epilogue = tf.matmul(current, self.absorb)  # per conv gene: its epilogue ops' current scores
        return (base[None, :] * tf.gather(active, self.gene_of, axis=1)
                + self.pays_epilogue[None, :] * tf.gather(epilogue, self.gene_of, axis=1))

    def penalty(self, params):
        return self.residual_l2 * tf.reduce_sum(tf.square(params[8]))

    def next_value(self, y, states):
        current = tf.gather(y, states, batch_dims=1)
        lowest = tf.transpose(tf.math.unsorted_segment_min(tf.transpose(y), self.gene_of, self.n_genes))
        return tf.maximum(tf.reduce_max(current - lowest, axis=1), 0.0)


class DQN:
    """Deep Q-learning around a Q-network (`StateMLP` or `SwitchCostNet`): a target
    copy, a replay buffer and Adam (raw tf.Variables, no Keras: identical across Keras
    versions). A transition's action is a signed set of network outputs, Q(s, action) =
    sum(sign * y(s)[i]): one output with sign +1 for an ordinary action, +y[g, u] and
    -y[g, v] per switch for a mutation. Minibatch updates towards r + gamma *
    next_value(y_target(s'), s'); the target is synced every `target_sync` updates."""

    def __init__(self, net, *, learning_rate: float = 1e-3, gamma: float = 0.5, buffer_size: int = 4096,
                 batch_size: int = 32, target_sync: int = 25):
        self.net = net
        self.params = net.params
        self.gamma, self.batch_size, self.target_sync = gamma, batch_size, target_sync
        self.target = [tf.Variable(p.numpy()) for p in self.params]
        self.buffer: deque = deque(maxlen=buffer_size)
        self.lr = learning_rate
        self._m = [tf.Variable(tf.zeros_like(p)) for p in self.params]
        self._v = [tf.Variable(tf.zeros_like(p)) for p in self.params]
        self._t = tf.Variable(0.0)
        self.updates = 0
        self.last_loss = float("nan")

    def outputs(self, states: np.ndarray) -> np.ndarray:
        """y(s) for a batch of states (for a plain action, its Q-value)."""
        return self.net.forward(self.params, tf.constant(np.atleast_2d(states))).numpy()

    def remember(self, state, action: Sequence[tuple[int, float]], reward: float, next_state) -> None:
        """`action`: (output index, sign) pairs, stored padded to the network's widest
        action (fixed, so the training function is traced once)."""
        idx = np.zeros(self.net.max_action_size, np.int32)
        sign = np.zeros(self.net.max_action_size, np.float32)
        for j, (out, sg) in enumerate(action):
            idx[j], sign[j] = out, sg
        self.buffer.append((np.asarray(state), idx, sign, float(reward), np.asarray(next_state)))

    def _step(self, s, idx, sign, r, s2):
        y_target = r + self.gamma * self.net.next_value(self.net.forward(self.target, s2), s2)
        with tf.GradientTape() as tape:
            q = tf.reduce_sum(tf.gather(self.net.forward(self.params, s), idx, batch_dims=1) * sign, axis=1)
            loss = tf.reduce_mean(tf.square(y_target - q)) + self.net.penalty(self.params)
        grads = tape.gradient(loss, self.params)
        self._t.assign_add(1.0)
        b1, b2 = 0.9, 0.999
        for p, g, m, v in zip(self.params, grads, self._m, self._v):
            g = tf.convert_to_tensor(g)  # a gathered parameter's gradient comes as IndexedSlices
            m.assign(b1 * m + (1 - b1) * g)
            v.assign(b2 * v + (1 - b2) * g * g)
            mh = m / (1 - b1 ** self._t)
            vh = v / (1 - b2 ** self._t)
            p.assign_sub(self.lr * mh / (tf.sqrt(vh) + 1e-8))
        if tf.equal(tf.math.floormod(self._t, float(self.target_sync)), 0.0):
            for t, p in zip(self.target, self.params):
                t.assign(p)
        return loss

    @tf.function(reduce_retracing=True)
    def _train(self, s, idx, sign, r, s2):
        """len(r) minibatch updates in one call (tensors stacked on a leading axis)."""
        loss = tf.constant(0.0)
        for k in tf.range(tf.shape(r)[0]):
            loss = self._step(s[k], idx[k], sign[k], r[k], s2[k])
        return loss

    def train(self, rng: np.random.Generator, steps: int) -> None:
        if len(self.buffer) < self.batch_size or steps <= 0:
            return
        pick = rng.integers(len(self.buffer), size=(steps, self.batch_size))
        s, idx, sign, r, s2 = (np.stack([[self.buffer[i][field] for i in row] for row in pick]) for field in range(5))
        self.last_loss = float(self._train(tf.constant(s), tf.constant(idx), tf.constant(sign),
                                           tf.constant(r.astype(np.float32)), tf.constant(s2)))
        self.updates += steps


class GADQNTuner(GATuner):
    """GA-DQN (see the module docstring); selection and elitism as GATuner."""

    name = "gadqn"

    def __init__(self, space: TuningSpace, seed: int = 0, pop_size: int = 8, elite_num: int = 2,
                 mutation_prob: float | None = None, init: Sequence[Sequence[int]] = (), *, dqn_crossover: bool = True,
                 dqn_mutation: bool = True, crossover_rate: float = 0.25, hidden: int = 64,
                 learning_rate: float = 3e-3, gamma: float = 0.1, epsilon_start: float = 1.0,
                 epsilon_end: float = 0.05, epsilon_decay_trials: int = 100, buffer_size: int = 256,
                 batch_size: int = 64, train_steps: int = 64, target_sync: int = 25, max_actions: int = 16,
                 reward_scale: float = 10.0, reward_clip: float = 100.0, exploration_bonus: float = 0.2,
                 gene_dim: int = 4, residual_l2: float = 1e-3):
        if not 0 <= epsilon_end <= epsilon_start <= 1:
            raise TuningError(f"GA-DQN needs 0 <= epsilon_end <= epsilon_start <= 1, got {epsilon_end}, "
                              f"{epsilon_start}")
        if epsilon_decay_trials < 1 or train_steps < 0 or max_actions < 1 or not 0 <= crossover_rate <= 1:
            raise TuningError("GA-DQN needs epsilon_decay_trials >= 1, train_steps >= 0, max_actions >= 1 and "
                              "crossover_rate in [0, 1]")
        if mutation_prob is None:
            mutation_prob = 0.05
        super().__init__(space, seed, pop_size, elite_num, mutation_prob, init)
        g = len(self.card)
        self.dqn_crossover, self.dqn_mutation = dqn_crossover, dqn_mutation
        self.crossover_rate = crossover_rate
        self.eps = (epsilon_start, epsilon_end, epsilon_decay_trials)
        self.train_steps = train_steps
        self.reward_scale, self.reward_clip = reward_scale, reward_clip
        self.n_buckets = min(g, max_actions)
        self.bucket_edges = np.round(np.linspace(0, g, self.n_buckets + 1)).astype(np.int64)
        self.segments = [(a, b) for a in range(self.n_buckets) for b in range(a + 1, self.n_buckets + 1)]
        kw = dict(learning_rate=learning_rate, gamma=gamma, buffer_size=buffer_size, batch_size=batch_size,
                  target_sync=target_sync)
        self.offsets = np.concatenate([[0], np.cumsum(self.card)]).astype(np.int64)  # (gene, value) -> output
        self.gene_of = np.repeat(np.arange(g), self.card)
        self.cross_net = (DQN(StateMLP(2 * self.n_buckets + 2, len(self.segments), hidden,
                                       np.random.default_rng(seed * 2 + 1)), **kw) if dqn_crossover else None)
        self.mut_net = (DQN(SwitchCostNet(space, hidden, np.random.default_rng(seed * 2 + 2), gene_dim=gene_dim,
                                          residual_l2=residual_l2), **kw) if dqn_mutation else None)
        self.exploration_bonus = exploration_bonus
        self.tried = np.zeros(int(self.offsets[-1]))  # transitions that switched from or to each option
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

    def _state(self, config: Sequence[int]) -> np.ndarray:
        """The mutation DQN's state: the output index of each gene's current value."""
        return (self.offsets[:-1] + np.asarray(config, np.int64)).astype(np.int32)

    def switch_gains(self, config: Sequence[int]) -> np.ndarray:
        """The mutation DQN's Q of every single switch from `config` (per output; the
        current values 0)."""
        state = self._state(config)
        y = self.mut_net.outputs(state)[0].astype(np.float64)
        return y[state][self.gene_of] - y

    def _cross_state(self, p1: Config, p2: Config) -> np.ndarray:
        a, b = np.asarray(p1), np.asarray(p2)
        differ = (a != b).astype(np.float64)
        gain = np.zeros(len(a))
        if self.mut_net is not None and differ.any():
            gains = self.switch_gains(p1)
            idx = np.flatnonzero(differ)
            gain[idx] = gains[self.offsets[idx] + b[idx]] / self.reward_scale
        e = self.bucket_edges
        share = np.array([differ[e[i]:e[i + 1]].mean() for i in range(self.n_buckets)])
        bucket_gain = np.array([gain[e[i]:e[i + 1]].sum() for i in range(self.n_buckets)])
        return np.concatenate([share, bucket_gain,
                               [self._rel(self.measured[p1]) - 1, self._rel(self.measured[p2]) - 1]]).astype(np.float32)

    # -- GA hooks: a child is either a crossover child or a mutant of p1 ---------------
    def crossover_points(self, p1: Config, p2: Config) -> tuple[int, int]:
        if self.rng.random() >= self.crossover_rate:
            self._extra["kind"] = "mutant"
            return 0, 0
        self._extra["kind"] = "crossover"
        if self.cross_net is None:
            return super().crossover_points(p1, p2)
        state = self._cross_state(p1, p2)
        if self.rng.random() < self.epsilon:
            action = int(self.rng.integers(len(self.segments)))
        else:
            action = int(np.argmax(self.cross_net.outputs(state)[0]))
        a, b = self.segments[action]
        self._extra["cross"] = (state, action)
        return int(self.bucket_edges[a]), int(self.bucket_edges[b])

    def mutate(self, child: Sequence[int]) -> list[tuple[int, int]]:
        if self._extra.get("kind") != "mutant":
            return []
        g = len(self.card)
        k = min(g, max(1, int(self.rng.binomial(g, self.mutation_prob))))
        if self.mut_net is None:
            genes = self.rng.choice(g, size=k, replace=False)
            return [(int(x), int(self.rng.integers(self.card[x]))) for x in genes]
        gains = self.switch_gains(child)
        current = self._state(child)
        if self.exploration_bonus > 0:  # optimism for options seldom tried (count-based, UCB-like)
            untried = 1.0 / np.sqrt(1.0 + self.tried)
            gains += self.exploration_bonus * (untried[current][self.gene_of] + untried) / 2
        gains[current] = -np.inf  # "switching" to the current value
        muts: list[tuple[int, int]] = []
        for _ in range(k):
            if self.rng.random() < self.epsilon:
                gene = int(self.rng.integers(g))
                if any(m[0] == gene for m in muts):
                    continue
                value = int(self.rng.integers(self.card[gene]))
                if value == child[gene]:
                    if self.card[gene] == 1:
                        continue
                    value = (value + 1 + int(self.rng.integers(self.card[gene] - 1))) % self.card[gene]
            else:
                action = int(np.argmax(gains))
                if not np.isfinite(gains[action]) or (muts and gains[action] <= 0):
                    break  # switching nothing more is worth more (Q = 0) than a switch predicted to lose
                gene = int(self.gene_of[action])
                value = action - int(self.offsets[gene])
            muts.append((gene, value))
            gains[self.offsets[gene]:self.offsets[gene + 1]] = -np.inf  # one switch per gene
        return muts

    # -- learning --------------------------------------------------------------------
    def _reward(self, ref: float, cost: float, scale: float) -> float:
        if not np.isfinite(cost) or not np.isfinite(ref):
            return -self.reward_clip
        return float(np.clip(self.reward_scale * (ref - cost) / scale, -self.reward_clip, self.reward_clip))

    def _switches(self, frm: Config, to: Config) -> list[tuple[int, float]]:
        """The mutation DQN's action that turns `frm` into `to`: +y[g, from], -y[g, to]
        for every gene that differs."""
        genes = np.flatnonzero(np.asarray(frm) != np.asarray(to))
        return ([(int(self.offsets[g] + frm[g]), 1.0) for g in genes]
                + [(int(self.offsets[g] + to[g]), -1.0) for g in genes])

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        ref_best = self.best_cost
        super().update(configs, costs)
        for c, cost in zip(configs, costs):
            c = tuple(int(x) for x in c)
            meta = self.children_meta.get(c)
            if not meta or "kind" not in meta:
                continue
            p1, p2 = meta["parents"]
            c1, c2 = meta["parent_costs"]
            scale = ref_best if np.isfinite(ref_best) and ref_best > 0 else c1
            reward = self._reward(c1, cost, scale)  # the child is p1 plus a segment of p2, or plus switches
            self.rewards.append(reward)
            if self.cross_net is not None and "cross" in meta:
                state, action = meta["cross"]
                self.cross_net.remember(state, [(action, 1.0)], reward, self._cross_state(c, c))
            if self.mut_net is not None:
                # A crossover child is also a set of switches from either parent: relabelled,
                # every child teaches the mutation DQN (p2's transition only for crossovers).
                sources = [(p1, reward)] + ([(p2, self._reward(c2, cost, scale))] if meta["kind"] == "crossover"
                                            else [])
                for parent, r in sources:
                    action = self._switches(parent, c)
                    if action:
                        for i, _ in action:
                            self.tried[i] += 1
                        self.mut_net.remember(self._state(parent), action, r, self._state(c))
        for net in (self.cross_net, self.mut_net):
            if net is not None:
                net.train(self.rng, self.train_steps)
