#!/bin/bash
# The CPU per GET at -c 50 on a filled key space, as `bench resp` has it before its GETs: one
# server pinned to CPU 0, redis-benchmark on CPU 1; 2.6M random SETs at -c 50 -P 16 on 1M keys
# (about 925 000 keys), then ROUNDS x 200 000 random GETs at -c 50, the process's CPU per GET
# from /proc (the checkpointer's part apart), peak RSS, and the threads' user and system time.
# usage: [BIN=path/to/redoguard] [EXTRA="[db]\ncache_size = \"256MiB\""] [REDIS=1] \
#        [START_CPUS=0,1] get-cpu.sh NAME [ROUNDS]
# REDIS=1 runs Debian's redis-server (appendfsync always) instead; START_CPUS starts the server
# on those CPUs and then pins it to CPU 0, as `bench resp` does. Run the cases alternately
# (A B B A) to compare: one case moves by a fifth from run to run on a shared 2-vCPU machine.
# Uses ports 6396 and 6397; stops the server it started.
name=$1; rounds=${2:-2}
. "$(dirname "$0")/server.sh"
if [ "${REDIS:-0}" = 1 ]; then
  start_redis get-$name
else
  d=${TMPDIR:-/tmp}/redoguard-get-$name; rm -rf $d; mkdir -p $d/data
  printf "[server]\ndata_dir = \"%s\"\nport = 6396\nadmin_port = 6397\n%b\n" $d/data "$EXTRA" > $d/config.toml
  taskset -c ${START_CPUS:-0} $bin server --config $d/config.toml > $d/log 2>&1 &
  pid=$!
  [ -n "${START_CPUS:-}" ] && { sleep 0.5; taskset -a -p -c 0 $pid >/dev/null; }
  await_ping
fi
taskset -c 1 redis-benchmark -p 6396 -c 50 -P 16 -n 2600000 -r 1000000 -d 100 -t set --csv >/dev/null 2>&1
cpu(){ awk '{print $14+$15}' /proc/$pid/stat; }
ck(){ for t in /proc/$pid/task/*; do [ "$(cat $t/comm)" = "db-ckpt" ] && awk '{print $14+$15}' $t/stat; done; }
# Each thread as "tid comm utime stime" (comm has no spaces here), paired by tid below.
threads(){ for t in /proc/$pid/task/*; do echo "${t##*/} $(cat $t/comm) $(awk '{print $14, $15}' $t/stat)"; done; }
n=200000
c0=$(cpu); k0=$(ck); before=$(threads); rates=""
for r in $(seq $rounds); do
  rates="$rates $(taskset -c 1 redis-benchmark -p 6396 -c 50 -n $n -r 1000000 -d 100 -t get --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')"
done
c1=$(cpu); k1=$(ck); after=$(threads)
echo "$name: $(redis-cli -p 6396 dbsize) keys; GET/s$rates; cpu $(echo "scale=2; ($c1-$c0)*10000/($rounds*$n)" | bc) us/GET (checkpointer $(echo "scale=2; (0$k1-0$k0)*10000/($rounds*$n)" | bc)); $(grep VmHWM /proc/$pid/status | tr -s ' \t' ' ')"
# Threads started during the rounds count from zero.
awk -v n=$((rounds*n)) 'NR==FNR {u[$1]=$3; s[$1]=$4; next}
  {du=$3-u[$1]; ds=$4-s[$1]; if (du+ds>0) printf "  %s: user %.2f, system %.2f us/GET\n", $2, du*10000/n, ds*10000/n}' \
  <(echo "$before") <(echo "$after")
kill $pid; wait $pid 2>/dev/null
rm -rf $d
