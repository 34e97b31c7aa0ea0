#!/bin/bash
# What a free checkpoint would be worth: durable SETs at -c 50 (ROUNDS x 200 000 random SETs of
# 1M keys, -d 100, redis-benchmark on CPU 1, the server on CPU 0, as `bench resp`'s "client CPU
# own") against three servers in turn, each fresh: Redis `appendfsync always` (its defaults
# otherwise), redoguard with its defaults, and redoguard with logs, checkpoint triggers and
# dirty memory large enough that no checkpoint runs during the rounds (the ceiling a checkpoint
# that cost nothing would reach); CASES="default sized no-checkpoint" adds "sized": logs of 512
# MiB and a checkpoint at 256 MiB of changes or every 30 s, as a host sized for this load would
# be (a log switch a minute here). Prints each server's rounds, its median and slowest, and the
# checkpoints that ran. Run it twice or more: one pass moves by a fifth on a shared machine.
# "no-row-cache" is the defaults without the row cache (`[db] row_cache_size = 0`).
# REDIS_ARGS adds to Redis's command line (`--auto-aof-rewrite-percentage 0`, as `bench resp` runs
# it); CASES="" runs Redis alone.
# usage: [BIN=path/to/redoguard] [CASES="default no-row-cache no-checkpoint"] [REDIS_ARGS=…]
#        checkpoint-ceiling.sh [ROUNDS]
# Uses ports 6396 and 6397; stops the servers it started and removes their directories.
rounds=${1:-6}
. "$(dirname "$0")/server.sh"
summary() {  # NAME RATES...
  python3 - "$@" <<'PY'
import statistics, sys
name, rates = sys.argv[1], [float(r) for r in sys.argv[2:]]
print(f"{name:>14}: rounds {' '.join(f'{r / 1000:.1f}k' for r in rates)}; median "
      f"{statistics.median(rates) / 1000:.1f}k, slowest {min(rates) / 1000:.1f}k", end="")
PY
}
run_rounds() {
  local out=""
  for _ in $(seq "$rounds"); do
    out="$out $(taskset -c 1 redis-benchmark -p 6396 -c 50 -n 200000 -r 1000000 -d 100 -t set --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')"
  done
  echo "$out"
}
checkpoints() { curl -s http://127.0.0.1:6397/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["database"]["checkpoints"])'; }

start_redis ceiling-redis ${REDIS_ARGS:-}
summary redis $(run_rounds)
echo "; $(redis-cli -p 6396 info persistence | tr -d '\r' | grep aof_rewrites:)"
stop_server

for case in ${CASES-default no-checkpoint}; do
  case $case in
    default) extra="" ;;
    sized) extra=$'[redo]\nlog_file_size = "512MiB"\n[db]\ncheckpoint_dirty_bytes = "256MiB"\ndirty_bytes_max = "1GiB"' ;;
    no-row-cache) extra=$'[db]\nrow_cache_size = 0' ;;
    no-checkpoint) extra=$'[redo]\nlog_file_size = "512MiB"\n[db]\ncheckpoint_interval = "1h"\ncheckpoint_dirty_bytes = "4GiB"\ndirty_bytes_max = "8GiB"' ;;
    *) echo "unknown case $case"; exit 1 ;;
  esac
  start_server ceiling-$case "$extra"
  before=$(checkpoints)
  summary "$case" $(run_rounds); echo "; $(( $(checkpoints) - before )) checkpoints"
  stop_server
done
