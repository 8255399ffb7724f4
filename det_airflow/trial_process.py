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
import pwd
import re
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from det_airflow import trial_env
from det_airflow.errors import DetError
from det_airflow.launchers._supervisor import die_with_parent

STARTUP_HOOK = "startup-hook.sh"
# det's own files in a trial's work folder: the config, the trial's HOME and TMPDIR.
TRIAL_FILES_DIR = ".det"
CONFIG_FILE_NAME = "experiment_config.json"
# The user trials run as when the worker is root and `[det] trial_user` is not set.
DEFAULT_TRIAL_USER = "det-trial"
# All a trial keeps of the worker's environment: an allow-list, so that whatever Airflow or a
# deployment adds (AIRFLOW_*, connections, database URLs, proxies, cloud keys) stays out.
_PASSED_VARIABLES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM"})
_PASSED_PREFIXES = ("LC_",)
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
    # The OS identity the master assigned to the experiment's owner (gid == uid); None when the
    # master assigned none. Local, Docker and Kubernetes runners run the trial as it.
    uid: int | None = None
    gid: int | None = None

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
            uid=_optional_int(data.get("uid")),
            gid=_optional_int(data.get("gid")),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


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
    """The whole environment of a trial process (docs/semantics.md §3), built from an allow-list.

    Of ``base_env`` (default ``os.environ``) only ``PATH``, ``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``
    and ``TERM`` pass: nothing of the worker's (``AIRFLOW_HOME``, ``AIRFLOW__*``, ``AIRFLOW_CONN_*``,
    database URLs, proxies, ``DET_*`` of the caller) reaches trial code. Then come ``HOME`` and
    ``TMPDIR`` in the work folder's ``.det/``, the config's ``environment.environment_variables``
    (the cpu list), the trial's ``DET_*`` variables (which win), ``PYTHONUNBUFFERED=1`` and a
    ``PYTHONPATH`` that starts with the work folder (``workdir``, else the current folder). The
    config itself is named by ``DET_EXPERIMENT_CONFIG_FILE`` (see :func:`write_trial_files`). When
    there is a ``PATH``, this interpreter's folder comes first in it, so ``python3 train.py`` runs
    with det-airflow installed. Without ``master_url`` the Core API writes to ``local_store``.
    """
    base = os.environ if base_env is None else base_env
    env = {k: v for k, v in base.items() if k in _PASSED_VARIABLES or k.startswith(_PASSED_PREFIXES)}
    files = trial_files_dir(workdir if workdir is not None else Path.cwd())
    env["HOME"] = str(files / "home")
    env["TMPDIR"] = str(files / "tmp")
    env.update(_config_variables(spec.config))
    task_id = f"{spec.experiment_id}.{spec.trial_id}"
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
    for name in _TRIAL_VARIABLES:  # the config may not pose as the master or another trial
        env.pop(name, None)
    env.update({k: v for k, v in det.items() if v is not None})
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = _python_path(workdir, env.get("PYTHONPATH", ""))
    if env.get("PATH"):
        # `python3` in an entrypoint is this interpreter (the one with det-airflow), venv or not.
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join(dict.fromkeys([bin_dir, *env["PATH"].split(os.pathsep)]))
    return env


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


def run_trial_process(
    workdir: str | os.PathLike[str],
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    on_output: Callable[[str, str], None],
    stop: threading.Event | None = None,
    kill_grace: float = 10.0,
    user: TrialUser | None = None,
) -> int:
    """Run ``argv`` in ``workdir`` and wait for it; answers its exit code (negative: killed by that signal).

    ``startup-hook.sh`` in ``workdir`` is sourced first, in the same shell, so its exports reach the
    entrypoint. Output lines (split on ``\\n`` and ``\\r``) go to ``on_output(line, "stdout"|"stderr")``
    as they come, one call at a time. Setting ``stop`` sends SIGTERM to the process group, then
    SIGKILL after ``kill_grace`` seconds; whatever the entrypoint left running when it exits is killed.
    With ``user`` the process runs as that user, its primary group and no other group.
    """
    workdir = Path(workdir)
    command = list(argv)
    if (workdir / STARTUP_HOOK).is_file():
        command = ["sh", "-c", f'. ./{STARTUP_HOOK} && exec "$@"', "sh", *command]
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user.uid, "group": user.gid, "extra_groups": []}
        # A numeric uid has no /etc/passwd entry: getpass.getuser() reads these first.
        env = {**env, "USER": user.name, "LOGNAME": user.name}
    try:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, which stop signals as a whole
            # A worker killed mid-run takes its trial along: the master restarts the trial elsewhere
            # and no orphan keeps training (and writing checkpoints) beside the new run.
            preexec_fn=die_with_parent(signal.SIGKILL),
            **as_user,
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


