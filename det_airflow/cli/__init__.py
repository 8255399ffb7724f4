"""The ``det`` command line: one module per noun (experiment, trial, user, admin), rendering in
``render``. Heavy libraries (torch, airflow, optuna, httpx) are imported inside commands only, so
``det --help`` stays fast.
"""
