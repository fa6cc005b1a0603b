# All set-up lives here: `make smoke` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# CPU machines keep the CPU torch build; `make install GPU=1` installs verl's vLLM pin instead.
GPU    ?=
TORCH  := torch==2.13.0
EXTRAS := $(if $(GPU),dev$(comma)gpu,dev)
CONSTRAINTS := $(if $(GPU),,-c constraints/cpu.txt)
comma  := ,

.PHONY: install smoke test test-fast lint bench

install: $(STAMP)

$(STAMP): pyproject.toml constraints/cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(if $(GPU),,$(PY) -m pip install -q $(TORCH))
	$(PY) -m pip install -q $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	# bfcl-eval pins numpy 1.26 (verl needs numpy 2); only its data and checkers are used: no deps
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)

smoke: $(STAMP)
	$(PY) -m dara.train

test: $(STAMP)
	$(PY) -m pytest -q

# The unit lane: everything but real training runs, Slurm clusters and jobs of a minute or more.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not slurm and not multinode"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) scripts/bench/estimators.py
