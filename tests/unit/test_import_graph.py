"""Who may import and read what: the master never imports the operators or their runners, and
``det_airflow/settings.py`` is the only reader of airflow.cfg ``[det]``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "det_airflow" / "master"
# Where product code lives (operators/, launchers/, plugins/ and dags/ map into det_airflow.*).
PRODUCT = ("det_airflow", "operators", "launchers", "plugins", "dags")
SETTINGS = ROOT / "det_airflow" / "settings.py"
CONF_READS = {"get", "getboolean", "getint", "getfloat", "getsection"}


def python_files(*folders: Path) -> Iterator[Path]:
    for folder in folders:
        yield from sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports, at any depth (function-level imports included)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def is_operators(module: str) -> bool:
    return any(
        module == top or module.startswith(f"{top}.") for top in ("det_airflow.operators", "operators")
    )


def test_the_master_never_imports_the_operators_or_their_runners() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in python_files(MASTER)
        for line, module in imported_modules(path)
        if is_operators(module)
    ]
    assert not found, "the master imports operators:\n" + "\n".join(found)


def det_section_reads(path: Path) -> Iterator[int]:
    """Lines of ``path`` that call a ``*.get*("det", ...)`` configuration reader."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in CONF_READS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "det"
        ):
            yield node.lineno


def test_only_the_settings_module_reads_the_det_section() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in python_files(*(ROOT / top for top in PRODUCT))
        if path != SETTINGS
        for line in det_section_reads(path)
    ]
    assert not found, "airflow.cfg [det] is read outside det_airflow/settings.py:\n" + "\n".join(found)


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f():\n"
        "    from det_airflow.operators.trial import default_work_dir\n"
        "    return conf.getboolean('det', 'x', fallback=True)\n",
        encoding="utf-8",
    )
    assert any(is_operators(module) for _, module in imported_modules(sample))
    assert list(det_section_reads(sample)) == [3]
