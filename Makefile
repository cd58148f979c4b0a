# Two commands: `make serve` and `make test`. Each installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
SERVE_ARGS ?=

.PHONY: serve test install install-test system-deps unit e2e bench bench-compare lint clean spark example

$(VENV)/.runtime: pyproject.toml setup.py storage/_speedups.c coordinator/_speedups.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.runtime
	$(PIP) install -q -e '.[test,spark]'
	touch $@

install: $(VENV)/.runtime
# system-deps first: it brings the C compiler the install builds the compiled parts with (setup.py)
install-test: system-deps $(VENV)/.test

system-deps:
	bash scripts/install-system-deps.sh

serve: install
	$(PY) -m coordinator serve $(SERVE_ARGS)

# ruff (lint and format), the import contracts of pyproject.toml, mypy (strict on the pure core): see pyproject.toml.
lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q --durations=25

unit: install-test
	$(PY) -m pytest -q tests/unit

e2e: install-test
	$(PY) -m pytest -q -m e2e

spark: install-test
	$(PY) -m pytest -q -m spark tests/spark

# The PySpark pipeline of examples/ against a running `make serve` (EXAMPLE_ARGS="--bootstrap HOST:PORT ...").
EXAMPLE_ARGS ?= --bootstrap 127.0.0.1:9092 --demo-events 500
example: $(VENV)/.test
	$(PY) examples/pipeline.py $(EXAMPLE_ARGS)

bench: install-test
	$(PY) bench/dataplane.py

# Side by side with Apache Kafka (jars from Maven Central), librdkafka's mock cluster and Tansu: bench/README.md.
# BENCH_ARGS=--quick for a small run; results in bench/results/.
BENCH_ARGS ?=
$(VENV)/.bench: pyproject.toml $(VENV)/.test
	$(PIP) install -q -e '.[test,bench]'
	touch $@

bench-compare: $(VENV)/.bench
	bash scripts/fetch-jars.sh .deps/jars kafka-server
	bash scripts/fetch-tansu.sh
	$(PY) bench/compare.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis build storage/*.so coordinator/*.so
