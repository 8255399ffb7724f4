"""Harness overhead: det.pytorch.Trainer against a plain PyTorch loop on the same model, data and batches.

Both run in this process, off-cluster (the Trainer's local store is a temporary folder), on one CPU
thread: the digits CNN of examples/mnist_pytorch (`DigitsTrial` of model_def.py for the Trainer, the
same `build_model`, Adadelta and data for the plain loop), N batches of 32 from a seeded shuffle.
Each timed run is the whole of training plus one validation pass at the end, in both; neither
checkpoints (checkpoint_policy none). The Trainer reports averaged training metrics every 100
batches; the plain loop sums the loss on the device and logs its average every 100 batches, as a
hand-written loop would. Runs alternate between the two, after a warm-up of each; the ratio is
Trainer throughput / plain throughput per pair, and the median over the pairs is the figure. The
ratio of the best runs of each (as timeit does: noise only ever adds time) is printed too.

Throughput is counted in CPU time of the training thread (with one torch thread and no loader
workers, all the work happens there), so that other processes on a shared machine do not decide the
result; wall-clock throughput is printed beside it.

Then the cost of TensorBoard events: the same Trainer run with the reported metrics written as
event files (the default) and without (``DET_TENSORBOARD=off``), alternating, at the reporting
period above and at a report every batch. The events are written by a background thread, so this
comparison also counts the CPU time of the whole process (all its threads); the ratio is events-on
throughput / events-off throughput. Off-cluster nothing is synced: the event files are written in
the local store.

    .venv/bin/python benchmarks/harness_overhead.py [--batches 1000] [--repeats 9] [--only plain|tensorboard]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "mnist_pytorch"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(EXAMPLE))

import torch  # noqa: E402
from model import build_model, load_data  # noqa: E402
from model_def import VALIDATION_BATCH_SIZE, DigitsTrial  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402

from det_airflow import pytorch  # noqa: E402
from det_airflow.core._tensorboard import ENV_VARIABLE  # noqa: E402

HPARAMS = {
    "learning_rate": 1.0,
    "n_filters1": 32,
    "n_filters2": 64,
    "dropout1": 0.25,
    "dropout2": 0.5,
    "global_batch_size": 32,
}
REPORTING_PERIOD = 100
SEED = 0


class Clock:
    """Wall, thread CPU and process CPU seconds since it was made."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.process = time.perf_counter(), time.thread_time(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.thread_time() - self.cpu

    def read_all(self) -> tuple[float, float, float]:
        """(wall, training thread CPU, process CPU)."""
        return (*self.read(), time.process_time() - self.process)


def run_trainer(batches: int) -> tuple[float, float]:
    """(wall, cpu) seconds of Trainer.fit() for ``batches`` batches (the trial is built before)."""
    return run_trainer_timed(batches)[:2]


def run_trainer_timed(
    batches: int, *, reporting_period: int = REPORTING_PERIOD, events: bool = True
) -> tuple[float, float, float]:
    """(wall, thread CPU, process CPU) seconds of Trainer.fit(), until the context has closed (its
    last events written); ``events`` False sets DET_TENSORBOARD=off."""
    if events:
        os.environ.pop(ENV_VARIABLE, None)
    else:
        os.environ[ENV_VARIABLE] = "off"
    with pytorch.init(hparams=HPARAMS, exp_conf={"searcher": {"metric": "validation_loss"}}) as context:
        trial = DigitsTrial(context)
        trainer = pytorch.Trainer(trial, context)
        clock = Clock()
        trainer.fit(
            max_length=pytorch.Batch(batches),
            reporting_period=pytorch.Batch(reporting_period),
            checkpoint_policy="none",
        )
    os.environ.pop(ENV_VARIABLE, None)
    return clock.read_all()


def run_plain(batches: int) -> tuple[float, float]:
    """(wall, cpu) seconds of the same training written as a plain PyTorch loop."""
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    model = build_model(HPARAMS)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=HPARAMS["learning_rate"])
    train_x, train_y, val_x, val_y = load_data()
    log = logging.getLogger("plain")
    clock = Clock()
    loader = torch.utils.data.DataLoader(
        TensorDataset(train_x, train_y),
        batch_size=int(HPARAMS["global_batch_size"]),
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(SEED),
    )
    model.train()
    done, loss_sum = 0, torch.zeros(())
    while done < batches:
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            done += 1
            if done % REPORTING_PERIOD == 0:
                log.info("batch %d: loss %.4f", done, loss_sum.item() / REPORTING_PERIOD)
                loss_sum = torch.zeros(())
            if done == batches:
                break
    model.eval()
    with torch.no_grad():
        validation = torch.utils.data.DataLoader(
            TensorDataset(val_x, val_y), batch_size=VALIDATION_BATCH_SIZE
        )
        losses = [nn.functional.cross_entropy(model(x), y) for x, y in validation]
        log.info("validation_loss %.4f", torch.stack(losses).mean().item())
    return clock.read()


