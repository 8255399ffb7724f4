"""The DAG file Airflow parses to turn experiment YAMLs into DAGs, as `det admin install-dags`
writes it; the repository's dags/det_experiments.py is this text (a test holds them equal)."""

from __future__ import annotations

from pathlib import Path

from det_airflow.errors import DetError

FILE_NAME = "det_experiments.py"
SOURCE = '''\
"""det-airflow: every experiment YAML under this folder becomes a DAG named det_<file stem>.

Drop a Determined experiment config (a YAML whose top level has `searcher`) next to its training
code anywhere below this folder, then `airflow dags trigger det_<stem>`. Configs submitted with
`det experiment create` are written to experiments/ and run once, right away.
"""

from pathlib import Path

from airflow.sdk import get_parsing_context

from det_airflow.dagfactory import build_dags

# A task process builds only its own DAG.
_only = get_parsing_context().dag_id
globals().update(build_dags(Path(__file__).resolve().parent, only_dag_id=_only))
'''


def install(dags_folder: Path, *, force: bool = False) -> str:
    """Writes the loader into ``dags_folder``, making the folder when Airflow has not yet (a fresh
    ``AIRFLOW_HOME`` names ``dags/`` before anything makes it); answers what it did, in one line."""
    if dags_folder.exists() and not dags_folder.is_dir():
        raise DetError(f"{dags_folder}: not a folder (give Airflow's [core] dags_folder)")
    made = not dags_folder.exists()
    if made:
        try:
            dags_folder.mkdir(parents=True)
        except OSError as exc:
            raise DetError(f"{dags_folder}: cannot make the DAGs folder: {exc.strerror}") from None
    target = dags_folder / FILE_NAME
    if target.exists():
        if target.read_text() == SOURCE:
            return f"{target} is already up to date"
        if not force:
            raise DetError(f"{target} exists and differs from det-airflow's; --force replaces it")
    tmp = target.with_name(f".{FILE_NAME}.tmp")
    tmp.write_text(SOURCE)
    tmp.replace(target)  # a parse never reads half a file
    return f"Made {dags_folder} and wrote {target}" if made else f"Wrote {target}"
