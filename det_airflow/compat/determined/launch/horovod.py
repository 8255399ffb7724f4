"""``python3 -m determined.launch.horovod``: runs ``python3 -m det_airflow.launchers.horovod``."""

if __name__ == "__main__":
    from . import run_launcher

    run_launcher("horovod")
