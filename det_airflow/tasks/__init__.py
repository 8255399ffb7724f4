"""The programs that run inside a task (notebook, TensorBoard, shell), each the entrypoint of the
task's one trial: ``python3 -m det_airflow.tasks.notebook``, ``.tensorboard``, ``.shell``.

Each asks the master what its task is (``RuntimeClient.task``), starts its server under the task's
proxy prefix on a free port, tells the master where it listens and which secret the proxy must
present (``RuntimeClient.task_ready``), refuses requests without that secret, and exits 0 once
unused for the task's idle timeout. A command task needs no program of its own: its argv is the
trial's entrypoint.

Trial-side code: nothing here imports Airflow or the master.
"""

# The header the master's proxy adds to every request it forwards to a task's server, with the secret
# the task's program chose; the master and the programs here both name it from this one place.
SECRET_HEADER = "X-Det-Task-Secret"
