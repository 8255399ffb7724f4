"""Priority preemption on a real Airflow and PostgreSQL: a priority-10 gang that cannot fit makes
the master preempt the priority-90 trials holding its pool; they checkpoint, go back to the queue
without counting a restart, and resume from their checkpoints once it has run. A trial that
ignores the signal is killed after `preemption_timeout` and still counts no restart. Under fair
share, a job holding the whole pool gives a newcomer its share, whatever their priorities.

The test Airflow enables preemption and fair share for these pools only (conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.det_env import DetEnv, wait_until

pytestmark = pytest.mark.integration

GANG_POOL = "det_preemption_gang"
IGNORED_POOL = "det_preemption_ignored"
FAIR_SHARE_POOL = "det_fair_share"  # also shared by fair share (`[det] fair_share_pools`)
# Trains one step every half second until the test creates its release file. With
# HONOUR_PREEMPTION=1 it checkpoints and exits 0 when asked to; otherwise it ignores the signal.
TRAIN = """\
import logging
import os
import time

import det_airflow as det

logging.basicConfig(level=logging.INFO, format="%(message)s")
info = det.get_cluster_info()
release = os.environ["RELEASE_FILE"]
honour = os.environ["HONOUR_PREEMPTION"] == "1"
steps = 0
with det.core.init() as core_context:
    if info.latest_checkpoint:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = int((path / "steps").read_text())
        logging.info("resumed from its checkpoint at step %d", steps)
    while not os.path.exists(release):
        steps += 1
        core_context.train.report_training_metrics(steps, {"loss": 1.0 / steps})
        if honour and core_context.preempt.should_preempt():
            with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                (path / "steps").write_text(str(steps))
            logging.info("preempted at step %d", steps)
            raise SystemExit(0)
        time.sleep(0.5)
