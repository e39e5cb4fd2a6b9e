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


def search_convolutions_in_child(args, *, signatures: list[str] | None = None, graphs: list[str] | None = None,
                                 dims: dict[str, int] | None = None) -> dict:
    """Convolution algorithms chosen by a child process before this process measures
    anything, so that it measures with cached choices and never searches (searching
    slows the process that does it: taso_env/gpu/conv_algorithm_search.py): for the
    cost-table `signatures`, or by building each of `graphs`' executors. Nothing is
    started with `args.search_here` or where a child would not help. Returns the child's
    summary, or why none ran ({"skipped": ...} / {"failed": ...})."""
    import sys

    from taso_env.gpu import conv_algorithm_search as search

    if args.search_here:
        return {"skipped": "--search-here"}
    why_not = search.child_search_skipped()
    if why_not:
        return {"skipped": why_not}
    try:
        if graphs is not None:
            return search.graph_search_in_child(graphs, args.math, dims=dims)
        return search.search_in_child(signatures or [], args.math)
    except search.ConvSearchError as err:  # measure anyway, searching here
        print(f"rlflow: {err}; searching in this process instead", file=sys.stderr, flush=True)
        return {"failed": str(err)}
