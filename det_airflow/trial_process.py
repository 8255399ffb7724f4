"""Running one trial's process: its work folder, its ``DET_*`` environment, its entrypoint.

Shared by the Airflow trial operator (a local-process trial) and ``det experiment create --local``;
nothing here needs Airflow. The process runs in its own process group so that stopping it stops
everything it started.

Example:
    >>> spec = TrialSpec.from_dict(answer["spec"])
    >>> workdir = prepare_workdir(context_bytes, Path("/tmp/trial_1"))
    >>> env = trial_environment(spec, master_url=master, token=answer["token"], workdir=workdir)
    >>> code = run_trial_process(workdir, entrypoint_argv(spec.config["entrypoint"]), env,
    ...                          on_output=lambda line, stream: print(line))
"""

from __future__ import annotations

import codecs
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from det_airflow import trial_env

STARTUP_HOOK = "startup-hook.sh"
CHIEF_IP = "127.0.0.1"
# `module:Class` (legacy PyTorchTrial entrypoints) as one token.
_LEGACY_ENTRYPOINT = re.compile(r"^[\w.]+:\w+$")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_READ_SIZE = 65536
# A "line" longer than this (no line break in sight) is passed on in pieces.
_MAX_LINE = 1024 * 1024


@dataclass(frozen=True)
class TrialSpec:
    """Everything a trial process needs (the master's ``spec`` object, docs/master-api.md)."""

    trial_id: int
    experiment_id: int
    request_id: str
    trial_seed: int
    hparams: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # normalized experiment config
    latest_checkpoint: str | None = None
    steps_completed: int = 0
    run_id: int = 0  # increments each time the trial (re)starts

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialSpec:
        return cls(
            trial_id=int(data["trial_id"]),
            experiment_id=int(data["experiment_id"]),
            request_id=str(data.get("request_id") or ""),
            trial_seed=int(data.get("trial_seed") or 0),
            hparams=dict(data.get("hparams") or {}),
            config=dict(data.get("config") or {}),
            latest_checkpoint=data.get("latest_checkpoint") or None,
            steps_completed=int(data.get("steps_completed") or 0),
            run_id=int(data.get("run_id") or 0),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def entrypoint_argv(entrypoint: str | Sequence[str]) -> list[str]:
    """The argv of an entrypoint: a string runs with ``sh -c``, a list is exec'd as is, and a legacy
    ``module:Class`` runs under the torch_distributed launcher."""
    if isinstance(entrypoint, str):
        if _LEGACY_ENTRYPOINT.match(entrypoint.strip()):
            return [
                sys.executable,
                "-m",
                "det_airflow.launchers.torch_distributed",
                "--trial",
                entrypoint.strip(),
            ]
        return ["sh", "-c", entrypoint]
    return [str(arg) for arg in entrypoint]


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
) -> dict[str, str]:
    """The environment of a trial process (REFERENCE.md section 3).

    ``base_env`` (default ``os.environ``) minus any inherited ``DET_*`` trial variables, plus the
    config's ``environment.environment_variables`` (the cpu list), plus the trial's ``DET_*``
    variables (which win), ``PYTHONUNBUFFERED=1`` and a ``PYTHONPATH`` that starts with the work
    folder (``workdir``, else the process's current folder). When the environment has a ``PATH``,
    this interpreter's folder comes first in it, so ``python3 train.py`` runs with det-airflow
    installed. Without ``master_url`` the Core API writes to ``local_store``.
    """
    env = {
        k: v for k, v in (os.environ if base_env is None else base_env).items() if k not in _TRIAL_VARIABLES
    }
    env.update(_config_variables(spec.config))
    task_id = f"{spec.experiment_id}.{spec.trial_id}"
    slots = [int(s) for s in slot_ids]
    det: dict[str, str | None] = {
        trial_env.MASTER: master_url,
        trial_env.SESSION_TOKEN: token,
        trial_env.TRIAL_ID: str(spec.trial_id),
        trial_env.EXPERIMENT_ID: str(spec.experiment_id),
        trial_env.TRIAL_SEED: str(spec.trial_seed),
        trial_env.HPARAMS: json.dumps(spec.hparams),
        trial_env.EXPERIMENT_CONFIG: json.dumps(spec.config),
        trial_env.LATEST_CHECKPOINT: spec.latest_checkpoint or "",
        trial_env.STEPS_COMPLETED: str(spec.steps_completed),
        trial_env.SLOT_IDS: json.dumps(slots),
        trial_env.CHIEF_IP: CHIEF_IP,
        trial_env.CONTAINER_RANK: "0",
        trial_env.CONTAINER_ADDRS: json.dumps([CHIEF_IP]),
        trial_env.TASK_ID: task_id,
        trial_env.ALLOCATION_ID: f"{task_id}.{spec.run_id}",
        trial_env.TRIAL_RUN_ID: str(spec.run_id),
        trial_env.LOCAL_STORE: str(Path(local_store).absolute()) if local_store is not None else None,
        trial_env.TEST_MODE: "1" if test_mode else None,
    }
    env.update({k: v for k, v in det.items() if v is not None})
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = _python_path(workdir, env.get("PYTHONPATH", ""))
    if env.get("PATH"):
        # `python3` in an entrypoint is this interpreter (the one with det-airflow), venv or not.
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join(dict.fromkeys([bin_dir, *env["PATH"].split(os.pathsep)]))
    return env


