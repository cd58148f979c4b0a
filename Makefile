# Two commands: `make serve` and `make test`. Each installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
SERVE_ARGS ?=

.PHONY: serve test install install-test system-deps unit e2e bench lint clean

$(VENV)/.runtime: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.runtime
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(VENV)/.runtime
install-test: $(VENV)/.test system-deps

system-deps:
	bash scripts/install-system-deps.sh

serve: install
	$(PY) -m coordinator serve $(SERVE_ARGS)

test: install-test
	$(PY) -m pytest -q

unit: install-test
	$(PY) -m pytest -q tests/unit

e2e: install-test
	$(PY) -m pytest -q -m e2e

bench: install-test
	$(PY) bench/dataplane.py

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis
