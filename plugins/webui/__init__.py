"""The det plugin for Airflow: mounts the master at /det in Airflow's API server."""
