"""generate_name: readable names for experiments without one."""

from __future__ import annotations

import random
import re

from det_airflow.config import generate_name


def test_shape() -> None:
    assert re.fullmatch(r"Experiment \([a-z]+-[a-z]+-[a-z]+\)", generate_name())


def test_a_seeded_generator_repeats_its_name() -> None:
    assert generate_name(random.Random(7)) == generate_name(random.Random(7))


def test_names_vary() -> None:
    rng = random.Random(0)
    assert len({generate_name(rng) for _ in range(50)}) > 40
