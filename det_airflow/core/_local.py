"""The backend of off-cluster training: a local store folder instead of the master.

Layout of the store (``DET_LOCAL_STORE``, default ``./.det_local``)::

    metrics.jsonl       one {group, steps_completed, metrics, report_time, trial_id} per report
    checkpoints/<uuid>/ checkpoint files (unless core.init(checkpoint_storage=...) says otherwise)
    checkpoints.jsonl   one Checkpoint record per registration or deletion (the last one wins)
    events.jsonl        progress, early exits, searcher completions, preemption acknowledgements
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from det_airflow.core import _config
from det_airflow.core._backend import Backend
from det_airflow.core._jsonable import as_float

DEFAULT_LOCAL_STORE = ".det_local"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
EVENTS_FILE = "events.jsonl"
CHECKPOINTS_DIR = "checkpoints"


def now_iso() -> str:
    from datetime import UTC, datetime  # on use: keeps the import of the Core API light

    return datetime.now(UTC).isoformat()


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines file; a torn last line (a killed writer) is skipped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


class LocalBackend(Backend):
    """Writes what the master would receive into JSON-lines files of a store folder."""

    def __init__(
        self,
        store: Path,
        *,
        trial_id: int | None = None,
        config: Mapping[str, Any] | None = None,
        test_mode: bool = False,
    ) -> None:
        self.store = Path(store).absolute()
        self.trial_id = trial_id
        self.config: Mapping[str, Any] = config or {}
        self.test_mode = test_mode
        self._searcher_done = False
        self._reported = False

    @property
    def checkpoints_dir(self) -> Path:
        return self.store / CHECKPOINTS_DIR

    def _append(self, name: str, record: dict[str, Any]) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, separators=(",", ":")) + "\n"
        # One write per record, in append mode, so concurrent local trials do not interleave lines.
        with (self.store / name).open("a", encoding="utf-8") as f:
            f.write(line)

    def _event(self, event: str, **fields: Any) -> None:
        self._append(EVENTS_FILE, {"event": event, "trial_id": self.trial_id, "time": now_iso(), **fields})

    def report_metrics(self, reports: list[dict[str, Any]]) -> None:
        for report in reports:
            self._append(METRICS_FILE, {**report, "trial_id": self.trial_id})
        self._reported = self._reported or bool(reports)

    def should_preempt(self) -> bool:
        # Test mode compresses a Core API loop: once it has reported something, the next
        # preemption check ends it (checkpoint and exit 0), as a pause would.
        return self.test_mode and self._reported

    def report_progress(self, progress: float) -> None:
        self._event("progress", progress=progress)

    def report_early_exit(self, reason: str) -> None:
        self._event("early_exit", reason=reason)

    def acknowledge_preemption(self) -> None:
        self._event("preemption_acknowledged")

    def register_checkpoint(
        self,
        uuid: str,
        steps_completed: int,
        metadata: dict[str, Any],
        resources: dict[str, int],
        storage: dict[str, str],
    ) -> None:
        record = {
            "uuid": uuid,
            "trial_id": self.trial_id,
            "steps_completed": steps_completed,
            "state": "COMPLETED",
            "metadata": metadata,
            "resources": resources,
            "size": sum(resources.values()),
            "storage": storage,
            "report_time": now_iso(),
        }
        self._append(CHECKPOINTS_FILE, record)

    def get_checkpoint(self, uuid: str) -> dict[str, Any] | None:
        found = None
        for record in read_jsonl(self.store / CHECKPOINTS_FILE):
            if record.get("uuid") == uuid:
                found = record if found is None else {**found, **record}
        return found

    def delete_checkpoint(self, uuid: str) -> None:
        self._append(CHECKPOINTS_FILE, {"uuid": uuid, "state": "DELETED", "report_time": now_iso()})

    def best_validation(self) -> float | None:
        metric, smaller_is_better = _config.searcher_metric(self.config)
        if metric is None:
            return None
        values = [
            value
            for record in read_jsonl(self.store / METRICS_FILE)
            if record.get("group") == "validation"
            and (value := as_float((record.get("metrics") or {}).get(metric))) is not None
            and value == value  # NaN is never the best
        ]
        if not values:
            return None
        return min(values) if smaller_is_better else max(values)

    def searcher_operation(self) -> tuple[int, bool]:
        if self.test_mode:
            length = 1
        else:
            # Without a config (a plain `python3 train.py`) there is one operation of length 1,
            # as in Determined; pass core.init(config=...) to say more.
            length = _config.searcher_length(self.config) or 1
        return length, self._searcher_done

    def searcher_completed(self, length: int, metric: Any) -> None:
        self._searcher_done = True
        self._event("searcher_completed", length=length, metric=metric)

    def close(self) -> None:
        pass
