"""`det checkpoint list|describe|download|delete` and `det e list-checkpoints`."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import CAROL_TOKEN, CHECKPOINT_UUID
from .test_experiment import _table


@pytest.fixture
def stored(master: Any, tmp_path: Path) -> Path:
    """The checkpoint's files in a folder this machine can read, as shared_fs storage leaves them."""
    folder = tmp_path / "storage" / CHECKPOINT_UUID
    (folder / "state").mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"m" * 2048)
    (folder / "state" / "optimizer.pt").write_bytes(b"o" * 1024)
    master.checkpoints[CHECKPOINT_UUID]["storage"]["path"] = str(folder)
    return folder


@pytest.mark.parametrize("argv", [["checkpoint", "list", "1"], ["e", "list-checkpoints", "1"]])
def test_list_columns(det: Any, master: Any, argv: list[str]) -> None:
    result = det(*argv)
    assert result.code == 0, result.err
    header, rows = _table(result.out)
    assert header == ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources", "Size"]
    # One row per resource line: the file names are listed one per line in the Resources cell.
    assert rows == [
        ["10", "937", "COMPLETED", "0.9", CHECKPOINT_UUID, "model.pt", "3.0KB"],
        ["", "", "", "", "", "state/optimizer.pt", ""],
    ]


def test_list_csv_and_json(det: Any, master: Any) -> None:
    lines = det("checkpoint", "ls", "1", "--csv").out.splitlines()
    assert lines[0] == "Trial ID,# of Batches,State,Validation Metric,UUID,Resources,Size"
    assert lines[1] == f'10,937,COMPLETED,0.9,{CHECKPOINT_UUID},"model.pt'
    assert json.loads(det("checkpoint", "ls", "1", "--json").out)[0]["uuid"] == CHECKPOINT_UUID
    assert det("checkpoint", "ls", "2").out.splitlines()[2:] == []  # no checkpoints: header only


def test_describe(det: Any, master: Any) -> None:
    result = det("checkpoint", "describe", CHECKPOINT_UUID)
    assert result.code == 0, result.err
    table, resources, metadata = result.out.split("\n\n")
    header, rows = _table(table)
    assert header[:6] == ["UUID", "Experiment ID", "Trial ID", "# of Batches", "State", "Validation Metric"]
    assert rows[0][:6] == [CHECKPOINT_UUID, "1", "10", "937", "COMPLETED", "0.9"]
    assert rows[0][6:] == [
        "2025-03-01 12:59:00+0000",
        "3.0KB",
        f"/nonexistent/checkpoints/{CHECKPOINT_UUID}",
    ]
    _, resource_rows = _table(resources.removeprefix("Resources:\n"))
    assert resource_rows == [["model.pt", "2.0KB"], ["state/optimizer.pt", "1.0KB"]]
    assert json.loads(metadata.removeprefix("Metadata:\n")) == {"framework": "torch", "steps_completed": 937}


def test_describe_unknown_and_bad_uuid(det: Any, master: Any) -> None:
    result = det("checkpoint", "describe", "nope")
    assert (result.code, result.err) == (1, "Error: checkpoint nope not found\n")
    result = det("checkpoint", "describe", "..")
    assert result.code == 2
    assert "not a checkpoint UUID: '..'" in result.err


def test_download_copies_the_files(det: Any, stored: Path, tmp_path: Path) -> None:
    target = tmp_path / "here"
    result = det("checkpoint", "download", CHECKPOINT_UUID, "-o", str(target))
    assert result.code == 0, result.err
    assert result.out == f"Local checkpoint path:\n{target}\n"
    assert (target / "model.pt").read_bytes() == b"m" * 2048
    assert (target / "state" / "optimizer.pt").read_bytes() == b"o" * 1024


def test_download_default_folder(
    det: Any, stored: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = det("checkpoint", "download", CHECKPOINT_UUID)
    assert result.out == f"Local checkpoint path:\ncheckpoints/{CHECKPOINT_UUID}\n"
    assert (tmp_path / "checkpoints" / CHECKPOINT_UUID / "model.pt").exists()


def test_download_from_storage_this_machine_cannot_reach(det: Any, master: Any, tmp_path: Path) -> None:
    result = det("checkpoint", "download", CHECKPOINT_UUID, "-o", str(tmp_path / "here"))
    assert result.code == 1
    assert result.err == (
        f"Error: checkpoint {CHECKPOINT_UUID} is stored in /nonexistent/checkpoints/{CHECKPOINT_UUID} "
        "(shared_fs storage), which is not reachable from this machine: mount that storage here, "
        "or download on a machine that has it\n"
    )
    assert not (tmp_path / "here").exists()


def test_download_incomplete_or_deleted(det: Any, master: Any, stored: Path, tmp_path: Path) -> None:
    (stored / "state" / "optimizer.pt").unlink()
    result = det("checkpoint", "download", CHECKPOINT_UUID, "-o", str(tmp_path / "here"))
    assert result.err == (
        f"Error: checkpoint {CHECKPOINT_UUID} in {stored} is incomplete: missing state/optimizer.pt\n"
    )
    master.checkpoints[CHECKPOINT_UUID]["state"] = "DELETED"
    result = det("checkpoint", "download", CHECKPOINT_UUID, "-o", str(tmp_path / "here"))
    assert result.err == f"Error: checkpoint {CHECKPOINT_UUID} was deleted; its files are gone\n"
    assert not (tmp_path / "here").exists()


def test_delete_with_yes(det: Any, master: Any) -> None:
    result = det("checkpoint", "delete", CHECKPOINT_UUID, "--yes")
    assert (result.code, result.out) == (0, f"Deleted checkpoint {CHECKPOINT_UUID}\n")
    assert master.checkpoints[CHECKPOINT_UUID]["state"] == "DELETED"


def test_delete_needs_confirmation(det: Any, master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    result = det("checkpoint", "delete", CHECKPOINT_UUID)
    assert result.code == 1
    assert (
        result.err == f"Error: not deleting checkpoint {CHECKPOINT_UUID} without confirmation: pass --yes\n"
    )

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    assert det("checkpoint", "delete", CHECKPOINT_UUID).out.endswith("Aborting checkpoint deletion.\n")
    assert master.checkpoints[CHECKPOINT_UUID]["state"] == "COMPLETED"
    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    assert det("checkpoint", "delete", CHECKPOINT_UUID).out.endswith(
        f"Deleted checkpoint {CHECKPOINT_UUID}\n"
    )
    assert master.checkpoints[CHECKPOINT_UUID]["state"] == "DELETED"


def test_delete_of_someone_elses_checkpoint(det: Any, master: Any) -> None:
    from det_airflow.api.user import store_login

    store_login(master.url, "carol", CAROL_TOKEN)
    result = det("checkpoint", "delete", CHECKPOINT_UUID, "--yes")
    assert result.code == 1
    assert result.err.startswith(
        f"Error: permission denied: user 'carol' may not delete checkpoint {CHECKPOINT_UUID} of experiment 1"
    )
    assert master.checkpoints[CHECKPOINT_UUID]["state"] == "COMPLETED"
