"""Running one trial's process: its spec, its work folder and ``DET_*`` environment, the OS identity
it runs as, and the process itself with its output.

Shared by the trial runners (:mod:`det_airflow.operators.runners`) and ``det experiment create
--local``; nothing here needs Airflow. One job per module:

- ``_spec``: :class:`TrialSpec` (the master's answer) and the entrypoint's argv;
- ``_environment``: the trial's environment variables and the files in its work folder;
- ``_isolation``: the unprivileged user a trial runs as, and what it may reach;
- ``_network``: the firewall rule that keeps trial uids off the host's own services;
- ``_overlay_venv``: a throwaway virtual environment over det-airflow's, for a startup hook run
  on a user's machine;
- ``_private_tmpdir``: the trial's ``TMPDIR`` on a host, short (for AF_UNIX sockets) and its own;
- ``_process``: starting, watching and stopping the process;
- ``_output_lines``: the process's output, split into lines.

Example:
    >>> spec = TrialSpec.from_dict(answer["spec"])
    >>> workdir = prepare_workdir(context_bytes, Path("/tmp/trial_1"))
    >>> tmpdir = make_private_tmpdir()  # short, for AF_UNIX sockets; the trial's own
    >>> env = trial_environment(spec, master_url=master, token=answer["token"], workdir=workdir,
    ...                         tmpdir=tmpdir)
    >>> code = run_trial_process(workdir, entrypoint_argv(spec.config["entrypoint"]), env,
    ...                          on_output=lambda line, stream: print(line))
    >>> remove_private_tmpdir(tmpdir)
"""

from det_airflow.trial_process._environment import (
    CHIEF_IP,
    CONFIG_FILE_NAME,
    TRIAL_FILES_DIR,
    prepare_workdir,
    trial_environment,
    trial_files_dir,
    write_trial_files,
)
from det_airflow.trial_process._isolation import (
    DEFAULT_TRIAL_USER,
    TrialIsolationError,
    TrialUser,
    check_can_write,
    check_trial_access,
    ensure_writable_dir,
    hand_over,
    interpreter_paths,
    make_dirs_as,
    make_passable_dirs,
    prepare_checkpoint_root,
    trial_user,
)
from det_airflow.trial_process._network import (
    TrialNetworkError,
    allowed_ports,
    ensure_trial_firewall,
    keep_off_host_services,
)
from det_airflow.trial_process._output_lines import LineSplitter, OnOutput, pump_lines
from det_airflow.trial_process._overlay_venv import OverlayVenvError, make_overlay_venv
from det_airflow.trial_process._private_tmpdir import (
    MAX_TMPDIR_LENGTH,
    make_private_tmpdir,
    remove_private_tmpdir,
)
from det_airflow.trial_process._process import STARTUP_HOOK, run_trial_process
from det_airflow.trial_process._spec import TrialSpec, entrypoint_argv

__all__ = [
    "CHIEF_IP",
    "CONFIG_FILE_NAME",
    "DEFAULT_TRIAL_USER",
    "MAX_TMPDIR_LENGTH",
    "STARTUP_HOOK",
    "TRIAL_FILES_DIR",
    "LineSplitter",
    "OnOutput",
    "OverlayVenvError",
    "TrialIsolationError",
    "TrialNetworkError",
    "TrialSpec",
    "TrialUser",
    "allowed_ports",
    "check_can_write",
    "check_trial_access",
    "ensure_trial_firewall",
    "ensure_writable_dir",
    "entrypoint_argv",
    "hand_over",
    "interpreter_paths",
    "keep_off_host_services",
    "make_dirs_as",
    "make_overlay_venv",
    "make_passable_dirs",
    "make_private_tmpdir",
    "prepare_checkpoint_root",
    "prepare_workdir",
    "pump_lines",
    "remove_private_tmpdir",
    "run_trial_process",
    "trial_environment",
    "trial_files_dir",
    "trial_user",
    "write_trial_files",
]
