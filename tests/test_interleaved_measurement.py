"""The order and placements in which graphs are measured for comparison
(taso_env.gpu.interleaved_measurement.schedule): every graph once per round, a new
visiting order each round, arena shifts aligned and spread; bad settings refused.
The measurements themselves run on the GPU (test_cuda.py)."""

import pytest

from taso_env.gpu import cuda_backend as cb
from taso_env.gpu import interleaved_measurement as im


def test_every_round_visits_every_graph_once_in_a_new_order():
    visits = im.schedule(6, 5, seed=3)
    assert sorted((i, r) for i, r, _ in visits) == [(i, r) for i in range(6) for r in range(5)]
    rounds = [[i for i, r, _ in visits if r == k] for k in range(5)]
    assert [r for _, r, _ in visits] == sorted(r for _, r, _ in visits)  # round by round
    assert len({tuple(order) for order in rounds}) > 1


def test_sequential_order_measures_one_graph_after_another():
    visits = im.schedule(3, 2, order="sequential", placements="fixed")
    assert visits == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0), (2, 0, 0), (2, 1, 0)]


def test_random_placements_are_aligned_spread_and_reproducible():
    offsets = [off for _, _, off in im.schedule(10, 20, seed=1)]
    assert all(off % cb.ARENA_ALIGN == 0 and 0 <= off < im.PLACEMENT_SPAN for off in offsets)
    assert len(set(offsets)) > 150
    assert im.schedule(10, 20, seed=1) == im.schedule(10, 20, seed=1) != im.schedule(10, 20, seed=2)


@pytest.mark.parametrize("kwargs, what", [({"order": "shuffled"}, "order"), ({"placements": "nearby"}, "placements"),
                                          ({"rounds": 0}, "rounds")])
def test_bad_settings_are_refused_by_name(kwargs, what):
    rounds = kwargs.pop("rounds", 2)
    with pytest.raises(ValueError, match=what):
        im.schedule(3, rounds, **kwargs)


def test_the_middle_of_the_rounds_is_robust_to_one_slow_round():
    assert im.middle([1.0, 1.01, 5.0]) == 1.01
    assert im.middle([2.0, 1.0]) == 2.0
    with pytest.raises(ValueError):
        im.middle([])
