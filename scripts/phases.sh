# Sourced by scripts/check.sh and .ci/run: `phase NAME CMD...` runs CMD, prints how long it took
# (wall clock) and stops the script on failure; `phases_summary` prints every phase's time.
# `machine_state` prints what else uses this machine's CPUs (load, steal, the busiest processes)
# so that a slow run shows whether it shared its cores.
PHASE_NAMES=()
PHASE_TIMES=()

phase() {
  local name=$1 start end status=0
  shift
  start=$(date +%s.%N)
  "$@" || status=$?
  end=$(date +%s.%N)
  PHASE_NAMES+=("$name")
  PHASE_TIMES+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')")
  echo "== phase '$name': ${PHASE_TIMES[-1]} s (exit $status)" >&2
  if [ "$status" != 0 ]; then
    phases_summary
    exit "$status"
  fi
}

phases_summary() {
  local i
  echo "== wall-clock time of each phase (seconds)" >&2
  for i in "${!PHASE_NAMES[@]}"; do
    printf '%8s  %s\n' "${PHASE_TIMES[$i]}" "${PHASE_NAMES[$i]}" >&2
  done
}

machine_state() {
  # load averages, the share of CPU time stolen by the hypervisor since boot (another guest on
  # the same host), and the processes using the most CPU right now
  echo "== machine: $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  awk '/^cpu /{t=$2+$3+$4+$5+$6+$7+$8+$9; if (t > 0) printf "== CPU time stolen since boot: %.1f %%\n", 100*$9/t}' /proc/stat >&2
  ps -eo pcpu,etimes,rss,args --sort=-pcpu 2>/dev/null | head -6 | cut -c1-160 >&2 || true
}
