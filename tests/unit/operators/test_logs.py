"""How a trial's output lines become log records (rank from wrap_rank, level from the line)."""

from __future__ import annotations

import pytest

pytest.importorskip("airflow")

from det_airflow.operators._logs import parse_line  # noqa: E402


@pytest.mark.parametrize(
    ("line", "rank", "level", "message"),
    [
        ("plain output", None, "INFO", "plain output"),
        ("[rank=3] INFO: det_airflow.pytorch: validation", 3, "INFO", "det_airflow.pytorch: validation"),
        ("WARNING:root:disk almost full", None, "WARNING", "root:disk almost full"),
        ("[rank=0] ERROR boom", 0, "ERROR", "boom"),
        ("WARN: old style", None, "WARNING", "old style"),
        ("INFORMATION is not a level", None, "INFO", "INFORMATION is not a level"),
    ],
)
def test_rank_and_level_are_taken_from_the_line(
    line: str, rank: int | None, level: str, message: str
) -> None:
    record = parse_line(line, "stdout")
    assert (record["rank"], record["level"], record["message"]) == (rank, level, message)
    assert record["stdtype"] == "stdout"
