#!/bin/bash
# The durable SET rate every half second while checkpoints run: one server pinned to CPU 0,
# redis-benchmark -c 50 on CPU 1, ROUNDS × 200 000 random keys of 1M, the rate sampled from the
# admin port's /metrics ("user commits"). Prints the rounds, the checkpoints, and the slowest,
# tenth-slowest and median half second. Run with NICE 0 and 10 alternately to compare
# `[db] checkpoint_nice` (docs/bench/README.md, 2026-11-29), or SCHED=normal and batch for
# `[redo] thread_scheduling` (2026-11-30). TEST: the redis-benchmark test (default set).
# usage: [BIN=path/to/redoguard] [SCHED=batch|normal] [TEST=set] checkpoint-stalls.sh NAME NICE [ROUNDS]
# Uses ports 6396 and 6397; stops the server it started.
name=$1; nice=${2:-10}; rounds=${3:-4}
sched=${SCHED:-batch}; test=${TEST:-set}
. "$(dirname "$0")/server.sh"
start_server stalls-$name "[db]\ncheckpoint_nice = $nice\n[redo]\nthread_scheduling = \"$sched\""
commits(){ curl -s localhost:6397/metrics | awk -F'} ' '/name="user commits"/{print $2}'; }
( while true; do echo "$(date +%s.%N) $(commits)"; sleep 0.5; done ) > $d/samples &
sampler=$!
for r in $(seq $rounds); do
  taskset -c 1 timeout 120 redis-benchmark -p 6396 -c 50 -n 200000 -r 1000000 -d 100 -t $test --csv 2>/dev/null | tail -1
done
kill $sampler
curl -s localhost:6397/metrics | grep -E 'name="checkpoints (completed|hurried)"'
awk 'NR>1 && $2>p {print int(($2-p)/($1-t))} {t=$1; p=$2}' $d/samples | sort -n | awk -v name=$name '
  {a[NR]=$1} END {m=a[int(NR/2)+1]; printf "%s: %d half seconds, slowest %d (%.2f of the median), tenth-slowest %d (%.2f), median %d\n", name, NR, a[1], a[1]/m, a[int(NR/10)+1], a[int(NR/10)+1]/m, m}'
stop_server
