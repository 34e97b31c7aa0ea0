#!/bin/bash
# The durable SET rate in the 300 ms after each log switch, against the median: one server
# pinned to CPU 0, redis-benchmark -c 50 on CPU 1 (300 000 SETs to warm up past the first
# checkpoint, then 4 000 000 over 100 000 random keys), the rate sampled every 50 ms from the
# admin port's /status (`commands_processed`), the log sequence beside it. Run with SPREAD 0s
# and 2s alternately to compare `[redo] archive_spread_max` (docs/bench/README.md, "The
# archiver's copy: direct, and spread", 2026-12-01).
# usage: [BIN=path/to/redoguard] switch-dips.sh NAME SPREAD
# Uses ports 6396 and 6397; stops the server it started.
name=$1; spread=${2:-2s}
. "$(dirname "$0")/server.sh"
start_server switch-dips-$name "[redo]\narchive_spread_max = \"$spread\""
taskset -c 1 redis-benchmark -p 6396 -c 50 -n 300000 -r 100000 -t set -q > /dev/null 2>&1
taskset -c 1 timeout 120 redis-benchmark -p 6396 -c 50 -n 4000000 -r 100000 -t set -q > /dev/null 2>&1 &
bench=$!
sleep 1
taskset -c 1 python3 - "$name" <<'PY'
import json, statistics, sys, time, urllib.request
rows = []
for _ in range(600):
    started = time.time()
    status = json.load(urllib.request.urlopen("http://127.0.0.1:6397/status"))
    rows.append((started, status["server"]["commands_processed"], status["database"]["redo"]["durable_addr"]["seq"]))
    time.sleep(max(0, 0.05 - (time.time() - started)))
rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(rows, rows[1:])]
seqs = [b[2] for b in rows[1:]]
median = statistics.median(rates)
after = [sum(rates[i:i + 6]) / 6 / median for i in range(1, len(rates) - 6) if seqs[i] != seqs[i - 1]]
seconds = [sum(rates[i:i + 20]) / 20 for i in range(0, len(rates) - 19, 20)]
print(f"{sys.argv[1]}: median {median:.0f} SET/s; the 300 ms after each of {len(after)} log switches: "
      + " ".join(f"{x:.2f}" for x in after)
      + f"; slowest second {min(seconds) / statistics.median(seconds):.2f} of the median second")
PY
kill $bench 2>/dev/null; wait $bench 2>/dev/null
stop_server
