"""The dream-trained controller acting on the real environment: its policy decides.

At every step, from what the env gives every agent for free:
    z_t      V's code (mu) of the real graph's observation
    h_t      M's LSTM state, advanced by each (z, rule) taken this episode, as in the dream
    top_t    info["top_rewards"]: each rule's L most rewarding locations' rewards, from the
             env's own enumeration of the graph (info["top_locations"] are those locations)
C's pointer (controller.policy) scores every (rule, l) slot and stop; the agent takes the
argmax (or, with `sample`, a draw) and plays (rule, top_locations[rule, l]). Nothing else
touches the engine: no successor look-ups, no pricing of graphs it does not enter, so its
real work per episode is greedy's (one enumeration per step, the env's).

    agent = load_policy_agent("runs/demo", env)              # the row `controller`
    agent = load_policy_agent("runs/demo", env, "random_init")  # controller_random_init
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sonnet as snt
import tensorflow as tf

from controller.policy import Controller, slot_action
from worldmodel.dream_env import slot_mask
from worldmodel.graphs_tuple import batch_observations, graphs_tuple_signature, placeholder_observation, to_graphs_tuple
from worldmodel.moves import move


class PolicyAgent:
    """A policy for `taso_env.env.episode.run_episode` (callable (obs, info, rng) -> action).

    After an episode, `trace` holds (step, rule, location, probability) of each action."""

    def __init__(self, vae, mdnrnn, controller: Controller, env, sample: bool = False):
        self.vae, self.mdnrnn, self.controller = vae, mdnrnn, controller
        self.env = env.unwrapped
        self.sample = sample
        config = self.config = controller.config
        self.n_rules, self.top_locations = config.n_rules, config.top_locations
        self._encode = tf.function(lambda g: vae.encode(g)[0], input_signature=[graphs_tuple_signature()])
        z, h = int(mdnrnn.config.latent_dim), int(mdnrnn.config.hidden)
        state = [tf.TensorSpec([1, h], tf.float32), tf.TensorSpec([1, h], tf.float32)]
        self._policy = tf.function(self._policy_py, input_signature=[
            tf.TensorSpec([1, z], tf.float32), *state, tf.TensorSpec([1, None, config.top_locations], tf.float32),
            tf.TensorSpec([1, config.n_actions], tf.bool)])
        self._advance = tf.function(self._advance_py, input_signature=[
            tf.TensorSpec([1, z], tf.float32), tf.TensorSpec([1], tf.int32), tf.TensorSpec([1], tf.float32), *state])
        self._state = None
        self.trace: list[tuple[int, int, int, float]] = []

    def _policy_py(self, z, hidden, cell, top, mask):
        logits, _ = self.controller(tf.concat([z, hidden], axis=1), top, mask)
        return tf.nn.softmax(logits)[0]

    def _advance_py(self, z, action, taken, hidden, cell):
        _, state = self.mdnrnn.step(z, action, snt.LSTMState(hidden=hidden, cell=cell), taken)
        return state.hidden, state.cell

    def warm_up(self) -> None:
        """Traces the tf.functions on dummy inputs (part of loading, not of optimising)."""
        z = self._encode(to_graphs_tuple(batch_observations([placeholder_observation()])))
        h0 = self.mdnrnn.initial_state(1)
        top = np.full((1, self.n_rules + 1, self.top_locations), -np.inf, np.float32)
        self._policy(z, h0.hidden, h0.cell, top, slot_mask(top, self.config.vocabulary))
        self._advance(z, tf.zeros([1], tf.int32), tf.zeros([1]), h0.hidden, h0.cell)

    def __call__(self, obs, info: dict, rng: np.random.Generator) -> np.ndarray:
        if info["step"] == 0 or self._state is None:
            h0 = self.mdnrnn.initial_state(1)
            self._state = (h0.hidden, h0.cell)
            self.trace = []
        z = self._encode(to_graphs_tuple(batch_observations([obs])))
        top = np.asarray(info["top_rewards"], np.float32)[None]
        probs = self._policy(z, *self._state, top, slot_mask(top, self.config.vocabulary)).numpy().astype(np.float64)
        slot = int(rng.choice(len(probs), p=probs / probs.sum())) if self.sample else int(np.argmax(probs))
        rule, place = slot_action(slot, self.config)
        location = 0 if rule == self.n_rules else int(info["top_locations"][rule, place])
        self.trace.append((int(info["step"]), rule, location, float(probs[slot])))
        if rule != self.n_rules:
            # M reads the rule, the location's rank and the candidate's reward, as in the dream
            taken = move(rule, place, self.n_rules + 1)
            self._state = self._advance(z, tf.constant([taken], tf.int32), tf.constant([top[0, rule, place]]),
                                        *self._state)
        return np.array([rule, location], np.int64)


def load_policy_agent(run_dir: str | Path, env, variant: str = "trained", seed: int = 0,
                      sample: bool = False) -> PolicyAgent:
    """A controller variant of the run (controller.training.VARIANT_FOLDERS) acting on
    `env` through the world model it was trained with."""
    from controller.training import load_controller, world_model

    vae, mdnrnn = world_model(run_dir, variant)
    controller, _ = load_controller(run_dir, variant, seed=seed)
    agent = PolicyAgent(vae, mdnrnn, controller, env, sample=sample)
    agent.warm_up()
    return agent


__all__ = ["PolicyAgent", "load_policy_agent"]
