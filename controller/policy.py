"""The controller C: a pointer policy over (rule, location) candidates, reading [z, h]
from the world model and the candidates' rewards.

A candidate slot is (rule r, l): rule r's l-th most rewarding location (l < L), for
every rule of the rule set (or the `rules` given). What C sees of the slots is what the
real env gives every agent for free after a step, its enumeration's candidates and their
rewards (info["top_rewards"], [n_rules + 1, L], -inf where rule r has fewer than l + 1
locations), and in the dream what M predicts of them (MDNOutput.slot_logits /
slot_rewards). S = len(rules) * L slots; action S is stop.

C is rule-agnostic where it has not learned otherwise: a slot is scored from its
features and location, plus its rule's embedding, which starts at zero. A rule the dream
never showed keeps a zero embedding and is judged by its reward alone, so C acts on
graphs (and rules) its rollouts never held.

    obs [B, Z + H] --MLP--> h [B, D]
    top [B, R, L]  --features--> f [B, S, F]
        (asinh(reward), improving, losing, share of the best reward, is the best)
    slot score  = v . tanh(W_h h + E_rule[r] + E_loc[l] + W_f f_s)   [B, S]
    pooled      = max over valid slots of tanh(...)                  [B, D]
    stop score  = w_stop . [h, pooled]
    value       = w_value . [h, pooled]
    logits      = [slot scores, stop score], invalid slots -> -inf

The location is C's choice among each rule's L best (a pointer over candidates), not the
cost model's: with the rewards as inputs C can learn greedy's choice, and where the dream
shows that a losing rewrite pays back later, the valley's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import sonnet as snt
import tensorflow as tf

NEG_INF = -1e9
FEATURES = 5  # per slot: asinh(10 * reward), improving, losing, share of the best reward, is the best


@dataclass(frozen=True)
class ControllerConfig:
    """obs_dim = Z + H of the world model; `rules` (ids < n_rules) the rules whose slots
    are actions, each with top_locations slots (None: every rule)."""

    obs_dim: int
    n_rules: int
    rules: tuple[int, ...] | None = None
    top_locations: int = 4
    hidden: tuple[int, ...] = (128, 128)
    slot_hidden: int = 32

    def __post_init__(self):
        if self.obs_dim < 1 or self.n_rules < 1 or self.top_locations < 1:
            raise ValueError(f"obs_dim, n_rules and top_locations must be >= 1, got {self.obs_dim}, "
                             f"{self.n_rules}, {self.top_locations}")
        if self.rules is not None and (not self.rules or any(not 0 <= r < self.n_rules for r in self.rules)
                                       or len(set(self.rules)) != len(self.rules)):
            raise ValueError(f"rules must be distinct rule ids in [0, {self.n_rules}), at least one")
        if not self.hidden or any(h < 1 for h in self.hidden) or self.slot_hidden < 1:
            raise ValueError(f"hidden sizes must be positive, got {self.hidden}, {self.slot_hidden}")

    @functools.cached_property
    def vocabulary(self) -> tuple[int, ...]:
        """The rule ids whose slots are actions, in slot order (built once: the policy
        agent reads it every step)."""
        return tuple(range(self.n_rules)) if self.rules is None else tuple(self.rules)

    @property
    def n_slots(self) -> int:
        return len(self.vocabulary) * self.top_locations

    @property
    def n_actions(self) -> int:
        """Slots and stop."""
        return self.n_slots + 1


def slot_action(slot: int, config: ControllerConfig) -> tuple[int, int]:
    """(rule, l) of a slot; (n_rules, 0) for stop."""
    if slot >= config.n_slots:
        return config.n_rules, 0
    return config.vocabulary[slot // config.top_locations], slot % config.top_locations


class Controller(snt.Module):
    """Masked pointer policy over candidate slots and stop, with a value head."""

    def __init__(self, config: ControllerConfig, name: str = "controller"):
        super().__init__(name=name)
        self.config = config
        d = config.slot_hidden
        self._torso = snt.nets.MLP(list(config.hidden), activation=tf.nn.tanh, activate_final=True, name="torso")
        self._context = snt.Linear(d, name="context")
        self._features = snt.Linear(d, with_bias=False, name="features")
        # Zero at first: a rule C never met is scored by its slot's features alone.
        self._rule = snt.Embed(len(config.vocabulary), d, initializer=tf.zeros_initializer(), name="rule_embedding")
        self._location = snt.Embed(config.top_locations, d, name="location_embedding")
        self._score = snt.Linear(1, with_bias=False, w_init=snt.initializers.Orthogonal(0.01), name="slot_score")
        self._stop = snt.Linear(1, w_init=snt.initializers.Orthogonal(0.01), name="stop")
        self._value = snt.Linear(1, name="value")
        rules = np.repeat(np.arange(len(config.vocabulary)), config.top_locations)
        locations = np.tile(np.arange(config.top_locations), len(config.vocabulary))
        self._slot_rules, self._slot_locations = tf.constant(rules, tf.int32), tf.constant(locations, tf.int32)
        self._vocabulary = tf.constant(config.vocabulary, tf.int32)

    def slot_rewards(self, top: tf.Tensor) -> tf.Tensor:
        """[B, n_rules + 1, L] rewards -> [B, S] of the vocabulary's slots (not finite: no slot)."""
        return tf.reshape(tf.gather(top, self._vocabulary, axis=1), [tf.shape(top)[0], -1])

    @staticmethod
    def slot_features(reward: tf.Tensor, best: tf.Tensor) -> tf.Tensor:
        """Slot rewards [...] (finite) and their state's best reward [...] -> [..., FEATURES]."""
        share = tf.where(best > 1e-6, reward / tf.maximum(best, 1e-6), 0.0)
        is_best = tf.cast((best > 1e-6) & (reward >= best), tf.float32)
        return tf.stack([tf.math.asinh(10.0 * reward), tf.cast(reward > 1e-6, tf.float32),
                         tf.cast(reward < -1e-6, tf.float32), tf.clip_by_value(share, -1.0, 1.0), is_best], axis=-1)

    def __call__(self, obs: tf.Tensor, top: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Args: obs [B, obs_dim] float32, top [B, n_rules + 1, L] float32, mask [B, S + 1]
        bool (slot_mask). Returns: masked logits [B, S + 1], value [B].

        Only the valid slots are scored (N of them over the batch, a few dozen per state
        where S runs to thousands): their hidden units are [N, D], not [B, S, D]."""
        c = self.config
        batch = tf.shape(obs)[0]
        h = self._torso(obs)
        valid = mask[:, :c.n_slots]
        reward = self.slot_rewards(top)
        best = tf.reduce_max(tf.where(valid, reward, NEG_INF), axis=1)  # [B]
        where = tf.where(valid)  # [N, 2]: (state, slot)
        state, slot = tf.cast(where[:, 0], tf.int32), tf.cast(where[:, 1], tf.int32)
        features = self.slot_features(tf.gather_nd(reward, where), tf.gather(best, state))  # [N, F]
        embedding = (self._rule(tf.gather(self._slot_rules, slot))
                     + self._location(tf.gather(self._slot_locations, slot)))
        hidden = tf.tanh(tf.gather(self._context(h), state) + embedding + self._features(features))  # [N, D]
        scores = tf.squeeze(self._score(hidden), -1)
        slots = tf.where(valid, tf.scatter_nd(where, scores, [batch, c.n_slots]), NEG_INF)
        pooled = tf.math.unsorted_segment_max(hidden, state, batch)
        pooled = tf.where(tf.reduce_any(valid, axis=1)[:, None], pooled, -1.0)  # -1: no slot at all
        both = tf.concat([h, pooled], axis=-1)
        logits = tf.concat([slots, self._stop(both)], axis=-1)
        return tf.where(mask, logits, NEG_INF), tf.squeeze(self._value(both), -1)

    def act(self, obs: tf.Tensor, top: tf.Tensor, mask: tf.Tensor, seed: tf.Tensor | None = None,
            greedy: bool = False):
        """Samples (or takes the argmax of) a slot; returns (action [B], log_prob [B], value [B])."""
        logits, value = self(obs, top, mask)
        if greedy:
            action = tf.argmax(logits, -1, output_type=tf.int32)
        else:
            action = tf.random.stateless_categorical(logits, 1, seed=seed, dtype=tf.int32)[:, 0]
        log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=action, logits=logits)
        return action, log_prob, value

    def build(self) -> None:
        """Creates the variables (one call on zeros)."""
        c = self.config
        self(tf.zeros([1, c.obs_dim]), tf.zeros([1, c.n_rules + 1, c.top_locations]),
             tf.ones([1, c.n_actions], tf.bool))
