"""``det checkpoint ...``: list, describe, download and delete checkpoints."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_airflow.cli import render
from det_airflow.errors import DetError

if TYPE_CHECKING:
    from det_airflow.api.user import Checkpoint, UserClient

LIST_HEADERS = ("Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources", "Size")
DESCRIBE_HEADERS = (
    "UUID",
    "Experiment ID",
    "Trial ID",
    "# of Batches",
    "State",
    "Validation Metric",
    "Report Time",
    "Size",
    "Storage Path",
)
RESOURCE_HEADERS = ("Path", "Size")
# Storage types whose files are plain folders, readable wherever that folder is mounted.
FOLDER_STORAGE = ("shared_fs", "directory")


def register(subparsers: argparse._SubParsersAction) -> None:
    noun = subparsers.add_parser("checkpoint", aliases=["c"], help="inspect, download and delete checkpoints")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    ls = verbs.add_parser("list", aliases=["ls"], help="list an experiment's checkpoints")
    add_list_arguments(ls)

    describe = verbs.add_parser("describe", help="show a checkpoint")
    _add_uuid(describe)
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.set_defaults(func=_describe)

    download = verbs.add_parser("download", help="copy a checkpoint's files to this machine")
    _add_uuid(download)
    download.add_argument(
        "-o", "--output-dir", metavar="DIR", help="where to put the files (default: checkpoints/UUID)"
    )
    add_mode_argument(download)
    download.set_defaults(func=_download)

    delete = verbs.add_parser("delete", help="delete checkpoints' files and records")
    delete.add_argument(
        "checkpoint_uuids",
        metavar="UUIDS",
        type=uuid_list,
        help="comma-separated list of checkpoint UUIDs to delete",
    )
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(func=_delete)


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    """``EXPERIMENT_ID [--csv | --json]``: shared with ``det experiment list-checkpoints``."""
    parser.add_argument("experiment_id", metavar="ID", type=int, help="experiment ID")
    parser.add_argument(
        "--best",
        type=_positive_int,
        metavar="N",
        help="only the best N checkpoints by the searcher metric (those with a validation)",
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print CSV")
    out.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=_list)


# Determined's download modes: from storage with this machine's access, through the master, or
# whichever works (storage when readable here, else the master).
MODES = ("auto", "direct", "master")


def add_mode_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="direct: read the storage from this machine (a mounted folder, or a bucket with your "
        "own credentials: AWS_*, Google's application default credentials, AZURE_STORAGE_*); "
        "master: stream through the master (object storage only); "
        "auto (default): direct for folders, master for object storage",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _add_uuid(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("uuid", metavar="UUID", type=checkpoint_uuid, help="checkpoint UUID")


def checkpoint_uuid(text: str) -> str:
    # "." and ".." would name a folder above the checkpoint once placed in a URL or a path.
    if text in ("", ".", "..") or "/" in text:
        raise argparse.ArgumentTypeError(f"not a checkpoint UUID: {text!r}")
    return text


def uuid_list(text: str) -> list[str]:
    """``UUID1,UUID2`` as checkpoint UUIDs, as Determined's ``det checkpoint delete`` takes them."""
    uuids = [part.strip() for part in text.split(",")]
    for part in uuids:
        try:
            checkpoint_uuid(part)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated checkpoint UUIDs, got {text!r} ({part!r} is not one)"
            ) from None
    return list(dict.fromkeys(uuids))


def _connect(args: argparse.Namespace) -> UserClient:
    from det_airflow.cli.user import connect

    return connect(args.master)


def _size(checkpoint: Checkpoint) -> str:
    from det_airflow.context_archive import format_size

    size = checkpoint.size
    if size is None:
        size = sum((checkpoint.resources or {}).values())
    return format_size(size)


