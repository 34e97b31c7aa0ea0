# Sourced by the scripts beside it: one server for a measurement, on port 6396 (RESP; redoguard's
# admin on 6397), pinned to CPU 0, with a throwaway work directory.
#   start_server NAME [TOML]  starts $bin (BIN, default target/release/redoguard) with TOML
#                             (printf %b: "\n" may be written as such) after the [server]
#                             table
#   start_redis NAME [ARGS…]  starts Debian's redis-server, durable as `bench resp` runs it
#                             (`appendonly yes`, `appendfsync always`, no RDB snapshots), with
#                             ARGS added to its command line
#   stop_server               stops either and removes the work directory
# Both set d (the work directory) and pid, and exit, with the server's log, if it does not
# answer PING within 120 s (redoguard preallocates large online logs before it listens).
bin=${BIN:-target/release/redoguard}

start_server() {
  d=${TMPDIR:-/tmp}/redoguard-$1; rm -rf "$d"; mkdir -p "$d/data"
  printf "[server]\ndata_dir = \"%s\"\nport = 6396\nadmin_port = 6397\n%b\n" "$d/data" "${2:-}" > "$d/config.toml"
  taskset -c 0 "$bin" server --config "$d/config.toml" > "$d/log" 2>&1 &
  pid=$!
  await_ping
}

start_redis() {
  d=${TMPDIR:-/tmp}/redoguard-$1; rm -rf "$d"; mkdir -p "$d/data"
  taskset -c 0 redis-server --port 6396 --dir "$d/data" --appendonly yes --appendfsync always \
    --save "" "${@:2}" > "$d/log" 2>&1 &
  pid=$!
  await_ping
}

await_ping() {
  for _ in $(seq 1200); do
    redis-cli -p 6396 ping 2>/dev/null | grep -q PONG && return
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  echo "the server did not start:"; cat "$d/log"; kill $pid 2>/dev/null; rm -rf "$d"; exit 1
}

stop_server() {
  kill $pid; wait $pid 2>/dev/null
  rm -rf "$d"
}
