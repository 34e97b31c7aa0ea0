#!/bin/bash
# The CPU of a durable write load by round, and of the checkpointer (thread db-ckpt) alone:
# one server pinned to CPU 0, redis-benchmark -c 50 on CPU 1, 200 000 random keys of 1M a round.
# usage: [BIN=path/to/redoguard] [EXTRA="[db]\ncache_size = \"512MiB\""] checkpointer-cpu.sh NAME ROUNDS TEST
# (TEST: set, hset, lpush, sadd, zadd...). Run two binaries alternately (A B B A) to compare.
# Uses ports 6396 and 6397; stops the server it started.
name=$1; rounds=${2:-3}; test=${3:-set}
. "$(dirname "$0")/server.sh"
start_server ab-$name "${EXTRA:-}"
snap(){ awk '{s+=$14+$15} END {print s}' /proc/$pid/task/*/stat; }
ck(){ for t in /proc/$pid/task/*; do [ "$(cat $t/comm)" = "db-ckpt" ] && awk '{print $14+$15}' $t/stat; done; }
n=200000
for r in $(seq $rounds); do
  c0=$(snap); k0=$(ck)
  ops=$(taskset -c 1 redis-benchmark -p 6396 -c 50 -n $n -r 1000000 -d 100 -t $test --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
  c1=$(snap); k1=$(ck)
  echo "$name $test round $r: $ops ops/s, cpu $(echo "scale=2; ($c1-$c0)*10000/$n" | bc) us/op, ckpt $(( (k1-k0)*10 )) ms"
done
echo "$name total ckpt $(( $(ck)*10 )) ms; $(grep -E "VmHWM" /proc/$pid/status)"
stop_server
