# Sourced by the scripts beside it: one redoguard server for a measurement, on ports 6396 (RESP)
# and 6397 (admin), pinned to CPU 0, with a throwaway data directory.
#   start_server NAME [TOML]  starts $bin (BIN, default target/release/redoguard) with TOML
#                             (printf %b: "\n" may be written as such) after the [server]
#                             table; sets d (the work directory) and pid; exits, with the
#                             server's log, if it does not answer PING within 120 s (large
#                             online logs are preallocated before it listens)
#   stop_server               stops it and removes the work directory
bin=${BIN:-target/release/redoguard}

start_server() {
  d=${TMPDIR:-/tmp}/redoguard-$1; rm -rf "$d"; mkdir -p "$d/data"
  printf "[server]\ndata_dir = \"%s\"\nport = 6396\nadmin_port = 6397\n%b\n" "$d/data" "${2:-}" > "$d/config.toml"
  taskset -c 0 "$bin" server --config "$d/config.toml" > "$d/log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    redis-cli -p 6396 ping 2>/dev/null | grep -q PONG && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  redis-cli -p 6396 ping 2>/dev/null | grep -q PONG || {
    echo "the server did not start:"; cat "$d/log"; kill $pid 2>/dev/null; rm -rf "$d"; exit 1; }
}

stop_server() {
  kill $pid; wait $pid 2>/dev/null
  rm -rf "$d"
}
