"""``python3 -m determined.launch.torch_distributed``: runs ``python3 -m det_airflow.launchers.torch_distributed``."""

if __name__ == "__main__":
    from . import run_launcher

    run_launcher("torch_distributed")
