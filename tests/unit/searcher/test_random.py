"""Random search: max_trials trials, max_concurrent_trials at a time, invalid hparams replaced."""

from __future__ import annotations

import pytest

from det_airflow.searcher import Create, ExitedReason, RandomSearch, Shutdown, make_search_method

from .conftest import FakeMaster


def test_starts_up_to_max_concurrent_trials(make_config):
    actions = make_search_method(
        make_config("random", max_trials=10, max_concurrent_trials=3)
    ).initial_trials()
    assert [a.request_id for a in actions] == [1, 2, 3]
    assert all(isinstance(a, Create) for a in actions)


def test_starts_all_trials_when_there_is_no_concurrency_limit(make_config):
    method = make_search_method(make_config("random", max_trials=5, max_concurrent_trials=0))
    assert [a.request_id for a in method.initial_trials()] == [1, 2, 3, 4, 5]


def test_starts_at_most_max_trials(make_config):
    method = make_search_method(make_config("random", max_trials=2, max_concurrent_trials=16))
    assert len(method.initial_trials()) == 2


def test_creates_one_more_whenever_a_trial_exits(make_config):
    method = make_search_method(make_config("random", max_trials=4, max_concurrent_trials=2))
    method.initial_trials()
    assert [a.request_id for a in method.trial_exited(1)] == [3]
    assert [a.request_id for a in method.trial_exited_early(2, ExitedReason.ERRORED)] == [4]
    assert method.trial_exited(3) == []
    assert method.trial_exited_early(4, ExitedReason.USER_CANCELED) == [Shutdown()]


def test_invalid_hparams_trial_is_replaced_and_does_not_count(make_config):
    config = make_config("random", max_trials=3, max_concurrent_trials=2)
    master = FakeMaster(make_search_method(config), early={2: ExitedReason.INVALID_HP}).start().run()
    assert [c.request_id for c in master.creates] == [1, 2, 3, 4]
    assert master.actions[-1] == Shutdown()


def test_shuts_down_exactly_once_after_every_trial_closed(make_config):
    master = FakeMaster(make_search_method(make_config("random", max_trials=5, max_concurrent_trials=2)))
    master.start().run()
    shutdowns = [a for a in master.actions if isinstance(a, Shutdown)]
    assert shutdowns == [Shutdown()] and master.actions[-1] == Shutdown()
    assert len(master.creates) == 5


def test_shutdown_reports_failure_only_when_every_trial_failed(make_config):
    config = make_config("random", max_trials=2, max_concurrent_trials=2)
    all_failed = {1: ExitedReason.ERRORED, 2: ExitedReason.ERRORED}
    assert FakeMaster(make_search_method(config), early=all_failed).start().run().actions[-1] == Shutdown(
        failure=True
    )
    one_ok = {1: ExitedReason.ERRORED}
    assert FakeMaster(make_search_method(config), early=one_ok).start().run().actions[-1] == Shutdown()


def test_progress_counts_closed_trials_out_of_max_trials(make_config):
    method = make_search_method(make_config("random", max_trials=4, max_concurrent_trials=2))
    method.initial_trials()
    assert method.progress() == 0.0
    method.trial_exited_early(1, ExitedReason.INVALID_HP)  # replaced: no progress
    assert method.progress() == 0.0
    method.trial_exited(2)
    assert method.progress() == 0.25


def test_same_experiment_seed_gives_identical_creates(make_config):
    def creates(seed):
        config = make_config("random", max_trials=6, max_concurrent_trials=2, seed=seed)
        return FakeMaster(make_search_method(config)).start().run().creates

    assert creates(123) == creates(123)
    assert creates(123) != creates(124)


def test_creates_carry_a_trial_seed_and_sampled_hparams(make_config):
    method = make_search_method(make_config("random", max_trials=20, max_concurrent_trials=0))
    creates = method.initial_trials()
    assert all(0 <= c.trial_seed <= 2**31 - 1 for c in creates)
    assert len({c.trial_seed for c in creates}) == 20
    for c in creates:
        assert set(c.hparams) == {"lr", "layers", "optimizer", "batch_size"}
        assert 1e-4 <= c.hparams["lr"] <= 1e-1 and 1 <= c.hparams["layers"] <= 4
        assert c.hparams["optimizer"]["name"] in ("sgd", "adam") and c.hparams["batch_size"] == 32


def test_make_search_method_returns_random_search(make_config):
    assert isinstance(make_search_method(make_config("random", max_trials=1)), RandomSearch)


@pytest.mark.parametrize("mct", [0, 1, 3])
def test_every_request_id_is_created_once_in_order(make_config, mct):
    config = make_config("random", max_trials=7, max_concurrent_trials=mct)
    master = FakeMaster(make_search_method(config)).start().run()
    assert [c.request_id for c in master.creates] == list(range(1, 8))
