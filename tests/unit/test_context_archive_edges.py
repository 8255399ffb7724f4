"""Context packing and extraction at their edges: each limit exactly at and one past it, the exact
messages users read, .detignore details, links beside other files, and what extraction keeps of a
member's mode."""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from det_airflow.context_archive import (
    LIMITS,
    ArchiveSummary,
    ContextLimits,
    check_archive,
    extract_context,
    format_size,
    pack_context,
)
from det_airflow.errors import ContextError


def _files(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return sorted(m.name for m in tar.getmembers() if not m.isdir())


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, content in members:
            if content is not None:
                info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue()


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", mode: int = 0o644
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    return info


# --- packing -------------------------------------------------------------------------------------


def test_content_exactly_at_the_limit_is_packed_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"x" * 600)
    (tmp_path / "b.bin").write_bytes(b"y" * 400)
    assert pack_context(tmp_path, limit_bytes=1000).size == 1000
    with pytest.raises(ContextError) as err:
        pack_context(tmp_path, limit_bytes=999)
    assert str(err.value).startswith(
        f"context directory {tmp_path} is {format_size(1000)}, over the limit of {format_size(999)}; "
        f"largest files: a.bin ({format_size(600)}), b.bin ({format_size(400)})."
    )


def test_an_archive_exactly_at_the_compressed_limit_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n" * 50)
    size = len(pack_context(tmp_path).data)
    assert len(pack_context(tmp_path, limits=dataclasses.replace(LIMITS, archive_bytes=size)).data) == size
    with pytest.raises(ContextError) as err:
        pack_context(tmp_path, limits=dataclasses.replace(LIMITS, archive_bytes=size - 1))
    assert str(err.value).startswith(
        f"context directory {tmp_path} packs to {format_size(size)}, over the limit of {format_size(size - 1)};"
    )


def test_two_includes_with_the_same_name_are_refused(tmp_path: Path) -> None:
    context, one, two = (tmp_path / n for n in ("context", "one", "two"))
    for folder in (context, one / "shared", two / "shared"):
        folder.mkdir(parents=True)
    (context / "train.py").write_text("")
    with pytest.raises(ContextError) as err:
        pack_context(context, includes=[one / "shared", two / "shared"])
    assert str(err.value) == f"cannot include {two / 'shared'}: the context already has a top-level 'shared'"


def test_a_link_inside_the_folder_does_not_hide_the_files_after_it(tmp_path: Path) -> None:
    (tmp_path / "z_data.txt").write_text("data")
    (tmp_path / "a_alias.txt").symlink_to("z_data.txt")
    assert _files(pack_context(tmp_path).data) == ["a_alias.txt", "z_data.txt"]


def test_a_loop_in_a_linked_outside_folder_is_packed_once(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("f")
    (outside / "again").symlink_to(outside)
    context = tmp_path / "context"
    context.mkdir()
    (context / "ext").symlink_to(outside)
    assert _files(pack_context(context).data) == ["ext/f.txt"]


def test_a_directory_pattern_does_not_leave_out_a_file_of_that_name(tmp_path: Path) -> None:
    (tmp_path / ".detignore").write_text("build/\n")
    (tmp_path / "build").write_text("a file, not a folder")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "build").mkdir()
    (tmp_path / "out" / "build" / "x.o").write_text("")
    assert _files(pack_context(tmp_path).data) == [".detignore", "build"]


def test_a_detignore_that_is_not_utf8_still_applies(tmp_path: Path) -> None:
    (tmp_path / ".detignore").write_bytes(b"# caf\xe9\n*.log\n")
    (tmp_path / "run.log").write_text("")
    (tmp_path / "train.py").write_text("")
    assert _files(pack_context(tmp_path).data) == [".detignore", "train.py"]


