"""Builds the trial image ``det-airflow-trial:cpu`` offline, from what this machine already has.

No registry is needed: the root file system is assembled here and loaded with ``docker import``.
It holds this interpreter (as ``/usr/local/bin/python3``), the shared libraries it and the copied
packages link against, ``/bin/sh`` and coreutils, det-airflow's trial side (the Core API,
PyTorchTrial, launchers; not its Airflow operators or web UI) and the installed distributions that
``det-airflow[torch,stores]`` needs (torch, and the clients of the object stores checkpoints may go
to: boto3, google-cloud-storage, azure-storage-blob), copied from the running environment. Nothing
of Airflow goes in.

Usage: ``python images/trial_image.py [--tag det-airflow-trial:cpu]`` (``make trial-image``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
PREFIX = "usr/local"
SITE = f"{PREFIX}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
LIB_DIR = "usr/lib/x86_64-linux-gnu"
# Where the copied tree of det-airflow's sources lands: import package -> source folder.
SOURCES = {"det_airflow": REPO / "det_airflow", "det_airflow/launchers": REPO / "launchers"}
SKIPPED_SOURCES = ("det_airflow/operators", "det_airflow/webui")
STDLIB_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
TOOLS = (
    "sh",
    "dash",
    "bash",
    "env",
    "cat",
    "ls",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "echo",
    "sleep",
    "true",
    "false",
    "grep",
    "sed",
    "id",
    "pwd",
    "test",
    "head",
    "tail",
    "tee",
    "touch",
    "uname",
    "wc",
    "sort",
    "chmod",
)
# det-airflow's extras whose requirements the image holds.
IMAGE_EXTRAS = ("torch", "stores", "tasks")
# Imported in the built image to check it, with what a trial uses.
IMAGE_CHECK = (
    "import det_airflow, torch, boto3, google.cloud.storage, azure.storage.blob, tensorboard, jupyterlab; "
    "print(torch.__version__)"
)
# The image records which sources it holds, so that a stale one can be told apart and rebuilt
# (`docker import` sets no labels, environment variables it does).
SOURCES_VARIABLE = "DET_AIRFLOW_IMAGE_SOURCES"
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")
IMAGE_CHANGES = [
    "ENV PATH=/usr/local/bin:/usr/bin:/bin",
    "ENV PYTHONUNBUFFERED=1",
    "ENV HOME=/tmp",
    "WORKDIR /",
    'CMD ["python3"]',
]


def distributions(extras: Iterable[str] = IMAGE_EXTRAS) -> list[metadata.Distribution]:
    """det-airflow's trial-side requirements with ``extras``, and theirs, as installed here."""
    seen: dict[str, metadata.Distribution] = {}
    pending: list[tuple[str, tuple[str, ...]]] = [("det-airflow", tuple(extras))]
    while pending:
        name, wanted = pending.pop()
        dist = metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen and not wanted:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            envs = [{"extra": extra} for extra in (*wanted, "")]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            req_key = req.name.lower().replace("_", "-")
            if req_key not in seen:
                pending.append((req.name, tuple(req.extras)))
    return [d for k, d in seen.items() if k != "det-airflow"]


def _files_of(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    for rel in dist.files or []:
        if rel.parts and rel.parts[0] == "..":  # console scripts outside site-packages
            continue
        path = Path(str(dist.locate_file(rel)))
        if path.is_file():
            yield path, f"{SITE}/{rel.as_posix()}"


def sources_digest() -> str:
    """A digest of det-airflow's trial-side sources as they are now, of the extras it holds and of
    the distributions those bring (names and versions): an image built before a requirement was
    added or upgraded is stale."""
    digest = hashlib.sha256(repr(IMAGE_EXTRAS).encode())
    held = sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions(IMAGE_EXTRAS))
    digest.update("\n".join(held).encode() + b"\0")
    for path, arcname in sorted(_source_files(), key=lambda entry: entry[1]):
        digest.update(arcname.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _source_files() -> Iterator[tuple[Path, str]]:
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*")):
            arcname = f"{SITE}/{package}/{path.relative_to(folder).as_posix()}"
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and not arcname.startswith(tuple(f"{SITE}/{s}" for s in SKIPPED_SOURCES))
            ):
                yield path, arcname


def _interpreter_files() -> Iterator[tuple[Path, str]]:
    prefix = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary = Path(sys.base_prefix) / "bin" / version
    yield binary.resolve(), f"{PREFIX}/bin/{version}"
    stdlib = Path(sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["stdlib"])
    for path in sorted(stdlib.rglob("*")):
        rel = path.relative_to(stdlib)
        if path.is_file() and not STDLIB_SKIP.intersection(rel.parts[:1]):
            yield path, f"{PREFIX}/lib/{version}/{rel.as_posix()}"
    for lib in sorted((prefix / "lib").glob("libpython*.so*")):
        yield lib, f"{LIB_DIR}/{lib.name}"


