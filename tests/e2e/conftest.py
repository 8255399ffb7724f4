"""Fixtures for tests that run trials in real Docker containers: the daemon, the trial image, and
(re-used from tests/integration) a real Airflow on PostgreSQL.

Tests here skip, saying why, when no Docker daemon answers; the trial image is built
(``make trial-image``) when the daemon does not have it yet.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import DockerException

from det_airflow.operators.runners import DEFAULT_IMAGES
from tests.integration.conftest import airflow, default_config_extra, postgres_url  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
TRIAL_IMAGE = DEFAULT_IMAGES["cpu"]
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.docker)


def docker_url() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@pytest.fixture(scope="session")
def host_share(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host folder the test Airflow's runner policy lets trials bind-mount (``[det]
    allowed_host_paths``); writable by every trial uid, as an admin would share one."""
    share = tmp_path_factory.mktemp("host-share")
    share.chmod(0o1777)
    return share


@pytest.fixture(scope="session")
def airflow_config_extra(host_share: Path) -> dict[str, dict[str, str]]:
    """tests/integration's sections, with ``host_share`` allowed to trials' bind mounts."""
    extra = default_config_extra()
    extra["det"]["allowed_host_paths"] = str(host_share)
    return extra


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.APIClient]:
    """A client of the Docker daemon trials run on; skips the test when none answers."""
    try:
        client = docker.APIClient(base_url=docker_url())
        client.ping()
    except DockerException as exc:
        pytest.skip(
            f"no Docker daemon answers at {docker_url()} ({exc}); start dockerd to run Docker trial tests"
        )
    yield client
    client.close()


@pytest.fixture(scope="session")
def trial_image(docker_client: docker.APIClient) -> str:
    """The trial image with det-airflow's sources as they are now (``make trial-image``, rebuilt
    when the daemon's copy holds other sources)."""
    built = subprocess.run(
        [sys.executable, str(REPO / "images" / "trial_image.py"), "--tag", TRIAL_IMAGE, "--if-stale"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, f"building {TRIAL_IMAGE} failed:\n{built.stdout}\n{built.stderr}"
    docker_client.inspect_image(TRIAL_IMAGE)
    return TRIAL_IMAGE