def compare_plain(args: argparse.Namespace) -> None:
    """Trainer against the plain loop, alternating; ratios of throughput Trainer / plain."""
    print(
        f"{args.batches} batches of {HPARAMS['global_batch_size']}, digits CNN, 1 CPU thread, "
        f"torch {torch.__version__}; batches/s in thread CPU time (wall clock in brackets)"
    )
    print(f"{'run':>4} | {'plain':>18} | {'Trainer':>18} | {'ratio':>6} | {'wall ratio':>10}")
    ratios, wall_ratios, plain_cpus, trainer_cpus = [], [], [], []
    for repeat in range(args.repeats):
        # Alternate which goes first, so that drifts of the machine hit both alike.
        if repeat % 2 == 0:
            plain, trainer = run_plain(args.batches), run_trainer(args.batches)
        else:
            trainer, plain = run_trainer(args.batches), run_plain(args.batches)
        (plain_wall, plain_cpu), (trainer_wall, trainer_cpu) = plain, trainer
        plain_cpus.append(plain_cpu)
        trainer_cpus.append(trainer_cpu)
        ratios.append(plain_cpu / trainer_cpu)
        wall_ratios.append(plain_wall / trainer_wall)
        print(
            f"{repeat + 1:>4} | {args.batches / plain_cpu:>7.1f} ({args.batches / plain_wall:>7.1f}) | "
            f"{args.batches / trainer_cpu:>7.1f} ({args.batches / trainer_wall:>7.1f}) | "
            f"{ratios[-1]:>6.3f} | {wall_ratios[-1]:>10.3f}"
        )
    print(
        f"median ratio (Trainer / plain): {statistics.median(ratios):.3f} in CPU time, "
        f"{statistics.median(wall_ratios):.3f} in wall time  (target >= 0.97)"
    )
    print(
        f"best runs: plain {args.batches / min(plain_cpus):.1f}, Trainer "
        f"{args.batches / min(trainer_cpus):.1f} batches/s: ratio {min(plain_cpus) / min(trainer_cpus):.3f}"
    )


def compare_tensorboard(args: argparse.Namespace, reporting_period: int) -> None:
    """Trainer with events on against off, alternating; ratios of throughput on / off."""
    print(
        f"\nTensorBoard events on / off: Trainer, a report every {reporting_period} batches; "
        "batches/s in training-thread CPU, process CPU and wall time"
    )
    print(f"{'run':>4} | {'off: thread  process   wall':>27} | {'on: thread  process   wall':>26} | ratios")
    ratios: dict[str, list[float]] = {"thread CPU": [], "process CPU": [], "wall": []}
    reports = -(-args.batches // reporting_period) + 1  # the training reports and the validation
    extra_us: dict[str, list[float]] = {"thread CPU": [], "process CPU": []}
    for repeat in range(args.repeats):
        if repeat % 2 == 0:
            off = run_trainer_timed(args.batches, reporting_period=reporting_period, events=False)
            on = run_trainer_timed(args.batches, reporting_period=reporting_period, events=True)
        else:
            on = run_trainer_timed(args.batches, reporting_period=reporting_period, events=True)
            off = run_trainer_timed(args.batches, reporting_period=reporting_period, events=False)
        (off_wall, off_thread, off_process), (on_wall, on_thread, on_process) = off, on
        pair = {
            "thread CPU": off_thread / on_thread,
            "process CPU": off_process / on_process,
            "wall": off_wall / on_wall,
        }
        for name, ratio in pair.items():
            ratios[name].append(ratio)
        extra_us["thread CPU"].append((on_thread - off_thread) / reports * 1e6)
        extra_us["process CPU"].append((on_process - off_process) / reports * 1e6)
        print(
            f"{repeat + 1:>4} | {args.batches / off_thread:>12.1f} {args.batches / off_process:>8.1f} "
            f"{args.batches / off_wall:>6.1f} | {args.batches / on_thread:>11.1f} "
            f"{args.batches / on_process:>8.1f} {args.batches / on_wall:>6.1f} | "
            + " ".join(f"{value:.3f}" for value in pair.values())
        )
    print(
        "median ratio (events on / off): "
        + ", ".join(f"{statistics.median(values):.4f} in {name}" for name, values in ratios.items())
        + "  (target >= 0.99)"
    )
    if reports >= 100:  # fewer, and the difference per report is the runs' noise divided by few
        print(
            f"events' cost per report ({reports} reports a run), median: "
            + ", ".join(f"{statistics.median(values):+.1f} µs of {name}" for name, values in extra_us.items())
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--only", choices=("plain", "tensorboard"), help="run one of the two comparisons")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="det-harness-bench-") as store:
        os.environ["DET_LOCAL_STORE"] = store
        for name in [n for n in os.environ if n.startswith("DET_") and n != "DET_LOCAL_STORE"]:
            del os.environ[name]
        run_plain(200)  # warm-up: imports (tensorboard's too, at the first report), allocator, threads
        run_trainer(200)
        if args.only != "tensorboard":
            compare_plain(args)
        if args.only != "plain":
            for period in (REPORTING_PERIOD, 1):
                compare_tensorboard(args, period)


if __name__ == "__main__":
    main()
