"""How the CLI shows things: presto tables or CSV, JSON, UTC times, percents (as Determined's CLI)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from det_airflow.api.models import StateChange

TIME_FORMAT = "%Y-%m-%d %H:%M:%S%z"

# Terminal control sequences (ECMA-48), 7-bit and 8-bit forms. Text from the master (names, labels,
# log lines, error messages) can carry them, and a terminal would act on them: clear the screen,
# set the window title, write the clipboard (OSC 52), hide what follows.
_CONTROL = re.compile(
    r"""
      (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?           # CSI ... final byte
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f]) .*? (?:\x07|\x1b\\|\x9c|\Z)  # OSC, DCS, SOS, PM, APC up to BEL/ST
    | \x1b [\x20-\x2f]* [\x30-\x7e]?                                  # any other escape sequence
    | [\x00-\x08\x0b-\x1f\x7f-\x9f]                                   # other C0 (not tab, newline), DEL, C1
    """,
    re.VERBOSE | re.DOTALL,
)


def clean(text: object) -> str:
    """``text`` as a string without terminal control sequences; tabs and newlines are kept.

    Everything the CLI prints that a user did not type goes through here.
    """
    return _CONTROL.sub("", str(text))


def _clean_cell(value: Any) -> Any:
    return clean(value) if isinstance(value, str) else value


def format_time(value: str | None) -> str | None:
    """An ISO 8601 time from the master → ``2025-03-01 12:00:00+0000`` (UTC); naive times are UTC."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime(TIME_FORMAT)


def format_percent(fraction: float | None) -> str:
    return "N/A" if fraction is None else f"{fraction:.1%}"


def format_json_cell(value: Any) -> str:
    """Hyperparameters and other mappings inside a table cell."""
    return json.dumps(value, indent=4, sort_keys=True)


def format_state(state: str | None) -> str:
    return (state or "").removeprefix("STATE_")


STATE_CHANGE_HEADERS = ("Time", "From", "To", "Reason")


def print_state_changes(changes: list[StateChange], *, csv: bool) -> None:
    """The `--states` table of `det e describe` and `det t describe`."""
    if not csv:
        print("\nState changes:")
    rows = [
        [
            format_time(c.time),
            format_state(c.from_) if c.from_ else "",
            format_state(c.to),
            c.reason,
        ]
        for c in changes
    ]
    print_table(STATE_CHANGE_HEADERS, rows, csv=csv)


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """``--csv`` or ``--json`` instead of the table (one of them at most)."""
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print CSV")
    out.add_argument("--json", action="store_true", help="print JSON")


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, csv: bool = False, out: TextIO | None = None
) -> None:
    """A tabulate "presto" table, or CSV with a header row."""
    out = out or sys.stdout
    rows = [[_clean_cell(cell) for cell in row] for row in rows]
    if csv:
        import csv as csv_module

        writer = csv_module.writer(out, quoting=csv_module.QUOTE_MINIMAL, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(rows)
        return
    from tabulate import tabulate

    out.write(tabulate(rows, headers=list(headers), tablefmt="presto") + "\n")


def print_json(value: Any, *, out: TextIO | None = None) -> None:
    """``value`` as indented JSON; the master's answers (``api.models``) as the JSON it sent."""
    (out or sys.stdout).write(json.dumps(value, indent=4, sort_keys=True, default=_wire_json) + "\n")


def _wire_json(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if dump is None:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    return dump(mode="json")
