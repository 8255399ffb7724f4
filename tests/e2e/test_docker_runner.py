"""The Docker runner on a real Docker daemon, without Airflow: what a trial's container sees, what
comes out of it, and what is left of it afterwards."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from det_airflow.operators.runners import LABEL_TRIAL, ContainerTrial
from det_airflow.operators.runners.docker import ContainerError, DockerRunner
from det_airflow.trial_process import TrialSpec

_next_trial = iter(range(900_000, 1_000_000))
# The uid:gid the master would have assigned to the experiment's owner (in [det] trial_uid_range).
TRIAL_UID = 61_999


@pytest.fixture(autouse=True)
def host_share(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A host folder the runner policy of this worker lets trials mount (checkpoints, data), as
    an admin would share one: in [det] allowed_host_paths, and reachable by the trial's uid (pytest's
    own temporary folders are not)."""
    share = Path(tempfile.mkdtemp(prefix="det-docker-runner-"))
    share.chmod(0o711)
    monkeypatch.setenv("AIRFLOW__DET__ALLOWED_HOST_PATHS", str(share))
    yield share
    shutil.rmtree(share, ignore_errors=True)


class Lines:
    """The output a runner passes on, and an event for the first line that contains ``wait_for``."""

    def __init__(self, wait_for: str | None = None) -> None:
        self.lines: list[tuple[str, str]] = []
        self.wait_for = wait_for
        self.seen = threading.Event()

    def __call__(self, line: str, stream: str) -> None:
        self.lines.append((line, stream))
        if self.wait_for is not None and self.wait_for in line:
            self.seen.set()


def make_trial(tmp_path: Path, image: str, argv: list[str], **config: Any) -> ContainerTrial:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    spec = TrialSpec(
        trial_id=next(_next_trial),
        experiment_id=7,
        request_id="r",
        trial_seed=1,
        config={"environment": {"image": image}, **config},
        run_id=1,
        uid=TRIAL_UID,
        gid=TRIAL_UID,
    )
    return ContainerTrial(spec=spec, workdir=workdir, argv=tuple(argv), env={"GREETING": "hello"})


def containers_of(client: docker.APIClient, trial: ContainerTrial) -> list[dict[str, Any]]:
    return list(client.containers(all=True, filters={"label": f"{LABEL_TRIAL}={trial.spec.trial_id}"}))


def test_output_lines_stream_by_kind_and_the_container_is_removed(
    docker_client: docker.APIClient, trial_image: str, tmp_path: Path
) -> None:
    script = 'echo "$GREETING from $(pwd)"; echo oops >&2; printf "10%%\\r20%%\\r\\n"; exit 3'
    trial = make_trial(tmp_path, trial_image, ["sh", "-c", script])
    out = Lines()

    started: list[str] = []
    phases: list[tuple[str, str]] = []
    runner = DockerRunner(
        docker_client, on_container=started.append, on_phase=lambda *phase: phases.append(phase)
    )
    code = runner.run(trial, on_output=out, stop=threading.Event())

    assert code == 3
    assert len(started) == 1 and len(started[0]) == 64  # the full id of the one container it ran
    # The image is here: no PULLING, and RUNNING once the container started.
    assert phases == [("RUNNING", f"container {started[0][:12]} started")]
    assert (f"hello from {trial.workdir}", "stdout") in out.lines
    assert ("oops", "stderr") in out.lines
    assert [line for line, _ in out.lines if "%" in line] == ["10%", "20%"]
    assert containers_of(docker_client, trial) == []


