"""Who may import and read what: the master never imports the operators or their runners,
``det_airflow/settings.py`` is the only reader of airflow.cfg ``[det]``, and
``det_airflow/airflow_compat.py`` is the only importer of Airflow modules outside Airflow's public
interface."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "det_airflow" / "master"
# Where product code lives (operators/, launchers/, plugins/ and dags/ map into det_airflow.*).
PRODUCT = ("det_airflow", "operators", "launchers", "plugins", "dags")
SETTINGS = ROOT / "det_airflow" / "settings.py"
COMPAT = ROOT / "det_airflow" / "airflow_compat.py"
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


def test_the_airflow_check_sees_function_level_imports_and_tells_public_from_not(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from airflow.sdk import BaseHook\n"
        "def f():\n"
        "    import airflow.models.dagrun\n"
        "    from airflow.providers.fab.www import security_appless\n",
        encoding="utf-8",
    )
    names = list(airflow_imports(sample))
    assert names == [
        (1, "airflow.sdk.BaseHook"),
        (3, "airflow.models.dagrun"),
        (4, "airflow.providers.fab.www.security_appless"),
    ]
    assert [is_public_airflow(n) for _, n in names] == [True, False, False]


def master_import_graph(folder: Path = MASTER) -> dict[str, set[str]]:
    """Each module of the master package -> the master modules it imports, at any depth (inside
    functions too: an import put off to run time still ties the two modules together)."""
    modules = {path.stem: path for path in sorted(folder.glob("*.py")) if path.stem != "__init__"}
    prefix = "det_airflow.master."
    return {
        name: {
            imported
            for _, module in imported_modules(path)
            if module.startswith(prefix)
            and (imported := module.removeprefix(prefix).split(".")[0]) in modules
        }
        - {name}
        for name, path in modules.items()
    }


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph``, its first module repeated at its end; None when there is none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            if (cycle := visit(imported, [*path, module])) is not None:
                return cycle
        done.add(module)
        return None

    return next((cycle for module in sorted(graph) if (cycle := visit(module, [])) is not None), None)


def test_the_master_modules_import_one_another_without_a_cycle() -> None:
    cycle = a_cycle(master_import_graph())
    assert cycle is None, "the master's modules import one another in a circle: " + " -> ".join(cycle or [])


def test_the_cycle_check_sees_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    (tmp_path / "first.py").write_text("from det_airflow.master import second, schema\n", encoding="utf-8")
    (tmp_path / "second.py").write_text(
        "def f():\n    from det_airflow.master.first import g\n", encoding="utf-8"
    )
    (tmp_path / "schema.py").write_text("", encoding="utf-8")
    assert master_import_graph(tmp_path) == {
        "first": {"second", "schema"},
        "second": {"first"},
        "schema": set(),
    }
    assert a_cycle(master_import_graph(tmp_path)) == ["first", "second", "first"]
    (tmp_path / "second.py").write_text("from det_airflow.master import schema\n", encoding="utf-8")
    assert a_cycle(master_import_graph(tmp_path)) is None


# Airflow's "Public Interface" page: the Task SDK, hooks, triggers, timetables, listeners, secrets
# backends, the executor and auth-manager base classes (with the user and resource types their
# methods take), plugins, exceptions, the state enums, and providers (but not FAB's auth manager,
# which the page names as an implementation, not an interface).
PUBLIC_AIRFLOW = (
    "airflow.sdk",
    "airflow.hooks",
    "airflow.triggers",
    "airflow.timetables",
    "airflow.listeners",
    "airflow.secrets",
    "airflow.executors.base_executor",
    "airflow.api_fastapi.auth.managers.base_auth_manager",
    "airflow.api_fastapi.auth.managers.models",
    "airflow.plugins_manager.AirflowPlugin",
    "airflow.exceptions",
    "airflow.utils.state",
    "airflow.providers",
)
NOT_PUBLIC_AIRFLOW = ("airflow.providers.fab",)

# What det takes from outside that interface, each name with its reason in airflow_compat.py.
# A new entry here is a new dependency on Airflow's internals: look for a public way first.
EXPECTED_NON_PUBLIC = {
    "airflow.api.common.delete_dag.delete_dag",
    "airflow.api_fastapi.app.get_auth_manager",
    "airflow.api_fastapi.core_api.security.get_user",
    "airflow.api_fastapi.core_api.security.requires_authenticated",
    "airflow.configuration.conf",
    "airflow.dag_processing.dagbag.DagBag",
    "airflow.dag_processing.dagbag.sync_bag_to_db",
    "airflow.models.connection.Connection",
    "airflow.models.dag.DagModel",
    "airflow.models.dagbag.DagPriorityParsingRequest",
    "airflow.models.dagrun.DagRun",
    "airflow.models.pool.Pool",
    "airflow.models.serialized_dag.SerializedDagModel",
    "airflow.models.taskinstance.TaskInstance",
    "airflow.models.taskinstance.clear_task_instances",
    "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager",
    "airflow.providers.fab.www.security_appless.ApplessAirflowSecurityManager",
    "airflow.utils.session.create_session",
    "airflow.utils.sqlalchemy.with_row_locks",
    "airflow.utils.types.DagRunTriggeredByType",
    "airflow.utils.types.DagRunType",
}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


def is_public_airflow(name: str) -> bool:
    return _within(name, PUBLIC_AIRFLOW) and not _within(name, NOT_PUBLIC_AIRFLOW)


def airflow_imports(path: Path) -> Iterator[tuple[int, str]]:
    """Each Airflow name ``path`` imports (``module.name`` for ``from module import name``), at any
    depth: function-level and ``TYPE_CHECKING`` imports included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        yield from ((node.lineno, n) for n in names if n == "airflow" or n.startswith("airflow."))


def test_only_the_compat_module_imports_airflow_outside_its_public_interface() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in python_files(*(ROOT / top for top in PRODUCT))
        if path != COMPAT
        for line, name in airflow_imports(path)
        if not is_public_airflow(name)
    ]
    assert not found, (
        "non-public Airflow imported outside det_airflow/airflow_compat.py (use a public way, or add "
        "the name there with its reason):\n" + "\n".join(found)
    )


def test_the_compat_module_lists_exactly_the_expected_non_public_names() -> None:
    from det_airflow import airflow_compat

    loaded = {f"{module}.{attribute}" for module, attribute in airflow_compat.NON_PUBLIC.values()}
    typed = {name for _, name in airflow_imports(COMPAT)}
    assert loaded == EXPECTED_NON_PUBLIC
    assert typed == loaded, "the TYPE_CHECKING imports and NON_PUBLIC differ"
    assert not any(is_public_airflow(name) for name in loaded), "a public name needs no door"


def test_each_compat_name_is_the_object_airflow_defines() -> None:
    import importlib

    from det_airflow import airflow_compat

    for name, (module, attribute) in airflow_compat.NON_PUBLIC.items():
        try:
            expected = getattr(importlib.import_module(module), attribute)
        except ImportError:
            assert module.startswith("airflow.providers.fab."), module  # FAB is an optional extra
            continue
        assert getattr(airflow_compat, name) is expected, name
