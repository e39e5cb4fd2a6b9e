"""The rollout file (taso_env/env/rollouts.py) and its collection (taso_env/env/collection.py):
round trip against the env, batching, sequences, typed errors, resume and SIGKILL."""

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace

import h5py
import numpy as np
import pytest

from taso_env.env.collection import CollectConfig, ConfigMismatchError, collect, make_env
from taso_env.env.episode import run_episode
from taso_env.env.policies import make_policy
from taso_env.env.rollouts import (
    RolloutBusyError,
    RolloutFormatError,
    RolloutReader,
    RolloutWriter,
    RuleSetMismatchError,
)

GRAPHS = ("squeezenet", "nasrnn")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """6 episodes, horizon 6, random policy that sometimes stops (both end kinds occur)."""
    out = tmp_path_factory.mktemp("run") / "rollouts.h5"
    cfg = CollectConfig(graphs=GRAPHS, episodes=6, out=str(out), workers=0, horizon=6, seed=3, stop_prob=0.1)
    result = collect(cfg)
    assert (result.collected, result.total) == (6, 6)
    return cfg


def _copy_run(cfg, tmp_path):
    run = tmp_path / "copy"
    shutil.copytree(cfg.run_dir, run)
    return run / "rollouts.h5"


def test_round_trip_equals_the_env(small_run):
    reader = RolloutReader(small_run.out)
    assert reader.episode_ids == list(range(6))
    env = make_env(small_run)
    meta = reader.meta
    assert (meta.max_nodes, meta.max_edges, meta.n_rules) == (env.max_nodes, env.max_edges, env.n_rules)
    policy = make_policy("random", env, stop_prob=small_run.stop_prob)
    ends = set()
    for i in reader.episode_ids:
        ep = run_episode(env, policy, small_run.seed + i, options={"graph": GRAPHS[i % 2]})
        stored = reader.episode(i)
        assert stored.attrs["graph"] == GRAPHS[i % 2] and stored.attrs["seed"] == small_run.seed + i
        assert stored.num_steps == len(ep.actions) == stored.attrs["total_steps"]
        steps = list(reader.steps(i))
        for t, step in enumerate(steps):
            for name, value in ep.observations[t].items():
                np.testing.assert_array_equal(step["observation"][name], value, err_msg=f"{name} t={t}")
                np.testing.assert_array_equal(step["next_observation"][name], ep.observations[t + 1][name])
            np.testing.assert_array_equal(step["xfer_mask"], ep.infos[t]["xfer_mask"])
            np.testing.assert_array_equal(step["location_mask"], ep.infos[t]["location_mask"])
            np.testing.assert_array_equal(step["action"], ep.actions[t])
            assert step["reward"] == pytest.approx(ep.rewards[t], rel=1e-6, abs=1e-6)
            assert step["cost"] == pytest.approx(ep.infos[t]["cost"], rel=1e-6)
            assert (step["terminated"], step["truncated"]) == (ep.terminations[t], ep.truncations[t])
        np.testing.assert_allclose(stored["infos/cost"], [info["cost"] for info in ep.infos], rtol=1e-6)
        ends.add("terminated" if ep.terminations[-1] else "truncated")
    assert ends == {"terminated", "truncated"}


