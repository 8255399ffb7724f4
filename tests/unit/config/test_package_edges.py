"""The det_airflow.config package loads its public names on first use (PEP 562): each name resolves
to its home module's object, stays resolved, shows in dir(), and an unknown name is an AttributeError."""

from __future__ import annotations

import importlib

import pytest

import det_airflow.config as config

HOMES = [
    ("read_yaml", "det_airflow.config._yaml"),
    ("parse_config", "det_airflow.config._load"),
    ("MAX_CONFIG_BYTES", "det_airflow.config._limits"),
    ("Length", "det_airflow.config._types"),
]


@pytest.mark.parametrize(("name", "home"), HOMES, ids=[name for name, _ in HOMES])
def test_a_public_name_is_loaded_from_its_module_on_first_use_and_kept(
    name: str, home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(vars(config), name, raising=False)  # as if not used yet in this process
    expected = getattr(importlib.import_module(home), name)

    assert getattr(config, name) is expected
    assert getattr(config, name) is expected  # the second use reads what the first one kept


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError) as info:
        config.parse_yaml  # type: ignore[attr-defined]  # noqa: B018

    assert str(info.value) == "module 'det_airflow.config' has no attribute 'parse_yaml'"
    assert not hasattr(config, "parse_yaml")


def test_dir_lists_every_public_name_before_it_is_used() -> None:
    names = dir(config)

    assert set(config.__all__) <= set(names)
    assert names == sorted(names)
