"""Tuning space, HDF5 records, replay and tuners on the shipped H100 records (no GPU)."""

import json
import os

import numpy as np
import pytest

from taso_env.errors import TuningError
from taso_env.tuning import config as tune_config
from taso_env.tuning.records import TuningRecords, replay_check, spearman
from taso_env.tuning.space import DEFAULT_LAUNCH, LAUNCH_CHOICES
from taso_env.tuning.tuners import GATuner, GridTuner, RandomTuner, XGBTuner, make_tuner, run_tuner

ROOT = os.path.join(os.path.dirname(__file__), "..")
RECORDS = os.path.join(ROOT, "data", "tuning")


@pytest.fixture(scope="module")
def rec():
    return TuningRecords.load(os.path.join(RECORDS, "mobilenet_v2_tf32.h5"))


def replayer(rec):
    return lambda cs: [rec.replay(c) for c in cs]


def test_shipped_records_cover_the_four_graphs():
    for g in ("resnet50", "inception_v3", "mobilenet_v2", "bert_base"):
        r = TuningRecords.load(os.path.join(RECORDS, f"{g}_tf32.h5"))
        assert r.meta["device"].startswith("NVIDIA H100")
        assert r.meta["math"] == "tf32" and r.meta["cudnn"] > 0
        assert len(r.samples.measured_ms) >= 50
        check = replay_check(r)
        assert check["spearman"] > 0.9
        # Every option of every knob was measured (the records are exhaustive per knob).
        assert len(r.ms) == int(r.space.cardinalities.sum())


def test_replay_is_the_sum_of_active_parts(rec):
    space = rec.space
    default = space.default_config()
    manual = rec.fixed_ms + sum(rec.table[i][g] for i, g in enumerate(default) if space.active(default)[i])
    assert rec.replay(default) == pytest.approx(manual)
    best, best_ms = rec.best_config()
    assert best_ms <= rec.replay(default) + 1e-12
    rng = np.random.default_rng(0)
    assert all(rec.replay(space.random_config(rng)) >= best_ms - 1e-12 for _ in range(200))


def test_epilogue_launch_costs_nothing_while_fused(rec):
    space = rec.space
    absorbed = next(i for i, k in enumerate(space.knobs) if k.absorbed_by >= 0)
    conv = space.knobs[absorbed].absorbed_by
    cfg = list(space.default_config())
    fused = next(j for j in range(space.knobs[conv].size) if space.knobs[conv].option(j)["fuse"] == 1)
    cfg[conv] = fused
    a = rec.replay(cfg)
    cfg[absorbed] = (cfg[absorbed] + 1) % space.knobs[absorbed].size
    assert rec.replay(cfg) == pytest.approx(a)


def test_plan_and_validation(rec):
    space = rec.space
    plan = space.to_plan(space.default_config())
    assert all(set(v) <= {"fuse", "conv_algo", "conv_math", "conv_fused_call"} for v in plan.values())
    cfg = list(space.default_config())
    i = next(k for k, knob in enumerate(space.knobs) if knob.kind == "launch")
    cfg[i] = LAUNCH_CHOICES.index((1024, 4))
    assert space.to_plan(cfg)[space.knobs[i].op_id] == {"threads": 1024, "items_per_thread": 4}
    assert space.knobs[i].default == LAUNCH_CHOICES.index(DEFAULT_LAUNCH)
    with pytest.raises(TuningError, match="genes"):
        space.validate(cfg[:-1])
    bad = list(cfg)
    bad[0] = space.knobs[0].size
    with pytest.raises(TuningError, match="outside"):
        space.validate(bad)
    with pytest.raises(TuningError, match="must be an int"):
        space.validate([1.5] + cfg[1:])


def test_records_roundtrip_and_bad_files(rec, tmp_path):
    path = str(tmp_path / "r.h5")
    rec.save(path)
    again = TuningRecords.load(path)
    assert again.space.to_json() == rec.space.to_json()
    assert again.replay(rec.space.default_config()) == pytest.approx(rec.replay(rec.space.default_config()))
    with pytest.raises(TuningError, match="no tuning records"):
        TuningRecords.load(str(tmp_path / "missing.h5"))
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(TuningError):
        TuningRecords.load(str(tmp_path / "junk.h5"))


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833, rel=1e-6)


@pytest.mark.parametrize("cls", [RandomTuner, GridTuner, GATuner])
def test_tuners_never_repeat_and_track_best(rec, cls):
    tuner = cls(rec.space, seed=3)
    curve = run_tuner(tuner, replayer(rec), 120, 8)
    seen = [c for c, _ in tuner.history]
    assert len(curve) == 120 and len(set(seen)) == len(seen)
    assert all(b >= a for a, b in zip(curve[1:], curve[:-1]))
    assert tuner.best_cost == pytest.approx(min(rec.replay(c) for c in seen))


