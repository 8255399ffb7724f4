"""`det e download`, `det e set gc-policy`, `det e set log-retention`, `det e create --project_id` and
`det trial logs --source/--stdtype/--container-id` against the master's own routes (the people app on
SQLite, served on loopback), with checkpoint files in a real storage folder."""

from __future__ import annotations

import io
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from det_airflow.master import housekeeping, schema
from det_airflow.master.trial_logs import append_logs
from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import NOW, people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here


# The login the cluster's master takes (test_task_verbs' Bearer <user>-token).
ALICE = {"Authorization": "Bearer alice-token"}


class Tty(io.StringIO):
    """Someone at a terminal, typing the text given."""

    def isatty(self) -> bool:
        return True


def _checkpoint(cluster: Cluster, trial_id: int, uuid: str, *, steps: int, metric: float | None) -> Path:
    """A COMPLETED checkpoint with its files in the storage folder, at ``steps`` with ``metric``."""
    folder = cluster.people.add_checkpoint(trial_id, uuid)
    with cluster.people.db.begin() as conn:
        conn.execute(
            schema.checkpoints.update()
            .where(schema.checkpoints.c.uuid == uuid)
            .values(steps_completed=steps, validation_metric=metric)
        )
    return folder


def _searched(cluster: Cluster, owner: str = "alice") -> tuple[int, int, int, dict[str, Path]]:
    """An ended experiment with two trials and six checkpoints (searcher metric `loss`, smaller is
    better): trial A: a1 (10 batches, 0.5), a2 (20, 0.2), a3 (30, 0.7, its latest); trial B: b1 (10,
    0.9), b2 (20, none), b3 (30, 0.4, its latest)."""
    people = cluster.people
    experiment_id = people.add_experiment(owner=owner, state="COMPLETED")
    trial_a = people.add_trial(experiment_id, state="COMPLETED", latest_checkpoint="a3")
    trial_b = people.add_trial(experiment_id, state="COMPLETED", latest_checkpoint="b3")
    folders = {}
    for trial_id, uuid, steps, metric in (
        (trial_a, "a1", 10, 0.5),
        (trial_a, "a2", 20, 0.2),
        (trial_a, "a3", 30, 0.7),
        (trial_b, "b1", 10, 0.9),
        (trial_b, "b2", 20, None),
        (trial_b, "b3", 30, 0.4),
    ):
        folders[uuid] = _checkpoint(cluster, trial_id, uuid, steps=steps, metric=metric)
    return experiment_id, trial_a, trial_b, folders


def _states(cluster: Cluster, experiment_id: int) -> dict[str, str]:
    with cluster.people.db.read() as conn:
        c = schema.checkpoints.c
        rows = conn.execute(select(c.uuid, c.state).where(c.experiment_id == experiment_id)).all()
    return {uuid: state for uuid, state in rows}


# --- det e download --------------------------------------------------------------------------------


