"""Config templates through the master's routes: who may set, read, replace and remove them, their
secrets kept from other readers, and experiments created with a template laid under their config."""

from __future__ import annotations

import textwrap
from typing import Any

from det_airflow.master.templates import merge
from tests.unit.master.creating import Creator, load_yaml
from tests.unit.master.people_app import People

TEMPLATE = textwrap.dedent(
    """\
    description: from the template
    resources: {priority: 3, slots_per_trial: 1}
    max_restarts: 9
    environment:
      environment_variables: [TOKEN=template-secret, SHARED=template]
    bind_mounts:
      - {host_path: /data, container_path: /data}
      - {host_path: /other, container_path: /mnt}
    """
)
PARTIAL = textwrap.dedent(
    """\
    name: tiny
    entrypoint: python3 train.py
    searcher: {name: single, metric: loss, max_length: {batches: 10}}
    resources: {priority: 7}
    environment:
      environment_variables: [SHARED=experiment]
    bind_mounts:
      - {host_path: /mine, container_path: /mnt}
    """
)


def put(people: People, user: str, name: str, config: str) -> Any:
    return people.call(user, "PUT", f"/templates/{name}", json={"config": config})


def test_a_template_is_set_listed_described_replaced_and_removed(people: People) -> None:
    answer = put(people, "alice", "base", TEMPLATE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["template"]["owner"] == "alice"
    assert answer.json()["template"]["config"]["resources"] == {"priority": 3, "slots_per_trial": 1}

    listed = people.call("bob", "GET", "/templates").json()["templates"]
    assert [t["name"] for t in listed] == ["base"]
    assert put(people, "alice", "base", "max_restarts: 1\n").status_code == 200
    assert people.call("alice", "GET", "/templates/base").json()["template"]["config"] == {"max_restarts": 1}

    assert people.call("alice", "DELETE", "/templates/base").status_code == 200
    missing = people.call("alice", "GET", "/templates/base")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "template 'base' not found"


def test_others_read_a_template_with_its_secrets_masked(people: People) -> None:
    assert put(people, "alice", "base", TEMPLATE).status_code == 200
    seen_by_owner = people.call("alice", "GET", "/templates/base").text
    assert "template-secret" in seen_by_owner
    for reader in ("bob", "viewer"):
        seen = people.call(reader, "GET", "/templates/base")
        assert seen.status_code == 200
        assert "template-secret" not in seen.text
        assert "template-secret" not in people.call(reader, "GET", "/templates").text
    assert "template-secret" in people.call("admin", "GET", "/templates/base").text


def test_only_its_owner_or_an_admin_replaces_or_removes_a_template(people: People) -> None:
    assert put(people, "alice", "base", TEMPLATE).status_code == 200
    refused = put(people, "bob", "base", "max_restarts: 0\n")
    assert refused.status_code == 403
    assert "belongs to 'alice'" in refused.json()["detail"]
    assert people.call("bob", "DELETE", "/templates/base").status_code == 403
    viewer = put(people, "viewer", "mine", "max_restarts: 0\n")
    assert viewer.status_code == 403
    assert "needs the right to create DAG runs" in viewer.json()["detail"]

    assert put(people, "admin", "base", "max_restarts: 2\n").status_code == 200
    kept = people.call("alice", "GET", "/templates/base").json()["template"]
    assert (kept["owner"], kept["config"]) == ("alice", {"max_restarts": 2})
    assert people.call("admin", "DELETE", "/templates/base").status_code == 200


def test_a_template_that_is_not_a_mapping_or_too_large_is_refused(people: People) -> None:
    listed = put(people, "alice", "bad", "- a\n- b\n")
    assert listed.status_code == 400
    assert "a config is a mapping of fields, not list" in listed.json()["detail"]
    broken = put(people, "alice", "bad", "a: [1\n")
    assert broken.status_code == 400 and "invalid YAML" in broken.json()["detail"]
    huge = put(people, "alice", "big", "a: " + "x" * (1024**2 + 1))
    assert huge.status_code == 422 and "over the limit" in huge.text
    spaced = put(people, "alice", "%20padded", "a: 1\n")
    assert spaced.status_code == 400 and "template name" in spaced.json()["detail"]
    assert people.call("alice", "GET", "/templates").json()["templates"] == []


def test_an_experiment_gets_its_template_under_its_own_config(people: People, creator: Creator) -> None:
    assert put(people, "alice", "base", TEMPLATE).status_code == 200
    answer = creator.create(config=PARTIAL, template="base")
    assert answer.status_code == 200, answer.text
    experiment = answer.json()["experiment"]
    config = people.call("alice", "GET", f"/experiments/{experiment['id']}/config").json()["config"]
    assert config["resources"]["priority"] == 7  # the experiment's own value wins
    assert config["resources"]["slots_per_trial"] == 1
    assert config["max_restarts"] == 9
    assert config["description"] == "from the template"
    # The template's variables first: the experiment's, later, override them.
    assert config["environment"]["environment_variables"]["cpu"] == [
        "TOKEN=template-secret",
        "SHARED=template",
        "SHARED=experiment",
    ]
    # The template's mounts of other container paths are added; /mnt stays the experiment's.
    mounts = [(m["host_path"], m["container_path"]) for m in config["bind_mounts"]]
    assert mounts == [("/mine", "/mnt"), ("/data", "/data")]
    stored = load_yaml(people.experiment(experiment["id"]).config_yaml)
    assert stored["max_restarts"] == 9


def test_an_unknown_template_is_a_404_and_creates_nothing(people: People, creator: Creator) -> None:
    answer = creator.create(config=PARTIAL, template="nope")
    assert answer.status_code == 404
    assert answer.json()["detail"] == "template 'nope' not found"
    assert creator.count() == 0


def test_a_template_may_supply_what_the_config_lacks(people: People, creator: Creator) -> None:
    searcher = "searcher: {name: single, metric: loss, max_length: {batches: 5}}\n"
    assert put(people, "alice", "search", searcher).status_code == 200
    assert creator.create(config="entrypoint: python3 train.py\n").status_code == 400
    answer = creator.create(config="entrypoint: python3 train.py\n", template="search")
    assert answer.status_code == 200, answer.text


def test_merge_follows_determined_rule_for_kinds_and_hyperparameters() -> None:
    template = {
        "checkpoint_storage": {"type": "s3", "bucket": "b", "save_trial_best": 4},
        "searcher": {"name": "random", "max_trials": 8, "metric": "loss"},
        "hyperparameters": {"lr": {"type": "double", "minval": 0.1, "maxval": 1}, "net": {"depth": 2}},
        "resources": {"devices": ["/dev/a:/dev/x", "/dev/b:/dev/y"]},
    }
    config = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"},
        "searcher": {"name": "single", "max_length": {"batches": 1}},
        "hyperparameters": {"lr": 0.5, "net": {"width": 3}},
        "resources": {"devices": [{"host_path": "/dev/c", "container_path": "/dev/x"}]},
    }
    merged = merge(template, config)
    assert merged["checkpoint_storage"] == {"type": "shared_fs", "host_path": "/ckpt", "save_trial_best": 4}
    assert merged["searcher"] == {"name": "single", "metric": "loss", "max_length": {"batches": 1}}
    assert merged["hyperparameters"] == {"lr": 0.5, "net": {"depth": 2, "width": 3}}
    assert merged["resources"]["devices"] == [
        {"host_path": "/dev/c", "container_path": "/dev/x"},
        "/dev/b:/dev/y",
    ]
