"""Determined's argument forms that scripts rely on: comma-separated lists where Determined's verbs
take them, ``det checkpoint download --mode direct`` from a bucket with the user's own credentials,
and ``det --help`` listing the nouns as Determined's does."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det_airflow.core._s3 import S3Storage
from tests.s3_server import s3_server, without_aws_credentials

from .conftest import CHECKPOINT_UUID, FakeMaster

SECOND_UUID = "7a2b3c4d-0000-4000-8000-000000000002"


# --- comma-separated lists ---


def test_checkpoint_delete_takes_a_comma_separated_list(det: Any, master: FakeMaster) -> None:
    master.checkpoints[SECOND_UUID] = dict(master.checkpoints[CHECKPOINT_UUID], uuid=SECOND_UUID)
    result = det("checkpoint", "delete", f"{CHECKPOINT_UUID},{SECOND_UUID}", "--yes")
    assert result.code == 0, result.err
    assert result.out == f"Deleted checkpoint {CHECKPOINT_UUID}\nDeleted checkpoint {SECOND_UUID}\n"
    assert {c["state"] for c in master.checkpoints.values()} == {"DELETED"}


def test_checkpoint_delete_deletes_none_when_one_is_unknown(det: Any, master: FakeMaster) -> None:
    result = det("c", "delete", f"{CHECKPOINT_UUID},no-such-uuid", "--yes")
    assert result.code == 1 and "no-such-uuid" in result.err
    assert master.checkpoints[CHECKPOINT_UUID]["state"] == "COMPLETED"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["e", "describe", "1,x"], "expected comma-separated IDs such as 1,2, got '1,x'"),
        (["e", "describe", "1,,2"], "expected comma-separated IDs such as 1,2, got '1,,2'"),
        (["c", "delete", f"{CHECKPOINT_UUID},", "--yes"], "('' is not one)"),
        (["c", "delete", "a,../b", "--yes"], "('../b' is not one)"),
    ],
)
def test_a_bad_list_is_a_one_line_usage_error(
    det: Any, master: FakeMaster, argv: list[str], expected: str
) -> None:
    result = det(*argv)
    assert result.code == 2
    assert expected in result.err.splitlines()[-1]
    assert "Traceback" not in result.err
    assert master.checkpoints[CHECKPOINT_UUID]["state"] == "COMPLETED"


def test_verbs_that_take_one_id_in_determined_take_one_here(det: Any, master: FakeMaster) -> None:
    # Determined's `det e pause`, `det t logs`, `det t describe` take a single integer ID.
    for argv in (["e", "pause", "1,2"], ["t", "logs", "10,11"], ["t", "describe", "10,11"]):
        result = det(*argv)
        assert result.code == 2 and "invalid int value: '" in result.err
    assert not master.actions


# --- det checkpoint download --mode direct from object storage ---


@pytest.fixture
def bucket_checkpoint(master: FakeMaster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """Checkpoint CHECKPOINT_UUID written into a bucket of a local S3 server; the master records
    only where it is (no credentials), as the real master does. Answers the server's URL."""
    without_aws_credentials(monkeypatch, tmp_path)
    with s3_server("ckpts") as url:
        # The server's buckets outlive it within this process: each test writes under its own prefix.
        store = S3Storage("ckpts", prefix=tmp_path.name, endpoint_url=url, access_key="k", secret_key="s")
        with store.writing(CHECKPOINT_UUID) as folder:
            (folder / "state").mkdir()
            (folder / "model.pt").write_bytes(b"m" * 2048)
            (folder / "state" / "optimizer.pt").write_bytes(b"o" * 1024)
        master.checkpoints[CHECKPOINT_UUID]["storage"] = store.describe(CHECKPOINT_UUID)
        yield url


def test_direct_reads_the_bucket_with_the_users_own_credentials(
    det: Any, master: FakeMaster, bucket_checkpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "mine")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "my-secret")
    target = tmp_path / "out"
    # The stand-in master serves no checkpoint files: whatever arrives came from the bucket.
    result = det("checkpoint", "download", CHECKPOINT_UUID, "--mode", "direct", "-o", str(target))
    assert result.code == 0, result.err
    assert result.out == f"Local checkpoint path:\n{target}\n"
    assert (target / "model.pt").read_bytes() == b"m" * 2048
    assert (target / "state" / "optimizer.pt").read_bytes() == b"o" * 1024


def test_direct_without_credentials_says_what_to_do(
    det: Any, master: FakeMaster, bucket_checkpoint: str, tmp_path: Path
) -> None:
    result = det("c", "download", CHECKPOINT_UUID, "--mode", "direct", "-o", str(tmp_path / "out"))
    assert result.code == 1
    assert len(result.err.splitlines()) == 1
    assert "no credentials found" in result.err and "AWS_ACCESS_KEY_ID" in result.err
    assert "use --mode master" in result.err
    assert not (tmp_path / "out").exists()


def test_direct_refuses_a_checkpoint_missing_files_in_the_bucket(
    det: Any, master: FakeMaster, bucket_checkpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "mine")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "my-secret")
    master.checkpoints[CHECKPOINT_UUID]["resources"]["extra.bin"] = 10
    result = det("c", "download", CHECKPOINT_UUID, "--mode", "direct", "-o", str(tmp_path / "out"))
    assert result.code == 1 and "is incomplete: missing extra.bin" in result.err


def test_master_mode_goes_through_the_master(
    det: Any, master: FakeMaster, bucket_checkpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # With credentials for the bucket here, --mode master still asks the master for each file
    # (the stand-in serves none, so it answers 404).
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "mine")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "my-secret")
    result = det("c", "download", CHECKPOINT_UUID, "--mode", "master", "-o", str(tmp_path / "out"))
    assert result.code == 1
    assert result.err == "Error: Not Found\n"
    assert not (tmp_path / "out" / "model.pt").exists()


# --- det --help ---


def _nouns(help_text: str) -> list[str]:
    """The noun lines of ``det --help``: ``name (aliases)`` as argparse prints them."""
    block = help_text.split("positional arguments:", 1)[1].split("options:", 1)[0]
    return [m.group(1) for m in re.finditer(r"^    (\S+(?: \([^)]*\))?)", block, re.MULTILINE)]


def test_help_lists_the_nouns_as_determined_does(det: Any) -> None:
    result = det("--help")
    assert result.code == 0
    assert result.out.startswith("usage: det [-h] [-u username] [-m address] [-v] command ...")
    nouns = _nouns(result.out)
    # Determined sorts by its spelling of each noun ("command cmd" before "c|heckpoint").
    determined = [
        "agent (a)",
        "command (cmd)",
        "checkpoint (c)",
        "experiment (e)",
        "job (j)",
        "master",
        "notebook",
        "preview-search",
        "shell",
        "slot (s)",
        "task",
        "template (tpl)",
        "tensorboard",
        "token",
        "trial (t)",
        "user (u)",
        "version",
    ]
    assert nouns[0] == "help" and nouns[-1] == "admin"
    assert [n for n in nouns if n in determined] == determined


def test_every_listed_noun_does_something(det: Any) -> None:
    """No stubs: each noun's own --help lists verbs or options of its own."""
    for noun in _nouns(det("--help").out)[1:]:
        name = noun.split()[0]
        result = det(name, "--help")
        assert result.code == 0, name
        assert "not supported" not in result.out and "not implemented" not in result.out, name
        assert re.search(r"^  \S", result.out.split("positional arguments:", 1)[-1], re.MULTILINE), name


def test_help_noun_prints_the_help(det: Any) -> None:
    result = det("help")
    assert result.code == 0 and "experiment (e)" in result.out
