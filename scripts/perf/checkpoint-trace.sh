#!/bin/bash
# Where a checkpoint's cost lands, second by second: one server pinned to CPU 0, redis-benchmark
# -c 50 SET on CPU 1 (600 000 SETs of 1M random keys, -d 100, to warm up past the first
# checkpoints, then 25 s of the same), and every second the rate, each thread's CPU
# (/proc/PID/task/*/stat), the checkpoints completed, the log sequence and the changes not yet
# in the data files (admin /status). WARM=0 skips the warm-up; TRACE_SECONDS=N traces N seconds.
# The last line sums it up: the mean, median and slowest second, the checkpoints, the workers'
# CPU per SET in the seconds a checkpoint ran in (its thread at 10 % of a CPU or more), the
# server's CPU per SET, and the checkpointer's CPU per checkpoint. Run two settings (EXTRA) or
# two binaries (BIN) alternately to compare (docs/bench/README.md, 2026-12-02).
# usage: [BIN=path/to/redoguard] [EXTRA=$'[db]\ncache_size = "512MiB"'] [WARM=600000]
#        [TRACE_SECONDS=25] checkpoint-trace.sh NAME
# Uses ports 6396 and 6397; stops the server and the benchmark it started.
name=${1:-trace}
. "$(dirname "$0")/server.sh"
start_server checkpoint-trace-$name "${EXTRA:-}"
warm=${WARM:-600000}; seconds=${TRACE_SECONDS:-25}
[ "$warm" -gt 0 ] && taskset -c 1 redis-benchmark -p 6396 -c 50 -n $warm -r 1000000 -d 100 -t set -q > /dev/null 2>&1
taskset -c 1 timeout $((seconds + 15)) redis-benchmark -p 6396 -c 50 -n $((seconds * 80000)) -r 1000000 -d 100 -t set -q > /dev/null 2>&1 &
bench=$!
taskset -c 1 python3 - "$name" $pid $seconds <<'PY'
import json, os, statistics, sys, time, urllib.request
name, pid, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def threads():
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[comm] = ticks.get(comm, 0) + int(fields[11]) + int(fields[12])
    return ticks
def status():
    s = json.load(urllib.request.urlopen("http://127.0.0.1:6397/status"))
    return (s["server"]["commands_processed"], s["database"]["checkpoints"],
            s["database"]["redo"]["durable_addr"]["seq"], s["database"]["unwritten_bytes"])
hz = os.sysconf("SC_CLK_TCK")
prev = (time.time(), status(), threads())
first = prev
rows = []
for _ in range(seconds):
    time.sleep(1)
    cur = (time.time(), status(), threads())
    elapsed = cur[0] - prev[0]
    ops = (cur[1][0] - prev[1][0]) / elapsed
    # Each thread's share of a CPU over the second.
    cpu = {comm: (cur[2][comm] - prev[2].get(comm, 0)) / hz / elapsed for comm in cur[2]}
    worker, ckpt = cpu.get("redoguard-worke", 0), cpu.get("db-ckpt", 0)
    total = sum(cpu.values())
    print(f"{ops:7.0f} SET/s  checkpoints {cur[1][1]}  log {cur[1][2]}  "
          f"unwritten {cur[1][3] / 2**20:5.0f} MiB  CPU {total:4.0%}: "
          f"workers {worker:4.0%} lgwr-task {cpu.get('redo-lgwr-task', 0):4.0%} "
          f"db-ckpt {ckpt:4.0%}  workers' µs/SET {worker * 1e6 / max(ops, 1):5.1f}")
    rows.append((ops, ckpt, worker * 1e6 / max(ops, 1), total * 1e6 / max(ops, 1), ckpt * elapsed))
    prev = cur
rates = [row[0] for row in rows]
median = statistics.median(rates)
busy = [row[2] for row in rows if row[1] >= 0.10]
checkpoints = cur[1][1] - first[1][1]
print(f"{name}: mean {statistics.mean(rates):.0f} SET/s, median {median:.0f}, slowest second "
      f"{min(rates):.0f} ({min(rates) / median:.2f}); {checkpoints} checkpoints; workers' µs/SET "
      f"in checkpoint seconds {statistics.mean(busy) if busy else 0:.1f}; server µs/SET "
      f"{statistics.mean(row[3] for row in rows):.1f}; db-ckpt CPU per checkpoint "
      f"{sum(row[4] for row in rows) / max(checkpoints, 1):.2f} s")
PY
kill $bench 2>/dev/null; wait $bench 2>/dev/null
stop_server
