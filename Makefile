# All set-up lives here: `make smoke` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# CPU machines keep the CPU torch build. `make install GPU=1` installs verl 0.9.1's own FSDP + vLLM stack from the
# lock constraints/gpu.txt (torch 2.11.0 CUDA 13, vllm 0.24.0, transformers 5.9.0), then flash-attn 2.8.3 built
# against that torch (--no-build-isolation; a prebuilt wheel is fetched when one matches, else it compiles ~1 h).
GPU    ?=
comma  := ,
STAMP  := $(VENV)/.installed$(if $(GPU),-gpu)
TORCH  := $(if $(GPU),torch torchvision torchaudio,torch==2.13.0)
EXTRAS := $(if $(GPU),dev$(comma)gpu,dev)$(comma)trl
CONSTRAINTS := $(if $(GPU),-c constraints/gpu.txt,-c constraints/cpu.txt)

.PHONY: install smoke smoke-trl test test-fast lint bench

install: $(STAMP)

$(STAMP): pyproject.toml $(if $(GPU),constraints/gpu.txt,constraints/cpu.txt)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q $(CONSTRAINTS) $(TORCH)
	$(PY) -m pip install -q $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	$(if $(GPU),$(PY) -m pip install -q ninja psutil packaging einops)
	$(if $(GPU),$(PY) -m pip install -q --no-build-isolation $(CONSTRAINTS) flash-attn)
	# bfcl-eval pins numpy 1.26 (verl needs numpy 2); only its data and checkers are used: no deps
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)

smoke: $(STAMP)
	$(PY) -m dara.train

# The tool-calling smoke through TRL's GRPOTrainer (dara.trl, docs/trl.md): same tiny model and data, 3 steps.
smoke-trl: $(STAMP)
	$(PY) -m dara.trl.smoke

test: $(STAMP)
	$(PY) -m pytest -q

# The unit lane: everything but real training runs, Slurm clusters and tests of more than a few seconds (a
# dara.train process, a data build), spread over the machine's cores (pytest-xdist).
test-fast: $(STAMP)
	$(PY) -m pytest -q -n auto -m "not slow and not slurm and not multinode"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) scripts/bench/estimators.py
