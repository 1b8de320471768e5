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

# `phase_async NAME CMD...` starts phase NAME in the background, its output kept in a log of its
# own; `phases_wait` waits for every phase started so, prints each one's output whole, one after
# another in the order they were started (never interleaved), with its time, and stops the
# script if any failed (naming each that did). The checks that read the sources only (lint,
# types, contracts, docs) need nothing of each other: on two cores they run side by side.
ASYNC_NAMES=()
ASYNC_PIDS=()
ASYNC_LOGS=()

phase_async() {
  local name=$1 log
  shift
  log=$(mktemp)
  (
    start=$(date +%s.%N)
    status=0
    "$@" >"$log.out" 2>&1 || status=$?
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" -v s="$status" 'BEGIN { printf "%s %.1f\n", s, b - a }' >"$log"
  ) &
  ASYNC_NAMES+=("$name")
  ASYNC_PIDS+=($!)
  ASYNC_LOGS+=("$log")
}

phases_wait() {
  local i status seconds failed=()
  for i in "${!ASYNC_PIDS[@]}"; do
    wait "${ASYNC_PIDS[$i]}" || true
    read -r status seconds <"${ASYNC_LOGS[$i]}" || { status=1; seconds=0; }
    cat "${ASYNC_LOGS[$i]}.out" >&2
    rm -f "${ASYNC_LOGS[$i]}" "${ASYNC_LOGS[$i]}.out"
    PHASE_NAMES+=("${ASYNC_NAMES[$i]}")
    PHASE_TIMES+=("$seconds")
    echo "== phase '${ASYNC_NAMES[$i]}': $seconds s (exit $status)" >&2
    [ "$status" = 0 ] || failed+=("${ASYNC_NAMES[$i]} (exit $status)")
  done
  ASYNC_NAMES=()
  ASYNC_PIDS=()
  ASYNC_LOGS=()
  if [ ${#failed[@]} -gt 0 ]; then
    echo "== failed: ${failed[*]}" >&2
    phases_summary
    exit 1
  fi
}
