"""The Docker runner on a real Docker daemon, without Airflow: what a trial's container sees, what
comes out of it, and what is left of it afterwards."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from det_airflow import settings
from det_airflow.errors import DetError
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


# --- the review's race: a trial swaps its folder for a link to / between the check and the mount ---

RACE_ATTEMPTS = 24


def _swap_forever(folder: str, uid: int) -> None:
    """As the trial's own uid, swap ``folder`` (its own, under the sticky checkpoint root) for a
    link to the host's ``/`` for 10 ms, then back for 20 ms, over and over: a check made while it is
    a folder and a mount made while it is a link are what the attack needs. The runner may make the
    folder anew meanwhile: each step is tried again."""
    os.setgid(uid)
    os.setuid(uid)
    aside = folder + ".aside"
    while True:
        for step, pause in (
            (lambda: os.rename(folder, aside), 0.0),
            (lambda: os.symlink("/", folder), 0.01),
            (lambda: os.unlink(folder), 0.0),
            (lambda: os.rename(aside, folder), 0.02),
        ):
            with contextlib.suppress(OSError):
                step()
            time.sleep(pause)


@pytest.fixture
def racing_folder(host_share: Path) -> Iterator[tuple[Path, Path]]:
    """(checkpoint root, the trial owner's folder in it), the folder swapped by the owner's own uid for
    a link to ``/`` and back all the while; and a marker file in the host's ``/var/tmp`` that only a
    container given the host's ``/`` would see."""
    root = host_share / "ckpt"
    root.mkdir()
    root.chmod(0o1733)  # the platform's checkpoint root (prepare_checkpoint_root)
    folder = root / "bob"
    folder.mkdir()
    os.chown(folder, TRIAL_UID, TRIAL_UID)
    swapper = multiprocessing.get_context("fork").Process(
        target=_swap_forever, args=(str(folder), TRIAL_UID), daemon=True
    )
    swapper.start()
    try:
        yield root, folder
        assert swapper.is_alive(), "the swap went on all along"
    finally:
        swapper.kill()
        swapper.join()


@pytest.fixture
def host_marker() -> Iterator[str]:
    marker = Path("/var/tmp") / f"det-race-{uuid.uuid4().hex}"
    marker.write_text("the host's own /var/tmp\n")
    marker.chmod(0o644)
    yield marker.name
    marker.unlink()


def _attempt(docker_client: docker.APIClient, trial: ContainerTrial, root: Path) -> list[str] | str:
    """The container's output lines, or why the runner refused to start it."""
    runner = DockerRunner(docker_client, settings=settings.load({"checkpoint_storage_path": str(root)}))
    out = Lines()
    try:
        runner.run(trial, on_output=out, stop=threading.Event())
    except DetError as exc:
        return str(exc)
    return [line for line, _ in out.lines]


@pytest.mark.parametrize("asked_as", ["checkpoint storage", "bind mount"])
def test_a_folder_swapped_for_a_link_to_root_never_mounts_the_hosts_root(
    docker_client: docker.APIClient,
    trial_image: str,
    tmp_path: Path,
    racing_folder: tuple[Path, Path],
    host_marker: str,
    asked_as: str,
) -> None:
    root, folder = racing_folder
    where = "/data" if asked_as == "bind mount" else str(folder)
    script = f"if [ -e {where}/var/tmp/{host_marker} ]; then echo HOST-ROOT-SEEN; else echo own-view; fi"
    if asked_as == "bind mount":
        changes: dict[str, Any] = {"bind_mounts": [{"host_path": str(folder), "container_path": "/data"}]}
    else:
        changes = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(root), "storage_path": "bob"}}

    outcomes = []
    for i in range(RACE_ATTEMPTS):
        time.sleep(i * 0.011 % 0.03)  # attempts start at spread phases of the swap, not all in one
        trial = make_trial(tmp_path, trial_image, ["sh", "-c", script], **changes)
        outcomes.append(_attempt(docker_client, trial, root))

    seen = [o for o in outcomes if isinstance(o, list) and "HOST-ROOT-SEEN" in o]
    assert not seen, f"{len(seen)} of {RACE_ATTEMPTS} containers saw the host's /: {outcomes}"
    # Each one either ran and saw its own file system, or was refused before it started, saying why.
    ran = [o for o in outcomes if isinstance(o, list)]
    assert all(set(o) == {"own-view"} for o in ran), outcomes
    if asked_as == "bind mount":  # at another path it cannot be reached safely: never mounted
        assert not ran, outcomes


def test_a_storage_folder_of_the_trials_own_under_the_checkpoint_root_still_works(
    docker_client: docker.APIClient, trial_image: str, tmp_path: Path, host_share: Path
) -> None:
    root = host_share / "ckpt"
    root.mkdir()
    folder = root / "bob"
    folder.mkdir()
    os.chown(folder, TRIAL_UID, TRIAL_UID)
    storage = {"type": "shared_fs", "host_path": str(root), "storage_path": "bob"}
    trial = make_trial(
        tmp_path,
        trial_image,
        ["sh", "-c", f"echo 42 > {folder}/saved.txt && ls -d {folder}"],
        checkpoint_storage=storage,
    )
    out = Lines()

    runner = DockerRunner(docker_client, settings=settings.load({"checkpoint_storage_path": str(root)}))
    code = runner.run(trial, on_output=out, stop=threading.Event())

    assert code == 0, out.lines
    assert (folder / "saved.txt").read_text() == "42\n"
    assert (folder / "saved.txt").stat().st_uid == TRIAL_UID
