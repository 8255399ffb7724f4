"""The ``data_layer`` section: where Determined's data layer cached datasets.

det-airflow has no data layer, so nothing here reaches a trial; the section is checked as
Determined checks it, so that a config one accepts the other accepts too, and kept in ``raw``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_airflow.config._fields import Fields, Problems

PATH = "data_layer"
_CACHE = ("local_cache_host_path", "local_cache_container_path")
# The fields of each kind of data layer beyond ``type``, and which of them are required.
_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "shared_fs": (("host_storage_path", "container_storage_path"), ()),
    "s3": (
        ("bucket", "bucket_directory_path", *_CACHE, "access_key", "secret_key", "endpoint_url"),
        ("bucket", "bucket_directory_path"),
    ),
    "gcs": (("bucket", "bucket_directory_path", *_CACHE), ("bucket", "bucket_directory_path")),
}
_ABSOLUTE = ("host_storage_path", "container_storage_path", *_CACHE)


def read_data_layer(value: Any, problems: Problems) -> None:
    """Records what is wrong with ``data_layer``; a non-mapping is the caller's to report."""
    if not isinstance(value, Mapping):
        return
    kind = Fields(value, PATH, problems).choice("type", tuple(_KINDS), required=True)
    if kind is None:
        return
    fields, required = _KINDS[kind]
    f = Fields(value, PATH, problems, known=("type", *fields))
    for key in fields:
        path = f.string(key, required=f"when data_layer.type is {kind}" if key in required else False)
        if key in _ABSOLUTE and isinstance(path, str) and not path.startswith("/"):
            f.bad(key, "an absolute path")
    if kind != "shared_fs" and f.given(_CACHE[0]) != f.given(_CACHE[1]):
        have, lack = _CACHE if f.given(_CACHE[0]) else _CACHE[::-1]
        f.missing(lack, "an absolute path", f"when '{have}' is set (give both or neither)")
