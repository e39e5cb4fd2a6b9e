"""The world model's settings: V's and M's hyper-parameters, how each is trained, and the
dream's. Plain dataclasses without TensorFlow, so `rlflow train-vae --help` and the other
commands state their flags (rlflow.config_flags) without importing it; the modules that
use them (graph_vae, vae_training, mdnrnn, mdnrnn_training, dream_env) import them from
here.
"""

from __future__ import annotations

import dataclasses

#: MDNRNNConfig.slot_reward_loss's choices, and the asinh loss's knee in reward_scale units
SLOT_REWARD_LOSSES = ("squared", "asinh")
SLOT_REWARD_KNEE = 0.1
#: DreamConfig.reward's choices
DREAM_REWARDS = ("step", "best_so_far")


def slot_reward_error(predicted, target, exists, reward_scale: float, loss: str, asinh, where):
    """The candidates' reward error that M's loss squares, in reward_scale units:
    (predicted - target) / reward_scale ("squared"); with "asinh", at the slots where a
    candidate exists, the difference of asinh(x / knee), knee = SLOT_REWARD_KNEE x
    reward_scale (an error well below the knee weighs 1 / SLOT_REWARD_KNEE^2 times more
    than squared, one far above it by its log ratio), and squared elsewhere: the slots
    without a candidate (target 0, most of them) would otherwise outweigh every other
    head of M. `asinh` and `where` are the array library's (tf.math.asinh and tf.where,
    np.arcsinh and np.where), so training and the held-out metric compute one thing."""
    squared = (predicted - target) / reward_scale
    if loss == "asinh":
        knee = SLOT_REWARD_KNEE * reward_scale
        return where(exists, asinh(predicted / knee) - asinh(target / knee), squared)
    return squared