def test_batches_offset_senders_into_their_graph(small_run):
    reader = RolloutReader(small_run.out)
    episodes = {i: reader.episode(i) for i in reader.episode_ids}
    seen = []
    for batch in reader.batches(5, np.random.default_rng(1)):
        g = batch["graphs"]
        starts = np.concatenate([[0], np.cumsum(g["n_node"])])
        edge_starts = np.concatenate([[0], np.cumsum(g["n_edge"])])
        assert len(g["nodes"]) == starts[-1] and len(g["senders"]) == edge_starts[-1]
        for k, (i, t) in enumerate(zip(batch["episode"], batch["step"])):
            own = episodes[i].graph(t)
            edges = slice(edge_starts[k], edge_starts[k + 1])
            assert np.all((g["senders"][edges] >= starts[k]) & (g["senders"][edges] < starts[k + 1]))
            np.testing.assert_array_equal(g["receivers"][edges] - starts[k], own["receivers"])
            np.testing.assert_array_equal(g["nodes"][starts[k]:starts[k + 1]], own["nodes"])
            assert batch["next_graphs"]["n_node"][k] == episodes[i].graph(t + 1)["n_node"]
            np.testing.assert_array_equal(batch["actions"][k], episodes[i]["actions"][t])
            np.testing.assert_array_equal(batch["next_xfer_mask"][k], episodes[i]["infos/xfer_mask"][t + 1])
        seen += list(zip(batch["episode"].tolist(), batch["step"].tolist()))
    expected = [(i, t) for i, ep in episodes.items() for t in range(ep.num_steps)]
    assert sorted(seen) == sorted(expected)
    states = sum(len(b["step"]) for b in reader.batches(4, transitions=False))
    assert states == sum(ep.num_steps + 1 for ep in episodes.values())


def test_sequences_are_padded_and_masked(small_run):
    reader = RolloutReader(small_run.out)
    seq_len, total = 4, 0
    for batch in reader.sequences(seq_len, 3, np.random.default_rng(2)):
        b = len(batch["episode"])
        assert batch["actions"].shape == (b, seq_len, 2) and batch["xfer_mask"].shape[:2] == (b, seq_len + 1)
        assert len(batch["graphs"]["n_node"]) == b * (seq_len + 1)
        n_node = batch["graphs"]["n_node"].reshape(b, seq_len + 1)
        for k in range(b):
            ep, s = reader.episode(int(batch["episode"][k])), int(batch["start"][k])
            n = int(batch["mask"][k].sum())
            assert n == min(seq_len, ep.num_steps - s) and batch["mask"][k, :n].all()
            np.testing.assert_array_equal(batch["actions"][k, :n], ep["actions"][s:s + n])
            assert not batch["actions"][k, n:].any() and not batch["rewards"][k, n:].any()
            assert batch["obs_mask"][k].sum() == n + 1
            np.testing.assert_array_equal(n_node[k, :n + 1], ep["observations/n_node"][s:s + n + 1])
            assert not n_node[k, n + 1:].any()
            total += n
    assert total == sum(reader.episode(i).num_steps for i in reader.episode_ids)


