"""An experiment of 10,000 trials on default Airflow settings (`[core] max_map_length` 1,024): it is
accepted, its DAG maps as many trial slots as trials run at once, and its trials are created as the
search needs them, not all at submission."""

from __future__ import annotations

import textwrap
from pathlib import Path

from sqlalchemy import func, select

from det_airflow.dagfactory import build_dags, read_submission
from det_airflow.master import schema
from tests.unit.master.creating import Creator
from tests.unit.master.people_app import People

TEN_THOUSAND = textwrap.dedent(
    """\
    name: sweep
    entrypoint: python3 train.py
    hyperparameters:
      lr: {type: log, base: 10, minval: -4, maxval: -1}
    searcher:
      name: random
      metric: loss
      max_trials: 10000
      max_concurrent_trials: 4
      max_length: {batches: 10}
    """
)


def test_ten_thousand_trials_are_accepted_and_mapped_over_their_concurrency(
    creator: Creator, people: People, tmp_path: Path
) -> None:
    answer = creator.create(config=TEN_THOUSAND)

    assert answer.status_code == 200, answer.text
    experiment = answer.json()["experiment"]
    dags_folder = tmp_path / "dags"
    (path,) = (dags_folder / "experiments").glob("exp_*.yaml")
    submission = read_submission(path.read_text())
    assert submission is not None and submission.trial_slots == 4
    dag = build_dags(dags_folder)[experiment["dag_id"]]
    assert dag.task_dict["trial"].expand_input.value["slot"] == list(range(4))
    with people.db.read() as conn:
        created = conn.execute(
            select(func.count())
            .select_from(schema.trials)
            .where(schema.trials.c.experiment_id == experiment["id"])
        ).scalar_one()
    assert created == 4  # one per slot; the search creates each next trial as one ends
