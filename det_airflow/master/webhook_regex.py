"""TASK_LOG webhooks' regular expressions, run by RE2 (``google-re2``): its matching time grows
with the line's length only, never exponentially, so no pattern can stall the master
(``(a+)+$`` on a long line of ``a`` costs what any other pattern does). Patterns RE2 cannot run in
linear time (backreferences, lookarounds) or whose program would be too large are refused when the
webhook is created; lines are matched on their first MAX_MATCHED_CHARS characters.
"""

from __future__ import annotations

from typing import Any

import re2

from det_airflow.errors import DetError

# A line is matched on this many characters at most; the event carries as many.
MAX_MATCHED_CHARS = 4096
# Memory for one compiled pattern (RE2's default): a larger program is refused, not built.
MAX_PROGRAM_BYTES = 8 << 20


class RegexRefused(DetError):
    """A pattern RE2 will not run; the message says why."""


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_BYTES
    options.log_errors = False  # a refused pattern is the user's error, answered to them, not logged
    return options


def compile_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2; raises :class:`RegexRefused` with RE2's reason."""
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise RegexRefused(text) from None


def search(compiled: Any, line: str) -> bool:
    """Whether ``compiled`` is found in the first MAX_MATCHED_CHARS characters of ``line``."""
    text = line[:MAX_MATCHED_CHARS]
    try:
        return compiled.search(text) is not None
    except UnicodeEncodeError:  # RE2 reads UTF-8: a lone surrogate (JSON allows "\ud800") becomes "?"
        return compiled.search(text.encode("utf-8", "replace").decode("utf-8")) is not None
