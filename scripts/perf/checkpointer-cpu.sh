#!/bin/bash
# The CPU of a durable write load by round, and of the checkpointer (thread db-ckpt) alone:
# one server pinned to CPU 0, redis-benchmark -c 50 on CPU 1, 200 000 random keys of 1M a round.
# usage: [BIN=path/to/redoguard] [EXTRA="[db]\ncache_size = \"512MiB\""] checkpointer-cpu.sh NAME ROUNDS TEST
# (TEST: set, hset, lpush, sadd, zadd...). Run two binaries alternately (A B B A) to compare.
# Uses ports 6396 and 6397; stops the server it started.
name=$1; rounds=${2:-3}; test=${3:-set}
bin=${BIN:-target/release/redoguard}
d=${TMPDIR:-/tmp}/redoguard-ab-$name; rm -rf $d; mkdir -p $d/data
printf "[server]\ndata_dir = \"%s\"\nport = 6396\nadmin_port = 6397\n%b\n" $d/data "$EXTRA" > $d/config.toml
taskset -c 0 $bin server --config $d/config.toml > $d/log 2>&1 &
pid=$!
for i in $(seq 50); do redis-cli -p 6396 ping >/dev/null 2>&1 && break; sleep 0.1; done
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
kill $pid; wait $pid 2>/dev/null
