"""The subcommands of `rlflow` (rlflow.cli), one module each: a docstring (its help),
`add_arguments(parser)` and `run(args) -> exit code`."""

#: The GPU math modes (taso_env.gpu.cuda_backend.MATH_MODES, spelled out here so that
#: building the parser does not import the engine).
MATH_MODES = ("fp32", "tf32", "fp16", "bf16")
