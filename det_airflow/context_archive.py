"""The context directory: packed into a tar.gz for the master, unpacked safely where a trial runs.

Packing honours ``.detignore`` files (gitignore syntax; one in a subfolder applies relative to that
folder), always leaves out ``*.pyc`` and ``__pycache__``, and refuses a context over the limits.
The master checks an uploaded archive against the same limits (``check_archive``) before storing
it, and extraction refuses members that would land outside the destination.

Example:
    >>> packed = pack_context("mnist/")
    >>> print(f"Preparing files ({packed.directory}) to send to master... "
    ...       f"{format_size(packed.size)} and {packed.file_count} files")
    >>> extract_context(packed.data, "/run/context")
"""

from __future__ import annotations

import gzip
import io
import os
import posixpath
import re
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

import pathspec

from det_airflow.errors import ContextError

DETIGNORE = ".detignore"


@dataclass(frozen=True)
class ContextLimits:
    """What a context may hold; the CLI's packer and the master's upload check share these.

    Attributes:
        archive_bytes: The tar.gz as sent (Determined's 95 MiB).
        content_bytes: Bytes of files before compression (Determined's 95 MiB): every trial unpacks
            them, so a small archive that expands to gigabytes is refused too.
        entries: Files, folders and links. Each costs a tar header to read and an inode to write;
            real training code has hundreds, a vendored virtualenv tens of thousands.
    """

    archive_bytes: int = 95 * 1024**2
    content_bytes: int = 95 * 1024**2
    entries: int = 50_000


LIMITS = ContextLimits()
DEFAULT_LIMIT_BYTES = LIMITS.content_bytes
# Metadata blocks (PAX headers, GNU long names) are read into memory whole: cap each one.
_MAX_HEADER_BYTES = 64 * 1024
_ALWAYS_IGNORED = pathspec.GitIgnoreSpec.from_lines(["*.pyc", "__pycache__/"])
_LARGEST_SHOWN = 5


@dataclass(frozen=True)
class PackedContext:
    """A packed context directory.

    Attributes:
        data: The tar.gz archive.
        size: Total bytes of the files packed, before compression.
        file_count: Number of files (and links) packed.
        directory: The context directory, as given.
    """

    data: bytes
    size: int
    file_count: int
    directory: Path


@dataclass(frozen=True)
class _Entry:
    arcname: str
    kind: Literal["file", "dir", "symlink"]
    source: str = ""  # the file to read (a link's target when the link leaves the folder)
    size: int = 0
    linkname: str = ""  # symlinks: relative target inside the archive


