"""Packing the context directory (.detignore, limits, links), checking an uploaded archive against
the same limits, and extracting it safely."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from det_airflow.context_archive import (
    LIMITS,
    NOT_A_TAR_GZ,
    ContextLimits,
    check_archive,
    extract_context,
    format_size,
    pack_context,
)
from det_airflow.errors import ContextError


def _write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def _files(data: bytes) -> list[str]:
    return sorted(name for name, m in _members(data).items() if not m.isdir())


# --- packing -------------------------------------------------------------------------------------


def test_packs_every_file_with_its_size_and_count(tmp_path):
    ctx = _write(
        tmp_path / "ctx",
        {"train.py": "print(1)\n", "lib/model.py": "x = 1\n", "startup-hook.sh": "#!/bin/sh\n"},
    )
    (ctx / "startup-hook.sh").chmod(0o755)
    packed = pack_context(ctx)
    assert _files(packed.data) == ["lib/model.py", "startup-hook.sh", "train.py"]
    assert packed.size == 9 + 6 + 10 and packed.file_count == 3 and packed.directory == ctx
    assert _members(packed.data)["startup-hook.sh"].mode & 0o111  # executables stay executable


def test_root_detignore_with_negation_and_directory_patterns(tmp_path):
    ctx = _write(
        tmp_path,
        {
            ".detignore": "*.log\n!keep.log\nbuild/\ndata\n",
            "train.py": "",
            "run.log": "",
            "keep.log": "",
            "build/out.bin": "",
            "src/build/gen.py": "",
            "src/data/x.csv": "",
            "src/database.py": "",
        },
    )
    assert _files(pack_context(ctx).data) == [".detignore", "keep.log", "src/database.py", "train.py"]


def test_nested_detignore_applies_relative_to_its_folder(tmp_path):
    ctx = _write(
        tmp_path,
        {
            ".detignore": "*.log\n",
            "local.txt": "",
            "data.csv": "",
            "root.log": "",
            "sub/.detignore": "/local.txt\n*.csv\n!keep.log\n",
            "sub/local.txt": "",
            "sub/deep/local.txt": "",
            "sub/data.csv": "",
            "sub/keep.log": "",
            "sub/other.log": "",
        },
    )
    assert _files(pack_context(ctx).data) == [
        ".detignore",
        "data.csv",
        "local.txt",
        "sub/.detignore",
        "sub/deep/local.txt",
        "sub/keep.log",
    ]


def test_files_in_an_ignored_directory_cannot_be_re_included(tmp_path):
    # As in git: once a folder is left out, a negation cannot bring back a file inside it.
    ctx = _write(tmp_path, {".detignore": "build/\n!build/keep.txt\n", "build/keep.txt": "", "a.py": ""})
    assert _files(pack_context(ctx).data) == [".detignore", "a.py"]


def test_pyc_and_pycache_are_always_left_out(tmp_path):
    ctx = _write(
        tmp_path,
        {
            ".detignore": "!*.pyc\n!__pycache__/\n",
            "a.py": "",
            "a.pyc": "",
            "pkg/__pycache__/a.cpython-311.pyc": "",
        },
    )
    _write(ctx, {"pkg/__pycache__/notes.txt": ""})
    assert _files(pack_context(ctx).data) == [".detignore", "a.py"]


def test_includes_are_packed_at_the_top_level_under_their_basename(tmp_path):
    ctx = _write(tmp_path / "ctx", {"train.py": ""})
    shared = _write(tmp_path / "libs" / "shared", {"util.py": "", ".detignore": "*.tmp\n", "x.tmp": ""})
    config = _write(tmp_path / "etc", {"settings.yaml": "a: 1\n"}) / "settings.yaml"
    packed = pack_context(ctx, includes=[shared, str(config)])
    assert _files(packed.data) == ["settings.yaml", "shared/.detignore", "shared/util.py", "train.py"]
    assert packed.file_count == 4


def test_an_include_that_collides_or_is_missing_is_refused(tmp_path):
    ctx = _write(tmp_path / "ctx", {"shared/a.py": ""})
    other = _write(tmp_path / "shared", {"b.py": ""})
    with pytest.raises(ContextError, match="already has a top-level 'shared'"):
        pack_context(ctx, includes=[other])
    with pytest.raises(ContextError, match="nope does not exist"):
        pack_context(ctx, includes=[tmp_path / "nope"])


def test_over_the_limit_names_the_five_largest_files(tmp_path):
    sizes = {"a.bin": 600, "b.bin": 500, "c/d.bin": 400, "e.bin": 300, "f.bin": 2048, "small.txt": 10}
    ctx = _write(tmp_path / "ctx", {name: os.urandom(n) for name, n in sizes.items()})
    with pytest.raises(ContextError) as err:
        pack_context(ctx, limit_bytes=1024)
    message = str(err.value)
    assert "is 3.8KB, over the limit of 1.0KB" in message
    assert "f.bin (2.0KB), a.bin (600.0B), b.bin (500.0B), c/d.bin (400.0B), e.bin (300.0B)" in message
    assert "small.txt" not in message and ".detignore" in message


def test_ignored_files_do_not_count_toward_the_limit(tmp_path):
    ctx = _write(tmp_path, {".detignore": "*.bin\n", "big.bin": b"\0" * 4096, "a.py": "x"})
    assert pack_context(ctx, limit_bytes=1024).size == len("*.bin\n") + 1


def test_a_missing_directory_or_a_file_is_refused(tmp_path):
    with pytest.raises(ContextError, match=r"context directory .*missing does not exist"):
        pack_context(tmp_path / "missing")
    (tmp_path / "file.py").write_text("")
    with pytest.raises(ContextError, match=r"file\.py is not a directory"):
        pack_context(tmp_path / "file.py")


def test_symlinks_inside_stay_links_and_outside_ones_are_packed_as_content(tmp_path):
    ctx = _write(tmp_path / "ctx", {"data/real.txt": "inside", "train.py": ""})
    outside = _write(tmp_path / "outside", {"secret.txt": "outside", "dir/f.txt": "f"})
    (ctx / "sub").mkdir()
    (ctx / "sub" / "link.txt").symlink_to("../data/real.txt")
    (ctx / "abs_link.txt").symlink_to(ctx / "data" / "real.txt")  # absolute, but inside
    (ctx / "loop").symlink_to(".")
    (ctx / "out.txt").symlink_to(outside / "secret.txt")
    (ctx / "outdir").symlink_to(outside / "dir")
    (ctx / "dangling").symlink_to(tmp_path / "nowhere")

    members = _members(pack_context(ctx).data)
    assert members["sub/link.txt"].issym() and members["sub/link.txt"].linkname == "../data/real.txt"
    assert members["abs_link.txt"].linkname == "data/real.txt"
    assert members["loop"].issym() and members["loop"].linkname == "."
    assert members["out.txt"].isfile() and members["outdir/f.txt"].isfile()
    assert "dangling" not in members

    dest = tmp_path / "dest"
    extract_context(pack_context(ctx).data, dest)
    assert (dest / "sub" / "link.txt").read_text() == "inside"
    assert (dest / "abs_link.txt").read_text() == "inside"
    assert (dest / "out.txt").read_text() == "outside" and not (dest / "out.txt").is_symlink()


def test_packing_is_deterministic(tmp_path):
    ctx = _write(tmp_path, {"b.py": "b", "a/c.py": "c", "a/b.py": "ab"})
    first = pack_context(ctx)
    assert first.data == pack_context(ctx).data
    assert list(_members(first.data)) == ["a", "a/b.py", "a/c.py", "b.py"]


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0.0B"), (500, "500.0B"), (8806, "8.6KB"), (95 * 1024**2, "95.0MB"), (3 * 1024**3, "3.0GB")],
)
def test_format_size_matches_determined(n, text):
    assert format_size(n) == text


# --- extraction ----------------------------------------------------------------------------------


def test_round_trip_restores_files_folders_and_modes(tmp_path):
    ctx = _write(tmp_path / "ctx", {"train.py": "print('hi')\n", "pkg/mod.py": "x = 1\n", "empty/.keep": ""})
    (ctx / "train.py").chmod(0o755)
    dest = tmp_path / "deep" / "dest"
    extract_context(pack_context(ctx).data, dest)
    assert (dest / "train.py").read_text() == "print('hi')\n"
    assert (dest / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert (dest / "empty").is_dir()
    assert os.stat(dest / "train.py").st_mode & 0o100


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, content in members:
            if content is not None:
                info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue()


def _file(name: str, content: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), content


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def _device(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info, None


@pytest.mark.parametrize(
    ("members", "named", "reason"),
    [
        ([_file("/etc/evil")], "/etc/evil", "absolute path"),
        ([_file("ok.txt"), _file("../evil")], "../evil", "'..'"),
        ([_file("a/../../evil")], "a/../../evil", "'..'"),
        ([_link("link", "../../etc/passwd")], "link", "symlink to '../../etc/passwd'"),
        ([_link("link", "/etc/passwd")], "link", "symlink to '/etc/passwd'"),
        ([_link("sub/up", ".."), _link("x", "sub/up/..")], "x", "symlink to 'sub/up/..'"),
        ([_link("hard", "../outside.txt", tarfile.LNKTYPE)], "hard", "hard link to '../outside.txt'"),
        ([_link("hard", "/etc/passwd", tarfile.LNKTYPE)], "hard", "hard link to '/etc/passwd'"),
        ([_device("null")], "null", "device"),
    ],
    ids=[
        "absolute",
        "dotdot",
        "inner-dotdot",
        "symlink",
        "abs-symlink",
        "symlink-chain",
        "hardlink",
        "abs-hardlink",
        "device",
    ],
)
def test_malicious_archives_are_refused_naming_the_member(tmp_path, members, named, reason):
    dest = tmp_path / "a" / "dest"
    with pytest.raises(ContextError) as err:
        extract_context(_tar(*members), dest)
    assert f"refusing to extract {named!r}" in str(err.value)
    assert reason in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # nothing landed beside dest
    assert not (tmp_path / "a" / "evil").exists()


def test_writing_through_an_extracted_link_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "escape").symlink_to(outside)  # left over in dest, not from the archive
    with pytest.raises(ContextError, match="'escape/evil'.*outside the destination"):
        extract_context(_tar(_file("escape/evil")), dest)
    assert list(outside.iterdir()) == []


def test_links_inside_the_destination_are_extracted(tmp_path):
    data = _tar(
        _file("pkg/real.txt", b"ok"),
        _link("pkg/alias.txt", "real.txt"),
        _link("copy.txt", "pkg/real.txt", tarfile.LNKTYPE),
    )
    extract_context(data, tmp_path)
    assert (tmp_path / "pkg" / "alias.txt").read_text() == "ok"
    assert (tmp_path / "copy.txt").read_text() == "ok"


def test_data_that_is_not_an_archive_is_refused(tmp_path):
    with pytest.raises(ContextError, match="not a valid tar.gz"):
        extract_context(b"definitely not a tarball", tmp_path / "dest")


# --- checking an uploaded archive ----------------------------------------------------------------

SMALL = ContextLimits(archive_bytes=4096, content_bytes=1000, entries=3)


def test_an_archive_within_every_limit_is_summarized():
    data = _tar(_file("a.py", b"x" * 600), _file("lib/b.py", b"y" * 400), _link("c.py", "a.py"))
    summary = check_archive(data, SMALL)
    assert (summary.content_bytes, summary.entries) == (1000, 3)


def test_one_byte_more_of_files_is_refused_with_the_largest_named():
    data = _tar(_file("a.py", b"x" * 600), _file("lib/b.py", b"y" * 401))
    with pytest.raises(ContextError) as err:
        check_archive(data, SMALL)
    assert str(err.value) == (
        "context: the files expand to at least 1001.0B, over the limit of 1000.0B; "
        "largest files: a.py (600.0B), lib/b.py (401.0B)"
    )


def test_one_entry_more_is_refused():
    data = _tar(*[_file(f"f{i}.py") for i in range(4)])
    with pytest.raises(
        ContextError, match="^context: the archive has more than 3 files and folders, over the limit$"
    ):
        check_archive(data, SMALL)
    assert check_archive(_tar(*[_file(f"f{i}.py") for i in range(3)]), SMALL).entries == 3


def test_the_compressed_size_is_checked_at_the_limit_and_one_byte_past():
    data = _tar(_file("a.py", b"x"))
    assert check_archive(data, ContextLimits(archive_bytes=len(data))).entries == 1
    with pytest.raises(ContextError) as err:
        check_archive(data, ContextLimits(archive_bytes=len(data) - 1))
    assert str(err.value) == (
        f"context: the archive is {format_size(len(data))}, over the limit of {format_size(len(data) - 1)}"
    )


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (_file("/etc/passwd"), "context: '/etc/passwd': it has an absolute path"),
        (_file("a/../../up.py"), "context: 'a/../../up.py': its path contains '..'"),
        (_link("out", "../../etc"), "context: 'out': it is a symlink to '../../etc', outside the context"),
        (
            _link("abs", "/etc/passwd"),
            "context: 'abs': it is a symlink to '/etc/passwd', outside the context",
        ),
        (
            _link("hard", "/etc/shadow", tarfile.LNKTYPE),
            "context: 'hard': it is a hard link to '/etc/shadow', outside the context",
        ),
        (_device("null"), "context: 'null': only files, folders and links are allowed"),
    ],
)
def test_members_that_leave_the_context_or_are_special_are_refused(member, message):
    with pytest.raises(ContextError) as err:
        check_archive(_tar(_file("ok.py"), member))
    assert str(err.value) == message


def test_links_that_stay_inside_are_accepted():
    data = _tar(_file("pkg/real.py"), _link("pkg/alias.py", "real.py"), _link("top.py", "pkg/../pkg/real.py"))
    assert check_archive(data).entries == 3


@pytest.mark.parametrize(
    "data",
    [b"", b"plain bytes", gzip.compress(b"gzip, but no tar inside " * 50), _tar(_file("a.py"))[:-20]],
    ids=["empty", "not-gzip", "gzip-not-tar", "truncated"],
)
def test_anything_but_a_tar_gz_is_refused(data):
    with pytest.raises(ContextError, match=f"^{NOT_A_TAR_GZ}$"):
        check_archive(data)


def _zeros_tar_gz(size: int, name: str = "zeros.bin") -> bytes:
    buffer = io.BytesIO()
    zeros = bytes(1024 * 1024)
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w|") as tar,
    ):
        info = tarfile.TarInfo(name)
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def readable(self):
                return True

            def readinto(self, b):
                n = min(len(b), self.left, len(zeros))
                b[:n] = zeros[:n]
                self.left -= n
                return n

        tar.addfile(info, io.BufferedReader(Zeros()))
    return buffer.getvalue()


def test_a_gzip_bomb_is_refused_at_its_first_header_without_expanding_it():
    bomb = _zeros_tar_gz(512 * 1024 * 1024)  # 512 MiB of zeros in about half a megabyte
    assert len(bomb) < 600_000
    tracemalloc.start()
    try:
        with pytest.raises(ContextError, match="expand to at least 512.0MB, over the limit of 95.0MB"):
            check_archive(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, f"refusing the bomb took {format_size(peak)} of memory"


def test_an_oversized_metadata_header_is_refused_before_it_is_read():
    info = tarfile.TarInfo("a.py")
    info.pax_headers = {"comment": "x" * (LIMITS.content_bytes // 1000)}
    with pytest.raises(ContextError, match=r"^context: a metadata header of .* is over the limit of 64.0KB$"):
        check_archive(_tar((info, b"x")))


def test_what_the_packer_accepts_the_upload_check_accepts(tmp_path):
    ctx = _write(
        tmp_path / "ctx", {"train.py": "print(1)\n", "lib/model.py": "x = 1\n", "data/a.csv": "1,2\n"}
    )
    packed = pack_context(ctx)
    summary = check_archive(packed.data)
    assert (summary.content_bytes, summary.entries) == (packed.size, packed.file_count + 2)


def test_the_packer_refuses_more_entries_than_the_master_accepts(tmp_path):
    ctx = _write(tmp_path / "ctx", {f"f{i}.py": "" for i in range(4)})
    with pytest.raises(ContextError, match=r"has 4 files and folders, over the limit of 3\."):
        pack_context(ctx, limits=SMALL)
    assert pack_context(ctx, limits=ContextLimits(entries=4)).file_count == 4


def test_the_packer_refuses_an_archive_over_the_compressed_limit(tmp_path):
    ctx = _write(tmp_path / "ctx", {"noise.bin": os.urandom(3000), "a.py": "x"})
    with pytest.raises(ContextError, match=r"packs to .*, over the limit of 2.0KB; largest files: noise.bin"):
        pack_context(ctx, limits=ContextLimits(archive_bytes=2048))
