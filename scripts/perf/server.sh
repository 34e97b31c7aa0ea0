# Sourced by the scripts beside it: one redoguard server for a measurement, on ports 6396 (RESP)
# and 6397 (admin), pinned to CPU 0, with a throwaway data directory.
#   start_server NAME [TOML]  starts $bin (BIN, default target/release/redoguard) with TOML
#                             (printf %b: "\n" may be written as such) after the [server]
#                             table; sets d (the work directory) and pid; exits, with the
#                             server's log, if it does not answer PING within 5 s
#   stop_server               stops it and removes the work directory
bin=${BIN:-target/release/redoguard}

start_server() {
  d=${TMPDIR:-/tmp}/redoguard-$1; rm -rf "$d"; mkdir -p "$d/data"
  printf "[server]\ndata_dir = \"%s\"\nport = 6396\nadmin_port = 6397\n%b\n" "$d/data" "${2:-}" > "$d/config.toml"
  taskset -c 0 "$bin" server --config "$d/config.toml" > "$d/log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do redis-cli -p 6396 ping >/dev/null 2>&1 && break; sleep 0.1; done
  kill -0 $pid 2>/dev/null || { echo "the server did not start:"; cat "$d/log"; rm -rf "$d"; exit 1; }
}

stop_server() {
  kill $pid; wait $pid 2>/dev/null
  rm -rf "$d"
}