@dataclasses.dataclass(frozen=True, kw_only=True)
class GraphVAEConfig:
    """Hyper-parameters of GraphVAE.

    Attributes:
        n_rules: rules of the rule set (the action space has n_rules + 1 xfers).
        latent_dim: Z, the size of z.
        hidden: H, the width of every MLP and of the graph embedding (64 reconstructs as
            well as 128 on the issue's graphs at ~3x the training speed on 2 cores).
        message_passing_steps: GraphNetwork blocks between encoder and embedding.
        beta: weight of the KL term.
        cost_sigma: likelihood scale of the two cost features (0.01 weighs them so
            heavily that the rule masks are learned far more slowly: 21% vs 45% of
            held-out masks exactly right after 1,500 steps on 400 episodes).
        count_sigma: likelihood scale of the log1p candidate counts.
        histogram_weight: pseudo-count of the op-type histogram's likelihood.
    """

    n_rules: int
    latent_dim: int = 32
    hidden: int = 64
    message_passing_steps: int = 3
    beta: float = 1.0
    cost_sigma: float = 0.05
    count_sigma: float = 0.1
    histogram_weight: float = 100.0

    def __post_init__(self):
        for name in ("n_rules", "latent_dim", "hidden", "message_passing_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"GraphVAEConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.beta < 0:
            raise ValueError(f"GraphVAEConfig.beta must be >= 0, got {self.beta}")
        for name in ("cost_sigma", "count_sigma", "histogram_weight"):
            if getattr(self, name) <= 0:
                raise ValueError(f"GraphVAEConfig.{name} must be > 0, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VAETrainConfig:
    """How V is trained.

    Attributes:
        steps: total optimiser steps (a rerun continues up to this number).
        batch_size: graphs per step.
        learning_rate: Adam's initial step size, cosine-decayed to 5% at `steps`.
        max_grad_norm: global gradient-norm clip.
        log_every / eval_every / save_every: gates of the loop, in steps.
        eval_observations: held-out observations evaluated (a fixed random subset).
        seed: batch order and z noise.
    """

    steps: int = 2000
    batch_size: int = 32
    learning_rate: float = 1e-3
    max_grad_norm: float = 100.0
    log_every: int = 50
    eval_every: int = 500
    save_every: int = 500
    eval_observations: int = 4000
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "log_every", "eval_every", "save_every", "eval_observations"):
            if getattr(self, name) < 1:
                raise ValueError(f"VAETrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0 or self.max_grad_norm <= 0:
            raise ValueError("VAETrainConfig.learning_rate and max_grad_norm must be > 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MDNRNNConfig:
    """Hyper-parameters of MDNRNN.

    Attributes:
        n_rules: rules of the rule set (R = n_rules + 1 xfers).
        latent_dim: Z, V's latent size.
        hidden: H, LSTM units (also the width of the reward/done/mask MLP).
        mixtures: K, Gaussian components of p(z_{t+1}).
        tau: default temperature (mixture logits / tau, sigmas * sqrt(tau)).
        reward_scale: reward units per unit of the reward head; the reward loss is the
            MSE in these units, so that it weighs like the other terms whatever the
            cost model's reward magnitudes. 0: train_mdnrnn sets it to the training
            rewards' standard deviation (a model built with 0 uses 1).
        reward_weight / done_weight / mask_weight: loss weights of the heads (the
            next-z term has weight 1 and is in nats per latent dimension).
        top_locations: K, the candidates per rule M predicts after a step (each
            rule's K most rewarding locations: whether each exists and its reward; the
            env's `top_locations`, recorded in the rollouts as infos/top_rewards).
        candidate_weight: loss weight of those predictions (existence BCE + reward MSE).
        slot_reward_loss: "squared": the candidates' reward error in reward_scale units,
            squared; "asinh": where a candidate exists, the error of asinh(reward / knee),
            knee = SLOT_REWARD_KNEE reward_scale units, squared (slot_reward_error): linear
            below the knee and logarithmic above it, so that rewards of a hundredth of the typical one (a
            ReLU fused back) are learned beside the typical ones instead of lost in them.
        candidate_inputs: M also reads each step's move (the rule and its location's rank
            among the rule's best, worldmodel/moves.py) and the taken candidate's reward,
            so that a dream can tell a rule that pays at one place from the same rule at
            another (the valley family). Off by default: on the README's main job it let
            the controller ride rewrite cycles to the step limit.
        carry_candidates: M predicts which of the next step's candidate slots differ
            from this step's carried over (worldmodel/candidate_carry.py: the taken
            slot gone, the rest as they were), and the dream keeps the carried ones
            where M predicts no change, instead of M re-imagining every slot from its
            state. Off: M predicts every slot (the earlier dream).
        changed_weight: with carry_candidates, the weight of a changed slot in that
            head's loss (an unchanged one weighs 1). About 0.1% of the slots change in a
            step, so at 1 M learns to predict almost no change, and the dream carries
            candidates a step removed (a merge after its entry was undone).
    """

    n_rules: int
    latent_dim: int = 32
    hidden: int = 256
    mixtures: int = 5
    tau: float = 1.0
    reward_scale: float = 0.0
    reward_weight: float = 1.0
    done_weight: float = 1.0
    mask_weight: float = 1.0
    top_locations: int = 4
    candidate_weight: float = 1.0
    candidate_inputs: bool = False
    slot_reward_loss: str = "squared"
    carry_candidates: bool = False
    changed_weight: float = 1.0

    def __post_init__(self):
        for name in ("n_rules", "latent_dim", "hidden", "mixtures", "top_locations"):
            if getattr(self, name) < 1:
                raise ValueError(f"MDNRNNConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.tau <= 0:
            raise ValueError(f"MDNRNNConfig.tau must be > 0, got {self.tau}")
        if self.reward_scale < 0:
            raise ValueError(f"MDNRNNConfig.reward_scale must be >= 0 (0: set from data), got {self.reward_scale}")
        if self.changed_weight <= 0:
            raise ValueError(f"MDNRNNConfig.changed_weight must be > 0, got {self.changed_weight}")
        for name in ("reward_weight", "done_weight", "mask_weight", "candidate_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"MDNRNNConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.slot_reward_loss not in SLOT_REWARD_LOSSES:
            raise ValueError(f"MDNRNNConfig.slot_reward_loss must be one of {SLOT_REWARD_LOSSES}, "
                             f"got {self.slot_reward_loss!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MDNRNNTrainConfig:
    """How M is trained.

    Attributes:
        steps: total optimiser steps (a rerun continues up to this number).
        batch_size: episodes per step (each a whole, padded episode).
        learning_rate: Adam's initial step size, cosine-decayed to 5% at `steps`.
        max_grad_norm: global gradient-norm clip.
        log_every / eval_every / save_every: gates of the loop, in steps.
        seed: batch order and z draws.
    """

    steps: int = 3000
    batch_size: int = 32
    learning_rate: float = 1e-3
    max_grad_norm: float = 10.0
    log_every: int = 50
    eval_every: int = 500
    save_every: int = 500
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "log_every", "eval_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"MDNRNNTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0 or self.max_grad_norm <= 0:
            raise ValueError("MDNRNNTrainConfig.learning_rate and max_grad_norm must be > 0")


@dataclasses.dataclass(frozen=True)
class DreamConfig:
    """Settings of the dream.

    Attributes:
        horizon: steps before truncation.
        tau: temperature of M's mixture (1 = as trained; > 1 more uncertain dreams).
        done_threshold: a step ends the episode when M's done probability exceeds it.
        mask_threshold: an xfer is valid when M's (or V's) mask probability exceeds it.
        invalid_penalty: reward of a masked-out xfer.
        step_cost: subtracted from the reward of every rewrite (not of stop), so a
            controller learns that a step must pay for itself and stops near its best
            graph; the real agent charges the same (controller.agent).
        detour_cost: charged in addition for a rewrite M predicts does not reduce the
            runtime (predicted reward <= 0), as the real agent does.
        reward: "step": a rewrite earns its candidate's reward (the runtime it saves);
            "best_so_far": it earns how far it takes the graph below the cheapest graph
            of the episode so far (0 while below it), so a dream's return is the gain of
            its best graph, what the evaluation keeps of an episode
            (controller.evaluation.episode_graph). A losing rewrite then costs only its
            charges and is paid back only if a later one beats the best so far: the
            valley's entry is worth its payback's surplus, and exploring losing rewrites
            no longer teaches the policy to stop at once (with "step" a -5% to -90%
            rewrite costs its loss; on the valley family C stopped everywhere within 15
            updates).
        Both charges apply to every reward.
    """

    horizon: int = 50
    tau: float = 1.0
    done_threshold: float = 0.5
    mask_threshold: float = 0.5
    invalid_penalty: float = -1.0
    step_cost: float = 0.02
    detour_cost: float = 0.25
    reward: str = "step"

    def __post_init__(self):
        if self.step_cost < 0 or self.detour_cost < 0:
            raise ValueError(f"step_cost and detour_cost must be >= 0, got {self.step_cost}, {self.detour_cost}")
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {self.horizon}")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
        if self.reward not in DREAM_REWARDS:
            raise ValueError(f"DreamConfig.reward must be one of {DREAM_REWARDS}, got {self.reward!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Which episodes train and which are held out.

    Attributes:
        held_out_fraction: share of episodes held out for evaluation (by id hash).
        split_seed: changes which episodes are held out.
        max_episodes: read at most this many episodes (lowest ids first; 0 = all).
    """

    held_out_fraction: float = 0.1
    split_seed: int = 0
    max_episodes: int = 0

    def __post_init__(self):
        if not 0.0 <= self.held_out_fraction < 1.0:
            raise ValueError(f"held_out_fraction must be in [0, 1), got {self.held_out_fraction}")
        if self.max_episodes < 0:
            raise ValueError(f"max_episodes must be >= 0, got {self.max_episodes}")
