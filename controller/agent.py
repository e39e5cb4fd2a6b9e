"""The trained controller acting on the real environment: a lookahead over (rule,
location) candidates, guided by the world model and verified by the real engine.

Where the learned terms are needed, V encodes the real graph (z = mu) and M starts from
its initial state h0, as at an episode's start: M is asked where a rule leads from this
graph, not from the episode's history (on the ten evaluation graphs of 2026-11-26 the
same graphs as with M tracking every step of the episode, in about half the time). For every
candidate rewrite c = (rule a, location l) the real engine already gives its cost delta,
i.e. its immediate reward r(c) exactly. Learned terms (M and the controller C):

    f_a         = gamma * (1 - d_a) * V_C([z'_a, h'_a])     C's value of where rule a leads
                  (z'_a, h'_a: M's predicted next state; d_a: M's done probability)
    u_a         = r^_a + gamma * max(0, max_b r^_b | after a)  M's predicted two-step return
                  (r^: M's reward head; b over the `unlock_rules` rules M deems likeliest
                  valid after a)

    score(c)    = r(c) - step_cost - detour_cost * [r(c) <= 0]
                  + value_weight * (f_a - mean over the valid rules b of f_b)
    score(stop) = 0

Then the real engine looks one rewrite further for two sets of candidates — c's score
gains gamma * max(0, best immediate score in c's successor), the successor scored by
`taso_env.engine.search.successors` (only its matches near the rewrite enumerated):
  - while some rewrite saves runtime, none by default (`improving_lookahead`); optionally
    the best-scored and its rivals (improving rewrites of some of its ops), or the
    `expand` best; exploring, the `expand` best;
  - at a local optimum of the real rewards (no rewrite saves runtime;
    `detours_at_optimum_only`), detours: the non-improving locations
    (`detour_locations`, smallest loss first) of the `detour_rules` rules with the
    largest positive u_a among the rules that have such locations. A rewrite that
    loses runtime now scores below every improving one, so the top-k rarely holds one;
    M proposes which to try, the engine confirms that the loss is paid back at the next
    step (nasrnn's cost-neutral MatMul merges that let three-way merges follow). Greedy
    takes neither. Before M is asked, the rule of the detour last taken this episode is
    looked at, nearest first to where the next block's would be (`repeat_detours`): a
    valley just crossed often repeats in the next block;
    where none of M's first `detour_rules` rules pays, `detour_rounds` allows more.
  - a detour that saves nothing and that the next rewrite only brings back to even
    (a loss paid back, or a cost-neutral move; `follow_detours`) is followed one
    rewrite further: its successor is built and
    enumerated, and the successor of that one's best rewrite scored (squeezenet1_1's 1x1
    expand convolutions enlarged to 3x3, -2%, then merged with their 3x3 siblings, +2%,
    which only then lets the ReLUs run in the merged convolution's epilogue and the
    Concat of its Split fold away, +1.4%).
The agent takes the best-scored action, stop on ties, and never a rewrite back to a graph
it has left (a detour's undo is improving and would otherwise win next). A rewrite that
saves runtime always scores above stop (at least 1e-6 x its saving), so the agent stops
only at a graph where nothing it looked at pays; the graph it returns is the best it
visited. Among one rule's locations the learned terms are equal (M is conditioned on the
rule): the location is chosen by the real rewards — this scoring, not a separate head.

`value_weight` is 0 by default: the value C learned in the dream, added to the scores,
made the agent's choices worse, not better (2026-11-26 evaluation: nasrnn 1.656 with
it, 1.683 without; equal elsewhere), so what the agent learned and uses is M's
two-step proposal. While some rewrite saves runtime the agent takes the best improving
one (`improving_lookahead` can have it weigh their successors too); V and M are not run
then.
The lookahead's engine calls (k + detours successors per step, and a step of the env's
enumeration and a successor per followed detour; the env keeps that step, and taking the
detour reuses it) are real work at optimisation time,
counted in the real-work ledger, never in training.
With `explore` (collecting new real episodes in iterative training), actions are
sampled from softmax(score / temperature) instead, and the detours of every rule are
looked at, not only those M ranks first: the episodes then hold the detours that pay,
which is what M must learn to propose them.

`greedy=False` alone (kept for callers of the old agent) is the same as explore=True.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sonnet as snt
import tensorflow as tf

from controller.policy import Controller
from taso_env.engine.search import successors
from taso_env.errors import ConfigError
from worldmodel.graphs_tuple import (
    batch_observations,
    graphs_tuple_signature,
    placeholder_observation,
    to_graphs_tuple,
)
from worldmodel.moves import move


def _rewards(cost_deltas, initial_cost: float) -> np.ndarray:
    """The env's rewards of rewrites with these cost deltas (% of the start cost saved)."""
    return -100.0 * np.asarray(cost_deltas, dtype=float) / initial_cost


