"""The web UI's pages: the built single-page app under /det/ui/, for logged-in users only."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

from det_airflow.airflow_compat import requires_authenticated

# `make ui` (npm run build in ui/) writes the bundle here; it is build output, not sources.
STATIC_DIR = Path(__file__).parent / "static"
NOT_BUILT = "the det web UI was not built: run `make ui`"
# Vite names every asset after its content, so a browser may keep it; index.html names the current ones.
_HASHED = "assets"
# Linux's NAME_MAX and PATH_MAX: a longer name or path is no file of the bundle.
_MAX_NAME_BYTES = 255
_MAX_PATH_BYTES = 4096


def router(static_dir: Path | None = None) -> APIRouter:
    """Routes serving ``static_dir`` (default: the package's built bundle) at /ui/."""
    pages = APIRouter(dependencies=[Depends(requires_authenticated())], include_in_schema=False)

    def folder() -> Path:
        found = (static_dir or STATIC_DIR).resolve()
        if not (found / "index.html").is_file():
            raise HTTPException(503, NOT_BUILT)
        return found

    @pages.get("/ui")
    def ui_without_slash() -> RedirectResponse:
        # The bundle's asset URLs are relative to /det/ui/.
        return RedirectResponse("ui/")

    @pages.get("/ui/")
    def index() -> FileResponse:
        return FileResponse(folder() / "index.html", headers={"Cache-Control": "no-cache"})

    @pages.get("/ui/{path:path}")
    def asset(path: str) -> FileResponse:
        base = folder()
        missing = HTTPException(404, f"the det web UI has no file {path!r}")
        if not _plain_path(path):
            raise missing
        target = (base / path).resolve()
        if not target.is_relative_to(base) or not target.is_file():
            raise missing
        if target == base / "index.html":
            return FileResponse(target, headers={"Cache-Control": "no-cache"})
        hashed = target.is_relative_to(base / _HASHED)
        cache = "private, max-age=31536000, immutable" if hashed else "no-cache"
        return FileResponse(target, headers={"Cache-Control": cache})

    return pages


def _plain_path(path: str) -> bool:
    """Whether ``path`` names a file the way the bundle's own URLs do: no NUL or other control
    characters (the OS refuses a NUL in a path), no backslash, no empty, ``.`` or ``..`` parts, and
    no part longer than a file name may be (the OS refuses those too)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path) or "\\" in path:
        return False
    if len(path.encode()) > _MAX_PATH_BYTES:
        return False
    return all(
        part not in ("", ".", "..") and len(part.encode()) <= _MAX_NAME_BYTES for part in path.split("/")
    )