def test_ga_invariants(rec):
    ga = GATuner(rec.space, seed=1, pop_size=12, elite_num=3, mutation_prob=0.05)
    run_tuner(ga, replayer(rec), 12, 12)  # generation 0 measured
    ga.next_batch(1)  # builds generation 1
    ranked = sorted(ga.measured.items(), key=lambda kv: kv[1])
    assert ga.elites == [c for c, _ in ranked[:3]]  # elitism: the best survive
    assert ga.population == [c for c, _ in ranked[:12]]
    for child, meta in ga.children_meta.items():
        p1, p2 = meta["parents"]
        a, b = meta["points"]
        assert 0 <= a <= b <= len(rec.space)
        # two-point crossover: outside the mutated genes, p1 outside [a, b) and p2 inside
        for g in range(len(rec.space)):
            if g not in meta["genes"]:
                assert child[g] == (p2[g] if a <= g < b else p1[g])
        assert child not in (p1, p2) or meta["genes"]
    with pytest.raises(TuningError):
        GATuner(rec.space, pop_size=4, elite_num=4)


def test_ga_starts_from_init(rec):
    default = rec.space.default_config()
    ga = GATuner(rec.space, seed=0, init=[default])
    first = ga.next_batch(16)
    assert first[0] == default
    assert all(sum(a != b for a, b in zip(c, default)) <= 3 for c in first[1:])


def test_determinism_by_seed(rec):
    for name in ("random", "ga", "xgb"):
        a = run_tuner(make_tuner(name, rec.space, 7), replayer(rec), 80, 8)
        b = run_tuner(make_tuner(name, rec.space, 7), replayer(rec), 80, 8)
        c = run_tuner(make_tuner(name, rec.space, 8), replayer(rec), 80, 8)
        assert a == b, name
        assert a != c, name


def test_xgb_model_ranks(rec):
    t = XGBTuner(rec.space, seed=0, plan_size=16)
    run_tuner(t, replayer(rec), 48, 16)
    assert t.model is not None
    with pytest.raises(TuningError, match="unknown tuner"):
        make_tuner("annealing", rec.space)


def test_gadqn_learns_and_is_deterministic(rec):
    pytest.importorskip("tensorflow")
    from tuner_agents.gadqn import GADQNTuner

    kw = dict(batch_size=8, train_steps=4, target_sync=2)
    t = GADQNTuner(rec.space, seed=5, **kw)
    before = [p.numpy().copy() for p in t.mut_net.params]
    curve = run_tuner(t, replayer(rec), 96, 8)
    assert t.mut_net.updates > 0 and t.cross_net.updates > 0
    assert np.isfinite(t.mut_net.last_loss)
    assert any(not np.allclose(a, p.numpy()) for a, p in zip(before, t.mut_net.params))
    # the target network was synced to the online one (target_sync=2, 4 updates per batch)
    assert t.cross_net.updates % 2 == 0
    assert all(np.allclose(a.numpy(), b.numpy()) for a, b in zip(t.cross_net.target, t.cross_net.params))
    assert len(t.rewards) > 0 and all(abs(r) <= t.reward_clip for r in t.rewards)
    # every child is a crossover child (p1 outside one segment of p2) or a mutant of p1
    kinds = {m["kind"] for m in t.children_meta.values()}
    assert kinds == {"crossover", "mutant"}
    for child, meta in t.children_meta.items():
        p1, p2 = meta["parents"]
        a, b = meta["points"]
        if meta["kind"] == "crossover":
            assert all(child[g] == (p2[g] if a <= g < b else p1[g]) for g in range(len(child)))
        else:
            assert a == b and 1 <= sum(x != y for x, y in zip(child, p1)) == len(meta["genes"])
    assert t.epsilon < 1.0
    again = run_tuner(GADQNTuner(rec.space, seed=5, **kw), replayer(rec), 96, 8)
    assert curve == again
    off = GADQNTuner(rec.space, seed=5, dqn_crossover=False, dqn_mutation=False)
    assert off.cross_net is None and off.mut_net is None
    run_tuner(off, replayer(rec), 24, 8)  # the random crossover / mutation of the ablation runs


def test_gadqn_switch_q_is_exact_on_the_recorded_costs(rec):
    """With its base scores set to the recorded part times, the mutation DQN's Q of every
    single switch is exactly what replay says the switch saves — including a conv that
    stops or starts folding its epilogue ops."""
    pytest.importorskip("tensorflow")
    from tuner_agents.gadqn import GADQNTuner

    t = GADQNTuner(rec.space, seed=0)
    p = t.mut_net.params
    for v in p[4:6]:
        v.assign(np.zeros(v.shape, np.float32))  # the shared MLP scores 0
    p[-1].assign(np.concatenate([np.asarray(rec.table[i], np.float32) for i in range(len(rec.space))]))
    rng = np.random.default_rng(0)
    fused_conv = next(i for i, k in enumerate(rec.space.knobs) if k.kind == "conv"
                      and any(j.absorbed_by == i for j in rec.space.knobs))
    for _ in range(3):
        cfg = rec.space.random_config(rng)
        gains = t.switch_gains(cfg)
        base = rec.replay(cfg)
        for g in [fused_conv] + [int(x) for x in rng.choice(len(cfg), 20, replace=False)]:
            for v in range(t.card[g]):
                c = list(cfg)
                c[g] = v
                assert gains[t.offsets[g] + v] == pytest.approx(base - rec.replay(c), abs=1e-5)