def run_trial_process(
    workdir: str | os.PathLike[str],
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    on_output: Callable[[str, str], None],
    stop: threading.Event | None = None,
    kill_grace: float = 10.0,
) -> int:
    """Run ``argv`` in ``workdir`` and wait for it; answers its exit code (negative: killed by that signal).

    ``startup-hook.sh`` in ``workdir`` is sourced first, in the same shell, so its exports reach the
    entrypoint. Output lines (split on ``\\n`` and ``\\r``) go to ``on_output(line, "stdout"|"stderr")``
    as they come, one call at a time. Setting ``stop`` sends SIGTERM to the process group, then
    SIGKILL after ``kill_grace`` seconds; whatever the entrypoint left running when it exits is killed.
    """
    workdir = Path(workdir)
    command = list(argv)
    if (workdir / STARTUP_HOOK).is_file():
        command = ["sh", "-c", f'. ./{STARTUP_HOOK} && exec "$@"', "sh", *command]
    try:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, which stop signals as a whole
        )
    except OSError as exc:
        on_output(f"cannot start the entrypoint {command[0]!r}: {exc.strerror or exc}", "stderr")
        return 127
    lock = threading.Lock()

    def emit(line: str, stream: str) -> None:
        with lock:
            on_output(line, stream)

    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=_pump, args=(proc.stdout, "stdout", emit), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, "stderr", emit), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        while True:
            try:
                proc.wait(timeout=None if stop is None else 0.1)
                break
            except subprocess.TimeoutExpired:
                if stop is not None and stop.is_set():
                    _terminate(proc, kill_grace)
                    break
    finally:
        if proc.poll() is None:  # an exception in the caller's thread, e.g. KeyboardInterrupt
            _terminate(proc, kill_grace)
        _signal_group(proc.pid, signal.SIGKILL)  # leftovers holding the pipes open
        for reader in readers:
            reader.join(timeout=5.0)
    return proc.returncode


def prepare_workdir(context_bytes: bytes | None, dest: str | os.PathLike[str]) -> Path:
    """Unpack a context archive (tar.gz from the master) into ``dest``; answers ``dest``."""
    from det_airflow.context_archive import extract_context

    path = Path(dest)
    path.mkdir(parents=True, exist_ok=True)
    if context_bytes:
        extract_context(context_bytes, path)
    return path


# --- helpers --------------------------------------------------------------------------------------

_TRIAL_VARIABLES = frozenset(
    value for name, value in vars(trial_env).items() if name.isupper() and isinstance(value, str)
)


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


def _python_path(workdir: str | os.PathLike[str] | None, existing: str) -> str:
    entries = [str(Path(workdir).absolute()) if workdir is not None else "."]
    # A source checkout of det-airflow (not installed in site-packages) must be importable by the trial.
    package_root = Path(__file__).resolve().parent.parent
    if package_root.name not in ("site-packages", "dist-packages"):
        entries.append(str(package_root))
    entries.extend(p for p in existing.split(os.pathsep) if p)
    return os.pathsep.join(dict.fromkeys(entries))


def _pump(pipe: IO[bytes], stream: str, emit: Callable[[str, str], None]) -> None:
    """Read a pipe as it fills and emit its lines; ``\\r\\n``, ``\\r`` and ``\\n`` all end a line."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    fd = pipe.fileno()
    while True:
        chunk = os.read(fd, _READ_SIZE)
        pending += decoder.decode(chunk, final=not chunk)
        # A trailing \r may be the first half of \r\n: keep it until more arrives.
        cut = len(pending) - 1 if pending.endswith("\r") and chunk else len(pending)
        parts = _LINE_BREAK.split(pending[:cut])
        breaks = _LINE_BREAK.findall(pending[:cut])
        for text, brk in zip(parts, breaks, strict=False):
            if text or brk != "\r":  # progress bars redraw with \r: skip their empty segments
                emit(text, stream)
        pending = parts[-1] + pending[cut:]
        while len(pending) > _MAX_LINE:
            emit(pending[:_MAX_LINE], stream)
            pending = pending[_MAX_LINE:]
        if not chunk:
            break
    if pending:
        emit(pending.rstrip("\r"), stream)
    pipe.close()


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _terminate(proc: subprocess.Popen[bytes], kill_grace: float) -> None:
    """SIGTERM the process group, then SIGKILL it if the process is still there after ``kill_grace``."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=kill_grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
