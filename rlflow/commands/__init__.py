"""The subcommands of `rlflow` (rlflow.cli), one module each: a docstring (its help),
`add_arguments(parser)` and `run(args) -> exit code`."""
