"""Collection and evaluation on Ray (taso_env/env/ray_collection.py,
controller/ray_evaluation.py, taso_env/ray_cluster.py) on a real local Ray with 2 worker
CPUs, started once for the module exactly as `--ray` without an address starts it:
byte-identical episodes against the local path, a worker killed mid-run, a driver
killed with SIGKILL and rerun, evaluation equal to the local one, nothing listening
beyond 127.0.0.1, and the installed `rlflow collect --ray` / `rlflow evaluate --ray` run
from the repository root, from an unbuilt source checkout and from an unrelated folder."""

import filecmp
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import h5py
import pytest

from taso_env.env.collection import CollectConfig, collect
from taso_env.env.rollouts import RolloutReader

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed: pip install 'rlflow[ray]' to test --ray")

GRAPHS = ("squeezenet", "nasrnn")
EPISODES = 40
TASK_TITLE = "ray::rlflow_collect_episode"  # a Ray worker's process title while it plays an episode
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster():
    """The module's Ray: local, 2 CPUs, this process its driver (collect(ray="local")
    in this process reuses it)."""
    from taso_env.ray_cluster import ray_cluster

    with ray_cluster("local", num_cpus=2) as c:
        yield c


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The episodes collected in process (workers=0): what every Ray run must equal."""
    out = tmp_path_factory.mktemp("reference") / "rollouts.h5"
    cfg = CollectConfig(graphs=GRAPHS, episodes=EPISODES, out=str(out), workers=0, horizon=20, seed=7)
    collect(cfg)
    return cfg


def _assert_same_episode_files(cfg, reference_cfg):
    assert RolloutReader(cfg.out).episode_ids == list(range(EPISODES))
    names = sorted(os.listdir(cfg.out + ".episodes"))
    assert names == sorted(f"episode_{i}.h5" for i in range(EPISODES))  # no leftovers, no extras
    different = [n for n in names if not filecmp.cmp(os.path.join(cfg.out + ".episodes", n),
                                                     os.path.join(reference_cfg.out + ".episodes", n),
                                                     shallow=False)]
    assert not different, f"episode files differ from the local run: {different}"


def test_ray_collection_equals_local_bytes(cluster, reference, tmp_path):
    cfg = replace(reference, out=str(tmp_path / "rollouts.h5"), workers=2, ray="local")
    result = collect(cfg)
    assert (result.collected, result.total) == (EPISODES, EPISODES)
    assert result.backend.startswith("ray ") and "2 workers" in result.backend
    assert 0 < result.driver_seconds < result.seconds
    _assert_same_episode_files(cfg, reference)
    with h5py.File(cfg.out, "r") as f:  # the index records the backend and the config
        assert f.attrs["collect_backend"] == result.backend
        assert json.loads(f.attrs["collect_config"])["ray"] == "local"
    assert RolloutReader(cfg.out).meta.collect_backend == result.backend


def test_local_ray_listens_on_loopback_only(cluster):
    from taso_env.ray_cluster import descendants, is_loopback, listening_sockets

    assert cluster.started and cluster.address.startswith("127.0.0.1:")
    ray_processes = descendants(os.getpid())
    sockets = listening_sockets(ray_processes + [os.getpid()])
    assert len(ray_processes) >= 3 and len(sockets) >= 3  # GCS, raylet, workers, this driver
    assert all(is_loopback(address) for _, address, _ in sockets), sockets
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and is_loopback("::ffff:127.0.0.1")


def _episode_files(cfg) -> int:
    folder = cfg.out + ".episodes"
    return sum(n.endswith(".h5") for n in os.listdir(folder)) if os.path.isdir(folder) else 0


def _task_workers() -> list[int]:
    """Ray worker processes playing an episode now."""
    from taso_env.ray_cluster import descendants

    found = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(TASK_TITLE.encode()):
                    found.append(pid)
        except OSError:
            continue
    return found


def test_killed_worker_loses_nothing(cluster, reference, tmp_path):
    cfg = replace(reference, out=str(tmp_path / "rollouts.h5"), workers=2, ray="local")
    killed = []

    def kill_a_busy_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            if _episode_files(cfg) >= 4:
                for pid in _task_workers():
                    os.kill(pid, signal.SIGKILL)
                    killed.append((pid, _episode_files(cfg)))
                    break
            time.sleep(0.002)

    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    try:
        result = collect(cfg)
    finally:
        killer.join()
    assert killed, "no worker was caught playing an episode"
    assert killed[0][1] < EPISODES  # it died mid-run: its episode had to be played again
    assert (result.collected, result.total) == (EPISODES, EPISODES)
    _assert_same_episode_files(cfg, reference)


def test_driver_sigkill_then_rerun(cluster, reference, tmp_path):
    out = tmp_path / "rollouts.h5"
    cmd = [sys.executable, "-m", "rlflow", "collect", "--graphs", *GRAPHS, "--episodes", str(EPISODES),
           "--horizon", "20", "--seed", "7", "--workers", "2", "--out", str(out), "--ray", cluster.address]
    env = {**os.environ, "RAY_AUTH_MODE": "token"}  # joining by address: Ray's token authentication
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    cfg = replace(reference, out=str(out))
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and _episode_files(cfg) < 4:
            time.sleep(0.01)
        assert proc.poll() is None, f"the run ended before it was killed: {proc.stderr.read().decode()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    deadline = time.monotonic() + 20  # Ray ends the dead driver's job and its tasks
    while _task_workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _task_workers(), "the killed driver's episodes are still being played"
    landed = _episode_files(cfg)
    assert 4 <= landed < EPISODES
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{EPISODES} episodes ({EPISODES - landed} collected now" in rerun.stdout
    _assert_same_episode_files(cfg, reference)


def test_evaluation_on_ray_equals_local(cluster, tmp_path):
    from controller.evaluation import EvalConfig, evaluate
    from controller.ray_evaluation import evaluate_on_ray

    config = EvalConfig(graphs=("nasrnn", "squeezenet"), agents=("greedy", "random"), horizon=10,
                        random_episodes=2)
    local = evaluate(config, None, tmp_path / "local")
    on_ray = evaluate_on_ray(config, None, tmp_path / "ray", address="local")
    timing = {"optimisation_s", "model_load_s"}
    assert [{k: v for k, v in asdict(r).items() if k not in timing} for r in on_ray] == \
           [{k: v for k, v in asdict(r).items() if k not in timing} for r in local]
    names = sorted(os.listdir(tmp_path / "local" / "graphs"))
    assert names == sorted(os.listdir(tmp_path / "ray" / "graphs")) and len(names) == 6
    for name in names:
        assert filecmp.cmp(tmp_path / "local" / "graphs" / name, tmp_path / "ray" / "graphs" / name, shallow=False)
    for name in ("results.md", "results.json", "results.csv", "runtime.png"):
        assert (tmp_path / "ray" / name).is_file()


def test_ray_flags():
    from rlflow.cli import command_parser
    from rlflow.config_flags import config_from_args

    parser = command_parser("collect")
    base = ["--graphs", "squeezenet", "--episodes", "2", "--out", "x/rollouts.h5"]
    for extra, want in (([], ""), (["--ray"], "local"), (["--ray", "10.0.0.5:6379"], "10.0.0.5:6379")):
        assert config_from_args(CollectConfig, parser.parse_args(base + extra)).ray == want
    parser = command_parser("evaluate")
    assert parser.parse_args(["--graphs", "squeezenet", "--ray"]).ray == "local"
    assert parser.parse_args(["--graphs", "squeezenet"]).ray == ""


def test_unreachable_address_is_one_line_at_once(cluster, tmp_path):
    from taso_env.ray_cluster import RayClusterError, ray_cluster

    with pytest.raises(RayClusterError, match="cannot also join"), ray_cluster("127.0.0.1:1"):
        pass  # this process is connected to the module's cluster
    cmd = [sys.executable, "-m", "rlflow", "collect", "--graphs", "squeezenet", "--episodes", "2",
           "--out", str(tmp_path / "rollouts.h5"), "--ray", "127.0.0.1:1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "error: cannot reach the Ray cluster at '127.0.0.1:1'" in done.stderr


def test_without_ray_nothing_imports_it(tmp_path):
    """The local path never imports Ray; --ray where Ray is missing is a typed error."""
    script = f"""
