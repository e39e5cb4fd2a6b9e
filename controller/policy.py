"""The controller C: a pointer policy over (rule, location) candidates, reading [z, h]
from the world model and the candidates' rewards.

A candidate slot is (rule r, l): rule r's l-th most rewarding location (l < L), for the
rules of C's vocabulary (`rules`: those valid somewhere in the rollouts its world was
trained on; M cannot dream of the others, so C never learns them). What C sees of the
slots is what the real env gives every agent for free after a step, its enumeration's
candidates and their rewards (info["top_rewards"], [n_rules + 1, L], -inf where rule r
has fewer than l + 1 locations), and in the dream what M predicts of them
(MDNOutput.slot_logits / slot_rewards). S = len(rules) * L slots; action S is stop.

    obs [B, Z + H] --MLP--> h [B, D]
    top [B, R, L]  --features--> f [B, S, F]          (reward, improving, losing)
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

from dataclasses import dataclass

import numpy as np
import sonnet as snt
import tensorflow as tf

NEG_INF = -1e9
FEATURES = 3  # per slot: asinh(10 * reward), improving, losing


@dataclass(frozen=True)
class ControllerConfig:
    """obs_dim = Z + H of the world model; `rules` (ids < n_rules) the vocabulary, each
    with top_locations slots."""

    obs_dim: int
    n_rules: int
    rules: tuple[int, ...]
    top_locations: int = 4
    hidden: tuple[int, ...] = (128, 128)
    slot_hidden: int = 32

    def __post_init__(self):
        if self.obs_dim < 1 or self.n_rules < 1 or self.top_locations < 1:
            raise ValueError(f"obs_dim, n_rules and top_locations must be >= 1, got {self.obs_dim}, "
                             f"{self.n_rules}, {self.top_locations}")
        if not self.rules or any(not 0 <= r < self.n_rules for r in self.rules) or \
                len(set(self.rules)) != len(self.rules):
            raise ValueError(f"rules must be distinct rule ids in [0, {self.n_rules}), at least one")
        if not self.hidden or any(h < 1 for h in self.hidden) or self.slot_hidden < 1:
            raise ValueError(f"hidden sizes must be positive, got {self.hidden}, {self.slot_hidden}")

    @property
    def n_slots(self) -> int:
        return len(self.rules) * self.top_locations

    @property
    def n_actions(self) -> int:
        """Slots and stop."""
        return self.n_slots + 1


def slot_action(slot: int, config: ControllerConfig) -> tuple[int, int]:
    """(rule, l) of a slot; (n_rules, 0) for stop."""
    if slot >= config.n_slots:
        return config.n_rules, 0
    return config.rules[slot // config.top_locations], slot % config.top_locations


class Controller(snt.Module):
    """Masked pointer policy over candidate slots and stop, with a value head."""

    def __init__(self, config: ControllerConfig, name: str = "controller"):
        super().__init__(name=name)
        self.config = config
        d = config.slot_hidden
        self._torso = snt.nets.MLP(list(config.hidden), activation=tf.nn.tanh, activate_final=True, name="torso")
        self._context = snt.Linear(d, name="context")
        self._features = snt.Linear(d, with_bias=False, name="features")
        self._rule = snt.Embed(len(config.rules), d, name="rule_embedding")
        self._location = snt.Embed(config.top_locations, d, name="location_embedding")
        self._score = snt.Linear(1, with_bias=False, w_init=snt.initializers.Orthogonal(0.01), name="slot_score")
        self._stop = snt.Linear(1, w_init=snt.initializers.Orthogonal(0.01), name="stop")
        self._value = snt.Linear(1, name="value")
        rules = np.repeat(np.arange(len(config.rules)), config.top_locations)
        locations = np.tile(np.arange(config.top_locations), len(config.rules))
        self._slot_rules, self._slot_locations = tf.constant(rules, tf.int32), tf.constant(locations, tf.int32)
        self._vocabulary = tf.constant(config.rules, tf.int32)

    def slot_features(self, top: tf.Tensor) -> tf.Tensor:
        """[B, n_rules + 1, L] rewards (not finite: no slot) -> [B, S, FEATURES] of the vocabulary's slots."""
        reward = tf.reshape(tf.gather(top, self._vocabulary, axis=1), [tf.shape(top)[0], -1])
        reward = tf.where(tf.math.is_finite(reward), reward, 0.0)
        return tf.stack([tf.math.asinh(10.0 * reward), tf.cast(reward > 1e-6, tf.float32),
                         tf.cast(reward < -1e-6, tf.float32)], axis=-1)

    def __call__(self, obs: tf.Tensor, top: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Args: obs [B, obs_dim] float32, top [B, n_rules + 1, L] float32, mask [B, S + 1]
        bool (slot_mask). Returns: masked logits [B, S + 1], value [B]."""
        c = self.config
        h = self._torso(obs)
        slot_embedding = self._rule(self._slot_rules) + self._location(self._slot_locations)  # [S, D]
        hidden = tf.tanh(self._context(h)[:, None, :] + slot_embedding[None]
                         + self._features(self.slot_features(top)))  # [B, S, D]
        slots = tf.squeeze(self._score(hidden), -1)
        valid = mask[:, :c.n_slots]
        pooled = tf.reduce_max(tf.where(valid[..., None], hidden, -1.0), axis=1)  # -1: no slot at all
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
