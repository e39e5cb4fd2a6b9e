"""M: an MDN-RNN that predicts the next latent, the reward, the end and the next mask.

       z_t [B, Z]   one_hot(xfer_t) [B, R]   E[move_t] [B, 32]   asinh(r_t) [B, 1]
           |              |                   |                    |
           +------+-------+-------------------+--------------------+
                  v
            LSTM (hidden H) --> h_t [B, H]            (state starts at zero every episode)
                  |
      +-----------+-------------------+
      v                               v
  MDN head on h_t                 MLP on [h_t, z_t, one_hot(xfer_t)]
  logits [B, K]                     reward [B]         r_t
  mu = z_t + delta [B, K, Z]        done_logit [B]     terminated after step t
  log_sigma [B, K, Z]               mask_logits [B, R] xfer mask of step t + 1
                                    slot_logits [B, R, L]  whether rule r has an l-th
                                                       location at step t + 1
                                    slot_rewards [B, R, L] the reward of rule r's l-th most
                                                       rewarding location at step t + 1,
                                                       times whether it exists (expected)
                                    changed_logits [B, R, L] whether that slot differs
                                                       from step t's carried over
                                                       (carry_candidates; else +30:
                                                       every slot is M's)

p(z_{t+1} | h_t) = sum_k softmax(logits / tau)_k N(z_{t+1}; mu_k, diag(sigma_k^2 tau)).
The means are offsets from z_t because one rewrite changes the graph (and z) a little.

An action is a *move* (worldmodel/moves.py): the xfer and the rank of its location among
the rule's L best, or the xfer alone where that is unknown. With
`MDNRNNConfig.candidate_inputs` (off by default) M reads more than the xfer: the same rule
can pay at one location and not at another (the valley family's entry); the move's
embedding E (zero at first, so an unseen move reads as its xfer) lets M tell them apart,
and M also reads the reward of the candidate taken (r_t, what the env's candidates say it saves, known before
the step; 0 where unknown): what a rewrite leads to scales with what it cost (a valley's
payback with the size of the conv its entry enlarged), which z alone may not resolve.
R = n_rules + 1 (the last xfer is stop); L = config.top_locations. The slot heads are
the dream's candidates: what the real env gives every agent for free after a step (its
enumeration's candidates and their rewards, info["top_rewards"]), predicted. With
`MDNRNNConfig.carry_candidates` the dream keeps step t's candidates carried over
(worldmodel/candidate_carry.py) where changed_logits says a slot did not change.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import sonnet as snt
import tensorflow as tf
import tensorflow_probability as tfp

from worldmodel.configs import MDNRNNConfig, slot_reward_error

tfd = tfp.distributions

_LOG_SIGMA_MIN, _LOG_SIGMA_MAX = -7.0, 2.0
ALWAYS_CHANGED = 30.0  # changed_logits without carry_candidates: every slot is M's prediction
MOVE_DIM = 32  # width of a move's embedding (module docstring)


class MDNOutput(NamedTuple):
    """M's predictions after step t; leading dims [B] (step) or [B, T] (__call__).

    logits [.., K], mu [.., K, Z], log_sigma [.., K, Z], reward [..], done_logit [..],
    mask_logits [.., R], slot_logits [.., R, L], slot_rewards [.., R, L],
    changed_logits [.., R, L].
    """

    logits: tf.Tensor
    mu: tf.Tensor
    log_sigma: tf.Tensor
    reward: tf.Tensor
    done_logit: tf.Tensor
    mask_logits: tf.Tensor
    slot_logits: tf.Tensor
    slot_rewards: tf.Tensor
    changed_logits: tf.Tensor


class MDNRNN(snt.Module):
    """See the module docstring. Variables are created on the first call."""

    def __init__(self, config: MDNRNNConfig, name: str = "mdnrnn"):
        super().__init__(name=name)
        if not isinstance(config, MDNRNNConfig):
            raise TypeError(f"MDNRNN needs an MDNRNNConfig, got {type(config).__name__}")
        self.config = config
        self.n_actions = config.n_rules + 1
        self._reward_scale = config.reward_scale if config.reward_scale > 0 else 1.0
        k, z = config.mixtures, config.latent_dim
        with self.name_scope:
            self._lstm = snt.LSTM(config.hidden, name="lstm")
            self._mdn = snt.Linear(k + 2 * k * z, name="mdn_head")
            self._features = snt.nets.MLP([config.hidden], activate_final=True, name="head_features")
            self._slots = self.n_actions * config.top_locations
            carry = self._slots if config.carry_candidates else 0
            self._heads = snt.Linear(2 + self.n_actions + 2 * self._slots + carry, name="heads")
            self.n_moves = self.n_actions * (config.top_locations + 1)
            if config.candidate_inputs:
                self._moves = snt.Embed(self.n_moves, MOVE_DIM, initializer=tf.zeros_initializer(),
                                        name="move_embedding")
                self._move_to_gates = snt.Linear(4 * config.hidden, with_bias=False, name="move_to_gates")
                self._move_to_features = snt.Linear(config.hidden, with_bias=False, name="move_to_features")
                self._taken_to_gates = snt.Linear(4 * config.hidden, with_bias=False, name="taken_to_gates")
                self._taken_to_features = snt.Linear(config.hidden, with_bias=False, name="taken_to_features")
        # the head MLP's one layer, whose w and b step() reads (no variable scan per call)
        self._feature_layer = next(m for m in self._features.submodules if isinstance(m, snt.Linear))
        self._built = False  # whether the modules' variables exist (_build)

    def initial_state(self, batch_size: int) -> snt.LSTMState:
        """The zero state of an episode start (hidden and cell [B, H])."""
        return self._lstm.initial_state(batch_size)

    # The LSTM and the head MLP read [z, one_hot(action)] (their weights are laid out so;
    # checkpoints keep that layout). A one-hot row times a weight matrix is that matrix's
    # row: they are computed as z @ W_z + W_a[action], without the [N, R] product.
    def _build(self, z: tf.Tensor) -> None:
        """Creates every module's variables on the first call (each module's own first
        call, on one row of zeros), so that any method can read them."""
        if self._built:
            return
        width, h = self.config.latent_dim + self.n_actions, self.config.hidden
        self._lstm(tf.zeros([1, width], z.dtype), self._lstm.initial_state(1))
        self._mdn(tf.zeros([1, h], z.dtype))
        self._heads(self._features(tf.zeros([1, h + width], z.dtype)))
        if self.config.candidate_inputs:
            embedded = self._moves(tf.zeros([1], tf.int32))
            self._move_to_gates(embedded)
            self._move_to_features(embedded)
            self._taken_to_gates(tf.zeros([1, 1], z.dtype))
            self._taken_to_features(tf.zeros([1, 1], z.dtype))
        self._built = True

    def _of_inputs(self, w: tf.Tensor, z: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
        """[z, one_hot(xfer)] @ w for w [Z + R, D] (z [N, Z], action [N] moves)."""
        zdim = self.config.latent_dim
        return tf.matmul(z, w[:zdim]) + tf.gather(w[zdim:], action % self.n_actions)

    @staticmethod
    def _taken_feature(z: tf.Tensor, taken: tf.Tensor | None) -> tf.Tensor:
        """[N, 1] asinh of the taken candidate's reward (zeros where not given)."""
        if taken is None:
            return tf.zeros([tf.shape(z)[0], 1], z.dtype)
        return tf.math.asinh(tf.reshape(tf.cast(taken, z.dtype), [-1, 1]))

    def _candidates_read(self, z: tf.Tensor, action: tf.Tensor,
                         taken: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor] | None:
        """(E[move] [N, MOVE_DIM], asinh(taken) [N, 1]) where M reads candidate inputs,
        else None: computed once per step, read by the gates and the heads."""
        self._check_move(action)
        if not self.config.candidate_inputs:
            return None
        return self._moves(action), self._taken_feature(z, taken)

    def _gates_x(self, z: tf.Tensor, action: tf.Tensor, read: tuple[tf.Tensor, tf.Tensor] | None) -> tf.Tensor:
        """The LSTM's input gates [N, 4H] of (z, move, taken reward); `read`: _candidates_read's."""
        gates = self._of_inputs(self._lstm.input_to_hidden, z, action)
        if read is None:
            return gates
        return gates + self._move_to_gates(read[0]) + self._taken_to_gates(read[1])

    def _check_move(self, action: tf.Tensor) -> None:
        """A move outside the rule set's is an error: `_of_inputs` reads a move modulo R,
        which would wrap it silently onto some rule."""
        tf.debugging.assert_less(action, self.n_moves, message="M: a move outside the rule set's moves")
        tf.debugging.assert_non_negative(action, message="M: a negative move")

    def _lstm_step(self, gates_x: tf.Tensor, state: snt.LSTMState) -> tuple[tf.Tensor, snt.LSTMState]:
        """snt.LSTM's step (gates i, f, g, o) from its input gates [N, 4H]."""
        gates = gates_x + tf.matmul(state.hidden, self._lstm.hidden_to_hidden) + self._lstm.b
        i, f, g, o = tf.split(gates, num_or_size_splits=4, axis=1)
        cell = tf.sigmoid(f) * state.cell + tf.sigmoid(i) * tf.tanh(g)
        hidden = tf.sigmoid(o) * tf.tanh(cell)
        return hidden, snt.LSTMState(hidden=hidden, cell=cell)

    def _head_features(self, hidden: tf.Tensor, z: tf.Tensor, action: tf.Tensor,
                       read: tuple[tf.Tensor, tf.Tensor] | None) -> tf.Tensor:
        """The head MLP (one ReLU layer) on [hidden, z, one_hot(action), E[move], taken]."""
        w, h = self._feature_layer.w, self.config.hidden
        features = tf.matmul(hidden, w[:h]) + self._of_inputs(w[h:], z, action) + self._feature_layer.b
        if read is not None:
            features += self._move_to_features(read[0]) + self._taken_to_features(read[1])
        return tf.nn.relu(features)

    def _predict(self, hidden: tf.Tensor, z: tf.Tensor, action: tf.Tensor,
                 read: tuple[tf.Tensor, tf.Tensor] | None) -> MDNOutput:
        """Heads on flat [N, ...] tensors."""
        k, zdim = self.config.mixtures, self.config.latent_dim
        params = self._mdn(hidden)
        logits = params[:, :k]
        delta, log_sigma = tf.split(tf.reshape(params[:, k:], [-1, k, 2 * zdim]), 2, axis=-1)
        heads = self._heads(self._head_features(hidden, z, action, read))
        r, slots, shape = self.n_actions, self._slots, [-1, self.n_actions, self.config.top_locations]
        rewards_end = 2 + r + 2 * slots
        slot_logits = tf.reshape(heads[:, 2 + r:2 + r + slots], shape)
        if self.config.carry_candidates:
            changed = tf.reshape(heads[:, rewards_end:], shape)
        else:
            changed = tf.fill(tf.shape(slot_logits), ALWAYS_CHANGED)
        return MDNOutput(logits=logits, mu=z[:, None, :] + delta,
                         log_sigma=tf.clip_by_value(log_sigma, _LOG_SIGMA_MIN, _LOG_SIGMA_MAX),
                         reward=heads[:, 0] * self._reward_scale, done_logit=heads[:, 1],
                         mask_logits=heads[:, 2:2 + r],
                         slot_logits=slot_logits,
                         slot_rewards=tf.reshape(heads[:, 2 + r + slots:rewards_end], shape) * self._reward_scale,
                         changed_logits=changed)

    def step(self, z: tf.Tensor, action: tf.Tensor, state: snt.LSTMState,
             taken: tf.Tensor | None = None) -> tuple[MDNOutput, snt.LSTMState]:
        """One step: z [B, Z], action [B] int32 moves (or xfer ids), state, taken [B] the
        taken candidate's reward (None: unknown) -> (MDNOutput [B, ...], state)."""
        self._build(z)
        read = self._candidates_read(z, action, taken)
        hidden, state = self._lstm_step(self._gates_x(z, action, read), state)
        return self._predict(hidden, z, action, read), state

    def step_reward(self, z: tf.Tensor, action: tf.Tensor, state: snt.LSTMState,
                    taken: tf.Tensor | None = None) -> tf.Tensor:
        """The reward [B] of `step` alone (its other heads not computed)."""
        self._build(z)
        read = self._candidates_read(z, action, taken)
        hidden, _ = self._lstm_step(self._gates_x(z, action, read), state)
        features = self._head_features(hidden, z, action, read)
        return (tf.linalg.matvec(features, self._heads.w[:, 0]) + self._heads.b[0]) * self._reward_scale

    def __call__(self, z_seq: tf.Tensor, actions: tf.Tensor, mask: tf.Tensor | None = None,
                 taken: tf.Tensor | None = None) -> MDNOutput:
        """Whole episodes from their start: z_seq [B, T, Z], actions [B, T] int32 moves,
        mask [B, T] (1 = real step; on padding the state is held), taken [B, T] the taken
        candidates' rewards (None: unknown) -> MDNOutput [B, T, ...].
        """
        self._build(z_seq)
        batch, steps = tf.shape(z_seq)[0], tf.shape(z_seq)[1]
        flat_z, flat_actions = tf.reshape(z_seq, [batch * steps, -1]), tf.reshape(actions, [-1])
        flat_taken = None if taken is None else tf.reshape(taken, [-1])
        read = self._candidates_read(flat_z, flat_actions, flat_taken)
        gates_x = tf.reshape(self._gates_x(flat_z, flat_actions, read),
                             [batch, steps, 4 * self.config.hidden])
        if mask is None:
            mask = tf.ones([batch, steps], z_seq.dtype)
        time_major = (tf.transpose(gates_x, [1, 0, 2]), tf.transpose(tf.cast(mask, gates_x.dtype))[..., None])

        def cell(carry, x):
            _, state = carry
            gates_t, m_t = x
            out, new = self._lstm_step(gates_t, state)
            held = snt.LSTMState(hidden=m_t * new.hidden + (1 - m_t) * state.hidden,
                                 cell=m_t * new.cell + (1 - m_t) * state.cell)
            return out, held

        init = self.initial_state(batch)
        hidden, _ = tf.scan(cell, time_major, initializer=(init.hidden, init))
        hidden = tf.reshape(tf.transpose(hidden, [1, 0, 2]), [batch * steps, self.config.hidden])
        out = self._predict(hidden, flat_z, flat_actions, read)
        k, zdim, slots = self.config.mixtures, self.config.latent_dim, [batch, steps, self.n_actions, -1]
        return MDNOutput(logits=tf.reshape(out.logits, [batch, steps, k]),
                         mu=tf.reshape(out.mu, [batch, steps, k, zdim]),
                         log_sigma=tf.reshape(out.log_sigma, [batch, steps, k, zdim]),
                         reward=tf.reshape(out.reward, [batch, steps]),
                         done_logit=tf.reshape(out.done_logit, [batch, steps]),
                         mask_logits=tf.reshape(out.mask_logits, [batch, steps, self.n_actions]),
                         slot_logits=tf.reshape(out.slot_logits, slots),
                         slot_rewards=tf.reshape(out.slot_rewards, slots),
                         changed_logits=tf.reshape(out.changed_logits, slots))

    def mixture(self, out: MDNOutput, tau: float | None = None) -> tfd.Distribution:
        """p(z_{t+1}) at temperature tau (default config.tau): a MixtureSameFamily of
        diagonal Gaussians with batch shape out.logits.shape[:-1] and event [Z]."""
        tau = self.config.tau if tau is None else tau
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        return tfd.MixtureSameFamily(
            mixture_distribution=tfd.Categorical(logits=out.logits / tau),
            components_distribution=tfd.MultivariateNormalDiag(
                loc=out.mu, scale_diag=tf.exp(out.log_sigma) * math.sqrt(tau)))

    def sample_z(self, out: MDNOutput, tau: float | None = None, seed=None) -> tf.Tensor:
        """One draw of z_{t+1} [B, Z] from `mixture(out, tau)` (seed: a stateless [2]
        seed, or an int): a component from softmax(logits / tau), then its Gaussian with
        the variances scaled by tau. Drawn directly (not through tfp), which is what
        keeps a dream step fast."""
        tau = self.config.tau if tau is None else tau
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        seed = tf.constant([seed, 0], tf.int32) if isinstance(seed, int) else (
            tf.constant([0, 0], tf.int32) if seed is None else tf.cast(seed, tf.int32))
        component = tf.random.stateless_categorical(out.logits / tau, 1, seed=seed, dtype=tf.int32)[:, 0]
        mu = tf.gather(out.mu, component, batch_dims=1)
        log_sigma = tf.gather(out.log_sigma, component, batch_dims=1)
        eps = tf.random.stateless_normal(tf.shape(mu), seed=seed + tf.constant([0, 1], tf.int32))
        return mu + tf.exp(log_sigma) * math.sqrt(tau) * eps

    def loss(self, z_seq: tf.Tensor, actions: tf.Tensor, next_z: tf.Tensor, rewards: tf.Tensor,
             dones: tf.Tensor, next_masks: tf.Tensor, next_top_rewards: tf.Tensor,
             mask: tf.Tensor, next_changed: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Losses averaged over real steps (mask [B, T]; next_top_rewards [B, T, R, L], -inf
        where a rule has fewer than L locations):
        {"total", "z_nll" (nats per latent dim), "reward" (MSE in reward_scale units), "done" (BCE),
        "mask" (BCE per xfer), "slot" (BCE per (rule, l) slot), "slot_reward" (squared
        error in reward_scale units of E[reward * 1(slot exists)] over all slots, per slot
        that exists)} with total = z_nll + weighted head losses; with carry_candidates
        also "changed" (BCE per slot of `next_changed` [B, T, R, L], the slots that differ
        from the carried candidates, worldmodel/candidate_carry.changed; a changed slot
        weighs changed_weight), weighted as the slots."""
        c = self.config
        out = self(z_seq, actions, mask, taken=rewards)  # the step reward is the taken candidate's
        mask = tf.cast(mask, tf.float32)
        steps = tf.maximum(tf.reduce_sum(mask), 1.0)
        mean = lambda per_step: tf.reduce_sum(per_step * mask) / steps  # noqa: E731
        z_nll = mean(-self.mixture(out, tau=1.0).log_prob(next_z)) / c.latent_dim
        reward = mean(tf.square((out.reward - rewards) / self._reward_scale))
        done = mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=dones, logits=out.done_logit))
        mask_bce = mean(tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=next_masks, logits=out.mask_logits), -1))
        exists = tf.math.is_finite(next_top_rewards)
        slot_bce = mean(tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(exists, tf.float32), logits=out.slot_logits), [-2, -1]))
        # The slot reward head predicts E[reward * 1(slot exists)]: where M is unsure that a
        # candidate is there, its reward shrinks toward 0, so a dream cannot be exploited
        # through candidates M imagines (0 where none exists; normalised per real slot).
        error = slot_reward_error(out.slot_rewards, tf.where(exists, next_top_rewards, 0.0), exists,
                                  self._reward_scale, c.slot_reward_loss, tf.math.asinh, tf.where)
        steps_mask = mask[..., None, None]
        real_slots = tf.reduce_sum(tf.cast(exists, tf.float32) * steps_mask)
        slot_reward = tf.reduce_sum(tf.square(error) * steps_mask) / tf.maximum(real_slots, 1.0)
        changed = tf.constant(0.0)
        if c.carry_candidates:
            if next_changed is None:
                raise ValueError("MDNRNN.loss: carry_candidates needs next_changed (the slots that changed)")
            changed = mean(tf.reduce_mean(tf.nn.weighted_cross_entropy_with_logits(
                labels=tf.cast(next_changed, tf.float32), logits=out.changed_logits,
                pos_weight=c.changed_weight), [-2, -1]))
        total = (z_nll + c.reward_weight * reward + c.done_weight * done + c.mask_weight * mask_bce
                 + c.candidate_weight * (slot_bce + slot_reward + changed))
        return {"total": total, "z_nll": z_nll, "reward": reward, "done": done, "mask": mask_bce,
                "slot": slot_bce, "slot_reward": slot_reward, "changed": changed}
