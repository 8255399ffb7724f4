"""Showing a trial's logs: the flags of ``det trial logs`` / ``det e logs``, paging, filtering, following."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from det_airflow.cli import render
from det_airflow.states import LOG_LEVELS, TERMINAL_TRIAL_STATES

if TYPE_CHECKING:
    from det_airflow.api.user import LogLine, LogsPage, UserClient

LEVELS = LOG_LEVELS
# Who wrote a line (as master/trial_logs.py records it) and the output streams lines come from.
SOURCES = ("task", "master")
STDTYPES = ("stdout", "stderr")
# Seconds between two looks at a followed trial; tests shorten it.
POLL_INTERVAL = 1.0
PAGE_SIZE = 1000


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by ``det trial logs`` and ``det experiment logs``."""
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new lines until the trial ends"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--head", type=_non_negative, metavar="N", help="only the first N lines")
    which.add_argument("--tail", type=_non_negative, metavar="N", help="only the last N lines")
    parser.add_argument(
        "--rank-id",
        dest="rank_ids",
        type=int,
        action="append",
        metavar="N",
        help="only lines of this rank (repeatable)",
    )
    parser.add_argument("--level", type=str.upper, choices=LEVELS, help="only lines of this level or higher")
    parser.add_argument(
        "--container-id",
        dest="container_ids",
        action="append",
        metavar="ID",
        help="only lines of this container (repeatable)",
    )
    parser.add_argument(
        "--source",
        dest="sources",
        action="append",
        choices=SOURCES,
        help="only lines of this source: task (the trial's processes) or master (repeatable)",
    )
    parser.add_argument(
        "--stdtype",
        dest="stdtypes",
        action="append",
        choices=STDTYPES,
        help="only lines of this output stream (repeatable)",
    )
    parser.add_argument(
        "--timestamp-before",
        type=timestamp,
        metavar="TIME",
        help="only lines logged before this time (RFC 3339, e.g. 2025-03-01T12:00:00Z; no zone: UTC)",
    )
    parser.add_argument(
        "--timestamp-after",
        type=timestamp,
        metavar="TIME",
        help="only lines logged after this time (RFC 3339, e.g. 2025-03-01T12:00:00Z; no zone: UTC)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def timestamp(text: str) -> datetime:
    """An RFC 3339 time for ``--timestamp-before/after``; without a zone it is UTC."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a time such as 2025-03-01T12:00:00Z, got {text!r}"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LogFilter:
    """Which lines to show; the master's log route applies every part, so only matching lines
    travel and ``--head``/``--tail`` count matching lines."""

    rank_ids: frozenset[int] | None = None
    min_level: str | None = None
    before: datetime | None = None
    after: datetime | None = None
    container_ids: frozenset[str] | None = None
    sources: frozenset[str] | None = None
    stdtypes: frozenset[str] | None = None

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.rank_ids is not None:
            out["rank"] = sorted(self.rank_ids)
        if self.container_ids is not None:
            out["container_id"] = sorted(self.container_ids)
        if self.sources is not None:
            out["source"] = sorted(self.sources)
        if self.stdtypes is not None:
            out["stdtype"] = sorted(self.stdtypes)
        if self.min_level is not None:
            out["level"] = self.min_level
        if self.before is not None:
            out["timestamp_before"] = self.before
        if self.after is not None:
            out["timestamp_after"] = self.after
        return out


def _level_name(level: str | None) -> str:
    return (level or "").upper().removeprefix("LOG_LEVEL_")


def format_log_line(line: LogLine) -> str:
    """``[timestamp] <container-id> [rank=N] || LEVEL: message``; parts that are unknown are left out."""
    parts = []
    if line.timestamp:
        parts.append(f"[{line.timestamp}]")
    if line.container_id:
        parts.append(str(line.container_id))
    if line.rank is not None:
        parts.append(f"[rank={line.rank}]")
    level = _level_name(line.level)
    message = (line.message or "").rstrip("\r\n")
    parts.append(f"|| {level}: {message}" if level else f"|| {message}")
    return render.clean(" ".join(parts))


class _Printer:
    def __init__(self, as_json: bool, out: TextIO | None) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout

    def __call__(self, line: LogLine) -> None:
        text = (
            json.dumps(line.model_dump(mode="json"), sort_keys=True)
            if self.as_json
            else format_log_line(line)
        )
        self.out.write(text + "\n")
        self.out.flush()


def _pages(client: UserClient, trial_id: int, after: int | None, query: dict[str, Any]) -> Iterator[LogsPage]:
    """Pages of the trial's log after ``after`` until the first empty one (which is yielded too)."""
    while True:
        page = client.trial_logs(trial_id, after=after, limit=PAGE_SIZE, **query)
        yield page
        if not page.logs:
            return
        after = page.logs[-1].id


def show_trial_logs(
    client: UserClient,
    trial_id: int,
    *,
    follow: bool = False,
    head: int | None = None,
    tail: int | None = None,
    log_filter: LogFilter | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
) -> None:
    """Prints the trial's logs; with ``follow``, keeps going until the trial ends and no lines come.

    ``head`` prints the first N matching lines and stops, even when following.
    """
    log_filter = log_filter or LogFilter()
    query = log_filter.params()
    emit = _Printer(as_json, out)
    after: int | None = None
    if head is not None:
        remaining = head
        if remaining == 0:
            return
        for page in _pages(client, trial_id, None, query):
            for line in page.logs[:remaining]:
                emit(line)
            remaining -= min(remaining, len(page.logs))
            if remaining == 0:
                return
        return

    if tail is not None:
        lines = client.trial_logs(trial_id, tail=tail, **query).logs if tail else []
        for line in lines:
            emit(line)
        after = lines[-1].id if lines else None
        if follow and after is None:
            # Nothing printed (tail 0 or no matching line): follow from the current end.
            last = client.trial_logs(trial_id, tail=1).logs
            after = last[-1].id if last else None
    else:
        for page in _pages(client, trial_id, None, query):
            for line in page.logs:
                emit(line)
            if page.logs:
                after = page.logs[-1].id

    if follow:
        _follow(client, trial_id, after, query, emit)


def _follow(
    client: UserClient,
    trial_id: int,
    after: int | None,
    query: dict[str, Any],
    emit: Callable[[LogLine], None],
) -> None:
    ended_and_quiet = False
    while True:
        page = client.trial_logs(trial_id, after=after, limit=PAGE_SIZE, **query)
        lines = page.logs
        for line in lines:
            emit(line)
        if lines:
            after = lines[-1].id
            ended_and_quiet = False
            if len(lines) >= PAGE_SIZE:
                continue
        elif page.trial_state in TERMINAL_TRIAL_STATES:
            # One more look after the trial ended: lines written just before its state changed.
            if ended_and_quiet:
                return
            ended_and_quiet = True
        time.sleep(POLL_INTERVAL)


def log_filter_from_args(args: argparse.Namespace) -> LogFilter:
    return LogFilter(
        rank_ids=frozenset(args.rank_ids) if args.rank_ids else None,
        min_level=args.level,
        before=args.timestamp_before,
        after=args.timestamp_after,
        container_ids=frozenset(args.container_ids) if args.container_ids else None,
        sources=frozenset(args.sources) if args.sources else None,
        stdtypes=frozenset(args.stdtypes) if args.stdtypes else None,
    )


def show_logs_from_args(client: UserClient, trial_id: int, args: argparse.Namespace) -> None:
    show_trial_logs(
        client,
        trial_id,
        follow=args.follow,
        head=args.head,
        tail=args.tail,
        log_filter=log_filter_from_args(args),
        as_json=args.json,
    )
