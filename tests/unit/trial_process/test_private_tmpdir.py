"""A trial's TMPDIR on a host: short enough for the AF_UNIX sockets programs make in it (Ray's
session folder), the trial's own (its uid, mode 0700, a name no one can claim first), and gone
when its run ends."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from det_airflow import settings
from det_airflow.cli.local_test_mode import run_local_test
from det_airflow.config import load_config
from det_airflow.operators.runners import TrialLaunch
from det_airflow.operators.runners.local import LocalRunner
from det_airflow.trial_process import (
    MAX_TMPDIR_LENGTH,
    TrialUser,
    make_private_tmpdir,
    remove_private_tmpdir,
    run_trial_process,
)
from tests.unit.master.creating import tar_gz

# A socket name as long as Ray's `ray/session_<date>_<time>_<pid>/sockets/plasma_store` and more.
SOCKET_NAME = "s" * 60
# Binds a socket in TMPDIR, leaves files there (one in a folder it makes unwritable), and says what
# its TMPDIR is.
TRAIN = f"""\
import json, os, socket, stat
tmp = os.environ["TMPDIR"]
with socket.socket(socket.AF_UNIX) as sock:
    sock.bind(os.path.join(tmp, {SOCKET_NAME!r}))
    sock.listen()
os.makedirs(os.path.join(tmp, "locked"))
open(os.path.join(tmp, "locked", "left"), "w").write("x")
os.chmod(os.path.join(tmp, "locked"), 0o500)
st = os.stat(tmp)
print("TMPDIR " + json.dumps({{"path": tmp, "uid": st.st_uid, "mode": stat.S_IMODE(st.st_mode)}}))
"""


def _reported(lines: list[str]) -> dict:
    found = [line.removeprefix("TMPDIR ") for line in lines if line.startswith("TMPDIR ")]
    assert found, "\n".join(lines)
    return json.loads(found[-1])


def test_a_local_trial_binds_a_unix_socket_in_its_own_short_tmpdir_which_goes_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a worker that is not root: its own user
    # A deep work folder, as under [det] trial_work_dir on a worker.
    workdir = tmp_path / "airflow-home" / "det-trials" / "exp_123" / "trial_4567"
    launch = TrialLaunch.from_answer(
        {"trial_id": 4567, "experiment_id": 123, "run_id": 1, "config": {"entrypoint": "python3 train.py"}},
        token="trial-token",
        master_url="http://127.0.0.1:9",
        workdir=workdir,
        fetch_context=lambda: tar_gz({"train.py": TRAIN.encode()}),
    )
    lines: list[str] = []

    code = LocalRunner(settings.load({})).run_trial(
        launch, on_output=lambda line, _: lines.append(line), stop=threading.Event()
    )

    assert code == 0, "\n".join(lines)
    reported = _reported(lines)
    tmpdir = reported["path"]
    assert len(tmpdir) <= MAX_TMPDIR_LENGTH
    assert len(os.path.join(tmpdir, SOCKET_NAME).encode()) < 107
    assert not tmpdir.startswith(str(workdir))
    assert (reported["uid"], reported["mode"]) == (os.getuid(), 0o700)
    assert not os.path.lexists(tmpdir)  # removed with the run, the unwritable folder in it too


def test_local_test_mode_gives_the_trial_a_short_tmpdir_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # This worker's temporary folder is deep: the trial's goes to /tmp instead.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "train.py").write_text(TRAIN)
    (code_dir / "const.yaml").write_text(
        "name: sockets\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"
    )

    status = run_local_test(load_config(code_dir / "const.yaml"), str(code_dir))

    out, err = capfd.readouterr()
    assert status == 0, out + err
    tmpdir = _reported(out.splitlines())["path"]
    assert len(tmpdir) <= MAX_TMPDIR_LENGTH and Path(tmpdir).parent == Path("/tmp")
    assert not os.path.lexists(tmpdir)


def test_each_tmpdir_is_new_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    first, second = make_private_tmpdir(), make_private_tmpdir()
    try:
        assert first != second and first.parent == second.parent == Path("/tmp")
        for folder in (first, second):
            st = folder.lstat()
            assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
            assert st.st_uid == os.getuid()
    finally:
        remove_private_tmpdir(first)
        remove_private_tmpdir(second)
    assert not first.exists() and not second.exists()


def test_removing_a_tmpdir_never_follows_a_link_out_of_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    tmpdir = make_private_tmpdir()
    (tmpdir / "link").symlink_to(outside)
    (tmpdir / "file-link").symlink_to(outside / "keep")

    remove_private_tmpdir(tmpdir)

    assert not os.path.lexists(tmpdir)
    assert (outside / "keep").read_text() == "mine"


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root")
TRIAL = TrialUser("det-61193", 61193, 61193)
OTHER = TrialUser("det-61194", 61194, 61194)


@as_root
def test_as_root_the_tmpdir_is_the_trial_users_and_no_other_user_enters_it() -> None:
    tmpdir = make_private_tmpdir(TRIAL)
    try:
        st = tmpdir.lstat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (TRIAL.uid, TRIAL.gid, 0o700)
        lines: list[str] = []
        code = run_trial_process(
            tmpdir,  # its work folder does not matter here, only its TMPDIR
            [sys.executable, "-c", TRAIN],
            {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmpdir)},
            on_output=lambda line, _: lines.append(line),
            user=TRIAL,
        )
        assert code == 0, "\n".join(lines)
        assert _reported(lines)["uid"] == TRIAL.uid
        # Another user's trial on the same host can neither list nor enter it.
        other = subprocess.run(
            ["sh", "-c", f'ls {tmpdir} || echo "no list"; cat {tmpdir}/locked/left || echo "no read"'],
            user=OTHER.uid,
            group=OTHER.gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            check=False,
        )
        assert other.stdout.split() == ["no", "list", "no", "read"]
    finally:
        remove_private_tmpdir(tmpdir)
    assert not os.path.lexists(tmpdir)


@as_root
def test_a_worker_that_is_not_root_removes_what_its_trial_locked() -> None:
    """The trial ran as the worker's own user and left a folder it may not write: still removed."""
    tmpdir = make_private_tmpdir(TRIAL)
    locked = tmpdir / "locked" / "deeper"
    locked.mkdir(parents=True)
    (locked / "left").write_text("x")
    for path in (tmpdir / "locked", locked, locked / "left"):
        os.chown(path, TRIAL.uid, TRIAL.gid)
    locked.chmod(0o500)
    (tmpdir / "locked").chmod(0o000)
    script = "import sys; from det_airflow.trial_process import remove_private_tmpdir as r; r(sys.argv[1])"
    removed = subprocess.run(
        [sys.executable, "-c", script, str(tmpdir)],
        user=TRIAL.uid,
        group=TRIAL.gid,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)},
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    assert removed.returncode == 0, removed.stderr
    assert not os.path.lexists(tmpdir)
