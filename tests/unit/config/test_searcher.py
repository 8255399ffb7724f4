"""The searcher section: every searcher, both length styles, and the mistakes users make."""

from __future__ import annotations

from typing import Any

import pytest

from det_airflow.config import Length, parse_config

from ._configs import MNIST_ADAPTIVE_038, MNIST_ADAPTIVE_SEED, assert_problem, minimal, problems_of


def searcher(**fields: Any) -> dict[str, Any]:
    return minimal(searcher={"metric": "validation_loss", **fields})


class TestEverySearcher:
    def test_single_with_a_seed_era_length(self) -> None:
        cfg = parse_config(searcher(name="single", max_length={"batches": 937}))
        assert cfg.searcher.name == "single"
        assert cfg.searcher.max_length == Length("batches", 937)

    def test_single_without_a_length_as_in_0_38(self) -> None:
        assert parse_config(searcher(name="single")).searcher.max_length is None

    def test_a_bare_integer_max_length_means_batches(self) -> None:
        cfg = parse_config(searcher(name="single", max_length=500))
        assert cfg.searcher.max_length == Length("batches", 500)

    @pytest.mark.parametrize("unit", ["batches", "records", "epochs"])
    def test_max_length_in_any_unit(self, unit: str) -> None:
        cfg = parse_config(searcher(name="single", max_length={unit: 3}))
        assert cfg.searcher.max_length == Length(unit, 3)  # type: ignore[arg-type]

    def test_random_with_its_defaults(self) -> None:
        s = parse_config(searcher(name="random", max_trials=8)).searcher
        assert (s.max_trials, s.max_concurrent_trials, s.sampler, s.smaller_is_better) == (
            8,
            16,
            "random",
            True,
        )

    def test_random_with_an_optuna_sampler(self) -> None:
        s = parse_config(searcher(name="random", max_trials=8, sampler="tpe")).searcher
        assert s.sampler == "tpe"

    def test_grid(self) -> None:
        cfg = parse_config(
            searcher(name="grid", max_concurrent_trials=2, max_length={"epochs": 1}),
        )
        assert (cfg.searcher.name, cfg.searcher.max_concurrent_trials) == ("grid", 2)

    def test_adaptive_asha_seed_era(self) -> None:
        s = parse_config(MNIST_ADAPTIVE_SEED).searcher
        assert (s.name, s.max_trials, s.max_length) == ("adaptive_asha", 16, Length("batches", 937))
        assert (s.mode, s.divisor, s.max_rungs, s.bracket_rungs, s.stop_once) == ("standard", 4, 5, (), True)

    def test_adaptive_asha_0_38(self) -> None:
        s = parse_config(MNIST_ADAPTIVE_038).searcher
        assert (s.time_metric, s.max_time, s.max_length, s.max_concurrent_trials) == ("batches", 937, None, 4)

    def test_adaptive_asha_with_every_knob(self) -> None:
        s = parse_config(
            searcher(
                name="adaptive_asha",
                max_trials=20,
                max_length={"batches": 1000},
                mode="conservative",
                divisor=3,
                max_rungs=4,
                bracket_rungs=[3, 2, 1],
                stop_once=False,
                sampler="cmaes",
                smaller_is_better=False,
            )
        ).searcher
        assert (s.mode, s.divisor, s.max_rungs, s.bracket_rungs) == ("conservative", 3.0, 4, (3, 2, 1))
        assert (s.stop_once, s.sampler, s.smaller_is_better) == (False, "cmaes", False)

    def test_async_halving(self) -> None:
        s = parse_config(
            searcher(name="async_halving", max_trials=9, num_rungs=3, time_metric="epochs", max_time=9)
        ).searcher
        assert (s.name, s.num_rungs, s.max_time) == ("async_halving", 3, 9)

    def test_warm_start_from_a_trial(self) -> None:
        s = parse_config(searcher(name="single", source_trial_id=7)).searcher
        assert (s.source_trial_id, s.source_checkpoint_uuid) == (7, None)

    def test_warm_start_from_a_checkpoint(self) -> None:
        s = parse_config(searcher(name="single", source_checkpoint_uuid="abc-123")).searcher
        assert s.source_checkpoint_uuid == "abc-123"


