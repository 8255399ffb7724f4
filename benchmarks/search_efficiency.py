"""Search efficiency: how much training each search method needs, offline, on a synthetic problem.

Every method searches the same six hyperparameters of :mod:`_multifidelity` (Hartmann-6 asymptotes,
power-law learning curves, seeded noise) through :func:`det_airflow.searcher.simulate`: the
det-airflow search methods exactly as the master runs them, and, as an outside reference, Optuna's
own TPE sampler with its SuccessiveHalvingPruner (ask/tell on ``optuna.Study``, wrapped in the same
event protocol so it gets the same concurrency, rung lengths and budget):

- random: ``random`` searcher, 64 trials of the full length L (the budget: 64 × L units),
- adaptive_asha: stop-based (Determined 0.38) with Determined's defaults (divisor 4, standard mode,
  max_rungs 5), default (random) sampler,
- adaptive_asha + tpe: the same with ``sampler: tpe`` (our Optuna extension),
- optuna TPE + SHA: ``TPESampler`` + ``SuccessiveHalvingPruner(min_resource=L/d**4, reduction_factor=d)``.

Printed, per method, median over seeds:
(a) the training units (all trials together) spent when the method first reports, at the full
    length, a loss at least as good as random search's final best in that seed; ratio vs random;
(b) the best full-length loss reported within the budget.

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--workers 2] [--length 256]
        [--divisor 4] [--random-trials 64] [--concurrency 8] [--methods random,adaptive_asha]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _multifidelity import HPARAMS, MultiFidelityProblem  # noqa: E402

from det_airflow.config._types import ExperimentConfig, Length, SearcherConfig  # noqa: E402
from det_airflow.searcher import (  # noqa: E402  # noqa: E402
    Action,
    Create,
    ExitedReason,
    SearchMethod,
    Stop,
    make_search_method,
    simulate,
)

# Determined's adaptive_asha defaults (divisor 4, standard mode, max_rungs 5) on a length of 4**4.
LENGTH = 256  # units of a full-length trial
DIVISOR = 4
RANDOM_TRIALS = 64
BUDGET = RANDOM_TRIALS * LENGTH
CONCURRENCY = 8
METHODS = ("random", "adaptive_asha", "adaptive_asha + tpe", "optuna TPE + SHA")


def _config(name: str, seed: int, **searcher: Any) -> ExperimentConfig:
    return ExperimentConfig(
        entrypoint="python3 train.py",
        searcher=SearcherConfig(
            name=name,  # type: ignore[arg-type]
            metric="validation_loss",
            max_length=Length("batches", LENGTH),
            max_concurrent_trials=CONCURRENCY,
            divisor=DIVISOR,
            **searcher,
        ),
        hyperparameters=HPARAMS,
        experiment_seed=seed,
    )


class OptunaSHA(SearchMethod):
    """Optuna's TPE + SuccessiveHalvingPruner behind the search-method protocol (reference only)."""

    name = "optuna_tpe_sha"

    def __init__(self, config: ExperimentConfig) -> None:
        import optuna

        from det_airflow.searcher._optuna import search_space

        super().__init__(config)
        self._optuna = optuna
        self._space = search_space(config.hyperparameters)
        self.study = optuna.create_study(
            sampler=optuna.samplers.TPESampler(seed=config.experiment_seed),
            pruner=optuna.pruners.SuccessiveHalvingPruner(
                min_resource=LENGTH // DIVISOR**4, reduction_factor=DIVISOR, min_early_stopping_rate=0
            ),
        )
        self._trials: dict[int, Any] = {}

    @classmethod
    def trial_slots(cls, config: ExperimentConfig) -> int:
        return 10**9

    def rung_lengths(self) -> list[int]:
        return [LENGTH // DIVISOR**k for k in range(4, -1, -1)]

    def initial_trials(self) -> list[Action]:
        return [self._ask() for _ in range(CONCURRENCY)]

    def validation_completed(
        self, request_id: int, metrics: dict[str, Any], steps_completed: int
    ) -> list[Action]:
        trial, value = self._trials[request_id], metrics["validation_loss"]
        trial.report(value, steps_completed)
        if steps_completed >= LENGTH:
            self.study.tell(trial, value)
        elif trial.should_prune():
            self.study.tell(trial, state=self._optuna.trial.TrialState.PRUNED)
        else:
            return []
        return [Stop(request_id), self._ask()]

    def trial_exited(self, request_id: int) -> list[Action]:
        return []

    def trial_exited_early(self, request_id: int, reason: ExitedReason) -> list[Action]:
        return []

    def progress(self) -> float:
        return 0.0

    def _ask(self) -> Create:
        from det_airflow.searcher._optuna import _leaves, _rebuild

        trial = self.study.ask(self._space)
        leaves = {leaf.name: leaf for leaf in _leaves(self.config.hyperparameters, ())}
        create = self._create(_rebuild(self.config.hyperparameters, trial.params, leaves))
        self._trials[create.request_id] = trial
        return create


def _method(name: str, seed: int) -> SearchMethod:
    if name == "random":
        return make_search_method(_config("random", seed, max_trials=RANDOM_TRIALS))
    if name == "optuna TPE + SHA":
        return OptunaSHA(_config("random", seed, max_trials=1))
    sampler = "tpe" if name.endswith("tpe") else "random"
    return make_search_method(_config("adaptive_asha", seed, max_trials=5000, sampler=sampler))


def run(job: tuple[str, int, dict[str, int]]) -> tuple[str, int, list[tuple[int, float]], float]:
    """One method, one seed: the (units spent, loss) of every full-length report, and wall seconds."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name, seed, settings = job
    _configure(**settings)
    problem = MultiFidelityProblem(length=LENGTH)
    started = time.perf_counter()
    sim = simulate(
        _method(name, seed),
        lambda create, units: problem.loss(create.hparams, units, seed=create.trial_seed),
        budget=BUDGET,
    )
    finals = [(r.spent, r.value) for r in sim.reports if r.units >= LENGTH]
    return name, seed, finals, time.perf_counter() - started


def _configure(*, length: int, divisor: int, random_trials: int, concurrency: int) -> None:
    global LENGTH, DIVISOR, RANDOM_TRIALS, BUDGET, CONCURRENCY
    LENGTH, DIVISOR, RANDOM_TRIALS, CONCURRENCY = length, divisor, random_trials, concurrency
    BUDGET = RANDOM_TRIALS * LENGTH


def _units_to_reach(finals: list[tuple[int, float]], target: float) -> float:
    return next((spent for spent, value in finals if value <= target), math.inf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--length", type=int, default=LENGTH, help="units of a full-length trial")
    parser.add_argument("--divisor", type=int, default=DIVISOR)
    parser.add_argument("--random-trials", type=int, default=RANDOM_TRIALS, help="sets the budget")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated, random first")
    args = parser.parse_args()
    settings = {
        "length": args.length,
        "divisor": args.divisor,
        "random_trials": args.random_trials,
        "concurrency": args.concurrency,
    }
    _configure(**settings)
    methods = tuple(args.methods.split(","))

    jobs = [(name, seed, settings) for seed in range(args.seeds) for name in methods]
    started = time.perf_counter()
    with Pool(args.workers) as pool:
        results = pool.map(run, jobs, chunksize=1)
    wall = time.perf_counter() - started
    finals = {(name, seed): f for name, seed, f, _ in results}
    seconds = {name: sum(s for n, _, _, s in results if n == name) for name in methods}

    seeds = range(args.seeds)
    target = {seed: min(v for _, v in finals["random", seed]) for seed in seeds}
    reach = {name: [_units_to_reach(finals[name, s], target[s]) for s in seeds] for name in methods}
    best = {name: [min((v for _, v in finals[name, s]), default=math.inf) for s in seeds] for name in methods}

    print(
        f"Synthetic multi-fidelity problem (Hartmann-6 asymptotes, power-law curves, noise), {args.seeds} "
        f"seeds;\nbudget {BUDGET} units = {RANDOM_TRIALS} full-length trials of {LENGTH} units; "
        f"{CONCURRENCY} trials at a time; divisor {DIVISOR}.\n"
    )
    print("(a) Training units to reach random search's final best loss (at full length)")
    base = statistics.median(reach["random"])
    print(f"{'method':<22} {'median units':>12} {'vs random':>10} {'vs budget':>10} {'reached':>8}")
    for name in methods:
        med = statistics.median(reach[name])
        reached = sum(math.isfinite(u) for u in reach[name])
        shown = f"{med:.0f}" if math.isfinite(med) else f">{BUDGET}"
        ratio = f"{med / base:.2f}" if math.isfinite(med) else "n/a"
        of_budget = f"{med / BUDGET:.2f}" if math.isfinite(med) else "n/a"
        print(f"{name:<22} {shown:>12} {ratio:>10} {of_budget:>10} {reached:>5}/{args.seeds}")
    print(
        "  vs random: against the units random search had spent when it reported that best value;\n"
        "  vs budget: against the whole budget (what random search spends before it knows it is best)."
    )

    print("\n(b) Best full-length loss within the budget (lower is better)")
    print(f"{'method':<22} {'median':>8} {'mean':>8} {'best':>8} {'worst':>8} {'CPU s':>7}")
    for name in methods:
        values = best[name]
        print(
            f"{name:<22} {statistics.median(values):>8.4f} {statistics.mean(values):>8.4f} "
            f"{min(values):>8.4f} {max(values):>8.4f} {seconds[name]:>7.1f}"
        )
    if "adaptive_asha + tpe" in best and "optuna TPE + SHA" in best:
        ours, theirs = best["adaptive_asha + tpe"], best["optuna TPE + SHA"]
        wins = sum(a <= b for a, b in zip(ours, theirs, strict=True))
        print(
            f"\nadaptive_asha + tpe vs optuna TPE + SHA: at least as good in {wins}/{args.seeds} seeds; "
            f"median ratio {statistics.median(ours) / statistics.median(theirs):.3f} (loss, lower is better)"
        )
    print(f"wall time {wall:.0f} s on {args.workers} workers")


if __name__ == "__main__":
    main()