def test_garbage_and_truncated_files_raise_format_errors(small_run, tmp_path):
    index = _copy_run(small_run, tmp_path)
    episodes = index.parent / "rollouts.h5.episodes"
    data = (episodes / "episode_1.h5").read_bytes()
    (episodes / "episode_1.h5").write_bytes(data[: len(data) // 2])
    (episodes / "episode_2.h5").write_bytes(os.urandom(len(data)))
    reader = RolloutReader(index)
    reader.episode(0)
    for i in (1, 2):
        with pytest.raises(RolloutFormatError, match=f"episode_{i}.h5"):
            reader.episode(i)
    with h5py.File(episodes / "episode_3.h5", "a") as f:
        del f["infos/location_counts"]
    with pytest.raises(RolloutFormatError, match="location_counts"):
        reader.episode(3)
    index_bytes = index.read_bytes()
    index.write_bytes(index_bytes[: len(index_bytes) // 2])
    with pytest.raises(RolloutFormatError, match="rollouts.h5"):
        RolloutReader(index)
    index.write_bytes(b"not an hdf5 file" * 100)
    with pytest.raises(RolloutFormatError):
        RolloutReader(index)


def test_rule_set_mismatch(small_run, tmp_path):
    with pytest.raises(RuleSetMismatchError):
        RolloutReader(small_run.out, expected_rule_set_hash="0123456789abcdef")
    index = _copy_run(small_run, tmp_path)
    meta = RolloutReader(index, expected_rule_set_hash=RolloutReader(small_run.out).meta.rule_set_hash).meta
    with pytest.raises(RuleSetMismatchError, match="episode_"):
        RolloutWriter(index, replace(meta, rule_set_hash="0123456789abcdef"))
    with h5py.File(index.parent / "rollouts.h5.episodes" / "episode_0.h5", "a") as f:
        f.attrs["rule_set_hash"] = "0123456789abcdef"
    with pytest.raises(RuleSetMismatchError, match="episode_0.h5"):
        RolloutReader(index).episode(0)


def test_resume_rebuilds_index_and_refuses_other_settings(small_run, tmp_path):
    index = _copy_run(small_run, tmp_path)
    cfg = replace(small_run, out=str(index), episodes=8)
    episodes = index.parent / "rollouts.h5.episodes"
    os.remove(episodes / "episode_4.h5")  # as if in flight when killed
    (episodes / "episode_9.h5.tmp").write_bytes(b"half written")
    index.write_bytes(b"stale")
    result = collect(cfg)
    assert (result.collected, result.total) == (3, 8)  # 4, 6 and 7
    assert RolloutReader(index).episode_ids == list(range(8))
    assert sorted(os.listdir(episodes)) == sorted(f"episode_{i}.h5" for i in range(8))
    assert collect(cfg).collected == 0
    with pytest.raises(ConfigMismatchError, match="horizon") as err:
        collect(replace(cfg, horizon=7))
    assert sorted(err.value.differences) == ["horizon"]
    with pytest.raises(ConfigMismatchError, match="episodes"):
        collect(replace(cfg, episodes=5))
    assert collect(replace(cfg, horizon=3, episodes=2), restart=True).total == 2
    assert RolloutReader(index).meta.horizon == 3


def test_one_writer_at_a_time(small_run, tmp_path):
    index = _copy_run(small_run, tmp_path)
    meta = RolloutReader(index).meta
    with RolloutWriter(index, meta) as writer:
        assert writer.episode_ids == set(range(6))
        with pytest.raises(RolloutBusyError):
            RolloutWriter(index, meta)
    RolloutWriter(index, meta).close()


def test_sigkill_then_rerun_equals_uninterrupted_run(tmp_path):
    episodes = 30
    out = tmp_path / "killed" / "rollouts.h5"
    cmd = [sys.executable, "-m", "rlflow", "collect", "--graphs", *GRAPHS, "--episodes", str(episodes),
           "--workers", "2", "--horizon", "10", "--seed", "11", "--out", str(out)]
    env = dict(os.environ)
    episode_dir = tmp_path / "killed" / "rollouts.h5.episodes"
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if episode_dir.exists() and sum(n.endswith(".h5") for n in os.listdir(episode_dir)) >= 4:
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"the run ended before it was killed: {proc.stderr.read().decode()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        landed = sum(n.endswith(".h5") for n in os.listdir(episode_dir))
        assert 4 <= landed < episodes
        deadline = time.monotonic() + 10  # the workers die with their parent
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("worker processes outlived the killed collector")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stderr.close()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)

    reader = RolloutReader(out)
    assert reader.episode_ids == list(range(episodes))
    assert sorted(os.listdir(episode_dir)) == sorted(f"episode_{i}.h5" for i in range(episodes))
    reference_cfg = CollectConfig(graphs=GRAPHS, episodes=episodes, out=str(tmp_path / "ref" / "rollouts.h5"),
                                  workers=0, horizon=10, seed=11)
    collect(reference_cfg)
    reference = RolloutReader(reference_cfg.out)
    for i in range(episodes):
        got, want = reader.episode(i), reference.episode(i)
        assert got.attrs["seed"] == want.attrs["seed"] == 11 + i
        np.testing.assert_array_equal(got["actions"], want["actions"])
        np.testing.assert_array_equal(got["rewards"], want["rewards"])
        np.testing.assert_array_equal(got["observations/nodes"], want["observations/nodes"])
