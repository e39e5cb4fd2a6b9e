"""The substitution engine: the graph IR (`graph`, `builder`), cost models
(`cost_model`), candidates, rule application and search (`search`), the numpy reference
executor (`reference`, `reference_ops`) and text reports (`report`). The C++ core
underneath is `taso_env/csrc/engine` behind the Cython module `taso_env._core`."""
