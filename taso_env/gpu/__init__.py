"""The GPU face: `cuda_backend` (the CUDA executor of taso_env/csrc/gpu, behind the
Cython module `taso_env._cuda`) and `cost_table` (measured op costs in HDF5). Nothing
here imports TensorFlow: the GPU machine has none."""
