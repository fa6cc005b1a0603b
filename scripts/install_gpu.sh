#!/usr/bin/env bash
# The GPU install (docs/experiments.md, "GPU install": the variables and steps): `make install GPU=1` runs
# `install`, `make flash-attn` runs `flash-attn` (a source build against the installed torch).
set -uo pipefail

ACTION="${1:-install}"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
CUDA="${CUDA:-}"
WHEELS="${WHEELS:-}"
FLASH_ATTN_WHEEL="${FLASH_ATTN_WHEEL:-}"
DRY_RUN="${DRY_RUN:-0}"
PROBE="${PROBE:-$((1 - DRY_RUN))}"
PYPI_INDEX="${PYPI_INDEX:-https://pypi.org/simple}"
TORCH_INDEX_CU129="${TORCH_INDEX_CU129:-https://download.pytorch.org/whl/cu129}"
VLLM_INDEX_CU129="${VLLM_INDEX_CU129:-https://wheels.vllm.ai/0.24.0/cu129}"
FLASH_ATTN_INDEX_CU130="${FLASH_ATTN_INDEX_CU130:-https://verl-project.github.io/verl-wheelhouse/simple}"
FLASH_ATTN_VERSION=2.8.3
FLASH_ATTN_MAKE="make flash-attn"
BFCL_EVAL=bfcl-eval==2026.3.23

say() { echo "[install] $*"; }
run() { echo "+ $*"; ((DRY_RUN)) || "$@"; }
die() { say "ERROR: $*"; exit 1; }

driver_version() {
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' '
}

choose_line() {  # sets LINE (cu129 | cu130) and LOCK
  if [[ -n "$CUDA" ]]; then
    case "$CUDA" in
      12.9) LINE=cu129 ;;
      13.0 | 13) LINE=cu130 ;;
      *) die "CUDA=$CUDA: the lines are CUDA=12.9 (driver >= 525) and CUDA=13.0 (driver >= 580)" ;;
    esac
    say "CUDA line $CUDA (CUDA=$CUDA)"
  else
    local driver major
    driver="$(driver_version)" || driver=""
    [[ -n "$driver" ]] || die "no NVIDIA driver visible (nvidia-smi): run on a GPU node, or choose the line with CUDA=12.9 or CUDA=13.0"
    major="${driver%%.*}"
    ((major >= 525)) || die "NVIDIA driver $driver is older than 525: neither CUDA line runs on it (12.9 needs >= 525, 13.0 >= 580)"
    LINE=cu129
    ((major >= 580)) && LINE=cu130
    say "NVIDIA driver $driver -> CUDA line ${LINE:2:2}.${LINE:4} ($([[ $LINE == cu130 ]] && echo ">= 580" || echo "525-579: torch and vLLM +cu129 builds"))"
  fi
  LOCK="constraints/gpu-${LINE}.txt"
  CUDA_VERSION="${LINE:2:2}.${LINE:4}"
}

index_args() {  # pip's index options of the line (and a local wheel folder)
  INDEX=()
  [[ -n "$WHEELS" ]] && INDEX+=(--find-links "$WHEELS")
  [[ "$LINE" == cu129 ]] && INDEX+=(--extra-index-url "$TORCH_INDEX_CU129" --extra-index-url "$VLLM_INDEX_CU129")
  return 0
}

answers() {  # does the URL answer (HTTP < 400) within 20 s?
  "$PYTHON" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], method="GET", headers={"User-Agent": "pip"})
with urllib.request.urlopen(request, timeout=20) as reply:
    sys.exit(0 if reply.status < 400 else 1)
EOF
}

