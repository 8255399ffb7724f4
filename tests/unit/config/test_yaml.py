"""YAML input budgets: size, documents, aliases, expanded values and nesting are refused before any
alias is expanded, each with a message naming what was refused."""

from __future__ import annotations

import pytest

from det_airflow.config import MAX_CONFIG_BYTES, parse_config, read_yaml
from det_airflow.errors import ConfigError

HEAD = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    return str(info.value)


def billion_laughs() -> str:
    """The classic: nine levels of nine aliases each, 9**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        name, below = chr(97 + level), chr(96 + level)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{below}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_without_expanding_it() -> None:
    bomb = billion_laughs()
    assert len(bomb.encode()) < 700

    assert refusal(bomb) == (
        "refused YAML: it holds more than 100,000 values once its aliases (*name) are expanded"
    )


def test_aliases_within_the_budget_expand_to_copies() -> None:
    assert read_yaml("a: &x {lr: 0.1}\nb: *x\n") == {"a": {"lr": 0.1}, "b": {"lr": 0.1}}


def test_a_thousand_aliases_are_read_and_one_more_is_refused() -> None:
    aliases = "data: {v: &v 1, all: [" + ", ".join(["*v"] * 1000) + "]}\n"
    assert parse_config(HEAD + aliases).data["all"] == [1] * 1000

    assert (
        refusal(HEAD + aliases.replace("[", "[*v, "))
        == "refused YAML: it uses more than 1,000 aliases (*name)"
    )


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    assert refusal(HEAD + "data: &d {self: *d}\n") == (
        "refused YAML: an alias (*name) refers to a value that contains it"
    )


def test_values_past_the_budget_are_refused_without_aliases_too() -> None:
    def config(values: int) -> str:
        # 13 values besides the list's items: the top mapping, its 3 keys and their 9 values and keys
        return HEAD + "data: {v: [" + ",".join(["0"] * (values - 13)) + "]}\n"

    assert len(parse_config(config(100_000)).data["v"]) == 100_000 - 13
    assert refusal(config(100_001)) == "refused YAML: it holds more than 100,000 values"


def test_nesting_of_64_levels_is_read_and_65_is_refused() -> None:
    def nested(levels: int) -> str:  # the top-level mapping and `data` are two levels
        return HEAD + "data: {v: " + "[" * (levels - 2) + "]" * (levels - 2) + "}\n"

    expected: list[object] = []
    for _ in range(64 - 3):
        expected = [expected]
    assert parse_config(nested(64)).data["v"] == expected
    assert refusal(nested(65)) == "refused YAML: it nests mappings and lists more than 64 levels deep"


def test_nesting_made_by_aliases_counts_once_expanded() -> None:
    deep = "[" * 40 + "]" * 40
    text = HEAD + f"data: {{a: &a {deep}, b: [[[[[[[[[[[[[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]]]]]]]]]]]}}\n"

    assert refusal(text) == (
        "refused YAML: with its aliases expanded it nests mappings and lists more than 64 levels deep"
    )


def test_a_config_of_exactly_one_mebibyte_is_read_and_one_byte_more_is_refused() -> None:
    padding = MAX_CONFIG_BYTES - len(HEAD.encode()) - len("# \n")
    exactly = HEAD + "# " + "x" * padding + "\n"
    assert len(exactly.encode()) == MAX_CONFIG_BYTES
    assert parse_config(exactly).searcher.name == "single"

    assert refusal(exactly + " ") == (
        "refused: the config is 1,048,577 bytes; at most 1,048,576 bytes (1 MiB) are accepted"
    )


def test_the_size_limit_counts_bytes_not_characters() -> None:
    text = HEAD + "description: " + "é" * (MAX_CONFIG_BYTES // 2) + "\n"  # two bytes each in UTF-8

    assert "refused: the config is" in refusal(text)


def test_a_second_document_is_refused_with_its_line() -> None:
    assert refusal(HEAD + "---\nname: other\n") == (
        "invalid YAML at line 3, column 1: a config is one YAML document, but another one starts here"
    )


def test_a_number_with_too_many_digits_is_a_config_error() -> None:
    assert (
        refusal(HEAD + "max_restarts: " + "9" * 5000 + "\n") == "invalid YAML: a number has too many digits"
    )


def test_an_impossible_date_is_a_config_error() -> None:
    assert refusal(HEAD + "description: 2024-13-01\n") == "invalid YAML: month must be in 1..12"


def test_a_file_over_the_limit_is_refused_by_load_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from det_airflow.config import load_config

    path = tmp_path / "big.yaml"
    path.write_text(HEAD + "# " + "x" * (2 * MAX_CONFIG_BYTES) + "\n")

    with pytest.raises(ConfigError) as info:
        load_config(path)

    assert str(info.value) == (
        f"{path}: refused: the config is {path.stat().st_size:,} bytes; at most 1,048,576 bytes (1 MiB) are accepted"
    )