"""


@pytest.fixture(scope="module")
def det(airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DetEnv]:
    env = DetEnv.install(airflow, tmp_path_factory.mktemp("det-config"))
    airflow.airflow("pools", "set", GANG_POOL, "2", "preemption test: a 2-slot gang")
    airflow.airflow("pools", "set", IGNORED_POOL, "1", "preemption test: a trial that ignores it")
    airflow.airflow("pools", "set", FAIR_SHARE_POOL, "2", "preemption test: fair share")
    yield env


class Experiments:
    def __init__(self, det: DetEnv, tmp_path: Path, release_dir: Path) -> None:
        self.det = det
        self.context = tmp_path / "train"
        self.context.mkdir()
        (self.context / "train.py").write_text(TRAIN)
        self.release_dir = release_dir

    def create(
        self,
        label: str,
        *,
        pool: str,
        priority: int,
        slots: int = 1,
        trials: int = 1,
        honour: bool = True,
        preemption_timeout: int = 3600,
    ) -> int:
        config = {
            "name": f"preemption-{label}",
            "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "categorical", "vals": list(range(trials))}},
            "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}},
            "resources": {"slots_per_trial": slots, "resource_pool": pool, "priority": priority},
            "environment": {
                "environment_variables": [
                    f"RELEASE_FILE={self.release_dir / label}",
                    f"HONOUR_PREEMPTION={int(honour)}",
                ]
            },
            "max_restarts": 0,
            "preemption_timeout": preemption_timeout,
        }
        path = self.context.parent / f"{label}.yaml"
        path.write_text(yaml.safe_dump(config))
        return self.det.create(path, self.context)

    def release(self, label: str) -> None:
        (self.release_dir / label).write_text("go")
        (self.release_dir / label).chmod(0o644)

    def trials(self, experiment_id: int) -> list[dict[str, Any]]:
        return list(self.det.get(f"/experiments/{experiment_id}/trials")["trials"])

    def all_in(self, experiment_id: int, count: int, check: Any) -> list[dict[str, Any]] | None:
        trials = self.trials(experiment_id)
        return trials if len(trials) == count and all(check(t) for t in trials) else None

    def training_steps(self, trial_id: int) -> list[int]:
        rows = self.det.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]
        return [row["steps_completed"] for row in rows]

    def logs(self, trial_id: int) -> str:
        return self.det.det("trial", "logs", str(trial_id)).stdout


def test_a_higher_priority_gang_preempts_and_the_preempted_trials_resume_from_their_checkpoints(
    det: DetEnv, tmp_path: Path, release_dir: Path
) -> None:
    exps = Experiments(det, tmp_path, release_dir)
    low = exps.create("low", pool=GANG_POOL, priority=90, trials=2)
    wait_until(
        lambda: exps.all_in(low, 2, lambda t: t["state"] == "RUNNING" and t["total_batches"] >= 2),
        f"both priority-90 trials of experiment {low} training",
        timeout=300,
    )

    exps.release("high")  # the priority-10 trial ends as soon as it has started
    high = exps.create("high", pool=GANG_POOL, priority=10, slots=2)
    preempted = wait_until(
        lambda: exps.all_in(low, 2, lambda t: t["state"] == "QUEUED" and t["latest_checkpoint"]),
        f"both priority-90 trials of experiment {low} checkpointed and back in the queue",
        timeout=300,
    )
    assert [t["restarts"] for t in preempted] == [0, 0]
    checkpointed_at = {t["id"]: t["total_batches"] for t in preempted}
    for t in preempted:
        assert f"preempted: experiment {high} of higher priority" in exps.logs(t["id"])

    finished = det.wait_experiment(high, timeout=300)
    assert finished["experiment"]["state"] == "COMPLETED"

    # Back in their slots, they carry on from their checkpoints.
    wait_until(
        lambda: exps.all_in(
            low, 2, lambda t: t["state"] == "RUNNING" and t["total_batches"] > checkpointed_at[t["id"]]
        ),
        f"both priority-90 trials of experiment {low} training again after their checkpoints",
        timeout=300,
    )
    exps.release("low")
    assert det.wait_experiment(low, timeout=300)["experiment"]["state"] == "COMPLETED"
    for t in exps.trials(low):
        assert (t["state"], t["restarts"]) == ("COMPLETED", 0)
        steps = exps.training_steps(t["id"])
        assert steps == list(range(1, len(steps) + 1)), f"trial {t['id']} started over or repeated steps"
        assert len(steps) > checkpointed_at[t["id"]]
        assert f"resumed from its checkpoint at step {checkpointed_at[t['id']]}" in exps.logs(t["id"])


def test_a_trial_that_ignores_preemption_is_killed_and_counts_no_restart(
    det: DetEnv, tmp_path: Path, release_dir: Path
) -> None:
    exps = Experiments(det, tmp_path, release_dir)
    stubborn = exps.create("stubborn", pool=IGNORED_POOL, priority=90, honour=False, preemption_timeout=10)
    wait_until(
        lambda: exps.all_in(stubborn, 1, lambda t: t["state"] == "RUNNING" and t["total_batches"] >= 1),
        f"the priority-90 trial of experiment {stubborn} training",
        timeout=300,
    )

    exps.release("urgent")
    urgent = exps.create("urgent", pool=IGNORED_POOL, priority=10)
    # While it ignores the signal, the queue says it is being preempted.
    wait_until(
        lambda: "STATE_SCHEDULED (1 preempting)" in det.det("job", "list", "-p", IGNORED_POOL).stdout,
        f"`det job list` showing experiment {stubborn} preempting",
        timeout=300,
    )
    (killed,) = wait_until(
        lambda: exps.all_in(stubborn, 1, lambda t: t["state"] == "QUEUED"),
        f"the trial of experiment {stubborn} killed after preemption_timeout and back in the queue",
        timeout=300,
    )
    assert killed["restarts"] == 0

    assert det.wait_experiment(urgent, timeout=300)["experiment"]["state"] == "COMPLETED"
    wait_until(
        lambda: exps.all_in(stubborn, 1, lambda t: t["state"] == "RUNNING"),
        f"the trial of experiment {stubborn} running again",
        timeout=300,
    )
    exps.release("stubborn")
    assert det.wait_experiment(stubborn, timeout=300)["experiment"]["state"] == "COMPLETED"
    (done,) = exps.trials(stubborn)
    assert (done["state"], done["restarts"]) == ("COMPLETED", 0)


def test_fair_share_gives_a_newcomer_its_share_whatever_the_priorities(
    det: DetEnv, tmp_path: Path, release_dir: Path
) -> None:
    exps = Experiments(det, tmp_path, release_dir)
    first = exps.create("first", pool=FAIR_SHARE_POOL, priority=10, trials=2)
    wait_until(
        lambda: exps.all_in(first, 2, lambda t: t["state"] == "RUNNING" and t["total_batches"] >= 1),
        f"both trials of experiment {first} running: alone, it gets the whole pool",
        timeout=300,
    )

    exps.release("newcomer")
    newcomer = exps.create("newcomer", pool=FAIR_SHARE_POOL, priority=90)
    trials = wait_until(
        lambda: (
            lambda ts: ts if any(t["state"] == "QUEUED" and t["latest_checkpoint"] for t in ts) else None
        )(exps.trials(first)),
        f"a trial of experiment {first} checkpointed and back in the queue for the newcomer's share",
        timeout=300,
    )
    assert sorted((t["state"], t["restarts"]) for t in trials) == [("QUEUED", 0), ("RUNNING", 0)], (
        "exactly one trial makes room: the other keeps the first job's share"
    )
    assert det.wait_experiment(newcomer, timeout=300)["experiment"]["state"] == "COMPLETED"

    wait_until(
        lambda: exps.all_in(first, 2, lambda t: t["state"] == "RUNNING"),
        f"the preempted trial of experiment {first} running again once the newcomer is done",
        timeout=300,
    )
    exps.release("first")
    assert det.wait_experiment(first, timeout=300)["experiment"]["state"] == "COMPLETED"
    assert [(t["state"], t["restarts"]) for t in exps.trials(first)] == [("COMPLETED", 0), ("COMPLETED", 0)]
