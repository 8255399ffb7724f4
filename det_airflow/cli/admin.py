"""``det admin ...``: operator commands (the lead adds ``det admin migrate`` here)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``admin`` noun and its verbs to the top-level parser; nothing yet."""
