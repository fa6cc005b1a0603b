#!/usr/bin/env bash
# One node's Ray, run by train.sbatch as an `srun` step on that node (head or worker):
#
#   ray_node.sh --temp DIR [--wait-for HOST:PORT] [--wait-timeout S] -- RAY start ... --block
#
# A worker (--wait-for) first waits until the head's GCS port answers (a clear error after --wait-timeout s). On
# exit, error or SIGTERM it stops this node's Ray (the tree of `ray start` and any process naming DIR's sessions),
# SIGKILL after 4 s (inside Slurm's KillWait), and deletes DIR; never another job's Ray (no `ray stop`).
set -uo pipefail

TEMP="" WAIT_FOR="" WAIT_TIMEOUT=120
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

ray_pids() {  # this node's Ray: the process tree of `ray start`, and every process naming its temp folder
  # one `ps` (one per descendant takes seconds on a loaded node); the folder goes through the environment so
  # that awk's own command line does not name it; -ww: whole command lines (not cut at 80 columns)
  ps -ww -e -o pid=,ppid=,args= 2>/dev/null |
    RAY_NODE_SESSIONS="${TEMP}/session_" awk -v root="${RAY_PID:-0}" '
      { pid[NR] = $1; parent[$1] = $2; if (index($0, ENVIRON["RAY_NODE_SESSIONS"])) mark[$1] = 1 }
      END {
        for (changed = 1; changed;) {  # every descendant of root, to any depth
          changed = 0
          for (i = 1; i <= NR; i++) {
            p = pid[i]
            if (!(p in mark) && (p == root || parent[p] in mark)) { mark[p] = 1; changed = 1 }
          }
        }
        for (p in mark) print p
      }'
}

RAY_PID=""
stop_node() {
  local code=$? pids pid deadline
  trap - EXIT
  trap '' TERM INT  # a second SIGTERM (Slurm's and the job's cleanup both send one) must not end this or ps
  pids="$(ray_pids)"
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null; done
  # `ray start --block` drains up to 30 s on SIGTERM, Slurm's SIGKILL comes KillWait (30 s, 10 s in the tests)
  # after its SIGTERM: 4 s by the clock, then SIGKILL what is left
  deadline=$((SECONDS + 4))
  while [[ -n "$pids" ]] && ((SECONDS < deadline)); do
    sleep 0.2
    pids="$(ray_pids)"
  done
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
  for _ in 1 2 3 4 5; do  # a process dying as rm runs may still create a file in the folder: try again
    rm -rf "$TEMP" 2>/dev/null
    [[ -e "$TEMP" ]] || break
    sleep 0.2
  done
  log "ray stopped${pids:+ (SIGKILL: ${pids//$'\n'/ })}, ${TEMP} $([[ -e "$TEMP" ]] && echo "NOT removed" || echo removed)"
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