def _list(args: argparse.Namespace) -> None:
    client = _connect(args)
    checkpoints = client.list_checkpoints(args.experiment_id)
    if args.best is not None:
        smaller = smaller_is_better(client.get_experiment_config(args.experiment_id))
        checkpoints = best_first(checkpoints, smaller)[: args.best]
    if args.json:
        render.print_json(checkpoints)
        return
    rows = [
        [
            c.trial_id,
            c.steps_completed,
            render.format_state(c.state),
            c.validation_metric,
            c.uuid,
            "\n".join(sorted(c.resources or {})),
            _size(c),
        ]
        for c in checkpoints
    ]
    render.print_table(LIST_HEADERS, rows, csv=args.csv)


def smaller_is_better(config: dict[str, Any]) -> bool:
    """The searcher's ordering (Determined's default: smaller is better)."""
    return bool((config.get("searcher") or {}).get("smaller_is_better", True))


def best_first(checkpoints: list[Checkpoint], smaller: bool) -> list[Checkpoint]:
    """The checkpoints with a validation metric, best first (ties: the later one first)."""
    scored = [c for c in checkpoints if c.validation_metric is not None and c.state != "DELETED"]
    return sorted(
        scored,
        key=lambda c: (
            c.validation_metric if smaller else -(c.validation_metric or 0.0),
            -c.steps_completed,
        ),
    )


def _describe(args: argparse.Namespace) -> None:
    from det_airflow.context_archive import format_size

    c = _connect(args).get_checkpoint(args.uuid)
    if args.json:
        render.print_json(c)
        return
    render.print_table(
        DESCRIBE_HEADERS,
        [
            [
                c.uuid,
                c.experiment_id,
                c.trial_id,
                c.steps_completed,
                render.format_state(c.state),
                c.validation_metric,
                render.format_time(c.report_time),
                _size(c),
                (c.storage or {}).get("path"),
            ]
        ],
    )
    resources = c.resources or {}
    if resources:
        print("\nResources:")
        render.print_table(
            RESOURCE_HEADERS, [[path, format_size(size)] for path, size in sorted(resources.items())]
        )
    if c.metadata:
        print("\nMetadata:")
        render.print_json(c.metadata)


def _download(args: argparse.Namespace) -> None:
    client = _connect(args)
    checkpoint = client.get_checkpoint(args.uuid)
    target = Path(args.output_dir) if args.output_dir else Path("checkpoints") / args.uuid
    download(client, checkpoint, target, args.mode)
    print("Local checkpoint path:")
    print(target)


def download(client: UserClient, checkpoint: Checkpoint, target: Path, mode: str = "auto") -> None:
    """Fetches a checkpoint into ``target`` in one of :data:`MODES`.

    Raises:
        DetError: The mode cannot serve this checkpoint's storage, or the fetch failed.
    """
    from det_airflow.object_storage import is_object_storage

    in_object_storage = is_object_storage(checkpoint.storage)
    if mode == "master" and not in_object_storage:
        raise DetError(
            f"checkpoint {checkpoint.uuid} is in a {(checkpoint.storage or {}).get('type')} folder, which "
            "the master does not serve: use --mode direct or auto on a machine that mounts it"
        )
    if in_object_storage and mode == "direct":
        download_from_bucket(checkpoint, target)
    elif in_object_storage:
        download_through_master(client, checkpoint, target)
    else:
        copy_checkpoint(checkpoint, target)


def download_from_bucket(checkpoint: Checkpoint, target: Path) -> None:
    """Fetches a checkpoint in object storage straight from its bucket into ``target``, with this
    machine's own credentials (boto3's chain, Google's application default credentials, Azure's
    ``AZURE_STORAGE_*`` variables or ``DefaultAzureCredential``): the master's are never lent out.

    Raises:
        DetError: The checkpoint was deleted, its record names no bucket, the store refused or
            could not be reached, or files the master registered are not in the bucket.
    """
    from det_airflow.core._storage import CheckpointStorage

    uuid = checkpoint.uuid
    storage = checkpoint.storage or {}
    kind = storage.get("type")
    if render.format_state(checkpoint.state) == "DELETED":
        raise DetError(f"checkpoint {uuid} was deleted; its files are gone")
    if target.exists() and not target.is_dir():
        raise DetError(f"cannot download into {target}: it is a file")
    store = CheckpointStorage.from_record(storage, uuid)
    if store is None:
        raise DetError(f"checkpoint {uuid} has no {kind} location recorded: use --mode master")
    try:
        found = store.files(uuid)
        missing = sorted(set(checkpoint.resources or {}) - set(found))
        if missing:
            raise DetError(
                f"checkpoint {uuid} in {store.location(uuid)} is incomplete: missing {', '.join(missing[:5])}"
            )
        store.download(uuid, target)
    except DetError as exc:
        raise DetError(
            f"direct download of checkpoint {uuid} from {kind} storage failed ({exc}); "
            "give this machine credentials for it, or use --mode master"
        ) from None


