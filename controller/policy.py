"""The controller C: a policy over xfers reading [z, h] from the world model.

    obs [B, Z + H] --MLP--> features --+--> xfer logits [B, A] (masked: invalid -> -inf)
                                       +--> value [B]           (PPO's baseline)

A = n_rules + 1 (the last is stop). The mask comes from M's predicted xfer mask in the
dream and from the real environment's mask on the real graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import sonnet as snt
import tensorflow as tf

NEG_INF = -1e9


@dataclass(frozen=True)
class ControllerConfig:
    """obs_dim = Z + H of the world model; n_actions = n_rules + 1."""

    obs_dim: int
    n_actions: int
    hidden: tuple[int, ...] = (128, 128)

    def __post_init__(self):
        if self.obs_dim < 1 or self.n_actions < 2:
            raise ValueError(f"obs_dim must be >= 1 and n_actions >= 2, got {self.obs_dim}, {self.n_actions}")
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden sizes must be positive, got {self.hidden}")


class Controller(snt.Module):
    """Masked categorical policy over xfers with a value head."""

    def __init__(self, config: ControllerConfig, name: str = "controller"):
        super().__init__(name=name)
        self.config = config
        self._torso = snt.nets.MLP(list(config.hidden), activation=tf.nn.tanh, activate_final=True, name="torso")
        self._policy = snt.Linear(config.n_actions, w_init=snt.initializers.Orthogonal(0.01), name="policy")
        self._value = snt.Linear(1, name="value")

    def __call__(self, obs: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Args: obs [B, obs_dim] float32, mask [B, n_actions] bool.
        Returns: masked logits [B, n_actions], value [B]."""
        h = self._torso(obs)
        logits = tf.where(mask, self._policy(h), NEG_INF)
        return logits, tf.squeeze(self._value(h), -1)

    def act(self, obs: tf.Tensor, mask: tf.Tensor, seed: tf.Tensor | None = None, greedy: bool = False):
        """Samples (or takes the argmax of) an xfer; returns (action [B], log_prob [B], value [B])."""
        logits, value = self(obs, mask)
        if greedy:
            action = tf.argmax(logits, -1, output_type=tf.int32)
        else:
            action = tf.random.stateless_categorical(logits, 1, seed=seed, dtype=tf.int32)[:, 0]
        log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=action, logits=logits)
        return action, log_prob, value
