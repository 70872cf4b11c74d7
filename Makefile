# Every target sets up .venv itself; `make demo` and `make test` are all a newcomer needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Arize Phoenix, the real OTLP backend of the e2e-phoenix stage, in an environment of its own
# (about 850 MB and 1 minute to install; its dependencies stay out of otel-ort's)
PHOENIX_VENV := .venv-phoenix
PHOENIX_VERSION := 20.26.1
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint unit e2e e2e-phoenix browser wrk up down bench clean

$(STAMP): pyproject.toml setup.py $(wildcard otel_ort/*/*.c otel_ort/*/*.h)  # the C parts: built at install
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

$(PHOENIX_STAMP):
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PHOENIX_VENV)/bin/python -m pip install --quiet "arize-phoenix==$(PHOENIX_VERSION)"
	touch $(PHOENIX_STAMP)

demo: $(STAMP)  ## the main job on the built-in model: span tree + spans file, no server
	$(BIN)/otel-ort demo

test: lint unit e2e e2e-phoenix  ## everything CI runs, fast stage first

lint: $(STAMP)  ## fast stage, part 1: ruff (lint + format) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: $(STAMP)  ## fast stage, part 2: in-process tests (seconds)
	$(BIN)/pytest -m "not e2e and not phoenix" -q

e2e: $(STAMP) browser  ## slow end-to-end stage: subprocesses, examples, OTLP over sockets, the HTML report in chromium
	$(BIN)/pytest -m e2e -q

browser:  ## Debian's chromium for the report's browser tests, installed when missing (apt-get)
	@command -v $${OTEL_ORT_CHROMIUM:-chromium} >/dev/null || ! command -v apt-get >/dev/null || \
		{ $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium >/dev/null; }

e2e-phoenix: $(STAMP) $(PHOENIX_STAMP)  ## end-to-end stage against Arize Phoenix (a real OTLP backend the tests start)
	OTEL_ORT_PHOENIX=$(PHOENIX_VENV)/bin/phoenix $(BIN)/pytest -m phoenix -q

up:  ## the collector, Jaeger, Tempo, Prometheus and Grafana (needs Docker): see collector/README.md
	docker compose up -d

down:
	docker compose down

bench: $(STAMP) wrk  ## run overhead; profile → spans speed; perf counting overhead and attribution; a profiled run's whole-process CPU; the FastAPI example under wrk; memory; ORT's pool profiler; perf's always-counting events (each against its baseline, same run)
	$(BIN)/python -m bench.run_overhead
	$(BIN)/python -m bench.profile_spans
	$(BIN)/python -m bench.profile_overhead
	$(BIN)/python -m bench.perf_overhead
	$(BIN)/python -m bench.perf_attribution
	$(BIN)/python -m bench.profiled_run_cost
	$(BIN)/python -m bench.service_load
	$(BIN)/python -m bench.profile_memory
	$(BIN)/python -m bench.pool_profiler_cost
	$(BIN)/python -m bench.perf_recording_cost

wrk:  ## Debian's wrk, the HTTP load generator of bench.service_load, installed when missing (apt-get)
	@command -v wrk >/dev/null || ! command -v apt-get >/dev/null || \
		{ $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q wrk >/dev/null; }

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) otel-ort-demo .pytest_cache .mypy_cache .ruff_cache