class TrialIsolationError(DetError):
    """A trial cannot be started as the unprivileged user it must run as."""


@dataclass(frozen=True)
class TrialUser:
    """The unprivileged user a trial process runs as."""

    name: str
    uid: int
    gid: int


def trial_user(
    configured: str | None = None, *, uid: int | None = None, gid: int | None = None
) -> TrialUser | None:
    """The user trials run as: ``configured`` (``[det] trial_user``, the admin's override: every
    user's trials under that one identity), else, when this process is root, the numeric ``uid``
    and ``gid`` the master assigned to the experiment's owner (no ``/etc/passwd`` entry needed),
    else :data:`DEFAULT_TRIAL_USER` (created with ``useradd`` if missing); None means this
    process's own user (a worker that is not root and sets no trial user)."""
    is_root = os.geteuid() == 0
    if configured and not is_root:
        raise TrialIsolationError(
            f"[det] trial_user = {configured}: the worker runs as uid {os.geteuid()}, not root, and cannot "
            "start processes as another user; run the worker as root or remove trial_user"
        )
    if not is_root:
        return None
    if not configured and uid is not None:
        if uid == 0 or gid == 0:
            raise TrialIsolationError(
                "the master assigned uid 0 to the experiment's owner; trials never run as root"
            )
        return TrialUser(f"det-{uid}", uid, uid if gid is None else gid)
    name = configured or DEFAULT_TRIAL_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if configured:
            raise TrialIsolationError(
                f"[det] trial_user = {name}: no such user on this machine; create it "
                f"(useradd --system --user-group --no-create-home --shell /usr/sbin/nologin {name}) "
                "or remove trial_user"
            ) from None
        entry = _create_default_user(name)
    if entry.pw_uid == 0:
        raise TrialIsolationError(
            f"[det] trial_user = {name}: trials must not run as root; name an unprivileged user"
        )
    return TrialUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def hand_over(workdir: str | os.PathLike[str], user: TrialUser) -> None:
    """Give ``workdir`` and everything in it to ``user``, readable by no one else."""
    root = Path(workdir)
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), user.uid, user.gid, follow_symlinks=False)
    os.chown(root, user.uid, user.gid)
    root.chmod(0o700)


def make_passable_dirs(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its missing parents) with mode 0711: another user may pass through to
    a folder whose name it knows, but may not list or read them."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        folder.chmod(0o711)
    return path


def prepare_checkpoint_root(root: str | os.PathLike[str]) -> Path:
    """Create the platform's checkpoint root, or set it right: root-owned, mode 1733 (sticky).

    Every trial identity may create its checkpoint folders in it, none may list it, nor remove or
    rename another's. Only this folder is made by the platform; what lies inside is made by the
    trials, as their own identity. For a worker that is root."""
    root = Path(os.path.abspath(root))
    if not root.exists():
        make_passable_dirs(root.parent)
        root.mkdir(exist_ok=True)
    st = os.stat(root, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise TrialIsolationError(f"[det] checkpoint_storage_path {root} is not a folder")
    if (st.st_uid, st.st_gid) != (0, 0):
        os.chown(root, 0, 0, follow_symlinks=False)
    if stat.S_IMODE(st.st_mode) != 0o1733:
        root.chmod(0o1733)
    return root


def make_dirs_as(path: str | os.PathLike[str], user: TrialUser | None) -> None:
    """Create ``path`` and its missing parents as ``user`` (a child process that has dropped to it),
    so that a folder a trial's config named is made with the trial's own rights, never root's.
    With no ``user`` (a worker that is not root) this process creates it as itself."""
    if user is None:
        Path(path).mkdir(parents=True, exist_ok=True)
        return
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; os.makedirs(sys.argv[1], mode=0o700, exist_ok=True)",
            str(path),
        ],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        reason = (made.stderr.strip().splitlines() or ["no message"])[-1]
        raise TrialIsolationError(f"trial user {user.name} cannot create {path}: {reason}")


