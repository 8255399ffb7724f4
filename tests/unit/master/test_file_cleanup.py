"""The master's removals stay under the platform's roots, follow no link, and run as the owner's
identity, never as root on a path a user chose (issue 20, finding 1)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow.master import file_cleanup, identities
from det_airflow.master.db import Database
from det_airflow.master.file_cleanup import Identity, remove_tree
from tests.unit.master.owners import checkpoint_root

UUID = "9f0c2f1e-6f57-4bb4-9d3a-0d6c5b1f7a10"
OWNER = Identity(61184, 61184)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as other uids")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return checkpoint_root(tmp_path / "checkpoints")


def victim(parent: Path, name: str = "victim") -> Path:
    """A folder of someone else's, with a file in it."""
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "precious").write_text("keep me")
    return folder


def test_a_link_named_as_the_checkpoint_is_not_followed(root: Path, tmp_path: Path) -> None:
    target = victim(tmp_path)
    (root / UUID).symlink_to(target)

    problems = remove_tree(root / UUID, [root], f"checkpoint {UUID}", identity=OWNER)

    assert problems == [
        f"checkpoint {UUID} at {root / UUID}: not a folder (a link or a file; links are not followed); not removed"
    ]
    assert (target / "precious").read_text() == "keep me"


def test_a_link_swapped_in_for_a_folder_on_the_way_is_refused(root: Path, tmp_path: Path) -> None:
    # storage_path "team": the trial replaced the folder by a link to one of its choosing.
    elsewhere = tmp_path / "elsewhere"
    victim(elsewhere, UUID)
    (root / "team").symlink_to(elsewhere)

    problems = remove_tree(root / "team" / UUID, [root], f"checkpoint {UUID}", identity=OWNER)

    assert len(problems) == 1
    assert f"{root / 'team'} is a link or not a folder" in problems[0]
    assert "links are not followed" in problems[0]
    assert (elsewhere / UUID / "precious").read_text() == "keep me"


def test_a_path_outside_the_roots_is_never_touched(root: Path, tmp_path: Path) -> None:
    target = victim(tmp_path)
    for path in (target, root / ".." / "victim", root):
        problems = remove_tree(path, [root], "checkpoint x", identity=OWNER)
        assert len(problems) == 1 and "not under the checkpoint root or an allowed folder" in problems[0]
    assert (target / "precious").exists() and root.is_dir()


def test_links_inside_the_folder_are_removed_not_followed(root: Path, tmp_path: Path) -> None:
    target = victim(tmp_path)
    folder = root / UUID
    folder.mkdir()
    (folder / "to-victim").symlink_to(target)
    if os.geteuid() == 0:
        os.chown(folder, OWNER.uid, OWNER.gid)
        os.chown(folder / "to-victim", OWNER.uid, OWNER.gid, follow_symlinks=False)

    assert remove_tree(folder, [root], f"checkpoint {UUID}", identity=OWNER) == []

    assert not os.path.lexists(folder)
    assert (target / "precious").read_text() == "keep me"


@as_root
def test_a_root_owned_folder_the_owner_could_not_write_is_not_removed(root: Path) -> None:
    # The attack of issue 20: a checkpoint "named" after a root-owned 0700 folder under the root.
    rootowned = victim(root, UUID)
    rootowned.chmod(0o700)

    problems = remove_tree(rootowned, [root], f"checkpoint {UUID}", identity=OWNER)

    assert len(problems) == 1
    assert problems[0].startswith(f"checkpoint {UUID} at {rootowned}: ")
    assert "Permission denied for uid 61184, the experiment owner's identity; not removed" in problems[0]
    assert (rootowned / "precious").read_text() == "keep me"


@as_root
def test_the_owners_own_folder_in_the_shared_root_is_removed_as_the_owner(root: Path) -> None:
    mine = victim(root, UUID)
    for path in (mine, mine / "precious"):
        os.chown(path, OWNER.uid, OWNER.gid)
    someone_elses = victim(root, "5b0f9c1e-2a4d-4c8e-9f3a-7d6e5c4b3a21")
    for path in (someone_elses, someone_elses / "precious"):
        os.chown(path, OWNER.uid + 1, OWNER.gid + 1)

    assert remove_tree(mine, [root], "checkpoint", identity=OWNER) == []
    assert not mine.exists()
    # Another identity's folder is not the owner's to remove.
    assert remove_tree(someone_elses, [root], "checkpoint", identity=OWNER) != []
    assert (someone_elses / "precious").exists()


@as_root
def test_root_is_never_the_identity_a_users_path_is_removed_as(root: Path) -> None:
    folder = victim(root, UUID)
    problems = remove_tree(folder, [root], "checkpoint", identity=Identity(0, 0))
    assert problems and "does not remove files as root" in problems[0]
    assert folder.exists()


# --- one uid per experiment owner -------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'det.db'}")
    database.migrate()
    yield database
    database.engine.dispose()


def uid(db: Database, user: str) -> int:
    with db.begin() as conn:
        return identities.uid_for(conn, user)


def test_each_owner_gets_a_stable_uid_of_their_own_from_the_range(db: Database) -> None:
    alice, bob = uid(db, "alice"), uid(db, "bob")
    assert (alice, bob) == (61184, 61185)  # systemd DynamicUser's range by default
    assert uid(db, "alice") == alice and uid(db, "bob") == bob


def test_the_range_comes_from_airflow_cfg_and_a_full_range_is_a_clear_error(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DET__TRIAL_UID_RANGE", "70000-70001")
    assert [uid(db, name) for name in ("a", "b")] == [70000, 70001]
    with pytest.raises(identities.IdentityError, match=r"trial_uid_range 70000-70001: all 2 uids are taken"):
        uid(db, "c")


def test_concurrent_first_uses_agree_on_one_uid_per_user(db: Database) -> None:
    answers: dict[str, set[int]] = {"alice": set(), "bob": set()}
    errors: list[BaseException] = []

    def ask(user: str) -> None:
        try:
            answers[user].add(uid(db, user))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(user,)) for user in ("alice", "bob") * 8]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(answers["alice"]) == len(answers["bob"]) == 1
    assert answers["alice"] != answers["bob"]


def test_a_uid_taken_meanwhile_by_another_writer_is_skipped(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another API server inserted 61184 for "zed" between this one's read and its insert.
    real_first_free = identities._first_free
    calls = []

    def racing(conn):  # type: ignore[no-untyped-def]
        found = real_first_free(conn)
        if not calls:
            conn.execute(identities.schema.user_ids.insert().values(username="zed", uid=found))
        calls.append(found)
        return found

    monkeypatch.setattr(identities, "_first_free", racing)
    assert uid(db, "alice") == 61185
    assert calls == [61184, 61185]


def test_the_trial_spec_carries_the_owners_uid(db: Database) -> None:
    from det_airflow.trial_process import TrialSpec

    spec = TrialSpec.from_dict(
        {"trial_id": 1, "experiment_id": 2, "uid": uid(db, "bob"), "gid": uid(db, "bob")}
    )
    assert (spec.uid, spec.gid) == (61184, 61184)
    assert TrialSpec.from_dict({"trial_id": 1, "experiment_id": 2}).uid is None
    assert file_cleanup.Identity(spec.uid, spec.gid) == OWNER