def _best_per_rule(rewards: np.ndarray, rule_of: np.ndarray, n: int) -> np.ndarray:
    """[n] each rule's best candidate reward (rule_of: each candidate's index into the rules)."""
    best = np.full(n, -np.inf)
    np.maximum.at(best, rule_of, rewards)
    return best


def _block_period(places: list[int]) -> int:
    """The op-id period of a rule's locations in a network of repeated blocks: the shift
    that maps the most of them onto another (the smallest of equals; 0 if none does)."""
    xs = sorted(set(places))
    counts: dict[int, int] = {}
    for i, a in enumerate(xs):
        for b in xs[i + 1:]:
            counts[b - a] = counts.get(b - a, 0) + 1
    if not counts:
        return 0
    best = max(counts.values())
    return min(p for p, n in counts.items() if n == best)


def _non_improving(rule: int, rule_of: np.ndarray, rewards: np.ndarray, limit: int) -> list[int]:
    """Up to `limit` candidates (indices) of the `rule`-th valid rule that save nothing,
    the smallest loss first."""
    locs = np.flatnonzero((rule_of == rule) & (rewards <= 0))
    return [int(i) for i in locs[np.argsort(-rewards[locs], kind="stable")][:limit]]


IMPROVING_LOOKAHEADS = ("none", "rivals", "best")


