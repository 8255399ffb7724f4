# det-airflow developer commands (GNU make). `make quickstart` runs Airflow and the example;
# `make test` runs the test suite. Both create .venv first, and reuse what is already there.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
AIRFLOW_HOME_DIR := $(CURDIR)/.airflow
AIRFLOW_PORT ?= 8080
LOCALAIRFLOW := $(PY) -m det_airflow.localairflow --home $(AIRFLOW_HOME_DIR)
DET := $(VENV)/bin/det
export DET_MASTER ?= http://127.0.0.1:$(AIRFLOW_PORT)
# Extra airflow.cfg settings for the quickstart, e.g. --set det.trial_work_dir=$(CURDIR)/.airflow/trials
AIRFLOW_SETTINGS ?=

ADMIN_PASSWORD = $$($(PY) -c 'import json, sys; print(json.load(open(sys.argv[1]))["admin"])' $(AIRFLOW_HOME_DIR)/simple_auth_manager_passwords.json)

# ---- The quickstart's experiment (finished by the lead: the det CLI's command line) ----
QUICKSTART_EXPERIMENT = DET_USER=admin DET_PASS="$(ADMIN_PASSWORD)" \
	$(DET) experiment create examples/mnist_pytorch/const.yaml examples/mnist_pytorch -f

.PHONY: venv airflow-up stop test lint mutation quickstart quickstart-experiment trial-image

venv: $(VENV)/.installed

# Re-installs when pyproject.toml changes; `pip install torch==2.13.0` takes the CPU wheel on disk.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -e '.[airflow,torch,dev]'
	touch $@

# Airflow (SQLite, LocalExecutor) in .airflow/, parsing dags/; started in the background, on
# 127.0.0.1 only. Reuses the database, secrets and admin password already there.
airflow-up: venv
	$(LOCALAIRFLOW) init --dags-folder $(CURDIR)/dags --port $(AIRFLOW_PORT) $(AIRFLOW_SETTINGS)
	$(LOCALAIRFLOW) start

stop:
	@if [ -f $(AIRFLOW_HOME_DIR)/airflow.cfg ]; then $(LOCALAIRFLOW) stop; else echo "nothing started"; fi

# The image Docker trials run in (det-airflow-trial:cpu), built offline from this machine's Python
# and the venv's trial-side packages (docs/containers.md). Needs a running dockerd.
trial-image: venv
	$(PY) images/trial_image.py --tag det-airflow-trial:cpu

test: venv
	$(VENV)/bin/pytest -q -rs tests

# Mutation testing of the pure modules with their unit tests ([tool.mutmut] in pyproject.toml); about
# 1 h 30 min on 2 cores, so not part of `make test` or CI. Narrow it with a glob of mutant names:
# make mutation MUTANTS='det_airflow.context_archive* det_airflow.cluster_info*'
MUTANTS ?=
mutation: venv
	set -f; $(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut results

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

quickstart-experiment: airflow-up
	AIRFLOW_HOME=$(AIRFLOW_HOME_DIR) $(DET) admin migrate
	$(QUICKSTART_EXPERIMENT)

quickstart: quickstart-experiment
	@echo
	@echo "Airflow UI:  http://127.0.0.1:$(AIRFLOW_PORT)"
	@echo "user:        admin"
	@echo "password:    $(ADMIN_PASSWORD)"
	@echo "Stop it with 'make stop'."
