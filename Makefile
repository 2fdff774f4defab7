# Landfall: the two commands a newcomer types are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-unit test-integration test-e2e lint bench up down status clean

$(STAMP): requirements.txt functions/requirements.txt trainer/requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

install: $(STAMP)

## make demo: virtual environment, install, local stack, then data dropped -> run SUCCEEDED with metrics.
demo: $(STAMP)
	$(VENV)/bin/landfall demo

## make test: the whole suite (unit, integration against the emulators, end to end).
test: $(STAMP)
	$(PY) -m pytest

## Tests climb in cost: unit (pure logic, starts no process), integration (emulators and real processes), e2e.
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

test-e2e: $(STAMP)
	$(PY) -m pytest tests/e2e

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

up: $(STAMP)
	$(VENV)/bin/landfall up

down:
	$(VENV)/bin/landfall down

status:
	$(VENV)/bin/landfall status

clean: down
	rm -rf .landfall
