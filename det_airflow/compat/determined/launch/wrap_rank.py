"""``python3 -m determined.launch.wrap_rank``: runs ``python3 -m det_airflow.launchers.wrap_rank``."""

if __name__ == "__main__":
    from . import run_launcher

    run_launcher("wrap_rank")
