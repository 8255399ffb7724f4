"""Container overhead: start of a trial run → its first training step, Docker against a local process.

Both runners get the same prepared trial: a work folder holding a script that imports torch and
det_airflow, builds the digits CNN of examples/mnist_pytorch, takes one training step and prints
``first step``. The time is from the call of the runner (``DockerRunner.run`` with the trial image
of ``make trial-image``, or ``run_trial_process``) to that line reaching the caller. Runs alternate
between the two after a warm-up of each (the first container start of an image reads its layers
from disk); the figures are the medians, the extra seconds of Docker and the ratio. Needs a running
Docker daemon and the trial image. With ``--ranks 2`` both run the script as 2 gloo ranks under
``det_airflow.launchers.torch_distributed``, and the time is until the last rank's first step.

    .venv/bin/python benchmarks/container_overhead.py [--repeats 7] [--ranks 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "mnist_pytorch"
sys.path.insert(0, str(REPO))

import docker  # noqa: E402

from det_airflow.operators.runners import DEFAULT_IMAGES, ContainerTrial  # noqa: E402
from det_airflow.operators.runners.docker import DockerRunner  # noqa: E402
from det_airflow.trial_process import TrialSpec, run_trial_process  # noqa: E402

FIRST_STEP = """\
import torch
import det_airflow
from model import build_model, load_data

torch.set_num_threads(1)
train_x, train_y, _, _ = load_data()
model = build_model({"n_filters1": 32, "n_filters2": 64, "dropout1": 0.25, "dropout2": 0.5})
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
loss = torch.nn.functional.cross_entropy(model(train_x[:32]), train_y[:32])
loss.backward()
optimizer.step()
print("first step", flush=True)
"""


def prepare(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "model.py", workdir / "model.py")
    (workdir / "first_step.py").write_text(FIRST_STEP)


def time_to_first_step(run: object, ranks: int) -> float:
    seen = threading.Event()
    start = time.perf_counter()
    at: list[float] = []

    def on_output(line: str, stream: str) -> None:
        # Under the launcher each rank's line comes as "[rank=N] first step": the gang's first step
        # is the last rank's.
        if line.endswith("first step"):
            at.append(time.perf_counter() - start)
            if len(at) == ranks:
                seen.set()

    code = run(on_output)  # type: ignore[operator]
    if code != 0 or len(at) < ranks:
        raise SystemExit(f"the trial exited {code} before its {ranks} ranks took their first step")
    return at[ranks - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--ranks",
        type=int,
        default=1,
        help="ranks of the trial: over 1, under the torch_distributed launcher (gloo)",
    )
    args = parser.parse_args()

    client = docker.APIClient()
    client.inspect_image(DEFAULT_IMAGES["cpu"])
    runner = DockerRunner(client)
    with tempfile.TemporaryDirectory(prefix="det-overhead-") as tmp:
        workdir = Path(tmp) / "work"
        prepare(workdir)
        spec = TrialSpec(trial_id=1, experiment_id=1, request_id="bench", trial_seed=0, config={}, run_id=0)
        launcher = ("-m", "det_airflow.launchers.torch_distributed") if args.ranks > 1 else ()
        slots = {"DET_SLOT_IDS": json.dumps(list(range(args.ranks)))}
        # The launcher runs a command per rank: the interpreter and the script.
        argv = ("python3", *launcher, *(("python3",) if launcher else ()), "first_step.py")
        trial = ContainerTrial(
            spec=spec, workdir=workdir, argv=argv, env={"PYTHONPATH": str(workdir), **slots}
        )
        local_argv = [sys.executable, *launcher, *((sys.executable,) if launcher else ()), "first_step.py"]
        local_env = {"PYTHONPATH": f"{workdir}:{REPO}", "PATH": "/usr/bin:/bin", "HOME": tmp, **slots}

        def docker_run(on_output: object) -> int:
            return runner.run(trial, on_output=on_output, stop=threading.Event())  # type: ignore[arg-type]

        def local_run(on_output: object) -> int:
            return run_trial_process(workdir, local_argv, local_env, on_output=on_output)  # type: ignore[arg-type]

        time_to_first_step(docker_run, args.ranks), time_to_first_step(local_run, args.ranks)  # warm-up
        docker_s, local_s = [], []
        for _ in range(args.repeats):
            docker_s.append(time_to_first_step(docker_run, args.ranks))
            local_s.append(time_to_first_step(local_run, args.ranks))
    d, loc = statistics.median(docker_s), statistics.median(local_s)
    print(f"start -> first training step of {args.ranks} rank(s), median of {args.repeats} alternating runs")
    print(f"  local process   {loc:6.2f} s   (min {min(local_s):.2f})")
    print(f"  Docker          {d:6.2f} s   (min {min(docker_s):.2f})")
    print(f"  Docker extra    {d - loc:6.2f} s   ratio {d / loc:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
