# Landfall: the two commands a newcomer types are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install lock demo test test-unit test-integration test-e2e lint bench bench-estimates bench-learning bench-ui load campaign fuzz up down status clean

# Install requirements.lock (every transitive pin, with hashes; `make lock` writes it from requirements.txt) with uv
# (pinned, put into the venv by the system's pip: seconds instead of a minute). The venv is made without pip (venv's
# ensurepip took 6 s) and uv installs pip into it; pip installs the same lock when uv cannot be had or fails. uv reads
# no pip.conf: scripts/uv_sources.py passes it pip's find-links, indexes and constraints (else it would pull a
# multi-GB CUDA torch instead of the local CPU one).
# Bytecode: only for the modules the stack, the CLI and the trainer import (scripts/bytecode.py compiles the 3,144
# of scripts/bytecode_imports.txt, traced from `make demo`: 11 CPU-s of compiling; the whole install 25 CPU-s; the
# trainer's torch, sympy, mpmath and tensorboard in the background at low priority, which no stack process imports). uv's
# --compile-bytecode compiled all of site-packages (14,501 modules; the install 75-85 CPU-s), most of which no process
# imports. Without bytecode, with PYTHONDONTWRITEBYTECODE=1 (set on these machines), every process compiles what it
# imports each time (`import torch` 8 CPU-s instead of 3), and the suite starts hundreds; letting the processes write
# it instead cost the first `make demo` 20 s (the stack's processes start together and compile the same modules).
# Figures both ways: docs/measurements/2026-11-28-first-minutes.md.
UV_VERSION := 0.13.9
PIP := $(PY) -m pip install -q --disable-pip-version-check

