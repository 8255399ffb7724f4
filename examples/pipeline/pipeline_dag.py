"""An ML pipeline around a det experiment: prepare data → train (a tiny ASHA search) → evaluate the
best checkpoint → publish it. Drop this folder into Airflow's DAGs folder.

It runs whenever the Asset ``det-example://training-data`` is updated: by a DAG of yours that lists
it in ``outlets``, or by hand (`airflow assets materialize` on a producer, or an event posted to
Airflow's REST API). The published model is the Asset ``det-example://published-model``, on which
further DAGs can schedule.

The train task waits deferred while the experiment runs, holding no worker; it needs the ``det_default``
connection that `det admin migrate` creates. The experiment belongs to ``experiment_owner`` below.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Asset, task

from det_airflow.operators.pipeline import DetExperimentOperator

TRAINING_DATA = Asset("det-example://training-data")
PUBLISHED_MODEL = Asset("det-example://published-model")
# The experiment config, inline so that no YAML of it lies in the DAGs folder (each YAML dropped
# there becomes an experiment DAG of its own). A path or a dropped YAML's name works as well.
EXPERIMENT = {
    "name": "pipeline-asha",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1}},
    "searcher": {
        "name": "adaptive_asha",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_trials": 4,
        "max_length": {"batches": 8},
        "max_rungs": 2,
        "divisor": 2,
        "max_concurrent_trials": 2,
    },
    "max_restarts": 0,
}
# The largest validation loss a model may have to be published.
PUBLISH_BELOW = 1.5

with DAG(
    "det_pipeline_example",
    schedule=[TRAINING_DATA],
    catchup=False,
    tags=["det", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def prepare_data() -> str:
        """Stands for your data preparation; the trials read what it leaves in shared storage."""
        return "prepared"

    train = DetExperimentOperator(
        task_id="train",
        config=EXPERIMENT,
        context_dir=str(Path(__file__).parent / "trainer"),
        experiment_owner="airflow",
    )

    @task
    def evaluate(outcome: dict) -> dict:
        """Checks the best checkpoint's validation loss before anything is published."""
        if outcome["best_checkpoint_uuid"] is None:
            raise ValueError(f"experiment {outcome['experiment_id']} left no checkpoint")
        if outcome["best_metric"] > PUBLISH_BELOW:
            raise ValueError(
                f"best {outcome['metric']} {outcome['best_metric']} is not below {PUBLISH_BELOW}"
            )
        return outcome

    @task(outlets=[PUBLISHED_MODEL])
    def publish(outcome: dict, *, outlet_events=None) -> str:
        """Announces the model: downstream DAGs get the checkpoint in the Asset event's extra."""
        outlet_events[PUBLISHED_MODEL].extra = {
            "experiment_id": outcome["experiment_id"],
            "checkpoint_uuid": outcome["best_checkpoint_uuid"],
            outcome["metric"]: outcome["best_metric"],
        }
        return outcome["best_checkpoint_uuid"]

    prepare_data() >> train
    publish(evaluate(train.output))
