"""det-airflow as an Airflow provider: its metadata is valid against Airflow's own schema, and once
the entry point is installed the `airflow providers` CLI shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import airflow
import jsonschema
import pytest

from det_airflow.operators.hooks import DetHook
from det_airflow.provider import get_provider_info

AIRFLOW_BIN = Path(sys.executable).with_name("airflow")


def test_the_provider_info_is_valid_against_airflows_schema() -> None:
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()

    jsonschema.validate(info, schema)
    assert info["package-name"] == "det-airflow"
    (conn,) = info["connection-types"]
    assert (conn["connection-type"], conn["hook-class-name"]) == (
        "det",
        "det_airflow.operators.hooks.DetHook",
    )
    assert conn["ui-field-behaviour"]["relabeling"] == DetHook.get_ui_field_behaviour()["relabeling"]
    assert info["plugins"] == [{"name": "det", "plugin-class": "det_airflow.webui.plugin.DetPlugin"}]


def test_every_class_and_module_the_provider_names_imports() -> None:
    import importlib

    info = get_provider_info()
    dotted = [info["connection-types"][0]["hook-class-name"], *info["extra-links"]]
    dotted += [p["plugin-class"] for p in info["plugins"]]
    for path in dotted:
        module, _, name = path.rpartition(".")
        assert getattr(importlib.import_module(module), name) is not None
    for section in ("operators", "sensors", "hooks", "triggers"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


def _entry_point_installed() -> bool:
    return any(
        ep.value == "det_airflow.provider:get_provider_info"
        for ep in metadata.entry_points(group="apache_airflow_provider")
    )


@pytest.mark.skipif(
    not _entry_point_installed(),
    reason="the apache_airflow_provider entry point of det-airflow is not installed (pip install -e .)",
)
def test_airflow_providers_lists_and_describes_det_airflow(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")

    def airflow_cli(*args: str) -> str:
        result = subprocess.run(
            [str(AIRFLOW_BIN), *args], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    listed = json.loads(airflow_cli("providers", "list", "--output", "json"))
    assert "det-airflow" in {p["package_name"] for p in listed}
    got = json.loads(airflow_cli("providers", "get", "det-airflow", "--full", "--output", "json"))
    assert got[0]["package-name"] == "det-airflow"
    assert got[0]["connection-types"][0]["connection-type"] == "det"
    hooks = json.loads(airflow_cli("providers", "hooks", "--output", "json"))
    assert any(h.get("connection_type") == "det" and h.get("package_name") == "det-airflow" for h in hooks)
