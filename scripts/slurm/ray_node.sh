#!/usr/bin/env bash
# One node's Ray, run by train.sbatch as an `srun` step on that node (head or worker):
#
#   ray_node.sh --temp DIR [--wait-for HOST:PORT] [--wait-timeout S] -- RAY start ... --block
#
#  - a worker (--wait-for) first waits until the head's GCS port answers from this node (a clear error after
#    --wait-timeout seconds, default 120), instead of a fixed sleep;
#  - runs `ray start --block` with the node's own temp folder DIR;
#  - on exit, error or SIGTERM (srun forwards the job's TERM) stops every process of this node's Ray: the
#    process tree of `ray start`, then any process still naming DIR (a daemon that left the tree), SIGKILL
#    after 6 s, and deletes DIR. It never stops another job's or another user's Ray (no `ray stop`).
set -uo pipefail

TEMP=""
WAIT_FOR=""
WAIT_TIMEOUT=120
while (($#)); do
  case "$1" in
    --temp) TEMP="$2"; shift 2 ;;
    --wait-for) WAIT_FOR="$2"; shift 2 ;;
    --wait-timeout) WAIT_TIMEOUT="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "[dara-ray-node] unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$TEMP" && $# -gt 0 ]] || { echo "[dara-ray-node] usage: ray_node.sh --temp DIR [--wait-for HOST:PORT] -- RAY start ..." >&2; exit 2; }
NODE="${SLURMD_NODENAME:-$(hostname -s)}"
log() { echo "[dara-ray-node] $(date -u +%H:%M:%S) ${NODE}: $*"; }

descendants() {  # every process below pid $1 (children first listed after their parent)
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}

ray_pids() {  # this node's Ray: the tree of `ray start`, and every process of its session folder
  [[ -n "$RAY_PID" ]] && kill -0 "$RAY_PID" 2>/dev/null && { echo "$RAY_PID"; descendants "$RAY_PID"; }
  pgrep -f -- "${TEMP}/session_"
}

RAY_PID=""
stop_node() {
  local code=$? pids pid
  trap - EXIT TERM INT
  pids="$(ray_pids | sort -u)"
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 30); do  # 6 s, within Slurm's KillWait before its SIGKILL
    pids="$(ray_pids | sort -u)"
    [[ -z "$pids" ]] && break
    sleep 0.2
  done
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$TEMP"
  log "ray stopped${pids:+ (SIGKILL: ${pids//$'\n'/ })}, ${TEMP} removed"
  exit "$code"
}
trap stop_node EXIT
trap 'exit 0' TERM INT   # a stop the job asked for: not an error of the step

if [[ -n "$WAIT_FOR" ]]; then
  host="${WAIT_FOR%:*}" port="${WAIT_FOR##*:}"
  deadline=$((SECONDS + WAIT_TIMEOUT))
  until timeout 2 bash -c "exec 3<>/dev/tcp/${host}/${port}" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "the Ray head ${WAIT_FOR} did not answer within ${WAIT_TIMEOUT}s"
      exit 3
    fi
    sleep 1
  done
  log "the Ray head ${WAIT_FOR} answers"
fi

rm -rf "$TEMP"  # a requeued job reuses the path: nothing of the killed attempt is kept
mkdir -p "$TEMP"
"$@" &
RAY_PID=$!
wait "$RAY_PID"
code=$?
log "ray start exited with ${code}"
exit "$code"
