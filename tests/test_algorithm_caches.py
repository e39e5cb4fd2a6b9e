"""The GPU algorithm choices rlflow ships with its cost tables (data/costs/*_algos.tsv):
where no cache file is named, the default one is seeded with them, without duplicating
a configuration or overriding a choice this machine made. Runs without a GPU (the files
are plain text; the CUDA tests check that a process uses a cached choice)."""

import os

from taso_env import shipped_data
from taso_env.gpu import cuda_backend as cb


def _keys(path):
    return [line.split("\t", 1)[0] for line in path.read_text().splitlines()]


def test_the_shipped_choices_cover_the_gemms_and_convolutions_of_the_h100_table():
    for kind, library in (("gemm", "|lt"), ("conv", "|cudnn")):
        files = shipped_data.algorithm_choices(kind)
        assert [f.name for f in files] == [f"h100_{kind}_algos.tsv"]
        lines = files[0].read_text().splitlines()
        assert len(lines) > 100
        assert all(line.startswith("NVIDIA H100") and library in line and len(line.split("\t")) == 2
                   for line in lines)


def test_a_default_cache_file_is_seeded_once_and_keeps_this_machines_choices(tmp_path, monkeypatch):
    shipped = shipped_data.algorithm_choices("gemm")[0].read_text().splitlines()
    mine = shipped[0].split("\t")[0] + "\tmy own choice"
    path = tmp_path / "gemm_algos.tsv"
    path.write_text(mine + "\n")
    added = cb.seed_algo_cache(str(path), "gemm")
    assert added == len(shipped) - 1
    assert path.read_text().splitlines()[0] == mine
    assert sorted(_keys(path)) == sorted(line.split("\t")[0] for line in shipped)
    assert cb.seed_algo_cache(str(path), "gemm") == 0


def test_unset_variables_point_at_seeded_default_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(cb.ALGO_CACHE_ENV, raising=False)
    monkeypatch.delenv(cb.GEMM_ALGO_CACHE_ENV, raising=False)
    cb.install_algo_caches()
    for env, kind in ((cb.ALGO_CACHE_ENV, "conv"), (cb.GEMM_ALGO_CACHE_ENV, "gemm")):
        path = tmp_path / ".cache" / "rlflow" / f"{kind}_algos.tsv"
        shipped = shipped_data.algorithm_choices(kind)[0].read_text().splitlines()
        assert os.environ[env] == str(path)
        assert len(path.read_text().splitlines()) == len(shipped)


def test_a_named_or_empty_variable_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(cb.ALGO_CACHE_ENV, "")
    monkeypatch.setenv(cb.GEMM_ALGO_CACHE_ENV, str(tmp_path / "mine.tsv"))
    cb.install_algo_caches()
    assert not (tmp_path / ".cache").exists() and not (tmp_path / "mine.tsv").exists()
