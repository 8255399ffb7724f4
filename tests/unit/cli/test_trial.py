"""`det trial logs|describe`: the log line format, filters, head/tail, following, JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from det_airflow.api.models import LogLine
from det_airflow.cli.logs import format_log_line

from .conftest import _log


def test_log_line_format() -> None:
    line = LogLine.model_validate(_log(3, 10, "epoch 1", rank=1))
    assert format_log_line(line) == "[2025-03-01T12:00:03+00:00] c0ffee [rank=1] || INFO: epoch 1"
    # rank null: no [rank=N]; Determined-style level names are shortened
    line = LogLine.model_validate(_log(1, 10, "starting", rank=None, level="LOG_LEVEL_ERROR"))
    assert format_log_line(line) == "[2025-03-01T12:00:01+00:00] c0ffee || ERROR: starting"


def test_logs_all(det: Any, master: Any) -> None:
    result = det("trial", "logs", "10")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "[2025-03-01T12:00:01+00:00] c0ffee || INFO: starting",
        "[2025-03-01T12:00:02+00:00] c0ffee [rank=0] || INFO: epoch 1",
        "[2025-03-01T12:00:03+00:00] c0ffee [rank=1] || INFO: epoch 1",
        "[2025-03-01T12:00:04+00:00] c0ffee [rank=0] || WARNING: warning here",
        "[2025-03-01T12:00:05+00:00] c0ffee [rank=0] || INFO: done",
    ]


@pytest.mark.parametrize(
    ("flags", "messages"),
    [
        (["--head", "2"], ["starting", "epoch 1"]),
        (["--tail", "2"], ["warning here", "done"]),
        (["--head", "0"], []),
        (["--rank-id", "1"], ["epoch 1"]),
        (["--rank-id", "0", "--head", "2"], ["epoch 1", "warning here"]),
        (["--rank-id", "0", "--tail", "1"], ["done"]),
        (["--level", "warning"], ["warning here"]),
        (
            ["--level", "INFO", "--rank-id", "1", "--rank-id", "0"],
            ["epoch 1", "epoch 1", "warning here", "done"],
        ),
    ],
)
def test_logs_filters(det: Any, master: Any, flags: list[str], messages: list[str]) -> None:
    result = det("t", "logs", "10", *flags)
    assert result.code == 0, result.err
    assert [line.split(": ", 1)[1] for line in result.out.splitlines()] == messages


def test_logs_head_and_tail_exclusive(det: Any, master: Any) -> None:
    assert det("t", "logs", "10", "--head", "1", "--tail", "1").code == 2


def test_logs_bad_level(det: Any, master: Any) -> None:
    assert det("t", "logs", "10", "--level", "LOUD").code == 2


def test_logs_json(det: Any, master: Any) -> None:
    lines = det("t", "logs", "10", "--json", "--tail", "2").out.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [4, 5]


def test_logs_follow_stops_when_the_trial_ended(det: Any, master: Any) -> None:
    # Trial 10 is COMPLETED: follow prints everything and returns.
    result = det("t", "logs", "10", "-f")
    assert result.code == 0
    assert len(result.out.splitlines()) == 5


def test_logs_follow_waits_for_new_lines(det: Any, master: Any) -> None:
    master.experiments[4] = dict(master.experiments[2], id=4)
    master.ticks[4] = 1  # the next look makes trial 104 with one line, more come, then it ends
    master.advance(4)
    result = det("t", "logs", "104", "--follow", "--tail", "1")
    assert [line.rsplit(": ", 1)[1] for line in result.out.splitlines()] == [
        "hello from the first trial",
        "training...",
        "bye",
    ]


def test_logs_of_unknown_trial(det: Any, master: Any) -> None:
    result = det("t", "logs", "999")
    assert (result.code, result.err) == (1, "Error: trial 999 not found\n")


def test_describe(det: Any, master: Any) -> None:
    result = det("t", "describe", "10")
    assert result.code == 0, result.err
    header = [cell.strip() for cell in result.out.splitlines()[0].split("|")]
    assert header[:6] == ["Trial ID", "Experiment ID", "State", "H-Params", "Started", "Ended"]
    assert "COMPLETED" in result.out
    assert "Metrics:" not in result.out


def test_describe_shows_the_hosts_the_trial_ran_on(det: Any, master: Any) -> None:
    master.trials[10] |= {"host": "gpu-b", "hosts": ["gpu-a", "gpu-b"]}
    result = det("t", "describe", "10", "--csv")
    assert result.code == 0, result.err
    header, row = list(csv.reader(io.StringIO(result.out)))
    assert header[-2:] == ["Latest Checkpoint", "Hosts"]
    assert row[-1] == "gpu-a, gpu-b"
    assert json.loads(det("t", "describe", "10", "--json").out)["trial"]["hosts"] == ["gpu-a", "gpu-b"]


def test_describe_metrics_and_json(det: Any, master: Any) -> None:
    result = det("t", "describe", "10", "--metrics")
    assert "\nMetrics:\n" in result.out
    assert '"accuracy": 0.9' in result.out
    data = json.loads(det("t", "describe", "10", "--json").out)
    assert data["trial"]["id"] == 10


def test_kill(det: Any, master: Any) -> None:
    result = det("t", "kill", "10")
    assert (result.code, result.out) == (0, "Killed trial 10\n")
    assert master.actions == [("kill trial", 10)]
    result = det("trial", "kill", "999")
    assert (result.code, result.err) == (1, "Error: trial 999 not found\n")


OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"
TITLE = "\x1b]2;pwned\x1b\\"
CLEAR = "\x1b[2J\x1b[3J\x1b[H"


@pytest.mark.parametrize(
    "argv", [["t", "logs", "10"], ["e", "logs", "1"], ["t", "logs", "10", "--tail", "1"]]
)
def test_log_lines_are_printed_without_control_sequences(det: Any, master: Any, argv: list[str]) -> None:
    master.logs[10].append(_log(6, 10, f"{CLEAR}epoch 2{OSC52} loss\r\x1b[1A=0.1{TITLE}"))
    master.logs[10][-1]["container_id"] = f"c0ffee{TITLE}"
    result = det(*argv)
    assert result.code == 0, result.err
    assert (
        result.out.splitlines()[-1] == "[2025-03-01T12:00:06+00:00] c0ffee [rank=0] || INFO: epoch 2 loss=0.1"
    )
    assert "\x1b" not in result.out


def test_log_json_keeps_the_message_escaped(det: Any, master: Any) -> None:
    master.logs[10].append(_log(6, 10, f"{CLEAR}x"))
    last = det("t", "logs", "10", "--json").out.splitlines()[-1]
    assert "\x1b" not in last
    assert json.loads(last)["message"] == f"{CLEAR}x\n"
