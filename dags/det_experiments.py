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
