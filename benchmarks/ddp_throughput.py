"""Data-parallel throughput on CPUs: examples/mnist_pytorch/distributed.yaml with 2 gloo ranks
against the same trial with 1 rank, in the same run.

Each run is the example's PyTorchTrial under ``det_airflow.launchers.torch_distributed``, started
as a local trial is (its own work folder, the trial's environment, metrics into a local store). The
rate is the batches trained between the first and the last training report, divided by the time
between them (the reports' own times), so process start and imports do not count. Two shapes:

- same global batch (32): each of 2 ranks trains 16 images a batch (strong scaling);
- same batch per rank (32): 2 ranks train 64 images a batch (weak scaling), reported in images/s.

Runs alternate between 1 and 2 ranks; the figures are medians.

    .venv/bin/python benchmarks/ddp_throughput.py [--repeats 3] [--batches 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "mnist_pytorch"
sys.path.insert(0, str(REPO))

from det_airflow.trial_process import (  # noqa: E402
    TrialSpec,
    entrypoint_argv,
    run_trial_process,
    trial_environment,
    write_trial_files,
)


def run(slots: int, global_batch: int, batches: int, scratch: Path) -> float:
    """Batches a second of one run, between its first and last training report."""
    shutil.rmtree(scratch, ignore_errors=True)
    config = yaml.safe_load((EXAMPLE / "distributed.yaml").read_text())
    config["resources"]["slots_per_trial"] = slots
    config["hyperparameters"]["global_batch_size"] = global_batch
    config["searcher"]["max_length"] = {"batches": batches}
    config["min_validation_period"] = {"batches": batches}
    work = scratch / "work"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns(".det_local", "__pycache__"))
    spec = TrialSpec(
        trial_id=1,
        experiment_id=1,
        request_id="bench",
        trial_seed=1,
        hparams=config["hyperparameters"],
        config=config,
    )
    write_trial_files(spec, work)
    env = trial_environment(spec, local_store=scratch / "store", workdir=work)
    lines: list[str] = []
    code = run_trial_process(
        work, entrypoint_argv(config["entrypoint"]), env, on_output=lambda line, _: lines.append(line)
    )
    if code != 0:
        raise SystemExit(f"{slots}-rank run exited {code}:\n" + "\n".join(lines[-30:]))
    reports = [
        json.loads(line)
        for line in (scratch / "store" / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["group"] == "training"
    ]
    first, last = reports[0], reports[-1]
    seconds = (
        datetime.fromisoformat(last["report_time"]) - datetime.fromisoformat(first["report_time"])
    ).total_seconds()
    return (last["steps_completed"] - first["steps_completed"]) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    rates: dict[tuple[int, int], list[float]] = {(1, 32): [], (2, 32): [], (2, 64): []}
    with tempfile.TemporaryDirectory(prefix="det-ddp-") as tmp:
        for _ in range(args.repeats):
            for slots, batch in rates:
                rates[(slots, batch)].append(run(slots, batch, args.batches, Path(tmp) / "run"))
    one, two_same_global, two_same_per_rank = (statistics.median(rates[key]) for key in rates)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, medians of {args.repeats}")
    print(f"1 rank,  batch 32           {one:7.1f} batches/s  {one * 32:8.0f} images/s")
    print(
        f"2 ranks, global batch 32    {two_same_global:7.1f} batches/s  {two_same_global * 32:8.0f} images/s"
        f"   ratio {two_same_global / one:.2f}"
    )
    print(
        f"2 ranks, 32 per rank (64)   {two_same_per_rank:7.1f} batches/s  {two_same_per_rank * 64:8.0f} images/s"
        f"   ratio (images/s) {two_same_per_rank * 64 / (one * 32):.2f}"
    )


if __name__ == "__main__":
    main()