def test_workdir_checkpoints_and_bind_mounts_are_shared_with_the_host(
    docker_client: docker.APIClient, trial_image: str, tmp_path: Path, host_share: Path
) -> None:
    storage, data = host_share / "ckpt", host_share / "data"
    storage.mkdir()
    os.chown(storage, TRIAL_UID, TRIAL_UID)  # the owner's own checkpoint folder
    data.mkdir()
    (data / "input.txt").write_text("42\n")
    script = (
        "cat /data/input.txt > checkpoint-seen.txt; "
        f"cp checkpoint-seen.txt {storage}/saved.txt; "
        "touch /data/written 2>/dev/null && echo data-writable || echo data-read-only"
    )
    trial = make_trial(
        tmp_path,
        trial_image,
        ["sh", "-c", script],
        checkpoint_storage={"type": "shared_fs", "host_path": str(storage)},
        bind_mounts=[{"host_path": str(data), "container_path": "/data", "read_only": True}],
    )
    out = Lines()

    code = DockerRunner(docker_client).run(trial, on_output=out, stop=threading.Event())

    assert code == 0, out.lines
    assert (storage / "saved.txt").read_text() == "42\n"
    # Written as the owner's uid, not root: the container ran as the identity the master assigned.
    assert (trial.workdir / "checkpoint-seen.txt").stat().st_uid == TRIAL_UID
    assert (storage / "saved.txt").stat().st_uid == TRIAL_UID
    assert ("data-read-only", "stdout") in out.lines


def test_nothing_of_the_workers_environment_reaches_the_container(
    docker_client: docker.APIClient, trial_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://secret")
    trial = make_trial(tmp_path, trial_image, ["sh", "-c", "env"])
    out = Lines()

    assert DockerRunner(docker_client).run(trial, on_output=out, stop=threading.Event()) == 0

    names = {line.partition("=")[0] for line, _ in out.lines}
    assert "GREETING" in names
    assert not [name for name in names if name.startswith("AIRFLOW")], names


def test_stop_sends_sigterm_to_the_entrypoint(
    docker_client: docker.APIClient, trial_image: str, tmp_path: Path
) -> None:
    script = 'trap "echo stopping cleanly; exit 0" TERM; echo started; sleep 300 & wait'
    trial = make_trial(tmp_path, trial_image, ["sh", "-c", script])
    out, stop = Lines(wait_for="started"), threading.Event()

    def stop_once_started() -> None:
        assert out.seen.wait(120), "the container printed nothing within 120 s"
        stop.set()

    stopper = threading.Thread(target=stop_once_started)
    stopper.start()
    code = DockerRunner(docker_client, kill_grace=30).run(trial, on_output=out, stop=stop)
    stopper.join()

    assert code == 0
    assert ("stopping cleanly", "stdout") in out.lines
    assert containers_of(docker_client, trial) == []


def test_a_container_left_by_a_dead_worker_is_swept_before_the_trial_runs_again(
    docker_client: docker.APIClient, trial_image: str, tmp_path: Path
) -> None:
    trial = make_trial(tmp_path, trial_image, ["sh", "-c", "echo second run"])
    leftover = docker_client.create_container(
        trial_image, ["sleep", "300"], labels={**trial.labels, "ai.det-airflow.run": "0"}
    )
    docker_client.start(leftover)

    out = Lines()
    assert DockerRunner(docker_client).run(trial, on_output=out, stop=threading.Event()) == 0

    assert ("second run", "stdout") in out.lines
    assert containers_of(docker_client, trial) == []


def test_an_image_the_daemon_cannot_get_is_a_clear_error(
    docker_client: docker.APIClient, tmp_path: Path
) -> None:
    trial = make_trial(tmp_path, "det-airflow-no-such-image:1", ["true"])
    phases: list[tuple[str, str]] = []
    runner = DockerRunner(docker_client, on_phase=lambda *phase: phases.append(phase))

    with pytest.raises(ContainerError, match=r"environment.image: cannot pull 'det-airflow-no-such-image:1'"):
        runner.run(trial, on_output=Lines(), stop=threading.Event())
    # The trial showed PULLING while the daemon tried; it never got further.
    assert phases == [("PULLING", "pulling image det-airflow-no-such-image:1")]