probe_indexes() {
  [[ -n "$WHEELS" ]] && { say "wheels from $WHEELS (indexes not probed)"; return 0; }
  ((PROBE)) || return 0
  local urls=("$PYPI_INDEX/torch/" "$PYPI_INDEX/vllm/") missing=()
  [[ "$LINE" == cu129 ]] && urls=("$PYPI_INDEX/pip/" "$TORCH_INDEX_CU129/torch/" "$VLLM_INDEX_CU129/vllm/")
  for url in "${urls[@]}"; do answers "$url" || missing+=("$url"); done
  ((${#missing[@]} == 0)) && return 0
  local pyver
  pyver="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null || echo 311)"
  local suffix="" from="--index-url $PYPI_INDEX"
  [[ "$LINE" == cu129 ]] && { suffix="+cu129"; from="--extra-index-url $TORCH_INDEX_CU129 --extra-index-url $VLLM_INDEX_CU129"; }
  die "this node cannot reach ${missing[*]}; on a machine that can, download the CUDA ${CUDA_VERSION} wheels for Python ${pyver:0:1}.${pyver:1} (Linux x86_64): pip download -d wheels --python-version ${pyver} --only-binary :all: --platform manylinux_2_28_x86_64 torch==2.11.0${suffix} torchvision==0.26.0${suffix} torchaudio==2.11.0${suffix} vllm==0.24.0${suffix} $from; copy the folder here and run: make install GPU=1 CUDA=${CUDA_VERSION} WHEELS=wheels"
}

STEPS=()
record() { STEPS+=("$1: $2"); }

build_jobs() {  # compile jobs this node's RAM carries (about 9 GB each), at most one per core
  local cores mem_gb jobs
  cores="$(nproc 2>/dev/null || echo 4)"
  mem_gb="$(awk '/^MemTotal:/ {print int($2 / 1000000)}' /proc/meminfo 2>/dev/null || echo 36)"
  jobs=$((mem_gb / 9 < cores ? mem_gb / 9 : cores))
  echo $((jobs < 1 ? 1 : jobs))
}

no_flash_attn() {  # what the first paper run needs, with the command and its cost
  local jobs
  jobs="${MAX_JOBS:-$(build_jobs)}"
  say "flash-attn is NOT installed: no paper run can start without it. The paper runs' cluster files plan"
  say "  flash_attention_2; under run.attention=sdpa their memory plans do not fit their clusters' token budgets"
  say "  per GPU (python -m recipes toolrl_main --preflight --skip-env --set run.attention=sdpa names those that do)."
  say "  Before the first paper run, build it here (nvcc ${LINE:2:2}.x; reported 40-90 min at MAX_JOBS=32, longer"
  say "  with fewer jobs; about 9 GB of RAM per job, $((jobs * 9)) GB at MAX_JOBS=$jobs):"
  say "    CUDA_HOME=<CUDA ${LINE:2:2}.x toolkit> MAX_JOBS=$jobs $FLASH_ATTN_MAKE"
  say "  or install a flash-attn $FLASH_ATTN_VERSION wheel built for torch 2.11 + CUDA ${LINE:2:2}:" \
      "make install GPU=1 CUDA=${CUDA_VERSION} FLASH_ATTN_WHEEL=FILE|URL"
}

install_flash_attn_wheel() {  # optional: a prebuilt wheel only, kept only when it imports
  local source=()
  if [[ -n "$FLASH_ATTN_WHEEL" ]]; then
    source=("$FLASH_ATTN_WHEEL")
  elif [[ "$LINE" == cu130 ]]; then
    source=(--extra-index-url "$FLASH_ATTN_INDEX_CU130" "flash-attn==$FLASH_ATTN_VERSION")
  else
    say "no prebuilt flash-attn $FLASH_ATTN_VERSION wheel is known for torch 2.11.0+cu129 (FLASH_ATTN_WHEEL=FILE|URL names one)"
    return 1
  fi
  run "$PY" -m pip install -q -c "$LOCK" --no-build-isolation --only-binary flash-attn "${INDEX[@]}" "${source[@]}" || return 1
  ((DRY_RUN)) && return 0
  if ! "$PY" -c "import flash_attn" 2>/dev/null; then
    say "the flash-attn wheel does not import against this torch: uninstalled"
    "$PY" -m pip uninstall -q -y flash-attn
    return 1
  fi
}

install() {
  choose_line
  probe_indexes
  index_args
  [[ -x "$PY" ]] || run "$PYTHON" -m venv "$VENV" || die "cannot create $VENV"
  run "$PY" -m pip install -q --upgrade pip setuptools wheel || die "pip upgrade failed"
  record "pip" ok
  run "$PY" -m pip install -q -c "$LOCK" "${INDEX[@]}" torch torchvision torchaudio \
    || die "torch 2.11.0 (CUDA ${CUDA_VERSION}) failed to install (lock $LOCK)"
  record "torch 2.11.0 CUDA ${CUDA_VERSION}" ok
  run "$PY" -m pip install -q -c "$LOCK" "${INDEX[@]}" vllm || die "vllm 0.24.0 (CUDA ${CUDA_VERSION}) failed to install"
  record "vllm 0.24.0 CUDA ${CUDA_VERSION}" ok
  run "$PY" -m pip install -q -c "$LOCK" "${INDEX[@]}" -e ".[verl,dev,gpu]" || die "the project (verl 0.9.1) failed to install"
  record "project + verl 0.9.1" ok
  local attention=flash_attention_2
  if install_flash_attn_wheel; then
    record "flash-attn $FLASH_ATTN_VERSION (prebuilt)" ok
  else
    attention=sdpa
    record "flash-attn $FLASH_ATTN_VERSION" "NOT INSTALLED: needed by every paper run ($FLASH_ATTN_MAKE)"
  fi
  # bfcl-eval pins numpy 1.26 (verl needs numpy 2); only its data and checkers are used: no deps
  if run "$PY" -m pip install -q --no-deps "$BFCL_EVAL"; then record "$BFCL_EVAL" ok; else record "$BFCL_EVAL" FAILED; fi
  say "summary (CUDA ${CUDA_VERSION}, lock $LOCK):"
  for step in "${STEPS[@]}"; do say "  $step"; done
  # the paper runs' attention: without flash-attn the check names it, and the last lines say what to run
  ((DRY_RUN)) || PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m dara.preflight.environment
  [[ "$attention" == sdpa ]] && no_flash_attn
  [[ "${STEPS[*]}" != *FAILED* ]]
}

build_flash_attn() {
  local cuda major nvcc arch have
  cuda="$("$PY" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null)" \
    || die "no torch in $VENV: run make install GPU=1 first"
  [[ -n "$cuda" ]] || die "torch in $VENV is a CPU build: run make install GPU=1 on a GPU node first"
  major="${cuda%%.*}"
  LOCK="constraints/gpu-$([[ "$major" == 12 ]] && echo cu129 || echo cu130).txt"
  nvcc="${CUDA_HOME:+$CUDA_HOME/bin/}nvcc"
  command -v "$nvcc" >/dev/null 2>&1 || die "no nvcc (CUDA_HOME=${CUDA_HOME:-unset}): flash-attn builds with the CUDA $major.x toolkit (point CUDA_HOME at it, e.g. module load cuda/$cuda)"
  have="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
  [[ "$have" == "$major" ]] || die "nvcc is CUDA $have.x but torch is built for CUDA $cuda: point CUDA_HOME at a CUDA $major.x toolkit"
  arch="${FLASH_ATTN_CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '.')}"
  export MAX_JOBS="${MAX_JOBS:-$(build_jobs)}" FLASH_ATTN_CUDA_ARCHS="${arch}"
  say "building flash-attn $FLASH_ATTN_VERSION for torch CUDA $cuda, GPU architecture ${arch:-default 80;90;100;120}," \
      "MAX_JOBS=$MAX_JOBS: reported 40-90 min at MAX_JOBS=32, longer with fewer jobs; about 9 GB of RAM per job"
  run "$PY" -m pip install -q ninja psutil packaging einops || die "build tools failed to install"
  echo "+ MAX_JOBS=$MAX_JOBS FLASH_ATTN_CUDA_ARCHS=$FLASH_ATTN_CUDA_ARCHS"
  run "$PY" -m pip install -c "$LOCK" --no-build-isolation --no-binary flash-attn "flash-attn==$FLASH_ATTN_VERSION" \
    || die "the flash-attn build failed (see above); no paper run can start without it"
  ((DRY_RUN)) || "$PY" -c "import flash_attn; print('[install] flash-attn', flash_attn.__version__, 'imports')" \
    || die "flash-attn was built but does not import"
  say "flash-attn built: runs can use run.attention=flash_attention_2 (the GPU clusters' default)"
}

case "$ACTION" in
  install) install ;;
  flash-attn) build_flash_attn ;;
  *) die "unknown action $ACTION (install | flash-attn)" ;;
esac