ASHA = {"name": "adaptive_asha", "max_trials": 16}
ASHA_LEN = {**ASHA, "max_length": {"batches": 937}}

BAD_SEARCHERS = [
    pytest.param({"name": "random", "max_trials": "ten"}, "searcher.max_trials",
                 "expected an integer >= 1, got 'ten'", id="max_trials-word"),
    pytest.param({"name": "random", "max_trials": 0}, "searcher.max_trials",
                 "expected an integer >= 1, got 0", id="max_trials-zero"),
    pytest.param({"name": "random"}, "searcher.max_trials",
                 "required for the random searcher", id="random-needs-max_trials"),
    pytest.param({"name": "adaptive_asha", "max_length": 937}, "searcher.max_trials",
                 "required for the adaptive_asha searcher", id="asha-needs-max_trials"),
    pytest.param({"name": "singel"}, "searcher.name", "did you mean 'single'?", id="name-typo"),
    pytest.param({"name": None}, "searcher.name",
                 "expected one of single, random, grid, adaptive_asha, async_halving, got null", id="name-null"),
    pytest.param({"name": "pbt"}, "searcher.name",
                 "the 'pbt' searcher was removed from Determined; use 'adaptive_asha' instead", id="removed-pbt"),
    pytest.param({"name": "adaptive_simple"}, "searcher.name",
                 "removed from Determined; use 'adaptive_asha'", id="removed-adaptive_simple"),
    pytest.param({"name": "adaptive"}, "searcher.name",
                 "removed from Determined; use 'adaptive_asha'", id="removed-adaptive"),
    pytest.param({"name": "sync_halving"}, "searcher.name", "use 'async_halving'", id="removed-sync_halving"),
    pytest.param({"name": "custom"}, "searcher.name",
                 "the 'custom' searcher was removed from Determined", id="removed-custom"),
    pytest.param({"metric": None}, "searcher.metric", "expected a non-empty string, got null", id="metric-null"),
    pytest.param({"metric": 5}, "searcher.metric", "expected a non-empty string, got 5", id="metric-number"),
    pytest.param({"name": "random", "max_trail": 4}, "searcher.max_trail",
                 "unknown field; did you mean 'max_trials'?", id="max_trail-typo"),
    pytest.param({"max_concurrent_trials": -1}, "searcher.max_concurrent_trials",
                 "expected an integer >= 0, got -1", id="mct-negative"),
    pytest.param({"max_length": {"batches": 10, "epochs": 1}}, "searcher.max_length",
                 "expected exactly one of batches, records or epochs", id="length-two-units"),
    pytest.param({"max_length": {}}, "searcher.max_length",
                 "expected exactly one of batches, records or epochs, got {}", id="length-no-unit"),
    pytest.param({"max_length": {"batch": 5}}, "searcher.max_length.batch",
                 "unknown field; did you mean 'batches'?", id="length-unit-typo"),
    pytest.param({"max_length": {"batches": -1}}, "searcher.max_length.batches",
                 "expected an integer >= 0, got -1", id="length-negative"),
    pytest.param({"max_length": {"epochs": 1.5}}, "searcher.max_length.epochs",
                 "expected an integer >= 0, got 1.5", id="length-fraction"),
    pytest.param({"max_length": "long"}, "searcher.max_length",
                 "expected a length such as {batches: 937} or an integer (batches), got 'long'", id="length-word"),
    pytest.param(ASHA, "searcher", "the adaptive_asha searcher needs a length", id="asha-without-length"),
    pytest.param({**ASHA, "time_metric": "batches"}, "searcher.max_time",
                 "required when 'time_metric' is set", id="time_metric-alone"),
    pytest.param({**ASHA, "max_time": 100}, "searcher.time_metric",
                 "required when 'max_time' is set", id="max_time-alone"),
    pytest.param({**ASHA_LEN, "time_metric": "batches", "max_time": 9}, "searcher.max_length",
                 "either 'max_length' or 'time_metric' with 'max_time', not both", id="two-lengths"),
    pytest.param({**ASHA, "max_length": {"batches": 0}}, "searcher.max_length",
                 "expected a length >= 1 for the adaptive_asha searcher", id="asha-zero-length"),
    pytest.param({**ASHA, "time_metric": "batches", "max_time": 0}, "searcher.max_time",
                 "expected an integer >= 1, got 0", id="max_time-zero"),
    pytest.param({**ASHA_LEN, "mode": "fast"}, "searcher.mode",
                 "expected one of aggressive, standard, conservative, got 'fast'", id="mode"),
    pytest.param({**ASHA_LEN, "divisor": 1}, "searcher.divisor", "expected a number > 1, got 1", id="divisor-one"),
    pytest.param({**ASHA_LEN, "divisor": "4"}, "searcher.divisor", "expected a number > 1, got '4'", id="divisor-text"),
    pytest.param({**ASHA_LEN, "max_rungs": 0}, "searcher.max_rungs",
                 "expected an integer >= 1, got 0", id="max_rungs-zero"),
    pytest.param({**ASHA_LEN, "bracket_rungs": [3, 0]}, "searcher.bracket_rungs[1]",
                 "expected an integer >= 1, got 0", id="bracket_rungs-item"),
    pytest.param({**ASHA_LEN, "bracket_rungs": 3}, "searcher.bracket_rungs",
                 "expected a list of integers >= 1, got 3", id="bracket_rungs-scalar"),
    pytest.param({**ASHA_LEN, "name": "async_halving"}, "searcher.num_rungs",
                 "required for the async_halving searcher; expected an integer >= 1", id="async-needs-num_rungs"),
    pytest.param({"name": "grid", "sampler": "tpe"}, "searcher.sampler",
                 "the grid searcher does not sample hyperparameters", id="sampler-on-grid"),
    pytest.param({"sampler": "random"}, "searcher.sampler",
                 "the single searcher does not sample hyperparameters", id="sampler-on-single"),
    pytest.param({"name": "random", "max_trials": 4, "sampler": "bayes"}, "searcher.sampler",
                 "expected one of random, tpe, cmaes, qmc, got 'bayes'", id="sampler-unknown"),
    pytest.param({**ASHA_LEN, "stop_once": "yes"}, "searcher.stop_once",
                 "expected true or false, got 'yes'", id="stop_once-text"),
    pytest.param({"smaller_is_better": 1}, "searcher.smaller_is_better",
                 "expected true or false, got 1", id="smaller_is_better-number"),
    pytest.param({"source_trial_id": 0}, "searcher.source_trial_id",
                 "expected an integer >= 1, got 0", id="source_trial_id-zero"),
    pytest.param({"source_trial_id": 3, "source_checkpoint_uuid": "abc"}, "searcher.source_checkpoint_uuid",
                 "not both", id="two-warm-starts"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "path", "message"), BAD_SEARCHERS)
def test_bad_searcher_is_reported_at_its_field(fields: dict[str, Any], path: str, message: str) -> None:
    config = searcher(**{"name": "single", **fields})
    assert_problem(problems_of(config), path, message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "missing required section; expected a mapping such as {name: single, metric: loss}"),
        ("single", "expected a mapping such as {name: single, metric: loss}, got 'single'"),
    ],
)
def test_searcher_section_must_be_a_mapping(value: Any, message: str) -> None:
    config = minimal()
    if value is None:
        del config["searcher"]
    else:
        config["searcher"] = value
    assert_problem(problems_of(config), "searcher", message)
