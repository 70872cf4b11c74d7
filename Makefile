# Every target sets up .venv itself; `make demo` and `make test` are all a newcomer needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint unit e2e bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)  ## the main job on the built-in model: span tree + spans file, no server
	$(BIN)/otel-ort demo

test: lint unit e2e  ## everything CI runs, fast stage first

lint: $(STAMP)  ## fast stage, part 1: ruff (lint + format) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: $(STAMP)  ## fast stage, part 2: in-process tests (seconds)
	$(BIN)/pytest -m "not e2e" -q

e2e: $(STAMP)  ## slow end-to-end stage: subprocesses, opentelemetry-instrument, OTLP over sockets
	$(BIN)/pytest -m e2e -q

bench: $(STAMP)  ## run overhead; profile → spans speed; perf counting overhead (each against its baseline, same run)
	$(BIN)/python -m bench.run_overhead
	$(BIN)/python -m bench.profile_spans
	$(BIN)/python -m bench.profile_overhead
	$(BIN)/python -m bench.perf_overhead

clean:
	rm -rf $(VENV) otel-ort-demo .pytest_cache .mypy_cache .ruff_cache
