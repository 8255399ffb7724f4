"""The host folders a Docker trial mounts, checked on what Docker will mount: a link anywhere below
an allowed folder is refused, and a folder a trial identity could swap for a link between the check
and the mount is never what Docker is given (real folders, no daemon needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from det_airflow.operators.runners._host_mounts import HostMount, TrialIdentities, checked
from det_airflow.runner_policy import PolicyError

# An experiment owner's uid, in the default [det] trial_uid_range.
TRIAL_UID = 61_777
TRIALS = TrialIdentities(61_184, 65_519, frozenset({65_534}))

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="makes folders owned by a trial's uid (chown)")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An allowed folder the platform made: root-owned above and at it, like the checkpoint root."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    return allowed


def problems(
    mounts: list[HostMount], roots: list[Path], trials: TrialIdentities = TRIALS
) -> list[tuple[str, str]]:
    with pytest.raises(PolicyError) as refused:
        checked(mounts, roots, trials)
    return refused.value.problems


def bind(source: Path | str, target: str = "/data", field: str = "bind_mounts[0].host_path") -> HostMount:
    return HostMount(field, str(source), target, read_only=True, propagation="rprivate")


def test_a_folder_only_the_platform_can_change_is_mounted_as_it_is(root: Path) -> None:
    (root / "datasets" / "imagenet").mkdir(parents=True)
    mounts = checked([bind(root / "datasets" / ".." / "datasets" / "imagenet")], [root], TRIALS)
    assert mounts == [bind(root / "datasets" / "imagenet")]


@pytest.mark.parametrize("where", ["end", "middle"])
def test_a_link_anywhere_below_the_allowed_folder_is_refused(root: Path, where: str) -> None:
    (root / "real" / "inner").mkdir(parents=True)
    # Even a link that stays inside the allowed folder: Docker would follow whatever it names then.
    (root / "link").symlink_to(root / "real")
    asked = root / "link" if where == "end" else root / "link" / "inner"
    [(field, message)] = problems([bind(asked)], [root])
    assert field == "bind_mounts[0].host_path"
    assert f"{root / 'link'} is a symbolic link" in message


def test_a_link_to_the_hosts_root_is_refused(root: Path) -> None:
    (root / "escape").symlink_to("/")
    [(_, message)] = problems([bind(root / "escape")], [root])
    assert "is a symbolic link" in message


def test_the_admins_own_link_to_the_allowed_folder_is_followed_once(tmp_path: Path, root: Path) -> None:
    (root / "imagenet").mkdir()
    (tmp_path / "data").symlink_to(root)  # allowed_host_paths = /data, a link the admin made
    mounts = checked([bind(tmp_path / "data" / "imagenet")], [tmp_path / "data"], TRIALS)
    assert mounts == [bind(root / "imagenet")], "Docker gets the folder's real, link-free path"


def test_what_is_missing_not_a_folder_or_outside_the_allowed_folders_is_refused(
    tmp_path: Path, root: Path
) -> None:
    (root / "file.txt").write_text("x")
    found = problems(
        [
            bind(root / "missing", field="bind_mounts[0].host_path"),
            bind(root / "file.txt", field="bind_mounts[1].host_path"),
            bind(tmp_path, field="bind_mounts[2].host_path"),
        ],
        [root],
    )
    assert [(field, message.split(": ", 1)[-1]) for field, message in found] == [
        ("bind_mounts[0].host_path", f"{root / 'missing'} does not exist"),
        ("bind_mounts[1].host_path", f"{root / 'file.txt'} is not a folder"),
        ("bind_mounts[2].host_path", found[2][1].split(": ", 1)[-1]),
    ]
    assert "is not under a folder the cluster's runner policy allows" in found[2][1]


@needs_root
def test_a_trials_own_folder_in_the_sticky_root_is_reached_through_the_root(root: Path) -> None:
    """The review's race: bob's folder under the checkpoint root is his to rename and replace with a
    link to ``/``. Mounted at its own path, the container gets the root, which no trial can swap, and
    resolves whatever bob puts in his folder's place against its own file system."""
    root.chmod(0o1733)
    bob = root / "bob-runs"
    bob.mkdir()
    os.chown(bob, TRIAL_UID, TRIAL_UID)
    storage = HostMount("checkpoint_storage.host_path", str(bob), str(bob))

    assert checked([storage], [root], TRIALS) == [
        HostMount("checkpoint_storage.host_path", str(root), str(root))
    ]
    # At another path in the container it cannot be reached that way: refused, saying why.
    [(field, message)] = problems([bind(bob, "/runs")], [root])
    assert field == "bind_mounts[0].host_path"
    assert f"{bob} belongs to uid {TRIAL_UID}, a trial's identity, in the shared folder {root}" in message
    assert "could be swapped for a link between the check and the mount" in message


@needs_root
def test_a_folder_inside_a_trials_folder_is_refused_at_another_path(root: Path) -> None:
    bob = root / "bob"
    (bob / "data").mkdir(parents=True)
    os.chown(bob, TRIAL_UID, TRIAL_UID)
    [(_, message)] = problems([bind(bob / "data")], [root])
    assert f"{bob} belongs to uid {TRIAL_UID}, a trial's identity" in message
    # A folder the trial owns in a folder only the platform may write is its to fill, not to swap.
    assert checked([bind(bob)], [root], TRIALS) == [bind(bob)]


def test_a_folder_in_a_folder_others_may_write_is_refused(root: Path) -> None:
    shared = root / "shared"
    (shared / "data").mkdir(parents=True)
    shared.chmod(0o777)
    [(_, message)] = problems([bind(shared / "data")], [root])
    assert f"{shared} may be written by others (mode 0777)" in message


def test_a_same_path_mount_is_never_reached_through_a_folder_outside_the_allowed_one(tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    allowed = open_folder / "allowed"
    (allowed / "runs").mkdir(parents=True)
    runs = str(allowed / "runs")
    mount = HostMount("checkpoint_storage.host_path", runs, runs)
    allowed.chmod(0o777)  # anyone may replace what is in it, but not the allowed folder itself
    assert checked([mount], [allowed], TRIALS) == [HostMount(mount.field, str(allowed), str(allowed))]
    open_folder.chmod(0o777)  # now anyone may replace the allowed folder too: nothing is safe to mount
    [(_, message)] = problems([mount], [allowed])
    assert f"{open_folder} may be written by others (mode 0777)" in message


def test_the_work_folder_lies_in_no_folder_but_its_own(tmp_path: Path, root: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    mount = HostMount("airflow.cfg [det] trial_work_dir", str(work), str(work), within=str(work))
    assert checked([mount], [root], TRIALS) == [mount]


@needs_root
def test_two_mounts_reached_through_one_folder_become_one(root: Path) -> None:
    root.chmod(0o1733)
    bob = root / "bob-runs"
    bob.mkdir()
    os.chown(bob, TRIAL_UID, TRIAL_UID)
    mounts = [
        HostMount("checkpoint_storage.host_path", str(root), str(root)),
        HostMount("bind_mounts[0].host_path", str(bob), str(bob), read_only=True),
    ]
    assert checked(mounts, [root], TRIALS) == [
        HostMount("checkpoint_storage.host_path", str(root), str(root))
    ]


def test_trial_identities_are_the_uid_range_nobody_and_the_containers_user() -> None:
    identities = TrialIdentities(61_184, 65_519, frozenset({65_534, 1_000}))
    assert 61_184 in identities and 65_519 in identities and 65_534 in identities and 1_000 in identities
    assert 0 not in identities and 61_183 not in identities and 70_000 not in identities
