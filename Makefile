# All set-up lives here: `make smoke` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# CPU machines keep the CPU torch build. `make install GPU=1` installs verl 0.9.1's FSDP + vLLM stack on a GPU node
# through scripts/install_gpu.sh: the CUDA line from the node's driver (>= 580: CUDA 13.0, lock
# constraints/gpu-cu130.txt; 525-579: CUDA 12.9 builds of torch and vLLM from their own indexes, lock
# constraints/gpu-cu129.txt; CUDA=12.9|13.0 chooses), flash-attn from a prebuilt wheel when one matches (else
# runs use run.attention=sdpa until `make flash-attn` builds it), then bfcl-eval whatever happened to flash-attn.
# WHEELS=DIR installs from downloaded wheels (the install names them when the node cannot reach the indexes).
GPU    ?=
CUDA   ?=
WHEELS ?=
FLASH_ATTN_WHEEL ?=
STAMP  := $(VENV)/.installed$(if $(GPU),-gpu)
GPU_INSTALL := PYTHON=$(PYTHON) VENV=$(VENV) CUDA=$(CUDA) WHEELS=$(WHEELS) FLASH_ATTN_WHEEL=$(FLASH_ATTN_WHEEL) \
	bash scripts/install_gpu.sh

.PHONY: install flash-attn smoke test test-fast lint bench

install: $(STAMP)

ifeq ($(GPU),)
$(STAMP): pyproject.toml constraints/cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -c constraints/cpu.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints/cpu.txt -e ".[dev]"
	# bfcl-eval pins numpy 1.26 (verl needs numpy 2); only its data and checkers are used: no deps
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)
else
$(STAMP): pyproject.toml constraints/gpu-cu129.txt constraints/gpu-cu130.txt scripts/install_gpu.sh
	$(GPU_INSTALL) install
	touch $(STAMP)
endif

# FlashAttention 2.8.3 built from source against the installed CUDA torch (needs nvcc of torch's CUDA major
# version, CUDA_HOME; 40-90 min at MAX_JOBS=32, ~9 GB RAM per job; MAX_JOBS=4 by default)
flash-attn:
	$(GPU_INSTALL) flash-attn

smoke: $(STAMP)
	$(PY) -m dara.train

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
