"""The wheel `make wheel` builds is all an existing Airflow needs: the web UI bundle, the plugin and
provider entry points, and every module (the mapped operators/, launchers/, plugins/webui/ folders)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


#: What a build never reads: environments, caches, dependencies, an earlier build's output (whose
#: build/lib would hide a module the package list leaves out).
_NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".airflow", "build", "dist", "node_modules", "__pycache__", "*.egg-info", "tests",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", "test-results", "mutants",
)  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of the tree as it is, built as `make wheel` builds it."""
    bundle = ROOT / "plugins/webui/static/index.html"
    assert bundle.is_file(), "build the web UI first (`make ui`): a wheel without it has no pages"
    source = tmp_path_factory.mktemp("source") / "det-airflow"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCES)
    out = tmp_path_factory.mktemp("wheel")
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
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("det_airflow-*.whl")
    return built


def test_the_wheel_carries_the_ui_bundle_and_airflow_s_entry_points(wheel: Path) -> None:
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


def _tree_modules() -> set[str]:
    """Every module of the tree as the wheel names it: det_airflow/ and the folders mapped into it."""
    mapped = {"det_airflow": "det_airflow", "operators": "det_airflow/operators",
              "launchers": "det_airflow/launchers", "plugins/webui": "det_airflow/webui"}  # fmt: skip
    found = set()
    for folder, package in mapped.items():
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT / folder)
            if {"__pycache__", "node_modules", "ui"} & set(relative.parts):
                continue
            found.add(f"{package}/{relative.as_posix()}")
    return found


def test_every_module_of_the_tree_is_in_the_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if n.endswith(".py")}
    tree = _tree_modules()
    assert len(tree) > 250
    assert sorted(tree - names) == [], "modules of the tree missing from the wheel"


#: What the editable checkout adds to the test environment: a clean install must do without it.
_THE_CHECKOUT = ("__editable__", "det_airflow")


@pytest.fixture(scope="module")
def clean_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed (see :func:`install_clean`)."""
    return install_clean(wheel, tmp_path_factory.mktemp("clean"))


def install_clean(wheel: Path, folder: Path) -> Path:
    """A fresh virtualenv in ``folder`` with the wheel installed and the test environment's other
    packages (Airflow and det-airflow's dependencies) laid under it, but not the editable checkout:
    the Python of what a platform team gets from `pip install det-airflow[airflow]` into their
    Airflow. Its ``bin`` has ``det`` (the wheel's) and ``airflow``."""
    import sysconfig

    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    deps = folder / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(_THE_CHECKOUT):
            (deps / entry.name).symlink_to(entry)
    # After the venv's own site-packages, so the wheel's det_airflow is the one found.
    (site_packages / "zz_deps.pth").write_text(f"import site; site.addsitedir({str(deps)!r})\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    # Airflow's console script, as installing Airflow into the venv would have written it.
    airflow = venv / "bin" / "airflow"
    airflow.write_text(f"#!{python}\nimport sys\nfrom airflow.__main__ import main\nsys.exit(main())\n")
    airflow.chmod(0o755)
    return venv


def test_the_installed_wheel_imports_every_module_and_airflow_loads_its_plugin(
    clean_install: Path, tmp_path: Path
) -> None:
    python = clean_install / "bin" / "python"
    every_module = (
        "import importlib, pkgutil, det_airflow\n"
        f"assert det_airflow.__file__.startswith({str(clean_install)!r}), det_airflow.__file__\n"
        "skip = ('det_airflow.compat',)\n"
        "for m in pkgutil.walk_packages(det_airflow.__path__, 'det_airflow.'):\n"
        "    if not m.name.startswith(skip):\n"
        "        importlib.import_module(m.name)\n"
        "print('imported')\n"
    )
    # Run away from the checkout, whose det_airflow/ would otherwise be found first.
    env = {
        "PATH": f"{clean_install / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AIRFLOW_HOME": str(tmp_path),
    }
    imported = subprocess.run(
        [str(python), "-c", every_module], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert imported.stdout.strip().endswith("imported")

    plugins = subprocess.run(
        [str(python), "-m", "airflow", "plugins", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert plugins.returncode == 0, plugins.stderr[-3000:]
    assert '"name": "det"' in plugins.stdout, plugins.stdout[-3000:]
    assert "Failed to import plugin" not in plugins.stdout + plugins.stderr