def _shared_libraries(objects: Iterable[Path]) -> dict[str, Path]:
    """System libraries that ``objects`` load (through ldd), by file name; bundled ones excluded."""
    found: dict[str, Path] = {}
    for obj in objects:
        result = subprocess.run(["ldd", str(obj)], capture_output=True, text=True, check=False)
        for match in _LDD_LINE.finditer(result.stdout):
            lib = Path(match.group(1))
            if (
                lib.parts[:2] in (("/", "lib"), ("/", "lib64"), ("/", "usr"))
                and "site-packages" not in lib.parts
            ):
                found.setdefault(lib.name, lib)
    return found


def _tools() -> Iterator[tuple[Path, str]]:
    for tool in TOOLS:
        path = shutil.which(tool, path="/usr/bin:/bin")
        if path:
            yield Path(path).resolve(), f"usr/bin/{tool}"
    dash = shutil.which("dash", path="/usr/bin:/bin")
    if dash:
        yield Path(dash).resolve(), "bin/sh"


def build_rootfs_tar(target: Path, extras: Iterable[str] = IMAGE_EXTRAS) -> int:
    """Writes the root file system as a tar to ``target``; answers the number of files."""
    entries: dict[str, Path] = {}
    for dist in distributions(extras):
        entries.update((arc, path) for path, arc in _files_of(dist))
    entries.update((arc, path) for path, arc in _source_files())
    entries.update((arc, path) for path, arc in _interpreter_files())
    entries.update((arc, path) for path, arc in _tools())
    binaries = [p for arc, p in entries.items() if arc.endswith(".so") or ".so." in arc or "/bin/" in arc]
    for name, lib in _shared_libraries(binaries).items():
        if lib.name.startswith("ld-linux"):
            entries.setdefault(f"lib64/{lib.name}", lib.resolve())
        entries.setdefault(f"{LIB_DIR}/{name}", lib.resolve())
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    with tarfile.open(target, "w") as tar:
        for folder in ("tmp", "etc", "root", "run", "lib", "lib64", "bin", "usr/local/bin", "var/tmp"):
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if folder in ("tmp", "var/tmp") else 0o755
            tar.addfile(info)
        for arcname, path in sorted(entries.items()):
            tar.add(str(path), arcname=arcname, recursive=False)
        _add_text(
            tar, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/sh\n"
        )
        _add_text(tar, "etc/group", "root:x:0:\nnogroup:x:65534:\n")
        for alias in ("python3", "python"):
            _add_link(tar, f"{PREFIX}/bin/{alias}", version)
        # Debian's loader looks in /lib/x86_64-linux-gnu too; a merged /usr keeps both views the same.
        _add_link(tar, "lib/x86_64-linux-gnu", f"/{LIB_DIR}")
    return len(entries)


def _add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    import io

    tar.addfile(info, io.BytesIO(data))


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    tar.addfile(info)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="det-airflow-trial:cpu")
    parser.add_argument("--docker-url", default=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    parser.add_argument(
        "--if-stale", action="store_true", help="do nothing when the image already holds these sources"
    )
    args = parser.parse_args(argv)

    import docker
    from docker.errors import ImageNotFound

    client = docker.APIClient(base_url=args.docker_url)
    digest = sources_digest()
    try:
        previous = client.inspect_image(args.tag)
    except ImageNotFound:
        previous = None
    if (
        args.if_stale
        and previous is not None
        and f"{SOURCES_VARIABLE}={digest}" in (previous["Config"].get("Env") or [])
    ):
        print(f"{args.tag} is up to date (sources {digest})")
        return 0
    with tempfile.TemporaryDirectory(prefix="det-trial-image-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        count = build_rootfs_tar(rootfs)
        size = rootfs.stat().st_size / 1024**2
        print(f"root file system: {count} files, {size:.0f} MiB; importing as {args.tag}", flush=True)
        repository, _, tag = args.tag.partition(":")
        client.import_image(
            src=str(rootfs),
            repository=repository,
            tag=tag or "latest",
            changes=[*IMAGE_CHANGES, f"ENV {SOURCES_VARIABLE}={digest}"],
        )
    if previous is not None and previous["Id"] != client.inspect_image(args.tag)["Id"]:
        try:  # the image this one replaces, now untagged; kept while a container still uses it
            client.remove_image(previous["Id"])
        except docker.errors.APIError:
            pass
    out = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            args.tag,
            "python3",
            "-c",
            IMAGE_CHECK,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        print(f"the image does not import what trials use:\n{out.stderr}", file=sys.stderr)
        return 1
    print(f"built {args.tag} (torch {out.stdout.strip()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
