#!/bin/bash
# The log writer threads with a long EEVDF time slice, or not, alternating in one server: one
# server pinned to CPU 0, redis-benchmark -c 50 SET on CPU 1 (R random keys, values of D bytes), ROUNDS
# rounds of N SETs; odd rounds at the default slice, even ones with SLICE_NS given to the
# threads named redo-lgwr* (sched_setattr's sched_runtime, Linux 6.6 and later). Prints each
# round's rate, the server's CPU per SET and its involuntary context switches
# (docs/bench/README.md, 2026-12-02).
# usage: [BIN=path/to/redoguard] [D=value bytes, 100] lgwr-slice.sh [ROUNDS] [N] [R] [SLICE_NS]
# Uses ports 6396 and 6397; stops the server it started.
rounds=${1:-6}; n=${2:-400000}; r=${3:-1000000}; slice=${4:-5000000}
. "$(dirname "$0")/server.sh"
start_server lgwr-slice
set_slice() {
  python3 - $pid "$1" <<'PY'
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, ns = sys.argv[1], int(sys.argv[2])
# struct sched_attr (SCHED_ATTR_SIZE_VER1, 56 bytes): SCHED_OTHER with sched_runtime as the slice.
attr = ctypes.create_string_buffer(struct.pack("IIQiIQQQII", 56, 0, 0, 0, 0, ns, 0, 0, 0, 0))
for tid in os.listdir(f"/proc/{pid}/task"):
    if open(f"/proc/{pid}/task/{tid}/comm").read().startswith("redo-lgwr"):
        if libc.syscall(314, int(tid), attr, 0) != 0:  # SYS_sched_setattr on x86_64
            sys.exit(f"sched_setattr on thread {tid}: {os.strerror(ctypes.get_errno())}")
PY
}
involuntary() { cat /proc/$pid/task/*/status | awk '/^nonvoluntary_ctxt_switches/ {s += $2} END {print s}'; }
ticks() { awk '{print $14 + $15}' /proc/$pid/stat; }
taskset -c 1 redis-benchmark -p 6396 -c 50 -n 300000 -r $r -d ${D:-100} -t set -q > /dev/null 2>&1
for i in $(seq $rounds); do
  if [ $((i % 2)) = 0 ]; then s=$slice; else s=0; fi
  set_slice $s || break
  c0=$(ticks); v0=$(involuntary)
  rate=$(taskset -c 1 redis-benchmark -p 6396 -c 50 -n $n -r $r -d ${D:-100} -t set --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
  c1=$(ticks); v1=$(involuntary)
  echo "slice $s ns: $rate SET/s, server CPU $(( (c1 - c0) * 1000000 / $(getconf CLK_TCK) / n )) µs/SET, $((v1 - v0)) involuntary switches"
done
stop_server