@dataclass(frozen=True)
class LookaheadConfig:
    """How learned values and real immediate rewards combine (see the module docstring).

    Attributes:
        gamma: discount of the learned value of the next state.
        step_cost: charged per rewrite (in % of the start cost, as rewards are).
        detour_cost: charged in addition for a rewrite that does not reduce the runtime.
            0.05, not the dream's 0.25 (which shapes C's value, unused here): the detours
            taken are engine-verified, and the valleys that pay are shallow: priced as
            the executor runs them (the H100 table's fused steps), t5_small_encoder's
            three-step valleys (commute, associate, fold two Muls) save 0.18% each and
            are not taken at 0.1; nor is nasrnn's reordering of its merges (2.057x
            instead of greedy's 1.985x; 2026-11-26 evaluation).
        expand: how many best-scored candidates are looked at one real rewrite further
            where `improving_lookahead` (or exploring) asks for them (0 = none).
        improving_lookahead: what is looked at further while some rewrite saves runtime
            (not exploring): "none" (the best improving rewrite is taken), "rivals" (of
            the `expand` best, only the best and the improving rewrites of some of its
            ops, none where it has no such rival: a rewrite of other ops is still there
            once the best is taken, so mostly only a rival the best would destroy can
            win by its successor) or "best" (the `expand` best). "none" by default: on
            the H100 table measured with pinned GEMMs "rivals"
            gave the same graph as "none" on all 46 graphs tried (every builder of the
            evaluation and every shipped ONNX model) and cost 5-55% more time (nasrnn
            0.77 s against 0.34 s, bert_base 0.52 against 0.38; 2026-11-27). On the
            2026-11-26 table "rivals" was worth
            it on inception_v3 (a two-way convolution merge, then another, over the
            three-way one: 1.2205x where greedy's choice ends at 1.2193x).
        detour_rules: rules with the largest positive two-step return M predicts whose
            non-improving candidates are also looked at one rewrite further (0 = none).
            8: M ranks squeezenet1_1's enlargement 7th (6 missed it).
        detour_locations: of each such rule, the locations looked at (smallest loss first).
            4: the ten evaluation graphs' results are the same with 4 as with 8
            (2026-11-26) for 40% fewer successors; with 2 nasrnn ends lower.
        value_weight: weight of C's centred value of the successor in the scores.
        unlock_rules: next rules M tries after each rule for its two-step return.
        follow_detours: a looked-at detour that saves nothing and that, with its
            successor's best rewrite, neither gains nor loses more than this (% of the
            start cost) over the two is followed one rewrite further: its
            successor is built and enumerated and the best rewrite's successor scored
            (0 = never). A break-even pair is what a three-step valley looks like.
        follow_max: at most this many such detours followed per look (the two-step
            rewards closest to a gain first). 1: the same graphs as 2 on the eleven
            evaluation graphs, ~5% less time.
        detours_at_optimum_only: detours (and their follows) are looked at only where no
            rewrite saves runtime, i.e. at a local optimum of the real rewards; elsewhere
            only the `expand` best. On the ten evaluation graphs of 2026-11-26 the same
            graphs as looking at detours at every step, in a third to a fifth of the
            time. Not when exploring.
        detour_rounds: at a local optimum, when none of the `detour_rules` rules' detours
            pays, the next `detour_rules` rules in M's ranking are looked at, then the
            same rules' next `detour_locations` locations, for at most this many rounds.
            2, not 1: on the H100 table measured with pinned
            GEMMs, squeezenet1_1's enlargements that pay are not among the four smallest
            losses of the rule M ranks (1.1536x with a second round, greedy's 1.0236x
            without).
        repeat_detours: at a local optimum, the non-improving locations (up to this many)
            of the rule of the detour last taken this episode are looked at first,
            `repeat_locations` at a time until one pays, and M is asked only if none
            does: a valley just crossed often repeats in the next of a network's
            repeated blocks (t5_small_encoder's thirteen; 0 = never). Nearest first to
            where the next block's valley would be: the last detour's first op plus the
            stride between the last two detours of that rule (op ids are a topological
            order), or, before a second, the period of the rule's locations
            (`_block_period`). 16: the same graphs as 64 in 10-40% less time; at 8
            t5_small_encoder stops short (its blocks are not evenly spaced in op ids).
            A repeat is a valley of the same depth as the last: its break-even locations
            are followed a rewrite further (`follow_detours`) only where the last detour
            paid only through its follow (t5_small_encoder's three-step valleys), not
            where it paid at once (nasrnn's two-step ones: 11 fewer enumerations an
            episode, 61 + 32 -> 50 + 21 steps and successor calls, the same graph).
        repeat_locations: how many of those are looked at before asking whether one pays.
            1, not `detour_locations`: with the stride the
            next block's valley is mostly the first looked at (bert_base: 1 successor
            per repeated valley instead of 8-12).
    (`gamma` and `unlock_rules` enter M's traced two-step function when it is first
    called: set them before.)
        temperature: of the softmax when exploring.
    """

    gamma: float = 0.99
    step_cost: float = 0.02
    detour_cost: float = 0.05
    expand: int = 4
    improving_lookahead: str = "none"
    detour_rules: int = 8
    detour_locations: int = 4
    value_weight: float = 0.0
    unlock_rules: int = 16
    follow_detours: float = 0.1
    follow_max: int = 1
    detours_at_optimum_only: bool = True
    detour_rounds: int = 2
    repeat_detours: int = 16
    repeat_locations: int = 1
    temperature: float = 0.5

    def __post_init__(self):
        if self.improving_lookahead not in IMPROVING_LOOKAHEADS:
            raise ConfigError(f"improving_lookahead must be one of {IMPROVING_LOOKAHEADS}, "
                              f"got {self.improving_lookahead!r}")


