"""Typed reads from one mapping of the schema; every mistake becomes a ``(path, message)`` problem.

Readers never raise: they record the problem and return a default, so that one pass over the
config reports everything that is wrong. The loader raises once at the end if anything was found.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from typing import Any, TypeGuard

_MISSING = object()


class Problems:
    """The problems found so far, in the order found."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def __len__(self) -> int:
        return len(self.items)


def join(path: str, key: object) -> str:
    """``searcher`` + ``max_trials`` -> ``searcher.max_trials``."""
    return f"{path}.{key}" if path else str(key)


def item(path: str, index: int) -> str:
    """``bind_mounts`` + 0 -> ``bind_mounts[0]``."""
    return f"{path}[{index}]"


def show(value: Any, limit: int = 60) -> str:
    """A value as the user wrote it in YAML, shortened for messages."""
    text = _show(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


def did_you_mean(word: object, choices: Collection[str]) -> str:
    """``"; did you mean 'x'?"`` when ``word`` is close to one of ``choices``, else ``""``."""
    if not isinstance(word, str):
        return ""
    # A unique field that begins with the word (`slots` -> `slots_per_trial`), or else contains it
    # (`seed` -> `experiment_seed`), is a better guess than the closest spelling.
    starts = [choice for choice in choices if len(word) >= 3 and choice.startswith(word)]
    contains = [choice for choice in choices if len(word) >= 3 and word in choice]
    if len(starts) == 1:
        close = starts
    elif len(contains) == 1:
        close = contains
    else:
        close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def is_int(value: Any) -> TypeGuard[int]:
    # YAML `true` is a Python bool, which is an int subclass; Determined rejects it, so do we.
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float: YAML's ``.inf`` and ``.nan`` are floats no schedule can use."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def is_numeric(value: Any) -> TypeGuard[int | float]:
    """Any int or float, infinities and NaN included."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _past(value: Any, cap: float | None) -> bool:
    """A number beyond ``cap`` (NaN included), as opposed to something that is no number at all."""
    return cap is not None and is_numeric(value) and not value <= cap


def int_kind(low: int | None = None, high: int | None = None) -> str:
    if low is not None and high is not None:
        return f"an integer between {low} and {high}"
    if low is not None:
        return f"an integer >= {low}"
    if high is not None:
        return f"an integer <= {high}"
    return "an integer"


def number_kind(above: float | None = None, high: float | None = None) -> str:
    if above is not None and high is not None:
        return f"a number > {above:g} and <= {high:g}"
    if above is not None:
        return f"a number > {above:g}"
    if high is not None:
        return f"a number <= {high:g}"
    return "a number"


def report_unknown(data: Mapping[str, Any], path: str, problems: Problems, known: Collection[str]) -> None:
    """Reports keys of ``data`` that are not in ``known``, each with a did-you-mean when one is close."""
    for key in data:
        if key in known:
            continue
        hint = did_you_mean(key, known)
        if not hint and len(known) <= 10:
            hint = "; expected one of " + ", ".join(known)
        problems.add(join(path, key), "unknown field" + hint)


class Fields:
    """Reads the fields of one mapping at ``path``.

    Absent keys and explicit nulls both mean "not given": optional fields take their default and
    required ones are reported. ``required`` may be a string saying why (``"for the random searcher"``).
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        path: str,
        problems: Problems,
        known: Collection[str] | None = None,
    ) -> None:
        self.data = data
        self.path = path
        self.problems = problems
        if known is not None:
            report_unknown(data, path, problems, known)

    def at(self, key: str) -> str:
        return join(self.path, key)

    def given(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def bad(self, key: str, expected: str, value: Any = _MISSING) -> None:
        got = self.data.get(key) if value is _MISSING else value
        self.problems.add(self.at(key), f"expected {expected}, got {show(got)}")

    def missing(self, key: str, expected: str, why: str | bool = True) -> None:
        if isinstance(why, str):
            self.problems.add(self.at(key), f"required {why}; expected {expected}")
        else:
            self.problems.add(self.at(key), f"missing required field; expected {expected}")

    def check(self, key: str, expected: str, ok: Any, default: Any, required: str | bool) -> Any:
        """The value at ``key`` if ``ok(value)``; otherwise records a problem and returns ``default``."""
        value = self.data.get(key)
        if value is None:
            if required and key in self.data:
                self.bad(key, expected)
            elif required:
                self.missing(key, expected, required)
            return default
        if not ok(value):
            self.bad(key, expected)
            return default
        return value

    def integer(
        self,
        key: str,
        default: Any = None,
        *,
        low: int | None = None,
        high: int | None = None,
        cap: int | None = None,
        required: str | bool = False,
    ) -> Any:
        """``high`` is part of the field's meaning and always stated; ``cap`` is a limit no real
        config reaches (``_limits``), stated only to a value past it."""
        top = high if high is not None else cap

        def ok(v: Any) -> bool:
            return is_int(v) and (low is None or v >= low) and (top is None or v <= top)

        over = _past(self.data.get(key), cap)
        return self.check(
            key, int_kind(low, top if high is not None or over else None), ok, default, required
        )

    def number(
        self,
        key: str,
        default: Any = None,
        *,
        above: float | None = None,
        cap: float | None = None,
        required: str | bool = False,
    ) -> Any:
        expected = number_kind(above, cap if _past(self.data.get(key), cap) else None)

        def ok(v: Any) -> bool:
            return is_number(v) and (above is None or v > above) and (cap is None or v <= cap)

        value = self.check(key, expected, ok, default, required)
        return float(value) if is_number(value) else value

    def boolean(self, key: str, default: Any = None, *, required: str | bool = False) -> Any:
        return self.check(key, "true or false", lambda v: isinstance(v, bool), default, required)

    def string(
        self, key: str, default: Any = None, *, required: str | bool = False, nonempty: bool = False
    ) -> Any:
        expected = "a non-empty string" if nonempty else "a string"
        return self.check(
            key, expected, lambda v: isinstance(v, str) and (v or not nonempty), default, required
        )

    def choice(
        self, key: str, choices: Collection[str], default: Any = None, *, required: str | bool = False
    ) -> Any:
        value = self.data.get(key)
        if value is not None and value not in choices:
            message = f"expected one of {', '.join(choices)}, got {show(value)}"
            self.problems.add(self.at(key), message + did_you_mean(value, choices))
            return default
        return self.check(key, "one of " + ", ".join(choices), lambda v: True, default, required)

    def mapping(self, key: str, default: Any = None) -> Any:
        return self.check(key, "a mapping", lambda v: isinstance(v, Mapping), default, False)

    def strings(self, key: str, *, nonempty: bool = False) -> tuple[str, ...]:
        """A list of strings; each bad element is reported with its index."""
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.bad(key, "a list of strings")
            return ()
        for i, element in enumerate(value):
            if not isinstance(element, str) or (nonempty and not element):
                kind = "a non-empty string" if nonempty else "a string"
                self.problems.add(item(self.at(key), i), f"expected {kind}, got {show(element)}")
        return tuple(value)
