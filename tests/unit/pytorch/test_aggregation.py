"""``optimizations.aggregation_frequency``: gradients of N batches add up before each optimizer step."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from det_airflow.config import parse_config
from det_airflow.errors import DetError

from ._linear import train
from .conftest import Store

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def assert_same(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert left.keys() == right.keys()
    for name in left:
        torch.testing.assert_close(left[name], right[name], rtol=1e-5, atol=1e-6, msg=name)


def test_two_batches_aggregated_train_as_one_batch_twice_the_size(store: Store) -> None:
    aggregated, aggregated_lr = train(batch_size=4, batches=8, optimizations={"aggregation_frequency": 2})
    steps_aggregated = store.steps("training")
    doubled, doubled_lr = train(batch_size=8, batches=4)

    assert_same(aggregated, doubled)
    # Four optimizer steps in both runs: the scheduler stepped with the optimizer only.
    assert aggregated_lr == doubled_lr == pytest.approx(0.1 * 0.5**4)
    # Determined counts batches, not optimizer steps.
    assert steps_aggregated == [2, 4, 6, 8]
    assert store.checkpoints()[0]["metadata"]["steps_completed"] == 8


def test_the_init_argument_sets_the_frequency_without_a_config(store: Store) -> None:
    from_argument, _ = train(batch_size=4, batches=8, aggregation_frequency=2)
    doubled, _ = train(batch_size=8, batches=4)

    assert_same(from_argument, doubled)


def test_without_averaging_the_gradients_of_the_window_are_summed(store: Store) -> None:
    summed, _ = train(
        batch_size=4,
        batches=8,
        lr=0.05,
        optimizations={"aggregation_frequency": 2, "average_aggregated_gradients": False},
    )
    doubled, _ = train(batch_size=8, batches=4, lr=0.1)

    assert_same(summed, doubled)


def test_frequency_one_steps_every_batch(store: Store) -> None:
    every_batch, lr = train(batch_size=4, batches=8, optimizations={"aggregation_frequency": 1})
    aggregated, _ = train(batch_size=4, batches=8, optimizations={"aggregation_frequency": 2})

    assert lr == pytest.approx(0.1 * 0.5**8)
    assert not torch.allclose(every_batch["weight"], aggregated["weight"])


@pytest.mark.parametrize("value", [0, "two", 1.5])
def test_an_invalid_frequency_in_the_config_is_named(store: Store, value: Any) -> None:
    with pytest.raises(DetError, match=r"optimizations\.aggregation_frequency: expected an integer >= 1"):
        train(batch_size=4, batches=2, optimizations={"aggregation_frequency": value})


def test_an_invalid_frequency_argument_is_refused(store: Store) -> None:
    with pytest.raises(DetError, match=r"aggregation_frequency: expected an integer >= 1, got 0"):
        train(batch_size=4, batches=2, aggregation_frequency=0)


def test_only_optimizations_left_inactive_are_warned_about() -> None:
    base = "searcher: {name: single, metric: loss, max_length: {batches: 10}}\nentrypoint: train:Trial\n"
    acted_on = parse_config(
        base + "optimizations: {aggregation_frequency: 4, average_aggregated_gradients: false}\n"
    )
    defaults = parse_config(base + "optimizations: {mixed_precision: O0, average_training_metrics: true}\n")
    inactive = parse_config(base + "optimizations: {aggregation_frequency: 4, mixed_precision: O1}\n")

    assert acted_on.warnings == defaults.warnings == ()
    assert inactive.warnings == ("accepted but not acted on by det-airflow: optimizations.mixed_precision",)


def test_two_workers_aggregate_as_one_worker_with_the_whole_window(store: Store, tmp_path: Path) -> None:
    """Under torchrun, DDP exchanges gradients once per window (no_sync inside it); the result is
    one process's training on batches as large as both workers' windows together."""
    program = tmp_path / "aggregate.py"
    program.write_text(
        textwrap.dedent(
            """
            import os
            import sys

            import torch

            from tests.unit.pytorch._linear import train

            torch.set_num_threads(1)
            weights, lr = train(batch_size=8, batches=4, optimizations={"aggregation_frequency": 2})
            if os.environ["RANK"] == "0":
                torch.save({"weights": weights, "lr": lr}, sys.argv[1])
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(program)]
        + [str(tmp_path / "weights.pt")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    distributed = torch.load(tmp_path / "weights.pt")

    alone, lr = train(batch_size=16, batches=2)

    assert_same(distributed["weights"], alone)
    assert distributed["lr"] == pytest.approx(lr)