import sys
from taso_env.env.collection import CollectConfig, collect
from taso_env.ray_cluster import RayUnavailableError
cfg = CollectConfig(graphs=("squeezenet",), episodes=2, out={str(tmp_path / "rollouts.h5")!r}, workers=1, horizon=3)
assert collect(cfg).collected == 2
assert "ray" not in sys.modules, "the local path imported ray"
sys.modules["ray"] = None  # as if Ray were not installed
try:
    collect(CollectConfig(graphs=("squeezenet",), episodes=3, out=cfg.out, workers=1, horizon=3, ray="local"))
except RayUnavailableError as err:
    assert "rlflow[ray]" in str(err), err
else:
    raise AssertionError("no RayUnavailableError")
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def _source_checkout(folder: Path) -> Path:
    """A copy of the repository's Python packages without compiled modules, as a clone is
    before it is built: a process that imports taso_env from it fails at `_core`."""
    for name in ("taso_env", "worldmodel", "controller", "tuner_agents", "rlflow"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, folder / name,
                            ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "csrc", "*.cpp"))
    return folder


def _installed_rlflow() -> str:
    """The `rlflow` command installed beside this interpreter (as the README runs it;
    `python -m rlflow` would put the working folder first on its own module path)."""
    command = Path(sys.executable).parent / "rlflow"
    if not command.is_file():
        pytest.skip(f"no rlflow command beside {sys.executable}")
    return str(command)


