"""Grid search: one trial per grid point, in order."""

from __future__ import annotations

from det_airflow.config._types import CategoricalHP, IntHP
from det_airflow.searcher import ExitedReason, GridSearch, Shutdown, grid_points, make_search_method

from .conftest import HPARAMS, FakeMaster


def test_creates_one_trial_per_point_in_grid_order(make_config):
    master = FakeMaster(make_search_method(make_config("grid", max_concurrent_trials=3))).start().run()
    assert [c.hparams for c in master.creates] == grid_points(HPARAMS)
    assert [c.request_id for c in master.creates] == list(range(1, 17))
    assert master.actions[-1] == Shutdown()
    assert master.actions.count(Shutdown()) == 1


def test_starts_up_to_max_concurrent_trials_then_one_per_exit(make_config):
    method = make_search_method(make_config("grid", max_concurrent_trials=4))
    assert isinstance(method, GridSearch)
    assert [a.request_id for a in method.initial_trials()] == [1, 2, 3, 4]
    assert [a.request_id for a in method.trial_exited(2)] == [5]


def test_starts_every_point_when_there_is_no_concurrency_limit(make_config):
    method = make_search_method(make_config("grid", max_concurrent_trials=0))
    assert len(method.initial_trials()) == 16


def test_invalid_hparams_point_is_not_retried(make_config):
    hparams = {"n": IntHP(1, 3, count=3)}
    config = make_config("grid", hparams, max_concurrent_trials=1)
    master = FakeMaster(make_search_method(config), early={2: ExitedReason.INVALID_HP}).start().run()
    assert [c.hparams for c in master.creates] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert master.actions[-1] == Shutdown()


def test_progress_counts_closed_points(make_config):
    method = make_search_method(make_config("grid", {"c": CategoricalHP(("a", "b", "c", "d"))}))
    method.initial_trials()
    method.trial_exited(1)
    method.trial_exited_early(2, ExitedReason.INVALID_HP)
    assert method.progress() == 0.5


def test_same_points_get_the_same_trial_seeds_for_the_same_experiment_seed(make_config):
    def creates(seed):
        return FakeMaster(make_search_method(make_config("grid", seed=seed))).start().run().creates

    assert creates(5) == creates(5)
    assert [c.trial_seed for c in creates(5)] != [c.trial_seed for c in creates(6)]