$(STAMP): requirements.lock requirements.txt functions/requirements.txt trainer/requirements.txt landfall/ui/requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv --without-pip $(VENV)
	@if python3 -m pip --python $(PY) install -q --disable-pip-version-check uv==$(UV_VERSION) 2>/dev/null && \
	    UV_SOURCES="$$(python3 scripts/uv_sources.py)" && \
	    $(VENV)/bin/uv pip install -q --python $(PY) $$UV_SOURCES pip && \
	    $(VENV)/bin/uv pip install -q --python $(PY) $$UV_SOURCES -r requirements.lock && \
	    $(VENV)/bin/uv pip install -q --python $(PY) $$UV_SOURCES --no-deps -e . && \
	    $(PY) scripts/bytecode.py; then \
	  echo "installed requirements.lock with uv $(UV_VERSION)"; \
	else \
	  echo "uv $(UV_VERSION) unavailable or failed: installing requirements.lock with pip"; \
	  { $(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip -q; } && \
	  $(PIP) -r requirements.lock && $(PIP) --no-deps -e . ; \
	fi
	@touch $(STAMP)

install: $(STAMP)

## make lock: requirements.lock from requirements.txt (which includes functions/ and trainer/requirements.txt): every
## transitive distribution pinned with its hashes, so a fresh clone installs exactly what CI tested. Run it after
## changing a requirements file; tests/unit/test_requirements.py fails while the lock disagrees with them.
lock:
	@test -x $(VENV)/bin/uv || { test -x $(PY) || python3 -m venv $(VENV); $(PIP) uv==$(UV_VERSION); }
	$(VENV)/bin/uv pip compile -q $$($(PY) scripts/uv_sources.py) --python-version 3.11 --generate-hashes \
	  --custom-compile-command "make lock" requirements.txt -o requirements.lock

## make demo: virtual environment, install, local stack, then data dropped -> run SUCCEEDED with metrics.
## PORTS=free starts the stack on free ports (LANDFALL_PORTS, also read by `landfall up`); PORTS=default on
## deploy/topology.toml's; unset, a stack reuses the ports the last one used (.landfall/ports.json).
demo: $(STAMP)
	$(if $(PORTS),LANDFALL_PORTS=$(PORTS) )$(VENV)/bin/landfall demo

## make test: the whole suite (unit, integration against the emulators, end to end) on TEST_WORKERS pytest-xdist
## workers (one runs the tests of the shared local stack, the others the rest: docs/testing.md), after the tests marked
## `alone` (the default ports) by themselves; branch coverage of functions, schemas, trainer, deploy and landfall,
## their subprocesses included ([tool.coverage] in pyproject.toml), printed at the end. TEST_WORKERS=0: one process.
## Landfall's own bytecode is written first: with PYTHONDONTWRITEBYTECODE (set on these machines) every function
## server, CLI and trainer process the suite starts compiled the modules it imports (0.14 CPU-s a function server).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m compileall -q functions schemas trainer deploy landfall
	$(PY) -m pytest tests/e2e -m alone --cov --cov-report=
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not alone" --cov --cov-append --cov-report=term --durations=15

## Tests climb in cost: unit (pure logic, starts no process), integration (emulators and real processes), e2e.
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

test-e2e: $(STAMP)
	$(PY) -m pytest tests/e2e

## make fuzz: the fuzz properties of tests/unit/fuzz/ over thousands of random examples each (`make test` runs them
## bounded and reproducible: hypothesis profile `ci`). FUZZ_EXAMPLES=10000 for a longer run.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),1000) $(PY) -m pytest tests/unit/fuzz -m fuzz -q -p no:logging \
	  --show-capture=no --hypothesis-show-statistics

## make lint: ruff, the formatter's check, the type checker (mypy, [tool.mypy] in pyproject.toml) and the import
## contracts (import-linter's layers, [tool.importlinter]); .ci/run and pre-commit run the same.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## make bench: every bench/*.py in turn, each printing its figures (docs/benchmarks.md); one that misses its target
## or fails does not stop the others, and make reports them at the end.
bench: $(STAMP)
	@failed=""; for b in bench/*.py; do echo "== $$b"; $(PY) $$b || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "missed their target or failed:$$failed"; exit 1; fi

## make bench-estimates: the planner pinned to every measured GPU configuration (schemas/data/throughput_points.json):
## planned against measured samples/s per GPU and their ratio, target within 25 % (docs/measurements/planner.md).
bench-estimates: $(STAMP)
	$(PY) bench/estimates.py

## make bench-learning: plans that learn: a run planned from the model, then the same workload planned from what it
## measured (again, on twice the GPUs, on twice the data), on a local stack of its own with the built-in CPU trainer;
## each estimate's error (docs/benchmarks.md).
bench-learning: $(STAMP)
	$(PY) bench/learning_bench.py

## make bench-ui: the dashboard's runs page with 10,000 runs (its own Firestore emulator): first load, next page and
## each filter, median and slowest of 5 (target under 1 s; docs/benchmarks.md, docs/ui.md).
bench-ui: $(STAMP)
	$(PY) bench/ui_bench.py

## make load: DATASETS (default 1000) datasets from 5 teams dropped at once on a local stack of its own, the trainer a
## no-op, the Vertex emulator enforcing Google's rate limits (RATE_LIMITS=real|off, RATE_SCALE=1): every run ended,
## none lost, doubled or moved to a fallback by a rate limit, each team's GPU cap held; Vertex calls per minute by
## method, queueing time, latency, dispatcher requests/s and CPU ms per request (docs/benchmarks.md). Long: over 20
## minutes at Vertex's 60 creations a minute (1,000 datasets with the caps binding: 22 minutes here).
DATASETS ?= 1000
RATE_LIMITS ?= real
RATE_SCALE ?= 1
load: $(STAMP)
	$(PY) -m bench.local_stack.load --datasets $(DATASETS) --rate-limits $(RATE_LIMITS) --rate-scale $(RATE_SCALE) \
		--out load.json

## make campaign: the fault campaign (long, not part of `make test`): its own local stack, TRIALS trials (300) with
## faults drawn from SEED (default: the clock), BATCH at once; prints the counts and a replay command per violation,
## writes .landfall/campaign/last.json. Replay a batch: make campaign SEED=S FIRST=N TRIALS=25.
TRIALS ?= 300
FIRST ?= 0
BATCH ?= 25
campaign: $(STAMP)
	$(PY) -m tests.campaign --trials $(TRIALS) --first $(FIRST) --batch $(BATCH) $(if $(SEED),--seed $(SEED))

up: $(STAMP)
	$(if $(PORTS),LANDFALL_PORTS=$(PORTS) )$(VENV)/bin/landfall up

down:
	$(VENV)/bin/landfall down

status:
	$(VENV)/bin/landfall status

clean: down
	rm -rf .landfall