def test_an_invalid_detignore_pattern_names_the_file(tmp_path: Path) -> None:
    (tmp_path / ".detignore").write_text("!\n")
    with pytest.raises(ContextError) as err:
        pack_context(tmp_path)
    assert str(err.value) == f"{tmp_path / '.detignore'}: Invalid git pattern: '!'"


def test_the_gzip_header_carries_no_timestamp(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    data = pack_context(tmp_path).data
    assert int.from_bytes(data[4:8], "little") == 0  # RFC 1952 MTIME: the same files, the same bytes
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
        gz.read()
        assert gz.mtime == 0


def test_file_modes_round_trip_exactly(tmp_path: Path) -> None:
    context, dest = tmp_path / "context", tmp_path / "dest"
    context.mkdir()
    (context / "data.txt").write_text("d")
    (context / "data.txt").chmod(0o640)
    (context / "run.sh").write_text("#!/bin/sh\n")
    (context / "run.sh").chmod(0o750)
    extract_context(pack_context(context).data, dest)
    assert stat.S_IMODE(os.stat(dest / "data.txt").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(dest / "run.sh").st_mode) == 0o750


# --- extraction ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (_member("/etc/evil"), "it has an absolute path"),
        (_member("a/../../evil"), "its path contains '..'"),
        (_member("null", tarfile.CHRTYPE), "it is a device or other special file"),
        (
            _member("link", tarfile.SYMTYPE, "/etc/passwd"),
            "it is a symlink to '/etc/passwd', outside the destination",
        ),
        (_member("hard", tarfile.LNKTYPE, "../x"), "it is a hard link to '../x', outside the destination"),
    ],
    ids=["absolute", "dotdot", "device", "symlink", "hardlink"],
)
def test_refusals_read_exactly(tmp_path: Path, member: tarfile.TarInfo, reason: str) -> None:
    with pytest.raises(ContextError) as err:
        extract_context(_tar((member, b"x" if member.isfile() else None)), tmp_path / "dest")
    assert str(err.value) == f"refusing to extract {member.name!r} from the context archive: {reason}"


def test_writing_through_a_link_left_in_the_destination_reads_exactly(tmp_path: Path) -> None:
    outside, dest = tmp_path / "outside", tmp_path / "dest"
    outside.mkdir()
    dest.mkdir()
    (dest / "escape").symlink_to(outside)
    with pytest.raises(ContextError) as err:
        extract_context(_tar((_member("escape/evil"), b"x")), dest)
    assert str(err.value) == (
        "refusing to extract 'escape/evil' from the context archive: "
        "it would be written outside the destination through a link"
    )
    assert list(outside.iterdir()) == []


def test_a_hard_link_through_a_link_left_in_the_destination_is_refused(tmp_path: Path) -> None:
    outside, dest = tmp_path / "outside", tmp_path / "dest"
    outside.mkdir()
    (outside / "secret").write_text("s")
    dest.mkdir()
    (dest / "escape").symlink_to(outside)
    with pytest.raises(ContextError) as err:
        extract_context(_tar((_member("copy", tarfile.LNKTYPE, "escape/secret"), None)), dest)
    assert str(err.value) == (
        "refusing to extract 'copy' from the context archive: "
        "it is a hard link to 'escape/secret', outside the destination"
    )
    assert not (dest / "copy").exists()


def test_a_hard_link_with_dotdot_is_refused_even_when_it_lands_inside(tmp_path: Path) -> None:
    data = _tar(
        (_member("sub/real.txt"), b"ok"), (_member("copy", tarfile.LNKTYPE, "sub/../sub/real.txt"), None)
    )
    with pytest.raises(ContextError) as err:
        extract_context(data, tmp_path / "dest")
    assert str(err.value) == (
        "refusing to extract 'copy' from the context archive: "
        "it is a hard link to 'sub/../sub/real.txt', outside the destination"
    )


def test_extraction_drops_setuid_and_group_or_other_write(tmp_path: Path) -> None:
    data = _tar((_member("tool", mode=0o4777), b"#!/bin/sh\n"), (_member("notes.txt", mode=0o666), b"n"))
    extract_context(data, tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "tool").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(tmp_path / "notes.txt").st_mode) == 0o644