class ControllerAgent:
    """A policy for `taso_env.env.episode.run_episode` (callable (obs, info, rng) -> action).

    After an episode, `trace` holds (step, xfer, location, score) of each action taken."""

    def __init__(self, vae, mdnrnn, controller: Controller, env, greedy: bool = True,
                 lookahead: LookaheadConfig | None = None, explore: bool | None = None):
        self.vae, self.mdnrnn, self.controller = vae, mdnrnn, controller
        self.env = env.unwrapped
        self.lookahead = lookahead or LookaheadConfig()
        self.explore = (not greedy) if explore is None else explore
        self.visited: set[int] = set()  # hashes of the graphs this episode went through
        self.last_detour_rule: int | None = None  # the rule of the last detour taken this episode
        self.last_detour_followed = False  # whether it paid only through a follow (a three-step valley)
        self._followed_paid: set[int] = set()  # candidates (this step's indices) that pay only through a follow
        self.last_detour_at = 0  # and the first op (id) of its location
        self.detour_stride = 0  # op ids between the last two detours of that rule (0: not seen twice)
        self.trace: list[tuple[int, int, int, float]] = []
        z, h = int(mdnrnn.config.latent_dim), int(mdnrnn.config.hidden)
        self._encode = tf.function(vae.encode, input_signature=[graphs_tuple_signature()])
        signature = [tf.TensorSpec([1, z], tf.float32), tf.TensorSpec([None], tf.int32),
                     tf.TensorSpec([None], tf.float32), tf.TensorSpec([1, h], tf.float32),
                     tf.TensorSpec([1, h], tf.float32)]
        self._future = tf.function(self._future_py, input_signature=signature)
        self._h0 = mdnrnn.initial_state(1)
        self._two_step = tf.function(self._two_step_py, input_signature=signature)

    def _two_step_py(self, mu, moves, taken, hidden, cell):
        n, k = tf.shape(moves)[0], min(self.lookahead.unlock_rules, self.mdnrnn.n_actions - 1)
        state = snt.LSTMState(hidden=tf.repeat(hidden, n, axis=0), cell=tf.repeat(cell, n, axis=0))
        out, _ = self.mdnrnn.step(tf.repeat(mu, n, axis=0), moves, state, taken)
        # the k rules M deems likeliest valid after a (stop excluded), each at its best
        # location as M predicts the candidates there
        _, follow = tf.math.top_k(out.mask_logits[:, :-1], k=k)
        reward2 = tf.gather(out.slot_rewards[:, :, 0], follow, batch_dims=1)
        best_next = tf.reduce_max(reward2, axis=1)
        return out.reward + self.lookahead.gamma * tf.maximum(best_next, 0.0)

    def _moves(self, xfers: np.ndarray, best: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        """M's inputs for rules `xfers` taken at their best locations, whose rewards are `best`."""
        return (tf.constant(move(xfers, np.zeros(len(xfers), np.int64), self.mdnrnn.n_actions), tf.int32),
                tf.constant(best, tf.float32))

    def two_step_returns(self, mu: tf.Tensor, xfers: np.ndarray, best: np.ndarray) -> np.ndarray:
        """M's predicted return of rule a (at its best location, of reward `best`[a]) then
        the best next rule (reward units, as the real rewards): r_a + gamma * max(0, max_b
        r_b | after a), for each a in `xfers`."""
        return self._two_step(mu, *self._moves(xfers, best), self._h0.hidden, self._h0.cell).numpy()

    def warm_up(self) -> None:
        """Traces the tf.functions on dummy inputs (part of loading, not of optimising)."""
        mu, _ = self._encode(to_graphs_tuple(batch_observations([placeholder_observation()])))
        state = self.mdnrnn.initial_state(1)
        self._future(mu, tf.constant([0], tf.int32), tf.zeros([1]), state.hidden, state.cell)
        self._two_step(mu, tf.constant([0], tf.int32), tf.zeros([1]), state.hidden, state.cell)

    def _future_py(self, mu, moves, taken, hidden, cell):
        n = tf.shape(moves)[0]
        state = snt.LSTMState(hidden=tf.repeat(hidden, n, axis=0), cell=tf.repeat(cell, n, axis=0))
        out, nxt = self.mdnrnn.step(tf.repeat(mu, n, axis=0), moves, state, taken)
        z_next = tf.reduce_sum(tf.nn.softmax(out.logits, -1)[..., None] * out.mu, axis=1)
        obs = tf.concat([z_next, nxt.hidden], axis=1)
        exists = tf.sigmoid(out.slot_logits) > 0.5  # M's predicted candidates after a
        top = tf.where(exists, out.slot_rewards, float("nan"))
        vocabulary = tf.gather(exists, self.controller.config.vocabulary, axis=1)
        mask = tf.concat([tf.reshape(vocabulary, [n, -1]), tf.ones([n, 1], tf.bool)], axis=1)
        _, value = self.controller(obs, top, mask)
        return (1.0 - tf.sigmoid(out.done_logit)) * value

    def future_values(self, mu: tf.Tensor, xfers: np.ndarray, best: np.ndarray) -> np.ndarray:
        """(1 - d_a) * V_C([z'_a, h'_a]) for each rule a in `xfers` at its best location
        (of reward `best`[a]), from M and C only (uncentred, undiscounted)."""
        return self._future(mu, *self._moves(xfers, best), self._h0.hidden, self._h0.cell).numpy()

    def scores(self, obs: dict, info: dict) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Every valid (rule, location) of the current real graph and its score."""
        xfers = np.flatnonzero(info["xfer_mask"][:-1])
        per_rule = [self.env.candidates(int(xfer)) for xfer in xfers]
        cands = [c for of_rule in per_rule for c in of_rule]
        actions = [(int(xfer), loc) for xfer, of_rule in zip(xfers, per_rule) for loc in range(len(of_rule))]
        self._actions = list(actions)  # (xfer, location) of each candidate scored
        if not actions:
            return actions, np.zeros(0)
        la = self.lookahead
        rewards = _rewards([c.cost_delta for c in cands], info["initial_cost"])
        rule_of = np.repeat(np.arange(len(xfers)), [len(of_rule) for of_rule in per_rule])  # index into xfers
        stuck = not (rewards > 0).any()
        propose = la.detour_rules > 0 and (stuck or self.explore or not la.detours_at_optimum_only)

        def encoded():  # V's code of the real graph, only where M or C is asked
            return self._encode(to_graphs_tuple(batch_observations([obs])))[0]

        mu = encoded() if la.value_weight else None
        best = _best_per_rule(rewards, rule_of, len(xfers))  # what M reads of each rule taken at its best
        future = np.zeros(len(xfers))
        if la.value_weight:
            future = la.gamma * self.future_values(mu, xfers, best)
            future = future - future.mean()
        score = self._immediate(rewards) + la.value_weight * future[rule_of]
        # A rewrite that saves runtime is always worth its step: whatever the learned terms
        # say, it scores above stop (so the agent never stops short of a local optimum).
        score = np.where(rewards > 0, np.maximum(score, 1e-6 * rewards), score)
        picks = self._rivals(np.argsort(-score, kind="stable"), cands, rewards)
        self._look(picks, cands, rewards, score, info["initial_cost"])
        looked = set(picks)
        if propose and self.last_detour_rule in xfers and la.repeat_detours > 0 and not self.explore:
            # the rule of the detour last taken first: its valley often repeats block after block,
            # nearest where the next block's would be first (the last detour's place plus the
            # stride between the last two; op ids are a topological order), a few at a time
            k = int(np.flatnonzero(xfers == self.last_detour_rule)[0])
            stride = self.detour_stride
            if not stride:  # the period of the rule's locations near the last detour (at most 64: bounded work)
                places = sorted((min(cands[i].location) for i in np.flatnonzero(rule_of == k)),
                                key=lambda at: abs(at - self.last_detour_at))[:64]
                stride = _block_period(places)
            expected = self.last_detour_at + stride
            group = sorted(_non_improving(k, rule_of, rewards, len(cands)),
                           key=lambda i: abs(min(cands[i].location) - expected))[:la.repeat_detours]
            size = max(1, la.repeat_locations)
            chunks = [group[i:i + size] for i in range(0, len(group), size)]
            # its repeats are valleys of the same depth: followed only if it needed a follow
            propose = not self._look_until_one_pays(chunks, looked, cands, rewards, score, info["initial_cost"],
                                                    follow=self.last_detour_followed)
        if propose:  # M's detours, a round of `detour_rules` rules at a time, until one pays
            mu = encoded() if mu is None else mu
            returns = self.two_step_returns(mu, xfers, best)
            rounds = self._detours(returns, rule_of, rewards)[:max(1, la.detour_rounds)]
            self._look_until_one_pays(rounds, looked, cands, rewards, score, info["initial_cost"])
        return actions, score

    def _rivals(self, ranked: np.ndarray, cands: list, rewards: np.ndarray) -> list[int]:
        """The candidates worth a look one rewrite further while some rewrite saves runtime
        (`improving_lookahead`; exploring, the `expand` best-scored of `ranked`)."""
        la = self.lookahead
        if self.explore or la.improving_lookahead == "best":
            return list(ranked[:la.expand])
        if la.improving_lookahead == "none" or la.expand <= 0 or not len(ranked):
            return []
        # "rivals": a rewrite of other ops is still there after the best is taken and scores
        # below it however far one looks (rewards add up, discounted), so only a rival that
        # the best would destroy can win by its successor
        ops = set(cands[ranked[0]].location)
        rivals = [k for k in ranked if rewards[k] > 0 and not ops.isdisjoint(cands[k].location)][:la.expand]
        return rivals if len(rivals) > 1 else []

    def _look_until_one_pays(self, rounds: list[list[int]], looked: set[int], cands: list, rewards: np.ndarray,
                             score: np.ndarray, initial_cost: float, follow: bool = True) -> bool:
        """Looks at the candidates of each round not looked at yet (`_look`), round after
        round, until one scores above stop; whether one did."""
        for group in rounds:
            group = [k for k in group if k not in looked]
            looked.update(group)
            self._look(group, cands, rewards, score, initial_cost, follow)
            if group and score[group].max() > 0:
                return True
        return False

    def _look(self, picks: list[int], cands: list, rewards: np.ndarray, score: np.ndarray,
              initial_cost: float, follow: bool = True) -> None:
        """Adds to `score` (in place) what one real rewrite further shows of candidates
        `picks`: the discounted best immediate score in each one's successor (and, with
        `follow`, for break-even detours one rewrite further still, remembering those that
        pay only so); -inf for a rewrite back to a graph this episode left."""
        if not picks:
            return
        la = self.lookahead
        even = []  # break-even detours: (two-step reward, index, successor's best score)
        ahead = successors(self.env.enumeration(), [self.env.candidate_index(*self._actions[k]) for k in picks])
        for k, after in zip(picks, ahead):
            if after.child_hash in self.visited:  # a detour's undo: never walk in circles
                score[k] = -np.inf
                continue
            if after.best_delta is not None:  # the immediate score is monotone in the reward
                best_reward = float(_rewards([after.best_delta], initial_cost)[0])
                best = float(self._immediate(np.array([best_reward]))[0])
                margin = la.follow_detours
                if margin > 0 and rewards[k] <= 0 and abs(rewards[k] + best_reward) <= margin:
                    even.append((rewards[k] + best_reward, k, best))
                score[k] += la.gamma * max(0.0, best)
        for _, k, best in sorted(even, reverse=True)[:la.follow_max if follow else 0]:  # the closest to a gain first
            paid = score[k] > 0
            further = best + la.gamma * max(0.0, self._follow(k, initial_cost))
            score[k] += la.gamma * (max(0.0, further) - max(0.0, best))
            if score[k] > 0 and not paid:
                self._followed_paid.add(k)

    def _follow(self, detour: int, initial_cost: float) -> float:
        """The best immediate score one rewrite after the best rewrite of candidate
        `detour`'s successor (its successor built and enumerated, near the rewrite: the
        env's enumeration carried through it): for a detour whose loss the next rewrite
        only pays back (squeezenet1_1's 1x1 convolution enlarged, then merged with its 3x3
        sibling, which only then lets the ReLUs fold into the merged convolution's
        epilogue and the Concat of its Split away)."""
        env = self.env
        which = env.candidate_index(*self._actions[detour])
        child = env.successor_enumeration(which)
        if not child.candidates:
            return 0.0
        k = int(np.argmin([c.cost_delta for c in child.candidates]))
        after = successors(child, [k])[0]
        if after.best_delta is None or after.child_hash in self.visited:
            return 0.0
        return float(self._immediate(_rewards([after.best_delta], initial_cost))[0])

    def _detours(self, proposal: np.ndarray, rule_of: np.ndarray, rewards: np.ndarray) -> list[list[int]]:
        """Candidates (indices) worth a real look although they save nothing now, in rounds:
        the non-improving locations (`detour_locations` per rule, the smallest loss first)
        of the rules with a positive `proposal` (M's two-step return, per valid rule) that
        have such locations, the largest proposal first, `detour_rules` rules a round; then
        the same rounds again with each rule's next `detour_locations` locations, and so on
        (the rule M ranks may be right where its smallest losses are not the detours that
        pay). Exploring, every rule's first locations, in one round."""
        la = self.lookahead
        if la.detour_rules <= 0:
            return []
        if self.explore:  # collecting: every rule's detours are tried, M's ranking unused
            proposal = np.ones_like(proposal)
        ranked = [k for k in np.argsort(-proposal, kind="stable") if proposal[k] > 0]
        places = {k: _non_improving(k, rule_of, rewards, len(rewards)) for k in ranked}
        ranked = [k for k in ranked if places[k]]  # a rule with no non-improving location takes no place
        if self.explore:
            return [[i for k in ranked for i in places[k][:la.detour_locations]]]
        rounds = []
        deepest = max((len(p) for p in places.values()), default=0)
        for start in range(0, deepest, la.detour_locations):
            for first in range(0, len(ranked), la.detour_rules):
                group = [i for k in ranked[first:first + la.detour_rules]
                         for i in places[k][start:start + la.detour_locations]]
                if group:
                    rounds.append(group)
        return rounds

    def _immediate(self, rewards: np.ndarray) -> np.ndarray:
        """Real reward less the step charge and, for a rewrite that saves nothing, the detour charge."""
        return rewards - self.lookahead.step_cost - self.lookahead.detour_cost * (rewards <= 0)

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        if info["step"] == 0:
            self.trace = []
            self.visited = set()
            self.last_detour_rule = None
            self.last_detour_followed = False
            self.detour_stride = 0
        self.visited.add(self.env.graph.hash())  # the graph the last rewrite led to
        self._followed_paid = set()
        stop = len(info["xfer_mask"]) - 1
        actions, score = self.scores(obs, info)
        actions.insert(0, (stop, 0))  # first, so that it wins ties
        score = np.insert(score, 0, 0.0)
        if self.explore:
            p = np.exp((score - score.max()) / self.lookahead.temperature)
            k = int(rng.choice(len(score), p=p / p.sum()))
        else:
            k = int(np.argmax(score))
        xfer, loc = actions[k]
        self.trace.append((int(info["step"]), xfer, loc, float(score[k])))
        if xfer != stop and (taken := self.env.candidates(xfer)[loc]).cost_delta >= 0:  # a detour
            at = min(taken.location)
            self.detour_stride = at - self.last_detour_at if xfer == self.last_detour_rule else 0
            self.last_detour_rule, self.last_detour_at = xfer, at
            self.last_detour_followed = k - 1 in self._followed_paid  # (k - 1: stop was inserted first)
        return np.array([xfer, loc])
