"""Routes through which a trial writes and reads its files in object storage, with the trial token
of its current run: the master holds the store's credentials, and checks every call
(master/trial_storage.py says what a trial may do).

Bodies stream both ways. A file sent here is written to a temporary file as it arrives (never
held in memory), then sent to the store before the answer: once the answer is 200 the file is in
the store.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse

from det_airflow.api.models import Empty, StoredFiles, TensorBoardFiles
from det_airflow.context_archive import format_size
from det_airflow.core._storage import CheckpointFilesMissing, checked_relative
from det_airflow.master import storage_limits, trial_storage
from det_airflow.master.auth import TrialAuth
from det_airflow.master.db import get_database
from det_airflow.master.lifecycle import NotFound

router = APIRouter(prefix="/runtime/trials/{trial_id}/storage")

# Bodies are read from the store, and written to disk, in blocks of this size.
_BLOCK = 1 << 20
_FILE_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the file's bytes",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}
_FILE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the file's bytes, with its Content-Length",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


# --- checkpoints ---------------------------------------------------------------------------------


@router.get("/checkpoints/{uuid}", response_model=StoredFiles)
def checkpoint_files(trial_id: TrialAuth, uuid: str) -> dict:
    """A checkpoint's files the trial may read: a registered one's registered files (its owner's,
    or the one its experiment warm-starts from), or those it wrote of its own so far."""
    with get_database().read() as conn:
        readable = trial_storage.checkpoint_to_read(conn, trial_id, uuid)
    return {"files": readable.files()}


@router.get("/checkpoints/{uuid}/files/{path:path}", response_class=StreamingResponse, responses=_FILE_ANSWER)
def checkpoint_file(trial_id: TrialAuth, uuid: str, path: str) -> StreamingResponse:
    """One file of a checkpoint the trial may read. A registered file is sent with its registered
    size, and cut short if the store's object differs from it."""
    with get_database().read() as conn:
        store, relative, size = trial_storage.checkpoint_to_read(conn, trial_id, uuid).file(path)
    try:
        body = store.open_file(uuid, relative)
    except CheckpointFilesMissing as exc:
        raise NotFound(str(exc)) from None
    if size is None:
        return StreamingResponse(_chunks(body), media_type="application/octet-stream")
    return StreamingResponse(
        _exactly(body, size, f"checkpoint {uuid}: {relative}"),
        media_type="application/octet-stream",
        headers={"Content-Length": str(size)},
    )


@router.put("/checkpoints/{uuid}/files/{path:path}", response_model=Empty, openapi_extra=_FILE_BODY)
async def put_checkpoint_file(trial_id: TrialAuth, uuid: str, path: str, request: Request) -> dict:
    """Store one file of the trial's own checkpoint ``uuid``: a uuid no other trial wrote, not
    registered yet. The first file claims the uuid for the trial."""
    size = _announced_size(request)
    store, relative = await anyio.to_thread.run_sync(trial_storage.checkpoint_to_write, trial_id, uuid, path)
    async with _received(request, size) as received:
        await anyio.to_thread.run_sync(store.put_file, uuid, relative, received)
    return {}


@router.delete("/checkpoints/{uuid}", response_model=Empty)
def delete_checkpoint_files(trial_id: TrialAuth, uuid: str) -> dict:
    """Delete the files of the trial's own checkpoint: one it claimed (a failed upload), or one it
    registered (``checkpoint.delete``; the record goes next, through ``DELETE /runtime/checkpoints``)."""
    with get_database().read() as conn:
        store = trial_storage.checkpoint_to_delete(conn, trial_id, uuid)
    if store is not None:
        store.delete(uuid)
    return {}


# --- TensorBoard files ---------------------------------------------------------------------------


@router.put("/tensorboard/files/{path:path}", response_model=Empty, openapi_extra=_FILE_BODY)
async def put_tensorboard_file(trial_id: TrialAuth, path: str, request: Request) -> dict:
    """Store one of the trial's own TensorBoard files (a new version replaces the old)."""
    size = _announced_size(request)
    place, relative = await anyio.to_thread.run_sync(_tensorboard_to_write, trial_id, path)
    async with _received(request, size) as received:
        await anyio.to_thread.run_sync(place.put, received, relative)
    return {}