# --- the master's upload check -------------------------------------------------------------------


def _pax_member(name: str, header_bytes: int) -> tarfile.TarInfo:
    """A file whose PAX header is exactly ``header_bytes`` long (one ``comment`` record)."""
    info = _member(name)
    digits = len(str(header_bytes))
    info.pax_headers = {"comment": "c" * (header_bytes - digits - len(" comment=\n"))}
    return info


def _pax_tar(*members: tarfile.TarInfo) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info in members:
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return buffer.getvalue()


def test_an_empty_context_is_an_empty_summary(tmp_path: Path) -> None:
    assert check_archive(pack_context(tmp_path).data) == ArchiveSummary(content_bytes=0, entries=0)


def test_a_metadata_header_exactly_at_its_limit_is_read_and_one_byte_more_is_refused() -> None:
    assert check_archive(_pax_tar(_pax_member("a.txt", 64 * 1024))) == ArchiveSummary(1, 1)
    with pytest.raises(ContextError) as err:
        check_archive(_pax_tar(_pax_member("a.txt", 64 * 1024 + 1)))
    assert str(err.value) == (
        f"context: a metadata header of {format_size(64 * 1024 + 1)} is over the limit of {format_size(64 * 1024)}"
    )


def test_many_entries_within_every_limit_fit_the_expansion_budget() -> None:
    limits = ContextLimits(archive_bytes=LIMITS.archive_bytes, content_bytes=100, entries=100)
    data = _tar(*[(_member(f"f{i:03}.txt"), b"x") for i in range(100)])
    assert check_archive(data, limits) == ArchiveSummary(100, 100)


def test_headers_that_expand_past_the_budget_are_refused() -> None:
    # Two members with 60 KB headers each: within the entry and file limits, over the expansion
    # budget of 1 KiB + 10 entries * 3 blocks + 64 KiB.
    limits = ContextLimits(archive_bytes=LIMITS.archive_bytes, content_bytes=1024, entries=10)
    budget = 1024 + 10 * 3 * 512 + 64 * 1024
    with pytest.raises(ContextError) as err:
        check_archive(_pax_tar(_pax_member("a.txt", 60_000), _pax_member("b.txt", 60_000)), limits)
    assert (
        str(err.value) == f"context: the archive expands to more than {format_size(budget)}, over the limit"
    )


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (_member("\\evil.txt"), "it has an absolute path"),
        (_member("C:evil.txt"), "it has an absolute path"),
        (_member("c:evil.txt"), "it has an absolute path"),
        (_member("link", tarfile.SYMTYPE, ".."), "it is a symlink to '..', outside the context"),
        (
            _member("hard", tarfile.LNKTYPE, "a/../b.txt"),
            "it is a hard link to 'a/../b.txt', outside the context",
        ),
    ],
    ids=["backslash", "drive", "lower-drive", "symlink-parent", "hardlink-dotdot"],
)
def test_the_upload_check_refuses_exactly(member: tarfile.TarInfo, problem: str) -> None:
    with pytest.raises(ContextError) as err:
        check_archive(_tar((member, b"x" if member.isfile() else None)))
    assert str(err.value) == f"context: {member.name!r}: {problem}"


def test_the_upload_check_accepts_links_that_stay_inside() -> None:
    data = _tar(
        (_member("top.txt"), b"t"),
        (_member("sub", tarfile.DIRTYPE, mode=0o755), None),
        (_member("sub/up", tarfile.SYMTYPE, "../top.txt"), None),
        (_member("copy", tarfile.LNKTYPE, "top.txt"), None),
        (_member("plain.txt", linkname="/etc/passwd"), b"p"),  # a stray link field on a file
    )
    assert check_archive(data) == ArchiveSummary(2, 5)
