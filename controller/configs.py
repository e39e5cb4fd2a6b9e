"""The controller's and the model-free agent's settings: PPO's hyper-parameters, how the
controller is trained in the dream, and the model-free agent on the real environment.
Plain dataclasses without TensorFlow, so `rlflow train-controller --help` and
`rlflow train-model-free --help` state their flags without importing it.
"""

from __future__ import annotations

import dataclasses

from worldmodel.configs import DreamConfig


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    num_dreams: int = 64
    rollout_steps: int = 32
    epochs: int = 4
    minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    learning_rate: float = 1e-3
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5

    def __post_init__(self):
        if self.num_dreams < 1 or self.rollout_steps < 1 or self.epochs < 1 or self.minibatches < 1:
            raise ValueError("num_dreams, rollout_steps, epochs and minibatches must be >= 1")
        if (self.num_dreams * self.rollout_steps) % self.minibatches:
            raise ValueError("num_dreams * rollout_steps must divide into minibatches")
        if not (0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1 and self.clip > 0):
            raise ValueError("need 0 <= gamma <= 1 (0: myopic), 0 <= gae_lambda <= 1, clip > 0")


@dataclasses.dataclass(frozen=True)
class ControllerTrainConfig:
    """PPO updates in the dream; `hidden` is the controller's MLP; `recorded_starts`
    recorded observations (beside each graph's start) where dreams may start."""

    updates: int = 100
    hidden: tuple[int, ...] = (128, 128)
    seed: int = 0
    recorded_starts: int = 256
    log_every: int = 5
    checkpoint_every: int = 10
    dream: DreamConfig = dataclasses.field(default_factory=DreamConfig)
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)

    def __post_init__(self):
        if self.updates < 0 or self.recorded_starts < 0:
            raise ValueError(f"updates and recorded_starts must be >= 0, got {self.updates}, {self.recorded_starts}")

    @classmethod
    def from_dict(cls, d: dict) -> ControllerTrainConfig:
        d = dict(d)
        d["hidden"] = tuple(d["hidden"])
        d["dream"] = DreamConfig(**d["dream"])
        d["ppo"] = PPOConfig(**d["ppo"])
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class ModelFreeConfig:
    """PPO on the real environment.

    Attributes:
        graphs: training graphs (episodes start on one at random).
        real_steps: real environment steps of training in all.
        steps_per_update: real steps collected per PPO update.
        horizon: step limit of an episode.
        hidden: width of the GNN and MLPs.
        message_passing_steps: GraphNetwork blocks.
        max_candidates: candidates scored per step (the first ones in rule order).
        epochs / minibatches: PPO passes over each update's steps.
        learning_rate / gamma / gae_lambda / clip / entropy_coef / value_coef: PPO.
        eval_every: updates between learning-curve points.
        cost_model: the env's cost model.
        seed: seed of episodes, sampling and initial weights.
    """

    graphs: tuple[str, ...] = ("squeezenet", "nasrnn")
    real_steps: int = 2000
    steps_per_update: int = 64
    horizon: int = 20
    hidden: int = 64
    message_passing_steps: int = 2
    max_candidates: int = 512
    epochs: int = 4
    minibatches: int = 2
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    eval_every: int = 5
    cost_model: str = "analytic:h100"
    seed: int = 0

    def __post_init__(self):
        if not self.graphs:
            raise ValueError("ModelFreeConfig.graphs must name at least one graph")
        for name in ("real_steps", "steps_per_update", "horizon", "hidden", "message_passing_steps",
                     "max_candidates", "epochs", "minibatches", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelFreeConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.steps_per_update < self.minibatches:
            raise ValueError("steps_per_update must be >= minibatches")
