"""core.init() and Context at their edges: what the log says, which TEST_MODE values count, the
storage and token a trial uses, and a failure that must not be hidden by a failing flush."""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import det_airflow as det
from det_airflow import core, trial_env
from det_airflow.core import Context, DistributedContext, LocalBackend
from det_airflow.core._local import read_jsonl

from .conftest import TOKEN

LOGGER = "det_airflow.core"


def test_a_context_built_by_hand_is_not_in_test_mode(tmp_path: Path) -> None:
    dist, backend = DistributedContext(), LocalBackend(tmp_path)
    train = core.TrainContext(dist, backend)
    ctx = Context(
        distributed=dist,
        train=train,
        checkpoint=core.CheckpointContext(dist, None, backend, train),
        preempt=core.PreemptContext(dist, backend),
        searcher=core.SearcherContext(dist, backend, train),
        backend=backend,
        info=None,
    )
    assert ctx.test_mode is False


@pytest.mark.parametrize(
    "value, test_mode",
    [("1", True), ("true", True), ("TRUE", True), ("yes", True), ("Yes", True), ("0", False), ("no", False)],
)
def test_det_test_mode_accepts_1_true_and_yes_in_any_case(
    monkeypatch: pytest.MonkeyPatch, value: str, test_mode: bool
) -> None:
    monkeypatch.setenv(trial_env.TEST_MODE, value)
    with core.init() as ctx:
        assert ctx.test_mode is test_mode


def test_invalid_hp_is_logged_before_the_clean_exit(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER), core.init():
        raise det.InvalidHP("lr too large")
    assert caplog.messages == ["InvalidHP raised: reporting the trial as invalid and exiting cleanly"]


def test_a_failing_flush_is_logged_and_the_training_error_still_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "store"
    blocked.write_text("a file where the store folder should be")
    monkeypatch.setenv(trial_env.LOCAL_STORE, str(blocked))
    with caplog.at_level(logging.ERROR, logger=LOGGER), pytest.raises(ZeroDivisionError):
        with core.init() as ctx:
            ctx.train.report_training_metrics(1, {"loss": 1.0})  # buffered: sent on exit, which fails
            _ = 1 / 0
    assert caplog.messages == ["could not send the last metrics while handling another error"]


@pytest.mark.parametrize(
    "kwargs, line",
    [
        ({"title": "loss diverged"}, "ALERT [warn] loss diverged"),
        ({}, "ALERT [warn] (no title)"),
        ({"description": "nan at step 7", "level": "info"}, "ALERT [info] nan at step 7"),
    ],
)
def test_an_alert_is_one_warning_line(caplog: pytest.LogCaptureFixture, kwargs: dict, line: str) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER), core.init() as ctx:
        ctx.alert(**kwargs)
    assert caplog.messages == [line]


def test_checkpoint_storage_given_on_a_trial_is_ignored_with_a_warning(
    on_trial: Callable, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    on_trial()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        core.init()
        assert caplog.messages == []
        core.init(checkpoint_storage=str(tmp_path / "mine"))
    assert caplog.messages == [
        "core.init(checkpoint_storage=...) is ignored on a trial; the config's is used"
    ]


def test_off_cluster_checkpoints_are_recorded_as_directory_storage(tmp_path: Path) -> None:
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (_, storage_id):
            pass
    [record] = read_jsonl(tmp_path / ".det_local" / "checkpoints.jsonl")
    assert record["storage"] == {
        "type": "directory",
        "path": str(tmp_path / ".det_local" / "checkpoints" / storage_id),
    }


@pytest.fixture
def master() -> Iterator[tuple[str, list[str | None]]]:
    """A master on localhost that answers every question about preemption with no; records tokens."""
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Authorization"))
            body = b'{"preempt": false}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_a_trial_asks_the_master_with_its_own_token(
    on_trial: Callable, master: tuple[str, list[str | None]]
) -> None:
    url, seen = master
    on_trial(master=url)
    with core.init() as ctx:
        assert ctx.preempt.should_preempt() is False
    # The first answer is asked for; the preemption watcher's long polls carry the same token.
    assert seen and set(seen) == {f"Bearer {TOKEN}"}
