"""Single search: one trial with every hyperparameter sampled."""

from __future__ import annotations

from det_airflow.searcher import (
    Create,
    ExitedReason,
    Shutdown,
    SingleSearch,
    make_search_method,
    trial_slot_count,
)

from .conftest import FakeMaster


def test_creates_one_trial_then_shuts_down(make_config):
    config = make_config("single")
    method = make_search_method(config)
    assert isinstance(method, SingleSearch)
    [create] = method.initial_trials()
    assert isinstance(create, Create) and create.request_id == 1
    assert create.hparams["batch_size"] == 32 and 1 <= create.hparams["layers"] <= 4
    assert method.progress() == 0.0
    assert method.trial_exited(1) == [Shutdown()]
    assert method.progress() == 1.0
    assert trial_slot_count(config) == 1


def test_ignores_max_trials_and_concurrency(make_config):
    method = make_search_method(make_config("single", max_trials=5, max_concurrent_trials=0))
    assert len(method.initial_trials()) == 1


def test_invalid_hparams_trial_is_replaced_like_determined(make_config):
    master = FakeMaster(make_search_method(make_config("single")), early={1: ExitedReason.INVALID_HP})
    master.start().run()
    assert [c.request_id for c in master.creates] == [1, 2]
    assert master.actions[-1] == Shutdown()


def test_an_errored_trial_ends_the_search_as_a_failure(make_config):
    method = make_search_method(make_config("single"))
    method.initial_trials()
    assert method.trial_exited_early(1, ExitedReason.ERRORED) == [Shutdown(failure=True)]
