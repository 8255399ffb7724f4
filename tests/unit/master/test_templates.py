"""Config templates through the master's routes: each user's own names and the admins' shared ones,
who may set, read, replace and remove them, and experiments created with a template laid under their
config: only ever their owner's own template or a shared one, which they read in full."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from det_airflow.master import schema
from det_airflow.master.templates import merge
from tests.unit.master.creating import Creator, load_yaml
from tests.unit.master.older_schema import database_at
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


# What bob would have run in the trials of anyone naming his template.
BOBS = textwrap.dedent(
    """\
    entrypoint: python3 bobs_code.py
    environment:
      environment_variables: [FROM=bob]
    """
)


def put(people: People, user: str, name: str, config: str, **params: Any) -> Any:
    return people.call(user, "PUT", f"/templates/{name}", json={"config": config}, params=params)


def _config_of(people: People, answer: Any) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    experiment_id = answer.json()["experiment"]["id"]
    return dict(people.call("admin", "GET", f"/experiments/{experiment_id}/config").json()["config"])


def test_a_template_is_set_listed_described_replaced_and_removed(people: People) -> None:
    answer = put(people, "alice", "base", TEMPLATE)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["template"]["owner"], answer.json()["template"]["shared"]) == ("alice", False)
    assert answer.json()["template"]["config"]["resources"] == {"priority": 3, "slots_per_trial": 1}

    listed = people.call("alice", "GET", "/templates").json()["templates"]
    assert [t["name"] for t in listed] == ["base"]
    assert put(people, "alice", "base", "max_restarts: 1\n").status_code == 200
    assert people.call("alice", "GET", "/templates/base").json()["template"]["config"] == {"max_restarts": 1}

    assert people.call("alice", "DELETE", "/templates/base").status_code == 200
    missing = people.call("alice", "GET", "/templates/base")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "template 'base' not found among yours or the shared ones"


def test_another_users_template_is_never_laid_under_an_experiment(people: People, creator: Creator) -> None:
    # Bob took the name first; alice's experiment naming it must not get his code.
    assert put(people, "bob", "team-gpu", BOBS).status_code == 200
    refused = creator.create(config=PARTIAL, template="team-gpu")
    assert refused.status_code == 404
    assert refused.json()["detail"] == "template 'team-gpu' not found among yours or the shared ones"
    assert creator.count() == 0

    # An admin's shared template of that name is what alice gets...
    shared = put(people, "admin", "team-gpu", "max_restarts: 5\n", shared="true")
    assert shared.status_code == 200, shared.text
    assert (shared.json()["template"]["shared"], shared.json()["template"]["owner"]) == (True, "admin")
    config = _config_of(people, creator.create(config=PARTIAL, template="team-gpu"))
    assert (config["entrypoint"], config["max_restarts"]) == ("python3 train.py", 5)
    # ...until she has her own, which comes first for her; bob still gets his.
    assert put(people, "alice", "team-gpu", "max_restarts: 6\n").status_code == 200
    assert _config_of(people, creator.create(config=PARTIAL, template="team-gpu"))["max_restarts"] == 6
    bobs = _config_of(people, creator.create("bob", config=PARTIAL, template="team-gpu"))
    assert bobs["environment"]["environment_variables"]["cpu"] == ["FROM=bob", "SHARED=experiment"]
    assert "FROM=bob" not in json.dumps(
        _config_of(people, creator.create(config=PARTIAL, template="team-gpu"))
    )


def test_a_user_reads_in_full_the_templates_they_may_use_and_no_one_elses(people: People) -> None:
    assert put(people, "alice", "base", TEMPLATE).status_code == 200
    assert (
        put(
            people,
            "admin",
            "gpu",
            "environment: {environment_variables: [KEY=shared-secret]}\n",
            shared="true",
        ).status_code
        == 200
    )

    # Her own, in full: exactly what her trials will get.
    assert "template-secret" in people.call("alice", "GET", "/templates/base").text
    # Nobody else's personal template is theirs to read (nor to use).
    for reader in ("bob", "viewer"):
        assert people.call(reader, "GET", "/templates/base").status_code == 404
        listed = people.call(reader, "GET", "/templates").json()["templates"]
        assert [(t["name"], t["shared"]) for t in listed] == [("gpu", True)]
    theirs = people.call("bob", "GET", "/templates/base", params={"owner": "alice"})
    assert theirs.status_code == 403
    assert theirs.json()["detail"] == (
        "user 'bob' may not read template 'base' of 'alice': a personal template is its owner's (and admins')"
    )
    # A shared template, unmasked, to everyone who may name it.
    seen = people.call("bob", "GET", "/templates/gpu").json()["template"]
    assert seen["config"]["environment"]["environment_variables"] == ["KEY=shared-secret"]
    # Admins read every template.
    assert "template-secret" in people.call("admin", "GET", "/templates/base", params={"owner": "alice"}).text
    everyone = people.call("admin", "GET", "/templates").json()["templates"]
    assert [(t["name"], t["owner"]) for t in everyone] == [("base", "alice"), ("gpu", "admin")]


def test_each_user_sets_their_own_and_only_admins_manage_shared_templates(people: People) -> None:
    assert put(people, "alice", "base", TEMPLATE).status_code == 200
    # Bob's PUT makes bob's own template; alice's is untouched.
    assert put(people, "bob", "base", "max_restarts: 0\n").json()["template"]["owner"] == "bob"
    kept = people.call("alice", "GET", "/templates/base").json()["template"]
    assert (kept["owner"], kept["config"]["max_restarts"]) == ("alice", 9)
    viewer = put(people, "viewer", "mine", "max_restarts: 0\n")
    assert viewer.status_code == 403
    assert "needs the right to create DAG runs" in viewer.json()["detail"]

    not_admin = put(people, "alice", "gpu", "max_restarts: 1\n", shared="true")
    assert not_admin.status_code == 403
    assert not_admin.json()["detail"] == (
        "user 'alice' may not set shared template 'gpu': only admins manage shared templates"
    )
    assert put(people, "admin", "gpu", "max_restarts: 1\n", shared="true").status_code == 200
    removed = people.call("alice", "DELETE", "/templates/gpu", params={"shared": "true"})
    assert removed.status_code == 403 and "only admins manage shared templates" in removed.json()["detail"]
    # Without --shared a remove means one's own template: never the shared one by accident.
    assert people.call("alice", "DELETE", "/templates/gpu").status_code == 404
    assert people.call("admin", "DELETE", "/templates/gpu", params={"shared": "true"}).status_code == 200
    assert people.call("admin", "DELETE", "/templates/base", params={"owner": "alice"}).status_code == 200
    assert people.call("bob", "GET", "/templates/base").json()["template"]["owner"] == "bob"


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
    assert answer.json()["detail"] == "template 'nope' not found among yours or the shared ones"
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


@pytest.fixture
def templates_of_version_16(tmp_path: Path) -> None:
    """The det tables as det-airflow 16 left them, with bob's template ``team-gpu`` and alice's ``base``."""
    url = f"sqlite:///{tmp_path / 'airflow.db'}"  # where the people app's database is
    database_at(url, 16)
    engine = create_engine(url)
    with engine.begin() as conn:
        for name, owner, config in (
            ("team-gpu", "bob", {"entrypoint": "python3 bobs_code.py"}),
            ("base", "alice", {"max_restarts": 9}),
        ):
            conn.execute(
                text("INSERT INTO det_templates (name, config, owner, updated_at) VALUES (:n, :c, :o, :t)"),
                {"n": name, "c": json.dumps(config), "o": owner, "t": datetime(2026, 1, 1, tzinfo=UTC)},
            )
    engine.dispose()


def test_templates_stored_before_names_were_owned_become_their_creators_own(
    templates_of_version_16: None, people: People, creator: Creator
) -> None:
    # The people app upgraded the version-16 tables on start.
    assert people.db.schema_version() == schema.SCHEMA_VERSION
    assert _config_of(people, creator.create(config=PARTIAL, template="base"))["max_restarts"] == 9
    refused = creator.create(config=PARTIAL, template="team-gpu")
    assert refused.status_code == 404
    bobs = people.call("bob", "GET", "/templates/team-gpu").json()["template"]
    assert (bobs["owner"], bobs["shared"], bobs["config"]) == (
        "bob",
        False,
        {"entrypoint": "python3 bobs_code.py"},
    )


def test_a_shared_template_s_secrets_are_masked_to_a_viewer_and_shown_to_its_users(people: People) -> None:
    config = "environment:\n  environment_variables:\n    WANDB_API_KEY: team-secret\n"
    assert put(people, "admin", "team-keys", config, shared="true").status_code == 200
    user = people.call("alice", "GET", "/templates/team-keys").json()["template"]["config"]
    assert "team-secret" in str(user)
    viewer = people.call("viewer", "GET", "/templates/team-keys")
    assert viewer.status_code == 200, viewer.text
    assert "team-secret" not in viewer.text
    listed = people.call("viewer", "GET", "/templates").text
    assert "team-keys" in listed and "team-secret" not in listed
