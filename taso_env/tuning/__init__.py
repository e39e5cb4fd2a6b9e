"""Auto-tuning of the GPU executor's implementation choices (docs/tuning.md).

- `space`: the knobs per op (cuDNN convolution choice incl. epilogue fusion, launch
  parameters of our own kernels), configs as integer genes, validity, plans.
- `records`: HDF5 tuning records and their replay (sum of measured parts).
- `measurer`: records a graph's space on the GPU; measures configs live.
- `tuners`: random, grid, GA, XGBoost tuners, and the registry the learned ones plug
  into (the GA-DQN: `tuner_agents.gadqn`, registered by `import tuner_agents`).
- `driver`: the record / tune / benchmark / experiment modes of `rlflow tune`.

The best plan per (graph, device, math mode) is kept by `taso_env.gpu.plan_store`,
beside the executor that runs it. Nothing here imports TensorFlow.
"""
