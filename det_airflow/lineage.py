"""What an experiment read and wrote, for Airflow Assets and OpenLineage.

Inputs are the URLs of the experiment config's ``data`` section and the hash of its packed context;
outputs are its checkpoints' URIs. The functions here compute plain data; only
:func:`operator_lineage` needs ``apache-airflow-providers-openlineage``, and operators call it from
``get_openlineage_facets_on_complete``, which Airflow calls only when that provider is installed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

#: The OpenLineage namespace of det's own datasets (packed contexts).
DET_NAMESPACE = "det"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")


@dataclasses.dataclass(frozen=True)
class LineageDataset:
    """One OpenLineage dataset, named as OpenLineage's naming conventions name it."""

    namespace: str
    name: str


def experiment_asset_uri(dag_id: str) -> str:
    """The Asset an experiment DAG's ``finalize`` task updates: one per DAG, stable across runs."""
    return f"det://experiments/{dag_id}"


def checkpoint_uri(storage: Mapping[str, Any]) -> str | None:
    """A checkpoint's URI from its record's ``storage`` (``{"type", "path", ...}``): the object
    store's address (``s3://bucket/prefix/uuid``) or ``file://`` + the folder on the host."""
    path = storage.get("path")
    if not isinstance(path, str) or not path:
        return None
    if _URL.match(path):
        return path
    return PurePosixPath(path).as_uri() if path.startswith("/") else None


def context_sha256(data: bytes) -> str:
    """The hash that names a packed context (its tar.gz bytes)."""
    return hashlib.sha256(data).hexdigest()


def data_urls(data: Any) -> list[str]:
    """Every URL among the values of the config's free-form ``data`` section, in order, once each."""
    return list(dict.fromkeys(_urls(data)))


def _urls(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if _URL.match(value.strip()):
            yield value.strip()
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _urls(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _urls(v)


def dataset_for_uri(uri: str) -> LineageDataset:
    """OpenLineage's naming: ``scheme://authority`` is the namespace and the path the name
    (``s3://bucket/a/b`` → ``s3://bucket``, ``a/b``); a local file's namespace is ``file``."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return LineageDataset("file", parts.path or "/")
    namespace = f"{parts.scheme}://{parts.netloc}"
    return LineageDataset(namespace, parts.path.lstrip("/") or "/")


def experiment_inputs(data: Any, context_hash: str | None) -> list[LineageDataset]:
    """What an experiment reads: its ``data`` section's URLs, and its context by hash."""
    inputs = [dataset_for_uri(url) for url in data_urls(data)]
    if context_hash:
        inputs.append(LineageDataset(DET_NAMESPACE, f"contexts/{context_hash}"))
    return inputs


def experiment_outputs(checkpoint_uris: Iterable[str | None]) -> list[LineageDataset]:
    """What an experiment wrote: one dataset per checkpoint URI."""
    return [dataset_for_uri(uri) for uri in dict.fromkeys(u for u in checkpoint_uris if u)]


def operator_lineage(inputs: Sequence[LineageDataset], outputs: Sequence[LineageDataset]) -> Any:
    """The provider's ``OperatorLineage`` for these datasets (imported here: the provider is optional)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(
        inputs=[Dataset(namespace=d.namespace, name=d.name) for d in inputs],
        outputs=[Dataset(namespace=d.namespace, name=d.name) for d in outputs],
    )


def finished_event_extra(outcome: Mapping[str, Any], best_checkpoint_uri: str | None) -> dict[str, Any]:
    """The ``extra`` of the Asset event of a finished experiment, from the master's outcome
    (``ExperimentOutcome.as_xcom()``): what a downstream DAG reads from ``triggering_asset_events``."""
    return {
        "experiment_id": outcome["experiment_id"],
        "state": outcome["state"],
        "best_checkpoint_uuid": outcome["best_checkpoint_uuid"],
        "best_checkpoint_uri": best_checkpoint_uri,
        "metric": outcome["metric"],
        "value": outcome["best_metric"],
    }
