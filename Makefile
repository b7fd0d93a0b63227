# Tether's two front doors: `make demo` and `make test`. Everything installs from
# this repository's own files and the package registries.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck unit bench soak clean browser-deps

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# compileall: an editable install leaves src/ uncompiled, and with PYTHONDONTWRITEBYTECODE
# set (as on our machines) every CLI call would recompile Tether's modules from source.
$(VENV)/.installed: $(VENV)/bin/python pyproject.toml
	$(PY) -m pip install --quiet -e .
	$(PY) -m compileall -q src
	touch $@

$(STAMP): $(VENV)/bin/python pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m compileall -q src
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	@TETHER=$(VENV)/bin/tether scripts/demo.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: $(STAMP) lint typecheck
	$(PY) -m pytest -q

# Opt-in: Debian's Chromium for the dashboard's browser tests (they skip, saying so,
# without it). `make test` never installs system packages by surprise.
browser-deps:
	apt-get update && apt-get install -y chromium

bench: $(VENV)/.installed
	$(PY) -m compileall -q src   # current bytecode: measure Tether, not the compiler
	$(PY) bench/run.py

soak: $(VENV)/.installed
	$(PY) -m compileall -q src
	$(PY) bench/soak.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
