"""`det admin install-dags`: what a platform team runs on a fresh Airflow, whose DAGs folder may not
exist yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from det_airflow.dag_loader import FILE_NAME, SOURCE


def test_install_dags_makes_a_missing_dags_folder(det: Any, tmp_path: Path) -> None:
    folder = tmp_path / "airflow" / "dags"
    result = det("admin", "install-dags", str(folder))
    assert (result.code, result.err) == (0, "")
    assert result.out == f"Made {folder} and wrote {folder / FILE_NAME}\n"
    assert (folder / FILE_NAME).read_text() == SOURCE
    again = det("admin", "install-dags", str(folder))
    assert again.out == f"{folder / FILE_NAME} is already up to date\n"


def test_install_dags_keeps_a_changed_copy_unless_forced(det: Any, tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("# the team's own copy\n")
    kept = det("admin", "install-dags", str(tmp_path))
    assert kept.code == 1
    assert (
        kept.err
        == f"Error: {tmp_path / FILE_NAME} exists and differs from det-airflow's; --force replaces it\n"
    )
    assert (tmp_path / FILE_NAME).read_text() == "# the team's own copy\n"
    forced = det("admin", "install-dags", str(tmp_path), "--force")
    assert forced.out == f"Wrote {tmp_path / FILE_NAME}\n"
    assert (tmp_path / FILE_NAME).read_text() == SOURCE


def test_install_dags_into_a_file_is_refused(det: Any, tmp_path: Path) -> None:
    a_file = tmp_path / "dags"
    a_file.write_text("not a folder")
    result = det("admin", "install-dags", str(a_file))
    assert result.code == 1
    assert result.err == f"Error: {a_file}: not a folder (give Airflow's [core] dags_folder)\n"
    assert a_file.read_text() == "not a folder"
