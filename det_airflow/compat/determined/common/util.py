"""``determined.common.util``: the helpers Determined training code calls."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import yaml

from det_airflow import trial_env
from det_airflow.api._http import normalize_master_url

T = TypeVar("T")


def get_default_master_address() -> str:
    """``DET_MASTER``, else ``http://localhost:8080``."""
    return normalize_master_url(os.environ.get(trial_env.MASTER))


def make_url(master_address: str, suffix: str) -> str:
    """``suffix`` joined to the master address (``http://`` added to a bare ``host:port``)."""
    return f"{normalize_master_url(master_address)}/{suffix.lstrip('/')}"


def sizeof_fmt(val: int | float) -> str:
    """A byte count for people: ``1.5MB``."""
    num = float(val)
    for unit in ("", "K", "M", "G", "T", "P", "E", "Z"):
        if abs(num) < 1024.0:
            return f"{num:3.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}YB"


def chunks(lst: Sequence[T], chunk_size: int) -> Iterator[Sequence[T]]:
    """Successive ``chunk_size``-sized pieces of ``lst``."""
    for i in range(0, len(lst), chunk_size):
        yield lst[i : i + chunk_size]


def is_overridden(full_method: Any, parent_class: type) -> bool:
    """Whether a bound or unbound method is overridden from ``parent_class``'s."""
    name = full_method.__name__
    method = getattr(full_method, "__func__", full_method)
    return method is not getattr(parent_class, name, None)


@contextlib.contextmanager
def preserve_random_state() -> Iterator[None]:
    """Runs the block, then puts Python's (and NumPy's, if installed) random state back."""
    state = random.getstate()
    try:
        import numpy as np
    except ImportError:
        np = None  # type: ignore[assignment]
    np_state = np.random.get_state() if np is not None else None
    try:
        yield
    finally:
        random.setstate(state)
        if np is not None:
            np.random.set_state(np_state)


def safe_load_yaml_with_exceptions(yaml_file: Any) -> Any:
    """YAML from a file object or string, safely loaded."""
    return yaml.safe_load(yaml_file)


def yaml_safe_dump(data: Any, stream: Any = None, **kwargs: Any) -> Any:
    """``yaml.safe_dump`` with keys kept in their order."""
    kwargs.setdefault("sort_keys", False)
    return yaml.safe_dump(data, stream, **kwargs)


# The metric group names of Determined's own training loops.
_LEGACY_TRAINING = "training"
_LEGACY_VALIDATION = "validation"
_INFERENCE = "inference"
