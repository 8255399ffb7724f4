"""The default sampler: Determined's independent random draws, unchanged by the sampler layer."""

from __future__ import annotations

import random

from det_airflow.config._types import Length
from det_airflow.searcher import RandomSampler, make_search_method, sample_hparams

from .conftest import HPARAMS, FakeMaster, RungMaster


def _expected(seed, n):
    """Hyperparameters then a trial seed per trial, from one random.Random(seed): the seed-era draws."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        hparams = sample_hparams(HPARAMS, rng)
        out.append((hparams, rng.randint(0, 2**31 - 1)))
    return out


def test_random_search_keeps_the_trials_of_a_seed(make_config):
    method = make_search_method(make_config("random", max_trials=6, max_concurrent_trials=2, seed=11))
    assert isinstance(method.sampler, RandomSampler)
    creates = FakeMaster(method).start().run().creates
    assert [(c.hparams, c.trial_seed) for c in creates] == _expected(11, 6)


def test_asha_draws_its_trials_the_same_way(make_config):
    config = make_config("adaptive_asha", max_trials=12, max_length=Length("batches", 90), divisor=3, seed=3)
    method = make_search_method(config)
    creates = RungMaster(method, method.rung_lengths()).start().run().creates
    assert [(c.hparams, c.trial_seed) for c in creates] == _expected(3, 12)
