"""Distributed launchers for trial entrypoints (imported as det_airflow.launchers)."""
