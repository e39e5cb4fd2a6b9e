"""The GPU layer: `cuda_backend` (the CUDA executor of taso_env/csrc/gpu, behind the
Cython module `taso_env._cuda`), `cost_table` (measured op costs in HDF5),
`cost_models` (the `table` and `cuda` cost models, registered in the engine's registry),
`plan_store` (tuned executor plans the executor runs), `interleaved_measurement` and
`conv_algorithm_search`. Nothing here imports TensorFlow: the GPU machine has none."""
