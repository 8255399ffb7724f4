"""``python3 -m determined.launch.tensorflow``: runs ``python3 -m det_airflow.launchers.tensorflow``."""

if __name__ == "__main__":
    from . import run_launcher

    run_launcher("tensorflow")