def check_can_write(path: str | os.PathLike[str], user: TrialUser) -> None:
    """Fail early, naming the folder and the fix, when ``user`` could not write its checkpoints in
    ``path``. A missing ``path`` is not created here: the trial creates it as its own identity, so
    the nearest folder that exists must let it. Nothing is created or handed over as root."""
    path = Path(os.path.abspath(path))
    existing = next(p for p in (path, *path.parents) if p.exists())
    for folder in reversed(existing.parents):
        mode = folder.stat()
        if not _allows(mode, user, os.X_OK):
            raise TrialIsolationError(
                f"trial user {user.name} cannot reach {path}: it may not pass through {folder} "
                f"(mode {stat.filemode(mode.st_mode)}, owner uid {mode.st_uid}); choose another "
                "checkpoint_storage.host_path or let others pass: chmod o+x "
                f"{folder}"
            )
    if not _allows(existing.stat(), user, os.W_OK | os.X_OK):
        what = f"write to {path}" if existing == path else f"create {path} (in {existing})"
        raise TrialIsolationError(
            f"trial user {user.name} cannot {what}: make it writable by uid {user.uid} or choose "
            "another checkpoint_storage.host_path"
        )


def ensure_writable_dir(path: str | os.PathLike[str], user: TrialUser, *, adopt: bool = False) -> None:
    """Make sure ``user`` can write its checkpoints in ``path``. With ``adopt`` (``path`` is the
    platform's checkpoint root) the root is created or set right (:func:`prepare_checkpoint_root`);
    any other folder is never created nor handed over as root (:func:`check_can_write`)."""
    if adopt:
        prepare_checkpoint_root(path)
    check_can_write(path, user)


def check_trial_access(user: TrialUser, *, read: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Fail early, naming the folder and the fix, when ``user`` cannot reach one of ``read``
    (every folder above it must let the user pass, and the path itself must be readable)."""
    # Both the path as named and where its links lead (a venv's python links to the base one).
    paths = dict.fromkeys(p for t in read for p in (Path(t).absolute(), Path(t).resolve()))
    for path in paths:
        for folder in reversed(path.parents):
            mode = folder.stat()
            if not _allows(mode, user, os.X_OK):
                raise TrialIsolationError(
                    f"trial user {user.name} cannot reach {path}: it may not pass through {folder} "
                    f"(mode {stat.filemode(mode.st_mode)}, owner uid {mode.st_uid}). Allow passing "
                    f"through only, without listing: chmod o+x {folder} (running "
                    "'python -m det_airflow.localairflow init' as root does this for the interpreter "
                    "and the Airflow home)"
                )
        if not _allows(path.stat(), user, os.R_OK):
            raise TrialIsolationError(
                f"trial user {user.name} cannot read {path} (mode {stat.filemode(path.stat().st_mode)}); "
                f"make it readable by others: chmod o+r {path}"
            )


def interpreter_paths() -> list[Path]:
    """What a trial needs to run this Python with det-airflow: the interpreter, its standard
    library and det-airflow itself."""
    import det_airflow

    return [
        Path(sys.executable),
        Path(os.__file__).parent,
        Path(det_airflow.__file__).parent,
    ]


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


def _allows(st: os.stat_result, user: TrialUser, bits: int) -> bool:
    """Whether the mode bits of ``st`` grant ``user`` all of ``bits`` (os.R_OK, W_OK, X_OK).

    The trial keeps only its primary group, so that is the only group that counts."""
    if st.st_uid == user.uid:
        granted = st.st_mode >> 6
    elif st.st_gid == user.gid:
        granted = st.st_mode >> 3
    else:
        granted = st.st_mode
    return granted & bits == bits


def _create_default_user(name: str) -> pwd.struct_passwd:
    """Create the dedicated trial user (a system user with no home and no login shell)."""
    command = [
        "useradd",
        "--system",
        "--user-group",
        "--no-create-home",
        "--shell",
        "/usr/sbin/nologin",
        name,
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    except OSError as exc:
        raise TrialIsolationError(
            f"cannot create the trial user {name} ({' '.join(command)}: {exc.strerror or exc}); create it "
            "yourself or set [det] trial_user to an existing unprivileged user"
        ) from None
    try:
        return pwd.getpwnam(name)  # another worker may have created it at the same moment
    except KeyError:
        raise TrialIsolationError(
            f"cannot create the trial user {name}: {' '.join(command)} said {result.stderr.strip()!r}; "
            "create it yourself or set [det] trial_user to an existing unprivileged user"
        ) from None


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
    package_root = Path(__file__).resolve().parent.parent
    if package_root.name not in ("site-packages", "dist-packages"):
        entries.append(str(package_root))
    existing_entries = [p for p in existing.split(os.pathsep) if p]
    from det_airflow.compat import determined_path_entry

    # `import determined` is ours unless a real Determined is installed or on the path (then it wins).
    alias = determined_path_entry()
    if alias is not None and not any((Path(p) / "determined").is_dir() for p in existing_entries):
        entries.append(alias)
    entries.extend(existing_entries)
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
