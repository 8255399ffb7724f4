"""A det-airflow set up on a running test Airflow: the factory in its DAGs folder, the det tables
migrated, and a `det` CLI logged in as the admin."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from det_airflow.localairflow import LocalAirflow

REPO = Path(__file__).resolve().parents[2]
DET = Path(sys.executable).parent / "det"
EXAMPLE = REPO / "examples" / "mnist_pytorch"
TERMINAL = {"COMPLETED", "CANCELED", "ERROR"}
T = TypeVar("T")


def kept_checkpoints(checkpoints: list[dict[str, Any]], *, on_host: bool = True) -> list[dict[str, Any]]:
    """Check the experiment's checkpoints against checkpoint_storage's default policy (each trial
    keeps its best and its latest; the others are DELETED, with their folders when `on_host`) and
    return the kept ones, oldest first."""
    kept = [c for c in checkpoints if c["state"] == "COMPLETED"]
    assert kept, checkpoints
    assert {c["state"] for c in checkpoints} <= {"COMPLETED", "DELETED"}, checkpoints
    for trial_id in {c["trial_id"] for c in checkpoints}:
        assert 1 <= len([c for c in kept if c["trial_id"] == trial_id]) <= 2, checkpoints
    if on_host:
        for c in checkpoints:
            assert Path(c["storage"]["path"]).is_dir() == (c["state"] == "COMPLETED"), c
    return kept


def wait_until(condition: Callable[[], T], what: str, timeout: float = 120.0, interval: float = 0.5) -> T:
    """Poll ``condition`` until it returns something truthy and return that; fail naming ``what``
    (and the last value seen) when it does not happen within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s (last seen: {value!r})")
        time.sleep(interval)


@dataclass
class DetEnv:
    af: LocalAirflow
    config_dir: Path
    # Who the `det` CLI logs in as: the admin unless set by as_user().
    user: str | None = None
    password: str | None = None

    @classmethod
    def install(cls, af: LocalAirflow, config_dir: Path) -> DetEnv:
        assert af.dags_folder is not None
        shutil.copy(REPO / "dags" / "det_experiments.py", af.dags_folder / "det_experiments.py")
        env = cls(af, config_dir)
        out = env.det("admin", "migrate")
        assert "det tables" in out.stdout, out.stdout + out.stderr
        return env

    def as_user(self, user: str, password: str, config_dir: Path) -> DetEnv:
        """The same det-airflow, with the `det` CLI logged in as ``user`` (its token kept in
        ``config_dir``, apart from the admin's)."""
        return dataclasses.replace(self, user=user, password=password, config_dir=config_dir)

    def env(self) -> dict[str, str]:
        return {
            **self.af.env(),
            "DET_MASTER": self.af.url,
            "DET_USER": self.user or self.af.admin_user,
            "DET_PASS": self.password or self.af.admin_password,
            "DET_AIRFLOW_CONFIG_DIR": str(self.config_dir),
        }

    def det(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run the `det` console script as a user would."""
        result = subprocess.run(
            [str(DET), *args],
            env=self.env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"det {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def create(self, config: Path | str, context: Path | str = EXAMPLE, *extra: str) -> int:
        out = self.det("experiment", "create", str(config), str(context), *extra).stdout
        match = re.search(r"Created experiment (\d+)", out)
        assert match, out
        return int(match.group(1))

    def api(self) -> httpx.Client:
        return self.af.client(timeout=60)

    def get(self, path: str) -> Any:
        with self.api() as client:
            return client.get(f"/det/api/v1{path}").raise_for_status().json()

    def wait_experiment(self, experiment_id: int, timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            answer = self.get(f"/experiments/{experiment_id}")
            if answer["experiment"]["state"] in TERMINAL:
                return dict(answer)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"experiment {experiment_id} still {answer['experiment']['state']}: {answer}"
                )
            time.sleep(1)

    def wait_dag_run(self, experiment: dict[str, Any], timeout: float = 120) -> str:
        """Wait until the experiment's DAG run has ended (its tasks finish after the experiment)."""
        path = f"/api/v2/dags/{experiment['dag_id']}/dagRuns/{experiment['dag_run_id']}"
        deadline = time.monotonic() + timeout
        with self.api() as client:
            while True:
                state = client.get(path).raise_for_status().json()["state"]
                if state in ("success", "failed"):
                    return str(state)
                if time.monotonic() > deadline:
                    raise AssertionError(f"DAG run of experiment {experiment['id']} still {state}")
                time.sleep(0.5)

    def experiment_count(self) -> int:
        return len(self.get("/experiments?all=true")["experiments"])
