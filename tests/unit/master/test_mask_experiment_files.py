"""`det admin migrate` masks the secrets of experiment files that versions before masking wrote in
plain text into the DAGs folder, parsed and retired alike, and leaves every other file alone."""

from __future__ import annotations

from pathlib import Path

import yaml

from det_airflow.dagfactory import FINISHED_SUBDIR, experiment_file
from det_airflow.master import admin
from det_airflow.master.serialize import MASK
from tests.unit.master.people_app import People

SECRETS = ("wandb-secret", "storage-secret", "data-secret")


def _write_plain(people: People, path: Path, experiment_id: int) -> None:
    """A file as det-airflow wrote it before masking: the whole stored config."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config = people.experiment(experiment_id).config
    path.write_text(
        f"# Experiment {experiment_id}, written by the det master. Do not edit.\n" + yaml.safe_dump(config)
    )


def test_old_plain_text_files_are_rewritten_masked_and_counted(people: People, tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    parsed, retired, untouched = (people.add_experiment(owner="alice") for _ in range(3))
    parsed_file = experiment_file(dags, parsed)
    retired_file = experiment_file(dags, retired).parent / FINISHED_SUBDIR / f"exp_{retired}.yaml"
    _write_plain(people, parsed_file, parsed)
    _write_plain(people, retired_file, retired)
    stray = experiment_file(dags, 999)  # no stored experiment: not ours to change
    stray.write_text("name: stray\nenvironment:\n  environment_variables: [KEY=stray-secret]\n")

    assert admin.mask_experiment_files(people.db) == (2, 2)

    for path in (parsed_file, retired_file):
        text = path.read_text()
        assert not [s for s in SECRETS if s in text], f"{path} still holds a secret:\n{text}"
        config = yaml.safe_load(text)
        assert config["environment"]["environment_variables"] == [f"WANDB_API_KEY={MASK}", f"PLAIN={MASK}"]
        assert config["data"]["url"] == "https://example.org"
        assert config["entrypoint"] == "python3 train.py"
    assert "stray-secret" in stray.read_text()
    assert not experiment_file(dags, untouched).exists()
    # What the master stores (and trials get) keeps the real values.
    assert people.experiment(parsed).config["checkpoint_storage"]["access_key"] == "storage-secret"


def test_a_second_run_rewrites_nothing(people: People, tmp_path: Path) -> None:
    e = people.add_experiment(owner="alice")
    _write_plain(people, experiment_file(tmp_path / "dags", e), e)
    assert admin.rewrite_summary(*admin.mask_experiment_files(people.db)) == (
        "experiment files: rewrote 1 of 1 with secrets masked"
    )
    assert admin.rewrite_summary(*admin.mask_experiment_files(people.db)) == (
        "experiment files: rewrote 0 of 1 with secrets masked"
    )


def test_no_files_is_said_plainly(people: People) -> None:
    people.add_experiment(owner="alice")
    assert admin.rewrite_summary(*admin.mask_experiment_files(people.db)) == (
        "experiment files: none in the DAGs folder"
    )
