"""DetCallback overhead: a Hugging Face ``Trainer`` loop with ``DetCallback`` against the same loop without it.

Both run in this process, off-cluster (``core.init()`` writes to a local store in a temporary
folder, and the reported metrics are written as TensorBoard events, as by default), on one torch
thread: a 2-layer GPT-2 built from a config (nothing downloaded), random token sequences, N steps of
batch 8, no evaluation and no checkpoints, so that what differs is the callback's reports and its
preemption checks. Two reporting periods: the Trainer logging every 10 steps, and every step (the
callback's worst case). Runs alternate between the two loops after a warm-up of each; the ratio is
with-callback throughput / without throughput per pair, and the median over the pairs is the figure
(the ratio of the best runs is printed beside it).

Throughput is counted in CPU time of the whole process (the TensorBoard events are written by a
background thread, so the main thread's time alone would flatter the callback); wall-clock is printed
beside it.

    .venv/bin/python benchmarks/hf_callback_overhead.py [--steps 200] [--repeats 7]
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import transformers  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

from det_airflow import core, trial_env  # noqa: E402
from det_airflow.transformers import DetCallback  # noqa: E402

SEQUENCE = 32
VOCAB = 256
BATCH = 8


class Tokens(Dataset):  # type: ignore[type-arg]
    def __init__(self, count: int) -> None:
        self.ids = torch.randint(0, VOCAB, (count, SEQUENCE), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def model() -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQUENCE, n_embd=64, n_layer=2, n_head=4)
    return transformers.GPT2LMHeadModel(config)


def run(steps: int, logging_steps: int, with_callback: bool, folder: Path) -> tuple[float, float]:
    """(wall, process CPU) seconds of ``trainer.train()``; the Trainer is built before the clock starts."""
    args = transformers.TrainingArguments(
        output_dir=str(folder / "out"),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        logging_steps=logging_steps,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    os.environ[trial_env.LOCAL_STORE] = str(folder / "store")
    with core.init() as core_context:
        callbacks: list[Any] = [DetCallback(core_context, args)] if with_callback else []
        trainer = transformers.Trainer(
            model=model(), args=args, train_dataset=Tokens(steps * BATCH), callbacks=callbacks
        )
        trainer.remove_callback(transformers.PrinterCallback)  # console output is not what is measured
        wall, cpu = time.perf_counter(), time.process_time()
        trainer.train()
        elapsed = time.perf_counter() - wall, time.process_time() - cpu
    return elapsed


def compare(steps: int, logging_steps: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(repeats + 1):
            for with_callback in (False, True):
                measured = run(steps, logging_steps, with_callback, Path(tmp) / f"{i}-{with_callback}")
                if i:  # the first pair warms up
                    times[with_callback].append(measured)
    cpu_ratios = [plain[1] / det[1] for plain, det in zip(times[False], times[True], strict=True)]
    wall_ratios = [plain[0] / det[0] for plain, det in zip(times[False], times[True], strict=True)]
    best = min(t[1] for t in times[False]) / min(t[1] for t in times[True])
    plain_rate = steps / statistics.median(t[1] for t in times[False])
    print(
        f"logging every {logging_steps:>2} steps: ratio {statistics.median(cpu_ratios):.3f} "
        f"(CPU, median of {repeats} pairs; best runs {best:.3f}; wall {statistics.median(wall_ratios):.3f}); "
        f"without callback {plain_rate:.1f} steps/s CPU"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    options = parser.parse_args()
    torch.set_num_threads(1)
    for name in (trial_env.TRIAL_ID, trial_env.MASTER, trial_env.TEST_MODE):
        os.environ.pop(name, None)
    logging.disable(logging.WARNING)
    transformers.logging.set_verbosity_error()
    print(f"DetCallback overhead: {options.steps} steps of batch {BATCH}, 2-layer GPT-2, one torch thread")
    for logging_steps in (10, 1):
        compare(options.steps, logging_steps, options.repeats)


if __name__ == "__main__":
    main()
