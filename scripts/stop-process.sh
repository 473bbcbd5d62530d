# Sourced by scripts/cluster.sh and scripts/kubernetes-e2e.sh: the one way they stop a process.

# Stops one process: TERM, up to 10 s to exit, then KILL. Succeeds if it was running.
stop_process() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 1
  kill -TERM "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  return 0
}
