"""The trained controller acting on the real environment: a one-step lookahead over
(rule, location) candidates scored with what was learned in the dream.

At each real step, V encodes the real observation (z = mu) and h is M's state (reset at
every episode start). For every candidate rewrite c = (rule a, location l) the real
engine already gives its cost delta, i.e. its immediate reward r(c) exactly; M predicts
where rule a leads (the mixture mean z'_a, the next state h'_a and the probability
d_a that the episode ends there) and the controller's value head, trained in the dream,
values that state:

    f_a         = gamma * (1 - d_a) * V_C([z'_a, h'_a])
    score(c)    = r(c) - step_cost - detour_cost * [r(c) <= 0] + (f_a - mean over the valid rules b of f_b)
    score(stop) = 0

A rewrite that saves runtime always scores above stop (at least 1e-6 x its saving), so the agent
never stops while one is left; the learned terms decide which rewrite comes first and
whether a rewrite that saves nothing (a detour) is worth taking. The learned future
term is centred: it only says how much better one successor is than
the others (a value head trained in an imperfect dream is biased — on the default run it
values every state at ~+15%, so uncentred it would never stop). The agent takes the
best-scored action, stop on ties: it stops when no rewrite's real reward plus learned
advantage over the other successors pays for a step, and it takes a rewrite that loses
runtime now only when the model values where it leads well above the rest — by more
than `detour_cost`, the charge for a rewrite that does not reduce the runtime (a
hand-set threshold on the learned advantage: on the default run the largest learned
advantage on a plateau is ~0.1%, and with only the step cost the agent walked plateaus
of zero-delta rewrites to the horizon). Among one rule's
locations the future term is the same (M is conditioned on the rule), so the location
is the one with the largest immediate reward — the location choice is this scoring,
not a separate head.

With `expand` = k > 0 the agent also looks one real rewrite further for its k best-scored
candidates (a cheap lookahead guided by the learned scores): the real engine applies c
and lists the candidates of the result, and c's score gains gamma * max(0, best
immediate score there). This finds rewrites that lose a little now and unlock a larger
gain next (which greedy never takes), at k engine applies + enumerations per step;
these calls are real engine work at optimisation time (counted in the real-work ledger,
never in training). With `explore`, actions are sampled from softmax(score /
temperature) instead (for collecting new real episodes in iterative training).

`greedy=False` alone (kept for callers of the old agent) is the same as explore=True.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sonnet as snt
import tensorflow as tf

from controller.policy import Controller
from worldmodel.graphs_tuple import batch_observations, graphs_tuple_signature, to_graphs_tuple


@dataclass(frozen=True)
class LookaheadConfig:
    """How learned values and real immediate rewards combine (see the module docstring).

    Attributes:
        gamma: discount of the learned value of the next state.
        step_cost: charged per rewrite (in % of the start cost, as rewards are).
        detour_cost: charged in addition for a rewrite that does not reduce the runtime.
        expand: best-scored candidates looked at one real rewrite further (0 = none).
        detour_rules: rules with the largest positive learned advantage whose
            non-improving candidates are also looked at one rewrite further (0 = none).
        detour_locations: of each such rule, the locations looked at (smallest loss first).
        temperature: of the softmax when exploring.
    """

    gamma: float = 0.99
    step_cost: float = 0.02
    detour_cost: float = 0.25
    expand: int = 4
    detour_rules: int = 3
    detour_locations: int = 8
    temperature: float = 0.5


class ControllerAgent:
    """A policy for `taso_env.env.episode.run_episode` (callable (obs, info, rng) -> action).

    After an episode, `trace` holds (step, xfer, location, score) of each action taken."""

    def __init__(self, vae, mdnrnn, controller: Controller, env, greedy: bool = True,
                 lookahead: LookaheadConfig | None = None, explore: bool | None = None):
        self.vae, self.mdnrnn, self.controller = vae, mdnrnn, controller
        self.env = env.unwrapped
        self.lookahead = lookahead or LookaheadConfig()
        self.explore = (not greedy) if explore is None else explore
        self.state = None
        self.visited: set[int] = set()  # hashes of the graphs this episode went through
        self._child_hash: dict[int, int] = {}  # candidate index -> hash of its graph (looked-at ones)
        self.trace: list[tuple[int, int, int, float]] = []
        z, h = int(mdnrnn.config.latent_dim), int(mdnrnn.config.hidden)
        self._encode = tf.function(vae.encode, input_signature=[graphs_tuple_signature()])
        self._future = tf.function(self._future_py, input_signature=[
            tf.TensorSpec([1, z], tf.float32), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([1, h], tf.float32), tf.TensorSpec([1, h], tf.float32)])

    def warm_up(self) -> None:
        """Traces the tf.functions on dummy inputs (part of loading, not of optimising)."""
        from controller.model_free import _dummy_observation

        mu, _ = self._encode(to_graphs_tuple(batch_observations([_dummy_observation()])))
        state = self.mdnrnn.initial_state(1)
        self._future(mu, tf.constant([0], tf.int32), state.hidden, state.cell)

    def _future_py(self, mu, xfers, hidden, cell):
        n = tf.shape(xfers)[0]
        state = snt.LSTMState(hidden=tf.repeat(hidden, n, axis=0), cell=tf.repeat(cell, n, axis=0))
        out, nxt = self.mdnrnn.step(tf.repeat(mu, n, axis=0), xfers, state)
        z_next = tf.reduce_sum(tf.nn.softmax(out.logits, -1)[..., None] * out.mu, axis=1)
        obs = tf.concat([z_next, nxt.hidden], axis=1)
        _, value = self.controller(obs, tf.ones([n, self.controller.config.n_actions], tf.bool))
        return (1.0 - tf.sigmoid(out.done_logit)) * value

    def future_values(self, mu: tf.Tensor, xfers: np.ndarray) -> np.ndarray:
        """(1 - d_a) * V_C([z'_a, h'_a]) for each rule a in `xfers`, from M and C only
        (uncentred, undiscounted)."""
        return self._future(mu, tf.constant(xfers, tf.int32), self.state.hidden, self.state.cell).numpy()

    def scores(self, obs: dict, info: dict) -> tuple[list[tuple[int, int]], np.ndarray, tf.Tensor]:
        """Every valid (rule, location) of the current real graph and its score."""
        mu, _ = self._encode(to_graphs_tuple(batch_observations([obs])))
        actions, rewards, rule_of = [], [], []
        xfers = np.flatnonzero(info["xfer_mask"][:-1])
        for k, xfer in enumerate(xfers):
            for loc, c in enumerate(self.env.candidates(int(xfer))):
                actions.append((int(xfer), loc))
                rewards.append(-100.0 * c.cost_delta / info["initial_cost"])
                rule_of.append(k)
        if not actions:
            return actions, np.zeros(0), mu
        la = self.lookahead
        future = la.gamma * self.future_values(mu, xfers)
        future = future - future.mean()
        rewards = np.asarray(rewards)
        score = self._immediate(rewards) + future[np.asarray(rule_of)]
        # A rewrite that saves runtime is always worth its step: whatever the learned terms
        # say, it scores above stop (so the agent never stops short of a local optimum).
        score = np.where(rewards > 0, np.maximum(score, 1e-6 * rewards), score)
        picks = list(np.argsort(-score, kind="stable")[:la.expand])
        picks += [k for k in self._detours(future, np.asarray(rule_of), rewards) if k not in picks]
        self._child_hash = {}
        for k in picks:
            xfer, loc = actions[k]
            child = self.env.graph.apply(self.env.candidates(xfer)[loc], rules=self.env.rules)
            self._child_hash[k] = child.hash()
            if child.hash() in self.visited:  # a detour's undo: never walk in circles
                score[k] = -np.inf
                continue
            deltas = [c.cost_delta for c in child.candidates(rules=self.env.rules, model=self.env.cost_model)]
            if deltas:
                best = self._immediate(-100.0 * np.asarray(deltas) / info["initial_cost"]).max()
                score[k] += la.gamma * max(0.0, float(best))
        return actions, score, mu

    def _detours(self, advantage: np.ndarray, rule_of: np.ndarray, rewards: np.ndarray) -> list[int]:
        """Candidates (indices) worth a real look although they save nothing now: the
        non-improving locations of the `detour_rules` rules whose successors M and C value
        most above the others (positive learned advantage only), `detour_locations` per
        rule, the smallest loss first."""
        la = self.lookahead
        if la.detour_rules <= 0:
            return []
        out = []
        ranked = [k for k in np.argsort(-advantage, kind="stable") if advantage[k] > 0][:la.detour_rules]
        for k in ranked:
            locs = np.flatnonzero((rule_of == k) & (rewards <= 0))
            out += list(locs[np.argsort(-rewards[locs], kind="stable")][:la.detour_locations])
        return out

    def _immediate(self, rewards: np.ndarray) -> np.ndarray:
        """Real reward less the step charge and, for a rewrite that saves nothing, the detour charge."""
        return rewards - self.lookahead.step_cost - self.lookahead.detour_cost * (rewards <= 0)

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        if info["step"] == 0 or self.state is None:
            self.state = self.mdnrnn.initial_state(1)
            self.trace = []
            self.visited = {self.env.graph.hash()}
        stop = len(info["xfer_mask"]) - 1
        actions, score, mu = self.scores(obs, info)
        actions.insert(0, (stop, 0))  # first, so that it wins ties
        score = np.insert(score, 0, 0.0)
        if self.explore:
            p = np.exp((score - score.max()) / self.lookahead.temperature)
            k = int(rng.choice(len(score), p=p / p.sum()))
        else:
            k = int(np.argmax(score))
        xfer, loc = actions[k]
        self.trace.append((int(info["step"]), xfer, loc, float(score[k])))
        if xfer != stop:
            child = self._child_hash.get(k - 1)
            if child is None:
                child = self.env.graph.apply(self.env.candidates(xfer)[loc], rules=self.env.rules).hash()
            self.visited.add(child)
            _, self.state = self.mdnrnn.step(mu, tf.constant([xfer], tf.int32), self.state)
        return np.array([xfer, loc])
