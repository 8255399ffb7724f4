"""A trial removed from a rung (invalid hyperparameters) no longer counts as promoted there."""

from __future__ import annotations

from det_airflow.searcher._rung import Rung


def test_a_removed_promoted_trial_leaves_the_promoted_set_and_the_state() -> None:
    rung = Rung()
    assert rung.insert_promoting(7, 0.1, divisor=1) == 7
    rung.remove(7)
    assert (len(rung), rung.promoted) == (0, set())
    assert Rung.from_state(rung.state_dict()).promoted == set()
