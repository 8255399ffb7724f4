"""Secrets in a config are masked for people who are neither the owner nor an admin."""

from __future__ import annotations

from det_airflow.master.serialize import MASK, masked_config


def test_every_kind_of_secret_is_masked_and_the_rest_is_kept() -> None:
    config = {
        "name": "exp",
        "environment": {
            "environment_variables": {"cpu": ["A=1", "B=two=2"], "cuda": ["C=3"]},
            "registry_auth": {"username": "me", "password": "pw", "serveraddress": "r.example"},
            "image": "python:3.11",
        },
        "checkpoint_storage": {
            "type": "s3",
            "bucket": "b",
            "access_key": "ak",
            "secret_key": "sk",
            "endpoint_url": None,
        },
        "data": {"secrets": {"db": "pw", "api": {"nested": "x"}}, "path": "/data"},
    }
    masked = masked_config(config)
    assert masked == {
        "name": "exp",
        "environment": {
            "environment_variables": {"cpu": [f"A={MASK}", f"B={MASK}"], "cuda": [f"C={MASK}"]},
            "registry_auth": {"username": "me", "password": MASK, "serveraddress": "r.example"},
            "image": "python:3.11",
        },
        "checkpoint_storage": {
            "type": "s3",
            "bucket": "b",
            "access_key": MASK,
            "secret_key": MASK,
            "endpoint_url": None,
        },
        "data": {"secrets": {"db": MASK, "api": MASK}, "path": "/data"},
    }
    assert config["environment"]["environment_variables"]["cpu"] == ["A=1", "B=two=2"]  # a copy is masked


def test_a_variable_without_a_value_and_a_non_dict_secrets_section_are_masked_whole() -> None:
    masked = masked_config({"environment": {"environment_variables": ["JUSTNAME"]}, "data": {"secrets": "s"}})
    assert masked == {"environment": {"environment_variables": [MASK]}, "data": {"secrets": MASK}}


def test_a_config_without_secrets_is_unchanged() -> None:
    config = {"name": "exp", "searcher": {"name": "single"}}
    assert masked_config(config) == config
