"""The programs that run inside a task (notebook, TensorBoard, shell), each the entrypoint of the
task's one trial: ``python3 -m det_airflow.tasks.notebook``, ``.tensorboard``, ``.shell``.

Each asks the master what its task is (``RuntimeClient.task``), starts its server under the task's
proxy prefix on a free port, says where it listens and which secret the proxy must present, refuses
requests without that secret, and exits 0 once unused for the task's idle timeout. Where it says so
is the master's choice (``ready_to``): on a local or Docker runner, in :data:`READY_FILE` of its
work folder's ``.det/``, for the runner to check that the port is the program's own and tell the
master; in a pod, to the master itself (``RuntimeClient.task_ready``). A command task needs no
program of its own: its argv is the trial's entrypoint.

Trial-side code: nothing here imports Airflow or the master.
"""

# The header the master's proxy adds to every request it forwards to a task's server, with the secret
# the task's program chose; the master and the programs here both name it from this one place.
SECRET_HEADER = "X-Det-Task-Secret"

# Where a local or Docker task's program writes ``{"port", "secret", "address"}`` (JSON, mode 0600),
# in the folder of det's own files of its work folder; its runner reads it (operators/runners).
READY_FILE = "task-ready.json"
# The label that marks a task's experiment, and the types whose programs serve pages.
LABEL_PREFIX = "det-task:"
SERVED = ("notebook", "tensorboard", "shell")


def served_type(labels: object) -> str | None:
    """The type of task an experiment's labels mark, when it serves pages; None otherwise."""
    for label in labels if isinstance(labels, list | tuple) else ():
        if isinstance(label, str) and label.startswith(LABEL_PREFIX) and label[len(LABEL_PREFIX) :] in SERVED:
            return label[len(LABEL_PREFIX) :]
    return None
