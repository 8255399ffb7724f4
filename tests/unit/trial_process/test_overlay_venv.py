"""A trial in the overlay a startup hook gets (``det experiment create --local --test-mode``) finds
the programs of det-airflow's own environment (``deepspeed``, ``torchrun``) behind those the hook
installs: the launchers look their tool up on ``PATH``."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from det_airflow.cli.local_test_mode import run_local_test
from det_airflow.config import load_config
from det_airflow.trial_process import (
    STARTUP_HOOK,
    TrialSpec,
    make_overlay_venv,
    run_trial_process,
    trial_environment,
    write_trial_files,
)

BASE_BIN = Path(sys.executable).parent
# What the trial reports of its PATH: where each program resolves, and what the deepspeed and
# torch_distributed launchers would run.
PROBE = textwrap.dedent(
    """\
    import json, os, shutil, sys
    from det_airflow.launchers._launch import require
    print("PROBE " + json.dumps({
        "python": sys.executable,
        "path": os.environ["PATH"].split(os.pathsep),
        "which": {t: shutil.which(t) for t in ("deepspeed", "torchrun", "det-hook-tool", "python3")},
        "launcher_tool": require("deepspeed", "pip install deepspeed"),
    }))
    """
)
# A hook that installs a tiny local package with a console script, offline, into the overlay.
HOOK = "python -m pip install --no-index --no-build-isolation --no-deps --quiet ./hooktool\n"


def _hook_package(folder: Path) -> None:
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "det-hook-tool"
            version = "1.0"

            [project.scripts]
            det-hook-tool = "det_hook_tool:main"
            """
        )
    )
    (folder / "det_hook_tool.py").write_text("def main():\n    print('hook tool')\n")


def _probe(lines: list[str]) -> dict:
    found = [line.removeprefix("PROBE ") for line in lines if line.startswith("PROBE ")]
    assert found, "\n".join(lines)
    return json.loads(found[-1])


@pytest.mark.skipif(shutil.which("deepspeed", path=str(BASE_BIN)) is None, reason="needs deepspeed")
def test_in_the_overlay_the_hooks_programs_come_first_and_the_base_ones_are_still_found(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "probe.py").write_text(PROBE)
    (workdir / STARTUP_HOOK).write_text(HOOK)
    _hook_package(workdir / "hooktool")
    spec = TrialSpec(trial_id=1, experiment_id=0, request_id="r", trial_seed=1, config={})
    write_trial_files(spec, workdir)
    # Made as local test mode makes it; the worker's PATH does not hold det-airflow's bin (`det`
    # started by its full path, the venv not activated).
    overlay_bin = make_overlay_venv(tmp_path / "venv")
    env = trial_environment(spec, base_env={"PATH": "/usr/bin:/bin"}, workdir=workdir, python_bin=overlay_bin)
    lines: list[str] = []
    code = run_trial_process(
        workdir, ["python3", "probe.py"], env, on_output=lambda line, _: lines.append(line)
    )

    assert code == 0, "\n".join(lines)
    probe = _probe(lines)
    assert probe["python"] == str(overlay_bin / "python3")
    assert probe["which"]["det-hook-tool"] == str(overlay_bin / "det-hook-tool")
    assert probe["which"]["deepspeed"] == str(BASE_BIN / "deepspeed")
    assert probe["which"]["torchrun"] == str(BASE_BIN / "torchrun")
    assert probe["launcher_tool"] == str(BASE_BIN / "deepspeed")
    path = probe["path"]
    assert path.index(str(overlay_bin)) < path.index(str(BASE_BIN)) < path.index("/usr/bin")


@pytest.mark.skipif(shutil.which("deepspeed", path=str(BASE_BIN)) is None, reason="needs deepspeed")
def test_local_test_mode_with_a_startup_hook_finds_deepspeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "probe.py").write_text(PROBE)
    (code_dir / STARTUP_HOOK).write_text(HOOK)
    _hook_package(code_dir / "hooktool")
    (code_dir / "const.yaml").write_text(
        "name: probe\nentrypoint: python3 probe.py\nsearcher: {name: single, metric: loss}\n"
    )

    status = run_local_test(load_config(code_dir / "const.yaml"), str(code_dir))

    out, err = capfd.readouterr()
    assert status == 0, out + err
    probe = _probe(out.splitlines())
    assert probe["which"]["deepspeed"] == str(BASE_BIN / "deepspeed")
    assert Path(probe["which"]["det-hook-tool"]).parent == Path(probe["python"]).parent != BASE_BIN
