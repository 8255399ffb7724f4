"""Times, percents and tables as Determined's CLI shows them."""

from __future__ import annotations

import io

import pytest

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


# Payloads a hostile experiment name, label or log line could carry.
OSC52_CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"
OSC_TITLE_ST = "\x1b]0;you have been pwned\x1b\\"
CSI_CLEAR = "\x1b[2J\x1b[H"
C1_CSI_RED = "\x9b31m"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (f"mnist{OSC52_CLIPBOARD}", "mnist"),
        (f"a{OSC_TITLE_ST}b", "ab"),
        (f"{CSI_CLEAR}loss=0.1", "loss=0.1"),
        ("\x1b[1;31mred\x1b[0m", "red"),
        (f"{C1_CSI_RED}x\x9d0;title\x9cy", "xy"),
        ("\x1b]2;title never terminated", ""),
        ("cr\rbell\x07nul\x00del\x7fbs\x08", "crbellnuldelbs"),
        ("\x1bcreset\x1b(Bcharset\x1b7save", "resetcharsetsave"),
        ("tabs\tand\nnewlines stay", "tabs\tand\nnewlines stay"),
        ("unicode é 日本 ✓", "unicode é 日本 ✓"),
    ],
)
def test_clean_strips_terminal_control_sequences(raw: str, shown: str) -> None:
    assert render.clean(raw) == shown


def test_table_cells_are_cleaned() -> None:
    out = io.StringIO()
    render.print_table(["ID", "Name"], [[1, f"evil{OSC52_CLIPBOARD}{CSI_CLEAR}"]], out=out)
    assert out.getvalue() == "   ID | Name\n------+--------\n    1 | evil\n"
    out = io.StringIO()
    render.print_table(["Name"], [[f"x{OSC_TITLE_ST}"]], csv=True, out=out)
    assert out.getvalue() == "Name\nx\n"
