"""`det template ...` and `det e create --template` against the master's own routes (the people app
on SQLite, served on loopback): what a user sees set, listed, described, merged and refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.cli.test_task_verbs import Cluster, _table, cluster
from tests.unit.master.creating import creator
from tests.unit.master.people_app import people

__all__ = ["cluster", "creator", "people"]  # the fixtures, used here

TEMPLATE = """\
resources: {priority: 3, slots_per_trial: 1}
max_restarts: 9
environment:
  environment_variables: [TOKEN=template-secret]
"""
CONFIG = """\
name: tiny
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
resources: {priority: 7}
"""


def test_a_template_is_set_listed_described_and_removed(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "base.yaml"
    path.write_text(TEMPLATE)
    result = det("template", "set", "base", str(path))
    assert (result.code, result.out) == (0, "Set template base\n"), result.err

    header, rows = _table(det("template", "list").out)
    assert header == ["Name", "Owner", "Shared", "Updated", "Fields"]
    assert rows == [["base", "alice", "False", rows[0][3], "resources, max_restarts, environment"]]
    detailed = det("tpl", "ls", "-d").out
    assert "Config" in detailed and "max_restarts: 9" in detailed

    described = det("template", "describe", "base")
    assert described.code == 0
    assert described.out.splitlines()[0] == "# template base of alice"
    assert yaml.safe_load(described.out) == yaml.safe_load(TEMPLATE)

    removed = det("template", "remove", "base")
    assert (removed.code, removed.out) == (0, "Removed template base\n")
    gone = det("template", "describe", "base")
    assert gone.code == 1
    assert "template 'base' not found among yours or the shared ones" in gone.err
    assert gone.err.count("\n") == 1


def test_another_users_template_is_not_seen_nor_used_and_a_shared_one_is_seen_whole(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "base.yaml").write_text(TEMPLATE)
    (tmp_path / "exp.yaml").write_text(CONFIG)
    assert det("template", "set", "base", str(tmp_path / "base.yaml")).code == 0
    cluster.login("bob")
    unseen = det("template", "describe", "base")
    assert unseen.code == 1
    assert unseen.err == "Error: template 'base' not found among yours or the shared ones\n"
    theirs = det("template", "describe", "base", "--owner", "alice")
    assert theirs.code == 1
    assert theirs.err == (
        "Error: permission denied: user 'bob' may not read template 'base' of 'alice': a personal "
        "template is its owner's (and admins')\n"
    )
    unused = det("e", "create", str(tmp_path / "exp.yaml"), "--template", "base")
    assert unused.code == 1 and "template 'base' not found" in unused.err

    not_admin = det("template", "set", "--shared", "base", str(tmp_path / "base.yaml"))
    assert not_admin.code == 1
    assert not_admin.err == (
        "Error: permission denied: user 'bob' may not set shared template 'base': only admins manage "
        "shared templates\n"
    )
    cluster.login("admin")
    shared = det("template", "set", "--shared", "base", str(tmp_path / "base.yaml"))
    assert (shared.code, shared.out) == (0, "Set shared template base\n"), shared.err
    cluster.login("bob")
    described = det("template", "describe", "base")
    assert described.out.splitlines()[0] == "# shared template base"
    assert "TOKEN=template-secret" in described.out  # what his trials get, in full
    assert det("e", "create", str(tmp_path / "exp.yaml"), "--template", "base").code == 0
    assert cluster.people.experiment(1).config["max_restarts"] == 9


def test_an_experiment_created_with_a_template_gets_both_configs(
    det: Any, cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "base.yaml").write_text(TEMPLATE)
    (tmp_path / "exp.yaml").write_text(CONFIG)
    assert det("template", "set", "base", str(tmp_path / "base.yaml")).code == 0
    result = det(
        "e", "create", str(tmp_path / "exp.yaml"), "--template", "base", "--config", "max_restarts=2"
    )
    assert result.code == 0, result.err
    assert "Created experiment 1" in result.out
    config = cluster.people.experiment(1).config
    assert (config["resources"]["priority"], config["resources"]["slots_per_trial"]) == (7, 1)
    assert config["max_restarts"] == 2


def test_bad_template_input_is_one_line(det: Any, cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "exp.yaml").write_text(CONFIG)
    unknown = det("e", "create", str(tmp_path / "exp.yaml"), "--template", "nope")
    assert unknown.code == 1
    assert "template 'nope' not found" in unknown.err and unknown.err.count("\n") == 1
    missing = det("template", "set", "x", str(tmp_path / "missing.yaml"))
    assert missing.code == 1 and "cannot read template file" in missing.err
    (tmp_path / "list.yaml").write_text("- a\n")
    not_mapping = det("template", "set", "x", str(tmp_path / "list.yaml"))
    assert not_mapping.code == 1 and "a config is a mapping of fields" in not_mapping.err
    local = det("e", "create", str(tmp_path / "exp.yaml"), "--template", "x", "--local", "--test-mode")
    assert local.code == 1 and "cannot be used with --local" in local.err