def format_size(n: float) -> str:
    """Formats a byte count the way Determined's CLI does: ``8.6KB``, ``95.0MB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TB"


def pack_context(
    directory: str | os.PathLike[str],
    *,
    includes: Iterable[str | os.PathLike[str]] = (),
    limit_bytes: int = DEFAULT_LIMIT_BYTES,
    limits: ContextLimits = LIMITS,
) -> PackedContext:
    """Packs a context directory into a tar.gz.

    Symlinks that point inside the folder are stored as links; for the others, the content they
    point to is packed. Entries are in sorted order.

    Args:
        directory: The context directory.
        includes: Extra files or folders, packed at the top level under their own names.
        limit_bytes: The most bytes of files (before compression) the context may hold.
        limits: The entry count and archive size the master accepts.

    Raises:
        ContextError: A path is missing or not a folder, two top-level names collide, a file
            cannot be read, or the context is over a limit (the largest files are named).
    """
    root = Path(directory)
    if not root.exists():
        raise ContextError(f"context directory {root} does not exist")
    if not root.is_dir():
        raise ContextError(f"context directory {root} is not a directory")
    try:
        entries = list(_scan(root, ""))
        top_level = {e.arcname.split("/", 1)[0] for e in entries}
        for include in map(Path, includes):
            name = include.resolve().name
            if not include.exists():
                raise ContextError(f"include path {include} does not exist")
            if name in top_level:
                raise ContextError(f"cannot include {include}: the context already has a top-level {name!r}")
            top_level.add(name)
            entries += _scan(include, name) if include.is_dir() else [_file_entry(name, str(include))]
        entries.sort(key=lambda e: e.arcname)
        _check_size(root, entries, limit_bytes)
        if len(entries) > limits.entries:
            raise ContextError(
                f"context directory {root} has {len(entries)} files and folders, over the limit of "
                f"{limits.entries}. {_DETIGNORE_HINT}"
            )
        data, size = _build_archive(entries)
    except OSError as exc:
        raise ContextError(f"cannot pack context directory {root}: {exc}") from exc
    if len(data) > limits.archive_bytes:
        raise ContextError(
            f"context directory {root} packs to {format_size(len(data))}, over the limit of "
            f"{format_size(limits.archive_bytes)}; largest files: {_largest(entries)}. {_DETIGNORE_HINT}"
        )
    file_count = sum(e.kind != "dir" for e in entries)
    return PackedContext(data=data, size=size, file_count=file_count, directory=root)


def _scan(root: Path, prefix: str) -> Iterator[_Entry]:
    """Yields the entries under ``root``, archived under ``prefix`` ("" for the top level)."""
    root_real = os.path.realpath(root)
    if prefix:
        yield _Entry(prefix, "dir", source=str(root))
    yield from _scan_dir(str(root), "", prefix, [], root_real, frozenset({root_real}))


def _scan_dir(
    directory: str,
    rel: str,
    prefix: str,
    specs: list[tuple[str, pathspec.GitIgnoreSpec]],
    root_real: str,
    ancestors: frozenset[str],
) -> Iterator[_Entry]:
    ignore_file = os.path.join(directory, DETIGNORE)
    if os.path.isfile(ignore_file):
        specs = [*specs, (rel, _read_detignore(ignore_file))]
    for child in sorted(os.scandir(directory), key=lambda c: c.name):
        child_rel = posixpath.join(rel, child.name)
        arcname = posixpath.join(prefix, child_rel)
        is_dir = child.is_dir()  # follows links
        if _ignored(child_rel, is_dir, specs):
            continue
        if child.is_symlink():
            target = os.path.realpath(child.path)
            if _inside(target, root_real):
                target_rel = os.path.relpath(target, root_real).replace(os.sep, "/")
                linkname = posixpath.relpath(target_rel, posixpath.dirname(child_rel) or ".")
                yield _Entry(arcname, "symlink", linkname=linkname)
                continue
        if is_dir:
            real = os.path.realpath(child.path)
            if real in ancestors:  # a link back up the tree would never end
                continue
            yield _Entry(arcname, "dir", source=child.path)
            yield from _scan_dir(child.path, child_rel, prefix, specs, root_real, ancestors | {real})
        elif child.is_file():
            yield _file_entry(arcname, child.path)
        # Anything else (a dangling link, a socket, a device) is left out.


def _file_entry(arcname: str, path: str) -> _Entry:
    return _Entry(arcname, "file", source=path, size=os.stat(path).st_size)


def _read_detignore(path: str) -> pathspec.GitIgnoreSpec:
    with open(path, encoding="utf-8", errors="replace") as f:
        try:
            return pathspec.GitIgnoreSpec.from_lines(f.read().splitlines())
        except ValueError as exc:  # pathspec's pattern errors subclass ValueError
            raise ContextError(f"{path}: {exc}") from exc


def _ignored(rel: str, is_dir: bool, specs: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    """Whether ``rel`` is left out: the last .detignore pattern that matches it decides, deepest last."""
    path = rel + "/" if is_dir else rel
    if _ALWAYS_IGNORED.match_file(path):
        return True
    ignored = False
    for base, spec in specs:
        result = spec.check_file(path[len(base) + 1 :] if base else path).include
        if result is not None:
            ignored = result
    return ignored


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


_DETIGNORE_HINT = (
    f"List files that training does not need in {DETIGNORE} (gitignore syntax) to leave them out"
)


def _largest(entries: Iterable[_Entry]) -> str:
    largest = sorted(entries, key=lambda e: (-e.size, e.arcname))[:_LARGEST_SHOWN]
    return ", ".join(f"{e.arcname} ({format_size(e.size)})" for e in largest)


def _check_size(root: Path, entries: list[_Entry], limit_bytes: int) -> None:
    size = sum(e.size for e in entries)
    if size <= limit_bytes:
        return
    raise ContextError(
        f"context directory {root} is {format_size(size)}, over the limit of {format_size(limit_bytes)}; "
        f"largest files: {_largest(entries)}. {_DETIGNORE_HINT}"
    )


def _build_archive(entries: list[_Entry]) -> tuple[bytes, int]:
    """The tar.gz of ``entries`` and the bytes of files in it. The gzip header has no timestamp,
    so the same files give the same bytes."""
    buffer = io.BytesIO()
    size = 0
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in entries:
            info = tarfile.TarInfo(entry.arcname)
            if entry.kind == "symlink":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.linkname, 0o777
                tar.addfile(info)
                continue
            stat = os.stat(entry.source)
            info.mode, info.mtime = stat.st_mode & 0o777, int(stat.st_mtime)
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            with open(entry.source, "rb") as f:
                info.size = os.fstat(f.fileno()).st_size
                tar.addfile(info, f)
            size += info.size
    return buffer.getvalue(), size


NOT_A_TAR_GZ = "context: not a tar.gz archive"
_METADATA_TYPES = frozenset(
    {
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    }
)


@dataclass(frozen=True)
class ArchiveSummary:
    """What ``check_archive`` found: bytes of files before compression, and entries."""

    content_bytes: int
    entries: int


def check_archive(data: bytes, limits: ContextLimits = LIMITS) -> ArchiveSummary:
    """Checks an uploaded context archive without unpacking it to disk.

    The archive is read as a stream and refused as soon as a limit is passed, so an archive that
    would expand to gigabytes costs about as much to refuse as its first header.

    Raises:
        ContextError: Not a tar.gz; over a limit of ``limits`` (with the largest files named); or a
            member that is not a file, folder or link, has an absolute path or ``..``, or is a link
            leaving the archive. Messages start with ``context:``.
    """
    if len(data) > limits.archive_bytes:
        raise ContextError(
            f"context: the archive is {format_size(len(data))}, over the limit of "
            f"{format_size(limits.archive_bytes)}"
        )
    # Headers and padding add at most a few blocks per entry on top of the files themselves.
    budget = limits.content_bytes + limits.entries * 3 * tarfile.BLOCKSIZE + _MAX_HEADER_BYTES
    files: list[_Entry] = []
    links: dict[str, str] = {}
    content = 0
    count = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as gz:
            if _empty_archive(gz):
                return ArchiveSummary(0, 0)
            stream = _CappedReader(gz, budget)
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo) as tar:
                for member in tar:
                    count += 1
                    if count > limits.entries:
                        raise ContextError(
                            f"context: the archive has more than {limits.entries} files and folders, "
                            "over the limit"
                        )
                    _check_upload_member(member)
                    _check_upload_links(member, links)
                    if member.isfile():
                        files.append(_Entry(member.name, "file", size=member.size))
                        content += member.size
                        if content > limits.content_bytes:
                            raise ContextError(
                                f"context: the files expand to at least {format_size(content)}, over the "
                                f"limit of {format_size(limits.content_bytes)}; largest files: "
                                f"{_largest(files)}"
                            )
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ContextError(NOT_A_TAR_GZ) from exc
    return ArchiveSummary(content, count)


def _empty_archive(gz: gzip.GzipFile) -> bool:
    """A tar of an empty folder is only its end marker (zero blocks), which tarfile calls invalid."""
    first = gz.read(tarfile.BLOCKSIZE)
    gz.seek(0)
    return len(first) == tarfile.BLOCKSIZE and not any(first)


class _CappedReader(io.RawIOBase):
    """Reads the decompressed stream, refusing it once it passes ``cap`` bytes."""

    def __init__(self, source: gzip.GzipFile, cap: int) -> None:
        super().__init__()
        self._source = source
        self._cap = cap
        self._read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self._cap - self._read + 1
        chunk = self._source.read(size)
        self._read += len(chunk)
        if self._read > self._cap:
            raise ContextError(
                f"context: the archive expands to more than {format_size(self._cap)}, over the limit"
            )
        return chunk


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses an oversized metadata block before tarfile reads all of it into memory."""

    def _proc_member(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        if self.type in _METADATA_TYPES and self.size > _MAX_HEADER_BYTES:
            raise ContextError(
                f"context: a metadata header of {format_size(self.size)} is over the limit of "
                f"{format_size(_MAX_HEADER_BYTES)}"
            )
        return super()._proc_member(tarfile)  # type: ignore[misc]


def _check_upload_member(member: tarfile.TarInfo) -> None:
    name = member.name
    problem = None
    if _is_absolute(name):
        problem = "it has an absolute path"
    elif ".." in PurePosixPath(name).parts:
        problem = "its path contains '..'"
    elif not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        problem = "only files, folders and links are allowed"
    elif member.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
        if _is_absolute(member.linkname) or target == ".." or target.startswith("../"):
            problem = f"it is a symlink to {member.linkname!r}, outside the context"
    elif member.islnk() and (_is_absolute(member.linkname) or ".." in PurePosixPath(member.linkname).parts):
        problem = f"it is a hard link to {member.linkname!r}, outside the context"
    if problem is not None:
        raise ContextError(f"context: {name!r}: {problem}")


# More links than this on one path is a loop (Linux gives up at 40 as well).
_MAX_LINK_HOPS = 40


def _check_upload_links(member: tarfile.TarInfo, links: dict[str, str]) -> None:
    """Refuses what extraction would refuse once the archive's earlier links exist on disk: a
    member written through a link, or a link (or a chain of them) whose target leaves the context.

    ``links`` holds the symlinks seen so far (normalized name → target); ``member`` is added to it.
    """
    name = posixpath.normpath(member.name)
    problem = None
    if _resolve_in_archive(posixpath.dirname(name), links) is None:
        problem = "it would be written outside the context through a link"
    elif (
        member.issym()
        and _resolve_in_archive(posixpath.join(posixpath.dirname(name), member.linkname), links) is None
    ):
        problem = f"it is a symlink to {member.linkname!r}, which leads outside the context through a link"
    elif member.islnk() and _resolve_in_archive(member.linkname, links) is None:
        problem = f"it is a hard link to {member.linkname!r}, which leads outside the context through a link"
    if problem is not None:
        raise ContextError(f"context: {member.name!r}: {problem}")
    if member.issym():
        links[name] = member.linkname


def _resolve_in_archive(path: str, links: dict[str, str]) -> str | None:
    """Where ``path`` (relative to the context) leads once ``links`` exist, component by component
    as the kernel resolves it; None when it leaves the context or loops."""
    pending = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        resolved.append(part)
        target = links.get("/".join(resolved))
        if target is None:
            continue
        hops += 1
        if hops > _MAX_LINK_HOPS or _is_absolute(target):
            return None
        resolved.pop()
        pending = [p for p in target.split("/") if p not in ("", ".")] + pending
    return "/".join(resolved)


def extract_context(data: bytes, dest: str | os.PathLike[str]) -> None:
    """Unpacks a context archive into ``dest``, creating it.

    Raises:
        ContextError: The archive is not a tar.gz, or a member would leave ``dest``: an absolute
            path, a ``..`` component, a link whose target leaves ``dest``, or a device or other
            special file. The message names the member.
    """
    Path(dest).mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(dest)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar:
                _check_member(member, root)
                # The data filter is a second line of defence; our own check gives the message.
                tar.extract(member, root, filter="data")
    except tarfile.FilterError as exc:
        raise _refuse(exc.tarinfo, str(exc)) from exc
    except (tarfile.TarError, EOFError, gzip.BadGzipFile) as exc:
        raise ContextError(f"the context archive is not a valid tar.gz: {exc}") from exc


def _check_member(member: tarfile.TarInfo, root: str) -> None:
    name = member.name
    if _is_absolute(name):
        raise _refuse(member, "it has an absolute path")
    if ".." in PurePosixPath(name).parts:
        raise _refuse(member, "its path contains '..'")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise _refuse(member, "it is a device or other special file")
    path = os.path.join(root, name)
    if not _inside(os.path.realpath(path), root):
        raise _refuse(member, "it would be written outside the destination through a link")
    if member.issym():
        target = os.path.realpath(os.path.join(os.path.dirname(path), member.linkname))
        if _is_absolute(member.linkname) or not _inside(target, root):
            raise _refuse(member, f"it is a symlink to {member.linkname!r}, outside the destination")
    if member.islnk():
        target = os.path.realpath(os.path.join(root, member.linkname))
        if (
            _is_absolute(member.linkname)
            or ".." in PurePosixPath(member.linkname).parts
            or not _inside(target, root)
        ):
            raise _refuse(member, f"it is a hard link to {member.linkname!r}, outside the destination")


def _is_absolute(name: str) -> bool:
    return name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) is not None


def _refuse(member: tarfile.TarInfo, reason: str) -> ContextError:
    return ContextError(f"refusing to extract {member.name!r} from the context archive: {reason}")
