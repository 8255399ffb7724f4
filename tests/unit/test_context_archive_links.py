"""Links in a context archive: the master's upload check refuses every link that extraction would
refuse (chains included), naming the member, and containment means inside the folder, not a name
that merely starts like it."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from det_airflow.context_archive import check_archive, extract_context
from det_airflow.errors import ContextError


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _file(name: str, content: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    return info, content


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info


def _tar(*members: tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member in members:
            if isinstance(member, tuple):
                tar.addfile(member[0], io.BytesIO(member[1]))
            else:
                tar.addfile(member)
    return buffer.getvalue()


# Each looks inside when its own link text is read alone; each leaves the folder once the links
# before it exist on disk.
CHAINS = {
    "a link through a link to the folder itself": (
        [_link("here", "."), _link("up", "here/..")],
        "up",
        "it is a symlink to 'here/..', which leads outside the context through a link",
    ),
    "a link in a folder that is a link": (
        [_dir("d"), _link("d/self", ".."), _link("d/self/escape", "..")],
        "d/self/escape",
        "it is a symlink to '..', which leads outside the context through a link",
    ),
    "a file written through a chain": (
        [_link("a", "."), _link("b", "a/.."), _file("b/evil.sh")],
        "b",
        "it is a symlink to 'a/..', which leads outside the context through a link",
    ),
}


@pytest.mark.parametrize("members, named, problem", CHAINS.values(), ids=CHAINS.keys())
def test_the_upload_check_refuses_a_chain_of_links_that_extraction_refuses(
    tmp_path: Path, members: list, named: str, problem: str
) -> None:
    data = _tar(*members)
    with pytest.raises(ContextError) as at_upload:
        check_archive(data)
    assert str(at_upload.value) == f"context: {named!r}: {problem}"
    with pytest.raises(ContextError):
        extract_context(data, tmp_path / "ctx")


def test_a_link_loop_is_refused_at_upload() -> None:
    with pytest.raises(ContextError) as err:
        check_archive(_tar(_link("a", "b"), _link("b", "a"), _file("a/x")))
    assert str(err.value) == "context: 'a/x': it would be written outside the context through a link"


def test_chains_that_stay_inside_are_accepted_and_extracted(tmp_path: Path) -> None:
    data = _tar(_dir("d"), _file("d/data.csv", b"1,2"), _link("here", "."), _link("data", "here/d/data.csv"))
    check_archive(data)
    extract_context(data, tmp_path / "ctx")
    assert (tmp_path / "ctx" / "data").read_bytes() == b"1,2"


def test_a_sibling_folder_whose_name_starts_like_the_destination_is_outside(tmp_path: Path) -> None:
    """``/x/ctx-evil`` starts with ``/x/ctx`` but is not inside it."""
    (tmp_path / "ctx-evil").mkdir()
    data = _tar(_link("next-door", "../ctx-evil"), _file("next-door/planted.py", b"import os"))
    with pytest.raises(ContextError) as err:
        extract_context(data, tmp_path / "ctx")
    assert str(err.value) == (
        "refusing to extract 'next-door' from the context archive: "
        "it is a symlink to '../ctx-evil', outside the destination"
    )
    assert not (tmp_path / "ctx-evil" / "planted.py").exists()
