"""Auto-tuning of the GPU executor's implementation choices (docs/tuning.md).

- `space`: the knobs per op (cuDNN convolution choice incl. epilogue fusion, launch
  parameters of our own kernels), configs as integer genes, validity, plans.
- `records`: HDF5 tuning records and their replay (sum of measured parts).
- `measurer`: records a graph's space on the GPU; measures configs live.
- `plan_store`: the best plan per (graph, device, math mode), reused by new processes.
- `tuners`: random, grid, GA, XGBoost tuners; `gadqn`: the GA-DQN tuner (TensorFlow).

Nothing here imports TensorFlow except `gadqn`.
"""
