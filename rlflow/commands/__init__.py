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


def search_convolutions_in_child(args, search) -> dict:
    """Convolution algorithms chosen by a child process before this process measures
    anything, so that it measures with cached choices and never searches (searching
    slows the process that does it: taso_env/gpu/conv_algorithm_search.py).
    `search(module)` starts the child (one of the module's *_in_child functions); with
    `args.search_here`, or where a child would not help, nothing is started. Returns the
    child's summary, or why none ran ({"skipped": ...} / {"failed": ...})."""
    import sys

    from taso_env.gpu import conv_algorithm_search as module

    if args.search_here:
        return {"skipped": "--search-here"}
    why_not = module.child_search_skipped()
    if why_not:
        return {"skipped": why_not}
    try:
        return search(module)
    except module.ConvSearchError as err:  # measure anyway, searching here
        print(f"rlflow: {err}; searching in this process instead", file=sys.stderr, flush=True)
        return {"failed": str(err)}
