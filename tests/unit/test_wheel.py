"""The wheel `make wheel` builds is all an existing Airflow needs: the web UI bundle, the plugin and
provider entry points, and every module (the mapped operators/, launchers/, plugins/webui/ folders)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_the_ui_bundle_and_airflow_s_entry_points(tmp_path: Path) -> None:
    bundle = ROOT / "plugins/webui/static/index.html"
    assert bundle.is_file(), "build the web UI first (`make ui`): a wheel without it has no pages"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("det_airflow-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        declared = archive.read(entry_points).decode()

    assert "det_airflow/webui/static/index.html" in names
    assert any(n.startswith("det_airflow/webui/static/assets/") for n in names)
    for module in (
        "det_airflow/lineage.py",
        "det_airflow/operators/pipeline.py",
        "det_airflow/launchers/deepspeed.py",
    ):
        assert module in names
    assert "det = det_airflow.webui.plugin:DetPlugin" in declared
    assert "provider_info = det_airflow.provider:get_provider_info" in declared
    assert "det = det_airflow.cli.main:main" in declared
