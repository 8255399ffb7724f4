"""Who owns a shared_fs storage's TensorBoard folders: the platform the shared ones, each trial's
owner its own, readable by nobody else; another user's trial cannot squat a folder or put a link
on the way. The trials run as their owners' own uids (root forks, then drops to them)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from det_airflow.core._storage import CheckpointStorage
from det_airflow.core._tensorboard import _place, prepare_tensorboard_root
from det_airflow.errors import DetError

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="runs trials as their owners' uids (root drops to them)"
)

ALICE, BOB = 61_301, 61_302


def _as_uid(uid: int, action: Callable[[], None], answer: multiprocessing.queues.Queue[str]) -> None:
    os.setgid(uid)
    os.setuid(uid)
    try:
        action()
    except DetError as exc:
        answer.put(f"refused: {exc}")
    else:
        answer.put("ok")


def as_trial(uid: int, action: Callable[[], None]) -> str:
    """Run ``action`` in a child process as ``uid``: ``ok``, or ``refused: <why>``."""
    context = multiprocessing.get_context("fork")
    answer: multiprocessing.queues.Queue[str] = context.Queue()
    child = context.Process(target=_as_uid, args=(uid, action, answer))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    return answer.get(timeout=5)


@pytest.fixture
def root() -> Iterator[Path]:
    """A checkpoint root as the platform makes it: root-owned, mode 1733, reachable by every uid."""
    top = Path(tempfile.mkdtemp(prefix="det-tb-folders-"))
    top.chmod(0o711)
    ckpt = top / "ckpt"
    ckpt.mkdir(mode=0o1733)
    ckpt.chmod(0o1733)
    yield ckpt
    shutil.rmtree(top, ignore_errors=True)


def event_file(tmp: Path) -> Path:
    tmp.mkdir(mode=0o755, exist_ok=True)
    source = tmp / "events.out.tfevents.1.host"
    source.write_bytes(b"loss 0.5")
    source.chmod(0o644)
    return source


def sync(root: Path, experiment_id: int, trial_id: int, source: Path) -> Callable[[], None]:
    """What a trial's sync does: put one event file in its folder of the storage."""

    def put() -> None:
        store = CheckpointStorage.from_config({"type": "shared_fs", "host_path": str(root)})
        _place(store, experiment_id, trial_id).put(source, source.name)

    return put


def mode(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, stat.S_IMODE(st.st_mode)


def test_the_platform_owns_the_shared_folders_and_each_owner_only_their_own(root: Path) -> None:
    source = event_file(root.parent / "src")
    prepare_tensorboard_root(root)
    assert as_trial(BOB, sync(root, 8, 80, source)) == "ok"
    assert as_trial(ALICE, sync(root, 7, 70, source)) == "ok"

    top = root / "tensorboard"
    assert mode(top) == (0, 0o1733) and mode(top / "experiment") == (0, 0o1733)
    alice = top / "experiment" / "7"
    for folder in (alice, alice / "trial", alice / "trial" / "70"):
        assert mode(folder) == (ALICE, 0o700), folder
    assert mode(alice / "trial" / "70" / source.name) == (ALICE, 0o600)
    assert (alice / "trial" / "70" / source.name).read_bytes() == b"loss 0.5"
    # Bob's trial can neither read Alice's metrics nor remove her folder.
    assert as_trial(BOB, lambda: _read(alice / "trial" / "70" / source.name)).startswith("refused")
    assert as_trial(BOB, lambda: _remove(alice)).startswith("refused")


def test_a_trial_that_made_the_shared_folders_first_does_not_keep_them(root: Path) -> None:
    source = event_file(root.parent / "src")
    assert as_trial(BOB, sync(root, 8, 80, source)) == "ok"  # no platform yet: bob's trial made them
    assert mode(root / "tensorboard")[0] == BOB

    prepare_tensorboard_root(root)

    assert mode(root / "tensorboard") == (0, 0o1733)
    assert mode(root / "tensorboard" / "experiment") == (0, 0o1733)


def test_a_link_in_place_of_a_shared_folder_is_refused(root: Path) -> None:
    (root / "tensorboard").symlink_to("/etc")
    with pytest.raises(DetError, match=r"tensorboard in .*: not a folder of the platform's"):
        prepare_tensorboard_root(root)
    assert mode(Path("/etc"))[1] == 0o755


def test_another_users_folder_or_link_on_the_way_is_never_written_through(root: Path) -> None:
    source = event_file(root.parent / "src")
    prepare_tensorboard_root(root)
    collect = root.parent / "bob-collects"
    collect.mkdir()
    os.chown(collect, BOB, BOB)
    collect.chmod(0o777)

    def squat() -> None:
        experiments = root / "tensorboard" / "experiment"
        (experiments / "7").mkdir(mode=0o777)  # alice's next experiment, made first by bob
        (experiments / "7").chmod(0o777)
        (experiments / "9").symlink_to(collect)

    assert as_trial(BOB, squat) == "ok"
    refused = as_trial(ALICE, sync(root, 7, 70, source))
    assert (
        refused.startswith("refused:") and f"belongs to uid {BOB}, not to this trial's uid {ALICE}" in refused
    )
    assert as_trial(ALICE, sync(root, 9, 90, source)).startswith("refused:")
    assert not any((root / "tensorboard" / "experiment" / "7").rglob("*")), "nothing of alice's in bob's"
    assert not any(collect.rglob("*"))


def test_a_folder_an_older_version_left_open_is_narrowed_to_its_owner(root: Path) -> None:
    source = event_file(root.parent / "src")
    prepare_tensorboard_root(root)

    def older() -> None:
        folder = root / "tensorboard" / "experiment" / "7" / "trial" / "70"
        folder.mkdir(parents=True, mode=0o755)
        for level in (folder, folder.parent, folder.parent.parent):
            level.chmod(0o755)
        (folder / source.name).write_bytes(b"old")
        (folder / source.name).chmod(0o644)

    assert as_trial(ALICE, older) == "ok"
    assert as_trial(ALICE, sync(root, 7, 70, source)) == "ok"

    alice = root / "tensorboard" / "experiment" / "7"
    assert mode(alice) == (ALICE, 0o700) and mode(alice / "trial" / "70") == (ALICE, 0o700)
    assert mode(alice / "trial" / "70" / source.name) == (ALICE, 0o600)
    assert (alice / "trial" / "70" / source.name).read_bytes() == b"loss 0.5"


def _read(path: Path) -> None:
    try:
        path.read_bytes()
    except PermissionError as exc:
        raise DetError(str(exc)) from None


def _remove(path: Path) -> None:
    try:
        path.rename(path.with_name("moved"))
    except PermissionError as exc:
        raise DetError(str(exc)) from None