def download_through_master(client: UserClient, checkpoint: Checkpoint, target: Path) -> None:
    """Streams each file of a checkpoint in object storage from the master into ``target``: the
    master holds the bucket's credentials, so a reader of the experiment needs none.

    Raises:
        DetError: The checkpoint was deleted, a file came back another size than registered,
            or ``target`` is a file.
    """
    uuid = checkpoint.uuid
    if render.format_state(checkpoint.state) == "DELETED":
        raise DetError(f"checkpoint {uuid} was deleted; its files are gone")
    if target.exists() and not target.is_dir():
        raise DetError(f"cannot download into {target}: it is a file")
    for name, size in sorted((checkpoint.resources or {}).items()):
        destination = target / name
        if not destination.resolve().is_relative_to(target.resolve()) or name.startswith("/"):
            raise DetError(f"checkpoint {uuid} names a file outside its folder: {name!r}")
        destination.parent.mkdir(parents=True, exist_ok=True)
        written = client.download_checkpoint_file(uuid, name, destination)
        if written != size:
            raise DetError(
                f"checkpoint {uuid}: {name} came back with {written} bytes, {size} were registered"
            )


def copy_checkpoint(checkpoint: Checkpoint, target: Path) -> None:
    """Copies the checkpoint's folder from its storage to ``target`` (created; may already exist).

    The CLI prints the errors through ``render.clean``, so names from the master are safe in them.

    Raises:
        DetError: The checkpoint was deleted, its storage is not a folder this machine can read,
            or files the master recorded are missing there.
    """
    import shutil

    uuid = checkpoint.uuid
    if render.format_state(checkpoint.state) == "DELETED":
        raise DetError(f"checkpoint {uuid} was deleted; its files are gone")
    storage = checkpoint.storage or {}
    kind, path = storage.get("type"), storage.get("path")
    if kind not in FOLDER_STORAGE or not path:
        raise DetError(f"checkpoint {uuid} is in {kind} storage, which det cannot download from")
    source = Path(path)
    if not source.is_dir():
        raise DetError(
            f"checkpoint {uuid} is stored in {path} ({kind} storage), which is not reachable "
            "from this machine: mount that storage here, or download on a machine that has it"
        )
    missing = sorted(name for name in checkpoint.resources or {} if not (source / name).exists())
    if missing:
        raise DetError(f"checkpoint {uuid} in {path} is incomplete: missing {', '.join(missing[:5])}")
    if target.exists() and not target.is_dir():
        raise DetError(f"cannot download into {target}: it is a file")
    try:
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    except shutil.Error as exc:
        source_file, _, why = exc.args[0][0]  # copytree gathers (source, target, reason) per file
        raise DetError(f"copying checkpoint {uuid} to {target} failed at {source_file}: {why}") from None


def _delete(args: argparse.Namespace) -> int:
    uuids: list[str] = args.checkpoint_uuids
    named = ("checkpoint " if len(uuids) == 1 else "checkpoints ") + ", ".join(uuids)
    client = _connect(args)
    for uuid in uuids:  # every one known before any is deleted
        client.get_checkpoint(uuid)
    if not args.yes:
        if not sys.stdin.isatty():
            raise DetError(f"not deleting {named} without confirmation: pass --yes")
        answer = input(f"Deleting a checkpoint removes its files for good. Delete {named}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborting checkpoint deletion.")
            return 0
    for uuid in uuids:
        client.delete_checkpoint(uuid)
        print(f"Deleted checkpoint {uuid}")
    return 0
