"""The TensorBoard task's program: the trials' scalars served under the proxy prefix, from a
shared_fs folder or fetched from an object store, only to requests carrying the proxy's secret."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from det_airflow.core._tensorboard import local_tensorboard_dir, tensorboard_prefix
from tests.s3_server import s3_client, s3_server
from tests.unit.tasks.conftest import StandInMaster, TaskProgram, run_task, start_program, task_answer


def write_scalars(folder: Path, tag: str, values: dict[int, float]) -> Path:
    """An event file in ``folder`` with ``tag`` at each step; answers its path."""
    writer = EventFileWriter(str(folder))
    for step, value in values.items():
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.close()
    return Path(writer.get_logdir()) / next(p.name for p in folder.iterdir() if p.name.startswith("events."))


def get(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def scalars(board: TaskProgram, run: str, tag: str) -> list[tuple[int, float]]:
    """The scalars TensorBoard serves for ``run``/``tag`` as (step, value); [] before it has them."""
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    status, body = get(
        f"{board.base}data/plugin/scalars/scalars?{query}", {"X-Det-Task-Secret": board.secret}
    )
    if status == 404:  # no such run or tag (yet)
        return []
    assert status == 200, body
    return [(step, value) for _, step, value in json.loads(body)]


def wait_for_scalars(
    board: TaskProgram, run: str, tag: str, count: int, seconds: float
) -> list[tuple[int, float]]:
    deadline = time.monotonic() + seconds
    while len(found := scalars(board, run, tag)) < count and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


@pytest.fixture(scope="module")
def shared_fs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {"type": "shared_fs", "host_path": str(tmp_path_factory.mktemp("storage"))}


@pytest.fixture(scope="module")
def board(
    master: StandInMaster, shared_fs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TaskProgram]:
    for trial, loss in ((7, 0.5), (8, 0.25)):
        folder = local_tensorboard_dir(shared_fs, 3, trial)
        assert folder is not None
        folder.mkdir(parents=True)
        write_scalars(folder, "training/loss", {1: loss, 2: loss / 2})
    args = {
        "sources": [{"experiment_id": 3, "trial_id": 7}, {"experiment_id": 3, "trial_id": 8}],
        "storage": shared_fs,
    }
    program = run_task(
        "tensorboard",
        master,
        task_answer("tensorboard", 20, args=args),
        tmp_path_factory.mktemp("tb") / "context",
    )
    yield program
    assert program.stop() == 0, program.output


def test_each_trials_scalars_are_served_under_the_prefix(board: TaskProgram) -> None:
    assert wait_for_scalars(board, "exp3/trial7", "training/loss", 2, 30) == [(1, 0.5), (2, 0.25)]
    assert wait_for_scalars(board, "exp3/trial8", "training/loss", 2, 30) == [(1, 0.25), (2, 0.125)]


def test_events_written_later_into_a_shared_fs_folder_are_served(
    board: TaskProgram, shared_fs: dict[str, Any]
) -> None:
    folder = local_tensorboard_dir(shared_fs, 3, 7)
    assert folder is not None
    write_scalars(folder, "validation/accuracy", {2: 0.75})

    assert wait_for_scalars(board, "exp3/trial7", "validation/accuracy", 1, 30) == [(2, 0.75)]


@pytest.mark.parametrize("headers", [{}, {"X-Det-Task-Secret": "wrong-secret-wrong-secret"}])
def test_a_request_without_the_secret_is_refused(board: TaskProgram, headers: dict[str, str]) -> None:
    for path in ("", "data/runs", "data/plugin/scalars/scalars?run=exp3/trial7&tag=training/loss"):
        status, body = get(f"{board.base}{path}", headers)
        assert (status, body) == (403, b"missing or wrong X-Det-Task-Secret header\n")


def test_the_ready_line_is_logged_and_the_secret_never_is(board: TaskProgram) -> None:
    assert f"TensorBoard is ready at {board.prefix}" in board.output
    assert board.secret not in board.output


def test_an_object_stores_files_are_fetched_and_fetched_again(master: StandInMaster, tmp_path: Path) -> None:
    with s3_server("boards") as url:
        storage = {
            "type": "s3",
            "bucket": "boards",
            "endpoint_url": url,
            "access_key": "k",
            "secret_key": "s",
        }
        s3 = s3_client(url)
        first = write_scalars(tmp_path / "first", "training/loss", {1: 2.0})
        s3.upload_file(str(first), "boards", tensorboard_prefix(5, 9) + first.name)
        args = {"sources": [{"experiment_id": 5, "trial_id": 9}], "storage": storage}
        program = run_task(
            "tensorboard", master, task_answer("tensorboard", 21, args=args), tmp_path / "context"
        )
        try:
            assert wait_for_scalars(program, "exp5/trial9", "training/loss", 1, 30) == [(1, 2.0)]
            later = write_scalars(tmp_path / "later", "training/loss", {2: 1.0})
            s3.upload_file(str(later), "boards", tensorboard_prefix(5, 9) + "later/" + later.name)

            assert wait_for_scalars(program, "exp5/trial9/later", "training/loss", 1, 40) == [(2, 1.0)]
        finally:
            assert program.stop() == 0, program.output


def test_an_idle_tensorboard_stops_and_exits_0(
    master: StandInMaster, shared_fs: dict[str, Any], tmp_path: Path
) -> None:
    args = {"sources": [{"experiment_id": 3, "trial_id": 7}], "storage": shared_fs}
    program = run_task(
        "tensorboard", master, task_answer("tensorboard", 22, args=args, idle=2), tmp_path / "context"
    )

    assert program.wait(30) == 0, program.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"storage": {"type": "shared_fs", "host_path": "/x"}},
            "args.sources: expected a list of trials, got None",
        ),
        (
            {"sources": [{"experiment_id": 1}], "storage": {"type": "shared_fs", "host_path": "/x"}},
            'args.sources[0]: expected {"experiment_id": <int>, "trial_id": <int>}, got {\'experiment_id\': 1}',
        ),
        (
            {"sources": [{"experiment_id": 1, "trial_id": 2}], "storage": {"type": "nfs"}},
            "checkpoint_storage.type: expected shared_fs",
        ),
    ],
)
def test_a_bad_task_answer_ends_with_one_line(
    master: StandInMaster, tmp_path: Path, args: dict[str, Any], message: str
) -> None:
    trial_id = master.add(task_answer("tensorboard", 23, args=args))
    process = start_program("tensorboard", master, trial_id, tmp_path)

    assert process.wait(60) == 1
    lines = (tmp_path.parent / f"tensorboard-{trial_id}.log").read_text().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tensorboard: ") and message in lines[0], lines


def test_the_program_runs_none_of_its_owners_python(tmp_path: Path) -> None:
    """Other people open a TensorBoard's pages, so nothing of its owner's runs in its program: not a
    sitecustomize in its work folder (first on the trial's PYTHONPATH), nor a usercustomize in the
    HOME the trial is given. The program starts as the master's task config says, in the trial
    environment a runner gives it."""
    import subprocess
    import sys

    from det_airflow.master.tasks import experiment_config
    from det_airflow.trial_process import TrialSpec, entrypoint_argv, trial_environment, write_trial_files

    config = experiment_config("tensorboard", {}, [], storage={})
    spec = TrialSpec.from_dict({"trial_id": 9, "experiment_id": 4, "run_id": 1, "config": config})
    workdir = tmp_path / "work"
    workdir.mkdir()
    write_trial_files(spec, workdir)
    ran = tmp_path / "owner-code-ran"
    hook = f"open({str(ran)!r}, 'a').write(__name__ + '\\n')\n"
    (workdir / "sitecustomize.py").write_text(hook)
    user_site = (
        workdir / ".det" / "home" / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    )
    (user_site / "site-packages").mkdir(parents=True)
    (user_site / "site-packages" / "usercustomize.py").write_text(hook)
    env = trial_environment(spec, workdir=workdir)  # no master: the program ends at once, saying so
    argv = [sys.executable if arg == "python3" else arg for arg in entrypoint_argv(config["entrypoint"])]

    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=120)

    assert "DET_MASTER is not set" in done.stderr, done.stderr  # the program itself did run
    assert not ran.exists(), f"the owner's code ran: {ran.read_text()}"
