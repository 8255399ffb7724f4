"""Bounds on the numbers, free-form JSON and file names a request body carries, for the wire models.

Every integer the master stores or looks up goes to a 64-bit database column: a larger one made
SQLite's driver raise OverflowError (a 500) and PostgreSQL refuse the statement. Free-form JSON (a
model's metadata, a checkpoint's) is kept as sent and shown on pages and in answers, so its size and
nesting are bounded too.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from det_airflow.config._limits import INT64_MAX, INT64_MIN

# How deeply any JSON a body carries may nest (objects and arrays): real metadata, hyperparameters
# and metrics nest a few levels; pages and clients walk it recursively.
MAX_JSON_DEPTH = 32
# A model's, a version's or a checkpoint's metadata, as stored (compact JSON, UTF-8).
MAX_METADATA_BYTES = 64 * 1024


def _where(path: tuple[Any, ...]) -> str:
    return "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in path)


def bounded_json(value: Any) -> Any:
    """``value`` if every integer in it fits a signed 64-bit column and it nests at most
    ``MAX_JSON_DEPTH`` deep; else ValueError naming where. Models inside are left to their own
    validation (their fields are checked as they are built)."""
    pending: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while pending:
        current, path = pending.pop()
        if isinstance(current, bool) or isinstance(current, BaseModel):
            continue
        if isinstance(current, int):
            if not INT64_MIN <= current <= INT64_MAX:
                shown = (
                    str(current) if len(str(current)) <= 40 else f"an integer of {len(str(current))} digits"
                )
                raise ValueError(
                    f"{_where(path) + ': ' if path else ''}{shown} is outside the range of a 64-bit "
                    f"integer ({INT64_MIN} to {INT64_MAX})"
                )
        elif isinstance(current, dict | list | tuple):
            if len(path) >= MAX_JSON_DEPTH:
                raise ValueError(f"{_where(path[:3])}...: nested deeper than {MAX_JSON_DEPTH} levels")
            items = current.items() if isinstance(current, dict) else enumerate(current)
            pending.extend((item, (*path, key)) for key, item in items)
    return value


def stored_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Metadata to store: bounded as :func:`bounded_json`, and at most ``MAX_METADATA_BYTES`` as JSON."""
    if value is None:
        return None
    bounded_json(value)
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"{size} bytes of JSON, over the limit of {MAX_METADATA_BYTES} (64 KiB)")
    return value


# A checkpoint's file, as its trial reports it (``resources``: relative path -> size): object stores
# take keys of up to 1024 bytes, file systems names of up to 255 bytes per part.
MAX_FILE_KEY_BYTES = 1024
MAX_FILE_PART_BYTES = 255
MAX_CHECKPOINT_FILES = 100_000


def relative_file(value: str) -> str:
    """``value`` if it names a file inside a checkpoint: a relative POSIX path of plain parts (no
    empty, ``.`` or ``..`` part, no backslash, no control character); else ValueError saying why.
    Pages, downloads and object-store keys join it under the checkpoint's own folder."""
    shown = repr(value) if len(value) <= 80 else repr(value[:77] + "...")
    if not value:
        raise ValueError("an empty file name")
    if len(value.encode()) > MAX_FILE_KEY_BYTES:
        raise ValueError(f"file {shown}: over {MAX_FILE_KEY_BYTES} bytes")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value) or "\\" in value:
        raise ValueError(f"file {shown}: control characters and backslashes are refused")
    if value.startswith("/"):
        raise ValueError(f"file {shown}: expected a path relative to the checkpoint, not an absolute one")
    for part in value.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(
                f"file {shown}: expected a path inside the checkpoint, without '', '.' or '..' parts"
            )
        if len(part.encode()) > MAX_FILE_PART_BYTES:
            raise ValueError(f"file {shown}: a part over {MAX_FILE_PART_BYTES} bytes")
    return value