def test_download_writes_the_best_checkpoints_under_the_output_dir(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    experiment_id, trial_a, _, _ = _searched(cluster)
    out = tmp_path / "best"
    result = det("e", "download", str(experiment_id), "--top-n", "2", "-o", str(out))
    assert result.code == 0, result.err
    # The two smallest losses, best first: a2 (0.2), then b3 (0.4).
    assert sorted(p.name for p in out.iterdir()) == ["a2", "b3"]
    assert (out / "a2" / "state.pt").read_bytes() == b"weights"
    first = result.out.split("\n\n\n")[0]
    assert first.startswith(f"Local checkpoint path:\n{out / 'a2'} \n\n")
    header, rows = _table(first.split("\n\n", 1)[1])
    assert header == [
        "Experiment ID",
        "Trial ID",
        "Steps Completed",
        "Report Time",
        "Checkpoint UUID",
        "Validation Metrics",
        "Metadata",
    ]
    assert rows[0][:5] == [str(experiment_id), str(trial_a), "20", "2026-01-01 00:00:00+0000", "a2"]
    assert '"loss": 0.2' in result.out
    assert result.out.index(str(out / "a2")) < result.out.index(str(out / "b3"))

    # -q: the paths only; the default is one checkpoint, into ./checkpoints.
    quiet = det("e", "download", str(experiment_id), "-q", "-o", str(tmp_path / "q"))
    assert (quiet.code, quiet.out) == (0, f"{tmp_path / 'q' / 'a2'}\n")


def test_download_respects_the_searchers_order_and_an_explicit_one(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    experiment_id, _, _, _ = _searched(cluster)
    with cluster.people.db.begin() as conn:
        row = conn.execute(select(schema.experiments).where(schema.experiments.c.id == experiment_id)).one()
        config = {**row.config, "searcher": {**row.config["searcher"], "smaller_is_better": False}}
        conn.execute(
            schema.experiments.update().where(schema.experiments.c.id == experiment_id).values(config=config)
        )
    larger = det("e", "download", str(experiment_id), "-q", "-o", str(tmp_path / "larger"))
    assert larger.out == f"{tmp_path / 'larger' / 'b1'}\n"  # 0.9 is best when larger is better
    smaller = det(
        "e", "download", str(experiment_id), "-q", "-o", str(tmp_path / "s"),
        "--sort-by", "loss", "--smaller-is-better", "true", "--top-n", "6",
    )  # fmt: skip
    # Every COMPLETED checkpoint: those with a validation by it, then b2 (none) last.
    paths = smaller.out.splitlines()
    assert [Path(p).name for p in paths] == ["a2", "b3", "a1", "a3", "b1", "b2"]


def test_download_bad_input_is_one_line(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    experiment_id, _, _, _ = _searched(cluster)
    unknown = det("e", "download", "999", "-o", str(tmp_path / "x"))
    assert (unknown.code, unknown.err) == (1, "Error: experiment 999 not found\n")
    other_metric = det(
        "e", "download", str(experiment_id), "--sort-by", "accuracy", "--smaller-is-better", "false"
    )
    assert other_metric.code == 1
    assert other_metric.err == (
        f"Error: checkpoints of experiment {experiment_id} record the searcher metric 'loss' only: "
        "cannot rank them by 'accuracy'\n"
    )
    alone = det("e", "download", str(experiment_id), "--sort-by", "loss")
    assert alone.err == "Error: --sort-by and --smaller-is-better go together: give both or neither\n"
    zero = det("e", "download", str(experiment_id), "--top-n", "0")
    assert zero.code == 2 and "expected an integer >= 1, got '0'" in zero.err
    empty = cluster.people.add_experiment(owner="alice")
    nothing = det("e", "download", str(empty), "-o", str(tmp_path / "none"))
    assert nothing.err == f"Error: experiment {empty} has no completed checkpoint to download\n"
    assert not (tmp_path / "x").exists() and not (tmp_path / "none").exists()


# --- det e set gc-policy ---------------------------------------------------------------------------

POLICY = ("--save-experiment-best", "1", "--save-trial-best", "0", "--save-trial-latest", "0")


def test_gc_policy_previews_asks_then_deletes_the_files_it_no_longer_keeps(
    det: Any, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment_id, trial_a, trial_b, folders = _searched(cluster)

    # Keep the experiment's best (a2) and each trial's latest (a3, b3: they resume from them).
    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    declined = det("e", "set", "gc-policy", str(experiment_id), *POLICY)
    assert declined.code == 0, declined.err
    preview, rest = declined.out.split("This policy will delete", 1)
    assert preview.startswith(
        "The following checkpoints with validation will be deleted by applying this GC Policy:\n"
    )
    lines = preview.splitlines()[1:]
    assert [cell.strip() for cell in lines[0].split("|")] == [
        "Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources",
    ]  # fmt: skip
    assert lines[1].split("|")[3].strip() == "(loss)"
    rows = [[cell.strip() for cell in line.split("|")] for line in lines[3:]]
    assert rows == [
        [str(trial_a), "10", "COMPLETED", "0.5", "a1", "state.pt"],
        [str(trial_b), "10", "COMPLETED", "0.9", "b1", "state.pt"],
    ]
    assert rest.startswith(" 2 checkpoints with validations and 1 checkpoints without validations.\n")
    assert declined.out.endswith("Do you wish to proceed? [y/N] Aborting operations.\n")
    assert set(_states(cluster, experiment_id).values()) == {"COMPLETED"}

    # No terminal and no --yes: the preview, then a refusal; nothing changes.
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    refused = det("e", "set", "gc-policy", str(experiment_id), *POLICY)
    assert refused.code == 1
    assert refused.err == (
        f"Error: not changing the GC policy of experiment {experiment_id} without confirmation: pass --yes\n"
    )
    assert set(_states(cluster, experiment_id).values()) == {"COMPLETED"}

    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    applied = det("e", "set", "gc-policy", str(experiment_id), *POLICY)
    assert applied.code == 0, applied.err
    assert applied.out.endswith(
        f"Set GC policy of experiment {experiment_id} to\n"
        "{'save_experiment_best': 1, 'save_trial_best': 0, 'save_trial_latest': 0}\n"
        "Deleted 3 checkpoints: a1, b1, b2\n"
    )
    assert _states(cluster, experiment_id) == {
        "a1": "DELETED", "a2": "COMPLETED", "a3": "COMPLETED",
        "b1": "DELETED", "b2": "DELETED", "b3": "COMPLETED",
    }  # fmt: skip
    # The files go as every checkpoint deletion's do: removed by whoever has them.
    cluster.people.remove_files()
    assert {uuid for uuid, folder in folders.items() if folder.exists()} == {"a2", "a3", "b3"}
    config = det("e", "config", str(experiment_id)).out
    assert "save_experiment_best: 1\n" in config and "save_trial_latest: 0\n" in config


def test_gc_policy_with_yes_skips_the_preview_and_later_gc_keeps_the_policy(
    det: Any, cluster: Cluster
) -> None:
    experiment_id, _, _, folders = _searched(cluster)
    result = det(
        "e", "set", "gc-policy", str(experiment_id),
        "--save-experiment-best", "0", "--save-trial-best", "1", "--save-trial-latest", "0", "--yes",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.out.startswith(f"Set GC policy of experiment {experiment_id} to\n")
    assert "will be deleted" not in result.out
    # Each trial's best (a2, b3) and latest (a3, b3) stay.
    assert {u for u, s in _states(cluster, experiment_id).items() if s == "COMPLETED"} == {"a2", "a3", "b3"}
    cluster.people.remove_files()
    assert not folders["a1"].exists() and folders["a2"].exists()


def test_gc_policy_refusals(det: Any, cluster: Cluster) -> None:
    experiment_id, _, _, folders = _searched(cluster)
    cluster.login("bob")
    others = det("e", "set", "gc-policy", str(experiment_id), *POLICY, "--yes")
    assert others.code == 1
    assert others.err == (
        f"Error: permission denied: user 'bob' may not change the checkpoint policy of experiment "
        f"{experiment_id}: it belongs to 'alice'; only its owner or an admin may change it\n"
    )
    negative = det("e", "set", "gc-policy", str(experiment_id), "--save-experiment-best", "-1",
                   "--save-trial-best", "0", "--save-trial-latest", "0", "--yes")  # fmt: skip
    assert negative.code == 2
    assert "--save-experiment-best: expected a number of checkpoints >= 0, got '-1'" in negative.err
    missing = det("e", "set", "gc-policy", str(experiment_id), "--save-trial-best", "0", "--yes")
    assert missing.code == 2 and "--save-experiment-best" in missing.err
    cluster.login("admin")
    unknown = det("e", "set", "gc-policy", "999", *POLICY, "--yes")
    assert (unknown.code, unknown.err) == (1, "Error: experiment 999 not found\n")
    assert set(_states(cluster, experiment_id).values()) == {"COMPLETED"}
    # The master checks the numbers too, for callers other than this CLI.
    answer = cluster.people.call(
        "alice",
        "PUT",
        f"/experiments/{experiment_id}/gc-policy",
        json={"save_experiment_best": -1, "save_trial_best": 0, "save_trial_latest": 0},
        headers=ALICE,
    )
    assert answer.status_code == 422 and "save_experiment_best" in answer.text
    admin = det("e", "set", "gc-policy", str(experiment_id), *POLICY, "--yes")  # an admin may
    assert admin.code == 0, admin.err
    assert all(folder.exists() for folder in folders.values())  # not yet removed by a host


# --- det e set log-retention -----------------------------------------------------------------------


def _ended_trial_with_logs(cluster: Cluster, days_ago: int) -> tuple[int, int]:
    people = cluster.people
    experiment_id = people.add_experiment(owner="alice", state="COMPLETED")
    trial_id = people.add_trial(experiment_id, state="COMPLETED")
    with people.db.begin() as conn:
        end = NOW - timedelta(days=days_ago)
        conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(end_time=end))
    return experiment_id, trial_id


def _log_count(cluster: Cluster, trial_id: int) -> int:
    with cluster.people.db.read() as conn:
        c = schema.trial_logs.c
        return len(conn.execute(select(c.id).where(c.trial_id == trial_id)).all())


def test_log_retention_is_kept_per_experiment_by_the_retention_job(
    det: Any, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from det_airflow.master import trial_logs

    monkeypatch.setenv("AIRFLOW__DET__LOG_RETENTION_DAYS", "30")  # the cluster's default
    monkeypatch.setattr(trial_logs, "now", lambda: NOW)
    short, short_trial = _ended_trial_with_logs(cluster, days_ago=5)
    forever, forever_trial = _ended_trial_with_logs(cluster, days_ago=100)
    _, default_old = _ended_trial_with_logs(cluster, days_ago=100)
    _, default_recent = _ended_trial_with_logs(cluster, days_ago=5)

    set_short = det("e", "set", "log-retention", str(short), "--days", "3")
    assert (set_short.code, set_short.out) == (
        0,
        f"Set log retention of experiment {short}: logs are kept for 3 days after each trial ends\n",
    )
    set_forever = det("e", "set", "log-retention", str(forever), "--forever")
    assert set_forever.out == f"Set log retention of experiment {forever}: logs are kept forever\n"
    assert "log_retention_days: 3\n" in det("e", "config", str(short)).out

    assert housekeeping.run_job(housekeeping.DELETE_EXPIRED_LOGS, cluster.people.db)
    assert _log_count(cluster, short_trial) == 0  # 3 days of its own, ended 5 days ago
    assert _log_count(cluster, forever_trial) == 1  # forever, past the cluster's 30 days
    assert _log_count(cluster, default_old) == 0  # the cluster's 30 days
    assert _log_count(cluster, default_recent) == 1


def test_log_retention_refusals(det: Any, cluster: Cluster) -> None:
    experiment_id, trial_id = _ended_trial_with_logs(cluster, days_ago=5)
    both = det("e", "set", "log-retention", str(experiment_id), "--days", "3", "--forever")
    assert both.code == 2 and "argument --forever: not allowed with argument --days" in both.err
    neither = det("e", "set", "log-retention", str(experiment_id))
    assert neither.code == 1
    assert neither.err == (
        "Error: give --days N (days to keep the logs from the end of each trial, e.g. "
        f"`det e set log-retention {experiment_id} --days 50`) or --forever\n"
    )
    for days in ("-2", "32768", "many"):
        out_of_range = det("e", "set", "log-retention", str(experiment_id), "--days", days)
        assert out_of_range.code == 2
    assert (
        "expected -1 (forever) to 32767 days, got '-2'"
        in det("e", "set", "log-retention", str(experiment_id), "--days", "-2").err
    )
    cluster.login("bob")
    others = det("e", "set", "log-retention", str(experiment_id), "--days", "1")
    assert others.code == 1
    assert others.err == (
        f"Error: permission denied: user 'bob' may not change the log retention of experiment "
        f"{experiment_id}: it belongs to 'alice'; only its owner or an admin may change it\n"
    )
    unknown = det("e", "set", "log-retention", "999", "--forever")
    assert (unknown.code, unknown.err) == (1, "Error: experiment 999 not found\n")
    config = cluster.people.experiment(experiment_id).config
    assert "retention_policy" not in config  # nothing stored by the refusals


# --- det e create --project_id ---------------------------------------------------------------------

CONFIG = textwrap.dedent(
    """\
    name: placed
    entrypoint: python3 train.py
    searcher: {name: single, metric: loss, max_length: {batches: 10}}
    """
)


def _project(det: Any, cluster: Cluster) -> int:
    cluster.login("admin")
    assert det("workspace", "create", "research").code == 0
    cluster.login("alice")
    made = det("p", "create", "research", "vision")
    assert made.code == 0, made.err
    return int(_table(made.out)[1][0][0])


def test_create_in_a_project_by_id(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    project_id = _project(det, cluster)
    config = tmp_path / "const.yaml"
    config.write_text(CONFIG)
    created = det("e", "create", str(config), "--project_id", str(project_id), "--paused")
    assert created.code == 0, created.err
    experiment_id = int(created.out.strip().rsplit(" ", 1)[1])
    assert cluster.people.experiment(experiment_id).project_id == project_id
    header, rows = _table(det("project", "list-experiments", "research", "vision").out)
    assert [row[0] for row in rows] == [str(experiment_id)]
    # The same project named in the config as well is no conflict.
    config.write_text(CONFIG + "workspace: research\nproject: vision\n")
    again = det("e", "create", str(config), "--project-id", str(project_id), "--paused")
    assert again.code == 0, again.err


def test_create_in_a_project_refusals(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    project_id = _project(det, cluster)
    config = tmp_path / "const.yaml"
    config.write_text(CONFIG)
    cluster.login("bob")
    others = det("e", "create", str(config), "--project_id", str(project_id))
    assert others.code == 1
    assert others.err == (
        "Error: permission denied: user 'bob' may not create experiments in project 'vision' of "
        "workspace 'research': it belongs to 'alice', its workspace 'research' to 'admin'; only they "
        "or an admin may\n"
    )
    cluster.login("alice")
    unknown = det("e", "create", str(config), "--project_id", "99")
    assert (unknown.code, unknown.err) == (1, "Error: project 99 not found\n")
    config.write_text(CONFIG + "workspace: Uncategorized\nproject: Uncategorized\n")
    conflict = det("e", "create", str(config), "--project_id", str(project_id))
    assert conflict.err == (
        "Error: the config names project 'Uncategorized' of workspace 'Uncategorized', but project_id "
        f"{project_id} is project 'vision' of workspace 'research': give one of them\n"
    )
    config.write_text(CONFIG)
    with cluster.people.db.begin() as conn:
        conn.execute(schema.projects.update().where(schema.projects.c.id == project_id).values(archived=True))
    archived = det("e", "create", str(config), "--project_id", str(project_id))
    assert archived.err == (
        "Error: project 'vision' of workspace 'research' is archived: experiments cannot be created in it\n"
    )
    local = det("e", "create", str(config), "--project_id", str(project_id), "--local", "--test-mode")
    assert local.err == (
        "Error: --project_id places the experiment on the master: it cannot be used with --local\n"
    )
    bad = det("e", "create", str(config), "--project_id", "0")
    assert bad.code == 2
    with cluster.people.db.read() as conn:
        assert conn.execute(select(schema.experiments.c.id)).all() == []


# --- det trial logs --source / --stdtype / --container-id ------------------------------------------


def test_trial_logs_filters_by_source_stream_and_container_on_the_master(det: Any, cluster: Cluster) -> None:
    experiment_id = cluster.people.add_experiment(owner="alice")
    trial_id = cluster.people.add_trial(experiment_id, state="RUNNING")
    with cluster.people.db.begin() as conn:
        conn.execute(schema.trial_logs.delete().where(schema.trial_logs.c.trial_id == trial_id))
        append_logs(
            conn,
            trial_id,
            [
                {"message": "training", "stdtype": "stdout", "container_id": "c1", "rank": 0},
                {"message": "a warning", "stdtype": "stderr", "container_id": "c1", "rank": 0},
                {"message": "rank 1 noise", "stdtype": "stderr", "container_id": "c2", "rank": 1},
            ],
            source="task",
        )
        append_logs(conn, trial_id, [{"message": "preempted", "level": "WARNING"}])  # the master's

    def messages(*flags: str) -> list[str]:
        result = det("trial", "logs", str(trial_id), *flags)
        assert result.code == 0, result.err
        return [line.split("|| ", 1)[1] for line in result.out.splitlines()]

    assert messages() == ["INFO: training", "INFO: a warning", "INFO: rank 1 noise", "WARNING: preempted"]
    assert messages("--source", "task", "--stdtype", "stderr") == ["INFO: a warning", "INFO: rank 1 noise"]
    assert messages("--source", "master") == ["WARNING: preempted"]
    assert messages("--stdtype", "stderr", "--container-id", "c2") == ["INFO: rank 1 noise"]
    assert messages("--container-id", "c1", "--container-id", "c2", "--tail", "1") == ["INFO: rank 1 noise"]
    json_line = det("t", "logs", str(trial_id), "--source", "master", "--json").out
    assert '"source": "master"' in json_line
    # The master filters: only matching lines travel.
    answer = cluster.people.call(
        "alice", "GET", f"/trials/{trial_id}/logs", params={"stdtype": "stdout"}, headers=ALICE
    )
    assert [line["message"] for line in answer.json()["logs"]] == ["training", "preempted"]
    bad = det("trial", "logs", str(trial_id), "--source", "agent")
    assert bad.code == 2 and "invalid choice: 'agent'" in bad.err
    refused = cluster.people.call(
        "alice", "GET", f"/trials/{trial_id}/logs", params={"source": "agent"}, headers=ALICE
    )
    assert refused.status_code == 422 and "source" in refused.text
