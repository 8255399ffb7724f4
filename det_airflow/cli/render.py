"""How the CLI shows things: presto tables or CSV, JSON, UTC times, percents (as Determined's CLI)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

TIME_FORMAT = "%Y-%m-%d %H:%M:%S%z"


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


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, csv: bool = False, out: TextIO | None = None
) -> None:
    """A tabulate "presto" table, or CSV with a header row."""
    out = out or sys.stdout
    rows = [list(row) for row in rows]
    if csv:
        import csv as csv_module

        writer = csv_module.writer(out, quoting=csv_module.QUOTE_MINIMAL, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(rows)
        return
    from tabulate import tabulate

    out.write(tabulate(rows, headers=list(headers), tablefmt="presto") + "\n")


def print_json(value: Any, *, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(json.dumps(value, indent=4, sort_keys=True) + "\n")
