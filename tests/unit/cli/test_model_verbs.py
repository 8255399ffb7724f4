"""`det model ...` and Determined's client calls for the model registry, against the master's own
routes (the people app on SQLite, served on loopback): what a user sees made, registered and refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from det_airflow import compat
from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here

UUID = "c0ffee00-0000-4000-8000-0000000000aa"


def _checkpoint(cluster: Cluster, *, owner: str = "alice") -> int:
    experiment_id = cluster.people.add_experiment(owner=owner, state="COMPLETED")
    trial_id = cluster.people.add_trial(experiment_id, state="COMPLETED")
    cluster.people.add_checkpoint(trial_id, UUID)
    return trial_id


def test_a_model_is_created_a_checkpoint_registered_and_both_listed(det: Any, cluster: Cluster) -> None:
    trial_id = _checkpoint(cluster)
    created = det("model", "create", "mnist", "--description", "digits")
    assert created.code == 0, created.err
    header, rows = _table(created.out)
    assert header[:4] == ["ID", "Name", "Owner", "Description"]
    assert rows[0][:4] == ["1", "mnist", "alice", "digits"]

    registered = det("model", "register-version", "mnist", UUID)
    assert registered.code == 0, registered.err
    version_table = registered.out.split("\n\n")[1]
    header, rows = _table(version_table)
    assert header == ["Version #", "Trial ID", "Batch #", "Checkpoint UUID", "Validation Metrics", "Metadata"]
    assert rows[0][:4] == ["1", str(trial_id), "10", UUID]
    assert '"loss": 0.5' in version_table

    header, rows = _table(det("model", "list").out)
    assert header == ["ID", "Name", "Owner", "Workspace ID", "Creation Time", "Last Updated Time", "Metadata"]
    assert [row[:4] for row in rows] == [["1", "mnist", "alice", "1"]]
    listed = json.loads(det("m", "list-versions", "mnist", "--json").out)
    assert [v["checkpoint"]["uuid"] for v in listed["model_versions"]] == [UUID]
    described = det("model", "describe", "mnist")
    assert described.code == 0 and UUID in described.out


def test_bad_input_gets_one_clear_line(det: Any, cluster: Cluster) -> None:
    _checkpoint(cluster)
    assert det("model", "create", "mnist").code == 0
    again = det("model", "create", "mnist")
    assert again.code == 1
    assert "'alice' already has a model named 'mnist'" in again.err and again.err.count("\n") == 1
    unknown = det("model", "register-version", "mnist", "no-such-uuid")
    assert unknown.code == 1
    assert "checkpoint no-such-uuid not found" in unknown.err and unknown.err.count("\n") == 1
    missing = det("model", "describe", "other")
    assert missing.code == 1 and "model 'other' not found" in missing.err


def test_another_users_model_is_read_with_owner_and_never_changed(det: Any, cluster: Cluster) -> None:
    _checkpoint(cluster)
    assert det("model", "create", "resnet").code == 0
    assert det("model", "register-version", "resnet", UUID).code == 0
    cluster.login("bob")
    refused = det("model", "register-version", "resnet", UUID)
    assert refused.code == 1
    assert refused.err == (
        "Error: permission denied: user 'bob' may not register a version of model 'resnet': it belongs "
        "to 'alice'; only its owner or an admin may\n"
    )
    # His own model of that name is his; alice's stays hers, read with --owner.
    assert det("model", "create", "resnet").code == 0
    header, rows = _table(det("model", "list").out)
    assert sorted(row[1:3] for row in rows) == [["resnet", "alice"], ["resnet", "bob"]]
    hers = det("model", "describe", "resnet", "--owner", "alice")
    assert hers.code == 0 and UUID in hers.out and _table(hers.out.split("\n\n")[0])[1][0][2] == "alice"
    cluster.login("viewer")
    ambiguous = det("model", "describe", "resnet")
    assert ambiguous.code == 1 and ambiguous.err.count("\n") == 1
    assert "say whose (the CLI's --owner" in ambiguous.err


def test_user_code_uses_determineds_client_for_the_registry(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _checkpoint(cluster)
    cluster.login("alice")
    monkeypatch.syspath_prepend(str(compat.determined_root()))  # `import determined`, as in a trial
    from determined.experimental import Model, client

    model = client.create_model("mnist", description="digits", labels=["cnn"])
    assert isinstance(model, Model) and (model.name, model.labels) == ("mnist", ["cnn"])
    version = client.get_model("mnist").register_version(UUID)
    assert (version.model_version, version.checkpoint.uuid) == (1, UUID)

    model = client.get_model("mnist")
    model.add_label("prod")
    model.remove_label("cnn")
    model.set_description("handwritten digits")
    model.add_metadata({"framework": "torch"})
    again = client.get_model(model.model_id)
    assert (again.labels, again.description, again.metadata) == (
        ["prod"],
        "handwritten digits",
        {"framework": "torch"},
    )
    assert [v.checkpoint.uuid for v in again.get_versions()] == [UUID]
    latest = again.get_version()
    assert latest is not None and latest.model_version == 1
    latest.set_notes("best so far")
    assert again.get_version(1).notes == "best so far"  # type: ignore[union-attr]
    assert again.get_version(7) is None
    assert [m.name for m in client.get_models(labels=["prod"])] == ["mnist"]
    again.archive()
    assert client.get_model("mnist").archived
