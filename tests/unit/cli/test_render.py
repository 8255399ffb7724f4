"""Times, percents and tables as Determined's CLI shows them."""

from __future__ import annotations

import io

from det_airflow.cli import render


def test_format_time_is_utc() -> None:
    assert render.format_time("2025-03-01T12:00:00+00:00") == "2025-03-01 12:00:00+0000"
    assert render.format_time("2025-03-01T14:00:00.123+02:00") == "2025-03-01 12:00:00+0000"
    assert render.format_time("2025-03-01T12:00:00Z") == "2025-03-01 12:00:00+0000"
    assert render.format_time("2025-03-01T12:00:00") == "2025-03-01 12:00:00+0000"  # naive = UTC
    assert render.format_time(None) is None


def test_format_percent() -> None:
    assert render.format_percent(0.456) == "45.6%"
    assert render.format_percent(1) == "100.0%"
    assert render.format_percent(None) == "N/A"


def test_presto_table_and_csv() -> None:
    out = io.StringIO()
    render.print_table(["ID", "Name"], [[1, "a"], [22, None]], out=out)
    assert out.getvalue() == "   ID | Name\n------+--------\n    1 | a\n   22 |\n"
    out = io.StringIO()
    render.print_table(["ID", "Name"], [[1, "a, b"], [22, None]], csv=True, out=out)
    assert out.getvalue() == 'ID,Name\n1,"a, b"\n22,\n'
