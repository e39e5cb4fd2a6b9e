"""Learned tuners of the GPU executor's plans: the GA-DQN (`gadqn`, TensorFlow).

The tuning framework (`taso_env.tuning`: spaces, records, the GA, XGBoost, random and
grid tuners, the driver) is part of the engine package and imports no learning
framework; the tuners that learn live here, on the learning side with `worldmodel` and
`controller`, and plug into it by registration: importing this package registers
"gadqn" with `taso_env.tuning.tuners.register_tuner` (TensorFlow is imported only when a
GA-DQN tuner is made). `rlflow tune` imports it.
"""

from __future__ import annotations

from taso_env.tuning.space import TuningSpace
from taso_env.tuning.tuners import Tuner, register_tuner


def _gadqn(space: TuningSpace, seed: int = 0, **params) -> Tuner:
    from tuner_agents.gadqn import GADQNTuner

    return GADQNTuner(space, seed, **params)


register_tuner("gadqn", _gadqn)
