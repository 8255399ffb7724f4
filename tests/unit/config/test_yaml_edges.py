"""read_yaml at its edges: the file name in front of every refusal, keys made strings, the value and
nesting budgets at their exact limits, and which wording a syntax error is given in."""

from __future__ import annotations

import pytest

from det_airflow.config import MAX_CONFIG_BYTES, read_yaml
from det_airflow.errors import ConfigError


def refusal(text: str, source_name: str | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        read_yaml(text, source_name)
    return str(info.value)


def nested(levels: int, inner: str) -> str:
    """``levels`` flow lists, one inside the other, around ``inner``."""
    return "[" * levels + inner + "]" * levels


# --- the file name leads every refusal -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "# " + "x" * MAX_CONFIG_BYTES + "\n",
            f"refused: the config is {MAX_CONFIG_BYTES + 3:,} bytes; at most 1,048,576 bytes (1 MiB) are accepted",
        ),
        ("data: &d {self: *d}\n", "refused YAML: an alias (*name) refers to a value that contains it"),
        (
            "a: \x07\n",
            "invalid YAML: unacceptable character #x0007: control characters are not allowed\n"
            '  in "<unicode string>", position 3',
        ),
        ("when: 2024-13-01\n", "invalid YAML: month must be in 1..12"),
        ("a: b: c\n", "invalid YAML at line 1, column 5: mapping values are not allowed here"),
    ],
    ids=["too-large", "refused", "unreadable-character", "bad-scalar", "syntax"],
)
def test_every_refusal_is_prefixed_with_the_file_name(text: str, message: str) -> None:
    assert refusal(text, "exp.yaml") == f"exp.yaml: {message}"
    assert refusal(text) == message


# --- keys ----------------------------------------------------------------------------------------


def test_yaml_1_1_boolean_and_number_keys_become_strings() -> None:
    assert read_yaml("on: 1\noff: 2\n3: three\n2.5: half\n") == {
        "true": 1,
        "false": 2,
        "3": "three",
        "2.5": "half",
    }


# --- the values budget ---------------------------------------------------------------------------


def test_a_flat_list_of_100000_values_is_read_and_one_more_is_refused() -> None:
    # The list itself is one value, so 99,999 items make 100,000 values.
    assert read_yaml("[" + ",".join(["0"] * 99_999) + "]") == [0] * 99_999

    assert refusal("[" + ",".join(["0"] * 100_000) + "]") == "refused YAML: it holds more than 100,000 values"


def test_a_single_alias_is_enough_to_name_aliases_in_the_refusal() -> None:
    text = "a: &x [" + ",".join(["0"] * 50_001) + "]\nb: *x\n"

    assert refusal(text) == (
        "refused YAML: it holds more than 100,000 values once its aliases (*name) are expanded"
    )


# --- the nesting budget --------------------------------------------------------------------------


def test_64_levels_around_a_value_are_read_and_65_are_refused() -> None:
    expected: object = 1
    for _ in range(64):
        expected = [expected]
    assert read_yaml(nested(64, "1")) == expected

    assert refusal(nested(65, "1")) == "refused YAML: it nests mappings and lists more than 64 levels deep"


def test_levels_are_counted_from_where_a_value_sits_not_from_the_last_one_closed() -> None:
    # `a` is opened and closed at level 3; `b` then goes on from level 3 down to level 65.
    text = "{x: {a: [], b: " + nested(63, "") + "}}"

    assert refusal(text) == "refused YAML: it nests mappings and lists more than 64 levels deep"


def test_too_deep_an_expansion_is_reported_before_later_values_are_counted() -> None:
    # The top mapping, 24 lists and the 40 of `a`: 65 levels once `*a` is expanded.
    text = f"a: &a {nested(40, '1')}\nb: {nested(24, '*a')}\nc: [" + ",".join(["0"] * 100_001) + "]\n"

    assert refusal(text) == (
        "refused YAML: with its aliases expanded it nests mappings and lists more than 64 levels deep"
    )


def test_an_aliased_empty_list_is_a_level_as_it_is_written_out() -> None:
    # Written out, `b` holds 63 lists around an empty one: 65 levels with the top mapping. Through an
    # alias it is the same document, refused the same way (an empty list once counted as no level).
    assert read_yaml("a: []\nb: " + nested(62, "[]")) == read_yaml("a: &e []\nb: " + nested(62, "*e"))
    assert refusal("a: []\nb: " + nested(63, "[]")) == (
        "refused YAML: it nests mappings and lists more than 64 levels deep"
    )
    assert refusal("a: &e []\nb: " + nested(63, "*e")) == (
        "refused YAML: with its aliases expanded it nests mappings and lists more than 64 levels deep"
    )


# --- syntax errors: PyYAML's clearer wording for a short head, libyaml's otherwise ---------------

LIBYAML = "mapping values are not allowed in this context"
PYYAML = "mapping values are not allowed here"


def test_the_text_after_the_line_following_an_error_is_not_read_again() -> None:
    text = "a: 1\nb: 2\nc: 3\nd: e: f\ng: 4\n# " + "x" * 70_000 + "\nh: 5\n"

    assert refusal(text) == f"invalid YAML at line 4, column 5: {PYYAML}"


@pytest.mark.parametrize(
    ("head_length", "wording"), [(64 * 1024, PYYAML), (64 * 1024 + 1, LIBYAML)], ids=["64KiB", "64KiB+1"]
)
def test_an_error_is_read_again_only_when_it_and_the_next_line_fit_in_64_kib(
    head_length: int, wording: str
) -> None:
    head = "a: b: c\n# "
    head += "x" * (head_length - len(head))

    assert refusal(head + "\nd: 1\n") == f"invalid YAML at line 1, column 5: {wording}"


def test_an_error_of_one_character_is_read_again() -> None:
    assert refusal("]") == "invalid YAML at line 1, column 1: expected the node content, but found ']'"


def test_pyyaml_wording_found_on_another_line_is_not_used() -> None:
    # PyYAML places the end of this stream on line 4, libyaml on line 5: libyaml's error stands.
    assert refusal("{a: 1\n\n\nb") == "invalid YAML at line 5, column 1: did not find expected ',' or '}'"
