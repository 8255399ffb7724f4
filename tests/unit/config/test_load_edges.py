"""load_config and parse_config at their edges: the file name on every kind of refusal, how much of a
file is read, and problems kept in the order their sections are written."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import det_airflow
from det_airflow.config import MAX_CONFIG_BYTES, load_config, parse_config
from det_airflow.errors import ConfigError

from ._configs import minimal

HEAD = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def refusal_of_file(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


def refusal(source: object, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(source, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


# --- reading the file ----------------------------------------------------------------------------


def test_a_directory_is_refused_with_the_reason_and_its_name(tmp_path: Path) -> None:
    assert refusal_of_file(tmp_path) == f"{tmp_path}: cannot read the file: Is a directory"


def test_a_file_that_is_not_utf8_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(HEAD.encode() + "description: caf\xe9\n".encode("latin-1"))

    assert refusal_of_file(path) == f"{path}: cannot read the file: it is not UTF-8 text"


def test_a_file_of_exactly_the_limit_is_read_to_its_last_character(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    padding = "# " + "x" * (MAX_CONFIG_BYTES - len(HEAD) - len("# \nname: xy")) + "\n"
    path.write_text(HEAD + padding + "name: xy")
    assert path.stat().st_size == MAX_CONFIG_BYTES

    assert load_config(path).name == "xy"


def test_a_stream_without_a_size_is_read_one_byte_past_the_limit_and_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        try:
            with open(fifo, "w", encoding="utf-8") as pipe:
                pipe.write(HEAD + "# " + "x" * (MAX_CONFIG_BYTES + 100) + "\n")
        except BrokenPipeError:
            pass  # the reader stopped one byte past the limit and closed its end

    # A read end of our own lets the writer start whatever load_config does; closing it ends the writer.
    keep_open = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        message = refusal_of_file(fifo)
    finally:
        os.close(keep_open)
        writer.join()

    assert message == (
        f"{fifo}: refused: the config is 1,048,577 bytes; at most 1,048,576 bytes (1 MiB) are accepted"
    )


def test_a_file_is_read_as_utf8_whatever_the_locale(tmp_path: Path) -> None:
    path = tmp_path / "accents.yaml"
    path.write_text(HEAD + "description: caf\u00e9 cr\u00e8me\n", encoding="utf-8")
    env = {
        **os.environ,
        "LC_ALL": "C",
        "PYTHONCOERCECLOCALE": "0",  # keep the C locale: ASCII is the default encoding
        "PYTHONUTF8": "0",
        "PYTHONPATH": str(Path(det_airflow.__file__).parents[1]),
    }
    script = (
        "import sys; from det_airflow.config import load_config; "
        "print(ascii(load_config(sys.argv[1]).description))"
    )

    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True, check=False
    )

    assert (done.returncode, done.stdout) == (0, "'caf\\xe9 cr\\xe8me'\n"), done.stderr


# --- parse_config names its source on every refusal ----------------------------------------------


def test_a_top_level_that_is_not_a_mapping_is_shown_as_written() -> None:
    assert refusal("- 1\n- 2\n", source_name="exp.yaml") == (
        "exp.yaml: expected a mapping of fields (such as 'searcher:') at the top level, got [1, 2]"
    )


def test_a_bad_override_is_refused_with_the_file_name() -> None:
    assert refusal(HEAD, source_name="exp.yaml", overrides=["nonsense"]) == (
        "exp.yaml: --config: expected key=value (e.g. searcher.max_trials=4), got 'nonsense'"
    )


def test_a_mapping_nested_past_the_recursion_limit_is_refused_with_its_name() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]

    with pytest.raises(ConfigError) as info:
        parse_config(deep, source_name="request")

    assert info.value.problems == [
        ("", "refused: it nests mappings and lists too deeply to be an experiment config")
    ]
    assert (
        str(info.value)
        == "request: refused: it nests mappings and lists too deeply to be an experiment config"
    )


# --- what comes back ---------------------------------------------------------------------------


def test_raw_does_not_change_when_the_data_handed_to_the_trial_is_changed() -> None:
    cfg = parse_config(minimal(data={"files": ["a.csv"]}))

    cfg.data["files"].append("b.csv")

    assert cfg.raw["data"] == {"files": ["a.csv"]}


def test_a_problem_three_fields_deep_is_reported_where_its_section_is_written() -> None:
    text = (
        "hyperparameters: {lr: {type: double, minval: 1, maxval: 0}}\n"
        "searcher: {name: single, metric: loss, max_trail: 3}\n"
        "entrypoint: python3 train.py\n"
    )

    with pytest.raises(ConfigError) as info:
        parse_config(text)

    assert [path for path, _ in info.value.problems] == ["hyperparameters.lr.maxval", "searcher.max_trail"]