def test_shadowing_packages_names_other_copies_only(tmp_path):
    import taso_env
    from taso_env.ray_cluster import shadowing_packages

    checkout = _source_checkout(tmp_path / "checkout")
    assert {"taso_env", "controller", "worldmodel", "rlflow"} <= set(shadowing_packages(checkout))
    assert shadowing_packages(Path(taso_env.__file__).resolve().parent.parent) == []  # the copy imported
    assert shadowing_packages(tmp_path) == []


@pytest.mark.parametrize("where", ["repository root", "unbuilt source checkout", "unrelated folder"])
def test_installed_ray_commands_run_from_any_folder(cluster, tmp_path, where):
    """`rlflow collect --ray` and `rlflow evaluate --ray` with the working folder at the
    repository root (under tests/run_all.sh rlflow is installed, and the root is a second,
    unbuilt copy of its packages), at a copy of the sources without compiled modules (that
    case in every setup) and at a folder without rlflow: the Ray workers import the rlflow
    the driver imports, and read a relative ONNX path in the driver's working folder (the
    cluster's workers work in tests/)."""
    rlflow = _installed_rlflow()
    if where == "repository root":
        folder, graph = REPO, "squeezenet"  # nothing is written into the repository
    else:
        folder = _source_checkout(tmp_path / "checkout") if where == "unbuilt source checkout" \
            else tmp_path / "elsewhere"
        (folder / "models").mkdir(parents=True)
        shutil.copy(REPO / "data" / "models" / "squeezenet1_1.onnx", folder / "models" / "mine.onnx")
        graph = os.path.join("models", "mine.onnx")
    env = {**os.environ, "RAY_AUTH_MODE": "token"}  # joining by address: Ray's token authentication
    out = tmp_path / "rollouts.h5"
    collect = subprocess.run([rlflow, "collect", "--graphs", graph, "--episodes", "4", "--horizon", "5", "--seed", "3",
                              "--workers", "2", "--out", str(out), "--ray", cluster.address],
                             cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert collect.returncode == 0, collect.stderr
    assert "4 episodes (4 collected now" in collect.stdout and "; ray " in collect.stdout
    assert RolloutReader(str(out)).episode_ids == [0, 1, 2, 3]
    evaluate = subprocess.run([rlflow, "evaluate", "--graphs", graph, "--agents", "greedy", "random",
                               "--random-episodes", "1", "--horizon", "5", "--out", str(tmp_path / "eval"),
                               "--ray", cluster.address],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert evaluate.returncode == 0, evaluate.stderr
    rows = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert sorted(r["agent"] for r in rows) == ["greedy", "random"]
    assert len(list((tmp_path / "eval" / "graphs").glob("*.onnx"))) == 3  # the original and both agents' graphs


def test_private_ray_from_an_unbuilt_source_checkout(tmp_path):
    """The README's `rlflow collect --ray` (a Ray started and stopped by the run) with an
    unbuilt copy of the sources as the working folder, as in a fresh clone."""
    rlflow = _installed_rlflow()
    checkout = _source_checkout(tmp_path / "checkout")
    done = subprocess.run([rlflow, "collect", "--graphs", "squeezenet", "--episodes", "2", "--horizon", "5",
                           "--seed", "3", "--workers", "1", "--out", "x.h5", "--ray"],
                          cwd=checkout, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "(local 127.0.0.1, 1 workers)" in done.stdout
    assert RolloutReader(str(checkout / "x.h5")).episode_ids == [0, 1]
