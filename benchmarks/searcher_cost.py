"""Searcher cost: the time one search-method decision (one event) takes late in a large search.

A search of 1,000 trials is simulated once per method (:func:`det_airflow.searcher.simulate`), with
trials validating often enough for at least 10,000 validation reports, and every event the method
received is recorded. The recording is then replayed against a fresh method (the same decisions
again, now timed one event at a time) and against a no-op method that answers every event with
nothing: the baseline cost of the event loop itself.

Also timed, on a sample of events: the master's way of handling an event, which rebuilds the
method from its stored state first and stores it again after (JSON round trip included).

    .venv/bin/python benchmarks/searcher_cost.py [--trials 1000] [--reports 10000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from det_airflow.config._types import DoubleHP, ExperimentConfig, Length, LogHP, SearcherConfig  # noqa: E402
from det_airflow.searcher import (  # noqa: E402
    Action,
    ExitedReason,
    SearchMethod,
    load_search_method,
    make_search_method,
    simulate,
)

LENGTH = 1000
EVENTS = ("initial_trials", "trial_created", "validation_completed", "trial_exited", "trial_exited_early")


def _config(name: str, trials: int, **searcher: Any) -> ExperimentConfig:
    return ExperimentConfig(
        entrypoint="python3 train.py",
        searcher=SearcherConfig(
            name=name,  # type: ignore[arg-type]
            metric="validation_loss",
            max_trials=trials,
            max_length=Length("batches", LENGTH),
            **searcher,
        ),
        hyperparameters={"lr": LogHP(-5, -1), "dropout": DoubleHP(0.0, 0.5)},
        experiment_seed=1,
    )


class _Recorder:
    """Forwards to a method and records every event it gets."""

    def __init__(self, method: SearchMethod) -> None:
        self.method = method
        self.events: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.method, name)
        if name not in EVENTS:
            return attr

        def record(*args: Any) -> list[Action]:
            self.events.append((name, args))
            return attr(*args)

        return record


class NoOp(SearchMethod):
    """Answers every event with no action: what the event loop costs by itself."""

    name = "noop"

    @classmethod
    def trial_slots(cls, config: ExperimentConfig) -> int:
        return 0

    def initial_trials(self) -> list[Action]:
        return []

    def trial_created(self, request_id: int) -> list[Action]:
        return []

    def validation_completed(
        self, request_id: int, metrics: dict[str, Any], steps_completed: int
    ) -> list[Action]:
        return []

    def trial_exited(self, request_id: int) -> list[Action]:
        return []

    def trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        return []

    def progress(self) -> float:
        return 0.0


def record(config: ExperimentConfig, reports: int) -> list[tuple[str, tuple[Any, ...]]]:
    """The events of a whole simulated search, validating often enough for ``reports`` reports."""
    for every in (100, 50, 25, 10, 5, 2, 1):
        recorder = _Recorder(make_search_method(config))
        rng = random.Random(0)
        sim = simulate(
            recorder,  # type: ignore[arg-type]
            lambda create, units, rng=rng: rng.random() + 1 / (1 + units),
            validate_at=range(every, LENGTH + 1, every),
        )
        assert sim.finished
        if len(sim.reports) >= reports:
            return recorder.events
    return recorder.events


def replay(method: SearchMethod, events: list[tuple[str, tuple[Any, ...]]]) -> list[float]:
    """Seconds each event took."""
    times = []
    clock = time.perf_counter
    for name, args in events:
        handler = getattr(method, name)
        start = clock()
        handler(*args)
        times.append(clock() - start)
    return times


def master_style(
    config: ExperimentConfig, events: list[tuple[str, tuple[Any, ...]]], sample: int
) -> list[float]:
    """Seconds per event the master's way: load from JSON state, handle, store as JSON."""
    method = make_search_method(config)
    times = []
    step = max(len(events) // sample, 1)
    for i, (name, args) in enumerate(events):
        if i % step == 0 and i:
            state = json.dumps(method.state_dict())
            start = time.perf_counter()
            method = load_search_method(config, json.loads(state))
            getattr(method, name)(*args)
            json.dumps(method.state_dict())
            times.append(time.perf_counter() - start)
        else:
            getattr(method, name)(*args)
    return times


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--sample", type=int, default=200, help="events timed the master's way")
    parser.add_argument("--repeat", type=int, default=3, help="replays; the fastest is shown")
    args = parser.parse_args()

    cases = {
        "random": _config("random", args.trials, max_concurrent_trials=16),
        "adaptive_asha (stop-based)": _config("adaptive_asha", args.trials),
        "adaptive_asha (promotion)": _config("adaptive_asha", args.trials, stop_once=False),
    }
    print(f"{args.trials} trials, >= {args.reports} validation reports per search; times per event (µs)\n")
    header = (
        f"{'method':<28} {'events':>7} {'reports':>8} {'mean':>8} {'p50':>8} {'p99':>8} {'max':>8} "
        f"{'no-op':>8} {'ratio':>7} {'master ms p50/mean':>19}"
    )
    print(header)
    print("-" * len(header))
    for label, config in cases.items():
        events = record(config, args.reports)
        reports = sum(name == "validation_completed" for name, _ in events)
        # The fastest of a few replays: other load on the machine only ever adds time.
        times = min((replay(make_search_method(config), events) for _ in range(args.repeat)), key=sum)
        baseline = min((replay(NoOp(config), events) for _ in range(args.repeat)), key=sum)
        master = min((master_style(config, events, args.sample) for _ in range(args.repeat)), key=sum)
        quantiles = statistics.quantiles(times, n=100)
        mean, base = statistics.mean(times), statistics.mean(baseline)
        print(
            f"{label:<28} {len(events):>7} {reports:>8} {_us(mean)} {_us(quantiles[49])} {_us(quantiles[98])} "
            f"{_us(max(times))} {_us(base)} {mean / base:>7.1f} "
            f"{statistics.median(master) * 1e3:>9.2f} / {statistics.mean(master) * 1e3:>5.2f}"
        )
    print(
        "\nmean/p50/p99/max: one event on a live method; no-op: the same events against a method that "
        "does nothing;\nratio: mean / no-op; master ms: load state (JSON) + event + store state (JSON), "
        f"{args.sample} events sampled across the search; fastest of {args.repeat} replays."
    )


if __name__ == "__main__":
    main()
