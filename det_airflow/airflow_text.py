"""Text det writes into Airflow (a DAG's display name, description, docs, tags, owner, params):
cleaned of control sequences, and Markdown-escaped where Airflow renders Markdown.

A user's experiment name or description reaches other users' screens through Airflow's UI and CLI
(`airflow dags details`): it may not move their terminal's cursor or rewrite its title, and in
"Dag Docs" it is shown as the text it is, never as a link or an image loaded from a URL the user chose.
"""

from __future__ import annotations

import re
from typing import Any

# ANSI escape sequences: CSI (ESC [ or C1 0x9b ... final byte), OSC (ESC ] ... BEL or ST), and the
# two-byte ESC sequences; then every other C0/C1 control except newline and tab, DEL, and the
# Unicode bidirectional overrides that reorder how text after them is shown.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -~]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Every ASCII punctuation character may be backslash-escaped in CommonMark; escaping them all leaves
# no link, image, HTML tag, emphasis, heading or autolink to render.
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def plain_text(value: str) -> str:
    """``value`` without terminal escape sequences and control characters (newline and tab stay)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", value))


def plain_values(value: Any) -> Any:
    """:func:`plain_text` applied to every string in a JSON-like value (params' defaults)."""
    if isinstance(value, str):
        return plain_text(value)
    if isinstance(value, list):
        return [plain_values(v) for v in value]
    if isinstance(value, dict):
        return {plain_values(k): plain_values(v) for k, v in value.items()}
    return value


def markdown_text(value: str) -> str:
    """``value`` as literal text inside one Markdown paragraph: cleaned by :func:`plain_text`, on
    one line, every punctuation character escaped."""
    one_line = " ".join(plain_text(value).split())
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", one_line)
