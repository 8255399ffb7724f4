"""Readable names for experiments that do not set ``name``."""

from __future__ import annotations

import random

_ADJECTIVES = (
    "brave", "calm", "clever", "eager", "fancy", "gentle", "happy", "jolly", "keen", "lively",
    "lucky", "merry", "nimble", "proud", "quick", "quiet", "bold", "shy", "swift", "witty",
)  # fmt: skip
_COLORS = (
    "amber", "azure", "blue", "bronze", "coral", "crimson", "golden", "green", "indigo", "ivory",
    "jade", "lilac", "olive", "orange", "pink", "plum", "red", "silver", "teal", "violet",
)  # fmt: skip
_ANIMALS = (
    "badger", "beaver", "bison", "camel", "crane", "dolphin", "falcon", "ferret", "gecko", "heron",
    "ibex", "koala", "lemur", "lynx", "marmot", "otter", "panda", "puffin", "raven", "walrus",
)  # fmt: skip


def generate_name(rng: random.Random | None = None) -> str:
    """A name such as ``Experiment (brave-blue-otter)``.

    Args:
        rng: Source of randomness; pass a seeded ``random.Random`` for a repeatable name.
    """
    rng = rng or random.Random()
    return f"Experiment ({rng.choice(_ADJECTIVES)}-{rng.choice(_COLORS)}-{rng.choice(_ANIMALS)})"
