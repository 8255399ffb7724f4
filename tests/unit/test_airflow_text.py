"""What det writes into Airflow shows a user's text as text: Markdown escaped in the DAG's docs (no
link, no image loaded from a URL the user chose), control sequences stripped from every field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from det_airflow.airflow_text import markdown_text, plain_text  # noqa: E402
from det_airflow.dagfactory import build_dags  # noqa: E402

# Markdown and HTML in every field a user writes, and control sequences where the config allows them
# (a hyperparameter's value); names and descriptions with control characters are refused instead.
HOSTILE = r"""
name: "mnist ![x](https://evil.example/pixel.png) [click](https://evil.example) <img src=x>"
description: "line one [link](https://evil.example) <b>bold</b>"
entrypoint: python3 train.py
hyperparameters: {note: "\e[1mbold\e[0m \e]0;pwned\a\x9b31m"}
searcher: {name: single, metric: loss, max_length: 10}
"""
REFUSED = r"""
name: "mnist ![x](https://evil.example/pixel.png) \e[2J\e]0;pwned\a\x9b31m\u202e"
description: "line one\e[31m red\x07 \x00\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
"""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _dag(where: str, tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    if where == "dropped":
        _write(tmp_path / "hostile.yaml", text)
        return build_dags(tmp_path)["det_hostile"]
    _write(
        tmp_path / "experiments" / "exp_7.yaml",
        "# Experiment 7, written by the det master. Do not edit.\n" + text,
    )
    return build_dags(tmp_path)["det_exp_7"]


@pytest.fixture(params=["dropped", "master"])
def dag(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    return _dag(request.param, tmp_path, HOSTILE)


@pytest.fixture(params=["dropped", "master"])
def refused(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The invalid-config DAG of a YAML whose name and description carry control sequences."""
    return _dag(request.param, tmp_path, REFUSED)


def _fields(dag) -> list[str]:  # type: ignore[no-untyped-def]
    fields = [dag.dag_display_name, dag.description or "", dag.doc_md or "", *dag.tags, dag.owner]
    return fields + [str(v) for v in dag.params.dump().values()]


def test_the_docs_render_the_name_as_text_never_as_a_link_or_image(dag) -> None:  # type: ignore[no-untyped-def]
    doc = dag.doc_md
    # Markdown syntax only where a backslash makes it a literal character.
    assert not re.search(r"(?<!\\)!\[|(?<!\\)<img|(?<!\\)\]\(https", doc)
    assert r"\!\[x\]\(https\:\/\/evil\.example\/pixel\.png\)" in doc
    assert r"\<img src\=x\>" in doc


def test_no_field_written_into_airflow_carries_a_control_sequence(dag) -> None:  # type: ignore[no-untyped-def]
    for value in _fields(dag):
        assert not _CONTROL.search(value), f"control character in {value!r}"
    assert dag.dag_display_name.startswith("mnist ![x](https://evil.example/pixel.png) [click]")
    assert dag.description.startswith("line one [link]")


def test_a_config_refused_for_its_control_characters_shows_none_of_them(refused) -> None:  # type: ignore[no-untyped-def]
    for value in _fields(refused):
        assert not _CONTROL.search(value), f"control character in {value!r}"
    assert refused.dag_display_name.endswith(".yaml (invalid)")
    assert "name: contains U+001B" in refused.doc_md
    assert "evil" not in refused.dag_display_name


def test_plain_text_keeps_newlines_tabs_and_ordinary_unicode() -> None:
    assert plain_text("a\tb\nc é 日本 \x1b[31mred\x1b[0m") == "a\tb\nc é 日本 red"
    assert plain_text("title\x1b]0;pwned\x07 after") == "title after"


def test_markdown_text_is_one_escaped_line() -> None:
    assert markdown_text("# head\n* item [a](b)") == r"\# head \* item \[a\]\(b\)"
