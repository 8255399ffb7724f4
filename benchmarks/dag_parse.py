"""DAG parse time: how parsing ``dags/det_experiments.py`` grows with the stored experiments.

For 10, 100 and 1,000 experiment YAMLs in a temporary DAGs folder (as ``det experiment create``
leaves them: ``experiments/exp_<id>.yaml``, a mix of searchers), it times, best of ``--repeat``:

- ``build_dags()``: what importing the factory file costs (bounded by ``[core] dagbag_import_timeout``);
- a real Airflow ``DagBag`` over the folder: import, validation and bagging, as the DAG processor does;
- serializing every DAG, which the DAG processor does next (together with the import bounded by
  ``[dag_processor] dag_file_processor_timeout``);
- ``build_dags(only_dag_id=...)``: what a task process pays (``get_parsing_context()``);
- the largest case again with all but 10 experiments finished, their configs retired by
  ``retire_experiment_file`` as the master does when an experiment ends: the 10 still running get
  their full DAG, the most recent ``[det] finished_experiment_dags`` finished ones a light DAG that
  keeps them listed in Airflow.

Ratios are against the 10-experiment case of the same run; the 1,000 case is also shown as a
fraction of Airflow's two timeouts.

    .venv/bin/python benchmarks/dag_parse.py [--sizes 10 100 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIGS = [
    """\
name: const {i}
entrypoint: python3 train.py
hyperparameters: {{learning_rate: 1.0, global_batch_size: 64}}
searcher: {{name: single, metric: validation_loss, max_length: {{batches: 937}}}}
resources: {{slots_per_trial: 1, priority: {priority}}}
max_restarts: 3
""",
    """\
name: random {i}
entrypoint: python3 train.py
hyperparameters:
  learning_rate: {{type: log, minval: -4, maxval: -1, base: 10}}
  n_filters: {{type: int, minval: 8, maxval: 64}}
  global_batch_size: 64
searcher: {{name: random, metric: validation_loss, max_trials: 16, max_length: {{batches: 500}}}}
resources: {{priority: {priority}}}
""",
    """\
name: adaptive {i}
entrypoint: python3 -m det_airflow.launchers.torch_distributed --trial model_def:MNistTrial
hyperparameters:
  learning_rate: {{type: double, minval: 0.0001, maxval: 1.0}}
  dropout: {{type: double, minval: 0.2, maxval: 0.8}}
  global_batch_size: 64
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_trials: 16
  time_metric: batches
  max_time: 937
environment:
  image: {{cpu: python:3.11, gpu: pytorch/pytorch:latest}}
