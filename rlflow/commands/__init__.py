"""The subcommands of `rlflow` (rlflow.cli), one module each: a docstring (its help),
`add_arguments(parser)` and `run(args) -> exit code`."""

#: The GPU math modes (taso_env.gpu.cuda_backend.MATH_MODES, spelled out here so that
#: building the parser does not import the engine).
MATH_MODES = ("fp32", "tf32", "fp16", "bf16")


def add_dims_argument(parser) -> None:
    """--dims NAME=SIZE ...: sizes of an ONNX export's symbolic input dimensions."""
    parser.add_argument("--dims", nargs="+", default=[], metavar="NAME=SIZE",
                        help="sizes of the model's symbolic input dimensions, by name (batch=1 sequence=128) "
                             "or as INPUT:AXIS=SIZE for an unnamed one; a graph spec can carry them too: "
                             "'model.onnx[batch=1,sequence=128]'")


def parse_dims(values) -> dict[str, int]:
    """{name: size} of --dims values; ConfigError naming a malformed one."""
    from taso_env.graphs import parse_dims as parse

    return parse(values, "--dims")
