"""``det preview-search CONFIG``: the trials a search would run and how long each trains (no master needed).

As Determined 0.38's command: prints the searcher section, then how many trials train for how long.
Stop-based ASHA (``adaptive_asha`` and ``async_halving``, the default ``stop_once: true``) is
previewed with Determined's closed form per bracket, so the table is the one Determined prints.
Other searches (promotion ASHA, random, grid, single) are simulated: the very search method the
master runs, fed made-up validation metrics from a seeded generator until it shuts down.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from typing import TYPE_CHECKING

from det_airflow.cli import render

if TYPE_CHECKING:
    from det_airflow.config import ExperimentConfig
    from det_airflow.searcher import Simulation

HEADERS = ("Trials", "Training Time")
# The simulation's made-up metrics; a config without experiment_seed previews with this one.
PREVIEW_SEED = 0
CLOSED_FORM_NOTE = (
    "Closed form (as Determined 0.38): per bracket, max(int(trials / divisor), 1) trials continue "
    "past each rung and the rest stop there."
)
SIMULATION_NOTE = (
    "Simulation: the search method run offline on made-up metrics (seeded by experiment_seed, else 0)."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    preview = subparsers.add_parser(
        "preview-search", help="preview the trials a search would run and how long each trains"
    )
    preview.add_argument("config_file", metavar="CONFIG", help="experiment configuration (YAML)")
    preview.set_defaults(func=_preview)


def _preview(args: argparse.Namespace) -> int:
    import yaml

    from det_airflow.config import config_to_dict, load_config

    cfg = load_config(args.config_file)
    searcher = {k: v for k, v in config_to_dict(cfg)["searcher"].items() if v is not None}
    print("Using search configuration:")
    print(yaml.safe_dump(searcher, default_flow_style=False, sort_keys=False))
    from det_airflow.searcher import make_search_method
    from det_airflow.searcher._simulate import closed_form_lengths

    counts = closed_form_lengths(make_search_method(cfg))
    if counts is not None:
        print(f"{CLOSED_FORM_NOTE}\n")
        spent = sum(units * count for units, count in counts.items())
    else:
        simulation = simulate_search(cfg)
        counts, spent = simulation.lengths(), simulation.spent
        print(f"{SIMULATION_NOTE}\n")
    length, unit = _length_and_unit(cfg)
    lengths = sorted(counts.items())
    rows = [(count, _training_time(units, length, unit)) for units, count in lengths]
    render.print_table(HEADERS, rows)
    trials = sum(count for _, count in lengths)
    total = f" and train for a total of {spent} {unit}" if length else ""
    print(f"This search will create a total of {trials} trial(s){total}.")
    return 0


def simulate_search(cfg: ExperimentConfig) -> Simulation:
    """Runs the config's search method offline until it shuts down.

    Hyperparameters do not change how long trials train, so the preview samples them at random
    whatever ``searcher.sampler`` says; validation metrics are uniform draws from a seeded
    generator (``experiment_seed``, else 0), so a preview is the same every time.
    """
    from det_airflow.searcher import make_search_method, simulate

    seed = PREVIEW_SEED if cfg.experiment_seed is None else cfg.experiment_seed
    cfg = cfg.replace(searcher=dataclasses.replace(cfg.searcher, sampler="random"), experiment_seed=seed)
    rng = random.Random(seed)
    return simulate(make_search_method(cfg), lambda create, units: rng.random())


def _length_and_unit(cfg: ExperimentConfig) -> tuple[int | None, str]:
    """The search's full length and its unit as Determined shows it (``Batches``, or the time metric)."""
    searcher = cfg.searcher
    if searcher.time_metric is not None:
        return searcher.max_time, searcher.time_metric
    if searcher.max_length is not None:
        return searcher.max_length.value, searcher.max_length.unit.capitalize()
    return None, "Batches"


def _training_time(units: int, length: int | None, unit: str) -> str:
    if length is None or units == length:
        return "train to completion"
    return f"train for {units} {unit}"
