"""``python3 -m determined.launch.deepspeed``: runs ``python3 -m det_airflow.launchers.deepspeed``."""

if __name__ == "__main__":
    from . import run_launcher

    run_launcher("deepspeed")