def test_gadqn_learns_what_switches_save(rec):
    """After 200 replayed trials the mutation DQN ranks the single switches from its best
    config by what they really save (rank correlation), and it beats the GA's best."""
    pytest.importorskip("tensorflow")
    from tuner_agents.gadqn import GADQNTuner

    t = GADQNTuner(rec.space, seed=0)
    run_tuner(t, replayer(rec), 200, 8)
    cfg = t.best_config
    gains, exact = t.switch_gains(cfg), np.zeros(int(t.offsets[-1]))
    for g in range(len(cfg)):
        for v in range(t.card[g]):
            c = list(cfg)
            c[g] = v
            exact[t.offsets[g] + v] = t.best_cost - rec.replay(c)
    moved = np.ones(len(exact), bool)
    moved[t.offsets[:-1] + np.asarray(cfg)] = False
    assert spearman(gains[moved], exact[moved]) > 0.5
    ga = GATuner(rec.space, seed=0)
    run_tuner(ga, replayer(rec), 200, 8)
    assert t.best_cost < ga.best_cost


def test_config_validation(tmp_path):
    good = {"graphs": ["mobilenet_v2"], "tuners": ["ga"], "budgets": [10], "seeds": [0]}
    cfg = tune_config.from_dict(good)
    assert cfg.max_budget == 10 and cfg.records_path("mobilenet_v2").endswith("mobilenet_v2_tf32.h5")
    for bad, match in [({"graphs": []}, "graphs"), ({**good, "tuners": ["sa"]}, "tuners"),
                       ({**good, "budgets": [0]}, "budgets"), ({**good, "math": "fp16"}, "math"),
                       ({**good, "bogus": 1}, "unknown config keys"), ({**good, "batch": True}, "batch"),
                       ({**good, "workers": 0}, "workers"),
                       ({**good, "start": "best"}, "start"), ({"tuners": ["ga"]}, "required")]:
        with pytest.raises(TuningError, match=match):
            tune_config.from_dict(bad)
    p = tmp_path / "c.json"
    p.write_text("{not json")
    with pytest.raises(TuningError, match="not valid JSON"):
        tune_config.load(p)
    p.write_text(json.dumps({**good, "mode": "dance"}))
    with pytest.raises(TuningError, match="mode"):
        tune_config.load(p)


def test_benchmark_driver_resumes(tmp_path):
    from taso_env.tuning import driver

    cfg = tune_config.from_dict({"graphs": ["mobilenet_v2"], "tuners": ["random", "ga"], "budgets": [8, 16],
                                 "seeds": [0, 1], "records_dir": RECORDS, "out_dir": str(tmp_path),
                                 "start": "default"})
    summary = driver.benchmark(cfg, log=lambda m: None)
    g = summary["graphs"]["mobilenet_v2"]
    assert set(g["variants"]) == {"random", "ga"}
    assert g["variants"]["ga"]["best_at"]["8"] <= g["default_ms"] + 1e-12  # the default is the first trial
    assert (tmp_path / "benchmark_table.md").read_text().count("mobilenet_v2") == 4
    assert (tmp_path / "benchmark_curves.png").stat().st_size > 0
    assert any(f.startswith("events.out.tfevents") for _, _, fs in os.walk(tmp_path / "tensorboard") for f in fs)
    lines = (tmp_path / "benchmark_results.jsonl").read_text().splitlines()
    driver.benchmark(cfg, log=lambda m: None)  # a rerun resumes: nothing is run again
    assert (tmp_path / "benchmark_results.jsonl").read_text().splitlines() == lines
    # two worker processes give the same rows (in completion order)
    par = tune_config.from_dict({**json.loads(json.dumps(cfg.__dict__)), "out_dir": str(tmp_path / "par"),
                                 "workers": 2})
    driver.benchmark(par, log=lambda m: None)

    def rows(path):
        return sorted((r["key"], r["curve"]) for r in map(json.loads, path.read_text().splitlines()))

    assert rows(tmp_path / "par" / "benchmark_results.jsonl") == rows(tmp_path / "benchmark_results.jsonl")


def _registered_tuner_names() -> list[str]:
    from taso_env.tuning import tuners

    return sorted(tuners._registered)


def test_spawned_workers_know_the_tuners_registered_in_the_parent():
    """A benchmark with workers > 1 runs its jobs in spawned processes: they import what
    registered the parent's learned tuners, so GA-DQN is found there too."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import tuner_agents  # noqa: F401  (registers gadqn; TensorFlow only when one is made)
    from taso_env.tuning.tuners import import_registering_modules, registering_modules

    assert "tuner_agents" in registering_modules()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                             initializer=import_registering_modules, initargs=(registering_modules(),)) as pool:
        assert "gadqn" in pool.submit(_registered_tuner_names).result()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert "gadqn" not in pool.submit(_registered_tuner_names).result()  # what the initializer fixes
