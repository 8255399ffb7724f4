"""What det stores of the text people give it: names without control or bidirectional-formatting
characters, commands without NUL, and names made from free text (a command line).

A name is shown on other people's terminals, tables and pages: a control character moves their
cursor or rewrites a line, and a bidirectional override (U+202E) shows ``gpj.exe`` as ``exe.jpg``.
So names are refused with such characters rather than stored and cleaned at every place they are
shown. Free text (descriptions, notes) keeps its newlines and tabs.
"""

from __future__ import annotations

import re
import unicodedata

# C0 and C1 controls and DEL; the line and paragraph separators (U+2028, U+2029), the bidirectional
# embeddings and overrides (U+202A-U+202E), isolates (U+2066-U+2069) and marks (U+200E, U+200F,
# U+061C). A regular-expression character class, so that other patterns can leave the same out.
NOT_IN_NAMES = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_NOT_IN_NAMES = re.compile(f"[{NOT_IN_NAMES}]")
_ELLIPSIS = "\u2026"


def _described(char: str) -> str:
    """``U+202E (RIGHT-TO-LEFT OVERRIDE)``; a control character has no Unicode name."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else " (a control character)")


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be a name (None when it can): the first character refused, and where."""
    found = _NOT_IN_NAMES.search(value)
    if found is None:
        return None
    return (
        f"contains {_described(found.group())} at character {found.start() + 1}; names may not "
        "contain control or bidirectional-formatting characters"
    )


def checked_name(value: str) -> str:
    """``value`` if it may be a name; else ValueError saying why (pydantic reports it per field)."""
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def command_problem(value: str) -> str | None:
    """Why ``value`` cannot be part of a command line (None when it can): a NUL character, which
    no program's arguments or environment can carry (exec stops the string there)."""
    at = value.find("\x00")
    if at < 0:
        return None
    return f"contains a NUL character (U+0000) at character {at + 1}, which no command line can carry"


def checked_command_part(value: str) -> str:
    """``value`` if it may be part of a command line; else ValueError saying why."""
    problem = command_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def checked_text(value: str) -> str:
    """Free text to store (a description, notes): anything but NUL, which the databases refuse
    (PostgreSQL's text cannot hold it)."""
    at = value.find("\x00")
    if at >= 0:
        raise ValueError(f"contains a NUL character (U+0000) at character {at + 1}")
    return value


def as_name(text: str, limit: int) -> str:
    """``text`` made into a name of at most ``limit`` characters: refused characters and runs of
    white space become one space, and a longer text ends in an ellipsis."""
    plain = " ".join(_NOT_IN_NAMES.sub(" ", text).split())
    if len(plain) <= limit:
        return plain
    return plain[: limit - 1].rstrip() + _ELLIPSIS
