"""A distributed unmanaged run (torchrun, two gloo workers on the CPU): one experiment, created by
the chief; every rank's output in the trial's logs under its rank; the chief's reports stored."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from det_airflow.api.user import store_login
from det_airflow.master.db import Database

from ._stored import experiments, metrics, ranked_logs, trials

pytest.importorskip("torch")

PROGRAM = """
from pathlib import Path

from det_airflow import core
from det_airflow.experimental import core_v2

distributed = core.DistributedContext.from_torch_distributed()
core_v2.init(
    defaults=core_v2.DefaultConfig(name="unmanaged-ddp", hparams={"lr": 0.1}),
    distributed=distributed,
)
rank = core_v2.distributed.rank
print(f"rank {rank} of {core_v2.distributed.size} trains trial {core_v2.info.trial.trial_id}")
for step in (1, 2):
    # Only the chief's reports count, as on a trial: the other rank's must not be stored.
    core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 10.0 * rank + step})
core_v2.train.report_validation_metrics(steps_completed=2, metrics={"loss": 10.0 * rank + 0.5})
folder = None
if rank == 0:
    folder = Path("weights")
    folder.mkdir()
    (folder / "model.pt").write_text("w")
uuid = core_v2.checkpoint.upload(folder, {"steps_completed": 2})
print(f"rank {rank} sees checkpoint {uuid}")
assert core_v2.preempt.should_preempt() is False
{ending}
"""


def _torchrun(tmp_path: Path, ending: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "train.py"
    program.write_text(textwrap.dedent(PROGRAM).replace("{ending}", ending))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(program),
        ],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("ending", ["core_v2.close()", "# no close(): the run ends at exit"])
def test_the_chief_creates_one_experiment_and_every_rank_logs_into_its_trial(
    master: tuple[str, Database], tmp_path: Path, ending: str
) -> None:
    url, db = master
    store_login(url, "alice", "alice-token")

    result = _torchrun(tmp_path, ending)

    assert result.returncode == 0, result.stdout + result.stderr
    assert experiments(db) == [("alice", "COMPLETED", None, None)]
    [(state, hparams, batches, checkpoint)] = trials(db)
    assert (state, hparams, batches) == ("COMPLETED", {"lr": 0.1}, 2)
    assert metrics(db, "training") == [(1, {"loss": 1.0}), (2, {"loss": 2.0})]
    assert metrics(db, "validation") == [(2, {"loss": 0.5})]
    logs = ranked_logs(db)
    trial_id = 1
    assert (0, "stdout", f"rank 0 of 2 trains trial {trial_id}") in logs
    assert (1, "stdout", f"rank 1 of 2 trains trial {trial_id}") in logs
    # Both ranks got the chief's checkpoint, which the trial records as its latest.
    assert (0, "stdout", f"rank 0 sees checkpoint {checkpoint}") in logs
    assert (1, "stdout", f"rank 1 sees checkpoint {checkpoint}") in logs
    assert (tmp_path / "weights" / "model.pt").read_text() == "w"


def test_a_failing_worker_ends_the_run_in_error_with_its_traceback_under_its_rank(
    master: tuple[str, Database], tmp_path: Path
) -> None:
    url, db = master
    store_login(url, "alice", "alice-token")

    result = _torchrun(
        tmp_path,
        "if rank == 1:\n    raise ValueError('rank 1 ran out of data')\ncore_v2.close()",
    )

    assert result.returncode != 0
    # The chief, waiting in close() for its peer, is told why it cannot end the run cleanly.
    assert "core_v2.close(): another rank ended without calling core_v2.close()" in result.stderr
    # The failing rank ends the run before it leaves the process group, so its error is the one kept.
    assert experiments(db) == [("alice", "ERROR", None, "ValueError: rank 1 ran out of data")]
    assert [state for state, *_ in trials(db)] == ["ERROR"]
    logs = ranked_logs(db)
    # torch.distributed's own excepthook prefixes the traceback with the rank, as it prints it.
    assert (1, "stderr", "[rank1]: ValueError: rank 1 ran out of data") in logs, logs
    assert (1, "stderr", "[rank1]: Traceback (most recent call last):") in logs, logs


def test_when_the_chief_cannot_create_the_run_every_rank_says_why(
    master: tuple[str, Database], tmp_path: Path
) -> None:
    url, db = master  # nobody logged in

    result = _torchrun(tmp_path, "core_v2.close()")

    assert result.returncode != 0
    assert "[rank1]: det_airflow.errors.DetError: core_v2.init(): rank 0 could not create the unmanaged " in (
        result.stderr
    ), result.stderr
    assert "run `det user login`" in result.stderr
    assert experiments(db) == []
