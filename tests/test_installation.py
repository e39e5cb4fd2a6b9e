"""The installed product: the tests see the installed package (not the source tree),
the `rlflow` command and its manners, the shipped data, the scripts as thin faces."""

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import taso_env
from taso_env import shipped_data

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not os.environ.get("RLFLOW_TEST_INSTALLED"), reason="only under tests/run_all.sh")
def test_tests_import_the_installed_package_not_the_source_tree():
    assert not Path(taso_env.__file__).resolve().is_relative_to(REPO), taso_env.__file__


def test_an_unbuilt_checkout_on_the_module_path_says_so_and_what_to_run(tmp_path):
    """`python -c` and `python -m` put the working folder first on the module path, so in
    a source checkout they import its packages ahead of the installed ones; where its
    engine is not built, the ImportError says that instead of a circular import."""
    shutil.copytree(REPO / "taso_env", tmp_path / "taso_env",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "csrc"))
    # -S: no site-packages, whose editable-install finder would find an engine built elsewhere
    done = subprocess.run([sys.executable, "-S", "-c", "import taso_env"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert f"taso_env was imported from {tmp_path / 'taso_env'}, a source checkout whose compiled engine" \
           in done.stderr, done.stderr
    assert "use the `rlflow` command" in done.stderr


def test_shipped_data_is_found():
    assert {"resnet18", "resnet50", "squeezenet1_1", "bert_base"} <= set(shipped_data.models())
    assert {"h100_fp32", "h100_tf32", "h100_fp16"} <= set(shipped_data.cost_tables())
    g = taso_env.graphs.load("squeezenet1_1")
    assert g.num_ops == 65
    assert taso_env.graphs.load("data/models/squeezenet1_1.onnx").num_ops == 65


def _rlflow(*args, cwd=None):
    return subprocess.run(["rlflow", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _side_by_side(commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Each command's result, the commands run a core each at a time."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(lambda c: subprocess.run(c, capture_output=True, text=True, timeout=300), commands))


def test_console_command_lists_every_stage():
    result = _rlflow("--help")
    assert result.returncode == 0, result.stderr
    commands = ["collect", "train-vae", "train-mdnrnn", "train-controller", "evaluate", "optimize", "measure",
                "pipeline"]
    for command, sub in zip(commands, _side_by_side([["rlflow", c, "--help"] for c in commands])):
        assert f"  {command} " in result.stdout
        assert sub.returncode == 0 and f"usage: rlflow {command}" in sub.stdout, sub.stderr


def test_every_command_states_its_flags_without_importing_tensorflow():
    """--help and usage errors end before TensorFlow is imported (seconds on a small
    machine): the stages' configs, which make their flags, are TensorFlow-free."""
    probe = ("import sys\n"
             "from rlflow.cli import COMMANDS, command_parser\n"
             "helps = [command_parser(c).format_help() for c in COMMANDS]\n"
             "print(len(helps), 'tensorflow' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    from rlflow.cli import COMMANDS

    assert result.stdout.split() == [str(len(COMMANDS)), "False"]
    refused = _rlflow("train-vae", "--steps", "many")
    assert refused.returncode == 2 and "invalid int value: 'many'" in refused.stderr
    assert "cuda" not in refused.stderr and "oneDNN" not in refused.stderr, refused.stderr


def test_unknown_command_is_refused():
    result = _rlflow("colect")
    assert result.returncode == 2 and "unknown command 'colect'" in result.stderr


@pytest.mark.parametrize("spec, message", [
    ("missing.onnx", "missing.onnx: no such file"),
    ("nosuchnet", "unknown graph 'nosuchnet'"),
])
def test_bad_model_is_one_line_and_exit_2(spec, message, tmp_path):
    result = _rlflow("optimize", spec, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"rlflow optimize: error: {result.stderr.split('error: ', 1)[1].strip()}"
    assert message in result.stderr and "Traceback" not in result.stderr


def test_non_onnx_file_is_a_typed_error(tmp_path):
    bogus = tmp_path / "rollouts.h5"
    bogus.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(64))
    result = _rlflow("optimize", str(bogus))
    assert result.returncode == 2 and "not a valid ONNX model" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_config_is_a_typed_error(tmp_path):
    result = _rlflow("collect", "--graphs", "nasrnn", "--episodes", "2", "--horizon", "-3",
                     "--out", str(tmp_path / "r" / "rollouts.h5"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "horizon" in result.stderr


def test_training_stage_without_rollouts_is_one_line_without_tensorflow_noise(tmp_path):
    result = _rlflow("train-vae", "--run", str(tmp_path / "empty"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr  # one line
    assert "rollouts.h5" in result.stderr and "oneDNN" not in result.stderr and "cuda" not in result.stderr


def test_optimize_writes_a_model_onnxruntime_agrees_with(tmp_path):
    out = tmp_path / "sq.onnx"
    result = _rlflow("optimize", "squeezenet1_1", "--method", "greedy", "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "equivalent" in result.stdout and out.exists()


def test_optimize_prices_graphs_by_the_measured_table_of_its_math_mode(tmp_path):
    """By default a graph is optimised for the GPU as rlflow's executor runs it (the shipped
    H100 table of --math), not by the analytic model; --cost-model still chooses."""
    import json

    import taso_env as te

    for math, table in (("fp32", "h100_fp32"), ("tf32", "h100_tf32"), ("bf16", "h100_fp16")):
        out = tmp_path / f"{math}.json"
        result = _rlflow("optimize", "squeezenet1_1", "--method", "greedy", "--math", math, "--json", str(out),
                         "--no-check", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        summary = json.loads(out.read_text())
        assert summary["cost_model"] == f"table:{table}" and f"(table:{table})" in result.stdout
        graph = te.graphs.load("squeezenet1_1")
        assert summary["initial_cost_ms"] == pytest.approx(graph.cost(f"table:{table}"))
        assert summary["written"] == "optimised"
    chosen = _rlflow("optimize", "squeezenet1_1", "--method", "greedy", "--cost-model", "analytic:h100",
                     "--json", str(tmp_path / "a.json"), "--no-check", cwd=tmp_path)
    assert chosen.returncode == 0 and json.loads((tmp_path / "a.json").read_text())["cost_model"] == "analytic:h100"


def test_optimize_writes_the_original_where_the_optimised_model_measures_slower(tmp_path, monkeypatch, capsys):
    """--measure cuda with a GPU on which the optimised model measures slower: -o writes the
    original (and says so) unless --keep-slower. The GPU's two medians are given here
    (tests/test_cuda.py measures the other case on a real GPU)."""
    import json

    from rlflow.cli import main
    from taso_env.gpu import cuda_backend
    from taso_env.gpu import interleaved_measurement as im

    monkeypatch.setattr(cuda_backend, "require", lambda: None)
    monkeypatch.setattr(cuda_backend, "device_name", lambda: "a GPU")
    monkeypatch.setattr(im, "measure_side_by_side", lambda graphs, **kwargs: [1.0, 1.25])
    original = taso_env.graphs.load("nasrnn")
    for extra, written in (([], "original"), (["--keep-slower"], "optimised")):
        out, summary = tmp_path / f"{written}.onnx", tmp_path / f"{written}.json"
        assert main(["optimize", "nasrnn", "--method", "greedy", "--measure", "cuda", "-o", str(out),
                     "--json", str(summary), *extra]) == 0
        printed = capsys.readouterr().out
        assert json.loads(summary.read_text())["written"] == written
        assert ("measures slower than the original" in printed) == (written == "original")
        assert (taso_env.graphs.load(str(out)).hash() == original.hash()) == (written == "original")


def test_optimize_with_a_run_that_is_not_there_or_with_a_method_too_is_a_typed_error(tmp_path):
    missing = _rlflow("optimize", "squeezenet1_1", "--run", str(tmp_path / "no_run"))
    assert missing.returncode == 2 and "no such run folder" in missing.stderr, missing.stderr
    both = _rlflow("optimize", "squeezenet1_1", "--run", str(tmp_path), "--method", "greedy")
    assert both.returncode == 2 and "not both" in both.stderr, both.stderr
    for result in (missing, both):
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_measuring_in_no_rounds_is_a_typed_error_before_any_gpu_is_needed(tmp_path):
    result = _rlflow("measure", "squeezenet1_1", "--rounds", "0", cwd=tmp_path)
    assert result.returncode == 2 and "--rounds" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_scripts_are_faces_of_the_commands():
    scripts = sorted((REPO / "scripts").glob("*.py"))
    for script, result in zip(scripts, _side_by_side([[sys.executable, str(s), "--help"] for s in scripts])):
        text = script.read_text()
        assert "script_main(" in text and len(text.splitlines()) < 20, script.name
        assert result.returncode == 0 and "usage: " + script.name in result.stdout, (script.name, result.stderr)


def test_a_command_run_in_process_leaves_the_default_cost_model_as_it_was(capsys):
    """`rlflow inspect --cost-model X` sets the process default for its own run; called as
    `rlflow.cli.main` inside another program (or a test) it must not leave it changed."""
    from rlflow.cli import main
    from taso_env.engine.cost_model import get_cost_model

    before = get_cost_model().name
    assert main(["inspect", "squeezenet", "--cost-model", "analytic:a100"]) == 0
    assert "squeezenet" in capsys.readouterr().out
    assert get_cost_model().name == before