checkpoint_storage: {{type: shared_fs, host_path: /tmp/ckpt, save_trial_best: 2}}
""",
]


def populate(folder: Path, count: int) -> None:
    shutil.copy(REPO / "dags" / "det_experiments.py", folder / "det_experiments.py")
    (folder / "experiments").mkdir()
    for i in range(1, count + 1):
        text = CONFIGS[i % len(CONFIGS)].format(i=i, priority=1 + i % 99)
        (folder / "experiments" / f"exp_{i}.yaml").write_text(text)


def best_of(repeat: int, run: Callable[[], object]) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="det-dag-parse-") as tmp:
        os.environ.setdefault("AIRFLOW_HOME", str(Path(tmp) / "airflow-home"))
        os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"  # no database needed to bag DAGs

        from airflow.configuration import conf
        from airflow.dag_processing.dagbag import DagBag
        from airflow.serialization.serialized_objects import DagSerialization

        from det_airflow.dagfactory import build_dags, retire_experiment_file

        import_timeout = conf.getfloat("core", "dagbag_import_timeout")
        processor_timeout = conf.getfloat("dag_processor", "dag_file_processor_timeout")
        rows = []
        for size in args.sizes:
            folder = Path(tmp) / f"dags-{size}"
            folder.mkdir()
            populate(folder, size)
            build_s, dags = best_of(args.repeat, lambda folder=folder: build_dags(folder))
            assert isinstance(dags, dict) and len(dags) == size, f"expected {size} DAGs, got {dags}"
            bag_s, bag = best_of(
                args.repeat,
                lambda folder=folder: DagBag(dag_folder=str(folder / "det_experiments.py")),
            )
            assert isinstance(bag, DagBag) and not bag.import_errors, bag.import_errors  # type: ignore[union-attr]
            serialize_s, _ = best_of(
                args.repeat, lambda bag=bag: [DagSerialization.to_dict(d) for d in bag.dags.values()]
            )
            only_s, only = best_of(
                args.repeat,
                lambda folder=folder, size=size: build_dags(folder, only_dag_id=f"det_exp_{size}"),
            )
            assert isinstance(only, dict) and list(only) == [f"det_exp_{size}"]
            rows.append((size, build_s, bag_s, serialize_s, only_s))

        size = args.sizes[-1]
        folder = Path(tmp) / f"dags-{size}"
        for experiment_id in range(1, size - 9):
            retire_experiment_file(folder, experiment_id)
        from det_airflow.settings import FINISHED_EXPERIMENT_DAGS

        listed = min(size - 10, FINISHED_EXPERIMENT_DAGS)  # finished experiments keeping a DAG
        retired_build_s, dags = best_of(args.repeat, lambda: build_dags(folder))
        assert isinstance(dags, dict) and len(dags) == 10 + listed, (
            f"expected {10 + listed} DAGs, got {len(dags)}"
        )  # type: ignore[arg-type]
        retired_bag_s, retired_bag = best_of(
            args.repeat, lambda: DagBag(dag_folder=str(folder / "det_experiments.py"))
        )
        retired_serialize_s, _ = best_of(
            args.repeat,
            lambda: [DagSerialization.to_dict(d) for d in retired_bag.dags.values()],  # type: ignore[union-attr]
        )

        base = rows[0]
        print(f"DAG parse time, best of {args.repeat} (ratios against {base[0]} experiments)")
        print(
            f"{'experiments':>11}  {'build_dags s':>12}  {'ratio':>6}  {'DagBag s':>9}  {'ratio':>6}  "
            f"{'serialize s':>11}  {'per exp ms':>10}  {'task process s':>14}"
        )
        for size, build_s, bag_s, serialize_s, only_s in rows:
            print(
                f"{size:>11}  {build_s:>12.3f}  {build_s / base[1]:>6.1f}  {bag_s:>9.3f}  {bag_s / base[2]:>6.1f}  "
                f"{serialize_s:>11.3f}  {1000 * bag_s / size:>10.2f}  {only_s:>14.3f}"
            )
        print(
            f"{size:>11}  {retired_build_s:>12.3f}  {retired_build_s / base[1]:>6.1f}  {retired_bag_s:>9.3f}  "
            f"{retired_bag_s / base[2]:>6.1f}  {retired_serialize_s:>11.3f}  "
            f"(all but 10 finished: 10 running DAGs + the {listed} most recent finished ones, light)"
        )
        running_ms = 1000 * (rows[-1][2] + rows[-1][3]) / rows[-1][0]
        finished_ms = 1000 * (retired_bag_s + retired_serialize_s - base[2] - base[3]) / max(listed, 1)
        print(
            f"per DAG, bagging + serialization: a running experiment's {running_ms:.2f} ms, a finished "
            f"one's {finished_ms:.2f} ms ({finished_ms / running_ms:.2f}x)"
        )
        size, build_s, bag_s, serialize_s, _ = rows[-1]
        print(
            f"\n{size} experiments: the import (build_dags) uses {build_s / import_timeout:.0%} of "
            f"dagbag_import_timeout ({import_timeout:g} s); import + bagging + serialization uses "
            f"{(bag_s + serialize_s) / processor_timeout:.0%} of dag_file_processor_timeout ({processor_timeout:g} s)"
        )


if __name__ == "__main__":
    main()
