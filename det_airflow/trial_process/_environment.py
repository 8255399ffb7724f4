"""A trial's environment and files: its ``DET_*`` variables, and the work folder it starts in."""

from __future__ import annotations

import json
import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from det_airflow import trial_env
from det_airflow.trial_process._spec import TrialSpec

# det's own files in a trial's work folder: the config, the trial's HOME and TMPDIR.
TRIAL_FILES_DIR = ".det"
CONFIG_FILE_NAME = "experiment_config.json"
CHIEF_IP = "127.0.0.1"
# All a trial keeps of the worker's environment: an allow-list, so that whatever Airflow or a
# deployment adds (AIRFLOW_*, connections, database URLs, proxies, cloud keys) stays out.
_PASSED_VARIABLES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM"})
_PASSED_PREFIXES = ("LC_",)
_TRIAL_VARIABLES = frozenset(
    value for name, value in vars(trial_env).items() if name.isupper() and isinstance(value, str)
)
# The folder `import det_airflow` comes from: two levels above this package.
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def trial_environment(
    spec: TrialSpec,
    *,
    master_url: str | None = None,
    token: str | None = None,
    local_store: str | os.PathLike[str] | None = None,
    test_mode: bool = False,
    slot_ids: Iterable[int] = (),
    base_env: Mapping[str, str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    python_bin: str | os.PathLike[str] | None = None,
    tmpdir: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """The whole environment of a trial process (docs/semantics.md §3), built from an allow-list.

    Of ``base_env`` (default ``os.environ``) only ``PATH``, ``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``
    and ``TERM`` pass: nothing of the worker's (``AIRFLOW_HOME``, ``AIRFLOW__*``, ``AIRFLOW_CONN_*``,
    database URLs, proxies, ``DET_*`` of the caller) reaches trial code. Then come ``HOME`` in the
    work folder's ``.det/``, ``TMPDIR`` (``tmpdir``, else ``.det/tmp``: a runner on a host passes a
    short one, see :func:`make_private_tmpdir`), the config's ``environment.environment_variables``
    (the cpu list), the trial's ``DET_*`` variables (which win), ``PYTHONUNBUFFERED=1`` and a
    ``PYTHONPATH`` that starts with the work folder (``workdir``, else the current folder). The
    config itself is named by ``DET_EXPERIMENT_CONFIG_FILE`` (see :func:`write_trial_files`) and, up
    to 64 KiB, is also ``DET_EXPERIMENT_CONFIG``. When there is a ``PATH``, this interpreter's
    folders of programs come first in it, so ``python3 train.py`` runs with det-airflow installed
    and ``deepspeed``, ``torchrun`` or ``horovodrun`` are the ones installed beside it; with
    ``python_bin`` (the ``bin`` of an overlay over this environment, see
    :func:`~det_airflow.trial_process.make_overlay_venv`) that one comes before them, so what a
    startup hook installs wins. Without ``master_url`` the Core API writes to ``local_store``.
    """
    base = os.environ if base_env is None else base_env
    env = {k: v for k, v in base.items() if k in _PASSED_VARIABLES or k.startswith(_PASSED_PREFIXES)}
    files = trial_files_dir(workdir if workdir is not None else Path.cwd())
    env["HOME"] = str(files / "home")
    env["TMPDIR"] = str(tmpdir if tmpdir is not None else files / "tmp")
    env.update(_config_variables(spec.config))
    task_id = f"{spec.experiment_id}.{spec.trial_id}"
    config_json = json.dumps(spec.config)
    # The slots the trial holds: given by the caller, else the config's slots_per_trial (one
    # process per slot under the launchers).
    slots = [int(s) for s in slot_ids] or list(range(_slots_per_trial(spec.config)))
    det: dict[str, str | None] = {
        trial_env.MASTER: master_url,
        trial_env.SESSION_TOKEN: token,
        trial_env.TRIAL_ID: str(spec.trial_id),
        trial_env.EXPERIMENT_ID: str(spec.experiment_id),
        trial_env.TRIAL_SEED: str(spec.trial_seed),
        trial_env.HPARAMS: json.dumps(spec.hparams),
        trial_env.EXPERIMENT_CONFIG_FILE: str(files / CONFIG_FILE_NAME),
        trial_env.EXPERIMENT_CONFIG: config_json
        if len(config_json) <= trial_env.EXPERIMENT_CONFIG_ENV_LIMIT
        else None,
        trial_env.LATEST_CHECKPOINT: spec.latest_checkpoint or "",
        trial_env.STEPS_COMPLETED: str(spec.steps_completed),
        trial_env.SLOT_IDS: json.dumps(slots),
        trial_env.CHIEF_IP: CHIEF_IP,
        trial_env.CONTAINER_RANK: "0",
        trial_env.CONTAINER_ADDRS: json.dumps([CHIEF_IP]),
        **_gang_variables(spec.gang),
        trial_env.TASK_ID: task_id,
        trial_env.ALLOCATION_ID: f"{task_id}.{spec.run_id}",
        trial_env.TRIAL_RUN_ID: str(spec.run_id),
        trial_env.LOCAL_STORE: str(Path(local_store).absolute()) if local_store is not None else None,
        trial_env.TEST_MODE: "1" if test_mode else None,
    }
    for name in _TRIAL_VARIABLES:  # the config may not pose as the master or another trial
        env.pop(name, None)
    env.update({k: v for k, v in det.items() if v is not None})
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = _python_path(workdir, env.get("PYTHONPATH", ""))
    if env.get("PATH"):
        # `python3` in an entrypoint is this interpreter (the one with det-airflow), venv or not; an
        # overlay's programs come first, and this environment's stay reachable behind them.
        first = [str(python_bin)] if python_bin is not None else []
        env["PATH"] = os.pathsep.join(
            dict.fromkeys([*first, *_interpreter_bin_dirs(), *env["PATH"].split(os.pathsep)])
        )
    return env


def _interpreter_bin_dirs() -> list[str]:
    """The folders of this interpreter's programs: its own (a venv's ``bin``), where its packages'
    console scripts go (``/usr/local/bin`` for a Debian system Python), and the user scheme's when
    this interpreter imports from the user's site folder."""
    folders = [str(Path(sys.executable).parent)] if sys.executable else []
    folders.append(sysconfig.get_path("scripts"))
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        folders.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    return [f for f in dict.fromkeys(folders) if f]


def _gang_variables(gang: Mapping[str, Any] | None) -> dict[str, str | None]:
    """Where a node of a run over several hosts stands: every node's address, its rank, the chief's
    rendezvous port (the launchers read them, as on a Kubernetes gang)."""
    if not gang:
        return {}
    addrs = [str(a) for a in gang.get("addrs") or []]
    port = gang.get("port")
    return {
        trial_env.CHIEF_IP: addrs[0] if addrs else CHIEF_IP,
        trial_env.CONTAINER_RANK: str(int(gang.get("rank") or 0)),
        trial_env.CONTAINER_ADDRS: json.dumps(addrs or [CHIEF_IP]),
        trial_env.RENDEZVOUS_PORT: str(port) if port else None,
    }


def trial_files_dir(workdir: str | os.PathLike[str]) -> Path:
    """The folder of det's own files in a trial's work folder: the config, ``HOME`` and ``TMPDIR``."""
    return Path(workdir).absolute() / TRIAL_FILES_DIR


def write_trial_files(spec: TrialSpec, workdir: str | os.PathLike[str]) -> Path:
    """Write the experiment config into ``workdir/.det/`` and make the trial's ``HOME`` and
    ``TMPDIR`` there; answers the config file's path (what ``DET_EXPERIMENT_CONFIG_FILE`` names)."""
    files = trial_files_dir(workdir)
    for folder in (files, files / "home", files / "tmp"):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = files / CONFIG_FILE_NAME
    path.write_text(json.dumps(spec.config))
    return path


def prepare_workdir(context_bytes: bytes | None, dest: str | os.PathLike[str]) -> Path:
    """Unpack a context archive (tar.gz from the master) into ``dest``; answers ``dest``."""
    from det_airflow.context_archive import extract_context

    path = Path(dest)
    path.mkdir(parents=True, exist_ok=True)
    if context_bytes:
        extract_context(context_bytes, path)
    return path


def _config_variables(config: Mapping[str, Any]) -> dict[str, str]:
    """``NAME=VALUE`` entries of ``environment.environment_variables`` (the cpu list)."""
    environment = config.get("environment") or {}
    variables: Any = environment.get("environment_variables") or environment.get("environment_variables_cpu")
    if isinstance(variables, Mapping):
        variables = variables.get("cpu") or []
    out: dict[str, str] = {}
    for entry in variables or []:
        name, sep, value = str(entry).partition("=")
        if sep and name:
            out[name] = value
    return out


def _slots_per_trial(config: Mapping[str, Any]) -> int:
    resources = config.get("resources") or {}
    slots = resources.get("slots_per_trial") if isinstance(resources, Mapping) else None
    return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else 1


def _python_path(workdir: str | os.PathLike[str] | None, existing: str) -> str:
    entries = [str(Path(workdir).absolute()) if workdir is not None else "."]
    # A source checkout of det-airflow (not installed in site-packages) must be importable by the trial.
    if _PACKAGE_ROOT.name not in ("site-packages", "dist-packages"):
        entries.append(str(_PACKAGE_ROOT))
    existing_entries = [p for p in existing.split(os.pathsep) if p]
    from det_airflow.compat import determined_path_entry

    # `import determined` is ours unless a real Determined is installed or on the path (then it wins).
    alias = determined_path_entry()
    if alias is not None and not any((Path(p) / "determined").is_dir() for p in existing_entries):
        entries.append(alias)
    entries.extend(existing_entries)
    return os.pathsep.join(dict.fromkeys(entries))