@router.get("/tensorboard/{source_trial_id}", response_model=TensorBoardFiles)
def tensorboard_files(trial_id: TrialAuth, source_trial_id: int) -> dict:
    """A trial's TensorBoard files, for itself or a TensorBoard that shows it."""
    with get_database().read() as conn:
        place = trial_storage.tensorboard_to_read(conn, trial_id, source_trial_id)
    listed = place.listing()
    return {"files": {name: {"size": size, "signature": sig} for name, (size, sig) in listed.items()}}


@router.get(
    "/tensorboard/{source_trial_id}/files/{path:path}",
    response_class=StreamingResponse,
    responses=_FILE_ANSWER,
)
def tensorboard_file(trial_id: TrialAuth, source_trial_id: int, path: str) -> StreamingResponse:
    """One of a trial's TensorBoard files, for itself or a TensorBoard that shows it."""
    with get_database().read() as conn:
        place = trial_storage.tensorboard_to_read(conn, trial_id, source_trial_id)
    relative = checked_relative(path).as_posix()
    opened = contextlib.ExitStack()
    stream = opened.enter_context(place.open(relative))
    if stream is None:
        opened.close()
        raise NotFound(f"trial {source_trial_id}'s TensorBoard files: {trial_storage.MISSING} {relative!r}")
    return StreamingResponse(_chunks(stream, opened), media_type="application/octet-stream")


def _tensorboard_to_write(trial_id: int, path: str) -> tuple[Any, str]:
    with get_database().read() as conn:
        return trial_storage.tensorboard_to_write(conn, trial_id, path)  # type: ignore[no-any-return]


# --- bodies --------------------------------------------------------------------------------------


def _announced_size(request: Request) -> int:
    """The body's size, as its Content-Length says: required, within the limit, and with room on
    this machine's disk to receive it."""
    announced = request.headers.get("content-length")
    if announced is None:
        raise HTTPException(411, "request body: send the file with its Content-Length")
    try:
        size = int(announced)
    except ValueError:
        raise HTTPException(400, f"request body: Content-Length {announced!r} is not a number") from None
    if size < 0 or size > storage_limits.FILE_LIMIT:
        raise HTTPException(
            413,
            f"request body: {format_size(size)} is over the limit of {format_size(storage_limits.FILE_LIMIT)} "
            "for one file stored through the master",
        )
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < size + storage_limits.SPOOL_RESERVE:
        raise HTTPException(
            507,
            f"the master has {format_size(free)} of disk free to receive files; a file of "
            f"{format_size(size)} needs {format_size(size + storage_limits.SPOOL_RESERVE)}: try again later",
        )
    return size


@contextlib.asynccontextmanager
async def _received(request: Request, size: int) -> AsyncIterator[Path]:
    """The request's body in a temporary file (removed after the block), exactly ``size`` bytes."""
    with tempfile.TemporaryDirectory(prefix="det-storage-") as folder:
        target = Path(folder) / "body"
        received = 0
        with target.open("wb") as out:
            pending = bytearray()
            async for chunk in request.stream():
                received += len(chunk)
                if received > size:
                    raise HTTPException(
                        400, f"request body: more than the {size} bytes its Content-Length announced"
                    )
                pending += chunk
                if len(pending) >= _BLOCK:
                    await anyio.to_thread.run_sync(out.write, bytes(pending))
                    pending.clear()
            await anyio.to_thread.run_sync(out.write, bytes(pending))
        if received != size:
            raise HTTPException(
                400, f"request body: {received} of the {size} bytes its Content-Length announced"
            )
        yield target


def _chunks(body: IO[bytes], opened: contextlib.ExitStack | None = None) -> Iterator[bytes]:
    try:
        while chunk := body.read(_BLOCK):
            yield chunk
    finally:
        body.close()
        if opened is not None:
            opened.close()


def _exactly(body: IO[bytes], size: int, what: str) -> Iterator[bytes]:
    """The body's bytes if there are ``size`` of them. Each block is held back until the next is
    read, so that an object of another size ends the answer short of its Content-Length: the
    reader sees a broken answer, never a complete one of other bytes."""
    try:
        held = b""
        sent = 0
        while chunk := body.read(_BLOCK):
            sent += len(chunk)
            if sent > size:
                raise _SizeChanged(f"{what}: the store holds more than the {size} bytes registered")
            if held:
                yield held
            held = chunk
        if sent != size:
            raise _SizeChanged(f"{what}: the store holds {sent} bytes, not the {size} registered")
        if held:
            yield held
    finally:
        body.close()


class _SizeChanged(Exception):
    """A registered file's object is not its registered size: the answer is broken off."""
