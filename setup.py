"""The package list of the det-airflow distribution, found, not kept by hand.

One import package, ``det_airflow``, is built from four folders of this repository: ``det_airflow/``
itself and the top-level ``operators/``, ``launchers/`` and ``plugins/webui/``, mapped to
``det_airflow.operators``, ``det_airflow.launchers`` and ``det_airflow.webui`` (the layout is the
architecture: shared/DESIGN.md). setuptools' own discovery cannot map folders into another package,
so every folder holding Python modules under each mapped root is a package here. Everything else
about the distribution is in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
#: Import package -> the folder it is built from.
MAPPED = {
    "det_airflow": "det_airflow",
    "det_airflow.operators": "operators",
    "det_airflow.launchers": "launchers",
    "det_airflow.webui": "plugins/webui",
}
#: Folders that are never packages: the web UI's sources and bundle, caches, dependencies.
SKIPPED = {"__pycache__", "node_modules", "ui", "static", "templates"}


def _packages_under(package: str, folder: Path) -> list[str]:
    found = [package]
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if child.name in SKIPPED or child.name.startswith(".") or not child.name.isidentifier():
            continue
        if any(child.rglob("*.py")):
            found += _packages_under(f"{package}.{child.name}", child)
    return found


def packages() -> list[str]:
    """Every package of the distribution, each mapped root with the packages below it."""
    return [name for package, folder in MAPPED.items() for name in _packages_under(package, ROOT / folder)]


setup(packages=packages(), package_dir=dict(MAPPED))
